//! Data moves: a PCISTB into the move window becomes a copy into the owner's DMB, SBA
//! bits and an interrupt. A move is decoded once, then checked (a held failure, a fault,
//! the DMB and the sender's right to it), copied, signalled and recorded; none of it
//! reads more than the move's own bytes under the fabric's lock. The one read beyond
//! (the observer's reuse check) is the fabric's [`super::GuestReads`]' business.

use std::time::Instant;

use crate::dmb::{Dmb, FunctionId, OpTime};
use crate::guest::DmaError;
use crate::ism::{cdc, MoveAddress, MAX_MOVE_LEN};
use crate::util::hex::to_hex;
use crate::util::ratelimit::guest_log;

use super::events::ReuseCheck;
use super::reads::{PendingRead, ReuseRead};
use super::{Fabric, FabricState, MoveResult, MoveVia, Record};

/// A rejected data move: the sender's PCISTB fails (condition code 1).
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("empty or oversized move of {0} bytes")]
    BadLength(usize),
    #[error("unknown DMB token {0:#x}")]
    UnknownToken(u64),
    #[error("sender GID {sender:#018x} is neither the owner nor the registered peer {rgid:#018x} of token {token:#x}")]
    WrongSender { token: u64, sender: u64, rgid: u64 },
    #[error(
        "move of {len} bytes at offset {offset:#x} overruns DMB {token:#x} of {dmb_len} bytes"
    )]
    OutOfRange {
        token: u64,
        offset: u32,
        len: usize,
        dmb_len: u32,
    },
    #[error("token {token:#x} was granted to an earlier client of GID {sender:#018x}")]
    StaleGrant { token: u64, sender: u64 },
    #[error("DMBE index {0} out of range")]
    BadElement(u8),
    #[error("owner of token {0:#x} is not attached")]
    OwnerGone(u64),
    #[error("owner's DMB is no longer mapped")]
    OwnerUnmapped(#[source] DmaError),
    /// A signalling move refused because an earlier move into the same DMB failed
    /// without the signal (and so, perhaps posted, could not be answered).
    #[error("an earlier move into DMB {token:#x} failed: {cause}")]
    Held { token: u64, cause: String },
    /// A fault injected by the host (`ism-emu fault`).
    #[error("move to DMB {token:#x} rejected by injected fault (rule {rule})")]
    Injected { token: u64, rule: u32 },
}

/// What became of a move the device accepted from the transport.
#[derive(Debug)]
pub enum Stored {
    /// It landed (and signalled, if it asked to).
    Landed,
    /// It was posted (the client will never learn its result) and failed: held, failing
    /// the sender's signalling moves into the same DMB (see [`super::HeldFailures`]).
    Held(MoveError),
}

/// One data move as the transport handed it in, decoded once.
pub(super) struct Move<'a> {
    pub(super) sender: FunctionId,
    /// The store's offset in the move window (what a trace records).
    window: u64,
    pub(super) addr: MoveAddress,
    data: &'a [u8],
    via: MoveVia,
}

impl<'a> Move<'a> {
    fn decode(sender: FunctionId, window: u64, data: &'a [u8], via: MoveVia) -> Self {
        Self {
            sender,
            window,
            addr: MoveAddress::decode(window),
            data,
            via,
        }
    }

    /// Whether a held failure can refuse it: a signalling store (see [`HeldFailures`]).
    ///
    /// [`HeldFailures`]: super::HeldFailures
    fn may_be_held(&self) -> bool {
        self.addr.signal
    }
}

/// What the locked part of a move asks for.
enum Step {
    Done,
    /// The move opens a reused connection: read the DMB (outside the lock) first.
    ReadFirst(PendingRead),
}

