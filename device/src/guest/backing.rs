//! What the device maps of a guest's memory: one mmap per guest-RAM file (a sealed
//! memfd), read and written only through vm-memory's bounds-checked slices, and the
//! errors of the DMA address space built over it (`dma`).

use std::fs::File;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use vm_memory::bitmap::BS;
use vm_memory::mmap::MmapRegion;
use vm_memory::volatile_memory::VolatileSlice;
use vm_memory::{FileOffset, VolatileMemory};

/// Errors of the DMA address space. IOVAs are what the guest asked for; they are logged.
#[derive(Debug, thiserror::Error)]
pub enum DmaError {
    #[error("DMA_MAP without a file descriptor (is guest RAM a shared memfd?)")]
    NoFd,
    #[error("cannot inspect the DMA_MAP file descriptor")]
    Stat(#[source] std::io::Error),
    #[error(
        "guest memory file is not sealed against shrinking (memory-backend-memfd with seal=on)"
    )]
    NotSealed,
    #[error("DMA_MAP of {size:#x} bytes at file offset {offset:#x} exceeds the {file_len:#x}-byte backing file")]
    OutsideFile {
        offset: u64,
        size: u64,
        file_len: u64,
    },
    #[error("DMA range at IOVA {iova:#x} with size {size:#x} is empty or wraps around")]
    BadRange { iova: u64, size: u64 },
    #[error("cannot map the guest memory file")]
    Mmap(#[source] vm_memory::mmap::MmapRegionError),
    #[error("more than {0} separate DMA mappings")]
    TooManyRuns(usize),
    #[error("IOVA {iova:#x} (+{len:#x}) is not mapped")]
    Unmapped { iova: u64, len: u64 },
    #[error("IOVA {iova:#x} (+{len:#x}) is mapped read-only")]
    ReadOnly { iova: u64, len: u64 },
}

pub type Result<T> = std::result::Result<T, DmaError>;

/// One mmap of a guest-memory file, shared by every IOVA run that points into it (and
/// by the views taken of them).
pub(super) struct Backing {
    region: MmapRegion,
}

impl Backing {
    /// Maps the whole of `file` (`file_len` bytes). Mapped memory that the file's owner
    /// truncates faults (SIGBUS) on the next access, killing the whole emulator: only
    /// files sealed against shrinking are mapped (QEMU's memory-backend-memfd seals by
    /// default).
    pub(super) fn map(file: File, file_len: u64) -> Result<Self> {
        let seals = fcntl(&file, FcntlArg::F_GET_SEALS)
            .map(SealFlag::from_bits_truncate)
            .unwrap_or(SealFlag::empty());
        if !seals.contains(SealFlag::F_SEAL_SHRINK) {
            return Err(DmaError::NotSealed);
        }
        let len = usize::try_from(file_len).map_err(|_| DmaError::OutsideFile {
            offset: 0,
            size: file_len,
            file_len,
        })?;
        let region =
            MmapRegion::from_file(FileOffset::new(file, 0), len).map_err(DmaError::Mmap)?;
        Ok(Self { region })
    }

    pub(super) fn slice(&self, offset: u64, len: usize) -> Option<VolatileSlice<'_, BS<'_, ()>>> {
        let offset = usize::try_from(offset).ok()?;
        self.region.get_slice(offset, len).ok()
    }
}
