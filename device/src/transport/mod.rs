//! The vfio-user transport: the message loop of one client connection and the [`Device`]
//! it drives. It knows nothing of ISM: the backend (`backend.rs`) implements [`Device`]
//! above it, as a `vfio_user::ServerBackend` would. The project owns this loop because the
//! device must see each message's header: a data move that fails is answered with an
//! error when the client waits for it, and held when the client posted it (no-reply),
//! which only the header tells apart.
//!
//! What the loop guarantees whatever the client sends:
//! - a message is read in full, declared size and all, before anything else is read, so
//!   the stream never loses its framing; a body is never allocated at its declared size
//!   (one buffer of `MAX_BODY` bytes per connection; larger messages are drained through
//!   it and refused with E2BIG);
//! - a message with the no-reply flag never gets a reply, not even an error (QEMU would
//!   take it for the reply to another request);
//! - a short header, a fixed body shorter than its command needs, a region access whose
//!   count disagrees with the message size: an error reply (EINVAL), never a read past the
//!   message;
//! - only an I/O error, an end of stream inside a message, a size below the header's, or
//!   descriptors the kernel had to truncate end the connection.
//!
//! Read bottom-up: [`wire`] (the message layouts), [`framing`] (messages off a stream),
//! [`hops`] (the hop log), [`channels`] (the main connection and the waited one),
//! [`connection`] (the loop and one function per command).

pub mod channels;
pub mod connection;
pub mod framing;
pub mod hops;
pub mod wire;

use std::fs::File;

use nix::errno::Errno;
use vfio_user::DmaMapFlags;

pub use connection::{Connection, MAX_DATA};
pub use framing::{ConnectionError, Framer, MAX_MSG_FDS};

/// Why the device refused a request: the error reply's errno.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The request makes no sense for this device (a bad region, offset or length).
    #[error("{0}")]
    Invalid(String),
    /// The device could not do it: for a data move, the store did not happen.
    #[error("{0}")]
    Failed(String),
}

impl Refused {
    pub fn errno(&self) -> Errno {
        match self {
            Refused::Invalid(_) => Errno::EINVAL,
            Refused::Failed(_) => Errno::EIO,
        }
    }
}

/// Which mappings a DMA_UNMAP removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmap {
    /// Those inside `[iova, iova + size)`.
    Range { iova: u64, size: u64 },
    /// Every mapping of the connection.
    All,
}

/// The device behind one connection, as the message loop drives it.
pub trait Device {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), Refused>;
    /// `posted`: the client sent the write with the no-reply flag and will never learn
    /// its result.
    fn region_write(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
        posted: bool,
    ) -> Result<(), Refused>;
    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        file_offset: u64,
        iova: u64,
        size: u64,
        fd: Option<File>,
    ) -> Result<(), Refused>;
    fn dma_unmap(&mut self, what: Unmap) -> Result<(), Refused>;
    fn reset(&mut self) -> Result<(), Refused>;
    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<(), Refused>;
}

/// What the device tells about itself: its regions and interrupt indexes, fixed.
#[derive(Clone, Debug)]
pub struct Description {
    pub regions: Vec<wire::RegionInfo>,
    /// One entry per interrupt index; `None` for an index whose info request is refused.
    pub irqs: Vec<Option<wire::IrqInfo>>,
    /// Whether the device supports DEVICE_RESET.
    pub resettable: bool,
}
