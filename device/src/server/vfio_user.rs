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
//!
//! ## The waited channel
//!
//! QEMU's client reads replies on its own I/O thread and wakes the thread waiting for
//! them: every waited store passes through three threads. With the experimental
//! capability `x_waited_channel` (wire::CAP_WAITED_CHANNEL) the client hands over a
//! second connection on which the waiting thread sends its request and reads the reply
//! itself. It sends there only when nothing it sent before is still queued, so serving
//! every byte of the main connection first keeps the requests in their order. A failure
//! of the waited channel (a read, a write, its end) closes that channel only: the client
//! goes back to the main connection.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    getsockname, getsockopt, sockopt, AddressFamily, SockType, SockaddrLike, UnixAddr,
};
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
const EEXIST: i32 = Errno::EEXIST as i32;

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
    for cap in [wire::CAP_ISM_POSTED_MOVES, wire::CAP_WAITED_CHANNEL] {
        if proposed(client, cap) {
            caps[cap] = true.into();
        }
    }
    let caps = serde_json::json!({ "capabilities": caps });
    let mut bytes = caps.to_string().into_bytes();
    bytes.push(0);
    bytes
}

fn proposed(client: &serde_json::Value, cap: &str) -> bool {
    client["capabilities"][cap] == serde_json::Value::Bool(true)
}

/// The outcome of one request, before it is put on the wire.
type Answer = Result<(), Refused>;

/// The second connection of `x_waited_channel` (module docs).
struct Waited {
    stream: UnixStream,
    framer: Framer,
}

/// Which connection the message being handled came on, and its reply goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Channel {
    Main,
    Waited,
}

