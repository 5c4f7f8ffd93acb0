//! ISM commands: decoding requests from the command area and encoding responses.
//!
//! The driver writes the payload at BAR 2 offset 8, then the 8-byte request header at
//! offset 0 (that store executes the command), then reads the response header and
//! `resp.len - 8` more bytes. All fields are big-endian: s390 stores its structs natively.
//!
//! ```text
//!  request   0: cmd u32 | 4: reserved u16 | 6: len u16 (whole request)  | 8: payload
//!  response  0: cmd u32 | 4: ret u16      | 6: len u16 (whole response) | 8: payload
//! ```

use super::{MAX_DMB_LEN, NR_DMBS, SBA_FIRST_DMB_BIT};

pub const HEADER_LEN: usize = 8;

/// Opcodes, as in the driver's ism.h.
pub mod opcode {
    pub const REG_SBA: u32 = 0x01;
    pub const REG_IEQ: u32 = 0x02;
    pub const READ_GID: u32 = 0x03;
    pub const ADD_VLAN_ID: u32 = 0x04;
    pub const DEL_VLAN_ID: u32 = 0x05;
    pub const SET_VLAN: u32 = 0x06;
    pub const RESET_VLAN: u32 = 0x07;
    pub const QUERY_INFO: u32 = 0x08;
    pub const QUERY_RGID: u32 = 0x09;
    pub const REG_DMB: u32 = 0x0a;
    pub const UNREG_DMB: u32 = 0x0b;
    pub const SIGNAL_IEQ: u32 = 0x0e;
    pub const UNREG_SBA: u32 = 0x11;
    pub const UNREG_IEQ: u32 = 0x12;
}

/// A DMB registration request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmbRequest {
    pub iova: u64,
    pub len: u32,
    pub sba_idx: u32,
    pub vlan_valid: u32,
    pub vlan_id: u32,
    pub rgid: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
            CommandError::UnknownToken(_) | CommandError::NotRegistered => ISM_ERROR,
        }
    }
}

/// The request length the driver uses for each opcode (its `sizeof(cmd.request)`).
pub fn request_len(opcode: u32) -> Option<usize> {
    use opcode::*;
    Some(match opcode {
        READ_GID | SET_VLAN | RESET_VLAN | QUERY_INFO | UNREG_SBA | UNREG_IEQ => 8,
        REG_SBA | ADD_VLAN_ID | DEL_VLAN_ID | UNREG_DMB => 16,
        REG_IEQ | QUERY_RGID => 24,
        SIGNAL_IEQ => 32,
        REG_DMB => 40,
        _ => return None,
    })
}

/// Reads big-endian fields from a request.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn u32(&self, at: usize) -> u32 {
        u32::from_be_bytes(self.0[at..at + 4].try_into().unwrap_or_default())
    }
    fn u64(&self, at: usize) -> u64 {
        u64::from_be_bytes(self.0[at..at + 8].try_into().unwrap_or_default())
    }
}

/// The opcode of the request in `area` (also echoed in error responses).
pub fn opcode_of(area: &[u8]) -> u32 {
    Fields(area).u32(0)
}

/// Decodes the request in the command area. `area` is the whole 4 KiB buffer.
pub fn decode(area: &[u8]) -> Result<Command, CommandError> {
    use opcode::*;
    let f = Fields(area);
    let opcode = f.u32(0);
    let len = usize::from(u16::from_be_bytes([area[6], area[7]]));
    let expected = request_len(opcode).ok_or(CommandError::UnknownOpcode(opcode))?;
    if len != expected {
        return Err(CommandError::BadLength {
            opcode,
            len,
            expected,
        });
    }
    Ok(match opcode {
        REG_SBA => Command::RegSba { iova: f.u64(8) },
        REG_IEQ => Command::RegIeq {
            iova: f.u64(8),
            len: f.u64(16),
        },
        READ_GID => Command::ReadGid,
        ADD_VLAN_ID => Command::AddVlanId(f.u64(8)),
        DEL_VLAN_ID => Command::DelVlanId(f.u64(8)),
        SET_VLAN => Command::SetVlan,
        RESET_VLAN => Command::ResetVlan,
        QUERY_INFO => Command::QueryInfo,
        QUERY_RGID => Command::QueryRgid {
            rgid: f.u64(8),
            vlan_valid: f.u32(16),
            vlan_id: f.u32(20),
        },
        REG_DMB => {
            let req = DmbRequest {
                iova: f.u64(8),
                len: f.u32(16),
                sba_idx: f.u32(20),
                vlan_valid: f.u32(24),
                vlan_id: f.u32(28),
                rgid: f.u64(32),
            };
            if req.len == 0 || req.len > MAX_DMB_LEN {
                return Err(CommandError::BadArgument(
                    "DMB length must be 1 byte to 1 MiB",
                ));
            }
            if req.sba_idx < SBA_FIRST_DMB_BIT || req.sba_idx >= NR_DMBS {
                return Err(CommandError::BadArgument("SBA index must be 32..1919"));
            }
            Command::RegDmb(req)
        }
        UNREG_DMB => Command::UnregDmb { token: f.u64(8) },
        SIGNAL_IEQ => Command::SignalIeq {
            rgid: f.u64(8),
            trigger_irq: f.u32(16),
            event_code: f.u32(20),
            info: f.u64(24),
        },
        UNREG_SBA => Command::UnregSba,
        UNREG_IEQ => Command::UnregIeq,
        _ => return Err(CommandError::UnknownOpcode(opcode)),
    })
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

pub const MAX_VLAN_IDS: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    Empty,
    Gid(u64),
    Token(u64),
    QueryInfo(QueryInfo),
}

