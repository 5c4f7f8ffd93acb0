//! ISM commands: the decoded [`Command`], its errors and their `ret` codes, the request
//! structs' checks, and encoding responses (decoding by opcode is `super::opcodes`).
//!
//! The driver writes the request's fields at BAR 2 offset 8, then the 8-byte request
//! header at offset 0 (that store executes the command), then reads the response header
//! and `resp.len - 8` more bytes. The layouts are the structs of [`super::wire`].

use std::mem::size_of;

use serde::{Deserialize, Serialize};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::wire::{self, ReqHeader, RespHeader, MAX_VLAN_IDS};
use super::{MAX_DMB_LEN, NR_DMBS, SBA_FIRST_DMB_BIT};

/// The request header's length: a store of at least this much at offset 0 executes.
pub const HEADER_LEN: usize = size_of::<ReqHeader>();

/// A DMB registration request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DmbRequest {
    pub iova: u64,
    pub len: u32,
    pub sba_idx: u32,
    pub vlan_valid: u32,
    pub vlan_id: u32,
    pub rgid: u64,
}

/// A decoded command (serde: as a trace records it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    RegSba {
        iova: u64,
    },
    RegIeq {
        iova: u64,
        len: u64,
    },
    ReadGid,
    AddVlanId(u64),
    DelVlanId(u64),
    SetVlan,
    ResetVlan,
    QueryInfo,
    QueryRgid {
        rgid: u64,
        vlan_valid: u32,
        vlan_id: u32,
    },
    RegDmb(DmbRequest),
    UnregDmb {
        token: u64,
    },
    SignalIeq {
        rgid: u64,
        trigger_irq: u32,
        event_code: u32,
        info: u64,
    },
    UnregSba,
    UnregIeq,
}

/// Why a command failed. Each maps to the `ret` the guest sees (see `ret`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("unknown opcode {0:#x}")]
    UnknownOpcode(u32),
    #[error("request length {len} for opcode {opcode:#x}, expected {expected}")]
    BadLength {
        opcode: u32,
        len: usize,
        expected: usize,
    },
    #[error("{0}")]
    BadArgument(&'static str),
    #[error("IOVA {iova:#x} (+{len:#x}) is not mapped for DMA")]
    Unmapped { iova: u64, len: u64 },
    #[error("SBA index {0} is already used by another DMB of this function")]
    SbaIndexInUse(u32),
    #[error("no free DMB token on the fabric")]
    NoToken,
    #[error("GID {0:#018x} is not reachable on this fabric")]
    UnknownGid(u64),
    #[error("VLAN table full")]
    VlanTableFull,
    #[error("token {0:#x} is not registered by this function")]
    UnknownToken(u64),
    #[error("nothing registered to unregister")]
    NotRegistered,
    #[error("too many SIGNAL_IEQs from this function")]
    RateLimited,
    /// A fault injected by the host (`ism-emu fault`), answered with the rule's code.
    #[error("injected fault (rule {rule}): ret {ret:#06x}")]
    Injected { ret: u16, rule: u32 },
}

/// The driver's generic error value. UNREG_* answered with it still frees guest memory,
/// so it is the answer for "nothing to unregister"; any other value would make the guest
/// leak the buffer.
pub const ISM_ERROR: u16 = 0xffff;

impl CommandError {
    /// The response's `ret` field. Documented in docs/device.md.
    pub fn ret(&self) -> u16 {
        match self {
            CommandError::UnknownOpcode(_) => 0x0001,
            CommandError::BadLength { .. } => 0x0002,
            CommandError::BadArgument(_) => 0x0003,
            CommandError::Unmapped { .. } => 0x0004,
            CommandError::SbaIndexInUse(_) => 0x0005,
            CommandError::NoToken => 0x0006,
            CommandError::UnknownGid(_) => 0x0007,
            CommandError::VlanTableFull => 0x0008,
            CommandError::RateLimited => 0x0009,
            CommandError::UnknownToken(_) | CommandError::NotRegistered => ISM_ERROR,
            CommandError::Injected { ret, .. } => *ret,
        }
    }
}

