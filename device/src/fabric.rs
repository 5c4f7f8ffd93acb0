//! The fabric: every ISM function of one emulated machine (one CHID), the DMBs they
//! registered, and the routing of data moves and events between their guests' memories.
//!
//! This is the only state shared between functions, behind one lock. The lock is held
//! for the duration of one command or one move (a copy of at most 4 KiB into a mapping,
//! a few atomic ORs and an eventfd write) and never across a socket write.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::dma::{DmaError, DmaSpace};
use crate::interrupts::{Interrupts, IrqError};
use crate::ism::command::{Command, CommandError, DmbRequest, QueryInfo, Response, MAX_VLAN_IDS};
use crate::ism::status::{gid_code, Event, EventType, Ieq, Sba, IEQ_LEN, SBA_LEN};
use crate::ism::{MoveAddress, MAX_DMB_LEN, MAX_MOVE_LEN};
use crate::observer::{ObservedEvent, Observer};
use crate::pci::regions::MOVE_WINDOW_SHIFT;

/// Index of a function in the fabric (its position on the command line).
pub type FunctionId = usize;

/// Tokens are `n << 32` with `1 <= n < 2^(MOVE_WINDOW_SHIFT - 32)`.
const MAX_TOKEN_INDEX: u64 = (1 << (MOVE_WINDOW_SHIFT - 32)) - 1;
/// VLAN id with which the driver probes for SMC-Dv2 capability.
pub const VLAN_SMCD_V2: u64 = 0x1fff;

/// A rejected data move. The sender's PCISTB fails and its connection aborts.
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
    #[error("DMBE index {0} out of range")]
    BadElement(u8),
    #[error("owner of token {0:#x} is not attached")]
    OwnerGone(u64),
    #[error("owner's DMB is no longer mapped")]
    OwnerUnmapped(#[source] DmaError),
}

/// Per-function counters, shown by the observer.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counters {
    pub commands: u64,
    pub command_errors: u64,
    pub moves_out: u64,
    pub bytes_out: u64,
    pub moves_rejected: u64,
    pub moves_in: u64,
    pub bytes_in: u64,
    pub signals_in: u64,
    pub events_in: u64,
    pub interrupts: u64,
}

/// One function's device state, as far as other functions can see it.
pub struct Function {
    pub name: String,
    pub gid: u64,
    pub attached: bool,
    pub dma: DmaSpace,
    pub sba: Option<Sba>,
    pub ieq: Option<Ieq>,
    pub irq: Interrupts,
    pub vlans: BTreeSet<u64>,
    pub vlan_required: bool,
    pub counters: Counters,
}

impl Function {
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
    }

    /// Queues an event and raises the interrupt. Lost events are logged, not fatal: the
    /// guest may have unregistered its queue or unmapped it.
    fn post_event(&mut self, event: &Event, interrupt: bool) {
        let (Some(ieq), Some(sba)) = (self.ieq.as_mut(), self.sba) else {
            log::warn!(
                "{} (gid {:#018x}): event {event:?} dropped: no IEQ/SBA registered",
                self.name,
                self.gid
            );
            return;
        };
        if let Err(e) = ieq
            .push(&self.dma, event)
            .and_then(|()| sba.set_event_pending(&self.dma))
        {
            log::warn!(
                "{} (gid {:#018x}): event {event:?} dropped: {e}",
                self.name,
                self.gid
            );
            return;
        }
        self.counters.events_in += 1;
        if interrupt && self.irq.raise() {
            self.counters.interrupts += 1;
        }
    }
}

/// A registered DMB.
#[derive(Clone, Debug, Serialize)]
pub struct Dmb {
    pub token: u64,
    pub owner: FunctionId,
    pub owner_gid: u64,
    pub rgid: u64,
    pub iova: u64,
    pub len: u32,
    pub sba_idx: u32,
    pub vlan_valid: bool,
    pub vlan_id: u32,
    pub registered_at_us: u64,
}

pub struct FabricState {
    pub functions: Vec<Function>,
    pub dmbs: BTreeMap<u64, Dmb>,
    next_token: u64,
}

