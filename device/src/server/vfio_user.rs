//! The vfio-user message loop of one client connection: framing, the no-reply flag, error
//! replies, and dispatch to the [`Device`]. The project owns this loop because the device
//! must see each message's header: a data move that fails is answered with an error when
//! the client waits for it, and held when the client posted it (no-reply), which only the
//! header tells apart.
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

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::net::UnixStream;

use nix::errno::Errno;
use vfio_bindings::bindings::vfio::{VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET};
use vfio_user::{DmaMapFlags, DmaUnmapFlags};
use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::backend::{Device, Refused};

use super::framing::Framer;
use super::hops::{now_ns, Hops};
use super::wire::{self, command as cmd, Header, HEADER_LEN, REGION_ACCESS_LEN};

/// The most data one region access may carry: a PCISTB block. Announced to the client as
/// `max_data_xfer_size` (the patched QEMU refuses an ISM function whose server takes less
/// than 4096).
pub const MAX_DATA: usize = 4096;
/// The largest message body the loop reads: a region write of `MAX_DATA` bytes.
const MAX_BODY: usize = REGION_ACCESS_LEN + MAX_DATA;
/// The file descriptors a message may carry (DMA_MAP: the RAM's; SET_IRQS: the one
/// vector's eventfd). Announced as `max_msg_fds`.
pub const MAX_MSG_FDS: u32 = 1;

const EINVAL: i32 = Errno::EINVAL as i32;
const E2BIG: i32 = Errno::E2BIG as i32;
const ENOTSUP: i32 = Errno::ENOTSUP as i32;
const ENOSYS: i32 = Errno::ENOSYS as i32;

