//! Rate limiting for what a guest can cause at will: log lines (failed commands, rejected
//! moves, lost signals and events) must not flood the host's log, and work done on its
//! behalf (reads of guest memory, events queued at a peer) must have a budget.
//!
//! Every line a guest can cause goes through `guest_log!`, whatever its module: one
//! budget per function for all of them ([`GuestLines`]).

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
#[derive(Default)]
pub struct GuestLines {
    by_gid: Mutex<BTreeMap<u64, RateLimit>>,
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
            let limit = by_gid.entry(key).or_default();
            limit.allow(now, |n| not_logged = n)
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

#[derive(Debug)]
pub struct RateLimit {
    window_start: Instant,
    in_window: u32,
    suppressed: u64,
}

impl Default for RateLimit {
    fn default() -> Self {
        Self {
            window_start: Instant::now(),
            in_window: 0,
            suppressed: 0,
        }
    }
}

impl RateLimit {
    /// Whether the next line may be logged. When a window ends with suppressed lines,
    /// `report(n)` is called first so the log says how many were dropped.
    pub fn allow(&mut self, now: Instant, report: impl FnOnce(u64)) -> bool {
        if now.duration_since(self.window_start) >= WINDOW {
            if self.suppressed > 0 {
                report(self.suppressed);
            }
            self.window_start = now;
            self.in_window = 0;
            self.suppressed = 0;
        }
        self.in_window += 1;
        if self.in_window <= LINES_PER_WINDOW {
            true
        } else {
            self.suppressed += 1;
            false
        }
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
        let mut rl = RateLimit::default();
        let t0 = rl.window_start;
        let allowed = (0..25).filter(|_| rl.allow(t0, |_| {})).count();
        assert_eq!(allowed, LINES_PER_WINDOW as usize);
        let mut reported = 0;
        assert!(rl.allow(t0 + WINDOW, |n| reported = n));
        assert_eq!(reported, 5);
    }
}
