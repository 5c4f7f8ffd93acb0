//! A hand-made vfio-user client, enough to play QEMU's part, and the ISM driver's way
//! of issuing a command through it.
//!
//! The client speaks the wire protocol by hand instead of using `vfio_user::Client`
//! because tests must send what QEMU never would (bad offsets, truncated messages,
//! posted writes) and must read *error* replies, which that client cannot parse.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::sock_ctrl_msg::ScmSocket;
use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::GuestRam;
use crate::ism::command::HEADER_LEN as ISM_HEADER_LEN;
use crate::ism::wire::{Request, RespHeader};
use crate::pci::Bar;

/// vfio-user command numbers and message layouts: the server's own (one definition).
pub use crate::transport::wire as msg;
pub use crate::transport::wire::command as cmd;
use crate::transport::wire::flags::{
    ERROR as FLAG_ERROR, NO_REPLY as FLAG_NO_REPLY, TYPE_REPLY as FLAG_REPLY,
};

/// Larger than any reply body the server sends (its largest is a region read of one
/// PCISTB block); a larger one is drained and refused.
const MAX_REPLY_BODY: usize = 64 << 10;

/// A reply's header as the vfio-user specification lays it out ("Message format"),
/// read here by hand: the client's reading of the wire must not be the server's.
#[derive(Debug)]
struct ReplyHeader {
    id: u16,
    size: u32,
    flags: u32,
    error: u32,
}

/// The header's length: id (u16), command (u16), size (u32), flags (u32), error (u32).
const REPLY_HEADER_LEN: usize = 16;

/// Reads replies off the stream with a framing of its own, not the server's `Framer`:
/// a framing bug on both sides would otherwise pass. One `read` usually brings a whole
/// reply (as QEMU reads its reply on the waited channel, so that the benchmark's client
/// costs what QEMU's does and no more); bytes past it wait for the next.
struct ReplyReader {
    buf: Box<[u8]>,
    /// The unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
}