/// Reads request struct `T` from the start of the command area.
pub(super) fn read<T: FromBytes + KnownLayout + Immutable>(area: &[u8]) -> Result<T, CommandError> {
    T::read_from_prefix(area)
        .map(|(request, _)| request)
        .map_err(|_| CommandError::BadLength {
            opcode: opcode_of(area),
            len: area.len(),
            expected: size_of::<T>(),
        })
}

/// The opcode of the request in `area` (also echoed in error responses).
pub fn opcode_of(area: &[u8]) -> u32 {
    ReqHeader::read_from_prefix(area).map_or(0, |(hdr, _)| hdr.cmd.get())
}

/// A request struct's fields as a [`Command`], after the checks that need no state. The
/// table in `super::opcodes` picks the struct by opcode.
pub(super) trait ToCommand {
    fn to_command(&self) -> Result<Command, CommandError>;
}

/// `ToCommand` for the requests whose fields map straight onto their variant's.
macro_rules! to_command {
    ($($req:ident => |$r:pat_param| $command:expr;)*) => {
        $(impl ToCommand for wire::$req {
            fn to_command(&self) -> Result<Command, CommandError> {
                let $r = self;
                Ok($command)
            }
        })*
    };
}

to_command! {
    RegSbaRequest => |r| Command::RegSba { iova: r.sba.get() };
    RegIeqRequest => |r| Command::RegIeq { iova: r.ieq.get(), len: r.len.get() };
    ReadGidRequest => |_| Command::ReadGid;
    AddVlanIdRequest => |r| Command::AddVlanId(r.vlan_id.get());
    DelVlanIdRequest => |r| Command::DelVlanId(r.vlan_id.get());
    SetVlanRequest => |_| Command::SetVlan;
    ResetVlanRequest => |_| Command::ResetVlan;
    QueryInfoRequest => |_| Command::QueryInfo;
    QueryRgidRequest => |r| Command::QueryRgid {
        rgid: r.rgid.get(),
        vlan_valid: r.vlan_valid.get(),
        vlan_id: r.vlan_id.get(),
    };
    UnregDmbRequest => |r| Command::UnregDmb { token: r.dmb_tok.get() };
    SignalIeqRequest => |r| Command::SignalIeq {
        rgid: r.rgid.get(),
        trigger_irq: r.trigger_irq.get(),
        event_code: r.event_code.get(),
        info: r.info.get(),
    };
    UnregSbaRequest => |_| Command::UnregSba;
    UnregIeqRequest => |_| Command::UnregIeq;
}

/// REG_DMB's fields are checked before they become a command.
impl ToCommand for wire::RegDmbRequest {
    fn to_command(&self) -> Result<Command, CommandError> {
        DmbRequest::checked(self).map(Command::RegDmb)
    }
}

impl DmbRequest {
    /// The request's fields, after the checks that need no state.
    fn checked(req: &wire::RegDmbRequest) -> Result<Self, CommandError> {
        let req = DmbRequest {
            iova: req.dmb.get(),
            len: req.dmb_len.get(),
            sba_idx: req.sba_idx.get(),
            vlan_valid: req.vlan_valid.get(),
            vlan_id: req.vlan_id.get(),
            rgid: req.rgid.get(),
        };
        if req.len == 0 || req.len > MAX_DMB_LEN {
            return Err(CommandError::BadArgument(
                "DMB length must be 1 byte to 1 MiB",
            ));
        }
        if req.sba_idx < SBA_FIRST_DMB_BIT || req.sba_idx >= NR_DMBS {
            return Err(CommandError::BadArgument("SBA index must be 32..1919"));
        }
        Ok(req)
    }
}

