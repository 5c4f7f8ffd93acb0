//! The zeroing watch: after a connection closes, the observer asks whether the owner's
//! guest zeroes the DMB. Its looks read guest memory *outside* the fabric's lock (the
//! lock only takes views of the DMBs), within a budget per owner function and tick.

use crate::dmb::OpTime;
use crate::guest::{DmaView, Scan};

use super::events::{ZeroScan, ZeroWatch};
use super::{Fabric, Record};

/// Bytes of one function's DMBs the watcher reads per tick; the rest waits for the next.
pub const ZERO_SCAN_BUDGET: u64 = 1 << 20;

impl Fabric {
    /// One tick of the zeroing watch: looks at the closed DMBs the observer watches (what
    /// the looks find comes from the fabric's [`super::GuestReads`]), then hands the
    /// results to the observer under the lock. Returns how many DMBs are still watched:
    /// 0 means the watcher may sleep until the next close.
    pub fn poll_zeroing(&self) -> usize {
        let watch = self.events.zero_watch();
        if watch.is_empty() {
            return 0;
        }
        let results = self.reads.zero_looks(self, watch);
        // Under the lock, so that the tick's place among the moves is the trace's.
        let _st = self.lock();
        let _op = OpTime::begin();
        self.trace(|_| Record::ZeroTick {
            results: results.clone(),
        });
        self.events.zero_scanned(&results)
    }
}

/// The live looks: views of the watched DMBs taken under the lock (at most
/// `ZERO_SCAN_BUDGET` bytes to read per owner function), read after it.
pub(super) fn look_at(fabric: &Fabric, watch: Vec<ZeroWatch>) -> Vec<(u64, ZeroScan)> {
    let mut results = Vec::with_capacity(watch.len());
    let mut jobs = Vec::new();
    {
        let st = fabric.lock();
        let mut spent = vec![0u64; st.functions.len()];
        for w in watch {
            let Some(dmb) = st.dmbs.get(&w.token) else {
                results.push((w.token, ZeroScan::Unreadable));
                continue;
            };
            let len = u64::from(dmb.len);
            let cost = look_cost(&w, len);
            let spent = &mut spent[dmb.owner];
            if *spent + cost > ZERO_SCAN_BUDGET && *spent > 0 {
                continue;
            }
            *spent += cost;
            match st.functions[dmb.owner].dma.view(dmb.iova, len) {
                Ok(view) => jobs.push((w, view)),
                Err(_) => results.push((w.token, ZeroScan::Unreadable)),
            }
        }
    }
    results.extend(jobs.into_iter().map(|(w, view)| (w.token, look(&w, &view))));
    results
}

const PAGE: u64 = 4096;

/// One look at a watched DMB: the byte that was dirty last time (one page), and if it is
/// clean now, or there was none, the next `ZERO_SCAN_BUDGET` bytes from there. With
/// the closed connection's late writes known, the whole DMB is read and compared with
/// them instead: what it holds of them is read past, and what the look then finds is
/// whether the owner zeroed everything else.
fn look(w: &ZeroWatch, view: &DmaView) -> ZeroScan {
    let len = view.len();
    if let Some(late) = &w.late {
        // The late bytes may be anywhere, and a byte seen zero before may hold one now:
        // no resuming, the whole DMB (at most `MAX_DMB_LEN`) in one read.
        let mut found = vec![0u8; len as usize];
        if view.read(0, &mut found).is_err() {
            return ZeroScan::Unreadable;
        }
        return match late.compare(&found) {
            Ok(kept) if kept.any() => ZeroScan::ZeroButLate(kept),
            Ok(_) => ZeroScan::Zero,
            Err(at) => ZeroScan::Dirty(at),
        };
    }
    let mut from = w.scan_from;
    if let Some(at) = w.dirty_at {
        match view.scan(at, 1) {
            Ok(Scan::Dirty(_)) => return ZeroScan::Dirty(at),
            Ok(Scan::Zero) => from = at,
            Err(_) => return ZeroScan::Unreadable,
        }
    }
    let from = from.min(len);
    let n = (len - from).min(ZERO_SCAN_BUDGET);
    match view.scan(from, n) {
        Ok(Scan::Dirty(at)) => ZeroScan::Dirty(at),
        Ok(Scan::Zero) if from + n == len => ZeroScan::Zero,
        Ok(Scan::Zero) => ZeroScan::ZeroUpTo(from + n),
        Err(_) => ZeroScan::Unreadable,
    }
}

