//! The one table of ISM commands: each opcode's value, its name, its request struct and
//! its response struct, and decoding the command area by it. Decoding, the request lengths the device checks, the names in
//! logs and the fault grammar's `cmd=NAME` all come from here; adding a command is a row
//! here plus its struct in [`super::wire`], its `Command` variant and its handler.

use std::mem::size_of;

use super::command::{read, Command, CommandError, ToCommand};
use super::wire::{
    AddVlanIdRequest, DelVlanIdRequest, QueryInfoRequest, QueryRgidRequest, ReadGidRequest,
    RegDmbRequest, RegIeqRequest, RegSbaRequest, ReqHeader, Request, ResetVlanRequest,
    SetVlanRequest, SignalIeqRequest, UnregDmbRequest, UnregIeqRequest, UnregSbaRequest,
};
// The response column is read by the tests and the fuzz targets only
// (`Opcode::response_len`).
#[cfg(any(test, feature = "testkit"))]
use super::wire::{QueryInfoResponse, ReadGidResponse, RegDmbResponse, RespHeader};

/// Builds [`Opcode`] and everything derived from the table. A row is
/// `Variant = value, "name", RequestStruct, ResponseStruct;` where `Variant` is also the
/// name of the `Command` variant the request decodes to.
macro_rules! opcodes {
    ($($variant:ident = $code:literal, $name:literal, $req:ty, $resp:ty;)*) => {
        /// An opcode the device knows.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum Opcode {
            $($variant = $code,)*
        }

        impl Opcode {
            /// Every opcode, in the table's order.
            pub const ALL: &[Opcode] = &[$(Opcode::$variant,)*];

            /// The opcode with this value, if the device knows it.
            pub const fn from_code(code: u32) -> Option<Self> {
                match code {
                    $($code => Some(Opcode::$variant),)*
                    _ => None,
                }
            }

            /// The lower-case name (`reg_dmb`): the fault grammar's and the logs'.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Opcode::$variant => $name,)*
                }
            }

            /// The request's length (the driver's `sizeof(cmd.request)`).
            pub const fn request_len(self) -> usize {
                match self {
                    $(Opcode::$variant => size_of::<$req>(),)*
                }
            }

            /// The length of a successful response (a failure answers with a header only).
            /// Only the tests and the fuzz targets ask: they pin the response structs to
            /// the driver's sizes and check the device's answers (responses are encoded
            /// from their structs, `RespHeader::of`).
            #[cfg(any(test, feature = "testkit"))]
            pub const fn response_len(self) -> usize {
                match self {
                    $(Opcode::$variant => size_of::<$resp>(),)*
                }
            }

            /// Decodes the command area as this opcode's request (its length checked).
            fn decode(self, area: &[u8]) -> Result<Command, CommandError> {
                match self {
                    $(Opcode::$variant => read::<$req>(area)?.to_command(),)*
                }
            }
        }

        $(impl Request for $req {
            const OPCODE: u32 = $code;
        })*

        impl Command {
            /// The opcode this command was decoded from.
            pub fn opcode(&self) -> u32 {
                match self {
                    $(Command::$variant { .. } => $code,)*
                }
            }
        }
    };
}

opcodes! {
    RegSba    = 0x01, "reg_sba",     RegSbaRequest,    RespHeader;
    RegIeq    = 0x02, "reg_ieq",     RegIeqRequest,    RespHeader;
    ReadGid   = 0x03, "read_gid",    ReadGidRequest,   ReadGidResponse;
    AddVlanId = 0x04, "add_vlan_id", AddVlanIdRequest, RespHeader;
    DelVlanId = 0x05, "del_vlan_id", DelVlanIdRequest, RespHeader;
    SetVlan   = 0x06, "set_vlan",    SetVlanRequest,   RespHeader;
    ResetVlan = 0x07, "reset_vlan",  ResetVlanRequest, RespHeader;
    QueryInfo = 0x08, "query_info",  QueryInfoRequest, QueryInfoResponse;
    QueryRgid = 0x09, "query_rgid",  QueryRgidRequest, RespHeader;
    RegDmb    = 0x0a, "reg_dmb",     RegDmbRequest,    RegDmbResponse;
    UnregDmb  = 0x0b, "unreg_dmb",   UnregDmbRequest,  RespHeader;
    SignalIeq = 0x0e, "signal_ieq",  SignalIeqRequest, RespHeader;
    UnregSba  = 0x11, "unreg_sba",   UnregSbaRequest,  RespHeader;
    UnregIeq  = 0x12, "unreg_ieq",   UnregIeqRequest,  RespHeader;
}

