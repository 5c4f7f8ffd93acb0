//! A closed connection's late writes, byte for byte: what its peer wrote into the DMB
//! after the close (known bug 3: data it was still sending, and CDC messages that repeat
//! the abort). The zeroing watch compares the DMB with them: a DMB whose every nonzero
//! byte is the late byte written at that offset was zeroed by its owner, and the late
//! writes that left those bytes landed behind the zeroing.

use serde::{Deserialize, Serialize};

use crate::ism::cdc;

/// The late bytes of one closed DMB, the last written at each offset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LateWrites {
    /// The last late byte at each offset (0 where none was written), up to the end of
    /// the furthest late write.
    bytes: Vec<u8>,
    /// Which offsets a late write covered, one bit each.
    written: Vec<u64>,
}

/// What of the late writes a DMB still holds: their nonzero bytes that the owner's
/// zeroing did not wipe (what the next connection will find of them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// Some are in the CDC slot: a late CDC message's.
    pub cdc: bool,
    /// How many, the slot's among them.
    pub bytes: u64,
}

impl Kept {
    pub fn any(&self) -> bool {
        self.bytes > 0
    }
}

impl LateWrites {
    /// A move of `data` at `offset` landed. The fabric has checked it against the DMB's
    /// length, so the memory kept is at most the DMB's.
    pub fn record(&mut self, offset: u32, data: &[u8]) {
        let start = offset as usize;
        let end = start + data.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
            self.written.resize(end.div_ceil(64), 0);
        }
        self.bytes[start..end].copy_from_slice(data);
        for at in start..end {
            self.written[at / 64] |= 1 << (at % 64);
        }
    }

    /// `later`'s writes came after these: they win where both wrote.
    pub fn extend(&mut self, later: &LateWrites) {
        let end = later.bytes.len();
        let mut at = 0;
        while at < end {
            let start = at;
            while at < end && later.is_written(at) {
                at += 1;
            }
            if at > start {
                self.record(start as u32, &later.bytes[start..at]);
            } else {
                at += 1;
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn is_written(&self, at: usize) -> bool {
        self.written
            .get(at / 64)
            .is_some_and(|word| word & (1 << (at % 64)) != 0)
    }

    /// `found`, the DMB read from offset 0: each byte zero or the late byte written at
    /// its offset. `Ok` with what of the late writes is there; `Err` with the offset of
    /// the first byte that is neither (the owner has not zeroed the DMB, or not yet).
    pub fn compare(&self, found: &[u8]) -> Result<Kept, u64> {
        let mut kept = Kept::default();
        for (at, &byte) in found.iter().enumerate() {
            if byte == 0 {
                continue;
            }
            if !self.is_written(at) || self.bytes[at] != byte {
                return Err(at as u64);
            }
            kept.cdc |= at < cdc::LEN;
            kept.bytes += 1;
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_and_late_bytes_only_are_the_zeroing() {
        let mut late = LateWrites::default();
        late.record(64, &[1, 2, 0, 4]);
        let mut dmb = vec![0u8; 128];
        assert_eq!(late.compare(&dmb), Ok(Kept::default()));
        dmb[64..68].copy_from_slice(&[1, 2, 0, 4]);
        assert_eq!(
            late.compare(&dmb),
            Ok(Kept {
                cdc: false,
                bytes: 3
            })
        );
        // the zeroing ran over part of the write: the rest is still the late write's
        dmb[64] = 0;
        assert_eq!(late.compare(&dmb).map(|k| k.bytes), Ok(2));
        dmb[66] = 9;
        assert_eq!(
            late.compare(&dmb),
            Err(66),
            "not what the late write put there"
        );
        dmb[66] = 0;
        dmb[100] = 1;
        assert_eq!(late.compare(&dmb), Err(100), "never written late: old data");
    }

    #[test]
    fn extending_takes_every_run_of_written_bytes() {
        let mut later = LateWrites::default();
        later.record(3, &[1, 2]);
        later.record(10, &[3]);
        let mut late = LateWrites::default();
        late.record(0, &[9; 4]);
        late.extend(&later);
        let mut dmb = [0u8; 11];
        dmb[..5].copy_from_slice(&[9, 9, 9, 1, 2]);
        dmb[10] = 3;
        assert_eq!(late.compare(&dmb).map(|k| k.bytes), Ok(6));
        dmb[3] = 9;
        assert_eq!(late.compare(&dmb), Err(3), "overwritten by the later write");
        dmb[3] = 1;
        dmb[7] = 1;
        assert_eq!(late.compare(&dmb), Err(7), "between the runs");
    }

    #[test]
    fn the_last_write_at_an_offset_counts() {
        let mut late = LateWrites::default();
        late.record(0, &[5; cdc::LEN]);
        let mut later = LateWrites::default();
        later.record(0, &[6; 8]);
        late.extend(&later);
        let mut dmb = [5u8; cdc::LEN];
        assert_eq!(late.compare(&dmb), Err(0));
        dmb[..8].copy_from_slice(&[6; 8]);
        assert_eq!(
            late.compare(&dmb),
            Ok(Kept {
                cdc: true,
                bytes: 32
            })
        );
    }
}
