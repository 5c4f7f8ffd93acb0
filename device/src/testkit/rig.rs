//! A fabric over in-memory guest RAM, for the fabric's unit tests, the property tests and
//! the fuzz targets: no sockets, no threads. Each function's RAM is mapped at `BASE`, with
//! the SBA in its first page, the IEQ in its second and DMBs from `DMB_AREA` on, 64 KiB
//! apart (`Rig::with_ram` makes the RAM smaller; its user then places DMBs itself).
use crate::util::ratelimit::Budget;
use std::sync::{Arc, Mutex};

use zerocopy::FromBytes;

use crate::dmb::{Dmb, FunctionId};
use crate::fabric::{EventSink, ReuseCheck, VlanChange, ZeroScan, ZeroWatch};
use crate::fabric::{Fabric, MoveError};
use crate::fault::Fired;
use crate::ism::command::{Command, CommandError, DmbRequest, Response};
use crate::ism::opcodes;
use crate::ism::status::{IeqEntry, IEQ_ENTRY_LEN, IEQ_HEADER_LEN, IEQ_LEN};
use crate::ism::wire::Request;
use crate::ism::MoveAddress;
use crate::testkit::GuestRam;

pub const BASE: u64 = 0x1_0000_0000;
pub const RAM_SIZE: u64 = 1 << 20;
pub const IEQ_AT: u64 = 4096;
pub const DMB_AREA: u64 = 0x1_0000;
pub const DMB_SPACING: u64 = 0x1_0000;

/// Records what the fabric reports, one line per call.
#[derive(Default)]
pub struct Recorder {
    calls: Mutex<Vec<String>>,
    /// What `zero_watch` answers.
    pub watch: Mutex<Vec<ZeroWatch>>,
    /// Whether `wants_reuse_check` says yes.
    pub reuse: Mutex<bool>,
}

impl Recorder {
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    /// The last call recorded.
    pub fn last(&self) -> String {
        self.calls
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default()
    }

    fn push(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
}

impl EventSink for Recorder {
    fn function_attached(&self, function: &str, _gid: u64) {
        self.push(format!("attached {function}"));
    }
    fn function_detached(&self, function: &str, _gid: u64, reason: &str) {
        self.push(format!("detached {function}: {reason}"));
    }
    fn dmb_registered(&self, dmb: &Dmb, function: &str) {
        self.push(format!("registered {:#x} by {function}", dmb.token));
    }
    fn vlan_changed(&self, function: &str, _gid: u64, change: VlanChange) {
        self.push(format!("vlan {change:?} by {function}"));
    }
    fn dmb_gone(&self, dmb: &Dmb, reason: &str, _function: &str) {
        self.push(format!("gone {:#x}: {reason}", dmb.token));
    }
    fn wants_reuse_check(&self, _dmb: &Dmb, _addr: &MoveAddress, _data: &[u8]) -> bool {
        *self.reuse.lock().unwrap()
    }
    fn moved(&self, dmb: &Dmb, addr: &MoveAddress, data: &[u8], reuse: Option<ReuseCheck>) {
        self.push(format!(
            "moved {:#x}+{} {} {reuse:?}",
            dmb.token,
            addr.offset,
            data.len()
        ));
    }
    fn zero_watch(&self) -> Vec<ZeroWatch> {
        self.watch.lock().unwrap().clone()
    }
    fn zero_scanned(&self, results: &[(u64, ZeroScan)]) -> usize {
        for (token, scan) in results {
            self.push(format!("zero {token:#x}: {scan:?}"));
        }
        results.len()
    }
    fn fault_injected(&self, function: &str, _gid: u64, _token: Option<u64>, fired: &Fired) {
        self.push(format!(
            "fault {} at {function}: {}",
            fired.rule, fired.detail
        ));
    }
}

pub struct Rig {
    pub fabric: Fabric,
    pub rams: Vec<GuestRam>,
    pub sink: Arc<Recorder>,
    ram_size: u64,
}

impl Rig {
    /// `n` attached functions whose guests mapped their RAM and registered SBA and IEQ.
    pub fn new(n: usize) -> Self {
        Self::with_ram(n, RAM_SIZE)
    }

    /// Like `new` with `ram_size` bytes of RAM per function (at least `DMB_AREA`): small
    /// RAM keeps whole-RAM snapshots cheap for tests that compare them after every step.
    pub fn with_ram(n: usize, ram_size: u64) -> Self {
        let sink = Arc::new(Recorder::default());
        let functions = (0..n)
            .map(|i| (format!("ism{i}"), crate::default_gid(0x1234, i)))
            .collect();
        let fabric = Fabric::new(0x1234, functions, sink.clone());
        let rams: Vec<GuestRam> = (0..n).map(|_| GuestRam::new(ram_size).unwrap()).collect();
        let rig = Self {
            fabric,
            rams,
            sink,
            ram_size,
        };
        for id in 0..n {
            rig.fabric.attach(id);
            rig.probe(id);
        }
        rig
    }