/// One client connection.
pub struct Connection<'a> {
    stream: UnixStream,
    description: &'a Description,
    /// Reads messages off the stream (server::framing).
    framer: Framer,
    /// Whether the client's VERSION proposed the waited channel (and so got it).
    waited_agreed: bool,
    waited: Option<Waited>,
    /// The channel of the message being handled.
    channel: Channel,
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
            waited_agreed: false,
            waited: None,
            channel: Channel::Main,
            body: Vec::with_capacity(MAX_BODY),
            reply: Vec::with_capacity(HEADER_LEN + MAX_BODY),
            hops: Hops::from_env(),
        }
    }

    /// Serves messages until the client closes the connection between two messages
    /// (`Ok`) or the stream fails.
    pub fn serve(&mut self, device: &mut dyn Device) -> Result<(), ConnectionError> {
        loop {
            self.channel = self.next_channel()?;
            let next = match self.channel {
                Channel::Main => match self.read_header()? {
                    Some(next) => next,
                    None => return Ok(()),
                },
                Channel::Waited => match self.read_waited_header() {
                    Some(next) => next,
                    None => continue,
                },
            };
            let (header, fd) = next;
            if let Some(h) = &mut self.hops {
                h.current.header_ns = now_ns();
                h.current.id = header.id.get();
                h.current.command = header.command.get();
            }
            if let Err(e) = self.handle(device, header, fd) {
                if self.channel == Channel::Main {
                    return Err(e);
                }
                self.close_waited(&e);
            }
            if let Some(h) = &mut self.hops {
                // A no-reply message was served when the loop got it back.
                if h.current.served_ns == 0 {
                    h.current.served_ns = now_ns();
                }
                h.finish();
            }
        }
    }

    /// The channel to read next: the main connection whenever it has bytes (so that a
    /// waited request never passes one sent before it), else whichever has.
    fn next_channel(&mut self) -> Result<Channel, ConnectionError> {
        let Some(waited) = &self.waited else {
            return Ok(Channel::Main);
        };
        if self.framer.has_buffered() {
            return Ok(Channel::Main);
        }
        let timeout = if waited.framer.has_buffered() {
            PollTimeout::ZERO
        } else {
            PollTimeout::NONE
        };
        let mut fds = [
            PollFd::new(self.stream.as_fd(), PollFlags::POLLIN),
            PollFd::new(waited.stream.as_fd(), PollFlags::POLLIN),
        ];
        loop {
            match poll(&mut fds, timeout) {
                Ok(_) => break,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(ConnectionError::Read(e.into())),
            }
        }
        // Readable, hung up or failed: the read tells which.
        let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        if ready(&fds[0]) {
            Ok(Channel::Main)
        } else {
            Ok(Channel::Waited)
        }
    }

    /// The next header and the file descriptor that came with it; None at a clean end.
    fn read_header(&mut self) -> Result<Option<(Header, Option<File>)>, ConnectionError> {
        self.framer.next_header(&self.stream)
    }

    /// The next header on the waited channel; None when it ended (it is closed then).
    fn read_waited_header(&mut self) -> Option<(Header, Option<File>)> {
        let waited = self.waited.as_mut()?;
        match waited.framer.next_header(&waited.stream) {
            Ok(Some(next)) => Some(next),
            Ok(None) => {
                log::debug!("the client closed the waited channel");
                self.waited = None;
                None
            }
            Err(e) => {
                self.close_waited(&e);
                None
            }
        }
    }

    fn close_waited(&mut self, why: &ConnectionError) {
        log::debug!("waited channel closed: {why}");
        self.waited = None;
    }

    /// The stream and framer of the message being handled (its body is read there, its
    /// reply written there).
    fn current<'s>(
        channel: Channel,
        main: (&'s UnixStream, &'s mut Framer),
        waited: &'s mut Option<Waited>,
    ) -> (&'s UnixStream, &'s mut Framer) {
        match (channel, waited) {
            (Channel::Waited, Some(w)) => (&w.stream, &mut w.framer),
            _ => main,
        }
    }

    fn handle(
        &mut self,
        device: &mut dyn Device,
        header: Header,
        fd: Option<File>,
    ) -> Result<(), ConnectionError> {
        let (stream, framer) = Self::current(
            self.channel,
            (&self.stream, &mut self.framer),
            &mut self.waited,
        );
        if !framer.read_body(stream, &mut self.body)? {
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
        if fd.is_some()
            && (self.channel == Channel::Waited
                || !matches!(
                    command,
                    cmd::DMA_MAP | cmd::DEVICE_SET_IRQS | cmd::X_WAITED_CHANNEL
                ))
        {
            return self.answer(&header, Err(EINVAL));
        }
        match command {
            cmd::VERSION => self.version(&header),
            cmd::X_WAITED_CHANNEL => self.open_waited(&header, fd),
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

    /// `X_WAITED_CHANNEL`: takes the descriptor as the waited channel, once, after the
    /// capability was agreed, and only if it is a Unix stream socket.
    fn open_waited(&mut self, header: &Header, fd: Option<File>) -> Result<(), ConnectionError> {
        if !self.waited_agreed || self.channel != Channel::Main {
            return self.answer(header, Err(ENOSYS));
        }
        if self.waited.is_some() {
            return self.answer(header, Err(EEXIST));
        }
        match fd.map(OwnedFd::from).filter(is_unix_stream) {
            Some(fd) => {
                self.waited = Some(Waited {
                    stream: UnixStream::from(fd),
                    framer: Framer::new(MAX_BODY),
                });
                log::debug!("waited channel open");
                self.answer(header, Ok(()))
            }
            None => self.answer(header, Err(EINVAL)),
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
        self.waited_agreed = proposed(&client, wire::CAP_WAITED_CHANNEL);
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
        let (mut stream, _) = Self::current(
            self.channel,
            (&self.stream, &mut self.framer),
            &mut self.waited,
        );
        stream
            .write_all(&self.reply)
            .map_err(ConnectionError::Write)?;
        if let Some(h) = &mut self.hops {
            h.current.sent_ns = now_ns();
        }
        Ok(())
    }
}

/// A descriptor the waited channel may be: a Unix stream socket (anything else would fail
/// at its first read and say less).
fn is_unix_stream(fd: &OwnedFd) -> bool {
    let stream = getsockopt(fd, sockopt::SockType).is_ok_and(|t| t == SockType::Stream);
    let unix = getsockname::<UnixAddr>(std::os::fd::AsRawFd::as_raw_fd(fd))
        .is_ok_and(|a| a.family() == Some(AddressFamily::Unix));
    stream && unix
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

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::fd::{AsRawFd, RawFd};
    use std::thread::JoinHandle;

    use vmm_sys_util::sock_ctrl_msg::ScmSocket;
    use zerocopy::FromZeros;

    use super::*;
    use crate::server::wire::flags;

    /// Records the region accesses it serves, in order.
    #[derive(Default)]
    struct Log(Vec<String>);

    impl Device for Log {
        fn region_read(&mut self, _: u32, offset: u64, _: &mut [u8]) -> Result<(), Refused> {
            self.0.push(format!("read {offset}"));
            Ok(())
        }
        fn region_write(&mut self, _: u32, offset: u64, _: &[u8], posted: bool) -> Answer {
            self.0.push(format!(
                "write {offset}{}",
                if posted { " posted" } else { "" }
            ));
            Ok(())
        }
        fn dma_map(&mut self, _: DmaMapFlags, _: u64, _: u64, _: u64, _: Option<File>) -> Answer {
            Ok(())
        }
        fn dma_unmap(&mut self, _: DmaUnmapFlags, _: u64, _: u64) -> Answer {
            Ok(())
        }
        fn reset(&mut self) -> Answer {
            Ok(())
        }
        fn set_irqs(&mut self, _: u32, _: u32, _: u32, _: u32, _: Vec<File>) -> Answer {
            Ok(())
        }
    }

    fn message(id: u16, command: u16, flag_bits: u32, body: &[u8]) -> Vec<u8> {
        let header = Header {
            id: id.into(),
            command: command.into(),
            size: ((HEADER_LEN + body.len()) as u32).into(),
            flags: flag_bits.into(),
            error: 0.into(),
        };
        [header.as_bytes(), body].concat()
    }

    fn version(id: u16, caps: &str) -> Vec<u8> {
        let mut body = [0u16.to_le_bytes(), 2u16.to_le_bytes()].concat();
        body.extend_from_slice(caps.as_bytes());
        body.push(0);
        message(id, cmd::VERSION, 0, &body)
    }

    fn access(id: u16, command: u16, flag_bits: u32, offset: u64, data: &[u8]) -> Vec<u8> {
        let a = wire::RegionAccess {
            offset: offset.into(),
            region: 0.into(),
            count: (data.len() as u32).into(),
        };
        message(id, command, flag_bits, &[a.as_bytes(), data].concat())
    }

    fn with_fd(stream: &UnixStream, message: &[u8], fd: RawFd) {
        let sent = stream.send_with_fds(&[message], &[fd]).unwrap();
        assert_eq!(sent, message.len());
    }

    /// The next reply on `stream`: its id and its error (0 when none).
    fn reply(mut stream: &UnixStream) -> (u16, u32) {
        let mut header = Header::new_zeroed();
        stream.read_exact(header.as_mut_bytes()).unwrap();
        let mut body = vec![0; header.size.get() as usize - HEADER_LEN];
        stream.read_exact(&mut body).unwrap();
        assert_eq!(header.flags.get() & flags::TYPE_MASK, flags::TYPE_REPLY);
        (header.id.get(), header.error.get())
    }

    /// Serves `stream` on a thread with a recording device, until the client closes it.
    fn serve(stream: UnixStream) -> JoinHandle<Vec<String>> {
        std::thread::spawn(move || {
            let description = crate::server::description();
            let mut log = Log::default();
            Connection::new(stream, &description)
                .serve(&mut log)
                .expect("a clean end");
            log.0
        })
    }

    const WITH_CAP: &str = r#"{"capabilities":{"x_waited_channel":true}}"#;

    /// Writes VERSION with the capability (id 1) and X_WAITED_CHANNEL (id 2) on `client`,
    /// as QEMU does; returns the client's end of the waited channel.
    fn propose_waited_channel(client: &UnixStream) -> UnixStream {
        let (theirs, ours) = UnixStream::pair().unwrap();
        let mut c = client;
        c.write_all(&version(1, WITH_CAP)).unwrap();
        with_fd(
            client,
            &message(2, cmd::X_WAITED_CHANNEL, 0, &[]),
            theirs.as_raw_fd(),
        );
        ours
    }

    #[test]
    fn the_main_connection_s_bytes_are_served_before_a_waited_request() {
        let (server, client) = UnixStream::pair().unwrap();
        let ours = propose_waited_channel(&client);
        let mut c = &client;
        // Everything is on both sockets before the server reads any of it: the waited
        // request first, then a posted write and a waited one on the main connection.
        (&ours)
            .write_all(&access(10, cmd::REGION_READ, 0, 3, &[]))
            .unwrap();
        c.write_all(&access(
            11,
            cmd::REGION_WRITE,
            flags::NO_REPLY,
            1,
            b"posted",
        ))
        .unwrap();
        c.write_all(&access(12, cmd::REGION_WRITE, 0, 2, b"waited"))
            .unwrap();
        let served = serve(server);
        assert_eq!(reply(&client), (1, 0));
        assert_eq!(reply(&client), (2, 0));
        assert_eq!(reply(&client), (12, 0));
        assert_eq!(
            reply(&ours),
            (10, 0),
            "the reply comes on the waited channel"
        );
        drop(client);
        drop(ours);
        assert_eq!(
            served.join().unwrap(),
            ["write 1 posted", "write 2", "read 3"]
        );
    }

    #[test]
    fn a_waited_channel_needs_the_capability_and_a_unix_stream_socket_once() {
        let (server, client) = UnixStream::pair().unwrap();
        let served = serve(server);
        let (theirs, ours) = UnixStream::pair().unwrap();
        let open = |id| message(id, cmd::X_WAITED_CHANNEL, 0, &[]);
        let mut c = &client;
        with_fd(&client, &open(1), theirs.as_raw_fd());
        assert_eq!(reply(&client), (1, ENOSYS as u32), "not agreed");
        c.write_all(&version(2, WITH_CAP)).unwrap();
        assert_eq!(reply(&client).1, 0);
        let pipe = nix::unistd::pipe().unwrap();
        with_fd(&client, &open(3), pipe.0.as_raw_fd());
        assert_eq!(reply(&client), (3, EINVAL as u32), "a pipe");
        let (dgram, _) = std::os::unix::net::UnixDatagram::pair().unwrap();
        with_fd(&client, &open(4), dgram.as_raw_fd());
        assert_eq!(reply(&client), (4, EINVAL as u32), "a datagram socket");
        c.write_all(&open(5)).unwrap();
        assert_eq!(reply(&client), (5, EINVAL as u32), "no descriptor");
        with_fd(&client, &open(6), theirs.as_raw_fd());
        assert_eq!(reply(&client), (6, 0));
        with_fd(&client, &open(7), theirs.as_raw_fd());
        assert_eq!(reply(&client), (7, EEXIST as u32), "a second one");
        // On the waited channel itself, a descriptor is refused there.
        with_fd(
            &ours,
            &access(8, cmd::REGION_WRITE, 0, 0, b"x"),
            pipe.1.as_raw_fd(),
        );
        assert_eq!(reply(&ours), (8, EINVAL as u32));
        drop(client);
        drop(ours);
        assert!(served.join().unwrap().is_empty());
    }

    #[test]
    fn a_broken_waited_channel_ends_itself_and_the_main_connection_goes_on() {
        let (server, client) = UnixStream::pair().unwrap();
        let served = serve(server);
        let ours = propose_waited_channel(&client);
        let mut c = &client;
        assert_eq!(reply(&client).0, 1);
        assert_eq!(reply(&client), (2, 0));
        // A size below the header's loses the channel's framing: it is closed.
        let mut bad = access(3, cmd::REGION_WRITE, 0, 0, b"x");
        bad[4..8].copy_from_slice(&4u32.to_le_bytes());
        (&ours).write_all(&bad).unwrap();
        let mut end = [0u8; 1];
        assert_eq!((&ours).read(&mut end).unwrap(), 0, "the server closed it");
        c.write_all(&access(4, cmd::REGION_WRITE, 0, 4, b"main"))
            .unwrap();
        assert_eq!(reply(&client), (4, 0));
        drop(client);
        assert_eq!(served.join().unwrap(), ["write 4"]);
    }
}
