//! What the fuzz targets share: a fabric of a few functions on small guest RAMs, each
//! driven through its own `IsmBackend` as QEMU would, and the invariants every target
//! checks after every operation (`World::check`).
//!
//! The invariants are stated from the guest's side, not read back from the device:
//! - guest memory changes only where the operation may write: a move's own bytes in the
//!   target DMB, the status block (SBA) and event queue (IEQ) a function registered, and
//!   nothing at all for the other operations;
//! - a move changes a function's memory only if the sender owns the DMB or is the peer it
//!   was registered for;
//! - the counters the fabric keeps agree with what the target did and saw accepted.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use ism_emu::backend::IsmBackend;
use ism_emu::fabric::EventSink;
use ism_emu::fabric::Fabric;
use ism_emu::ism::status::{IEQ_LEN, SBA_LEN};
use ism_emu::ism::MoveAddress;
use ism_emu::pci::{Bar, Region};
use ism_emu::testkit::GuestRam;
use ism_emu::transport::{Device, Unmap};
use vfio_user::DmaMapFlags;

pub mod seeds;
pub mod wire;

/// Where each guest maps its RAM, as the rig of the device's tests does.
pub const BASE: u64 = 0x1_0000_0000;
/// Small RAM per function: every operation compares all of it, so it sets the speed.
pub const RAM_PAGES: u64 = 16;
pub const PAGE: u64 = 4096;
pub const RAM_SIZE: u64 = RAM_PAGES * PAGE;
/// The probe sequence's layout: SBA in page 0, IEQ in page 1, DMBs from page 2 on.
pub const SBA_AT: u64 = 0;
pub const IEQ_AT: u64 = PAGE;
pub const DMB_AT: u64 = 2 * PAGE;

pub const CHID: u16 = 0x1234;
pub const COMMAND_REGION: u32 = Bar::Command.index();
pub const MOVE_REGION: u32 = Bar::Move.index();

pub fn gid(index: usize) -> u64 {
    ism_emu::default_gid(CHID, index)
}

/// One `DMA_MAP` the target sent and the backend accepted.
#[derive(Clone, Copy, Debug)]
struct Mapping {
    iova: u64,
    size: u64,
    file_offset: u64,
}

/// One function: its guest RAM, what the guest did with it, and its backend.
pub struct Guest {
    pub ram: GuestRam,
    /// The RAM's file, read into `World::scratch` after every operation (no allocation,
    /// so no fresh pages to fault in: that was most of the time per input).
    file: File,
    pub backend: IsmBackend,
    /// The RAM as it was after the last operation.
    shadow: Vec<u8>,
    /// Every mapping accepted since the last unmap-all, reset or disconnect. Partial
    /// unmaps and replaced mappings are kept: a superset of what the device has mapped,
    /// so the allowed set can only be too large, never too small.
    mappings: Vec<Mapping>,
    /// With `FUZZ_CHECK=input`: the RAM offsets the operations since the last memory
    /// check were allowed to change.
    pending: Vec<Range<u64>>,
}

/// When the guests' memory is compared with its copy (`FUZZ_CHECK`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MemoryCheck {
    /// After every operation, against what that operation may write (the default).
    EveryOperation,
    /// Once, when the input ends, against what any of its operations may write: a write
    /// outside every operation's allowed set is still found, one that lands where another
    /// operation of the input may write is not. Several times the inputs a second, for
    /// long campaigns (docs/fuzzing.md).
    EndOfInput,
}

impl MemoryCheck {
    /// `FUZZ_CHECK=input` selects `EndOfInput`; unset or `op`, `EveryOperation`.
    pub fn from_env() -> Self {
        static MODE: std::sync::OnceLock<MemoryCheck> = std::sync::OnceLock::new();
        *MODE.get_or_init(|| match std::env::var("FUZZ_CHECK").as_deref() {
            Ok("input") => MemoryCheck::EndOfInput,
            Ok("op") | Err(_) => MemoryCheck::EveryOperation,
            Ok(other) => panic!("FUZZ_CHECK={other}: op or input"),
        })
    }
}

/// What one operation may legitimately change, per function: IOVA ranges, turned into
/// RAM offsets through that function's mappings.
#[derive(Default, Debug)]
pub struct Allowed {
    ranges: Vec<Vec<Range<u64>>>,
}

impl Allowed {
    pub fn new(n: usize) -> Self {
        Self {
            ranges: vec![Vec::new(); n],
        }
    }

    pub fn iova(&mut self, function: usize, start: u64, len: u64) {
        let end = start.saturating_add(len);
        self.ranges[function].push(start..end);
    }
}