impl Fabric {
    /// A store into the move window as the device answers it (a PCISTB to BAR 0 at
    /// `window_offset`, forwarded by QEMU). A waited store gets its true result: a move
    /// that fails is refused and changes nothing else. A `posted` one cannot be answered,
    /// so its failure is held (see [`super::HeldFailures`]). A signalling move fails
    /// without touching the DMB while a failure is held for it.
    pub fn store_move(
        &self,
        sender: FunctionId,
        window_offset: u64,
        data: &[u8],
        posted: bool,
    ) -> Result<Stored, MoveError> {
        let via = if posted {
            MoveVia::Posted
        } else {
            MoveVia::Store
        };
        let mv = Move::decode(sender, window_offset, data, via);
        match self.carry_out(&mv) {
            Ok(()) => Ok(Stored::Landed),
            Err(e) if posted => Ok(Stored::Held(self.hold(&mv, e))),
            Err(e) => Err(e),
        }
    }

    /// Under the lock: check, copy, signal, record. A move that reopens a closed DMB
    /// first has the DMB read for the observer's reuse check, by this (the sender's)
    /// thread without the lock, and is then tried again.
    fn carry_out(&self, mv: &Move) -> Result<(), MoveError> {
        self.delay_move(mv.sender);
        let started = Instant::now();
        // None until the reuse check is done (the first pass). A check read without the
        // lock is recorded at the next pass under it: the trace's lines keep the lock's
        // order, and so their times never go back.
        let mut reuse = None;
        let mut unrecorded = None;
        loop {
            let mut st = self.lock();
            // The move takes effect under this lock (a pass that only decides to read
            // first changes nothing): its time is this lock's.
            let _op = OpTime::begin();
            if let Some(check) = unrecorded.take() {
                reuse = Some(self.record_reuse(mv.sender, check));
            }
            let result = match self.attempt(&mut st, mv, &mut reuse) {
                Ok(Step::ReadFirst(pending)) => {
                    drop(_op);
                    drop(st);
                    unrecorded = Some(pending.read());
                    continue;
                }
                Ok(Step::Done) => Ok(()),
                Err(e) => Err(e),
            };
            self.record_move(&mut st, mv, started, &result);
            return result;
        }
    }

    fn attempt(
        &self,
        st: &mut FabricState,
        mv: &Move,
        reuse: &mut Option<ReuseCheck>,
    ) -> Result<Step, MoveError> {
        // The held failure is looked for under the same lock as the move itself, and a
        // move it refuses is timed and counted like any refused move.
        if mv.may_be_held() {
            if let Some(e) = self.held_verdict(st, mv.sender, mv.addr.token) {
                return Err(e);
            }
        }
        // Asked once per move, not again after a reuse read.
        if reuse.is_none() {
            if let Some(rule) = self.move_fault(mv.sender, mv.addr.token, mv.addr.signal) {
                return Err(MoveError::Injected {
                    token: mv.addr.token,
                    rule,
                });
            }
        }
        let dmb = check(st, mv)?;
        if reuse.is_none() && self.events.wants_reuse_check(&dmb, &mv.addr, mv.data) {
            match self.reads.reuse(st, mv.sender, dmb.token) {
                ReuseRead::Later(pending) => return Ok(Step::ReadFirst(pending)),
                ReuseRead::Found(check) => *reuse = Some(self.record_reuse(mv.sender, check)),
            }
        }
        copy(st, &dmb, mv)?;
        if mv.addr.signal {
            self.signal(st, &dmb, mv);
        }
        self.events.moved(&dmb, &mv.addr, mv.data, reuse.take());
        Ok(Step::Done)
    }

    /// Sets the DMB's SBA bits and raises its owner's interrupt.
    fn signal(&self, st: &mut FabricState, dmb: &Dmb, mv: &Move) {
        let owner = &mut st.functions[dmb.owner];
        owner.counters.signals_in += 1;
        let Some(sba) = owner.sba else {
            guest_log!(
                Warn,
                owner.name,
                owner.gid,
                "signal for token {:#x} lost: no SBA registered",
                dmb.token
            );
            return;
        };
        match sba.signal_dmb(&owner.dma, dmb.sba_idx, mv.addr.dmbe) {
            Ok(()) => self.signal_interrupt(dmb.owner, owner, dmb.token),
            Err(e) => guest_log!(
                Warn,
                owner.name,
                owner.gid,
                "signal for token {:#x} lost: SBA {e}",
                dmb.token
            ),
        }
    }

    fn record_reuse(&self, sender: FunctionId, check: ReuseCheck) -> ReuseCheck {
        self.trace(|_| Record::Reuse {
            f: sender,
            check: check.clone(),
        });
        check
    }

