//! Data moves: a PCISTB into the move window becomes a copy into the owner's DMB, SBA
//! bits and an interrupt; and the zeroing watch the observer asks for. Neither reads more
//! than the move's own bytes under the fabric's lock.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::dmb::{FunctionId, OpTime};
use crate::guest::{DmaError, DmaView, Scan};
use crate::ism::{MoveAddress, MAX_MOVE_LEN};
use crate::observer::{ReuseCheck, ZeroScan, ZeroWatch, ZERO_SCAN_BUDGET};
use crate::util::ratelimit::guest_log;

use super::{Fabric, FabricState};
use crate::trace::{to_hex, MoveResult, MoveVia, Record, CDC_AREA};

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
    /// the sender's signalling moves into the same DMB (see [`HeldFailures`]).
    Held(MoveError),
}

/// Failures of posted moves, each failing every later signalling move of the sender into
/// the same DMB. Only a move that arrived with the vfio-user no-reply flag is held: the
/// patched QEMU posts ISM data moves without the signal only with `x-ism-post=on`, and
/// only to a server that announces it holds their failures (`x_ism_posted_moves`). A
/// waited move gets its true result at once, as on real ISM, and is never held.
///
/// The guest counted a posted move's bytes as sent, and any signal that lands after them
/// would advertise bytes the DMB never got (docs/faults.md, "Posted moves"). So the
/// failure stays until the connection on that DMB has ended, which the device sees as the
/// DMB's owner resetting its CDC slot (both the zeroing at release, kernel 1c5526968e27,
/// and the zeroing at hand-out before it do that), or until the DMB goes. One entry per
/// DMB; beyond `HELD_TOKENS` DMBs the next signalling move into *any* DMB fails, once,
/// which may abort an innocent connection.
#[derive(Debug, Default)]
pub struct HeldFailures {
    by_token: BTreeMap<u64, Held>,
    overflow: Option<String>,
}

#[derive(Debug)]
struct Held {
    cause: String,
    /// The DMB's CDC slot when the move failed: the sender's last signal into it, which
    /// no later one replaces while the failure stands. None: no DMB, unreadable, or a
    /// replay (which takes the lifting from the trace).
    slot: Option<Slot>,
}

/// The first bytes of a DMB, where SMC-D's sender puts its CDC message.
type Slot = [u8; SLOT_LEN];
const SLOT_LEN: usize = CDC_AREA;

/// A guest has a handful of connections per peer; a guest with more failing DMBs than
/// this at once is broken or hostile and gets the coarse answer.
pub const HELD_TOKENS: usize = 64;

impl HeldFailures {
    fn hold(&mut self, token: u64, cause: String, slot: Option<Slot>) {
        if self.by_token.len() < HELD_TOKENS || self.by_token.contains_key(&token) {
            self.by_token.entry(token).or_insert(Held { cause, slot });
        } else if self.overflow.is_none() {
            self.overflow = Some(cause);
        }
    }

    /// Whether a failure is held for `token`, beyond the limit one for any DMB.
    pub fn holds(&self, token: u64) -> bool {
        self.by_token.contains_key(&token) || self.overflow.is_some()
    }

    /// The DMB is gone: a later DMB with the same token must not inherit its failure.
    pub(super) fn forget(&mut self, token: u64) {
        self.by_token.remove(&token);
    }

    pub(super) fn clear(&mut self) {
        self.by_token.clear();
        self.overflow = None;
    }
}

/// What the locked part of a move asks for.
enum Step {
    Done,
    /// The move opens a reused connection: read the DMB (outside the lock) first.
    ReadFirst(DmaView),
}

impl Fabric {
    /// A store into the move window as the device answers it (a PCISTB to BAR 0 at
    /// `window_offset`, forwarded by QEMU). A waited store gets its true result: a move
    /// that fails is refused and changes nothing else. A `posted` one cannot be answered,
    /// so its failure is held (see [`HeldFailures`]). A signalling move fails without
    /// touching the DMB while a failure is held for it.
    pub fn store_move(
        &self,
        sender: FunctionId,
        window_offset: u64,
        data: &[u8],
        posted: bool,
    ) -> Result<Stored, MoveError> {
        let addr = MoveAddress::decode(window_offset);
        // The held failure is looked for under the same lock as the move itself, and a
        // move it refuses is timed and counted like any refused move.
        let held_for = addr.signal.then_some(addr.token);
        let via = if posted {
            MoveVia::Posted
        } else {
            MoveVia::Store
        };
        match self.move_with(sender, window_offset, data, held_for, via) {
            Ok(()) => Ok(Stored::Landed),
            Err(e) if posted => {
                let mut st = self.lock();
                let slot = if self.replaying() {
                    None
                } else {
                    read_slot(&st, addr.token)
                };
                let f = &mut st.functions[sender];
                f.counters.moves_held += 1;
                f.held.hold(addr.token, e.to_string(), slot);
                Ok(Stored::Held(e))
            }
            Err(e) => Err(e),
        }
    }

