//! Test and benchmark kit (the `testkit` feature): fake guest RAM, a small vfio-user client
//! and the ISM driver's way of issuing a command. Not part of the emulator.
//!
//! Nothing here panics: every failure is an `io::Error` for the test to unwrap.

mod client;

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;

use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::tempfile::TempFile;

pub use client::{cmd, expect_ok, msg, Client, CommandReply, Reply};

/// The VLAN id with which the driver probes for SMC-Dv2 capability.
pub const VLAN_SMCD_V2: u64 = 0x1fff;

/// Guest RAM as QEMU gives it to the device: a shared file on tmpfs, passed by fd.
/// (An unlinked /dev/shm file behaves like QEMU's memfd for everything the device does:
/// fd passing, inode identity, shared mappings.)
pub struct GuestRam {
    file: File,
}

impl GuestRam {
    pub fn new(size: u64) -> io::Result<Self> {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let file = TempFile::new_in(&dir)
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))?
            .into_file();
        file.set_len(size)?;
        Ok(Self { file })
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
