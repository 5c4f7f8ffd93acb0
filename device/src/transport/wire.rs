//! The vfio-user wire format, as far as this device speaks it: the message header and the
//! fixed bodies of the commands QEMU's client sends (vfio-user specification, "Message
//! format" and "Commands"). Little-endian, packed as on the wire. The server loop
//! (`connection.rs`) and the testkit's client both use these: one definition.

use nix::errno::Errno;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Command numbers (the `vfio_user` crate's `Command` enum names them too, but a message
/// from a hostile client carries any `u16`: these are what the loop matches on).
pub mod command {
    pub const VERSION: u16 = 1;
    pub const DMA_MAP: u16 = 2;
    pub const DMA_UNMAP: u16 = 3;
    pub const DEVICE_GET_INFO: u16 = 4;
    pub const DEVICE_GET_REGION_INFO: u16 = 5;
    pub const DEVICE_GET_REGION_IO_FDS: u16 = 6;
    pub const DEVICE_GET_IRQ_INFO: u16 = 7;
    pub const DEVICE_SET_IRQS: u16 = 8;
    pub const REGION_READ: u16 = 9;
    pub const REGION_WRITE: u16 = 10;
    pub const DMA_READ: u16 = 11;
    pub const DMA_WRITE: u16 = 12;
    pub const DEVICE_RESET: u16 = 13;
    pub const DIRTY_PAGES: u16 = 14;
    pub const REGION_WRITE_MULTI: u16 = 15;
    /// Experimental, after `CAP_WAITED_CHANNEL`: carries the server's end of the waited
    /// channel (transport::channels).
    pub const X_WAITED_CHANNEL: u16 = 0x7f00;
}

/// Header flags: the message type in bits 0–3, then the no-reply and error bits.
pub mod flags {
    pub const TYPE_MASK: u32 = 0xf;
    pub const TYPE_COMMAND: u32 = 0;
    pub const TYPE_REPLY: u32 = 1;
    pub const NO_REPLY: u32 = 1 << 4;
    pub const ERROR: u32 = 1 << 5;
}

/// The header every message starts with.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct Header {
    pub id: U16,
    pub command: U16,
    /// The whole message, header included.
    pub size: U32,
    pub flags: U32,
    /// errno of an error reply.
    pub error: U32,
}

pub const HEADER_LEN: usize = size_of::<Header>();

impl Header {
    pub fn no_reply(&self) -> bool {
        self.flags.get() & flags::NO_REPLY != 0
    }

    pub fn is_command(&self) -> bool {
        self.flags.get() & flags::TYPE_MASK == flags::TYPE_COMMAND
    }

    /// The reply to `self` carrying `body_len` bytes after the header.
    pub fn reply(&self, body_len: usize) -> Self {
        Self {
            id: self.id,
            command: self.command,
            size: U32::new((HEADER_LEN + body_len) as u32),
            flags: U32::new(flags::TYPE_REPLY),
            error: U32::ZERO,
        }
    }

    /// The error reply to `self`.
    pub fn error_reply(&self, errno: Errno) -> Self {
        Self {
            flags: U32::new(flags::TYPE_REPLY | flags::ERROR),
            error: U32::new(errno as u32),
            ..self.reply(0)
        }
    }
}

/// `VERSION`: followed by a NUL-terminated JSON object of capabilities.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct Version {
    pub major: U16,
    pub minor: U16,
}

#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct DmaMap {
    pub argsz: U32,
    pub flags: U32,
    /// Offset of the mapping in the file descriptor that comes with the message.
    pub offset: U64,
    pub address: U64,
    pub size: U64,
}

impl DmaMap {
    /// A readable and writable mapping of `size` bytes at file `offset`.
    pub fn new(address: u64, size: u64, offset: u64) -> Self {
        Self {
            argsz: U32::new(size_of::<Self>() as u32),
            flags: U32::new(3),
            offset: offset.into(),
            address: address.into(),
            size: size.into(),
        }
    }
}

#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct DmaUnmap {
    pub argsz: U32,
    pub flags: U32,
    pub address: U64,
    pub size: U64,
}

#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct DeviceInfo {
    pub argsz: U32,
    pub flags: U32,
    pub num_regions: U32,
    pub num_irqs: U32,
}

/// `struct vfio_region_info` without capabilities.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct RegionInfo {
    pub argsz: U32,
    pub flags: U32,
    pub index: U32,
    pub cap_offset: U32,
    pub size: U64,
    /// The offset to mmap the region at (none of ours is mmap-able: 0).
    pub offset: U64,
}

#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct IrqInfo {
    pub argsz: U32,
    pub flags: U32,
    pub index: U32,
    pub count: U32,
}

#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct SetIrqs {
    pub argsz: U32,
    pub flags: U32,
    pub index: U32,
    pub start: U32,
    pub count: U32,
}

/// `REGION_READ` and `REGION_WRITE`: the data follows (a write's request, a read's reply).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct RegionAccess {
    pub offset: U64,
    pub region: U32,
    pub count: U32,
}

pub const REGION_ACCESS_LEN: usize = size_of::<RegionAccess>();

/// The capability this device announces in its `VERSION` reply beyond the specification's
/// own: it holds the failure of a data move that arrived with the no-reply flag, and fails
/// that sender's later signalling moves into the same DMB until the DMB's owner resets it
/// (docs/device.md, "Posted moves"). The patched QEMU posts ISM data moves only to a
/// server that announces it, and only with `x-ism-post=on`.
pub const CAP_ISM_POSTED_MOVES: &str = "x_ism_posted_moves";

/// The capability of a second connection for requests whose sender waits for the reply:
/// after both sides announced it, the client sends `X_WAITED_CHANNEL` with the server's
/// end of a socket pair, and sends on it the waited requests that no earlier request is
/// still queued before. The server serves the main connection's bytes first, so the
/// requests keep their order. What a guest sees does not change, only which thread of
/// QEMU reads the reply.
pub const CAP_WAITED_CHANNEL: &str = "x_waited_channel";