impl Opcode {
    /// The opcode's value on the wire.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The opcode with this name (any case), if the device knows it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|op| op.name().eq_ignore_ascii_case(name))
    }
}

/// Decodes the request in the command area. `area` is the whole 4 KiB buffer.
pub fn decode(area: &[u8]) -> Result<Command, CommandError> {
    let hdr = read::<ReqHeader>(area)?;
    let opcode = hdr.cmd.get();
    let op = Opcode::from_code(opcode).ok_or(CommandError::UnknownOpcode(opcode))?;
    let len = usize::from(hdr.len.get());
    let expected = op.request_len();
    if len != expected {
        return Err(CommandError::BadLength {
            opcode,
            len,
            expected,
        });
    }
    op.decode(area)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ism::command::{DmbRequest, HEADER_LEN};

    /// The driver's values and sizes, copied by hand from Linux 6.12's
    /// drivers/s390/net/ism.h (`#define ISM_REG_SBA 0x1` ... and the request/response
    /// unions): `(name, value, sizeof(request), sizeof(response))`.
    const DRIVER: &[(&str, u32, usize, usize)] = &[
        ("ISM_REG_SBA", 0x1, 16, 8),
        ("ISM_REG_IEQ", 0x2, 24, 8),
        ("ISM_READ_GID", 0x3, 8, 16),
        ("ISM_ADD_VLAN_ID", 0x4, 16, 8),
        ("ISM_DEL_VLAN_ID", 0x5, 16, 8),
        ("ISM_SET_VLAN", 0x6, 8, 8),
        ("ISM_RESET_VLAN", 0x7, 8, 8),
        ("ISM_QUERY_INFO", 0x8, 8, 200),
        ("ISM_QUERY_RGID", 0x9, 24, 8),
        ("ISM_REG_DMB", 0xA, 40, 16),
        ("ISM_UNREG_DMB", 0xB, 16, 8),
        ("ISM_SIGNAL_IEQ", 0xE, 32, 8),
        ("ISM_UNREG_SBA", 0x11, 8, 8),
        ("ISM_UNREG_IEQ", 0x12, 8, 8),
    ];

    #[test]
    fn the_table_is_the_drivers() {
        assert_eq!(Opcode::ALL.len(), DRIVER.len());
        for &(driver_name, value, req, resp) in DRIVER {
            let op = Opcode::from_code(value).unwrap_or_else(|| panic!("{driver_name} missing"));
            assert_eq!(
                format!("ISM_{}", op.name().to_ascii_uppercase()),
                driver_name
            );
            assert_eq!(op.code(), value, "{driver_name}");
            assert_eq!(op.request_len(), req, "{driver_name} request");
            assert_eq!(op.response_len(), resp, "{driver_name} response");
            assert_eq!(Opcode::from_name(op.name()), Some(op));
        }
    }

    #[test]
    fn retired_and_unknown_values_are_not_opcodes() {
        for code in [0, 0x0c, 0x0d, 0x0f, 0x10, 0x13, u32::MAX] {
            assert_eq!(Opcode::from_code(code), None);
        }
        assert_eq!(Opcode::from_name("frobnicate"), None);
        assert_eq!(Opcode::from_name("REG_DMB"), Some(Opcode::RegDmb));
    }

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
        let cmd = decode(&request(Opcode::RegDmb.code(), &p)).unwrap();
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
        let err = decode(&request(Opcode::RegSba.code(), &[0; 16])).unwrap_err();
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
            decode(&request(Opcode::RegDmb.code(), &p)),
            Err(CommandError::BadArgument(_))
        ));
    }
}