/// The counters the target keeps itself, to compare with the fabric's.
#[derive(Default, Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    pub commands: u64,
    pub command_errors: u64,
    pub moves_out: u64,
    pub moves_rejected: u64,
    pub bytes_out: u64,
}

pub struct World {
    pub fabric: Arc<Fabric>,
    pub guests: Vec<Guest>,
    pub expect: Vec<Expect>,
    scratch: Vec<u8>,
    memory_check: MemoryCheck,
}

impl World {
    /// `n` functions on one fabric, reporting to `sink`, none set up yet.
    pub fn new(n: usize, sink: Arc<dyn EventSink>) -> Self {
        let functions = (0..n).map(|i| (format!("ism{i}"), gid(i))).collect();
        let fabric = Arc::new(Fabric::new(CHID, functions, sink));
        let guests = (0..n)
            .map(|id| {
                let ram = GuestRam::new(RAM_SIZE).expect("memfd for guest RAM");
                let file = ram.dup_file().expect("dup guest RAM fd");
                Guest {
                    ram,
                    file,
                    backend: IsmBackend::new(Arc::clone(&fabric), id),
                    shadow: ram_buffer(),
                    mappings: Vec::new(),
                    pending: Vec::new(),
                }
            })
            .collect();
        Self {
            fabric,
            guests,
            expect: vec![Expect::default(); n],
            scratch: ram_buffer(),
            memory_check: MemoryCheck::from_env(),
        }
    }

    /// `n` functions whose guests mapped all their RAM at `BASE` and registered SBA and
    /// IEQ the way the driver probes (QUERY_INFO, REG_SBA, REG_IEQ, READ_GID, VLAN v2).
    pub fn probed(n: usize, sink: Arc<dyn EventSink>) -> Self {
        let mut world = Self::new(n, sink);
        for f in 0..n {
            world.dma_map(f, BASE, RAM_SIZE, 0, true);
            for request in wire::probe_sequence(BASE + SBA_AT, BASE + IEQ_AT) {
                let reply = world.command(f, &request);
                assert_eq!(reply.ret, 0, "probe step {:#x} failed", reply.cmd);
            }
        }
        // The probe is the same for every input: one check of its whole effect, instead
        // of one per step, was half the time per input.
        let mut allowed = Allowed::new(n);
        world.allow_all_status_areas(&mut allowed);
        world.check(&allowed);
        world
    }

    pub fn len(&self) -> usize {
        self.guests.len()
    }

    pub fn is_empty(&self) -> bool {
        self.guests.is_empty()
    }

    /// Everything the function registered that the device may write on its own:
    /// SBA and IEQ, as the fabric has them now.
    pub fn allow_status_areas(&self, allowed: &mut Allowed, function: usize) {
        let f = &self.fabric.function_views()[function];
        if let Some(sba) = f.sba {
            allowed.iova(function, sba, SBA_LEN);
        }
        if let Some(ieq) = f.ieq {
            allowed.iova(function, ieq, IEQ_LEN);
        }
    }

    /// The status areas of every function (events reach peers).
    pub fn allow_all_status_areas(&self, allowed: &mut Allowed) {
        for f in 0..self.len() {
            self.allow_status_areas(allowed, f);
        }
    }

    /// A DMA_MAP of this guest's own RAM.
    pub fn dma_map(
        &mut self,
        f: usize,
        iova: u64,
        size: u64,
        file_offset: u64,
        writable: bool,
    ) -> bool {
        let flags = if writable {
            DmaMapFlags::READ_WRITE
        } else {
            DmaMapFlags::READ
        };
        let guest = &mut self.guests[f];
        let file = guest.ram.dup_file().expect("dup guest RAM fd");
        let ok = guest
            .backend
            .dma_map(flags, file_offset, iova, size, Some(file))
            .is_ok();
        if ok {
            guest.mappings.push(Mapping {
                iova,
                size,
                file_offset,
            });
        }
        ok
    }

    pub fn dma_unmap(&mut self, f: usize, iova: u64, size: u64, all: bool) {
        let what = if all {
            Unmap::All
        } else {
            Unmap::Range { iova, size }
        };
        let guest = &mut self.guests[f];
        let ok = guest.backend.dma_unmap(what).is_ok();
        assert!(ok, "DMA_UNMAP answers an error");
        if all || (iova == 0 && size == 0) {
            guest.mappings.clear();
        }
    }