    /// A data move by function `sender` (a PCISTB to its BAR 0 at `window_offset`).
    ///
    /// Under the lock: the checks, the copy, the SBA bits and the interrupt. A move that
    /// reopens a closed DMB first has the DMB read for the observer's reuse check, by
    /// this (the sender's) thread without the lock and within the sender's read budget.
    pub fn move_data(
        &self,
        sender: FunctionId,
        window_offset: u64,
        data: &[u8],
    ) -> Result<(), MoveError> {
        self.move_with(sender, window_offset, data, None, MoveVia::Data)
    }

    /// [`Fabric::move_data`]; with `held_for` (the move's token), a failure held for that
    /// DMB fails the move first (and is gone then), without touching the DMB.
    fn move_with(
        &self,
        sender: FunctionId,
        window_offset: u64,
        data: &[u8],
        held_for: Option<u64>,
        via: MoveVia,
    ) -> Result<(), MoveError> {
        self.delay_move(sender);
        let started = Instant::now();
        let mut reuse = None;
        // A reuse check read without the lock, recorded at the next pass under it: the
        // trace's lines keep the lock's order, and so their times never go back.
        let mut unrecorded: Option<ReuseCheck> = None;
        loop {
            let mut guard = self.lock();
            // The move takes effect under this lock (a pass that only decides to read
            // first changes nothing): its time is this lock's.
            let _op = OpTime::begin();
            if let Some(check) = unrecorded.take() {
                self.trace(|_| Record::Reuse {
                    f: sender,
                    check: (&check).into(),
                });
                reuse = Some(check);
            }
            let st = &mut *guard;
            let held = match held_for {
                Some(token) => self.held_verdict(st, sender, token),
                None => None,
            };
            let result = match held {
                Some(e) => Err(e),
                None if reuse.is_none() => {
                    let addr = MoveAddress::decode(window_offset);
                    match self.move_fault(sender, addr.token, addr.signal) {
                        Some(rule) => Err(MoveError::Injected {
                            token: addr.token,
                            rule,
                        }),
                        None => self.move_locked(st, sender, window_offset, data, &mut reuse),
                    }
                }
                None => self.move_locked(st, sender, window_offset, data, &mut reuse),
            };
            let counters = &mut st.functions[sender].counters;
            let view = match result {
                Ok(Step::Done) => {
                    counters.moves_out += 1;
                    counters.bytes_out += data.len() as u64;
                    counters.move_service.record(started.elapsed());
                    self.trace_move(sender, via, window_offset, data, MoveResult::Landed);
                    return Ok(());
                }
                Ok(Step::ReadFirst(view)) => view,
                Err(e) => {
                    counters.moves_rejected += 1;
                    counters.move_service.record(started.elapsed());
                    // store_move holds the failure of a posted move.
                    let result = if via == MoveVia::Posted {
                        MoveResult::Held
                    } else {
                        MoveResult::Rejected
                    };
                    self.trace_move(sender, via, window_offset, data, result);
                    return Err(e);
                }
            };
            drop(_op);
            drop(guard);
            unrecorded = Some(match view.nonzero() {
                Ok((stale, first)) => ReuseCheck::Read { stale, first },
                Err(_) => ReuseCheck::Unknown("unreadable"),
            });
        }
    }

