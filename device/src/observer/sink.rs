//! The [`Observer`]'s answers to the fabric's [`EventSink`] hooks, which the fabric calls
//! under its lock.

use super::{ObservedEvent, Observer, What};
use crate::dmb::Dmb;
use crate::fabric::{EventSink, ReuseCheck, VlanChange, ZeroScan, ZeroWatch};
use crate::fault::Fired;
use crate::ism::MoveAddress;

impl EventSink for Observer {
    fn function_attached(&self, function: &str, gid: u64) {
        self.emit(ObservedEvent::function(
            function,
            gid,
            What::FunctionAttached,
        ));
    }

    fn function_detached(&self, function: &str, gid: u64, reason: &str) {
        let reason = reason.to_string();
        let what = What::FunctionDetached { reason };
        self.emit(ObservedEvent::function(function, gid, what));
    }

    fn dmb_registered(&self, dmb: &Dmb, function: &str) {
        self.tracker().register(dmb, function);
        let what = What::DmbRegistered {
            rgid: dmb.rgid,
            iova: dmb.iova,
            len: dmb.len,
            sba_idx: dmb.sba_idx,
        };
        self.emit(ObservedEvent::dmb(function, dmb.owner_gid, dmb.token, what));
    }

    fn dmb_gone(&self, dmb: &Dmb, reason: &str, function: &str) {
        let events = self.tracker().unregister(dmb, reason, function);
        self.emit_all(events);
    }

    fn wants_reuse_check(&self, dmb: &Dmb, addr: &MoveAddress, data: &[u8]) -> bool {
        self.tracker().wants_reuse_check(dmb, addr, data)
    }

    fn moved(&self, dmb: &Dmb, addr: &MoveAddress, data: &[u8], reuse: Option<ReuseCheck>) {
        let events = self.tracker().moved(dmb, addr, data, reuse);
        let closed = events
            .iter()
            .any(|e| matches!(e.what, What::ConnClosed { .. }));
        self.emit_all(events);
        if closed {
            if let Some(wake) = &*self.zero_wake.lock().unwrap_or_else(|p| p.into_inner()) {
                let _ = wake.try_send(());
            }
        }
    }

    fn zero_watch(&self) -> Vec<ZeroWatch> {
        self.tracker().zero_watch()
    }

    fn zero_scanned(&self, results: &[(u64, ZeroScan)]) -> usize {
        let (events, pending) = self.tracker().zero_scanned(results);
        self.emit_all(events);
        pending
    }

    fn vlan_changed(&self, function: &str, gid: u64, change: VlanChange) {
        let what = match change {
            VlanChange::Added(vlan_id) => What::VlanAdded { vlan_id },
            VlanChange::Deleted(vlan_id) => What::VlanDeleted { vlan_id },
            VlanChange::Required(required) => What::VlanRequired { required },
        };
        self.emit(ObservedEvent::function(function, gid, what));
    }

    fn fault_injected(&self, function: &str, gid: u64, token: Option<u64>, fired: &Fired) {
        let what = What::FaultInjected {
            rule: fired.rule,
            fault: fired.spec.clone(),
            detail: fired.detail.clone(),
        };
        self.emit(ObservedEvent {
            function: function.to_string(),
            gid,
            token,
            what,
        });
    }
}