    /// A whole command the driver's way: payload at 8, then the header at 0, then the
    /// response read back. Checks the response's shape.
    pub fn command(&mut self, f: usize, request: &[u8]) -> wire::Reply {
        if request.len() > 8 {
            self.region_write(f, COMMAND_REGION, 8, &request[8..]);
        }
        let header = &request[..request.len().min(8)];
        self.region_write(f, COMMAND_REGION, 0, header);
        self.read_reply(f)
    }

    /// A region write as a fuzz operation: a move goes through `move_data`, a command
    /// area write is allowed to touch the SBA and IEQ of the function (and of every
    /// function for SIGNAL_IEQ, whose event lands in the peer's queue).
    pub fn op_region_write(&mut self, f: usize, region: u32, offset: u64, data: &[u8]) {
        if region == MOVE_REGION {
            self.move_data(f, offset, data);
            return;
        }
        let mut allowed = Allowed::new(self.len());
        let signals = region == COMMAND_REGION
            && offset == 0
            && data.len() >= 4
            && data[..4] == wire::Opcode::SignalIeq.code().to_be_bytes();
        if signals {
            self.allow_all_status_areas(&mut allowed);
        } else {
            self.allow_status_areas(&mut allowed, f);
        }
        self.region_write(f, region, offset, data);
        self.allow_status_areas(&mut allowed, f);
        self.check(&allowed);
    }

    /// A whole command as a fuzz operation (see `op_region_write`).
    pub fn op_command(&mut self, f: usize, request: &[u8]) -> wire::Reply {
        let mut allowed = Allowed::new(self.len());
        self.allow_all_status_areas(&mut allowed);
        let reply = self.command(f, request);
        self.allow_status_areas(&mut allowed, f);
        self.check(&allowed);
        reply
    }

    /// Reads and checks the response in the command area.
    pub fn read_reply(&mut self, f: usize) -> wire::Reply {
        let mut area = vec![0; PAGE as usize];
        let read = self.guests[f]
            .backend
            .region_read(COMMAND_REGION, 0, &mut area);
        assert!(read.is_ok(), "command area read failed");
        wire::Reply::parse(&area)
    }

    /// A region write as QEMU forwards it, with the bookkeeping of what it should count.
    /// Returns whether the backend accepted it; for a move, whether it landed. Moves
    /// into an odd offset of the window are posted (their failure is held, not
    /// answered), the others waited, so that both paths are fuzzed.
    pub fn region_write(&mut self, f: usize, region: u32, offset: u64, data: &[u8]) -> bool {
        let executes = matches!(Region::from_index(region), Some(Region::Bar(Bar::Command)))
            && offset == 0
            && data.len() >= 8
            && data.len() <= PAGE as usize;
        let is_move = matches!(Region::from_index(region), Some(Region::Bar(Bar::Move)))
            && data.len() <= ism_emu::ism::MAX_MOVE_LEN;
        let before = self.fabric.function_views()[f].counters.clone();
        let answered = self.guests[f]
            .backend
            .region_write(region, offset, data, is_move && offset & 1 == 1)
            .is_ok();
        let held = self.fabric.function_views()[f].counters.moves_held > before.moves_held;
        let ok = answered && !held;
        if executes {
            self.expect[f].commands += 1;
            let ret = self.read_reply(f).ret;
            if ret != 0 {
                self.expect[f].command_errors += 1;
            }
        }
        if is_move {
            if ok {
                self.expect[f].moves_out += 1;
                self.expect[f].bytes_out += data.len() as u64;
            } else {
                self.expect[f].moves_rejected += 1;
            }
        }
        let after = self.fabric.function_views()[f].counters.clone();
        assert!(
            after.commands >= before.commands && after.moves_out >= before.moves_out,
            "counters went backwards"
        );
        ok
    }

