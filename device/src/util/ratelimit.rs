//! Rate limiting for what a guest can cause at will: log lines (failed commands, rejected
//! moves, lost signals and events) must not flood the host's log, and work done on its
//! behalf (reads of guest memory, events queued at a peer) must have a budget.
//!
//! Every line a guest can cause goes through `guest_log!`, whatever its module: one
//! budget per function for all of them ([`GuestLines`]). Two limits serve every caller:
//! [`RateLimit`], a count per fixed window with the rest counted (log lines here, the
//! observer's event stream per function), and [`Budget`], a token bucket (work done on a
//! guest's behalf).

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Lines allowed per window; the rest are counted and reported once per window.
pub const LINES_PER_WINDOW: u32 = 20;
pub const WINDOW: Duration = Duration::from_secs(1);

/// Logs a line that a guest caused, within its function's share of [`guest_lines`]:
/// `guest_log!(Warn, name, gid, "format", args...)` logs "name (gid 0x...): ..." at
/// `log::Level::Warn`. A line whose level is off costs no budget, and the arguments are
/// only formatted for a line that is logged.
macro_rules! guest_log {
    ($level:ident, $function:expr, $gid:expr, $($arg:tt)+) => {{
        let function: &str = &$function;
        let gid: u64 = $gid;
        if log::log_enabled!(log::Level::$level)
            && $crate::util::ratelimit::guest_lines().allow(function, gid, std::time::Instant::now())
        {
            log::log!(
                log::Level::$level,
                "{function} (gid {gid:#018x}): {}",
                format_args!($($arg)+)
            );
        }
    }};
}
pub(crate) use guest_log;

/// The lines each function's guest may cause: one [`RateLimit`] per function, keyed by
/// the function's GID, shared by every call site, so that one guest gets
/// `LINES_PER_WINDOW` lines a second in all (and one that counts the rest), whichever
/// paths it floods, and no guest can use up another's.
pub struct GuestLines {
    /// The limits' clock starts here.
    epoch: Instant,
    by_gid: Mutex<BTreeMap<u64, RateLimit>>,
}

impl Default for GuestLines {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            by_gid: Mutex::default(),
        }
    }
}

/// Functions kept apart; beyond, they share one budget. The keys are the functions' own
/// GIDs, never a value a guest wrote, so an emulator has as many as it has functions.
const MAX_FUNCTIONS: usize = 1024;
const SHARED: u64 = u64::MAX;

impl GuestLines {
    /// Whether one more line of function `function` (`gid`) may be logged now. When a
    /// window ended with lines not logged, a line says how many first.
    pub fn allow(&self, function: &str, gid: u64, now: Instant) -> bool {
        let mut not_logged = 0;
        let allowed = {
            let mut by_gid = self.by_gid.lock().unwrap_or_else(|p| p.into_inner());
            let key = if by_gid.len() < MAX_FUNCTIONS || by_gid.contains_key(&gid) {
                gid
            } else {
                SHARED
            };
            let now_us = u64::try_from(now.saturating_duration_since(self.epoch).as_micros())
                .unwrap_or(u64::MAX);
            let limit = by_gid
                .entry(key)
                .or_insert_with(|| RateLimit::new(u64::from(LINES_PER_WINDOW), WINDOW));
            limit.allow(now_us, |n| not_logged = n)
        };
        // Logged after the map's lock is released: the logger never waits, but it takes
        // locks of its own.
        if not_logged > 0 {
            log::warn!(
                "{function} (gid {gid:#018x}): {not_logged} more lines not logged (at most {LINES_PER_WINDOW} a second per function)"
            );
        }
        allowed
    }
}

/// The process's [`GuestLines`]: the log is the process's, and so is its budget.
pub fn guest_lines() -> &'static GuestLines {
    static LINES: OnceLock<GuestLines> = OnceLock::new();
    LINES.get_or_init(GuestLines::default)
}

/// At most `limit` a window, the rest refused and counted. Time is a microsecond count
/// the caller chooses (the observer's is event time, so that a replay refuses what the
/// live run refused); the first window starts at the first call.
#[derive(Debug)]
pub struct RateLimit {
    limit: u64,
    window_us: u64,
    start_us: Option<u64>,
    passed: u64,
    refused: u64,
}

impl RateLimit {
    pub fn new(limit: u64, window: Duration) -> Self {
        Self {
            limit,
            window_us: u64::try_from(window.as_micros()).unwrap_or(u64::MAX),
            start_us: None,
            passed: 0,
            refused: 0,
        }
    }

