//! Writers for the two structures the device owns in guest memory: the status block
//! (SBA) and the event queue (IEQ). The guest only reads them and clears bits.
//!
//! ```text
//!  SBA (4 KiB)   0: flags  0x80 = s (summary), 0x40 = e (event pending)
//!                4: dmb_bits[1920], MSB first: index n -> byte 4 + n/8, mask 0x80 >> n%8
//!              256: dmbe_mask[1920], u16 big-endian each
//!  IEQ (512 B)   0: idx u64 (last written entry + 1) | 8: ieq_len | 16: entry_len
//!               32: 15 entries of { type u32, code u32, tok u64, time u64, info u64 }
//! ```

use zerocopy::big_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::guest::{DmaError, DmaSpace};

const SBA_FLAGS: u64 = 0;
const SBA_SUMMARY: u8 = 0x80;
const SBA_EVENT: u8 = 0x40;
const SBA_DMB_BITS: u64 = 4;
const SBA_DMBE_MASK: u64 = 256;
pub const SBA_LEN: u64 = 4096;

pub const IEQ_HEADER_LEN: u64 = 32;
pub const IEQ_ENTRY_LEN: u64 = size_of::<IeqEntry>() as u64;
/// The driver walks a fixed array of 15 entries, whatever length was registered.
pub const IEQ_ENTRIES: u64 = 15;
pub const IEQ_LEN: u64 = IEQ_HEADER_LEN + IEQ_ENTRIES * IEQ_ENTRY_LEN;

/// `base + offset`, or an error when a guest-chosen base makes it wrap.
fn at(base: u64, offset: u64) -> Result<u64, DmaError> {
    base.checked_add(offset).ok_or(DmaError::Unmapped {
        iova: base,
        len: offset,
    })
}

/// The status block of one function.
#[derive(Clone, Copy, Debug)]
pub struct Sba {
    pub iova: u64,
}

impl Sba {
    /// Marks DMB `sba_idx` (element `dmbe`) as written and sets the summary bit. Bits are
    /// ORed atomically: the guest clears others in the same words concurrently.
    pub fn signal_dmb(&self, mem: &DmaSpace, sba_idx: u32, dmbe: u8) -> Result<(), DmaError> {
        let idx = u64::from(sba_idx);
        mem.fetch_or_u8(at(self.iova, SBA_DMB_BITS + idx / 8)?, 0x80 >> (idx % 8))?;
        let mask = 0x8000u16 >> (dmbe % 16);
        let mask_at = at(self.iova, SBA_DMBE_MASK + 2 * idx)?;
        let [hi, lo] = mask.to_be_bytes();
        if hi != 0 {
            mem.fetch_or_u8(mask_at, hi)?;
        } else {
            mem.fetch_or_u8(at(mask_at, 1)?, lo)?;
        }
        mem.fetch_or_u8(self.iova + SBA_FLAGS, SBA_SUMMARY)?;
        Ok(())
    }

    /// Tells the guest that the IEQ has new entries.
    pub fn set_event_pending(&self, mem: &DmaSpace) -> Result<(), DmaError> {
        mem.fetch_or_u8(self.iova + SBA_FLAGS, SBA_EVENT)
            .map(|_| ())
    }
}

/// One IEQ entry as the guest reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct IeqEntry {
    pub kind: U32,
    pub code: U32,
    pub tok: U64,
    pub time: U64,
    pub info: U64,
}

/// An event for the IEQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventType,
    pub code: u32,
    pub tok: u64,
    pub time: u64,
    pub info: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum EventType {
    Dmb = 0,
    /// A GID (peer device) event: the guest terminates every link group with `tok`.
    Gid = 1,
    /// A software event sent by a peer with SIGNAL_IEQ.
    Software = 2,
}

impl std::fmt::Display for Event {
    /// As the log prints identifiers everywhere else: GIDs with 16 hex digits, tokens
    /// in hex (the Debug form printed them in decimal).
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            EventType::Gid => {
                let what = match self.code {
                    gid_code::GID_DISABLED => " (GID disabled)",
                    _ => "",
                };
                write!(
                    out,
                    "GID event code {}{what} for GID {:#018x}",
                    self.code, self.tok
                )
            }
            EventType::Dmb => write!(
                out,
                "DMB event code {} for token {:#x} (info {:#x})",
                self.code, self.tok, self.info
            ),
            EventType::Software => write!(
                out,
                "software event code {:#x} from GID {:#018x} (info {:#x})",
                self.code, self.tok, self.info
            ),
        }
    }
}

/// GID event codes.
pub mod gid_code {
    /// The peer's GID went away (its function was reset or its guest disconnected).
    pub const GID_DISABLED: u32 = 7;
}