    /// A data move by `sender`: checks that an accepted move came from the DMB's owner
    /// or its registered peer, and that its bytes landed; allows exactly those bytes
    /// (and the owner's SBA when it signals). Returns whether it was accepted.
    pub fn move_data(&mut self, sender: usize, window_offset: u64, data: &[u8]) -> bool {
        let addr = MoveAddress::decode(window_offset);
        let dmb = self.fabric.dmb(addr.token);
        let mut allowed = Allowed::new(self.len());
        if let Some(dmb) = &dmb {
            let start = dmb.iova.saturating_add(u64::from(addr.offset));
            allowed.iova(dmb.owner, start, data.len() as u64);
            if addr.signal {
                self.allow_status_areas(&mut allowed, dmb.owner);
            }
        }
        // A signalling move sets bits in the owner's SBA after the data landed; a guest
        // that put the DMB over its own SBA sees those bits in the DMB (the campaign's
        // one crash: a check of the harness, not a fault of the device).
        let sba = match &dmb {
            Some(dmb) if addr.signal => self.fabric.function_views()[dmb.owner].sba,
            _ => None,
        };
        let ok = self.region_write(sender, MOVE_REGION, window_offset, data);
        if ok {
            let dmb = dmb.expect("an accepted move has a DMB");
            assert!(
                dmb.owner == sender || dmb.rgid == gid(sender),
                "ISOLATION: {sender} moved into DMB {:#x} of function {} granted to {:#x}",
                dmb.token,
                dmb.owner,
                dmb.rgid
            );
            assert!(
                u64::from(addr.offset) + data.len() as u64 <= u64::from(dmb.len),
                "accepted move overruns its DMB"
            );
            let start = dmb.iova + u64::from(addr.offset);
            let owner = &self.guests[dmb.owner];
            let range = start..start + data.len() as u64;
            let at = allowed_offsets(&owner.mappings, std::slice::from_ref(&range));
            // With one known translation the bytes must be there; a guest that remapped
            // the range leaves several candidates, and the allowed set still applies.
            if let [range] = &at[..] {
                if range.end - range.start == data.len() as u64 {
                    let landed = owner.ram.read(range.start, data.len()).expect("RAM");
                    if landed[..] != data[..] {
                        let in_sba = |i: usize| {
                            sba.is_some_and(|sba| {
                                (sba..sba.saturating_add(SBA_LEN)).contains(&(start + i as u64))
                            })
                        };
                        let wrong = (0..data.len()).find(|&i| landed[i] != data[i] && !in_sba(i));
                        assert!(
                            wrong.is_none(),
                            "accepted move did not land in the DMB: byte {wrong:?} of {} differs",
                            data.len()
                        );
                    }
                }
            }
        }
        self.check(&allowed);
        ok
    }

    /// Compares every guest's RAM with what it was, outside what `allowed` lets change
    /// (or, with `MemoryCheck::EndOfInput`, only notes what it lets change), then checks
    /// the counters.
    pub fn check(&mut self, allowed: &Allowed) {
        for (f, guest) in self.guests.iter_mut().enumerate() {
            let offsets = allowed_offsets(&guest.mappings, &allowed.ranges[f]);
            guest.pending.extend(offsets);
        }
        if self.memory_check == MemoryCheck::EveryOperation {
            self.check_memory();
        }
        self.check_counters();
    }

    /// Compares every guest's RAM with its copy, outside the offsets noted since the last
    /// comparison, and takes a new copy.
    fn check_memory(&mut self) {
        for (f, guest) in self.guests.iter_mut().enumerate() {
            let scratch = &mut self.scratch;
            guest.file.read_exact_at(scratch, 0).expect("RAM");
            let offsets = std::mem::take(&mut guest.pending);
            if scratch[..] != guest.shadow[..] {
                // Slice comparisons are memcmp, which the coverage instrumentation leaves
                // alone; a byte loop over all the RAM would be instrumented per byte. So
                // is a chunk inside one allowed range: only the others are walked.
                const CHUNK: usize = 64;
                let chunks = scratch.chunks(CHUNK).zip(guest.shadow.chunks(CHUNK));
                for (c, (now, was)) in chunks.enumerate() {
                    let from = (c * CHUNK) as u64;
                    let covered = |r: &Range<u64>| r.start <= from && from + CHUNK as u64 <= r.end;
                    if now == was || offsets.iter().any(covered) {
                        continue;
                    }
                    for (i, (a, b)) in now.iter().zip(was).enumerate() {
                        let at = from + i as u64;
                        assert!(
                            a == b || offsets.iter().any(|r| r.contains(&at)),
                            "ISOLATION: byte {at:#x} of function {f}'s RAM changed ({b:#04x} -> {a:#04x}) outside what the operation may write ({offsets:x?})"
                        );
                    }
                }
                guest.shadow.copy_from_slice(scratch);
            }
        }
    }

