//! Fault injection into the fabric: adding and clearing rules, the hooks that ask the
//! plan (commands, moves, interrupts), the actions that act at once (a GID-disabled
//! event) and the thread that raises delayed interrupts. The rules themselves (grammar,
//! triggers) are in [`crate::fault`].

use std::fs::File;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, TrySendError};
use std::time::Instant;

use crate::dmb::{now_us, FunctionId, OpTime};
use crate::fault::{
    FaultKind, FaultPlan, FaultSpec, FaultSpecError, Fired, IrqFault, Peer, RuleView,
};
use crate::ism::status::{gid_code, Event, EventType};
use crate::util::ratelimit::guest_log;

use super::{Fabric, FabricState, FunctionState, Record};

/// Interrupts held back at once by `irq-delay`; beyond that they go out at once.
const DELAYED_IRQS: usize = 1024;

/// What adding a fault did.
#[derive(Debug, PartialEq, Eq)]
pub enum FaultAdded {
    /// A rule, in force from now on, with this id.
    Rule(u32),
    /// An action, done.
    Done,
}

impl Fabric {
    fn function_named(&self, name: &str) -> Result<FunctionId, FaultSpecError> {
        self.identities
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| FaultSpecError::NoSuchFunction(name.to_string()))
    }

    /// Puts a fault in force (a rule) or carries it out (an action).
    pub fn add_fault(&self, spec: FaultSpec) -> Result<FaultAdded, FaultSpecError> {
        // Under the fabric's lock, like every operation a trace records.
        let mut st = self.lock();
        let _op = OpTime::begin();
        let added = self.add_fault_locked(&mut st, &spec)?;
        self.trace(|_| Record::FaultAdd {
            spec: spec.to_string(),
        });
        Ok(added)
    }

    fn add_fault_locked(
        &self,
        st: &mut FabricState,
        spec: &FaultSpec,
    ) -> Result<FaultAdded, FaultSpecError> {
        let receiver = spec
            .function
            .as_deref()
            .map(|f| self.function_named(f))
            .transpose()?;
        if let FaultKind::RegIeqEvent(Peer::Function(name)) = &spec.kind {
            // Named now, so that a typo is refused when the rule is set, not when it fires.
            self.function_named(name)?;
        }
        if let FaultKind::GidDisabled(peer) = &spec.kind {
            let peer_gid = self.peer_gid(peer)?;
            let receiver = receiver.ok_or(FaultSpecError::NoReceiver)?;
            self.inject_gid_disabled(st, receiver, peer_gid, spec)?;
            return Ok(FaultAdded::Done);
        }
        let text = spec.to_string();
        let mut plan = self.plan();
        let id = plan.add(spec.clone()).ok_or(FaultSpecError::TooManyRules)?;
        self.faults_on.store(true, Ordering::SeqCst);
        log::info!("fault rule {id} in force: {text}");
        Ok(FaultAdded::Rule(id))
    }

    /// Like [`Fabric::add_fault`] at start-up, where an action has nobody to act on yet.
    pub fn add_fault_at_start(&self, spec: FaultSpec) -> Result<u32, FaultSpecError> {
        if spec.is_action() {
            return Err(FaultSpecError::ActionAtStart);
        }
        match self.add_fault(spec)? {
            FaultAdded::Rule(id) => Ok(id),
            FaultAdded::Done => Err(FaultSpecError::ActionAtStart),
        }
    }

    /// Removes rule `id`, or all rules; returns how many went.
    pub fn clear_faults(&self, id: Option<u32>) -> usize {
        let _st = self.lock();
        let _op = OpTime::begin();
        self.trace(|_| Record::FaultClear { id });
        let mut plan = self.plan();
        let removed = plan.clear(id);
        self.faults_on.store(!plan.is_empty(), Ordering::SeqCst);
        if removed > 0 {
            log::info!("{removed} fault rule(s) cleared");
        }
        removed
    }

    pub fn faults(&self) -> Vec<RuleView> {
        self.plan().list()
    }

    fn plan(&self) -> std::sync::MutexGuard<'_, FaultPlan> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the plan, if it has rules at all.
    fn ask<T>(&self, question: impl FnOnce(&mut FaultPlan) -> Option<T>) -> Option<T> {
        if !self.faults_on.load(Ordering::Relaxed) {
            return None;
        }
        question(&mut self.plan())
    }

    /// Logs and reports a fault that fired. A rule may fire on every move of a guest:
    /// its lines are within that guest's share of lines.
    fn report(&self, id: FunctionId, token: Option<u64>, fired: &Fired) {
        let (name, gid) = &self.identities[id];
        guest_log!(
            Info,
            name,
            *gid,
            "fault rule {} ({}): {}",
            fired.rule,
            fired.spec,
            fired.detail
        );
        self.events.fault_injected(name, *gid, token, fired);
    }

    /// The return code to fail a command of `id` with, if a fault says so.
    pub(super) fn command_fault(
        &self,
        st: &FabricState,
        id: FunctionId,
        opcode: u32,
    ) -> Option<(u16, u32)> {
        let owned = st.dmbs_owned_by(id);
        let (ret, fired) = self.ask(|plan| plan.command(&self.identities[id].0, opcode, owned))?;
        self.report(id, None, &fired);
        Some((ret, fired.rule))
    }

    /// Whether a fault rejects a move by `sender` to `token`: the rule's id.
    pub(super) fn move_fault(&self, sender: FunctionId, token: u64, signal: bool) -> Option<u32> {
        let fired = self.ask(|plan| plan.reject_move(&self.identities[sender].0, token, signal))?;
        self.report(sender, Some(token), &fired);
        Some(fired.rule)
    }

    /// Holds a move by `sender` back as a fault says (a slow device). Called without the
    /// fabric's lock: the wait is the sender's own thread's.
    pub(super) fn delay_move(&self, sender: FunctionId) {
        if let Some((delay, fired)) = self.ask(|plan| plan.move_delay(&self.identities[sender].0)) {
            self.report(sender, None, &fired);
            // Waited out live; a replay takes the recorded times instead.
            self.reads.wait(delay);
        }
    }

    /// Raises `owner`'s interrupt for a signalling move into `token`, unless a fault drops
    /// or delays it.
    pub(super) fn signal_interrupt(
        &self,
        owner_id: FunctionId,
        owner: &mut FunctionState,
        token: u64,
    ) {
        let fault = self.ask(|plan| plan.irq(&owner.name, token));
        self.trace(|_| Record::Irq {
            f: owner_id,
            token,
            how: match &fault {
                None => "raised",
                Some(IrqFault::Drop(_)) => "dropped",
                Some(IrqFault::Delay(..)) => "delayed",
            }
            .to_string(),
        });
        match fault {
            None => owner.interrupt(),
            Some(IrqFault::Drop(fired)) => self.report(owner_id, Some(token), &fired),
            Some(IrqFault::Delay(delay, fired)) => {
                self.report(owner_id, Some(token), &fired);
                // Without a vector nothing would have gone out now either.
                if let Some(fd) = owner.irq.trigger() {
                    owner.counters.interrupts += 1;
                    self.raise_later(owner_id, Instant::now() + delay, fd);
                }
            }
        }
    }

    /// Hands an interrupt of function `id` to the delay thread (started on first use).
    fn raise_later(&self, id: FunctionId, due: Instant, fd: File) {
        let mut slot = self.irq_delay.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            let (tx, rx) = sync_channel::<(Instant, File, FunctionId)>(DELAYED_IRQS);
            let identities = self.identities.clone();
            let spawned = std::thread::Builder::new()
                .name("irq-delay".into())
                .spawn(move || {
                    // Delays are equal per rule, so the queue is close to due order.
                    for (due, mut fd, id) in rx {
                        if let Some(wait) = due.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                        if let Err(e) = fd.write_all(&1u64.to_ne_bytes()) {
                            let (name, gid) = &identities[id];
                            guest_log!(Warn, name, *gid, "delayed interrupt lost: {e}");
                        }
                    }
                });
            match spawned {
                Ok(_) => *slot = Some(tx),
                Err(e) => log::warn!("irq-delay thread: {e}; interrupts go out at once"),
            }
        }
        let unsent = match slot.as_ref() {
            Some(tx) => match tx.try_send((due, fd, id)) {
                Ok(()) => None,
                Err(TrySendError::Full((_, fd, _)) | TrySendError::Disconnected((_, fd, _))) => {
                    Some(fd)
                }
            },
            None => Some(fd),
        };
        if let Some(mut fd) = unsent {
            let (name, gid) = &self.identities[id];
            guest_log!(
                Warn,
                name,
                *gid,
                "{DELAYED_IRQS} interrupts already delayed: this one goes out now"
            );
            let _ = fd.write_all(&1u64.to_ne_bytes());
        }
    }

    fn peer_gid(&self, peer: &Peer) -> Result<u64, FaultSpecError> {
        Ok(match peer {
            Peer::Function(name) => self.identities[self.function_named(name)?].1,
            Peer::Gid(gid) => *gid,
        })
    }

    /// Queues a GID-disabled event for `peer_gid` at `receiver`, with its interrupt.
    fn post_gid_disabled(
        st: &mut FabricState,
        receiver: FunctionId,
        peer_gid: u64,
    ) -> Result<(), FaultSpecError> {
        let event = Event {
            kind: EventType::Gid,
            code: gid_code::GID_DISABLED,
            tok: peer_gid,
            time: now_us(),
            info: 0,
        };
        let function = &mut st.functions[receiver];
        function
            .post_event(&event, true)
            .map_err(|lost| FaultSpecError::NotDelivered {
                function: function.name.clone(),
                reason: lost.to_string(),
            })
    }

    /// `reg-ieq-event`: function `id` has just registered its event queue; a rule may
    /// queue a GID-disabled event there at once (before the command's reply goes out).
    pub(super) fn reg_ieq_fault(&self, st: &mut FabricState, id: FunctionId) {
        let Some((peer, fired)) = self.ask(|plan| plan.reg_ieq_event(&self.identities[id].0))
        else {
            return;
        };
        self.report(id, None, &fired);
        let posted = self
            .peer_gid(&peer)
            .and_then(|gid| Self::post_gid_disabled(st, id, gid));
        if let Err(e) = posted {
            let (name, gid) = &self.identities[id];
            guest_log!(Warn, name, *gid, "fault rule {}: {e}", fired.rule);
        }
    }

    /// Queues a GID-disabled event for `peer_gid` at `receiver`, as if that peer had gone,
    /// while it may well still be there.
    fn inject_gid_disabled(
        &self,
        st: &mut FabricState,
        receiver: FunctionId,
        peer_gid: u64,
        spec: &FaultSpec,
    ) -> Result<(), FaultSpecError> {
        Self::post_gid_disabled(st, receiver, peer_gid)?;
        let fired = Fired {
            rule: 0,
            spec: spec.to_string(),
            detail: format!("GID-disabled event for {peer_gid:#018x} queued"),
        };
        self.report(receiver, None, &fired);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::time::Duration;

    use nix::sys::eventfd::{EfdFlags, EventFd};
    use vfio_bindings::bindings::vfio::{
        VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_MSI_IRQ_INDEX,
    };

    use super::*;
    use crate::fabric::{MoveError, Stored};
    use crate::ism::command::{Command, CommandError};
    use crate::testkit::rig::Rig;
    use crate::testkit::window;

    fn add(rig: &Rig, text: &str) -> FaultAdded {
        rig.fabric
            .add_fault(FaultSpec::parse(text).unwrap())
            .unwrap()
    }

    /// Gives function `id` an MSI vector; returns its eventfd.
    fn msi(rig: &Rig, id: FunctionId) -> EventFd {
        let efd = EventFd::from_flags(EfdFlags::EFD_NONBLOCK).unwrap();
        let file = File::from(efd.as_fd().try_clone_to_owned().unwrap());
        let flags = VFIO_IRQ_SET_ACTION_TRIGGER | VFIO_IRQ_SET_DATA_EVENTFD;
        rig.fabric
            .set_irqs(id, VFIO_PCI_MSI_IRQ_INDEX, flags, 0, 1, vec![file])
            .unwrap();
        efd
    }

    #[test]
    fn a_command_fault_answers_its_code_once_and_is_reported() {
        let rig = Rig::new(2);
        assert_eq!(
            add(&rig, "cmd=reg_dmb@ism1,rc=0x6,next=1"),
            FaultAdded::Rule(1)
        );
        let err = rig.try_reg_dmb(1, rig.gid(0), 16384, 32).unwrap_err();
        assert_eq!(err, CommandError::Injected { ret: 6, rule: 1 });
        assert_eq!(err.ret(), 6);
        assert_eq!(
            rig.sink.last(),
            "fault 1 at ism1: REG_DMB failed with ret 0x0006"
        );
        assert_eq!(rig.fabric.function_views()[1].counters.command_errors, 1);
        rig.reg_dmb(1, rig.gid(0), 32);
        rig.reg_dmb(0, rig.gid(1), 32);
        let list = rig.fabric.faults();
        assert_eq!((list[0].seen, list[0].fired, list[0].spent), (1, 1, true));
    }

    #[test]
    fn rgid_unknown_and_dmb_limit_fail_only_their_commands() {
        let rig = Rig::new(2);
        add(&rig, "rgid-unknown@ism0");
        add(&rig, "dmb-limit@ism0,max=1");
        let query = Command::QueryRgid {
            rgid: rig.gid(1),
            vlan_valid: 0,
            vlan_id: 0,
        };
        let err = rig.fabric.execute(0, query).unwrap_err();
        assert_eq!(err.ret(), 0x0007);
        assert!(rig.fabric.execute(1, query).is_ok(), "ism1 is not faulted");
        rig.reg_dmb(0, rig.gid(1), 32);
        let err = rig.try_reg_dmb(0, rig.gid(1), 16384, 33).unwrap_err();
        assert_eq!(err, CommandError::Injected { ret: 6, rule: 2 });
        assert_eq!(rig.fabric.dmbs().len(), 1);
    }

    #[test]
    fn a_rejected_move_writes_nothing_and_a_posted_one_is_held() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        add(&rig, &format!("move@ism0,token={token:#x},next=2"));
        let err = rig
            .move_data(0, window(token, 0, true), b"abc")
            .unwrap_err();
        assert!(matches!(err, MoveError::Injected { rule: 1, .. }), "{err}");
        assert_eq!(rig.ram(1, Rig::dmb_offset(32), 3), [0, 0, 0]);
        // Posted (QEMU posts moves without the signal with x-ism-post=on): held, and
        // the next signal fails.
        let stored = rig
            .fabric
            .store_move(0, window(token, 0, false), b"abc", true)
            .unwrap();
        assert!(matches!(stored, Stored::Held(MoveError::Injected { .. })));
        let held = rig
            .fabric
            .store_move(0, window(token, 0, true), b"x", false)
            .unwrap_err();
        assert!(matches!(held, MoveError::Held { .. }), "{held}");
        // The rule is spent: moves land again (one without the signal: the held failure
        // still refuses the signalling ones).
        rig.move_data(0, window(token, 0, false), b"abc").unwrap();
        assert_eq!(rig.ram(1, Rig::dmb_offset(32), 3), b"abc");
        let faults = rig.sink.calls();
        let faults: Vec<_> = faults.iter().filter(|c| c.starts_with("fault")).collect();
        assert_eq!(faults.len(), 2, "{faults:?}");
    }

    #[test]
    fn a_dropped_interrupt_is_not_raised_but_the_data_and_sba_bits_land() {
        let rig = Rig::new(2);
        let efd = msi(&rig, 1);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        add(&rig, "irq-drop@ism1,next=1");
        rig.move_data(0, window(token, 0, true), b"abc").unwrap();
        assert_eq!(rig.ram(1, Rig::dmb_offset(32), 3), b"abc");
        assert!(efd.read().is_err(), "no interrupt");
        rig.move_data(0, window(token, 0, true), b"def").unwrap();
        assert_eq!(efd.read().unwrap(), 1, "the next one goes out");
    }

    #[test]
    fn a_delayed_interrupt_comes_later() {
        let rig = Rig::new(2);
        let efd = msi(&rig, 1);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        add(&rig, "irq-delay@ism1,us=100000");
        rig.move_data(0, window(token, 0, true), b"abc").unwrap();
        assert!(efd.read().is_err(), "not yet");
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(efd.read().unwrap(), 1);
    }

    #[test]
    fn a_delayed_move_waits_without_the_lock() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        add(&rig, "move-delay@ism0,us=200000");
        let started = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| rig.move_data(0, window(token, 0, true), b"abc").unwrap());
            std::thread::sleep(Duration::from_millis(50));
            // The fabric stays usable meanwhile.
            let locked = Instant::now();
            drop(rig.fabric.lock());
            assert!(locked.elapsed() < Duration::from_millis(100));
        });
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(rig.ram(1, Rig::dmb_offset(32), 3), b"abc");
    }

    #[test]
    fn gid_disabled_is_queued_at_once_for_a_peer_still_there() {
        let rig = Rig::new(2);
        assert_eq!(add(&rig, "gid-disabled@ism0,peer=ism1"), FaultAdded::Done);
        let (idx, entry) = rig.ieq(0, 0);
        assert_eq!(idx, 1);
        assert_eq!(entry.kind.get(), EventType::Gid as u32);
        assert_eq!(entry.code.get(), gid_code::GID_DISABLED);
        assert_eq!(entry.tok.get(), rig.gid(1));
        assert!(
            rig.fabric.function_views()[1].attached,
            "the peer is still there"
        );
        assert!(rig.fabric.faults().is_empty(), "an action is not a rule");
    }

    /// The dibs lock scenario's device side (docs/known-bugs.md, 1): an event and its
    /// interrupt as the driver's REG_IEQ completes, before it can do anything else.
    #[test]
    fn reg_ieq_event_queues_the_event_as_the_queue_is_registered() {
        let rig = Rig::new(2);
        let efd = msi(&rig, 0);
        assert_eq!(
            add(&rig, "reg-ieq-event@ism0,peer=ism1,next=1"),
            FaultAdded::Rule(1)
        );
        assert_eq!(rig.ieq(0, 0).0, 0, "nothing before the registration");
        // The driver's probe again (a reset): SBA, then IEQ.
        rig.probe(0);
        let (idx, entry) = rig.ieq(0, 0);
        assert_eq!(idx, 1);
        assert_eq!(entry.kind.get(), EventType::Gid as u32);
        assert_eq!(entry.code.get(), gid_code::GID_DISABLED);
        assert_eq!(entry.tok.get(), rig.gid(1));
        assert_eq!(efd.read().unwrap(), 1, "its interrupt");
        assert!(rig
            .sink
            .last()
            .contains("as the event queue was registered"));
        // Spent after one: the next registration gets no event.
        rig.probe(0);
        let events = |id: FunctionId| rig.fabric.function_views()[id].counters.events_in;
        assert_eq!(events(0), 1, "no second event");
        assert!(rig.fabric.faults()[0].spent);
        // Only the function named: ism1's registration is untouched.
        rig.probe(1);
        assert_eq!(events(1), 0);
    }

    #[test]
    fn faults_name_functions_that_exist_and_actions_need_a_running_fabric() {
        let rig = Rig::new(1);
        let spec = |t: &str| FaultSpec::parse(t).unwrap();
        assert_eq!(
            rig.fabric.add_fault(spec("move@ism7")).unwrap_err(),
            FaultSpecError::NoSuchFunction("ism7".into())
        );
        assert_eq!(
            rig.fabric
                .add_fault(spec("gid-disabled@ism0,peer=ism3"))
                .unwrap_err(),
            FaultSpecError::NoSuchFunction("ism3".into())
        );
        assert_eq!(
            rig.fabric
                .add_fault_at_start(spec("gid-disabled@ism0,peer=0x5"))
                .unwrap_err(),
            FaultSpecError::ActionAtStart
        );
        assert_eq!(
            rig.fabric
                .add_fault_at_start(spec("reg-ieq-event@ism0,peer=ism3"))
                .unwrap_err(),
            FaultSpecError::NoSuchFunction("ism3".into())
        );
        assert_eq!(rig.fabric.add_fault_at_start(spec("irq-drop")).unwrap(), 1);
        assert_eq!(
            rig.fabric
                .add_fault_at_start(spec("reg-ieq-event@ism0,peer=0x5"))
                .unwrap(),
            2,
            "a rule, in force from the start"
        );
        assert_eq!(rig.fabric.clear_faults(None), 2);
    }
}
