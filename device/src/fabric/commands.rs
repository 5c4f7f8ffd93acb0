//! Executing ISM commands against the fabric.

use std::time::Instant;

use crate::dmb::{now_us, Dmb, FunctionId, OpTime};
use crate::ism::command::{Command, CommandError, DmbRequest, QueryInfo, Response};
use crate::ism::status::{Event, EventType, Ieq, Sba, IEQ_LEN, SBA_LEN};
use crate::ism::wire::MAX_VLAN_IDS;
use crate::ism::{MAX_DMB_LEN, MOVE_WINDOW_SHIFT};

use super::{Fabric, FabricState, Record, VlanChange};

/// Tokens are `n << 32` with `1 <= n < 2^(MOVE_WINDOW_SHIFT - 32)`.
const MAX_TOKEN_INDEX: u64 = (1 << (MOVE_WINDOW_SHIFT - 32)) - 1;

impl Fabric {
    /// Executes one command for function `id`.
    pub fn execute(&self, id: FunctionId, cmd: Command) -> Result<Response, CommandError> {
        let mut st = self.lock();
        let _op = OpTime::begin();
        let st = &mut *st;
        st.functions[id].counters.commands += 1;
        let result = match self.command_fault(st, id, cmd.opcode()) {
            Some((ret, rule)) => Err(CommandError::Injected { ret, rule }),
            None => self.execute_locked(st, id, cmd),
        };
        if result.is_ok() && matches!(cmd, Command::RegIeq { .. }) {
            self.reg_ieq_fault(st, id);
        }
        if result.is_err() {
            st.functions[id].counters.command_errors += 1;
        }
        self.trace(|_| Record::Cmd {
            f: id,
            cmd,
            ret: result.as_ref().err().map_or(0, CommandError::ret),
        });
        result
    }

    /// Counts a command that failed before it reached the fabric (unknown opcode, wrong
    /// length, bad field): the host's view must show every failed command.
    pub fn command_undecodable(&self, id: FunctionId) {
        let mut st = self.lock();
        let _op = OpTime::begin();
        self.trace(|_| Record::Undecodable { f: id });
        let counters = &mut st.functions[id].counters;
        counters.commands += 1;
        counters.command_errors += 1;
    }