/// What `look` may read: the whole DMB when late writes are known, else a page for the
/// dirty byte, then up to the budget.
fn look_cost(w: &ZeroWatch, len: u64) -> u64 {
    if w.late.is_some() {
        return len;
    }
    let hint = if w.dirty_at.is_some() { PAGE } else { 0 };
    let from = w.dirty_at.unwrap_or(w.scan_from);
    hint + len.saturating_sub(from).clamp(1, ZERO_SCAN_BUDGET)
}

#[cfg(test)]
mod tests {
    use super::ZERO_SCAN_BUDGET;
    use std::sync::Arc;

    use super::{look, look_cost, PAGE};
    use crate::fabric::{Kept, LateWrites, ZeroScan, ZeroWatch};
    use crate::guest::{DmaSpace, DmaView};
    use crate::testkit::rig::Rig;
    use crate::testkit::{window, GuestRam};

    #[test]
    fn the_zeroing_watch_reads_the_owners_dmb() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        let watch = |token| ZeroWatch {
            token,
            scan_from: 0,
            dirty_at: None,
            late: None,
        };
        rig.sink
            .watch
            .lock()
            .unwrap()
            .extend([watch(token), watch(5 << 32)]);
        rig.fabric.poll_zeroing();
        rig.move_data(0, window(token, 8, false), b"x").unwrap();
        rig.fabric.poll_zeroing();
        let calls = rig.sink.calls();
        let polls: Vec<&String> = calls.iter().filter(|c| c.starts_with("zero")).collect();
        assert_eq!(polls[0], "zero 0x500000000: Unreadable", "unknown token");
        assert_eq!(polls[1], &format!("zero {token:#x}: Zero"));
        assert_eq!(polls[3], &format!("zero {token:#x}: Dirty(8)"));
    }

    fn view_of(ram: &GuestRam, len: u64) -> DmaView {
        let mut space = DmaSpace::new();
        space
            .map(0, len, Some(ram.dup_file().unwrap()), 0, true)
            .unwrap();
        space.view(0, len).unwrap()
    }

    #[test]
    fn a_look_reads_at_most_the_budget_and_resumes_where_it_stopped() {
        let len = 2 * ZERO_SCAN_BUDGET;
        let ram = GuestRam::new(len).unwrap();
        let view = view_of(&ram, len);
        let mut w = ZeroWatch {
            token: 1,
            scan_from: 0,
            dirty_at: None,
            late: None,
        };
        assert_eq!(look(&w, &view), ZeroScan::ZeroUpTo(ZERO_SCAN_BUDGET));
        w.scan_from = ZERO_SCAN_BUDGET;
        assert_eq!(look(&w, &view), ZeroScan::Zero);
        ram.write(len - 1, &[1]).unwrap();
        assert_eq!(look(&w, &view), ZeroScan::Dirty(len - 1));
    }

    /// fault/002 on 7.3.4 (CI, stop 59): the owner's zeroing and the old connection's
    /// late CDC message crossed, and the DMB was never all zero. Zero but for that
    /// message, byte for byte, is the zeroing; anything else in the slot is not.
    #[test]
    fn a_late_cdc_message_behind_the_zeroing_is_read_past() {
        let len = 65536;
        let ram = GuestRam::new(len).unwrap();
        let view = view_of(&ram, len);
        let msg = [
            0xfe, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0, 0, 0x1a, 0x50, 0, 0, 0, 0, 0, 0, 0, 0, 0x80,
            0x20, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let mut late = LateWrites::default();
        late.record(0, &msg);
        ram.write(0, &msg).unwrap();
        ram.write(4096, &[7; 100]).unwrap();
        let mut w = ZeroWatch {
            token: 1,
            scan_from: 0,
            dirty_at: Some(0),
            late: Some(Arc::new(late)),
        };
        assert_eq!(
            look(&w, &view),
            ZeroScan::Dirty(4096),
            "the old data is still there"
        );
        ram.write(4096, &[0; 100]).unwrap();
        let cdc_only = Kept {
            cdc: true,
            bytes: 6,
        };
        assert_eq!(look(&w, &view), ZeroScan::ZeroButLate(cdc_only));
        // Another message in the slot (a different cursor): not the late one.
        ram.write(12, &[0x1b]).unwrap();
        assert_eq!(look(&w, &view), ZeroScan::Dirty(12));
        // No late write known: the slot is as dirty as any byte.
        ram.write(12, &[0x1a]).unwrap();
        let late = w.late.take();
        assert_eq!(look(&w, &view), ZeroScan::Dirty(0));
        // The slot zeroed too: plain zero, whatever the watch expected there.
        ram.write(0, &[0; 32]).unwrap();
        w.late = late;
        assert_eq!(look(&w, &view), ZeroScan::Zero);
        assert_eq!(look_cost(&w, len), len);
    }

    /// fault/010 on 6.12.117 (CI, stop 60): one of the sender's late 4 KiB chunks crossed
    /// the owner's zeroing, and every chunk after it added to a DMB that was never all
    /// zero again. Zero but for the late chunks and CDC messages is the zeroing, with the
    /// late data it left counted.
    #[test]
    fn late_data_behind_the_zeroing_is_read_past_and_counted() {
        let len = 65536;
        let ram = GuestRam::new(len).unwrap();
        let view = view_of(&ram, len);
        let mut late = LateWrites::default();
        let chunk: Vec<u8> = (0..4096u32).map(|i| (i % 255 + 1) as u8).collect();
        late.record(8192, &chunk);
        late.record(12288, &chunk);
        // The zeroing overtook the first chunk half-way: its first half was wiped.
        ram.write(8192 + 2048, &chunk[2048..]).unwrap();
        ram.write(12288, &chunk).unwrap();
        ram.write(40000, &[3]).unwrap();
        let w = ZeroWatch {
            token: 1,
            scan_from: 0,
            dirty_at: None,
            late: Some(Arc::new(late)),
        };
        assert_eq!(look(&w, &view), ZeroScan::Dirty(40000), "old data");
        ram.write(40000, &[0]).unwrap();
        assert_eq!(
            look(&w, &view),
            ZeroScan::ZeroButLate(Kept {
                cdc: false,
                bytes: 2048 + 4096
            })
        );
        // A byte of a chunk that is not the chunk's: not a late write.
        ram.write(12288 + 5, &[0xff]).unwrap();
        assert_eq!(look(&w, &view), ZeroScan::Dirty(12288 + 5));
    }

    #[test]
    fn a_byte_left_dirty_costs_one_page_per_look() {
        let len = 2 * ZERO_SCAN_BUDGET;
        let ram = GuestRam::new(len).unwrap();
        let view = view_of(&ram, len);
        ram.write(len - 1, &[1]).unwrap();
        ram.write(0, &[1]).unwrap();
        let w = ZeroWatch {
            token: 1,
            scan_from: len - 1,
            dirty_at: Some(len - 1),
            late: None,
        };
        assert_eq!(look_cost(&w, len), PAGE + 1);
        assert_eq!(look(&w, &view), ZeroScan::Dirty(len - 1));
        // Bytes before `scan_from` were seen zero before and are not read again: the
        // guest re-dirtying byte 0 after that is not seen (docs/observer.md).
        ram.write(len - 1, &[0]).unwrap();
        assert_eq!(look(&w, &view), ZeroScan::Zero);
    }
}
