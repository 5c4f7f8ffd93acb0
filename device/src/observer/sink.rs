//! The fabric's side of the observer: the [`EventSink`] hooks it calls under its lock,
//! and the [`Observer`]'s answers to them.

use super::{ObservedEvent, Observer, ReuseCheck, What, ZeroScan, ZeroWatch};
use crate::dmb::Dmb;
use crate::fault::Fired;
use crate::ism::MoveAddress;

/// What the fabric reports, under its lock, as functions and DMBs come and go and data
/// moves. [`Observer`] implements it; the fabric knows only this trait.
pub trait EventSink: Send + Sync {
    fn function_attached(&self, function: &str, gid: u64);
    fn function_detached(&self, function: &str, gid: u64, reason: &str);
    fn dmb_registered(&self, dmb: &Dmb, function: &str);
    fn dmb_gone(&self, dmb: &Dmb, reason: &str, function: &str);
    /// Whether this move would start a new connection on a closed DMB. If so, the fabric
    /// reads the DMB before applying the move (outside its lock) and passes the result
    /// to `moved`.
    fn wants_reuse_check(&self, dmb: &Dmb, addr: &MoveAddress, data: &[u8]) -> bool;
    /// A move has been applied (rejected moves are not reported). `reuse` is the DMB's
    /// content before it, when `wants_reuse_check` asked for it.
    fn moved(&self, dmb: &Dmb, addr: &MoveAddress, data: &[u8], reuse: Option<ReuseCheck>);
    /// The closed DMBs to look at for zeroing, the longest-unlooked-at first.
    fn zero_watch(&self) -> Vec<ZeroWatch>;
    /// What the watcher found; returns how many DMBs are still watched.
    fn zero_scanned(&self, results: &[(u64, ZeroScan)]) -> usize;
    /// An injected fault fired at `function` (about DMB `token`, if one).
    fn fault_injected(&self, function: &str, gid: u64, token: Option<u64>, fired: &Fired);
}

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