pub struct Fabric {
    chid: u16,
    state: Mutex<FabricState>,
    observer: Observer,
}

/// Microseconds since the Unix epoch: event and registration timestamps.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Fabric {
    /// A fabric of the given `(name, gid)` functions; a function's id is its position.
    pub fn new(chid: u16, functions: Vec<(String, u64)>, observer: Observer) -> Self {
        let functions = functions
            .into_iter()
            .map(|(name, gid)| Function::new(name, gid))
            .collect();
        Self {
            chid,
            state: Mutex::new(FabricState {
                functions,
                dmbs: BTreeMap::new(),
                next_token: 1,
            }),
            observer,
        }
    }

    pub fn chid(&self) -> u16 {
        self.chid
    }

    pub fn observer(&self) -> &Observer {
        &self.observer
    }

    /// The state, for observers and tests. A poisoned lock is still usable: every update
    /// leaves the state consistent before anything can panic.
    pub fn lock(&self) -> MutexGuard<'_, FabricState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn gid(&self, id: FunctionId) -> u64 {
        self.lock().functions[id].gid
    }

    pub fn attach(&self, id: FunctionId) {
        let mut st = self.lock();
        let f = &mut st.functions[id];
        f.attached = true;
        log::info!("{} (gid {:#018x}): client attached", f.name, f.gid);
        self.observer.emit(ObservedEvent::FunctionAttached {
            function: f.name.clone(),
            gid: f.gid,
        });
    }

    /// The function's client went away or reset it: drop its DMBs and mappings and tell
    /// every peer that shared DMBs with it, so their connections abort instead of hanging.
    pub fn detach(&self, id: FunctionId, reason: &'static str, still_attached: bool) {
        let mut st = self.lock();
        let st = &mut *st;
        let gid = st.functions[id].gid;
        let mut peers = BTreeSet::new();
        let owned: Vec<u64> = st
            .dmbs
            .values()
            .filter(|d| d.owner == id)
            .map(|d| d.token)
            .collect();
        for token in owned {
            if let Some(dmb) = st.dmbs.remove(&token) {
                peers.insert(dmb.rgid);
                self.observer.dmb_gone(&dmb, reason, &st.functions[id].name);
            }
        }
        for dmb in st.dmbs.values().filter(|d| d.rgid == gid) {
            peers.insert(dmb.owner_gid);
        }
        peers.remove(&gid);
        let f = &mut st.functions[id];
        let had_state = f.sba.is_some() || f.dma.mapped_bytes() > 0;
        f.clear();
        f.attached = still_attached;
        if had_state || !still_attached {
            log::info!(
                "{} (gid {gid:#018x}): {reason}; notifying {} peer(s)",
                f.name,
                peers.len()
            );
            self.observer.emit(ObservedEvent::FunctionDetached {
                function: f.name.clone(),
                gid,
                reason: reason.to_string(),
            });
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
            peer.post_event(&event, true);
        }
    }

    pub fn dma_map(
        &self,
        id: FunctionId,
        iova: u64,
        size: u64,
        file: Option<std::fs::File>,
        offset: u64,
    ) -> Result<(), DmaError> {
        self.lock().functions[id].dma.map(iova, size, file, offset)
    }

    pub fn dma_unmap(&self, id: FunctionId, iova: u64, size: u64) -> u64 {
        self.lock().functions[id].dma.unmap(iova, size)
    }

    pub fn dma_unmap_all(&self, id: FunctionId) {
        self.lock().functions[id].dma.clear();
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

    /// Executes one command for function `id`.
    pub fn execute(&self, id: FunctionId, cmd: Command) -> Result<Response, CommandError> {
        let mut st = self.lock();
        let st = &mut *st;
        st.functions[id].counters.commands += 1;
        let result = self.execute_locked(st, id, cmd);
        if result.is_err() {
            st.functions[id].counters.command_errors += 1;
        }
        result
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
                if !f.dma.is_mapped(iova, SBA_LEN) {
                    return Err(CommandError::Unmapped { iova, len: SBA_LEN });
                }
                f.sba = Some(Sba { iova });
                Ok(Response::Empty)
            }
            Command::RegIeq { iova, len } => {
                if len < IEQ_LEN {
                    return Err(CommandError::BadArgument("IEQ shorter than 15 entries"));
                }
                let ieq = Ieq::register(&f.dma, iova)
                    .map_err(|_| CommandError::Unmapped { iova, len: IEQ_LEN })?;
                f.ieq = Some(ieq);
                Ok(Response::Empty)
            }
            Command::ReadGid => Ok(Response::Gid(f.gid)),
            Command::AddVlanId(vlan) => {
                if f.vlans.len() >= MAX_VLAN_IDS && !f.vlans.contains(&vlan) {
                    return Err(CommandError::VlanTableFull);
                }
                f.vlans.insert(vlan);
                Ok(Response::Empty)
            }
            Command::DelVlanId(vlan) => {
                f.vlans.remove(&vlan);
                Ok(Response::Empty)
            }
            Command::SetVlan => {
                f.vlan_required = true;
                Ok(Response::Empty)
            }
            Command::ResetVlan => {
                f.vlan_required = false;
                Ok(Response::Empty)
            }
            Command::QueryInfo => {
                let gid = f.gid;
                let owned = st.dmbs.values().filter(|d| d.owner == id).count() as u32;
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
                    self.observer
                        .dmb_gone(&dmb, "unregistered", &st.functions[id].name);
                }
                Ok(Response::Empty)
            }
            Command::SignalIeq {
                rgid,
                trigger_irq,
                event_code,
                info,
            } => {
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
                target.post_event(&event, trigger_irq != 0);
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
        if !f.dma.is_mapped(req.iova, u64::from(req.len)) {
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
        self.observer.dmb_registered(&dmb, &f.name);
        let token = dmb.token;
        st.dmbs.insert(token, dmb);
        Ok(Response::Token(token))
    }

    /// A data move by function `sender` (a PCISTB to its BAR 0 at `window_offset`).
    pub fn move_data(
        &self,
        sender: FunctionId,
        window_offset: u64,
        data: &[u8],
    ) -> Result<(), MoveError> {
        let mut st = self.lock();
        let st = &mut *st;
        let result = self.move_locked(st, sender, window_offset, data);
        let counters = &mut st.functions[sender].counters;
        match result {
            Ok(()) => {
                counters.moves_out += 1;
                counters.bytes_out += data.len() as u64;
            }
            Err(_) => counters.moves_rejected += 1,
        }
        result
    }

    fn move_locked(
        &self,
        st: &mut FabricState,
        sender: FunctionId,
        window_offset: u64,
        data: &[u8],
    ) -> Result<(), MoveError> {
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
        let owner = &mut st.functions[dmb.owner];
        if !owner.attached {
            return Err(MoveError::OwnerGone(dmb.token));
        }
        self.observer.before_move(dmb, &owner.dma, &addr, data);
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
                    Ok(()) => {
                        if owner.irq.raise() {
                            owner.counters.interrupts += 1;
                        }
                    }
                    Err(e) => log::warn!(
                        "{}: signal for token {:#x} lost: SBA {e}",
                        owner.name,
                        dmb.token
                    ),
                },
                None => log::warn!(
                    "{}: signal for token {:#x} lost: no SBA registered",
                    owner.name,
                    dmb.token
                ),
            }
        }
        self.observer.after_move(dmb, &addr, data);
        Ok(())
    }

    /// Looks at the DMBs whose connection closed, so the observer sees the guest zero them.
    pub fn poll_zeroing(&self) {
        let st = self.lock();
        self.observer.poll_zeroing(|token| {
            let dmb = st.dmbs.get(&token)?;
            let mem = &st.functions[dmb.owner].dma;
            mem.first_nonzero(dmb.iova, u64::from(dmb.len))
                .ok()
                .map(|first| first.is_none())
        });
    }
}
