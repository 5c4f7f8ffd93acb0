//! The zeroing watch's side of the DMB lives: which closed DMBs to look at next, and what
//! the looks found (zeroed after the close, or given up on after `ZERO_WATCH_LIMIT`).

use super::{since, DmbLife, Tracker};
use crate::fabric::{Kept, ZeroScan, ZeroWatch};
use crate::observer::summary::ConnState;
use crate::observer::{ObservedEvent, What, ZERO_WATCH_LIMIT};
use crate::util::ratelimit::guest_log;

impl Tracker {
    fn watched(life: &DmbLife) -> bool {
        life.summary.registered && life.summary.state == ConnState::Closed && !life.watch_done
    }

    /// The DMBs whose connection closed and whose zeroing has not been seen yet, the
    /// longest-unlooked-at first (so a budget that stops early starves nobody).
    pub fn zero_watch(&self) -> Vec<ZeroWatch> {
        let mut watch: Vec<(u64, ZeroWatch)> = self
            .dmbs
            .values()
            .filter(|l| Self::watched(l))
            .map(|l| {
                let w = ZeroWatch {
                    token: l.summary.token,
                    scan_from: l.scan_from,
                    dirty_at: l.dirty_at,
                    late: l.late.clone(),
                };
                (l.looked_at, w)
            })
            .collect();
        watch.sort_by_key(|(looked_at, _)| *looked_at);
        watch.into_iter().map(|(_, w)| w).collect()
    }

    /// The watch has stopped: what it kept of the late writes, claimed or not, goes.
    fn forget_late_writes(life: &mut DmbLife) {
        life.late = None;
        if let Some(p) = life.pending.as_mut() {
            p.writes = Default::default();
        }
    }

    /// The owner's zeroing of a closed DMB, seen now (by the watch, or by the read before
    /// a late write): the delay since the close is an upper bound. `kept`: the watch
    /// found the DMB zero but for bytes the old connection's peer wrote since the close,
    /// which therefore landed behind the zeroing (the read before them caught the
    /// owner's zeroing under way): one more late write after the zeroing.
    pub(super) fn zeroing_seen(life: &mut DmbLife, kept: Kept) -> ObservedEvent {
        let delay_ms = since(life.closed_us).as_secs_f64() * 1e3;
        if let Some(record) = life.current() {
            record.zeroed_after_ms = Some(delay_ms);
        }
        life.watch_done = true;
        Self::forget_late_writes(life);
        let s = &mut life.summary;
        s.zeroed_after_close += 1;
        s.zero_delays_ms.record(delay_ms);
        s.late_writes_after_zeroed += u64::from(kept.any());
        if kept.any() {
            guest_log!(
                Warn,
                s.function,
                s.gid,
                "DMB {:#x}: the peer of closed connection {} wrote into it behind the owner's zeroing ({} nonzero bytes left{})",
                s.token,
                s.connections,
                kept.bytes,
                if kept.cdc { ", its CDC message's among them" } else { "" }
            );
        }
        s.event(What::DmbZeroed {
            conn: s.connections,
            delay_ms,
            late_cdc_kept: kept.cdc,
            late_bytes_kept: kept.bytes,
        })
    }

    /// Records what the watcher found. Returns the events and how many DMBs are still
    /// watched. A DMB still not zero `ZERO_WATCH_LIMIT` after its close is given up on,
    /// looked at this tick or not.
    pub fn zero_scanned(&mut self, results: &[(u64, ZeroScan)]) -> (Vec<ObservedEvent>, usize) {
        self.tick += 1;
        let mut events = Vec::new();
        for &(token, scan) in results {
            let Some(life) = self.dmbs.get_mut(&token) else {
                continue;
            };
            if !Self::watched(life) {
                continue;
            }
            life.looked_at = self.tick;
            match scan {
                ZeroScan::Zero => events.push(Self::zeroing_seen(life, Kept::default())),
                ZeroScan::ZeroButLate(kept) => events.push(Self::zeroing_seen(life, kept)),
                ZeroScan::Dirty(at) => {
                    life.scan_from = at;
                    life.dirty_at = Some(at);
                }
                ZeroScan::ZeroUpTo(at) => {
                    life.scan_from = at;
                    life.dirty_at = None;
                }
                ZeroScan::Unreadable => {}
            }
        }
        let mut pending = 0;
        for life in self.dmbs.values_mut().filter(|l| Self::watched(l)) {
            let waited = since(life.closed_us);
            if waited < ZERO_WATCH_LIMIT {
                pending += 1;
                continue;
            }
            life.watch_done = true;
            Self::forget_late_writes(life);
            if let Some(record) = life.current() {
                record.not_zeroed = true;
            }
            let s = &mut life.summary;
            s.not_zeroed += 1;
            events.push(s.event(What::DmbNotZeroed {
                conn: s.connections,
                watched_ms: waited.as_secs_f64() * 1e3,
            }));
        }
        (events, pending)
    }
}