    fn execute_locked(
        &self,
        st: &mut FabricState,
        id: FunctionId,
        cmd: Command,
    ) -> Result<Response, CommandError> {
        let f = &mut st.functions[id];
        match cmd {
            Command::RegSba { iova } => {
                if !f.dma.is_writable(iova, SBA_LEN) {
                    return Err(CommandError::Unmapped { iova, len: SBA_LEN });
                }
                f.sba = Some(Sba { iova });
                Ok(Response::Empty)
            }
            Command::RegIeq { iova, len } => {
                if len < IEQ_LEN {
                    return Err(CommandError::BadArgument("IEQ shorter than 15 entries"));
                }
                // The whole queue, not just the header: the entries are written later.
                let unmapped = CommandError::Unmapped { iova, len: IEQ_LEN };
                if !f.dma.is_writable(iova, IEQ_LEN) {
                    return Err(unmapped);
                }
                let ieq = Ieq::register(&f.dma, iova).map_err(|_| unmapped)?;
                f.ieq = Some(ieq);
                Ok(Response::Empty)
            }
            Command::ReadGid => Ok(Response::Gid(f.gid)),
            Command::AddVlanId(vlan) => {
                if f.vlans.len() >= MAX_VLAN_IDS && !f.vlans.contains(&vlan) {
                    return Err(CommandError::VlanTableFull);
                }
                if f.vlans.insert(vlan) {
                    self.events
                        .vlan_changed(&f.name, f.gid, VlanChange::Added(vlan));
                }
                Ok(Response::Empty)
            }
            Command::DelVlanId(vlan) => {
                if f.vlans.remove(&vlan) {
                    self.events
                        .vlan_changed(&f.name, f.gid, VlanChange::Deleted(vlan));
                }
                Ok(Response::Empty)
            }
            Command::SetVlan | Command::ResetVlan => {
                let required = matches!(cmd, Command::SetVlan);
                if f.vlan_required != required {
                    f.vlan_required = required;
                    self.events
                        .vlan_changed(&f.name, f.gid, VlanChange::Required(required));
                }
                Ok(Response::Empty)
            }
            Command::QueryInfo => {
                let gid = f.gid;
                let owned = st.dmbs_owned_by(id) as u32;
                let used = st
                    .dmbs
                    .values()
                    .filter(|d| d.rgid == gid && d.owner != id)
                    .count() as u32;
                let f = &st.functions[id];
                Ok(Response::QueryInfo(QueryInfo {
                    version: 1,
                    max_len: MAX_DMB_LEN,
                    state: u64::from(f.sba.is_some()),
                    my_gid: gid,
                    sba: f.sba.map_or(0, |s| s.iova),
                    ieq: f.ieq.map_or(0, |q| q.iova),
                    ieq_len: if f.ieq.is_some() { IEQ_LEN as u32 } else { 0 },
                    dmbs_owned: owned,
                    dmbs_used: used,
                    vlan_required: u32::from(f.vlan_required),
                    vlan_ids: f.vlans.iter().map(|&v| v as u16).collect(),
                }))
            }
            Command::QueryRgid { rgid, .. } => {
                if st.functions.iter().any(|p| p.attached && p.gid == rgid) {
                    Ok(Response::Empty)
                } else {
                    Err(CommandError::UnknownGid(rgid))
                }
            }
            Command::RegDmb(req) => self.register_dmb(st, id, req),
            Command::UnregDmb { token } => {
                match st.dmbs.get(&token) {
                    Some(dmb) if dmb.owner == id => {}
                    _ => return Err(CommandError::UnknownToken(token)),
                }
                if let Some(dmb) = st.dmbs.remove(&token) {
                    self.events
                        .dmb_gone(&dmb, "unregistered", &st.functions[id].name);
                }
                for f in &mut st.functions {
                    f.held.forget(token);
                }
                Ok(Response::Empty)
            }
            Command::SignalIeq {
                rgid,
                trigger_irq,
                event_code,
                info,
            } => {
                if !f.signals.take(Instant::now(), 1) {
                    return Err(CommandError::RateLimited);
                }
                let sender = f.gid;
                let target = st
                    .functions
                    .iter_mut()
                    .find(|p| p.attached && p.gid == rgid)
                    .ok_or(CommandError::UnknownGid(rgid))?;
                let event = Event {
                    kind: EventType::Software,
                    code: event_code,
                    tok: sender,
                    time: now_us(),
                    info,
                };
                // The sender's command is answered whatever became of the event at the
                // target (its guest's business); post_event logs a loss.
                let _ = target.post_event(&event, trigger_irq != 0);
                Ok(Response::Empty)
            }
            Command::UnregSba => f
                .sba
                .take()
                .map(|_| Response::Empty)
                .ok_or(CommandError::NotRegistered),
            Command::UnregIeq => f
                .ieq
                .take()
                .map(|_| Response::Empty)
                .ok_or(CommandError::NotRegistered),
        }
    }

    fn register_dmb(
        &self,
        st: &mut FabricState,
        id: FunctionId,
        req: DmbRequest,
    ) -> Result<Response, CommandError> {
        let f = &st.functions[id];
        if !f.dma.is_writable(req.iova, u64::from(req.len)) {
            return Err(CommandError::Unmapped {
                iova: req.iova,
                len: u64::from(req.len),
            });
        }
        if st
            .dmbs
            .values()
            .any(|d| d.owner == id && d.sba_idx == req.sba_idx)
        {
            return Err(CommandError::SbaIndexInUse(req.sba_idx));
        }
        // `is_writable` checked that the range does not wrap. Overlapping DMBs would let a
        // guest multiply the memory the observer watches without having it.
        let end = req.iova + u64::from(req.len);
        if st
            .dmbs
            .values()
            .any(|d| d.owner == id && d.iova < end && req.iova < d.iova + u64::from(d.len))
        {
            return Err(CommandError::BadArgument(
                "DMB overlaps another DMB of this function",
            ));
        }
        // Tokens rotate through the whole space so that a freed token is not handed out
        // again at once: a late move to an old token then fails instead of corrupting.
        let mut index = None;
        for i in 0..MAX_TOKEN_INDEX {
            let n = (st.next_token - 1 + i) % MAX_TOKEN_INDEX + 1;
            if !st.dmbs.contains_key(&(n << 32)) {
                index = Some(n);
                break;
            }
        }
        let n = index.ok_or(CommandError::NoToken)?;
        st.next_token = n % MAX_TOKEN_INDEX + 1;
        let dmb = Dmb {
            token: n << 32,
            owner: id,
            owner_gid: f.gid,
            rgid: req.rgid,
            rgid_generation: st
                .functions
                .iter()
                .find(|p| p.gid == req.rgid)
                .map(|p| p.generation),
            iova: req.iova,
            len: req.len,
            sba_idx: req.sba_idx,
            vlan_valid: req.vlan_valid != 0,
            vlan_id: req.vlan_id,
            registered_at_us: now_us(),
        };
        log::debug!(
            "{} (gid {:#018x}): DMB token {:#x} registered: {} bytes at IOVA {:#x}, sba_idx {}, peer {:#018x}",
            f.name, f.gid, dmb.token, dmb.len, dmb.iova, dmb.sba_idx, dmb.rgid
        );
        self.events.dmb_registered(&dmb, &f.name);
        let token = dmb.token;
        st.dmbs.insert(token, dmb);
        Ok(Response::Token(token))
    }
}