    /// Whether one more may pass at `now_us`. When a window ended with some refused,
    /// `report(n)` is called first, so that the caller can say how many.
    pub fn allow(&mut self, now_us: u64, report: impl FnOnce(u64)) -> bool {
        let start = *self.start_us.get_or_insert(now_us);
        if now_us.saturating_sub(start) >= self.window_us {
            self.start_us = Some(now_us);
            self.passed = 0;
            let refused = self.take_refused();
            if refused > 0 {
                report(refused);
            }
        }
        if self.passed >= self.limit {
            self.refused += 1;
            return false;
        }
        self.passed += 1;
        true
    }

    /// The count refused so far in this window, to report before the window ends (it
    /// starts again from 0).
    pub fn take_refused(&mut self) -> u64 {
        std::mem::take(&mut self.refused)
    }
}

/// A token bucket: `rate` units per second, at most `burst` saved up.
#[derive(Debug)]
pub struct Budget {
    rate: u64,
    burst: u64,
    available: u64,
    last: Instant,
    /// Earned since `last` but less than a unit, in units × nanoseconds: a budget asked
    /// more often than it earns a unit must still earn `rate` a second.
    carry: u128,
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

impl Budget {
    /// A full bucket.
    pub fn new(rate: u64, burst: u64) -> Self {
        Self {
            rate,
            burst,
            available: burst,
            last: Instant::now(),
            carry: 0,
        }
    }

    /// Takes `n` units if there are that many; false (and nothing taken) if not.
    pub fn take(&mut self, now: Instant, n: u64) -> bool {
        let elapsed = now.saturating_duration_since(self.last);
        self.last = self.last.max(now);
        let earned = elapsed.as_nanos() * u128::from(self.rate) + self.carry;
        let units = u64::try_from(earned / NANOS_PER_SEC).unwrap_or(u64::MAX);
        self.available = self.available.saturating_add(units).min(self.burst);
        // A full bucket saves nothing more, not even a fraction.
        self.carry = if self.available == self.burst {
            0
        } else {
            earned % NANOS_PER_SEC
        };
        if self.available >= n {
            self.available -= n;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_allows_its_burst_then_its_rate() {
        let mut budget = Budget::new(1000, 10);
        let t0 = budget.last;
        assert!(budget.take(t0, 10));
        assert!(!budget.take(t0, 1), "burst spent");
        assert!(budget.take(t0 + Duration::from_millis(5), 5));
        assert!(!budget.take(t0 + Duration::from_millis(5), 1));
        assert!(budget.take(t0 + Duration::from_secs(60), 10), "refilled");
        assert!(
            !budget.take(t0 + Duration::from_secs(60), 1),
            "to the burst only"
        );
    }

    #[test]
    fn a_budget_asked_more_often_than_it_earns_a_unit_still_earns_its_rate() {
        let mut budget = Budget::new(3, 3);
        let t0 = budget.last;
        assert!(budget.take(t0, 3));
        // Half a second earns 1.5 units: the half must count towards the next.
        let mut taken = 0;
        for i in 1..=20 {
            let now = t0 + Duration::from_millis(500) * i;
            while budget.take(now, 1) {
                taken += 1;
            }
        }
        assert_eq!(taken, 30, "3 a second for 10 s");
    }

    #[test]
    fn each_function_has_its_own_share_of_the_guest_lines() {
        let lines = GuestLines::default();
        let t0 = Instant::now();
        let allowed = |gid| (0..25).filter(|_| lines.allow("f", gid, t0)).count();
        assert_eq!(allowed(1), LINES_PER_WINDOW as usize);
        assert_eq!(allowed(2), LINES_PER_WINDOW as usize, "not 1's");
        assert_eq!(allowed(1), 0, "1's share is spent");
        assert!(lines.allow("f", 1, t0 + 2 * WINDOW), "a later window");
    }

    #[test]
    fn lines_beyond_the_budget_are_suppressed_and_counted() {
        let mut rl = RateLimit::new(u64::from(LINES_PER_WINDOW), WINDOW);
        let t0 = 7_000_000;
        let allowed = (0..25).filter(|_| rl.allow(t0, |_| {})).count();
        assert_eq!(allowed, LINES_PER_WINDOW as usize);
        let mut reported = 0;
        assert!(!rl.allow(t0 + 999_999, |n| reported = n));
        assert_eq!(reported, 0, "the same window");
        assert!(rl.allow(t0 + 1_000_000, |n| reported = n));
        assert_eq!(reported, 6);
        assert!(rl.allow(t0 + 1_000_000, |_| {}));
        assert_eq!(rl.take_refused(), 0);
    }
}