/// QUERY_INFO's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryInfo {
    pub version: u32,
    pub max_len: u32,
    pub state: u64,
    pub my_gid: u64,
    pub sba: u64,
    pub ieq: u64,
    pub ieq_len: u32,
    pub dmbs_owned: u32,
    pub dmbs_used: u32,
    pub vlan_required: u32,
    pub vlan_ids: Vec<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    Empty,
    Gid(u64),
    Token(u64),
    QueryInfo(QueryInfo),
}

impl QueryInfo {
    fn to_wire(&self, opcode: u32) -> wire::QueryInfoResponse {
        let mut vlan_id = [0u16.into(); MAX_VLAN_IDS];
        for (slot, &id) in vlan_id.iter_mut().zip(&self.vlan_ids) {
            *slot = id.into();
        }
        wire::QueryInfoResponse {
            hdr: RespHeader::of::<wire::QueryInfoResponse>(opcode),
            version: self.version.into(),
            max_len: self.max_len.into(),
            ism_state: self.state.into(),
            my_gid: self.my_gid.into(),
            sba: self.sba.into(),
            ieq: self.ieq.into(),
            ieq_len: self.ieq_len.into(),
            reserved: 0.into(),
            dmbs_owned: self.dmbs_owned.into(),
            dmbs_used: self.dmbs_used.into(),
            vlan_required: self.vlan_required.into(),
            vlan_nr_ids: (self.vlan_ids.len().min(MAX_VLAN_IDS) as u32).into(),
            vlan_id,
        }
    }
}

/// Writes response struct `resp` at the start of the command area.
fn put<T: IntoBytes + Immutable>(area: &mut [u8], resp: &T) {
    // The area is 4 KiB, larger than every response: the write cannot fail.
    let _ = resp.write_to_prefix(area);
}

/// Writes the response for `opcode` into the command area.
pub fn encode(area: &mut [u8], opcode: u32, result: &Result<Response, CommandError>) {
    match result {
        Err(err) => put(area, &RespHeader::bare(opcode, err.ret())),
        Ok(Response::Empty) => put(area, &RespHeader::bare(opcode, 0)),
        Ok(Response::Gid(gid)) => put(
            area,
            &wire::ReadGidResponse {
                hdr: RespHeader::of::<wire::ReadGidResponse>(opcode),
                gid: (*gid).into(),
            },
        ),
        Ok(Response::Token(token)) => put(
            area,
            &wire::RegDmbResponse {
                hdr: RespHeader::of::<wire::RegDmbResponse>(opcode),
                dmb_tok: (*token).into(),
            },
        ),
        Ok(Response::QueryInfo(qi)) => put(area, &qi.to_wire(opcode)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ism::wire::{
        QueryInfoRequest, ReadGidRequest, RegSbaRequest, Request, UnregDmbRequest,
    };

    #[test]
    fn response_lengths_match_the_driver() {
        let mut area = vec![0u8; 4096];
        encode(&mut area, ReadGidRequest::OPCODE, &Ok(Response::Gid(7)));
        assert_eq!(u16::from_be_bytes([area[6], area[7]]), 16);
        encode(
            &mut area,
            QueryInfoRequest::OPCODE,
            &Ok(Response::QueryInfo(QueryInfo::default())),
        );
        assert_eq!(u16::from_be_bytes([area[6], area[7]]), 200);
        encode(&mut area, RegSbaRequest::OPCODE, &Ok(Response::Empty));
        assert_eq!(u16::from_be_bytes([area[6], area[7]]), 8);
    }

    #[test]
    fn error_response_carries_ret_and_header_length() {
        let mut area = vec![0u8; 4096];
        encode(
            &mut area,
            UnregDmbRequest::OPCODE,
            &Err(CommandError::UnknownToken(5)),
        );
        assert_eq!(u16::from_be_bytes([area[4], area[5]]), ISM_ERROR);
        assert_eq!(u16::from_be_bytes([area[6], area[7]]), 8);
    }
}
