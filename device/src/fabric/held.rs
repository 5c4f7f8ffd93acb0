//! Held failures of posted moves: a move the client posted cannot be answered, so its
//! failure fails the sender's later signalling moves into the same DMB instead.

use std::collections::BTreeMap;

use crate::dmb::FunctionId;
use crate::util::ratelimit::guest_log;

use crate::ism::cdc;

use super::moves::{Move, MoveError};
use super::{Fabric, FabricState, Record};

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
    slot: Option<cdc::Area>,
}

/// A guest has a handful of connections per peer; a guest with more failing DMBs than
/// this at once is broken or hostile and gets the coarse answer.
pub const HELD_TOKENS: usize = 64;

impl HeldFailures {
    fn hold(&mut self, token: u64, cause: String, slot: Option<cdc::Area>) {
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

impl Fabric {
    /// Holds the failure `e` of posted move `mv` against its sender's later signals into
    /// that DMB; returns it.
    pub(super) fn hold(&self, mv: &Move, e: MoveError) -> MoveError {
        let mut st = self.lock();
        let slot = self.reads.cdc_slot(&st, mv.addr.token);
        let f = &mut st.functions[mv.sender];
        f.counters.moves_held += 1;
        f.held.hold(mv.addr.token, e.to_string(), slot);
        e
    }

    /// A held failure refuses `sender`'s signalling move into `token` (and stays), unless
    /// the DMB's owner has reset the DMB's CDC slot since: then the connection the failure
    /// broke is over, and the failure goes (traced, so that a replay, which has none of the
    /// guest's own writes, lifts it at the same move). The slot is a few bytes: reading it
    /// under the lock costs what a move's own copy costs.
    pub(super) fn held_verdict(
        &self,
        st: &mut FabricState,
        sender: FunctionId,
        token: u64,
    ) -> Option<MoveError> {
        let Some(held) = st.functions[sender].held.by_token.get(&token) else {
            let cause = st.functions[sender].held.overflow.take()?;
            return Some(MoveError::Held { token, cause });
        };
        let refused = MoveError::Held {
            token,
            cause: held.cause.clone(),
        };
        if !st.dmbs.contains_key(&token) {
            // The DMB is gone: this move fails anyway, and no later DMB may inherit the
            // failure (one that goes forgets it; a token never registered is forgotten
            // here).
            st.functions[sender].held.forget(token);
            return Some(refused);
        }
        if !self.reads.slot_reset(st, sender, token, held.slot.as_ref()) {
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
}

#[cfg(test)]
mod tests {
    use super::HELD_TOKENS;
    use crate::fabric::{MoveError, Stored};
    use crate::ism::command::Command;
    use crate::testkit::rig::Rig;
    use crate::testkit::window;

    #[test]
    fn a_failed_posted_move_fails_every_later_signal_into_that_dmb() {
        let rig = Rig::new(2);
        let a = rig.reg_dmb(1, rig.gid(0), 32);
        let b = rig.reg_dmb(1, rig.gid(0), 33);
        // The connection's earlier signal: the CDC slot holds it.
        assert!(matches!(
            rig.fabric.store_move(0, window(a, 0, true), b"cdc1", false),
            Ok(Stored::Landed)
        ));
        let past_end = rig
            .fabric
            .store_move(0, window(a, 32_000, false), b"lost", true);
        assert!(matches!(
            past_end,
            Ok(Stored::Held(MoveError::OutOfRange { .. }))
        ));
        // Another DMB's connection is not affected.
        assert!(matches!(
            rig.fabric
                .store_move(0, window(b, 0, true), b"other", false),
            Ok(Stored::Landed)
        ));
        // Every signal into the failing DMB fails and lands nothing: any of them would
        // advertise the lost bytes. Moves without the signal still land.
        for _ in 0..3 {
            let err = rig.fabric.store_move(0, window(a, 0, true), b"cdc2", false);
            assert!(
                matches!(err, Err(MoveError::Held { token, .. }) if token == a),
                "{err:?}"
            );
            assert_eq!(rig.ram(1, Rig::dmb_offset(32), 4), b"cdc1");
        }
        assert!(matches!(
            rig.fabric
                .store_move(0, window(a, 64, false), b"more", true),
            Ok(Stored::Landed)
        ));
        let moved_a = |c: &String| c.starts_with("moved") && c.contains(&format!("{a:#x}"));
        assert_eq!(rig.sink.calls().iter().filter(|c| moved_a(c)).count(), 2);
        let c = &rig.fabric.function_views()[0].counters;
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
                .store_move(0, window(a, 32_000, signal), b"lost", false);
            assert!(matches!(err, Err(MoveError::OutOfRange { .. })), "{err:?}");
            let ghost = rig
                .fabric
                .store_move(0, window(0x77 << 32, 0, signal), b"x", false);
            assert!(
                matches!(ghost, Err(MoveError::UnknownToken(_))),
                "{ghost:?}"
            );
        }
        assert!(!rig.fabric.lock().functions[0].held.holds(a));
        // ...and the next valid signalling move lands and signals.
        assert!(matches!(
            rig.fabric.store_move(0, window(a, 0, true), b"cdc", false),
            Ok(Stored::Landed)
        ));
        assert_eq!(rig.ram(1, Rig::dmb_offset(32), 3), b"cdc");
        let c = &rig.fabric.function_views()[0].counters;
        assert_eq!((c.moves_held, c.moves_rejected, c.moves_out), (0, 4, 1));
    }

    #[test]
    fn a_held_failure_is_lifted_when_the_owner_resets_the_dmb() {
        let rig = Rig::new(2);
        let a = rig.reg_dmb(1, rig.gid(0), 32);
        rig.fabric
            .store_move(0, window(a, 0, true), b"cdc1", false)
            .unwrap();
        rig.fabric
            .store_move(0, window(a, 32_000, false), b"x", true)
            .unwrap();
        assert!(rig
            .fabric
            .store_move(0, window(a, 0, true), b"cdc2", false)
            .is_err());
        // The owner's kernel zeroes the DMB when the connection releases it (or hands
        // it out again): the next connection's signals land.
        rig.rams[1].write(Rig::dmb_offset(32), &[0; 4]).unwrap();
        assert!(matches!(
            rig.fabric.store_move(0, window(a, 0, true), b"new1", false),
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
            .store_move(0, window(a, 32_000, false), b"x", true)
            .unwrap();
        let unreg = rig.fabric.execute(1, Command::UnregDmb { token: a });
        assert!(unreg.is_ok(), "{unreg:?}");
        assert!(!rig.fabric.lock().functions[0].held.holds(a));

        let b = rig.reg_dmb(1, rig.gid(0), 33);
        rig.fabric
            .store_move(0, window(b, 32_000, false), b"x", true)
            .unwrap();
        rig.fabric.detach(0, "reset", true);
        assert!(!rig.fabric.lock().functions[0].held.holds(b));

        // A failure for a token no DMB has fails the next signal to it, once.
        rig.probe(0);
        let ghost = 0x77 << 32;
        rig.fabric
            .store_move(0, window(ghost, 0, false), b"x", true)
            .unwrap();
        assert!(rig.fabric.lock().functions[0].held.holds(ghost));
        assert!(rig
            .fabric
            .store_move(0, window(ghost, 0, true), b"x", false)
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
                rig.fabric
                    .store_move(0, window(token, 0, false), b"x", true),
                Ok(Stored::Held(MoveError::UnknownToken(_)))
            ));
        }
        let err = rig
            .fabric
            .store_move(0, window(good, 0, true), b"cdc", false);
        assert!(matches!(err, Err(MoveError::Held { .. })), "{err:?}");
        assert!(rig
            .fabric
            .store_move(0, window(good, 0, true), b"cdc", false)
            .is_ok());
    }
}
