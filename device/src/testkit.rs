//! Test and benchmark kit: fake guest RAM and a small vfio-user client.
//!
//! The client speaks the wire protocol by hand instead of using `vfio_user::Client`
//! because tests must send what QEMU never would (bad offsets, truncated messages,
//! posted writes) and must read *error* replies, which that client cannot parse.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// Guest RAM as QEMU gives it to the device: a shared file on tmpfs, passed by fd.
/// (An unlinked /dev/shm file behaves like QEMU's memfd for everything the device does:
/// fd passing, inode identity, shared mappings.)
pub struct GuestRam {
    file: File,
}

impl GuestRam {
    pub fn new(size: u64) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = if Path::new("/dev/shm").is_dir() {
            std::path::PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let path = dir.join(format!(
            "ism-emu-ram-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("create guest RAM file");
        let _ = std::fs::remove_file(&path);
        file.set_len(size).expect("size guest RAM file");
        Self { file }
    }

    pub fn dup_file(&self) -> File {
        self.file.try_clone().expect("dup guest RAM fd")
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    pub fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        self.file
            .read_exact_at(&mut buf, offset)
            .expect("read guest RAM");
        buf
    }

    pub fn write(&self, offset: u64, data: &[u8]) {
        self.file
            .write_all_at(data, offset)
            .expect("write guest RAM");
    }
}

/// vfio-user command numbers (protocol specification, section "Commands").
pub mod cmd {
    pub const VERSION: u16 = 1;
    pub const DMA_MAP: u16 = 2;
    pub const DMA_UNMAP: u16 = 3;
    pub const DEVICE_GET_INFO: u16 = 4;
    pub const DEVICE_GET_REGION_INFO: u16 = 5;
    pub const DEVICE_GET_IRQ_INFO: u16 = 7;
    pub const DEVICE_SET_IRQS: u16 = 8;
    pub const REGION_READ: u16 = 9;
    pub const REGION_WRITE: u16 = 10;
    pub const DEVICE_RESET: u16 = 13;
}

const FLAG_REPLY: u32 = 0x1;
const FLAG_NO_REPLY: u32 = 0x10;
const FLAG_ERROR: u32 = 0x20;
const HEADER_LEN: usize = 16;

/// A reply: `Err(errno)` when the server flagged an error.
pub type Reply = std::result::Result<Vec<u8>, u32>;

/// A hand-made vfio-user client, enough to play QEMU's part.
pub struct Client {
    stream: UnixStream,
    next_id: u16,
}

impl Client {
    /// Connects (retrying while the server starts) and negotiates the version.
    pub fn connect(path: &Path) -> io::Result<Self> {
        let mut last = None;
        for _ in 0..200 {
            match UnixStream::connect(path) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
                    let mut client = Self { stream, next_id: 0 };
                    client.negotiate()?;
                    return Ok(client);
                }
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(last.unwrap_or_else(|| io::Error::other("no connection")))
    }

    fn negotiate(&mut self) -> io::Result<()> {
        let mut payload = Vec::new();
        payload.extend_from_slice(&0u16.to_le_bytes());
        payload.extend_from_slice(&2u16.to_le_bytes());
        payload.extend_from_slice(b"{\"capabilities\":{\"max_msg_fds\":16}}\0");
        self.call(cmd::VERSION, &payload, &[])
            .map_err(io::Error::other)?
            .map(|_| ())
            .map_err(|e| io::Error::other(format!("version rejected: errno {e}")))
    }

    /// Sends one message and waits for its reply.
    pub fn call(&mut self, command: u16, payload: &[u8], fds: &[RawFd]) -> io::Result<Reply> {
        let id = self.send(command, payload, fds, 0)?;
        self.recv_reply(id)
    }

    /// Sends one message; `flags` may ask for no reply.
    pub fn send(
        &mut self,
        command: u16,
        payload: &[u8],
        fds: &[RawFd],
        flags: u32,
    ) -> io::Result<u16> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut msg = Vec::with_capacity(HEADER_LEN + payload.len());
        msg.extend_from_slice(&id.to_le_bytes());
        msg.extend_from_slice(&command.to_le_bytes());
        msg.extend_from_slice(&((HEADER_LEN + payload.len()) as u32).to_le_bytes());
        msg.extend_from_slice(&flags.to_le_bytes());
        msg.extend_from_slice(&0u32.to_le_bytes());
        msg.extend_from_slice(payload);
        if fds.is_empty() {
            self.stream.write_all(&msg)?;
        } else {
            let sent = self
                .stream
                .send_with_fds(&[&msg[..]], fds)
                .map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
            if sent != msg.len() {
                self.stream.write_all(&msg[sent..])?;
            }
        }
        Ok(id)
    }

    /// Sends raw bytes (for truncated or malformed messages).
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    pub fn recv_reply(&mut self, id: u16) -> io::Result<Reply> {
        let mut header = [0u8; HEADER_LEN];
        self.stream.read_exact(&mut header)?;
        let reply_id = u16::from_le_bytes([header[0], header[1]]);
        let size = u32::from_le_bytes(header[4..8].try_into().unwrap()) as usize;
        let flags = u32::from_le_bytes(header[8..12].try_into().unwrap());
        let error = u32::from_le_bytes(header[12..16].try_into().unwrap());
        let mut body = vec![0; size.saturating_sub(HEADER_LEN)];
        self.stream.read_exact(&mut body)?;
        if reply_id != id || flags & FLAG_REPLY == 0 {
            return Err(io::Error::other(format!(
                "unexpected reply id {reply_id} flags {flags:#x} (wanted {id})"
            )));
        }
        if flags & FLAG_ERROR != 0 {
            return Ok(Err(error));
        }
        Ok(Ok(body))
    }

    pub fn dma_map(
        &mut self,
        iova: u64,
        size: u64,
        ram: &GuestRam,
        offset: u64,
    ) -> io::Result<Reply> {
        let mut p = Vec::new();
        p.extend_from_slice(&32u32.to_le_bytes());
        p.extend_from_slice(&3u32.to_le_bytes()); // READ | WRITE
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&iova.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.call(cmd::DMA_MAP, &p, &[ram.fd()])
    }

    /// Maps `pages` 4 KiB pages one message each, the way QEMU's s390 IOMMU does.
    pub fn dma_map_pages(
        &mut self,
        iova: u64,
        pages: u64,
        ram: &GuestRam,
        offset: u64,
    ) -> io::Result<()> {
        for i in 0..pages {
            self.dma_map(iova + i * 4096, 4096, ram, offset + i * 4096)?
                .map_err(|e| io::Error::other(format!("DMA_MAP failed: errno {e}")))?;
        }
        Ok(())
    }

    pub fn dma_unmap(&mut self, iova: u64, size: u64) -> io::Result<Reply> {
        let mut p = Vec::new();
        p.extend_from_slice(&24u32.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&iova.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.call(cmd::DMA_UNMAP, &p, &[])
    }

    fn region_access_payload(region: u32, offset: u64, count: u32) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&region.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        p
    }

    pub fn region_read(&mut self, region: u32, offset: u64, count: u32) -> io::Result<Reply> {
        let p = Self::region_access_payload(region, offset, count);
        Ok(self
            .call(cmd::REGION_READ, &p, &[])?
            .map(|body| body[16..].to_vec()))
    }

    pub fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> io::Result<Reply> {
        let mut p = Self::region_access_payload(region, offset, data.len() as u32);
        p.extend_from_slice(data);
        self.call(cmd::REGION_WRITE, &p, &[])
    }

    /// A posted write: no reply is expected (QEMU posts writes to non-mmap'd regions).
    pub fn region_write_posted(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
    ) -> io::Result<u16> {
        let mut p = Self::region_access_payload(region, offset, data.len() as u32);
        p.extend_from_slice(data);
        self.send(cmd::REGION_WRITE, &p, &[], FLAG_NO_REPLY)
    }

    /// Wires interrupt `index` (1 = MSI, 2 = MSI-X) to a new eventfd and returns it.
    pub fn set_irq_eventfd(&mut self, index: u32) -> io::Result<EventFd> {
        let efd = EventFd::new(EFD_NONBLOCK)?;
        let mut p = Vec::new();
        p.extend_from_slice(&20u32.to_le_bytes());
        // DATA_EVENTFD | ACTION_TRIGGER
        p.extend_from_slice(&(0x4u32 | 0x20).to_le_bytes());
        p.extend_from_slice(&index.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&1u32.to_le_bytes());
        self.call(cmd::DEVICE_SET_IRQS, &p, &[efd.as_raw_fd()])?
            .map_err(|e| io::Error::other(format!("SET_IRQS failed: errno {e}")))?;
        Ok(efd)
    }

    pub fn reset(&mut self) -> io::Result<Reply> {
        self.call(cmd::DEVICE_RESET, &[], &[])
    }
}

/// How many times an eventfd fired since the last call (0 when it did not).
pub fn take_count(efd: &EventFd) -> u64 {
    efd.read().unwrap_or(0)
}