    fn check_counters(&self) {
        let views = self.fabric.function_views();
        let (mut out, mut bytes_out, mut moves_in, mut bytes_in) = (0, 0, 0, 0);
        for (f, function) in views.iter().enumerate() {
            let c = &function.counters;
            let e = &self.expect[f];
            assert_eq!(c.commands, e.commands, "function {f}: commands counted");
            assert_eq!(
                c.command_errors, e.command_errors,
                "function {f}: failed commands counted"
            );
            assert_eq!(c.moves_out, e.moves_out, "function {f}: moves counted");
            assert_eq!(
                c.moves_rejected, e.moves_rejected,
                "function {f}: rejected moves counted"
            );
            assert_eq!(c.bytes_out, e.bytes_out, "function {f}: bytes counted");
            assert!(c.signals_in <= c.moves_in, "function {f}: signals_in");
            out += c.moves_out;
            bytes_out += c.bytes_out;
            moves_in += c.moves_in;
            bytes_in += c.bytes_in;
        }
        assert_eq!(out, moves_in, "every accepted move lands in one DMB");
        assert_eq!(bytes_out, bytes_in, "every accepted byte lands once");
        let mut seen = BTreeMap::new();
        for dmb in self.fabric.dmbs() {
            let token = dmb.token;
            assert_eq!(token & 0xffff_ffff, 0, "token {token:#x} has low bits");
            assert!(
                token < 1 << ism_emu::ism::MOVE_WINDOW_SHIFT,
                "token beyond the window"
            );
            let slot = seen.insert((dmb.owner, dmb.sba_idx), dmb.token);
            assert!(slot.is_none(), "two DMBs of one owner share an SBA index");
        }
    }

    /// The guest itself writes its RAM (the target's bookkeeping, not the device's).
    pub fn guest_write(&mut self, f: usize, offset: u64, data: &[u8]) {
        let offset = offset % RAM_SIZE;
        let len = data.len().min((RAM_SIZE - offset) as usize);
        let guest = &mut self.guests[f];
        guest.ram.write(offset, &data[..len]).expect("guest write");
        guest.shadow[offset as usize..offset as usize + len].copy_from_slice(&data[..len]);
    }

    /// The client goes away; the server builds a fresh backend for the next one.
    pub fn disconnect(&mut self, f: usize) {
        let mut allowed = Allowed::new(self.len());
        self.allow_all_status_areas(&mut allowed);
        let guest = &mut self.guests[f];
        guest.backend.disconnect();
        guest.backend = IsmBackend::new(Arc::clone(&self.fabric), f);
        guest.mappings.clear();
        self.check(&allowed);
    }

    pub fn reset(&mut self, f: usize) {
        let mut allowed = Allowed::new(self.len());
        self.allow_all_status_areas(&mut allowed);
        let guest = &mut self.guests[f];
        assert!(guest.backend.reset().is_ok(), "reset answers an error");
        guest.mappings.clear();
        self.check(&allowed);
    }

    pub fn set_irqs(&mut self, f: usize, index: u32, flags: u32, start: u32, count: u32, n: u8) {
        let fds: Vec<File> = (0..n.min(4))
            .map(|_| GuestRam::new(0).and_then(|r| r.dup_file()).expect("fd"))
            .collect();
        let _ = self.guests[f]
            .backend
            .set_irqs(index, flags, start, count, fds);
        self.check(&Allowed::new(self.len()));
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // The input ended: with `EndOfInput`, its one memory check (a failed check panics
        // here, which libFuzzer reports like any other).
        if self.memory_check == MemoryCheck::EndOfInput && !std::thread::panicking() {
            self.check_memory();
        }
        let buffers = self
            .guests
            .iter_mut()
            .map(|g| std::mem::take(&mut g.shadow));
        let mut spare = std::iter::once(std::mem::take(&mut self.scratch))
            .chain(buffers)
            .collect();
        SPARE_BUFFERS.with_borrow_mut(|pool| pool.append(&mut spare));
    }
}

thread_local! {
    /// RAM-sized buffers of worlds gone, for the next input's world: fresh ones cost a
    /// page fault per page on first touch, which was a third of the time per input.
    static SPARE_BUFFERS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A zeroed buffer of `RAM_SIZE` bytes, reused when one is spare.
fn ram_buffer() -> Vec<u8> {
    match SPARE_BUFFERS.with_borrow_mut(Vec::pop) {
        Some(mut buffer) if buffer.len() == RAM_SIZE as usize => {
            buffer.fill(0);
            buffer
        }
        _ => vec![0; RAM_SIZE as usize],
    }
}

/// RAM offsets that IOVA `ranges` reach through any of `mappings`.
fn allowed_offsets(mappings: &[Mapping], ranges: &[Range<u64>]) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    for m in mappings {
        let m_end = m.iova.saturating_add(m.size);
        for r in ranges {
            let start = r.start.max(m.iova);
            let end = r.end.min(m_end);
            if start < end {
                let off = m.file_offset + (start - m.iova);
                out.push(off..off + (end - start));
            }
        }
    }
    out
}
