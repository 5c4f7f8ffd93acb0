//! Test and benchmark kit (the `testkit` feature): fake guest RAM, a small vfio-user client
//! and the ISM driver's way of issuing a command. Not part of the emulator.
//!
//! The client and the RAM do not panic: every failure is an `io::Error` for the test to
//! unwrap. [`rig::Rig`] is a fixture and panics on a setup step that fails.

mod client;
pub mod rig;

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::tempfile::TempFile;

pub use client::{cmd, expect_ok, message, msg, request_header, Client, CommandReply, Reply};

/// The move-window offset of a store into element 0 of DMB `token` at `offset`, with or
/// without the signal.
pub fn window(token: u64, offset: u32, signal: bool) -> u64 {
    crate::ism::MoveAddress {
        token,
        dmbe: 0,
        signal,
        offset,
    }
    .encode()
}

/// The VLAN id with which the driver probes for SMC-Dv2 capability.
pub const VLAN_SMCD_V2: u64 = 0x1fff;

/// Guest RAM as QEMU gives it to the device: a memfd, passed by fd, sealed against
/// growing and shrinking as QEMU's `memory-backend-memfd` seals it by default.
pub struct GuestRam {
    file: File,
}

impl GuestRam {
    pub fn new(size: u64) -> io::Result<Self> {
        let ram = Self::unsealed(size)?;
        let seals = SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SHRINK;
        fcntl(&ram.file, FcntlArg::F_ADD_SEALS(seals)).map_err(io::Error::from)?;
        Ok(ram)
    }

    /// Guest RAM whose owner may still truncate it (what the device must refuse).
    pub fn unsealed(size: u64) -> io::Result<Self> {
        let flags = MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING;
        let file = File::from(memfd_create(c"guest-ram", flags).map_err(io::Error::from)?);
        file.set_len(size)?;
        Ok(Self { file })
    }

    /// A file on tmpfs instead of a memfd: it cannot be sealed at all.
    pub fn tmpfs(size: u64) -> io::Result<Self> {
        let file = TempFile::new_in(Path::new("/dev/shm"))
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))?
            .into_file();
        file.set_len(size)?;
        Ok(Self { file })
    }

    /// Shrinks the file (what a hostile QEMU could do to unsealed RAM).
    pub fn truncate(&self, size: u64) -> io::Result<()> {
        self.file.set_len(size)
    }

    pub fn dup_file(&self) -> io::Result<File> {
        self.file.try_clone()
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    pub fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; len];
        self.file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    pub fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }
}

/// How many times an eventfd fired since the last call (0 when it did not).
pub fn take_count(efd: &EventFd) -> u64 {
    efd.read().unwrap_or(0)
}