    /// A held failure refuses `sender`'s signalling move into `token` (and stays), unless
    /// the DMB's owner has reset the DMB's CDC slot since: then the connection the failure
    /// broke is over, and the failure goes (traced, so that a replay, which has none of the
    /// guest's own writes, lifts it at the same move). The slot is a few bytes: reading it
    /// under the lock costs what a move's own copy costs.
    fn held_verdict(
        &self,
        st: &mut FabricState,
        sender: FunctionId,
        token: u64,
    ) -> Option<MoveError> {
        let Some(held) = st.functions[sender].held.by_token.get(&token) else {
            let cause = st.functions[sender].held.overflow.take()?;
            return Some(MoveError::Held { token, cause });
        };
        let (refused, then) = (
            MoveError::Held {
                token,
                cause: held.cause.clone(),
            },
            held.slot,
        );
        if !st.dmbs.contains_key(&token) {
            // The DMB is gone: this move fails anyway, and no later DMB may inherit the
            // failure (one that goes forgets it; a token never registered is forgotten
            // here).
            st.functions[sender].held.forget(token);
            return Some(refused);
        }
        let reset = !self.replaying()
            && then.is_some_and(|then| read_slot(st, token).is_some_and(|now| now != then));
        if !reset {
            return Some(refused);
        }
        let f = &mut st.functions[sender];
        f.held.forget(token);
        guest_log!(
            Info,
            f.name,
            f.gid,
            "DMB {token:#x} was reset by its owner: the held failure of an earlier move into it is lifted"
        );
        self.trace(|_| Record::HeldLifted { f: sender, token });
        None
    }

    /// A replayed lift of the held failure for `token` (see [`Self::held_verdict`]).
    pub fn replay_held_lifted(&self, sender: FunctionId, token: u64) {
        if let Some(f) = self.lock().functions.get_mut(sender) {
            f.held.forget(token);
        }
    }