impl ReplyReader {
    fn new() -> Self {
        Self {
            buf: vec![0; REPLY_HEADER_LEN + MAX_REPLY_BODY].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// Reads until `want` bytes are buffered (an end of stream before: UnexpectedEof).
    fn fill(&mut self, mut stream: &UnixStream, want: usize) -> io::Result<()> {
        if self.start + want > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        while self.end - self.start < want {
            match stream.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The next reply: its header and its body.
    fn next(&mut self, stream: &UnixStream) -> io::Result<(ReplyHeader, Vec<u8>)> {
        self.fill(stream, REPLY_HEADER_LEN)?;
        let h = &self.buf[self.start..self.start + REPLY_HEADER_LEN];
        let u32_at = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let header = ReplyHeader {
            id: u16::from_le_bytes([h[0], h[1]]),
            size: u32_at(4),
            flags: u32_at(8),
            error: u32_at(12),
        };
        let size = header.size as usize;
        if !(REPLY_HEADER_LEN..=self.buf.len()).contains(&size) {
            return Err(io::Error::other(format!("reply of {size} bytes")));
        }
        self.fill(stream, size)?;
        let body = self.buf[self.start + REPLY_HEADER_LEN..self.start + size].to_vec();
        self.start += size;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Ok((header, body))
    }
}

/// The header of a client's message `id`: `command` with `body_len` bytes after the
/// header. The one builder of vfio-user messages for the tests, the benchmarks and the
/// fuzz seeds (with [`message`]).
pub fn request_header(id: u16, command: u16, body_len: usize, flags: u32) -> msg::Header {
    msg::Header {
        id: id.into(),
        command: command.into(),
        size: U32::new((size_of::<msg::Header>() + body_len) as u32),
        flags: flags.into(),
        error: U32::ZERO,
    }
}

/// A whole message: [`request_header`] and `body`.
pub fn message(id: u16, command: u16, flags: u32, body: &[u8]) -> Vec<u8> {
    let header = request_header(id, command, body.len(), flags);
    [header.as_bytes(), body].concat()
}

/// A reply: `Err(errno)` when the server flagged an error.
pub type Reply = std::result::Result<Vec<u8>, u32>;

/// The body of a reply, or an error naming what failed.
pub fn expect_ok(reply: Reply, what: &str) -> io::Result<Vec<u8>> {
    reply.map_err(|errno| io::Error::other(format!("{what} failed: errno {errno}")))
}

/// What an ISM command answered: its `ret` and the whole response, header included.
#[derive(Debug, PartialEq, Eq)]
pub struct CommandReply {
    pub ret: u16,
    pub bytes: Vec<u8>,
}

impl CommandReply {
    pub fn ok(&self) -> bool {
        self.ret == 0
    }

    /// The response as struct `T`; None when it is shorter than `T`.
    pub fn get<T: FromBytes + KnownLayout + Immutable>(&self) -> Option<T> {
        T::read_from_prefix(&self.bytes).ok().map(|(t, _)| t)
    }
}

const CMD_BAR: u32 = Bar::Command.index();

/// A hand-made vfio-user client, enough to play QEMU's part.
pub struct Client {
    stream: UnixStream,
    next_id: u16,
    /// Reads the replies (its own framing, not the server's).
    replies: ReplyReader,
    /// The message being sent, kept so that sending allocates nothing.
    outbox: Vec<u8>,
}

impl Client {
    /// Connects (retrying while the server starts) and negotiates the version.
    pub fn connect(path: &Path) -> io::Result<Self> {
        let mut last = None;
        for _ in 0..200 {
            match UnixStream::connect(path) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
                    let mut client = Self {
                        stream,
                        next_id: 0,
                        replies: ReplyReader::new(),
                        outbox: Vec::new(),
                    };
                    client.negotiate()?;
                    return Ok(client);
                }
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(last.unwrap_or_else(|| io::Error::other("no connection")))
    }

    /// How long a reply may take before the call fails with a timeout (10 s unless
    /// set). After a timeout the stream is out of step: drop the client.
    pub fn set_reply_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.stream.set_read_timeout(Some(timeout))
    }

    fn negotiate(&mut self) -> io::Result<()> {
        let mut payload = [U16::new(0), U16::new(2)].as_bytes().to_vec();
        payload.extend_from_slice(b"{\"capabilities\":{\"max_msg_fds\":16}}\0");
        let reply = self.call(cmd::VERSION, &payload, &[])?;
        expect_ok(reply, "VERSION").map(|_| ())
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
        let header = request_header(id, command, payload.len(), flags);
        let message = &mut self.outbox;
        message.clear();
        message.extend_from_slice(header.as_bytes());
        message.extend_from_slice(payload);
        if fds.is_empty() {
            self.stream.write_all(message)?;
        } else {
            let sent = self
                .stream
                .send_with_fds(&[&message[..]], fds)
                .map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
            if sent != message.len() {
                self.stream.write_all(&message[sent..])?;
            }
        }
        Ok(id)
    }

    /// Sends raw bytes (for truncated or malformed messages).
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Ends the client's side of the stream (the server sees an end of stream).
    pub fn shutdown_write(&self) -> io::Result<()> {
        self.stream.shutdown(std::net::Shutdown::Write)
    }

    /// The stream itself, for tests that need what the client does not offer.
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    pub fn recv_reply(&mut self, id: u16) -> io::Result<Reply> {
        let (header, body) = self.replies.next(&self.stream)?;
        let (reply_id, flags) = (header.id, header.flags);
        if reply_id != id || flags & FLAG_REPLY == 0 {
            return Err(io::Error::other(format!(
                "unexpected reply id {reply_id} flags {flags:#x} (wanted {id})"
            )));
        }
        if flags & FLAG_ERROR != 0 {
            return Ok(Err(header.error));
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
        let map = msg::DmaMap::new(iova, size, offset);
        self.call(cmd::DMA_MAP, map.as_bytes(), &[ram.fd()])
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
            let reply = self.dma_map(iova + i * 4096, 4096, ram, offset + i * 4096)?;
            expect_ok(reply, "DMA_MAP")?;
        }
        Ok(())
    }

    pub fn dma_unmap(&mut self, iova: u64, size: u64) -> io::Result<Reply> {
        let unmap = msg::DmaUnmap {
            argsz: U32::new(size_of::<msg::DmaUnmap>() as u32),
            flags: U32::ZERO,
            address: iova.into(),
            size: size.into(),
        };
        self.call(cmd::DMA_UNMAP, unmap.as_bytes(), &[])
    }

    fn region_access(region: u32, offset: u64, data: &[u8]) -> Vec<u8> {
        let access = msg::RegionAccess {
            offset: offset.into(),
            region: region.into(),
            count: U32::new(data.len() as u32),
        };
        let mut p = access.as_bytes().to_vec();
        p.extend_from_slice(data);
        p
    }

    pub fn region_read(&mut self, region: u32, offset: u64, count: u32) -> io::Result<Reply> {
        let access = msg::RegionAccess {
            offset: offset.into(),
            region: region.into(),
            count: count.into(),
        };
        let reply = self.call(cmd::REGION_READ, access.as_bytes(), &[])?;
        Ok(reply.map(|body| {
            body.get(size_of::<msg::RegionAccess>()..)
                .unwrap_or_default()
                .to_vec()
        }))
    }

    pub fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> io::Result<Reply> {
        let p = Self::region_access(region, offset, data);
        self.call(cmd::REGION_WRITE, &p, &[])
    }

    /// A posted write: no reply is expected (QEMU posts writes to non-mmap'd regions).
    pub fn region_write_posted(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
    ) -> io::Result<u16> {
        let p = Self::region_access(region, offset, data);
        self.send(cmd::REGION_WRITE, &p, &[], FLAG_NO_REPLY)
    }

    /// Wires interrupt `index` (1 = MSI, 2 = MSI-X) to a new eventfd and returns it.
    pub fn set_irq_eventfd(&mut self, index: u32) -> io::Result<EventFd> {
        let efd = EventFd::new(EFD_NONBLOCK)?;
        let set = msg::SetIrqs {
            argsz: U32::new(size_of::<msg::SetIrqs>() as u32),
            // DATA_EVENTFD | ACTION_TRIGGER
            flags: U32::new(0x4 | 0x20),
            index: index.into(),
            start: U32::ZERO,
            count: U32::new(1),
        };
        let reply = self.call(cmd::DEVICE_SET_IRQS, set.as_bytes(), &[efd.as_raw_fd()])?;
        expect_ok(reply, "SET_IRQS")?;
        Ok(efd)
    }

    pub fn reset(&mut self) -> io::Result<Reply> {
        self.call(cmd::DEVICE_RESET, &[], &[])
    }

    /// One ISM command exactly as the driver's ism_cmd() issues it: the fields at offset
    /// 8, the header at 0, then the response header and the rest in 8-byte loads.
    pub fn ism_command<R: Request>(&mut self, request: &R) -> io::Result<CommandReply> {
        self.ism_command_raw(request.as_bytes())
    }

    /// The same with any bytes, the first 8 taken as the header: for unknown opcodes and
    /// lengths that lie.
    pub fn ism_command_raw(&mut self, request: &[u8]) -> io::Result<CommandReply> {
        let (header, fields) = request.split_at(ISM_HEADER_LEN.min(request.len()));
        if !fields.is_empty() {
            expect_ok(self.region_write(CMD_BAR, 8, fields)?, "command fields")?;
        }
        expect_ok(self.region_write(CMD_BAR, 0, header)?, "command header")?;
        let mut bytes = expect_ok(self.region_read(CMD_BAR, 0, 8)?, "response header")?;
        let (resp, _) = RespHeader::read_from_prefix(&bytes)
            .map_err(|_| io::Error::other("short response header"))?;
        let (ret, len) = (resp.ret.get(), u64::from(resp.len.get()));
        if ret == 0 {
            if len < 8 || len % 8 != 0 {
                return Err(io::Error::other(format!("response length {len}")));
            }
            for offset in (8..len).step_by(8) {
                bytes.extend(expect_ok(
                    self.region_read(CMD_BAR, offset, 8)?,
                    "response",
                )?);
            }
        }
        Ok(CommandReply { ret, bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(id: u16, error: u32, body: &[u8]) -> Vec<u8> {
        let flags = FLAG_REPLY | if error == 0 { 0 } else { FLAG_ERROR };
        let mut header = request_header(id, cmd::REGION_READ, body.len(), flags);
        header.error = error.into();
        [header.as_bytes(), body].concat()
    }

    #[test]
    fn replies_written_together_or_split_are_read_apart_in_order() {
        let (mut server, client) = UnixStream::pair().unwrap();
        let mut reader = ReplyReader::new();
        let both = [reply(1, 0, b"first"), reply(2, 5, &[])].concat();
        server.write_all(&both).unwrap();
        let (h, body) = reader.next(&client).unwrap();
        assert_eq!((h.id, h.error, body.as_slice()), (1, 0, &b"first"[..]));
        let (h, body) = reader.next(&client).unwrap();
        assert_eq!((h.id, h.error, h.flags & FLAG_ERROR != 0), (2, 5, true));
        assert!(body.is_empty());
        // A reply cut inside its header and inside its body.
        let third = reply(3, 0, &[7; 100]);
        server.write_all(&third[..10]).unwrap();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            server.write_all(&third[10..50]).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            server.write_all(&third[50..]).unwrap();
            server
        });
        let (h, body) = reader.next(&client).unwrap();
        assert_eq!((h.id, h.size, body), (3, 116, vec![7; 100]));
        drop(writer.join().unwrap());
        let end = reader.next(&client).unwrap_err();
        assert_eq!(end.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_reply_shorter_than_its_header_is_an_error() {
        let (mut server, client) = UnixStream::pair().unwrap();
        let mut bad = reply(1, 0, &[]);
        bad[4..8].copy_from_slice(&8u32.to_le_bytes());
        server.write_all(&bad).unwrap();
        let err = ReplyReader::new().next(&client).unwrap_err();
        assert_eq!(err.to_string(), "reply of 8 bytes");
    }
}