#[cfg(test)]
mod tests {
    use crate::ism::command::{Command, CommandError, DmbRequest, Response};
    use crate::ism::status::EventType;
    use crate::ism::wire::MAX_VLAN_IDS;
    use crate::testkit::rig::{Rig, BASE, RAM_SIZE};

    #[test]
    fn read_gid_answers_the_functions_own_gid() {
        let rig = Rig::new(2);
        let gid = rig.fabric.execute(1, Command::ReadGid);
        assert_eq!(gid, Ok(Response::Gid(rig.gid(1))));
    }

    #[test]
    fn tokens_leave_the_low_32_bits_to_the_move_address() {
        let rig = Rig::new(1);
        let token = rig.reg_dmb(0, rig.gid(0), 32);
        assert_eq!(token & 0xffff_ffff, 0);
        assert_eq!(
            rig.sink.calls().last().unwrap(),
            &format!("registered {token:#x} by ism0")
        );
    }

    #[test]
    fn a_freed_token_is_not_handed_out_again_at_once() {
        let rig = Rig::new(1);
        let first = rig.reg_dmb(0, 7, 32);
        let unreg = Command::UnregDmb { token: first };
        assert_eq!(rig.fabric.execute(0, unreg), Ok(Response::Empty));
        assert_ne!(rig.reg_dmb(0, 7, 32), first);
    }

    #[test]
    fn a_dmb_outside_the_mapped_memory_is_refused() {
        let rig = Rig::new(1);
        let sba_idx = 32 + (RAM_SIZE / 0x1_0000) as u32;
        let err = rig.try_reg_dmb(0, 7, 16384, sba_idx).unwrap_err();
        assert!(matches!(err, CommandError::Unmapped { .. }), "{err:?}");
    }

    #[test]
    fn a_dmb_overlapping_another_of_the_same_function_is_refused() {
        let rig = Rig::new(2);
        rig.reg_dmb(0, 7, 32);
        let overlapping = |sba_idx| DmbRequest {
            iova: BASE + Rig::dmb_offset(32) + 16383,
            len: 4096,
            sba_idx,
            vlan_valid: 0,
            vlan_id: 0,
            rgid: 7,
        };
        let err = rig.fabric.execute(0, Command::RegDmb(overlapping(33)));
        assert!(matches!(err, Err(CommandError::BadArgument(_))), "{err:?}");
        let other = rig.fabric.execute(1, Command::RegDmb(overlapping(33)));
        assert!(other.is_ok(), "another function's memory: {other:?}");
        let mut after = overlapping(34);
        after.iova += 1;
        assert!(
            rig.fabric.execute(0, Command::RegDmb(after)).is_ok(),
            "adjacent"
        );
    }

    #[test]
    fn an_sba_index_in_use_is_refused() {
        let rig = Rig::new(1);
        rig.reg_dmb(0, 7, 40);
        let err = rig.try_reg_dmb(0, 7, 4096, 40);
        assert_eq!(err, Err(CommandError::SbaIndexInUse(40)));
    }

