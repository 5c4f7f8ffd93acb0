//! The fabric: every ISM function of one emulated machine (one CHID), the DMBs they
//! registered, and the routing of data moves and events between their guests' memories.
//!
//! This is the only state shared between functions, behind one lock, never held across a
//! socket write. What the lock covers is listed in docs/architecture.md ("One lock").
//! The fabric reports what happens through an [`EventSink`] (the observer) and a
//! [`Recorder`] (a trace), and reads what is not its own state (guest memory it did not
//! write, time to wait) through [`GuestReads`]: live, or a trace's in a replay. It knows
//! nothing above it. Commands are in `commands`, data moves in `moves`, held failures of
//! posted moves in `held`, the zeroing watch in `zeroing`, injected faults in `inject`;
//! the event seam and its types in `events`, the trace's in `recorder`, the guest reads
//! in `reads`, the functions' counters and views in `view`.

mod commands;
mod events;
mod held;
mod inject;
mod late_writes;
mod moves;
mod reads;
mod recorder;
mod view;
mod zeroing;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use crate::dmb::{now_us, Dmb, FunctionId, OpTime};
use crate::fault::FaultPlan;
use crate::guest::interrupts::{Interrupts, IrqError};
use crate::guest::{DmaError, DmaSpace};
use crate::ism::status::{gid_code, Event, EventType, Ieq, Sba};
use crate::util::ratelimit::{guest_log, Budget};

pub use events::{
    EventSink, Kept, LateWrites, ReuseCheck, Unread, VlanChange, ZeroScan, ZeroWatch,
};
pub use held::{HeldFailures, HELD_TOKENS};
pub use inject::FaultAdded;
pub use moves::{MoveError, Stored};
pub use reads::{GuestReads, LiveReads, PendingRead, ReuseRead};
pub use recorder::{MoveResult, MoveVia, Record, Recorder};
pub use view::{Counters, FunctionView};
pub use zeroing::ZERO_SCAN_BUDGET;

/// One function's device state, as far as other functions can see it. Outside the
/// fabric it is seen through [`Fabric::function_views`].
pub struct FunctionState {
    pub(crate) name: String,
    pub(crate) gid: u64,
    pub(crate) attached: bool,
    pub(crate) dma: DmaSpace,
    pub(crate) sba: Option<Sba>,
    pub(crate) ieq: Option<Ieq>,
    pub(crate) irq: Interrupts,
    pub(crate) vlans: BTreeSet<u64>,
    pub(crate) vlan_required: bool,
    pub(crate) counters: Counters,
    /// Bytes of DMBs this function's moves may have read for reuse checks.
    pub(crate) reuse_reads: Budget,
    /// SIGNAL_IEQs this function may send.
    pub(crate) signals: Budget,
    /// Counts detaches (disconnects, resets): a grant (a DMB registered for this
    /// function's GID) holds for the generation it was made in only, not for the next
    /// client. A grant made while no client is attached holds for the next one.
    pub(crate) generation: u64,
    /// Failures of its moves without the signal, refusing its signalling moves into their
    /// DMBs until the owner resets them.
    held: HeldFailures,
}

/// SIGNAL_IEQ per sending function: a burst of 8, then 100 a second. The target's IEQ
/// has 15 slots; a flood must not overwrite the GID events it holds.
pub const SIGNAL_RATE: u64 = 100;
pub const SIGNAL_BURST: u64 = 8;

/// Reuse checks read at most this many bytes per second per sending function (a burst of
/// `REUSE_READ_BURST`); beyond it a reuse is reported unchecked, not read.
pub const REUSE_READ_RATE: u64 = 64 << 20;
pub const REUSE_READ_BURST: u64 = 16 << 20;

impl FunctionState {
    fn new(name: String, gid: u64) -> Self {
        Self {
            name,
            gid,
            attached: false,
            dma: DmaSpace::new(),
            sba: None,
            ieq: None,
            irq: Interrupts::default(),
            vlans: BTreeSet::new(),
            vlan_required: false,
            counters: Counters::default(),
            reuse_reads: Budget::new(REUSE_READ_RATE, REUSE_READ_BURST),
            signals: Budget::new(SIGNAL_RATE, SIGNAL_BURST),
            generation: 0,
            held: HeldFailures::default(),
        }
    }

