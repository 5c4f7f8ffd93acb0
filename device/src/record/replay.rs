//! Replaying a recorded trace through the device model and the observer, without QEMU or
//! guests: `ism-emu replay TRACE`.
//!
//! A fresh fabric with the trace's functions carries out each operation at its recorded
//! time ([`OpTime`]), on guest memory of its own (a sparse memfd per DMA mapping), with
//! the guest-memory reads the trace recorded. The observer then sees what the live one
//! saw and says the same: its events and its DMB summaries come out equal to the live
//! run's. The device's answers (each command's `ret`, each move's outcome) are compared
//! with the recorded ones; a difference means the device model changed since the trace
//! was taken (or the trace is incomplete), and is reported.
//!
//! The fabric is the live one: only what it reads through [`GuestReads`] differs. A
//! trace's `reuse`, `held_lifted` and `zero_tick` records are handed to [`Recorded`]
//! before the operation that reads them, and a replay does not wait out delays.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};

use super::file::{self, TraceError};
use crate::dmb::{FunctionId, OpTime};
use crate::fabric::{
    EventSink, Fabric, FabricState, GuestReads, MoveResult, MoveVia, Record, ReuseCheck, ReuseRead,
    Stored, Unread, ZeroScan, ZeroWatch,
};
use crate::fault::FaultSpec;
use crate::ism::command::CommandError;
use crate::ism::{cdc, MAX_MOVE_LEN};
use crate::observer::Observer;
use crate::util::hex::from_hex;

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("record {index}: function {f} is not in the trace's header")]
    NoSuchFunction { index: usize, f: usize },
    #[error("record {index}: guest memory for a mapping of {size:#x} bytes")]
    Memory {
        index: usize,
        size: u64,
        #[source]
        source: io::Error,
    },
}

/// What a replay did.
#[derive(Debug, Default)]
pub struct ReplayReport {
    pub records: usize,
    pub commands: usize,
    pub moves: usize,
    pub zero_ticks: usize,
    /// Operations whose outcome differed from the recorded one (the first few described).
    pub mismatches: usize,
    pub first_mismatches: Vec<String>,
    /// Records the live writer lost: the replay is of an incomplete trace.
    pub lost: u64,
}

impl ReplayReport {
    fn mismatch(&mut self, index: usize, what: String) {
        self.mismatches += 1;
        if self.first_mismatches.len() < 10 {
            self.first_mismatches
                .push(format!("record {index}: {what}"));
        }
    }
}

/// What a replayed fabric reads: the trace's results, handed in before the operation that
/// reads them and forgotten after it.
#[derive(Default)]
pub struct Recorded {
    next: Mutex<Next>,
}

#[derive(Default)]
struct Next {
    /// Reuse reads, per function, for its next move.
    reuse: Vec<VecDeque<ReuseCheck>>,
    /// Held failures lifted at a function's next move: (function, token).
    lifted: Vec<(FunctionId, u64)>,
    /// The next zeroing tick's looks.
    looks: Vec<(u64, ZeroScan)>,
}

impl Recorded {
    fn next(&self) -> MutexGuard<'_, Next> {
        self.next.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A recorded reuse read, for function `f`'s next move that asks for one.
    fn reuse_read(&self, f: FunctionId, check: ReuseCheck) {
        let mut next = self.next();
        if next.reuse.len() <= f {
            next.reuse.resize_with(f + 1, VecDeque::new);
        }
        next.reuse[f].push_back(check);
    }

    /// The failure `f` held for `token` is lifted at its next move.
    fn lifted(&self, f: FunctionId, token: u64) {
        self.next().lifted.push((f, token));
    }

    /// A move of `f` is done: what was recorded for it and not used (the move failed
    /// before it looked) must not serve the next one.
    fn move_done(&self, f: FunctionId) {
        let mut next = self.next();
        if let Some(q) = next.reuse.get_mut(f) {
            q.clear();
        }
        next.lifted.retain(|&(g, _)| g != f);
    }
}

impl GuestReads for Recorded {
    fn reuse(&self, _st: &mut FabricState, sender: FunctionId, _token: u64) -> ReuseRead {
        let check = self
            .next()
            .reuse
            .get_mut(sender)
            .and_then(VecDeque::pop_front);
        ReuseRead::Found(check.unwrap_or(ReuseCheck::Unknown(Unread::NotRead)))
    }

    /// Not kept: whether the failure is lifted is the trace's `held_lifted`.
    fn cdc_slot(&self, _st: &FabricState, _token: u64) -> Option<cdc::Area> {
        None
    }

    fn slot_reset(
        &self,
        _st: &FabricState,
        sender: FunctionId,
        token: u64,
        _then: Option<&cdc::Area>,
    ) -> bool {
        let mut next = self.next();
        let at = next.lifted.iter().position(|&l| l == (sender, token));
        at.map(|at| next.lifted.remove(at)).is_some()
    }

    fn zero_looks(&self, _fabric: &Fabric, _watch: Vec<ZeroWatch>) -> Vec<(u64, ZeroScan)> {
        std::mem::take(&mut self.next().looks)
    }

    /// The recorded times stand for the delay.
    fn wait(&self, _delay: Duration) {}
}