impl Response {
    /// The payload after the response header.
    fn payload(&self) -> Vec<u8> {
        match self {
            Response::Empty => Vec::new(),
            Response::Gid(v) | Response::Token(v) => v.to_be_bytes().to_vec(),
            Response::QueryInfo(qi) => {
                let mut p = Vec::with_capacity(192);
                p.extend_from_slice(&qi.version.to_be_bytes());
                p.extend_from_slice(&qi.max_len.to_be_bytes());
                p.extend_from_slice(&qi.state.to_be_bytes());
                p.extend_from_slice(&qi.my_gid.to_be_bytes());
                p.extend_from_slice(&qi.sba.to_be_bytes());
                p.extend_from_slice(&qi.ieq.to_be_bytes());
                p.extend_from_slice(&qi.ieq_len.to_be_bytes());
                p.extend_from_slice(&0u32.to_be_bytes());
                p.extend_from_slice(&qi.dmbs_owned.to_be_bytes());
                p.extend_from_slice(&qi.dmbs_used.to_be_bytes());
                p.extend_from_slice(&qi.vlan_required.to_be_bytes());
                p.extend_from_slice(&(qi.vlan_ids.len().min(MAX_VLAN_IDS) as u32).to_be_bytes());
                for i in 0..MAX_VLAN_IDS {
                    let id = qi.vlan_ids.get(i).copied().unwrap_or(0);
                    p.extend_from_slice(&id.to_be_bytes());
                }
                p
            }
        }
    }
}

/// Writes the response for `opcode` into the command area.
pub fn encode(area: &mut [u8], opcode: u32, result: &Result<Response, CommandError>) {
    let (ret, payload) = match result {
        Ok(resp) => (0, resp.payload()),
        Err(err) => (err.ret(), Vec::new()),
    };
    let len = HEADER_LEN + payload.len();
    area[0..4].copy_from_slice(&opcode.to_be_bytes());
    area[4..6].copy_from_slice(&ret.to_be_bytes());
    area[6..8].copy_from_slice(&(len as u16).to_be_bytes());
    area[HEADER_LEN..len].copy_from_slice(&payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(opcode: u32, payload: &[u8]) -> Vec<u8> {
        let mut area = vec![0u8; 4096];
        area[0..4].copy_from_slice(&opcode.to_be_bytes());
        area[6..8].copy_from_slice(&((HEADER_LEN + payload.len()) as u16).to_be_bytes());
        area[8..8 + payload.len()].copy_from_slice(payload);
        area
    }

    #[test]
    fn reg_dmb_fields_decode_big_endian() {
        let mut p = Vec::new();
        p.extend_from_slice(&0x1_0000_2000u64.to_be_bytes());
        p.extend_from_slice(&32768u32.to_be_bytes());
        p.extend_from_slice(&33u32.to_be_bytes());
        p.extend_from_slice(&1u32.to_be_bytes());
        p.extend_from_slice(&0x1fffu32.to_be_bytes());
        p.extend_from_slice(&0xabcdu64.to_be_bytes());
        let cmd = decode(&request(opcode::REG_DMB, &p)).unwrap();
        assert_eq!(
            cmd,
            Command::RegDmb(DmbRequest {
                iova: 0x1_0000_2000,
                len: 32768,
                sba_idx: 33,
                vlan_valid: 1,
                vlan_id: 0x1fff,
                rgid: 0xabcd
            })
        );
    }

    #[test]
    fn wrong_length_is_rejected() {
        let err = decode(&request(opcode::REG_SBA, &[0; 16])).unwrap_err();
        assert_eq!(
            err,
            CommandError::BadLength {
                opcode: 1,
                len: 24,
                expected: 16
            }
        );
    }

    #[test]
    fn retired_opcodes_are_unknown() {
        for op in [0x0c, 0x0d, 0x0f, 0x10, 0, 0xffff_ffff] {
            assert_eq!(
                decode(&request(op, &[])).unwrap_err(),
                CommandError::UnknownOpcode(op)
            );
        }
    }

    #[test]
    fn sba_index_below_32_is_rejected() {
        let mut p = vec![0u8; 32];
        p[8..12].copy_from_slice(&4096u32.to_be_bytes());
        p[12..16].copy_from_slice(&31u32.to_be_bytes());
        assert!(matches!(
            decode(&request(opcode::REG_DMB, &p)),
            Err(CommandError::BadArgument(_))
        ));
    }

    #[test]
    fn response_lengths_match_the_driver() {
        let mut area = vec![0u8; 4096];
        encode(&mut area, opcode::READ_GID, &Ok(Response::Gid(7)));
        assert_eq!(u16::from_be_bytes([area[6], area[7]]), 16);
        encode(
            &mut area,
            opcode::QUERY_INFO,
            &Ok(Response::QueryInfo(QueryInfo::default())),
        );
        assert_eq!(u16::from_be_bytes([area[6], area[7]]), 200);
        encode(&mut area, opcode::REG_SBA, &Ok(Response::Empty));
        assert_eq!(u16::from_be_bytes([area[6], area[7]]), 8);
    }

    #[test]
    fn error_response_carries_ret_and_header_length() {
        let mut area = vec![0u8; 4096];
        encode(
            &mut area,
            opcode::UNREG_DMB,
            &Err(CommandError::UnknownToken(5)),
        );
        assert_eq!(u16::from_be_bytes([area[4], area[5]]), ISM_ERROR);
        assert_eq!(u16::from_be_bytes([area[6], area[7]]), 8);
    }
}