    /// Forgets everything the guest set up (reset or disconnect); counters survive.
    fn clear(&mut self) {
        self.dma.clear();
        self.sba = None;
        self.ieq = None;
        self.irq.clear();
        self.vlans.clear();
        self.vlan_required = false;
        self.held.clear();
    }

    /// Raises the function's interrupt and counts it when it went out.
    fn interrupt(&mut self) {
        match self.irq.raise() {
            Ok(true) => self.counters.interrupts += 1,
            Ok(false) => {}
            Err(e) => guest_log!(Warn, self.name, self.gid, "{e}"),
        }
    }

    /// Queues an event and raises the interrupt. Lost events are logged, not fatal: the
    /// guest may have unregistered its queue or unmapped it. Whoever asked for the event
    /// learns why it was lost (a host's `fault add` must not report it as done).
    fn post_event(&mut self, event: &Event, interrupt: bool) -> Result<(), EventLost> {
        let (Some(ieq), Some(sba)) = (self.ieq.as_mut(), self.sba) else {
            guest_log!(
                Warn,
                self.name,
                self.gid,
                "{event} dropped: no IEQ/SBA registered"
            );
            return Err(EventLost::NoQueue);
        };
        if let Err(e) = ieq
            .push(&self.dma, event)
            .and_then(|()| sba.set_event_pending(&self.dma))
        {
            guest_log!(Warn, self.name, self.gid, "{event} dropped: {e}");
            return Err(EventLost::Dma(e));
        }
        self.counters.events_in += 1;
        if interrupt {
            self.interrupt();
        }
        Ok(())
    }
}

/// Why an event did not reach a function's event queue.
#[derive(Debug, thiserror::Error)]
pub enum EventLost {
    #[error("the function has no event queue (no guest driver registered its IEQ and SBA)")]
    NoQueue,
    // The cause in the message, not as a source: this error ends up as text in a
    // control socket's answer.
    #[error("its event queue could not be written: {0}")]
    Dma(DmaError),
}

/// The state behind the fabric's lock. Its fields are the fabric's (and the testkit's):
/// others see it through [`Fabric::function_views`] and [`Fabric::dmbs`].
pub struct FabricState {
    pub(crate) functions: Vec<FunctionState>,
    pub(crate) dmbs: BTreeMap<u64, Dmb>,
    next_token: u64,
}

impl FabricState {
    fn dmbs_owned_by(&self, id: FunctionId) -> usize {
        self.dmbs.values().filter(|d| d.owner == id).count()
    }
}

pub struct Fabric {
    chid: u16,
    state: Mutex<FabricState>,
    events: Arc<dyn EventSink>,
    /// Name and GID of each function, fixed: read without the lock.
    identities: Vec<(String, u64)>,
    /// Injected faults (`faults`). Taken after `state` when both are held.
    faults: Mutex<FaultPlan>,
    /// Whether `faults` holds any rule: the hot paths skip it otherwise.
    faults_on: AtomicBool,
    /// Interrupts an `irq-delay` fault holds back, to the thread that raises them later.
    irq_delay: Mutex<Option<SyncSender<(Instant, File, FunctionId)>>>,
    /// Records every operation when set (`serve --trace`).
    tracer: OnceLock<Box<dyn Recorder>>,
    /// Guest memory the fabric did not write, and time: live, or a trace's.
    reads: Arc<dyn GuestReads>,
}

impl Fabric {
    /// A fabric of the given `(name, gid)` functions; a function's id is its position.
    pub fn new(chid: u16, functions: Vec<(String, u64)>, events: Arc<dyn EventSink>) -> Self {
        Self::with_reads(chid, functions, events, Arc::new(LiveReads))
    }

    /// The same, reading guest memory (and waiting) through `reads` (a replay's are the
    /// trace's).
    pub fn with_reads(
        chid: u16,
        functions: Vec<(String, u64)>,
        events: Arc<dyn EventSink>,
        reads: Arc<dyn GuestReads>,
    ) -> Self {
        let identities = functions.clone();
        let functions = functions
            .into_iter()
            .map(|(name, gid)| FunctionState::new(name, gid))
            .collect();
        Self {
            chid,
            state: Mutex::new(FabricState {
                functions,
                dmbs: BTreeMap::new(),
                next_token: 1,
            }),
            events,
            identities,
            faults: Mutex::new(FaultPlan::default()),
            faults_on: AtomicBool::new(false),
            irq_delay: Mutex::new(None),
            tracer: OnceLock::new(),
            reads,
        }
    }