    fn move_locked(
        &self,
        st: &mut FabricState,
        sender: FunctionId,
        window_offset: u64,
        data: &[u8],
        reuse: &mut Option<ReuseCheck>,
    ) -> Result<Step, MoveError> {
        if data.is_empty() || data.len() > MAX_MOVE_LEN {
            return Err(MoveError::BadLength(data.len()));
        }
        let addr = MoveAddress::decode(window_offset);
        let sender_gid = st.functions[sender].gid;
        let dmb = st
            .dmbs
            .get(&addr.token)
            .ok_or(MoveError::UnknownToken(addr.token))?;
        if dmb.owner != sender && dmb.rgid != sender_gid {
            return Err(MoveError::WrongSender {
                token: dmb.token,
                sender: sender_gid,
                rgid: dmb.rgid,
            });
        }
        let generation = st.functions[sender].generation;
        if dmb.owner != sender && dmb.rgid_generation != Some(generation) {
            return Err(MoveError::StaleGrant {
                token: dmb.token,
                sender: sender_gid,
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
        if reuse.is_none() && self.events.wants_reuse_check(dmb, &addr, data) {
            let len = u64::from(dmb.len);
            if self.replaying() {
                // A replay has no guest writes in its memory: the trace says what was read.
                *reuse = Some(self.next_replayed_reuse(sender));
            } else {
                let unread = if !st.functions[sender].reuse_reads.take(Instant::now(), len) {
                    ReuseCheck::Unknown("over the read budget")
                } else {
                    match st.functions[dmb.owner].dma.view(dmb.iova, len) {
                        Ok(view) => return Ok(Step::ReadFirst(view)),
                        // Part of the DMB is unmapped: the move may still land (the write
                        // below checks its own bytes), but the reuse cannot be judged.
                        Err(_) => ReuseCheck::Unknown("DMB not all mapped"),
                    }
                };
                self.trace(|_| Record::Reuse {
                    f: sender,
                    check: (&unread).into(),
                });
                *reuse = Some(unread);
            }
        }
        let owner = &mut st.functions[dmb.owner];
        owner
            .dma
            .write(dmb.iova + u64::from(addr.offset), data)
            .map_err(MoveError::OwnerUnmapped)?;
        owner.counters.moves_in += 1;
        owner.counters.bytes_in += data.len() as u64;
        if addr.signal {
            owner.counters.signals_in += 1;
            match owner.sba {
                Some(sba) => match sba.signal_dmb(&owner.dma, dmb.sba_idx, addr.dmbe) {
                    Ok(()) => self.signal_interrupt(dmb.owner, owner, dmb.token),
                    Err(e) => guest_log!(
                        Warn,
                        owner.name,
                        owner.gid,
                        "signal for token {:#x} lost: SBA {e}",
                        dmb.token
                    ),
                },
                None => guest_log!(
                    Warn,
                    owner.name,
                    owner.gid,
                    "signal for token {:#x} lost: no SBA registered",
                    dmb.token
                ),
            }
        }
        self.events.moved(dmb, &addr, data, reuse.take());
        Ok(Step::Done)
    }

    /// One tick of the zeroing watch: looks at the closed DMBs the observer watches, at
    /// most `ZERO_SCAN_BUDGET` bytes per owner function, reading *outside* the lock
    /// (the lock only takes views of the DMBs). Returns how many DMBs are still watched:
    /// 0 means the watcher may sleep until the next close.
    pub fn poll_zeroing(&self) -> usize {
        let watch = self.events.zero_watch();
        if watch.is_empty() {
            return 0;
        }
        let mut results = Vec::with_capacity(watch.len());
        let mut jobs = Vec::new();
        {
            let st = self.lock();
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
        // Under the lock, so that the tick's place among the moves is the trace's.
        let _st = self.lock();
        let _op = OpTime::begin();
        self.trace(|_| Record::ZeroTick {
            results: results.iter().map(|&(t, s)| (t, s.into())).collect(),
        });
        self.events.zero_scanned(&results)
    }

    /// A replayed tick of the zeroing watch: the recorded looks, applied as the watcher
    /// applied them.
    pub fn replay_zero_tick(&self, results: &[(u64, ZeroScan)]) -> usize {
        let _st = self.lock();
        self.events.zero_scanned(results)
    }

    /// Records a move (its bytes if payloads are recorded or it is in the CDC area).
    fn trace_move(
        &self,
        f: FunctionId,
        via: MoveVia,
        window: u64,
        data: &[u8],
        result: MoveResult,
    ) {
        self.trace(|tracer| {
            let recorded = if tracer.payload() {
                Some(data)
            } else if MoveAddress::decode(window).offset == 0 {
                Some(&data[..data.len().min(CDC_AREA)])
            } else {
                None
            };
            Record::Move {
                f,
                via,
                window,
                len: data.len(),
                data: recorded.map(to_hex),
                result,
            }
        });
    }
}

/// The CDC slot of DMB `token` as its owner's memory holds it now (zeros past a DMB
/// shorter than the slot); None if there is no such DMB or it is not all mapped.
fn read_slot(st: &FabricState, token: u64) -> Option<Slot> {
    let dmb = st.dmbs.get(&token)?;
    let mut slot = [0; SLOT_LEN];
    let len = SLOT_LEN.min(dmb.len as usize);
    st.functions[dmb.owner]
        .dma
        .read(dmb.iova, &mut slot[..len])
        .ok()?;
    Some(slot)
}

const PAGE: u64 = 4096;

/// One look at a watched DMB: the byte that was dirty last time (one page), and if it is
/// clean now, or there was none, the next `ZERO_SCAN_BUDGET` bytes from there.
fn look(w: &ZeroWatch, view: &DmaView) -> ZeroScan {
    let mut from = w.scan_from;
    if let Some(at) = w.dirty_at {
        match view.scan(at, 1) {
            Ok(Scan::Dirty(_)) => return ZeroScan::Dirty(at),
            Ok(Scan::Zero) => from = at,
            Err(_) => return ZeroScan::Unreadable,
        }
    }
    let len = view.len();
    let from = from.min(len);
    let n = (len - from).min(ZERO_SCAN_BUDGET);
    match view.scan(from, n) {
        Ok(Scan::Dirty(at)) => ZeroScan::Dirty(at),
        Ok(Scan::Zero) if from + n == len => ZeroScan::Zero,
        Ok(Scan::Zero) => ZeroScan::ZeroUpTo(from + n),
        Err(_) => ZeroScan::Unreadable,
    }
}

/// What `look` may read: a page for the dirty byte, then up to the budget.
fn look_cost(w: &ZeroWatch, len: u64) -> u64 {
    let hint = if w.dirty_at.is_some() { PAGE } else { 0 };
    let from = w.dirty_at.unwrap_or(w.scan_from);
    hint + len.saturating_sub(from).clamp(1, ZERO_SCAN_BUDGET)
}

#[cfg(test)]
mod tests {
    use super::{look, look_cost, MoveError, Stored, HELD_TOKENS, PAGE};
    use crate::guest::{DmaSpace, DmaView};
    use crate::ism::command::Command;
    use crate::ism::MoveAddress;
    use crate::observer::{ZeroScan, ZeroWatch, ZERO_SCAN_BUDGET};
    use crate::testkit::rig::Rig;
    use crate::testkit::GuestRam;
    use crate::util::ratelimit::Budget;

    fn to(token: u64, offset: u32, signal: bool) -> u64 {
        MoveAddress {
            token,
            dmbe: 0,
            signal,
            offset,
        }
        .encode()
    }

    #[test]
    fn a_move_lands_in_the_owners_dmb_and_signals_it() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 33);
        rig.fabric
            .move_data(0, to(token, 100, true), b"hello")
            .unwrap();
        let at = Rig::dmb_offset(33);
        assert_eq!(rig.ram(1, at + 99, 7), b"\0hello\0");
        let sba = rig.ram(1, 0, 4096);
        assert_eq!(sba[0] & 0x80, 0x80, "summary bit");
        assert_eq!(sba[4 + 33 / 8], 0x80 >> (33 % 8), "DMB bit");
        let st = rig.fabric.lock();
        assert_eq!(st.functions[0].counters.bytes_out, 5);
        assert_eq!(st.functions[1].counters.signals_in, 1);
        assert_eq!(rig.sink.last(), format!("moved {token:#x}+100 5 None"));
    }

    #[test]
    fn a_rejected_move_is_not_reported_to_the_observer() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        let iova = crate::testkit::rig::BASE + Rig::dmb_offset(32);
        rig.fabric.dma_unmap(1, iova, 4096);
        let err = rig.fabric.move_data(0, to(token, 0, true), b"lost");
        assert!(matches!(err, Err(MoveError::OwnerUnmapped(_))), "{err:?}");
        assert!(!rig.sink.calls().iter().any(|c| c.starts_with("moved")));
    }

    #[test]
    fn a_reuse_check_reads_the_dmb_before_the_move_then_runs_out_of_budget() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        *rig.sink.reuse.lock().unwrap() = true;
        rig.rams[1].write(Rig::dmb_offset(32) + 3, &[9]).unwrap();
        rig.fabric
            .move_data(0, to(token, 0, false), b"new")
            .unwrap();
        assert_eq!(
            rig.sink.last(),
            format!("moved {token:#x}+0 3 Some(Read {{ stale: 1, first: Some(3) }})")
        );
        // A budget of one more DMB read, refilled never.
        rig.fabric.lock().functions[0].reuse_reads = Budget::new(0, 16384);
        rig.fabric.move_data(0, to(token, 0, false), b"x").unwrap();
        rig.fabric.move_data(0, to(token, 0, false), b"x").unwrap();
        assert_eq!(
            rig.sink.last(),
            format!("moved {token:#x}+0 1 Some(Unknown(\"over the read budget\"))")
        );
    }