/// What ends a connection: the stream itself failed, or lost its framing.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("reading from the client: {0}")]
    Read(#[source] io::Error),
    #[error("writing to the client: {0}")]
    Write(#[source] io::Error),
    #[error("receiving a message's file descriptors: {0} (more than {MAX_MSG_FDS}?)")]
    Fds(#[source] vmm_sys_util::errno::Error),
    #[error("the client closed the connection inside a message")]
    Truncated,
    #[error("message of {0} bytes is shorter than its header")]
    Undersized(u32),
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

/// The capabilities this server announces in its VERSION reply, NUL-terminated. The
/// posted-move capability only to a client that proposed it: a reply holds no capability
/// the client did not propose (a stock QEMU would warn of "spurious capabilities").
fn capabilities(client: &serde_json::Value) -> Vec<u8> {
    let mut caps = serde_json::json!({
        "max_msg_fds": MAX_MSG_FDS,
        "max_data_xfer_size": MAX_DATA,
    });
    if client["capabilities"][wire::CAP_ISM_POSTED_MOVES] == serde_json::Value::Bool(true) {
        caps[wire::CAP_ISM_POSTED_MOVES] = true.into();
    }
    let caps = serde_json::json!({ "capabilities": caps });
    let mut bytes = caps.to_string().into_bytes();
    bytes.push(0);
    bytes
}

/// The outcome of one request, before it is put on the wire.
type Answer = Result<(), Refused>;

/// One client connection.
pub struct Connection<'a> {
    stream: UnixStream,
    description: &'a Description,
    /// Reads messages off the stream (server::framing).
    framer: Framer,
    /// The body of the message being handled (never more than `MAX_BODY` bytes).
    body: Vec<u8>,
    /// The reply being built: one write per reply, no allocation once warm.
    reply: Vec<u8>,
    /// The hop log, when `ISM_EMU_HOPS` asks for it (server::hops).
    hops: Option<Hops>,
}

impl<'a> Connection<'a> {
    pub fn new(stream: UnixStream, description: &'a Description) -> Self {
        Self {
            stream,
            description,
            framer: Framer::new(MAX_BODY),
            body: Vec::with_capacity(MAX_BODY),
            reply: Vec::with_capacity(HEADER_LEN + MAX_BODY),
            hops: Hops::from_env(),
        }
    }

    /// Serves messages until the client closes the connection between two messages
    /// (`Ok`) or the stream fails.
    pub fn serve(&mut self, device: &mut dyn Device) -> Result<(), ConnectionError> {
        while let Some((header, fd)) = self.read_header()? {
            if let Some(h) = &mut self.hops {
                h.current.header_ns = now_ns();
                h.current.id = header.id.get();
                h.current.command = header.command.get();
            }
            self.handle(device, header, fd)?;
            if let Some(h) = &mut self.hops {
                // A no-reply message was served when the loop got it back.
                if h.current.served_ns == 0 {
                    h.current.served_ns = now_ns();
                }
                h.finish();
            }
        }
        Ok(())
    }

    /// The next header and the file descriptor that came with it; None at a clean end.
    fn read_header(&mut self) -> Result<Option<(Header, Option<File>)>, ConnectionError> {
        self.framer.next_header(&self.stream)
    }

    fn handle(
        &mut self,
        device: &mut dyn Device,
        header: Header,
        fd: Option<File>,
    ) -> Result<(), ConnectionError> {
        if !self.framer.read_body(&self.stream, &mut self.body)? {
            log::debug!(
                "message {} of {} bytes refused",
                header.command.get(),
                header.size.get()
            );
            return self.answer(&header, Err(E2BIG));
        }
        if let Some(h) = &mut self.hops {
            h.current.body_ns = now_ns();
        }
        if !header.is_command() {
            // This server sends no requests, so no reply can be due to it.
            log::debug!("unsolicited reply {} ignored", header.id.get());
            return Ok(());
        }
        let command = header.command.get();
        if fd.is_some() && !matches!(command, cmd::DMA_MAP | cmd::DEVICE_SET_IRQS) {
            return self.answer(&header, Err(EINVAL));
        }
        match command {
            cmd::VERSION => self.version(&header),
            cmd::DMA_MAP => {
                let answer = match parse::<wire::DmaMap>(&self.body) {
                    Some(m) => device.dma_map(
                        DmaMapFlags::from_bits_retain(m.flags.get()),
                        m.offset.get(),
                        m.address.get(),
                        m.size.get(),
                        fd,
                    ),
                    None => Err(short("DMA_MAP")),
                };
                self.answer_device(&header, answer)
            }
            cmd::DMA_UNMAP => {
                let Some(unmap) = parse::<wire::DmaUnmap>(&self.body) else {
                    return self.answer_device(&header, Err(short("DMA_UNMAP")));
                };
                let answer = device.dma_unmap(
                    DmaUnmapFlags::from_bits_retain(unmap.flags.get()),
                    unmap.address.get(),
                    unmap.size.get(),
                );
                // The reply echoes the request (no dirty bitmap: none was asked for).
                self.answer_with(&header, answer.map_err(|e| e.errno()), unmap.as_bytes())
            }
            cmd::DEVICE_GET_INFO => self.device_info(&header),
            cmd::DEVICE_GET_REGION_INFO => self.region_info(&header),
            cmd::DEVICE_GET_IRQ_INFO => self.irq_info(&header),
            cmd::DEVICE_SET_IRQS => {
                let answer = match parse::<wire::SetIrqs>(&self.body) {
                    Some(set) => device.set_irqs(
                        set.index.get(),
                        set.flags.get(),
                        set.start.get(),
                        set.count.get(),
                        fd.into_iter().collect(),
                    ),
                    None => Err(short("SET_IRQS")),
                };
                self.answer_device(&header, answer)
            }
            cmd::REGION_READ => self.region_read(device, &header),
            cmd::REGION_WRITE => self.region_write(device, &header),
            cmd::DEVICE_RESET => {
                let answer = device.reset();
                self.answer_device(&header, answer)
            }
            // The client's side of these never reaches a server, or needs a capability
            // this server does not announce (write_multiple, migration, io fds).
            cmd::DEVICE_GET_REGION_IO_FDS
            | cmd::DMA_READ
            | cmd::DMA_WRITE
            | cmd::DIRTY_PAGES
            | cmd::REGION_WRITE_MULTI => self.answer(&header, Err(ENOTSUP)),
            _ => self.answer(&header, Err(ENOSYS)),
        }
    }

    fn version(&mut self, header: &Header) -> Result<(), ConnectionError> {
        let Some((_client, json)) = parse_with_tail::<wire::Version>(&self.body) else {
            return self.answer(header, Err(EINVAL));
        };
        // The client's capabilities ask nothing of a server that sends no requests and
        // no descriptors; they must still be a JSON object, NUL-terminated if present.
        let json = json.strip_suffix(&[0]).unwrap_or(json);
        let client = if json.is_empty() {
            serde_json::Value::Null
        } else {
            match serde_json::from_slice::<serde_json::Value>(json) {
                Ok(v) if v.is_object() => v,
                _ => return self.answer(header, Err(EINVAL)),
            }
        };
        let version = wire::Version {
            major: 0.into(),
            minor: 0.into(),
        };
        let mut body = version.as_bytes().to_vec();
        body.extend_from_slice(&capabilities(&client));
        self.answer_with(header, Ok(()), &body)
    }

    fn device_info(&mut self, header: &Header) -> Result<(), ConnectionError> {
        let d = self.description;
        let flags = VFIO_DEVICE_FLAGS_PCI
            | if d.resettable {
                VFIO_DEVICE_FLAGS_RESET
            } else {
                0
            };
        let info = wire::DeviceInfo {
            argsz: U32::new(size_of::<wire::DeviceInfo>() as u32),
            flags: flags.into(),
            num_regions: U32::new(d.regions.len() as u32),
            num_irqs: U32::new(d.irqs.len() as u32),
        };
        self.answer_with(header, Ok(()), info.as_bytes())
    }

    fn region_info(&mut self, header: &Header) -> Result<(), ConnectionError> {
        let found = parse::<wire::RegionInfo>(&self.body)
            .filter(|asked| asked.argsz.get() as usize >= size_of::<wire::RegionInfo>())
            .and_then(|asked| self.description.regions.get(asked.index.get() as usize));
        match found.copied() {
            Some(info) => self.answer_with(header, Ok(()), info.as_bytes()),
            None => self.answer(header, Err(EINVAL)),
        }
    }

    fn irq_info(&mut self, header: &Header) -> Result<(), ConnectionError> {
        let found = parse::<wire::IrqInfo>(&self.body)
            .and_then(|asked| self.description.irqs.get(asked.index.get() as usize));
        match found.copied().flatten() {
            Some(info) => self.answer_with(header, Ok(()), info.as_bytes()),
            None => self.answer(header, Err(EINVAL)),
        }
    }

    fn region_read(
        &mut self,
        device: &mut dyn Device,
        header: &Header,
    ) -> Result<(), ConnectionError> {
        let access = match parse::<wire::RegionAccess>(&self.body) {
            Some(a) if a.count.get() as usize <= MAX_DATA => a,
            Some(_) => return self.answer(header, Err(E2BIG)),
            None => return self.answer(header, Err(EINVAL)),
        };
        let count = access.count.get() as usize;
        // The reply is built in place: header, the access echoed, then the data the device
        // reads straight into the reply buffer.
        self.reply.clear();
        self.reply
            .extend_from_slice(header.reply(REGION_ACCESS_LEN + count).as_bytes());
        self.reply.extend_from_slice(access.as_bytes());
        let start = self.reply.len();
        self.reply.resize(start + count, 0);
        let read = device.region_read(
            access.region.get(),
            access.offset.get(),
            &mut self.reply[start..],
        );
        match read {
            Ok(()) if !header.no_reply() => self.send_reply(),
            Ok(()) => Ok(()),
            Err(e) => {
                log::debug!("REGION_READ refused: {e}");
                self.answer(header, Err(e.errno()))
            }
        }
    }

    fn region_write(
        &mut self,
        device: &mut dyn Device,
        header: &Header,
    ) -> Result<(), ConnectionError> {
        let Some((access, data)) = parse_with_tail::<wire::RegionAccess>(&self.body) else {
            return self.answer(header, Err(EINVAL));
        };
        if access.count.get() as usize != data.len() {
            return self.answer(header, Err(EINVAL));
        }
        let answer = device.region_write(
            access.region.get(),
            access.offset.get(),
            data,
            header.no_reply(),
        );
        self.answer_with(header, answer.map_err(|e| e.errno()), access.as_bytes())
    }

    fn answer_device(&mut self, header: &Header, answer: Answer) -> Result<(), ConnectionError> {
        self.answer(header, answer.map_err(|e| e.errno()))
    }

    fn answer(&mut self, header: &Header, result: Result<(), i32>) -> Result<(), ConnectionError> {
        self.answer_with(header, result, &[])
    }

    /// Replies `body` on success, the errno on failure; nothing to a no-reply message.
    fn answer_with(
        &mut self,
        header: &Header,
        result: Result<(), i32>,
        body: &[u8],
    ) -> Result<(), ConnectionError> {
        if header.no_reply() {
            return Ok(());
        }
        self.reply.clear();
        match result {
            Ok(()) => {
                self.reply
                    .extend_from_slice(header.reply(body.len()).as_bytes());
                self.reply.extend_from_slice(body);
            }
            Err(errno) => self
                .reply
                .extend_from_slice(header.error_reply(errno).as_bytes()),
        }
        self.send_reply()
    }

    fn send_reply(&mut self) -> Result<(), ConnectionError> {
        if let Some(h) = &mut self.hops {
            h.current.served_ns = now_ns();
        }
        self.stream
            .write_all(&self.reply)
            .map_err(ConnectionError::Write)?;
        if let Some(h) = &mut self.hops {
            h.current.sent_ns = now_ns();
        }
        Ok(())
    }
}

fn short(what: &str) -> Refused {
    Refused::Invalid(format!("{what} body too short"))
}

/// The fixed part `T` at the start of `body`; None if the body is shorter. Longer bodies
/// are allowed (a newer client's `argsz` may be larger).
fn parse<T: FromBytes + KnownLayout + Immutable>(body: &[u8]) -> Option<T> {
    parse_with_tail(body).map(|(t, _)| t)
}

fn parse_with_tail<T: FromBytes + KnownLayout + Immutable>(body: &[u8]) -> Option<(T, &[u8])> {
    T::read_from_prefix(body).ok()
}