/// Guest memory for one replayed mapping: sealed like QEMU's, sparse until written.
fn guest_memory(size: u64) -> io::Result<File> {
    let flags = MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING;
    let file = File::from(memfd_create(c"replay-ram", flags).map_err(io::Error::from)?);
    file.set_len(size)?;
    let seals = SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SHRINK;
    fcntl(&file, FcntlArg::F_ADD_SEALS(seals)).map_err(io::Error::from)?;
    Ok(file)
}

/// Replays the trace at `path` into `observer`; returns the fabric (for its views) and
/// what happened.
pub fn replay(
    path: &Path,
    observer: Arc<Observer>,
) -> Result<(Arc<Fabric>, ReplayReport), ReplayError> {
    let (header, records) = file::read(path)?;
    let functions = header
        .functions
        .iter()
        .map(|f| (f.name.clone(), f.gid))
        .collect::<Vec<_>>();
    let n = functions.len();
    let sink: Arc<dyn EventSink> = observer.clone();
    let reads = Arc::new(Recorded::default());
    let fabric = Arc::new(Fabric::with_reads(
        header.chid,
        functions,
        sink,
        Arc::clone(&reads) as Arc<dyn GuestReads>,
    ));
    let mut report = ReplayReport {
        records: records.len(),
        ..ReplayReport::default()
    };
    for (index, (t, record)) in records.into_iter().enumerate() {
        let index = index + 2; // the file's line number
        let _op = OpTime::at(t);
        let f = match &record {
            Record::Attach { f }
            | Record::Detach { f, .. }
            | Record::DmaMap { f, .. }
            | Record::DmaUnmap { f, .. }
            | Record::DmaUnmapAll { f }
            | Record::Cmd { f, .. }
            | Record::Undecodable { f }
            | Record::Move { f, .. }
            | Record::Reuse { f, .. }
            | Record::HeldLifted { f, .. }
            | Record::Irq { f, .. } => Some(*f),
            _ => None,
        };
        if let Some(f) = f.filter(|&f| f >= n) {
            return Err(ReplayError::NoSuchFunction { index, f });
        }
        match record {
            Record::Attach { f } => fabric.attach(f),
            Record::Detach {
                f,
                reason,
                still_attached,
            } => fabric.detach(f, &reason, still_attached),
            Record::DmaMap {
                f,
                iova,
                size,
                writable,
            } => {
                let memory = guest_memory(size).map_err(|source| ReplayError::Memory {
                    index,
                    size,
                    source,
                })?;
                if let Err(e) = fabric.dma_map(f, iova, size, Some(memory), 0, writable) {
                    report.mismatch(
                        index,
                        format!("DMA map of {size:#x} at {iova:#x} refused: {e}"),
                    );
                }
            }
            Record::DmaUnmap { f, iova, size } => {
                fabric.dma_unmap(f, iova, size);
            }
            Record::DmaUnmapAll { f } => fabric.dma_unmap_all(f),
            Record::Cmd { f, cmd, ret } => {
                report.commands += 1;
                let got = fabric
                    .execute(f, cmd)
                    .err()
                    .map_or(0, |e: CommandError| e.ret());
                if got != ret {
                    report.mismatch(
                        index,
                        format!("{cmd:?}: ret {got:#06x}, recorded {ret:#06x}"),
                    );
                }
            }
            Record::Undecodable { f } => fabric.command_undecodable(f),
            Record::Reuse { f, check } => reads.reuse_read(f, check),
            Record::HeldLifted { f, token } => reads.lifted(f, token),
            Record::Move {
                f,
                via,
                window,
                len,
                data,
                result,
            } => {
                report.moves += 1;
                // Bytes not recorded are zeros: the observer reads moves only in the CDC
                // area, which is always recorded.
                // A trace may come from anywhere: a length beyond any move is kept just
                // long enough for the device to refuse it, never allocated.
                let mut bytes = data.as_deref().and_then(from_hex).unwrap_or_default();
                bytes.resize(len.min(MAX_MOVE_LEN + 1), 0);
                let got = match fabric.store_move(f, window, &bytes, via == MoveVia::Posted) {
                    Ok(Stored::Landed) => MoveResult::Landed,
                    Ok(Stored::Held(_)) => MoveResult::Held,
                    Err(_) => MoveResult::Rejected,
                };
                reads.move_done(f);
                if got != result {
                    report.mismatch(
                        index,
                        format!("move at {window:#x} ({len} bytes): {got:?}, recorded {result:?}"),
                    );
                }
            }
            Record::ZeroTick { results } => {
                report.zero_ticks += 1;
                reads.next().looks = results;
                fabric.poll_zeroing();
                // Looks the watch did not ask for (it had nothing to watch) are dropped.
                reads.next().looks.clear();
            }
            // The interrupts follow from the moves; nothing to do.
            Record::Irq { .. } => {}
            Record::FaultAdd { spec } => {
                let added = FaultSpec::parse(&spec).and_then(|s| fabric.add_fault(s));
                if let Err(e) = added {
                    report.mismatch(index, format!("fault {spec}: {e}"));
                }
            }
            Record::FaultClear { id } => {
                fabric.clear_faults(id);
            }
            Record::Lost { count } => report.lost += count,
        }
    }
    observer.sync();
    Ok((fabric, report))
}