    #[test]
    fn a_grant_ends_when_its_grantee_detaches() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        rig.fabric.detach(0, "client disconnected", false);
        rig.fabric.attach(0);
        let err = rig.fabric.move_data(0, to(token, 0, true), b"next client");
        assert!(matches!(err, Err(MoveError::StaleGrant { .. })), "{err:?}");
        assert_eq!(rig.ram(1, Rig::dmb_offset(32), 4), [0; 4]);
        // The owner may still write its own DMB.
        assert!(rig.fabric.move_data(1, to(token, 0, false), b"own").is_ok());
    }

    #[test]
    fn a_grant_made_while_the_grantee_is_away_holds_for_its_next_client() {
        let rig = Rig::new(2);
        rig.fabric.detach(0, "client disconnected", false);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        rig.fabric.attach(0);
        assert!(rig.fabric.move_data(0, to(token, 0, true), b"hi").is_ok());
    }

    #[test]
    fn a_move_from_a_function_that_is_not_the_peer_writes_nothing() {
        let rig = Rig::new(3);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        let err = rig.fabric.move_data(2, to(token, 0, true), b"intruder");
        assert!(matches!(err, Err(MoveError::WrongSender { .. })), "{err:?}");
        assert_eq!(rig.ram(1, Rig::dmb_offset(32), 8), [0; 8]);
        assert_eq!(rig.fabric.lock().functions[2].counters.moves_rejected, 1);
    }

    #[test]
    fn a_failed_posted_move_fails_every_later_signal_into_that_dmb() {
        let rig = Rig::new(2);
        let a = rig.reg_dmb(1, rig.gid(0), 32);
        let b = rig.reg_dmb(1, rig.gid(0), 33);
        // The connection's earlier signal: the CDC slot holds it.
        assert!(matches!(
            rig.fabric.store_move(0, to(a, 0, true), b"cdc1", false),
            Ok(Stored::Landed)
        ));
        let past_end = rig
            .fabric
            .store_move(0, to(a, 32_000, false), b"lost", true);
        assert!(matches!(
            past_end,
            Ok(Stored::Held(MoveError::OutOfRange { .. }))
        ));
        // Another DMB's connection is not affected.
        assert!(matches!(
            rig.fabric.store_move(0, to(b, 0, true), b"other", false),
            Ok(Stored::Landed)
        ));
        // Every signal into the failing DMB fails and lands nothing: any of them would
        // advertise the lost bytes. Moves without the signal still land.
        for _ in 0..3 {
            let err = rig.fabric.store_move(0, to(a, 0, true), b"cdc2", false);
            assert!(
                matches!(err, Err(MoveError::Held { token, .. }) if token == a),
                "{err:?}"
            );
            assert_eq!(rig.ram(1, Rig::dmb_offset(32), 4), b"cdc1");
        }
        assert!(matches!(
            rig.fabric.store_move(0, to(a, 64, false), b"more", true),
            Ok(Stored::Landed)
        ));
        let moved_a = |c: &String| c.starts_with("moved") && c.contains(&format!("{a:#x}"));
        assert_eq!(rig.sink.calls().iter().filter(|c| moved_a(c)).count(), 2);
        let c = &rig.fabric.lock().functions[0].counters;
        assert_eq!((c.moves_held, c.moves_rejected, c.moves_out), (1, 4, 3));
        // Every store is timed, the ones refused for the held failure too.
        assert_eq!(c.move_service.count(), 7);
    }

    #[test]
    fn a_failed_waited_move_is_refused_and_holds_nothing() {
        let rig = Rig::new(2);
        let a = rig.reg_dmb(1, rig.gid(0), 32);
        // As on ISM: the failing store fails at once, with or without the signal...
        for signal in [false, true] {
            let err = rig
                .fabric
                .store_move(0, to(a, 32_000, signal), b"lost", false);
            assert!(matches!(err, Err(MoveError::OutOfRange { .. })), "{err:?}");
            let ghost = rig
                .fabric
                .store_move(0, to(0x77 << 32, 0, signal), b"x", false);
            assert!(
                matches!(ghost, Err(MoveError::UnknownToken(_))),
                "{ghost:?}"
            );
        }
        assert!(!rig.fabric.lock().functions[0].held.holds(a));
        // ...and the next valid signalling move lands and signals.
        assert!(matches!(
            rig.fabric.store_move(0, to(a, 0, true), b"cdc", false),
            Ok(Stored::Landed)
        ));
        assert_eq!(rig.ram(1, Rig::dmb_offset(32), 3), b"cdc");
        let c = &rig.fabric.lock().functions[0].counters;
        assert_eq!((c.moves_held, c.moves_rejected, c.moves_out), (0, 4, 1));
    }

    #[test]
    fn a_held_failure_is_lifted_when_the_owner_resets_the_dmb() {
        let rig = Rig::new(2);
        let a = rig.reg_dmb(1, rig.gid(0), 32);
        rig.fabric
            .store_move(0, to(a, 0, true), b"cdc1", false)
            .unwrap();
        rig.fabric
            .store_move(0, to(a, 32_000, false), b"x", true)
            .unwrap();
        assert!(rig
            .fabric
            .store_move(0, to(a, 0, true), b"cdc2", false)
            .is_err());
        // The owner's kernel zeroes the DMB when the connection releases it (or hands
        // it out again): the next connection's signals land.
        rig.rams[1].write(Rig::dmb_offset(32), &[0; 4]).unwrap();
        assert!(matches!(
            rig.fabric.store_move(0, to(a, 0, true), b"new1", false),
            Ok(Stored::Landed)
        ));
        assert!(!rig.fabric.lock().functions[0].held.holds(a));
        assert_eq!(rig.ram(1, Rig::dmb_offset(32), 4), b"new1");
    }

    #[test]
    fn a_held_failure_ends_with_its_dmb_or_the_senders_reset() {
        let rig = Rig::new(2);
        let a = rig.reg_dmb(1, rig.gid(0), 32);
        rig.fabric
            .store_move(0, to(a, 32_000, false), b"x", true)
            .unwrap();
        let unreg = rig.fabric.execute(1, Command::UnregDmb { token: a });
        assert!(unreg.is_ok(), "{unreg:?}");
        assert!(!rig.fabric.lock().functions[0].held.holds(a));

        let b = rig.reg_dmb(1, rig.gid(0), 33);
        rig.fabric
            .store_move(0, to(b, 32_000, false), b"x", true)
            .unwrap();
        rig.fabric.detach(0, "reset", true);
        assert!(!rig.fabric.lock().functions[0].held.holds(b));

        // A failure for a token no DMB has fails the next signal to it, once.
        rig.probe(0);
        let ghost = 0x77 << 32;
        rig.fabric
            .store_move(0, to(ghost, 0, false), b"x", true)
            .unwrap();
        assert!(rig.fabric.lock().functions[0].held.holds(ghost));
        assert!(rig
            .fabric
            .store_move(0, to(ghost, 0, true), b"x", false)
            .is_err());
        assert!(!rig.fabric.lock().functions[0].held.holds(ghost));
    }

    #[test]
    fn beyond_the_held_limit_the_next_signal_into_any_dmb_fails() {
        let rig = Rig::new(2);
        let good = rig.reg_dmb(1, rig.gid(0), 32);
        for i in 0..=HELD_TOKENS as u64 {
            // Unknown tokens: each is one more DMB with a held failure.
            let token = (0x100 + i) << 32;
            assert!(matches!(
                rig.fabric.store_move(0, to(token, 0, false), b"x", true),
                Ok(Stored::Held(MoveError::UnknownToken(_)))
            ));
        }
        let err = rig.fabric.store_move(0, to(good, 0, true), b"cdc", false);
        assert!(matches!(err, Err(MoveError::Held { .. })), "{err:?}");
        assert!(rig
            .fabric
            .store_move(0, to(good, 0, true), b"cdc", false)
            .is_ok());
    }

    #[test]
    fn every_move_is_timed() {
        let rig = Rig::new(2);
        let a = rig.reg_dmb(1, rig.gid(0), 32);
        rig.fabric.move_data(0, to(a, 0, true), b"one").unwrap();
        rig.fabric
            .move_data(0, to(a, 64_000, true), b"two")
            .unwrap_err();
        let t = &rig.fabric.lock().functions[0].counters.move_service;
        assert_eq!(t.count(), 2);
        assert!(t.quantile_ns(1.0).unwrap() > 0);
    }

    #[test]
    fn a_move_past_the_end_of_the_dmb_is_refused() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        let err = rig.fabric.move_data(0, to(token, 16380, false), &[1; 8]);
        assert!(matches!(err, Err(MoveError::OutOfRange { .. })), "{err:?}");
    }

    #[test]
    fn element_16_and_unknown_tokens_are_refused() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        let element_16 = to(token, 0, true) | 16 << 24;
        let err = rig.fabric.move_data(0, element_16, b"x");
        assert!(matches!(err, Err(MoveError::BadElement(16))), "{err:?}");
        let err = rig.fabric.move_data(0, to(99 << 32, 0, true), b"x");
        assert!(matches!(err, Err(MoveError::UnknownToken(_))), "{err:?}");
    }

    #[test]
    fn the_zeroing_watch_reads_the_owners_dmb() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        let watch = |token| ZeroWatch {
            token,
            scan_from: 0,
            dirty_at: None,
        };
        rig.sink
            .watch
            .lock()
            .unwrap()
            .extend([watch(token), watch(5 << 32)]);
        rig.fabric.poll_zeroing();
        rig.fabric.move_data(0, to(token, 8, false), b"x").unwrap();
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
        };
        assert_eq!(look(&w, &view), ZeroScan::ZeroUpTo(ZERO_SCAN_BUDGET));
        w.scan_from = ZERO_SCAN_BUDGET;
        assert_eq!(look(&w, &view), ZeroScan::Zero);
        ram.write(len - 1, &[1]).unwrap();
        assert_eq!(look(&w, &view), ZeroScan::Dirty(len - 1));
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
        };
        assert_eq!(look_cost(&w, len), PAGE + 1);
        assert_eq!(look(&w, &view), ZeroScan::Dirty(len - 1));
        // Bytes before `scan_from` were seen zero before and are not read again: the
        // guest re-dirtying byte 0 after that is not seen (docs/observer.md).
        ram.write(len - 1, &[0]).unwrap();
        assert_eq!(look(&w, &view), ZeroScan::Zero);
    }
}