    #[test]
    fn only_the_owner_may_unregister_a_dmb() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(0, rig.gid(1), 32);
        let err = rig.fabric.execute(1, Command::UnregDmb { token });
        assert_eq!(err, Err(CommandError::UnknownToken(token)));
        assert_eq!(rig.fabric.function_views()[1].counters.command_errors, 1);
    }

    #[test]
    fn query_info_counts_owned_and_used_dmbs() {
        let rig = Rig::new(2);
        rig.reg_dmb(0, rig.gid(1), 32);
        rig.reg_dmb(1, rig.gid(0), 32);
        rig.reg_dmb(1, rig.gid(0), 33);
        let Ok(Response::QueryInfo(qi)) = rig.fabric.execute(0, Command::QueryInfo) else {
            panic!("QUERY_INFO failed");
        };
        assert_eq!((qi.dmbs_owned, qi.dmbs_used), (1, 2));
        assert_eq!((qi.my_gid, qi.sba), (rig.gid(0), BASE));
    }

    #[test]
    fn signal_ieq_queues_a_software_event_at_the_peer() {
        let rig = Rig::new(2);
        let signal = Command::SignalIeq {
            rgid: rig.gid(1),
            trigger_irq: 1,
            event_code: 0x83,
            info: 99,
        };
        assert_eq!(rig.fabric.execute(0, signal), Ok(Response::Empty));
        let (idx, entry) = rig.ieq(1, 0);
        assert_eq!(idx, 1);
        assert_eq!(entry.kind.get(), EventType::Software as u32);
        assert_eq!((entry.code.get(), entry.tok.get()), (0x83, rig.gid(0)));
        assert_eq!(entry.info.get(), 99);
    }

    #[test]
    fn the_vlan_table_holds_64_ids() {
        let rig = Rig::new(1);
        for vlan in 0..MAX_VLAN_IDS as u64 {
            rig.fabric.execute(0, Command::AddVlanId(vlan)).unwrap();
        }
        let full = rig.fabric.execute(0, Command::AddVlanId(1000));
        assert_eq!(full, Err(CommandError::VlanTableFull));
        let again = rig.fabric.execute(0, Command::AddVlanId(5));
        assert_eq!(again, Ok(Response::Empty), "a known id fits");
    }

    #[test]
    fn the_host_sees_each_vlan_change_once() {
        let rig = Rig::new(2);
        let vlan_calls = || -> Vec<String> {
            let calls = rig.sink.calls().into_iter();
            calls.filter(|c| c.starts_with("vlan ")).collect()
        };
        let ok = Ok(Response::Empty);
        // As net/smc does it: the connection's VLAN (refcounted by the guest, but a
        // repeated ADD reaches the device when the count went to zero in between) ...
        assert_eq!(rig.fabric.execute(1, Command::AddVlanId(39)), ok);
        assert_eq!(rig.fabric.execute(1, Command::AddVlanId(39)), ok);
        assert_eq!(rig.fabric.execute(1, Command::SetVlan), ok);
        assert_eq!(rig.fabric.execute(1, Command::SetVlan), ok);
        assert_eq!(rig.fabric.execute(1, Command::ResetVlan), ok);
        assert_eq!(rig.fabric.execute(1, Command::DelVlanId(39)), ok);
        // ... and a DEL of an id the function does not hold changes nothing.
        assert_eq!(rig.fabric.execute(1, Command::DelVlanId(39)), ok);
        assert_eq!(
            vlan_calls(),
            [
                "vlan Added(39) by ism1",
                "vlan Required(true) by ism1",
                "vlan Required(false) by ism1",
                "vlan Deleted(39) by ism1",
            ]
        );
        // A full table refuses the id, and the host hears of no change.
        for vlan in 100..100 + MAX_VLAN_IDS as u64 {
            rig.fabric.execute(0, Command::AddVlanId(vlan)).unwrap();
        }
        let before = vlan_calls().len();
        let full = rig.fabric.execute(0, Command::AddVlanId(7));
        assert_eq!(full, Err(CommandError::VlanTableFull));
        assert_eq!(vlan_calls().len(), before);
        assert_eq!(vlan_calls()[before - 1], "vlan Added(163) by ism0");
    }

    #[test]
    fn unregistering_twice_finds_nothing_registered() {
        let rig = Rig::new(1);
        assert_eq!(
            rig.fabric.execute(0, Command::UnregIeq),
            Ok(Response::Empty)
        );
        let err = rig.fabric.execute(0, Command::UnregIeq);
        assert_eq!(err, Err(CommandError::NotRegistered));
    }
}