    /// Counts and times the move, and records it (its bytes if payloads are recorded or
    /// it is in the CDC area).
    fn record_move(
        &self,
        st: &mut FabricState,
        mv: &Move,
        started: Instant,
        result: &Result<(), MoveError>,
    ) {
        let counters = &mut st.functions[mv.sender].counters;
        counters.move_service.record(started.elapsed());
        let result = match result {
            Ok(()) => {
                counters.moves_out += 1;
                counters.bytes_out += mv.data.len() as u64;
                MoveResult::Landed
            }
            Err(_) => {
                counters.moves_rejected += 1;
                // store_move holds the failure of a posted move.
                if mv.via == MoveVia::Posted {
                    MoveResult::Held
                } else {
                    MoveResult::Rejected
                }
            }
        };
        self.trace(|recorder| {
            let recorded = if recorder.payload() {
                Some(mv.data)
            } else if mv.addr.offset == 0 {
                Some(&mv.data[..mv.data.len().min(cdc::LEN)])
            } else {
                None
            };
            Record::Move {
                f: mv.sender,
                via: mv.via,
                window: mv.window,
                len: mv.data.len(),
                data: recorded.map(to_hex),
                result,
            }
        });
    }
}

/// The checks of a move against the fabric's state: its length, the DMB, the sender's
/// right to it, the range and the element, and that the owner is there.
fn check(st: &FabricState, mv: &Move) -> Result<Dmb, MoveError> {
    let (data, addr) = (mv.data, &mv.addr);
    if data.is_empty() || data.len() > MAX_MOVE_LEN {
        return Err(MoveError::BadLength(data.len()));
    }
    let sender = &st.functions[mv.sender];
    let dmb = st
        .dmbs
        .get(&addr.token)
        .ok_or(MoveError::UnknownToken(addr.token))?;
    if dmb.owner != mv.sender && dmb.rgid != sender.gid {
        return Err(MoveError::WrongSender {
            token: dmb.token,
            sender: sender.gid,
            rgid: dmb.rgid,
        });
    }
    if dmb.owner != mv.sender && dmb.rgid_generation != Some(sender.generation) {
        return Err(MoveError::StaleGrant {
            token: dmb.token,
            sender: sender.gid,
        });
    }
    let end = u64::from(addr.offset) + data.len() as u64;
    if end > u64::from(dmb.len) {
        return Err(MoveError::OutOfRange {
            token: dmb.token,
            offset: addr.offset,
            len: data.len(),
            dmb_len: dmb.len,
        });
    }
    if addr.dmbe >= 16 {
        return Err(MoveError::BadElement(addr.dmbe));
    }
    if !st.functions[dmb.owner].attached {
        return Err(MoveError::OwnerGone(dmb.token));
    }
    Ok(dmb.clone())
}