    /// What the client and driver do on probe (again after a reset): map the RAM,
    /// register SBA and IEQ.
    pub fn probe(&self, id: FunctionId) {
        let file = self.rams[id].dup_file().unwrap();
        self.fabric
            .dma_map(id, BASE, self.ram_size, Some(file), 0, true)
            .unwrap();
        self.fabric
            .execute(id, Command::RegSba { iova: BASE })
            .unwrap();
        let ieq = Command::RegIeq {
            iova: BASE + IEQ_AT,
            len: IEQ_LEN,
        };
        self.fabric.execute(id, ieq).unwrap();
    }

    /// Gives every function `burst` SIGNAL_IEQs, refilled never: a test's outcome must
    /// not depend on how fast it runs.
    pub fn signal_budget(&self, burst: u64) {
        for f in &mut self.fabric.lock().functions {
            f.signals = Budget::new(0, burst);
        }
    }

    /// Gives function `id` `bytes` more of reuse reads, refilled never.
    pub fn reuse_read_budget(&self, id: FunctionId, bytes: u64) {
        self.fabric.lock().functions[id].reuse_reads = Budget::new(0, bytes);
    }

    /// What of function `id`'s state the snapshot does not show (VLANs, the IEQ's
    /// position, the grant generation), as text to compare.
    pub fn hidden_state(&self, id: FunctionId) -> String {
        let st = self.fabric.lock();
        let f = &st.functions[id];
        format!(
            "vlans {:?} required {} ieq {:?} generation {}",
            f.vlans, f.vlan_required, f.ieq, f.generation
        )
    }

    /// A new client (a new guest with fresh RAM) attaches to function `id` after the last
    /// one left, and its driver probes.
    pub fn reattach(&mut self, id: FunctionId) {
        self.rams[id] = GuestRam::new(self.ram_size).unwrap();
        self.fabric.attach(id);
        self.probe(id);
    }

    /// Sends `request` through the command area the way the backend does: decode, then
    /// execute, so the decoder's checks apply too.
    pub fn command<R: Request>(
        &self,
        id: FunctionId,
        request: R,
    ) -> Result<Response, CommandError> {
        let mut area = [0u8; 4096];
        let bytes = request.as_bytes();
        area[..bytes.len()].copy_from_slice(bytes);
        opcodes::decode(&area).and_then(|cmd| self.fabric.execute(id, cmd))
    }

    /// A waited data move by `sender` (a PCISTB to its BAR 0 at `window_offset`), as the
    /// backend stores it.
    pub fn move_data(
        &self,
        sender: FunctionId,
        window_offset: u64,
        data: &[u8],
    ) -> Result<(), MoveError> {
        self.fabric
            .store_move(sender, window_offset, data, false)
            .map(|_| ())
    }

    pub fn gid(&self, id: FunctionId) -> u64 {
        self.fabric.identity(id).1
    }

    /// REG_DMB by `owner` for peer `rgid`: `len` bytes in DMB slot `sba_idx - 32`.
    pub fn try_reg_dmb(
        &self,
        owner: FunctionId,
        rgid: u64,
        len: u32,
        sba_idx: u32,
    ) -> Result<Response, CommandError> {
        let request = DmbRequest {
            iova: BASE + Self::dmb_offset(sba_idx),
            len,
            sba_idx,
            vlan_valid: 0,
            vlan_id: 0,
            rgid,
        };
        self.fabric.execute(owner, Command::RegDmb(request))
    }

    /// A DMB that must register; returns its token.
    pub fn reg_dmb(&self, owner: FunctionId, rgid: u64, sba_idx: u32) -> u64 {
        match self.try_reg_dmb(owner, rgid, 16384, sba_idx) {
            Ok(Response::Token(token)) => token,
            other => panic!("REG_DMB answered {other:?}"),
        }
    }

    /// Where DMB `sba_idx` lies in its owner's RAM.
    pub fn dmb_offset(sba_idx: u32) -> u64 {
        DMB_AREA + u64::from(sba_idx - 32) * DMB_SPACING
    }

    pub fn ram(&self, id: FunctionId, offset: u64, len: usize) -> Vec<u8> {
        self.rams[id].read(offset, len).unwrap()
    }

    /// The IEQ's index (last entry + 1) and the entry in `slot`.
    pub fn ieq(&self, id: FunctionId, slot: u64) -> (u64, IeqEntry) {
        let idx = u64::from_be_bytes(self.ram(id, IEQ_AT, 8).try_into().unwrap());
        let at = IEQ_AT + IEQ_HEADER_LEN + slot * IEQ_ENTRY_LEN;
        let bytes = self.ram(id, at, IEQ_ENTRY_LEN as usize);
        (idx, IeqEntry::read_from_bytes(&bytes).unwrap())
    }
}