    /// Records every operation from now on (before the functions serve).
    pub fn set_tracer(&self, tracer: impl Recorder + 'static) {
        if self.tracer.set(Box::new(tracer)).is_err() {
            log::warn!("a tracer was set already; the second one is ignored");
        }
    }

    pub fn tracer(&self) -> Option<&dyn Recorder> {
        self.tracer.get().map(|t| &**t)
    }

    /// Records an operation, if tracing (the record is built only then).
    fn trace(&self, record: impl FnOnce(&dyn Recorder) -> Record) {
        if let Some(tracer) = self.tracer.get() {
            tracer.record(record(&**tracer));
        }
    }

    pub fn chid(&self) -> u16 {
        self.chid
    }

    /// The state. A poisoned lock is still usable: every update leaves the state
    /// consistent before anything can panic.
    pub(crate) fn lock(&self) -> MutexGuard<'_, FabricState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Name and GID of function `id`; fixed for the fabric's life.
    pub fn identity(&self, id: FunctionId) -> (String, u64) {
        self.identities[id].clone()
    }

    /// Every function as the snapshot shows it.
    pub fn function_views(&self) -> Vec<FunctionView> {
        let st = self.lock();
        st.functions
            .iter()
            .enumerate()
            .map(|(id, f)| FunctionView {
                name: f.name.clone(),
                gid: f.gid,
                attached: f.attached,
                sba: f.sba.map(|s| s.iova),
                ieq: f.ieq.map(|q| q.iova),
                interrupt_enabled: f.irq.enabled(),
                mapped_bytes: f.dma.mapped_bytes(),
                dmbs_owned: st.dmbs_owned_by(id),
                counters: f.counters.clone(),
            })
            .collect()
    }

    /// The registered DMBs, by token.
    pub fn dmbs(&self) -> Vec<Dmb> {
        self.lock().dmbs.values().cloned().collect()
    }

    /// The DMB registered with `token`, if any.
    pub fn dmb(&self, token: u64) -> Option<Dmb> {
        self.lock().dmbs.get(&token).cloned()
    }

    pub fn attach(&self, id: FunctionId) {
        let mut st = self.lock();
        let _op = OpTime::begin();
        self.trace(|_| Record::Attach { f: id });
        let f = &mut st.functions[id];
        f.attached = true;
        f.counters.attaches += 1;
        guest_log!(Info, f.name, f.gid, "client attached");
        self.events.function_attached(&f.name, f.gid);
    }

    /// The function's client went away or reset it: drop its DMBs and mappings and tell
    /// every peer that shared DMBs with it, so their connections abort instead of hanging.
    pub fn detach(&self, id: FunctionId, reason: &str, still_attached: bool) {
        let mut st = self.lock();
        let _op = OpTime::begin();
        self.trace(|_| Record::Detach {
            f: id,
            reason: reason.to_string(),
            still_attached,
        });
        let st = &mut *st;
        let gid = st.functions[id].gid;
        let mut peers = BTreeSet::new();
        let owned: Vec<u64> = st
            .dmbs
            .values()
            .filter(|d| d.owner == id)
            .map(|d| d.token)
            .collect();
        for token in &owned {
            if let Some(dmb) = st.dmbs.remove(token) {
                peers.insert(dmb.rgid);
                self.events.dmb_gone(&dmb, reason, &st.functions[id].name);
            }
            for f in &mut st.functions {
                f.held.forget(*token);
            }
        }
        for dmb in st.dmbs.values().filter(|d| d.rgid == gid) {
            peers.insert(dmb.owner_gid);
        }
        peers.remove(&gid);
        let f = &mut st.functions[id];
        let had_state = f.sba.is_some() || f.dma.mapped_bytes() > 0;
        f.clear();
        // Grants to this function end here, whether or not the owner ever hears of it.
        f.generation += 1;
        f.attached = still_attached;
        if had_state || !still_attached {
            // A guest can reset its function at will: its line is within its share.
            guest_log!(
                Info,
                f.name,
                gid,
                "{reason}; notifying {} peer(s)",
                peers.len()
            );
            self.events.function_detached(&f.name, gid, reason);
        }
        let event = Event {
            kind: EventType::Gid,
            code: gid_code::GID_DISABLED,
            tok: gid,
            time: now_us(),
            info: 0,
        };
        for peer in st
            .functions
            .iter_mut()
            .filter(|p| p.attached && peers.contains(&p.gid))
        {
            // Lost events are logged by post_event; the reset goes on regardless.
            let _ = peer.post_event(&event, true);
        }
    }

