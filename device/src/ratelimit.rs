//! Rate limiting for log lines a guest can cause at will (failed commands, rejected
//! moves): a misbehaving guest must not be able to flood the host's log.

use std::time::{Duration, Instant};

/// Lines allowed per window; the rest are counted and reported once per window.
pub const LINES_PER_WINDOW: u32 = 20;
pub const WINDOW: Duration = Duration::from_secs(1);

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

#[cfg(test)]
mod tests {
    use super::*;

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
