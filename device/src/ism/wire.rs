//! The command area's wire format: one `#[repr(C)]` request struct and, where the answer
//! carries more than a header, one response struct per command, laid out as the Linux
//! driver's ism.h lays out its request/response unions. Fields are big-endian (s390 stores
//! its structs natively), so a request's length is its `size_of`. The device decodes with
//! these types, and the testkit and the integration tests build requests with them.
//! Which opcode each request struct carries is the table's, in [`super::opcodes`].
//!
//! ```text
//!  request   0: cmd u32 | 4: reserved u16 | 6: len u16 (whole request)  | 8: fields
//!  response  0: cmd u32 | 4: ret u16      | 6: len u16 (whole response) | 8: fields
//! ```

use std::mem::size_of;

use zerocopy::big_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// VLAN ids a function keeps; QUERY_INFO answers with a table of this many.
pub const MAX_VLAN_IDS: usize = 64;

/// Derives the byte-level traits every wire struct needs.
macro_rules! wire_struct {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident: $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
        #[repr(C)]
        pub struct $name {
            $($(#[$fdoc])* pub $field: $ty,)*
        }
    };
}

wire_struct!(
    /// The first 8 bytes of every request. Storing them executes the command.
    ReqHeader {
        cmd: U32,
        reserved: U16,
        /// The whole request, header included.
        len: U16,
    }
);

wire_struct!(
    /// The first 8 bytes of every response.
    RespHeader {
        /// The request's opcode, echoed.
        cmd: U32,
        /// 0, or the failure code (docs/device.md).
        ret: U16,
        /// The whole response, header included.
        len: U16,
    }
);

/// The length of a wire struct, as its header's `len` field holds it.
const fn len_of<T>() -> U16 {
    U16::new(size_of::<T>() as u16)
}

impl ReqHeader {
    /// The header of request type `T`.
    pub const fn of<T: Request>() -> Self {
        Self {
            cmd: U32::new(T::OPCODE),
            reserved: U16::ZERO,
            len: len_of::<T>(),
        }
    }
}

impl RespHeader {
    /// A header-only response: `ret` 0 for success, or a failure code.
    pub const fn bare(cmd: u32, ret: u16) -> Self {
        Self {
            cmd: U32::new(cmd),
            ret: U16::new(ret),
            len: len_of::<Self>(),
        }
    }

    /// The header of a successful response of type `T`.
    pub const fn of<T>(cmd: u32) -> Self {
        Self {
            cmd: U32::new(cmd),
            ret: U16::ZERO,
            len: len_of::<T>(),
        }
    }
}

/// A request struct of one opcode (the impls come from the table in `super::opcodes`).
pub trait Request: IntoBytes + FromBytes + KnownLayout + Immutable + Unaligned {
    const OPCODE: u32;
}

/// Declares a request struct: the header, then `fields`, and `new(fields)` to build one.
macro_rules! request {
    ($(#[$doc:meta])* $name:ident { $($field:ident: $ty:ty),* $(,)? }) => {
        wire_struct!($(#[$doc])* $name { hdr: ReqHeader, $($field: $ty,)* });

        impl $name {
            #[allow(clippy::new_without_default, clippy::too_many_arguments)]
            pub fn new($($field: $ty),*) -> Self {
                Self { hdr: ReqHeader::of::<Self>(), $($field,)* }
            }
        }
    };
}

request!(RegSbaRequest { sba: U64 });
request!(RegIeqRequest { ieq: U64, len: U64 });
request!(ReadGidRequest {});
request!(AddVlanIdRequest { vlan_id: U64 });
request!(DelVlanIdRequest { vlan_id: U64 });
request!(SetVlanRequest {});
request!(ResetVlanRequest {});
request!(QueryInfoRequest {});
request!(QueryRgidRequest {
    rgid: U64,
    vlan_valid: U32,
    vlan_id: U32
});
request!(
    /// `dmb` is the DMB's IOVA, `rgid` the peer allowed to move into it.
    RegDmbRequest {
        dmb: U64,
        dmb_len: U32,
        sba_idx: U32,
        vlan_valid: U32,
        vlan_id: U32,
        rgid: U64,
    }
);
request!(UnregDmbRequest { dmb_tok: U64 });
request!(SignalIeqRequest {
    rgid: U64,
    trigger_irq: U32,
    event_code: U32,
    info: U64
});
request!(UnregSbaRequest {});
request!(UnregIeqRequest {});

wire_struct!(
    /// READ_GID's answer.
    ReadGidResponse { hdr: RespHeader, gid: U64 }
);

wire_struct!(
    /// REG_DMB's answer: the token moves address the DMB by.
    RegDmbResponse { hdr: RespHeader, dmb_tok: U64 }
);

wire_struct!(
    /// QUERY_INFO's answer (200 bytes).
    QueryInfoResponse {
        hdr: RespHeader,
        version: U32,
        max_len: U32,
        ism_state: U64,
        my_gid: U64,
        sba: U64,
        ieq: U64,
        ieq_len: U32,
        reserved: U32,
        dmbs_owned: U32,
        dmbs_used: U32,
        vlan_required: U32,
        vlan_nr_ids: U32,
        vlan_id: [U16; MAX_VLAN_IDS],
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_knows_its_header() {
        let req = UnregDmbRequest::new(U64::new(7 << 32));
        assert_eq!(
            req.as_bytes(),
            [0, 0, 0, 0x0b, 0, 0, 0, 16, 0, 0, 0, 7, 0, 0, 0, 0]
        );
    }
}