/// The event queue of one function and the device's write position in it.
#[derive(Clone, Copy, Debug)]
pub struct Ieq {
    pub iova: u64,
    next: u64,
}

impl Ieq {
    /// Registers a queue the guest has zeroed; records the layout in its header.
    pub fn register(mem: &DmaSpace, iova: u64) -> Result<Self, DmaError> {
        mem.write_u64_be(at(iova, 8)?, IEQ_LEN)?;
        mem.write_u64_be(at(iova, 16)?, IEQ_ENTRY_LEN)?;
        Ok(Self { iova, next: 0 })
    }

    /// Appends `event`: write the entry, then publish it by storing `idx = entry + 1`
    /// (1..=15, never 0). The guest consumes while `last + 1 != idx`.
    pub fn push(&mut self, mem: &DmaSpace, event: &Event) -> Result<(), DmaError> {
        let entry = IeqEntry {
            kind: U32::new(event.kind as u32),
            code: event.code.into(),
            tok: event.tok.into(),
            time: event.time.into(),
            info: event.info.into(),
        };
        let slot = at(self.iova, IEQ_HEADER_LEN + self.next * IEQ_ENTRY_LEN)?;
        mem.write(slot, entry.as_bytes())?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        mem.write_u64_be(self.iova, self.next + 1)?;
        self.next = (self.next + 1) % IEQ_ENTRIES;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::GuestRam;

    const BASE: u64 = 0x1_0000_0000;

    fn mem(ram: &GuestRam) -> DmaSpace {
        let mut mem = DmaSpace::new();
        mem.map(BASE, 8192, Some(ram.dup_file().unwrap()), 0, true)
            .unwrap();
        mem
    }

    #[test]
    fn dmb_signal_sets_bit_mask_and_summary() {
        let ram = GuestRam::new(8192).unwrap();
        let mem = mem(&ram);
        Sba { iova: BASE }.signal_dmb(&mem, 33, 0).unwrap();
        assert_eq!(ram.read(0, 1).unwrap(), vec![0x80]);
        assert_eq!(
            ram.read(4 + 4, 1).unwrap(),
            vec![0x40],
            "index 33 is byte 8, second bit"
        );
        assert_eq!(ram.read(256 + 66, 2).unwrap(), vec![0x80, 0x00]);
    }

    #[test]
    fn an_ieq_at_the_top_of_the_iova_space_is_an_error_not_a_wrap() {
        let ram = GuestRam::new(8192).unwrap();
        let mut mem = DmaSpace::new();
        mem.map(0, 8192, Some(ram.dup_file().unwrap()), 0, true)
            .unwrap();
        let err = Ieq::register(&mem, u64::MAX - 7);
        assert!(matches!(err, Err(DmaError::Unmapped { .. })), "{err:?}");
        assert_eq!(
            ram.read(0, 8).unwrap(),
            vec![0; 8],
            "nothing written at IOVA 0"
        );
    }

    #[test]
    fn ieq_index_wraps_after_15_entries() {
        let ram = GuestRam::new(8192).unwrap();
        let mem = mem(&ram);
        let mut ieq = Ieq::register(&mem, BASE).unwrap();
        let ev = |n| Event {
            kind: EventType::Software,
            code: n,
            tok: 1,
            time: 0,
            info: 0,
        };
        let mut seen = Vec::new();
        for n in 0..17 {
            ieq.push(&mem, &ev(n)).unwrap();
            let mut idx = [0; 8];
            mem.read(BASE, &mut idx).unwrap();
            seen.push(u64::from_be_bytes(idx));
        }
        assert_eq!(seen[0], 1);
        assert_eq!(seen[14], 15);
        assert_eq!(seen[15], 1, "16th entry lands in slot 0 again");
        let slot1_code = u32::from_be_bytes(ram.read(32 + 32 + 4, 4).unwrap().try_into().unwrap());
        assert_eq!(slot1_code, 16);
    }

    #[test]
    fn events_print_their_gids_and_tokens_in_hex() {
        let gid = Event {
            kind: EventType::Gid,
            code: gid_code::GID_DISABLED,
            tok: 0x1234_0049_534d_0002,
            time: 1,
            info: 0,
        };
        assert_eq!(
            gid.to_string(),
            "GID event code 7 (GID disabled) for GID 0x12340049534d0002"
        );
        let dmb = Event {
            kind: EventType::Dmb,
            tok: 0x1_0000_0000,
            info: 0x20,
            ..gid
        };
        assert_eq!(
            dmb.to_string(),
            "DMB event code 7 for token 0x100000000 (info 0x20)"
        );
    }
}
