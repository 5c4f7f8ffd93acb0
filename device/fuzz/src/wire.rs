//! Requests as the driver builds them, the response as it reads it, and the probe
//! sequence, from the device's own wire structs.

use ism_emu::ism::cdc;
use ism_emu::ism::wire::{self as w, Request};
use zerocopy::big_endian::{U32, U64};

pub use ism_emu::ism::opcodes::Opcode;

/// The response header and what follows, with its shape checked: what the driver's
/// read loop relies on (`len` at least 8, a multiple of 8, exactly the command's size).
#[derive(Debug, Clone)]
pub struct Reply {
    pub cmd: u32,
    pub ret: u16,
    pub len: u16,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn parse(area: &[u8]) -> Self {
        let cmd = u32::from_be_bytes(area[0..4].try_into().unwrap());
        let ret = u16::from_be_bytes(area[4..6].try_into().unwrap());
        let len = u16::from_be_bytes(area[6..8].try_into().unwrap());
        Self {
            cmd,
            ret,
            len,
            body: area[..usize::from(len).min(area.len())].to_vec(),
        }
    }

    /// Checks the response to a request with opcode `op` (a store that executed).
    pub fn check_shape(&self, op: u32) {
        assert_eq!(self.cmd, op, "response echoes another opcode");
        assert!(
            self.len >= 8 && self.len.is_multiple_of(8),
            "response length {}",
            self.len
        );
        if self.ret != 0 {
            assert_eq!(self.len, 8, "a failure answers with a bare header");
            return;
        }
        let expected = Opcode::from_code(op).map_or(8, Opcode::response_len);
        assert_eq!(usize::from(self.len), expected, "response length of opcode {op:#x}");
    }

    /// The u64 at `at` in the response (the token, the GID).
    pub fn u64_at(&self, at: usize) -> u64 {
        u64::from_be_bytes(self.body[at..at + 8].try_into().unwrap())
    }
}

fn bytes<R: Request>(request: R) -> Vec<u8> {
    request.as_bytes().to_vec()
}

pub fn query_info() -> Vec<u8> {
    bytes(w::QueryInfoRequest::new())
}
pub fn reg_sba(iova: u64) -> Vec<u8> {
    bytes(w::RegSbaRequest::new(U64::new(iova)))
}
pub fn reg_ieq(iova: u64, len: u64) -> Vec<u8> {
    bytes(w::RegIeqRequest::new(U64::new(iova), U64::new(len)))
}
pub fn read_gid() -> Vec<u8> {
    bytes(w::ReadGidRequest::new())
}
pub fn add_vlan_id(vlan: u64) -> Vec<u8> {
    bytes(w::AddVlanIdRequest::new(U64::new(vlan)))
}
pub fn del_vlan_id(vlan: u64) -> Vec<u8> {
    bytes(w::DelVlanIdRequest::new(U64::new(vlan)))
}
pub fn set_vlan() -> Vec<u8> {
    bytes(w::SetVlanRequest::new())
}
pub fn reset_vlan() -> Vec<u8> {
    bytes(w::ResetVlanRequest::new())
}
pub fn query_rgid(rgid: u64, vlan_valid: u32, vlan_id: u32) -> Vec<u8> {
    bytes(w::QueryRgidRequest::new(
        U64::new(rgid),
        U32::new(vlan_valid),
        U32::new(vlan_id),
    ))
}
pub fn reg_dmb(iova: u64, len: u32, sba_idx: u32, rgid: u64) -> Vec<u8> {
    bytes(w::RegDmbRequest::new(
        U64::new(iova),
        U32::new(len),
        U32::new(sba_idx),
        U32::ZERO,
        U32::ZERO,
        U64::new(rgid),
    ))
}
pub fn unreg_dmb(token: u64) -> Vec<u8> {
    bytes(w::UnregDmbRequest::new(U64::new(token)))
}
pub fn signal_ieq(rgid: u64, trigger_irq: u32, event_code: u32, info: u64) -> Vec<u8> {
    bytes(w::SignalIeqRequest::new(
        U64::new(rgid),
        U32::new(trigger_irq),
        U32::new(event_code),
        U64::new(info),
    ))
}
pub fn unreg_sba() -> Vec<u8> {
    bytes(w::UnregSbaRequest::new())
}
pub fn unreg_ieq() -> Vec<u8> {
    bytes(w::UnregIeqRequest::new())
}

/// What the Linux driver sends when it probes a function (ism_dev_init, then the SMC-Dv2
/// check): QUERY_INFO, REG_SBA, REG_IEQ, READ_GID, ADD_VLAN_ID(0x1fff) and its undo.
pub fn probe_sequence(sba: u64, ieq: u64) -> Vec<Vec<u8>> {
    vec![
        query_info(),
        reg_sba(sba),
        reg_ieq(ieq, 512),
        read_gid(),
        add_vlan_id(0x1fff),
        del_vlan_id(0x1fff),
    ]
}

/// The move window offset of `token`, DMBE `idx`, signal flag and DMB offset.
pub fn move_offset(token: u64, dmbe: u8, signal: bool, offset: u32) -> u64 {
    ism_emu::ism::MoveAddress {
        token,
        dmbe,
        signal,
        offset,
    }
    .encode()
}

/// A 32-byte CDC message (net/smc's smcd_cdc_msg) with cursors and connection flags.
pub fn cdc(prod_count: u32, cons_count: u32, prod_flags: u8, conn_state: u8) -> cdc::Area {
    let cursor = |count| cdc::Cursor { wrap: 0, count };
    cdc::message(
        cursor(prod_count),
        cursor(cons_count),
        prod_flags,
        conn_state,
    )
}
