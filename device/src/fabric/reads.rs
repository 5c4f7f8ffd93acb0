//! What the fabric takes from outside its own state: guest memory it did not write (the
//! reuse check, the CDC slot of a held failure, the zeroing watch's looks) and the
//! passage of time (a `move-delay`). A live fabric reads them ([`LiveReads`]); a replay
//! gives the fabric the trace's results instead (`record::replay`), through the
//! same trait, so that the fabric has one path for both and no replay mode.

use std::time::{Duration, Instant};

use crate::dmb::FunctionId;
use crate::guest::DmaView;

use crate::ism::cdc;

use super::events::{ReuseCheck, Unread, ZeroScan, ZeroWatch};
use super::{zeroing, Fabric, FabricState};

/// The reuse check's answer under the lock.
pub enum ReuseRead {
    /// Known now (read from a recording, or not readable).
    Found(ReuseCheck),
    /// To be read without the lock, then the move tried again.
    Later(PendingRead),
}

/// A DMB to read for a reuse check, outside the fabric's lock.
pub struct PendingRead(DmaView);

impl PendingRead {
    /// The read: how many bytes of the DMB are not zero, and the first of them.
    pub(super) fn read(self) -> ReuseCheck {
        match self.0.nonzero() {
            Ok((stale, first)) => ReuseCheck::Read { stale, first },
            Err(_) => ReuseCheck::Unknown(Unread::Unreadable),
        }
    }
}

/// Guest memory (and time) as the fabric sees it. Every method but `zero_looks` and
/// `wait` is called under the fabric's lock and must be short.
pub trait GuestReads: Send + Sync {
    /// The observer wants the reuse check before `sender`'s move into DMB `token`.
    fn reuse(&self, st: &mut FabricState, sender: FunctionId, token: u64) -> ReuseRead;
    /// The CDC slot of DMB `token` when a posted move into it fails (None: not known).
    fn cdc_slot(&self, st: &FabricState, token: u64) -> Option<cdc::Area>;
    /// Whether the owner of DMB `token` reset its CDC slot since `sender`'s move into it
    /// failed, when the slot held `then`: the failure is lifted.
    fn slot_reset(
        &self,
        st: &FabricState,
        sender: FunctionId,
        token: u64,
        then: Option<&cdc::Area>,
    ) -> bool;
    /// One tick of the zeroing watch: what each look at the `watch`ed DMBs found. Called
    /// without the fabric's lock.
    fn zero_looks(&self, fabric: &Fabric, watch: Vec<ZeroWatch>) -> Vec<(u64, ZeroScan)>;
    /// A `move-delay` fault holds a move back (without the fabric's lock).
    fn wait(&self, delay: Duration);
}

/// The live device's reads: its guests' memory, within the budgets.
pub struct LiveReads;

impl GuestReads for LiveReads {
    fn reuse(&self, st: &mut FabricState, sender: FunctionId, token: u64) -> ReuseRead {
        let Some(dmb) = st.dmbs.get(&token) else {
            return ReuseRead::Found(ReuseCheck::Unknown(Unread::Unreadable));
        };
        let len = u64::from(dmb.len);
        if !st.functions[sender].reuse_reads.take(Instant::now(), len) {
            return ReuseRead::Found(ReuseCheck::Unknown(Unread::OverBudget));
        }
        match st.functions[dmb.owner].dma.view(dmb.iova, len) {
            Ok(view) => ReuseRead::Later(PendingRead(view)),
            // Part of the DMB is unmapped: the move may still land (the write checks its
            // own bytes), but the reuse cannot be judged.
            Err(_) => ReuseRead::Found(ReuseCheck::Unknown(Unread::NotAllMapped)),
        }
    }

    fn cdc_slot(&self, st: &FabricState, token: u64) -> Option<cdc::Area> {
        read_slot(st, token)
    }

    fn slot_reset(
        &self,
        st: &FabricState,
        _sender: FunctionId,
        token: u64,
        then: Option<&cdc::Area>,
    ) -> bool {
        then.is_some_and(|then| read_slot(st, token).is_some_and(|now| now != *then))
    }

    fn zero_looks(&self, fabric: &Fabric, watch: Vec<ZeroWatch>) -> Vec<(u64, ZeroScan)> {
        zeroing::look_at(fabric, watch)
    }

    fn wait(&self, delay: Duration) {
        std::thread::sleep(delay);
    }
}

/// The CDC slot of DMB `token` as its owner's memory holds it now (zeros past a DMB
/// shorter than the slot); None if there is no such DMB or it is not all mapped.
fn read_slot(st: &FabricState, token: u64) -> Option<cdc::Area> {
    let dmb = st.dmbs.get(&token)?;
    let mut slot = [0; cdc::LEN];
    let len = cdc::LEN.min(dmb.len as usize);
    st.functions[dmb.owner]
        .dma
        .read(dmb.iova, &mut slot[..len])
        .ok()?;
    Some(slot)
}