/// The move's bytes into the owner's DMB.
fn copy(st: &mut FabricState, dmb: &Dmb, mv: &Move) -> Result<(), MoveError> {
    let owner = &mut st.functions[dmb.owner];
    owner
        .dma
        .write(dmb.iova + u64::from(mv.addr.offset), mv.data)
        .map_err(MoveError::OwnerUnmapped)?;
    owner.counters.moves_in += 1;
    owner.counters.bytes_in += mv.data.len() as u64;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::MoveError;
    use crate::testkit::rig::Rig;
    use crate::testkit::window;

    #[test]
    fn a_move_lands_in_the_owners_dmb_and_signals_it() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 33);
        rig.move_data(0, window(token, 100, true), b"hello")
            .unwrap();
        let at = Rig::dmb_offset(33);
        assert_eq!(rig.ram(1, at + 99, 7), b"\0hello\0");
        let sba = rig.ram(1, 0, 4096);
        assert_eq!(sba[0] & 0x80, 0x80, "summary bit");
        assert_eq!(sba[4 + 33 / 8], 0x80 >> (33 % 8), "DMB bit");
        let views = rig.fabric.function_views();
        assert_eq!(views[0].counters.bytes_out, 5);
        assert_eq!(views[1].counters.signals_in, 1);
        assert_eq!(rig.sink.last(), format!("moved {token:#x}+100 5 None"));
    }

    #[test]
    fn a_rejected_move_is_not_reported_to_the_observer() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        let iova = crate::testkit::rig::BASE + Rig::dmb_offset(32);
        rig.fabric.dma_unmap(1, iova, 4096);
        let err = rig.move_data(0, window(token, 0, true), b"lost");
        assert!(matches!(err, Err(MoveError::OwnerUnmapped(_))), "{err:?}");
        assert!(!rig.sink.calls().iter().any(|c| c.starts_with("moved")));
    }

    #[test]
    fn a_reuse_check_reads_the_dmb_before_the_move_then_runs_out_of_budget() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        *rig.sink.reuse.lock().unwrap() = true;
        rig.rams[1].write(Rig::dmb_offset(32) + 3, &[9]).unwrap();
        rig.move_data(0, window(token, 0, false), b"new").unwrap();
        assert_eq!(
            rig.sink.last(),
            format!("moved {token:#x}+0 3 Some(Read {{ stale: 1, first: Some(3) }})")
        );
        // A budget of one more DMB read, refilled never.
        rig.reuse_read_budget(0, 16384);
        rig.move_data(0, window(token, 0, false), b"x").unwrap();
        rig.move_data(0, window(token, 0, false), b"x").unwrap();
        assert_eq!(
            rig.sink.last(),
            format!("moved {token:#x}+0 1 Some(Unknown(OverBudget))")
        );
    }

    #[test]
    fn a_grant_ends_when_its_grantee_detaches() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        rig.fabric.detach(0, "client disconnected", false);
        rig.fabric.attach(0);
        let err = rig.move_data(0, window(token, 0, true), b"next client");
        assert!(matches!(err, Err(MoveError::StaleGrant { .. })), "{err:?}");
        assert_eq!(rig.ram(1, Rig::dmb_offset(32), 4), [0; 4]);
        // The owner may still write its own DMB.
        assert!(rig.move_data(1, window(token, 0, false), b"own").is_ok());
    }

    #[test]
    fn a_grant_made_while_the_grantee_is_away_holds_for_its_next_client() {
        let rig = Rig::new(2);
        rig.fabric.detach(0, "client disconnected", false);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        rig.fabric.attach(0);
        assert!(rig.move_data(0, window(token, 0, true), b"hi").is_ok());
    }

    #[test]
    fn a_move_from_a_function_that_is_not_the_peer_writes_nothing() {
        let rig = Rig::new(3);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        let err = rig.move_data(2, window(token, 0, true), b"intruder");
        assert!(matches!(err, Err(MoveError::WrongSender { .. })), "{err:?}");
        assert_eq!(rig.ram(1, Rig::dmb_offset(32), 8), [0; 8]);
        assert_eq!(rig.fabric.function_views()[2].counters.moves_rejected, 1);
    }

    #[test]
    fn every_move_is_timed() {
        let rig = Rig::new(2);
        let a = rig.reg_dmb(1, rig.gid(0), 32);
        rig.move_data(0, window(a, 0, true), b"one").unwrap();
        rig.move_data(0, window(a, 64_000, true), b"two")
            .unwrap_err();
        let t = &rig.fabric.function_views()[0].counters.move_service;
        assert_eq!(t.count(), 2);
        assert!(t.quantile_ns(1.0).unwrap() > 0);
    }

    #[test]
    fn a_move_past_the_end_of_the_dmb_is_refused() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        let err = rig.move_data(0, window(token, 16380, false), &[1; 8]);
        assert!(matches!(err, Err(MoveError::OutOfRange { .. })), "{err:?}");
    }

    #[test]
    fn element_16_and_unknown_tokens_are_refused() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        let element_16 = window(token, 0, true) | 16 << 24;
        let err = rig.move_data(0, element_16, b"x");
        assert!(matches!(err, Err(MoveError::BadElement(16))), "{err:?}");
        let err = rig.move_data(0, window(99 << 32, 0, true), b"x");
        assert!(matches!(err, Err(MoveError::UnknownToken(_))), "{err:?}");
    }
}