    pub fn dma_map(
        &self,
        id: FunctionId,
        iova: u64,
        size: u64,
        file: Option<std::fs::File>,
        offset: u64,
        writable: bool,
    ) -> Result<(), DmaError> {
        let mut st = self.lock();
        let _op = OpTime::begin();
        st.functions[id]
            .dma
            .map(iova, size, file, offset, writable)?;
        // Only a mapping that took: a refused one changed nothing.
        self.trace(|_| Record::DmaMap {
            f: id,
            iova,
            size,
            writable,
        });
        Ok(())
    }

    pub fn dma_unmap(&self, id: FunctionId, iova: u64, size: u64) -> u64 {
        let mut st = self.lock();
        let _op = OpTime::begin();
        self.trace(|_| Record::DmaUnmap { f: id, iova, size });
        st.functions[id].dma.unmap(iova, size)
    }

    pub fn dma_unmap_all(&self, id: FunctionId) {
        let mut st = self.lock();
        let _op = OpTime::begin();
        self.trace(|_| Record::DmaUnmapAll { f: id });
        st.functions[id].dma.clear();
    }

    pub fn set_irqs(
        &self,
        id: FunctionId,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<std::fs::File>,
    ) -> Result<(), IrqError> {
        self.lock().functions[id]
            .irq
            .set(index, flags, start, count, fds)
    }
}

#[cfg(test)]
mod tests {
    use crate::ism::status::{gid_code, EventType};
    use crate::testkit::rig::Rig;

    #[test]
    fn detach_drops_the_dmbs_and_tells_the_peer_whose_dmb_it_used() {
        let rig = Rig::new(3);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        rig.fabric.detach(1, "client disconnected", false);
        assert!(rig.fabric.dmbs().is_empty());
        let (idx, entry) = rig.ieq(0, 0);
        assert_eq!(idx, 1, "ism0 shared a DMB with ism1");
        assert_eq!(entry.kind.get(), EventType::Gid as u32);
        assert_eq!(entry.code.get(), gid_code::GID_DISABLED);
        assert_eq!(entry.tok.get(), rig.gid(1));
        assert_eq!(rig.ieq(2, 0).0, 0, "ism2 shared nothing and hears nothing");
        let calls = rig.sink.calls();
        assert!(calls.contains(&format!("gone {token:#x}: client disconnected")));
        assert!(calls.contains(&"detached ism1: client disconnected".to_string()));
    }

    #[test]
    fn reset_of_a_function_that_set_nothing_up_is_not_reported() {
        let rig = Rig::new(1);
        rig.fabric.detach(0, "function reset", true);
        rig.fabric.detach(0, "function reset", true);
        let detached = rig.sink.calls().into_iter();
        assert_eq!(detached.filter(|c| c.starts_with("detached")).count(), 1);
        assert!(rig.fabric.function_views()[0].attached);
    }

    #[test]
    fn function_views_show_mappings_registrations_and_owned_dmbs() {
        let rig = Rig::new(2);
        rig.reg_dmb(1, rig.gid(0), 32);
        let views = rig.fabric.function_views();
        assert_eq!(views[1].gid, rig.gid(1));
        assert_eq!(views[1].dmbs_owned, 1);
        assert_eq!(views[0].dmbs_owned, 0);
        assert_eq!(views[0].sba, Some(crate::testkit::rig::BASE));
        assert_eq!(views[0].mapped_bytes, crate::testkit::rig::RAM_SIZE);
        assert!(views[0].attached && !views[0].interrupt_enabled);
    }
}
