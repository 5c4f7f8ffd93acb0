//! The message loop of one client connection: the no-reply flag, error replies, and one
//! function per command, each driving the [`Device`] (the guarantees it keeps are in the
//! module docs of `transport`).

use std::fs::File;

use nix::errno::Errno;
use vfio_bindings::bindings::vfio::{
    VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET, VFIO_DMA_UNMAP_FLAG_ALL,
    VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP,
};
use vfio_user::DmaMapFlags;
use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::channels::{Channel, Channels};
use super::framing::{ConnectionError, MAX_MSG_FDS};
use super::hops::{HopLog, Step};
use super::wire::{self, command as cmd, Header, HEADER_LEN, REGION_ACCESS_LEN};
use super::{Description, Device, Refused, Unmap};

/// The most data one region access may carry: a PCISTB block. Announced to the client as
/// `max_data_xfer_size` (the patched QEMU refuses an ISM function whose server takes less
/// than 4096).
pub const MAX_DATA: usize = 4096;
/// The largest message body the loop reads: a region write of `MAX_DATA` bytes.
const MAX_BODY: usize = REGION_ACCESS_LEN + MAX_DATA;

/// The DMA_UNMAP flags the vfio-user specification defines: they are Linux's
/// `VFIO_DMA_UNMAP_FLAG_*` bits 0 and 1 (taken from vfio-bindings: the `vfio_user`
/// crate's `DmaUnmapFlags` puts "unmap all" at bit 2, which is Linux's
/// `VFIO_DMA_UNMAP_FLAG_VADDR`, a flag vfio-user does not have). Any other bit is refused.
/// No dirty bitmap is kept (no migration capability is announced): an unmap that asks
/// for one is served as a plain unmap, its reply echoing the request.
const UNMAP_FLAGS: u32 = VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP | VFIO_DMA_UNMAP_FLAG_ALL;

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

/// What a command handler tells the loop: done (the reply, if due, was written), or the
/// connection failed.
type Handled = Result<(), ConnectionError>;

/// One client connection.
pub struct Connection<'a> {
    channels: Channels,
    description: &'a Description,
    /// The body of the message being handled (never more than `MAX_BODY` bytes).
    body: Vec<u8>,
    /// The reply being built: one write per reply, no allocation once warm.
    reply: Vec<u8>,
    /// The hop log, when `ISM_EMU_HOPS` asks for it (transport::hops).
    hops: HopLog,
}

impl<'a> Connection<'a> {
    pub fn new(stream: std::os::unix::net::UnixStream, description: &'a Description) -> Self {
        Self {
            channels: Channels::new(stream, MAX_BODY),
            description,
            body: Vec::with_capacity(MAX_BODY),
            reply: Vec::with_capacity(HEADER_LEN + MAX_BODY),
            hops: HopLog::from_env(),
        }
    }

    /// Serves messages until the client closes the connection between two messages
    /// (`Ok`) or the stream fails.
    pub fn serve(&mut self, device: &mut dyn Device) -> Result<(), ConnectionError> {
        while let Some((header, fd)) = self.channels.next_message()? {
            self.hops.mark(Step::Header {
                id: header.id.get(),
                command: header.command.get(),
            });
            if let Err(e) = self.handle(device, header, fd) {
                if self.channels.current == Channel::Main {
                    return Err(e);
                }
                self.channels.close_waited(&e);
            }
            self.hops.mark(Step::Done);
        }
        Ok(())
    }

    fn handle(&mut self, device: &mut dyn Device, header: Header, fd: Option<File>) -> Handled {
        if !self.channels.endpoint().read_body(&mut self.body)? {
            log::debug!(
                "message {} of {} bytes refused",
                header.command.get(),
                header.size.get()
            );
            return self.answer(&header, Err(Errno::E2BIG));
        }
        self.hops.mark(Step::Body);
        if !header.is_command() {
            // This server sends no requests, so no reply can be due to it.
            log::debug!("unsolicited reply {} ignored", header.id.get());
            return Ok(());
        }
        let command = header.command.get();
        if fd.is_some()
            && (self.channels.current == Channel::Waited
                || !matches!(
                    command,
                    cmd::DMA_MAP | cmd::DEVICE_SET_IRQS | cmd::X_WAITED_CHANNEL
                ))
        {
            return self.answer(&header, Err(Errno::EINVAL));
        }
        let h = &header;
        match command {
            cmd::VERSION => self.version(h),
            cmd::X_WAITED_CHANNEL => self.open_waited(h, fd),
            cmd::DMA_MAP => self.dma_map(device, h, fd),
            cmd::DMA_UNMAP => self.dma_unmap(device, h),
            cmd::DEVICE_GET_INFO => self.device_info(h),
            cmd::DEVICE_GET_REGION_INFO => self.region_info(h),
            cmd::DEVICE_GET_IRQ_INFO => self.irq_info(h),
            cmd::DEVICE_SET_IRQS => self.set_irqs(device, h, fd),
            cmd::REGION_READ => self.region_read(device, h),
            cmd::REGION_WRITE => self.region_write(device, h),
            cmd::DEVICE_RESET => self.reset(device, h),
            // The client's side of these never reaches a server, or needs a capability
            // this server does not announce (write_multiple, migration, io fds).
            cmd::DEVICE_GET_REGION_IO_FDS
            | cmd::DMA_READ
            | cmd::DMA_WRITE
            | cmd::DIRTY_PAGES
            | cmd::REGION_WRITE_MULTI => self.answer(h, Err(Errno::ENOTSUP)),
            _ => self.answer(h, Err(Errno::ENOSYS)),
        }
    }

    /// `X_WAITED_CHANNEL` (transport::channels).
    fn open_waited(&mut self, header: &Header, fd: Option<File>) -> Handled {
        let opened = self.channels.open_waited(fd);
        self.answer(header, opened)
    }

    fn version(&mut self, header: &Header) -> Handled {
        let Some((_client, json)) = parse_with_tail::<wire::Version>(&self.body) else {
            return self.answer(header, Err(Errno::EINVAL));
        };
        // The client's capabilities ask nothing of a server that sends no requests and
        // no descriptors; they must still be a JSON object, NUL-terminated if present.
        let json = json.strip_suffix(&[0]).unwrap_or(json);
        let client = if json.is_empty() {
            serde_json::Value::Null
        } else {
            match serde_json::from_slice::<serde_json::Value>(json) {
                Ok(v) if v.is_object() => v,
                _ => return self.answer(header, Err(Errno::EINVAL)),
            }
        };
        let version = wire::Version {
            major: 0.into(),
            minor: 0.into(),
        };
        self.channels.agreed = proposed(&client, wire::CAP_WAITED_CHANNEL);
        let mut body = version.as_bytes().to_vec();
        body.extend_from_slice(&capabilities(&client));
        self.answer_with(header, Ok(()), &body)
    }

    fn dma_map(&mut self, device: &mut dyn Device, header: &Header, fd: Option<File>) -> Handled {
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
        self.answer_device(header, answer)
    }

    fn dma_unmap(&mut self, device: &mut dyn Device, header: &Header) -> Handled {
        let Some(unmap) = parse::<wire::DmaUnmap>(&self.body) else {
            return self.answer_device(header, Err(short("DMA_UNMAP")));
        };
        let flags = unmap.flags.get();
        if flags & !UNMAP_FLAGS != 0 {
            log::debug!("DMA_UNMAP with undefined flags {flags:#x} refused");
            return self.answer(header, Err(Errno::EINVAL));
        }
        let what = if flags & VFIO_DMA_UNMAP_FLAG_ALL != 0 {
            Unmap::All
        } else {
            Unmap::Range {
                iova: unmap.address.get(),
                size: unmap.size.get(),
            }
        };
        let answer = device.dma_unmap(what).map_err(|e| e.errno());
        // The reply echoes the request (no dirty bitmap: UNMAP_FLAGS).
        self.answer_with(header, answer, unmap.as_bytes())
    }

    fn device_info(&mut self, header: &Header) -> Handled {
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

    fn region_info(&mut self, header: &Header) -> Handled {
        let found = parse::<wire::RegionInfo>(&self.body)
            .filter(|asked| asked.argsz.get() as usize >= size_of::<wire::RegionInfo>())
            .and_then(|asked| self.description.regions.get(asked.index.get() as usize));
        match found.copied() {
            Some(info) => self.answer_with(header, Ok(()), info.as_bytes()),
            None => self.answer(header, Err(Errno::EINVAL)),
        }
    }

    fn irq_info(&mut self, header: &Header) -> Handled {
        let found = parse::<wire::IrqInfo>(&self.body)
            .and_then(|asked| self.description.irqs.get(asked.index.get() as usize));
        match found.copied().flatten() {
            Some(info) => self.answer_with(header, Ok(()), info.as_bytes()),
            None => self.answer(header, Err(Errno::EINVAL)),
        }
    }

    fn set_irqs(&mut self, device: &mut dyn Device, header: &Header, fd: Option<File>) -> Handled {
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
        self.answer_device(header, answer)
    }

    fn region_read(&mut self, device: &mut dyn Device, header: &Header) -> Handled {
        let access = match parse::<wire::RegionAccess>(&self.body) {
            Some(a) if a.count.get() as usize <= MAX_DATA => a,
            Some(_) => return self.answer(header, Err(Errno::E2BIG)),
            None => return self.answer(header, Err(Errno::EINVAL)),
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

    fn region_write(&mut self, device: &mut dyn Device, header: &Header) -> Handled {
        let Some((access, data)) = parse_with_tail::<wire::RegionAccess>(&self.body) else {
            return self.answer(header, Err(Errno::EINVAL));
        };
        if access.count.get() as usize != data.len() {
            return self.answer(header, Err(Errno::EINVAL));
        }
        let answer = device.region_write(
            access.region.get(),
            access.offset.get(),
            data,
            header.no_reply(),
        );
        self.answer_with(header, answer.map_err(|e| e.errno()), access.as_bytes())
    }

    fn reset(&mut self, device: &mut dyn Device, header: &Header) -> Handled {
        let answer = device.reset();
        self.answer_device(header, answer)
    }

    fn answer_device(&mut self, header: &Header, answer: Result<(), Refused>) -> Handled {
        self.answer(header, answer.map_err(|e| e.errno()))
    }

    fn answer(&mut self, header: &Header, result: Result<(), Errno>) -> Handled {
        self.answer_with(header, result, &[])
    }

    /// Replies `body` on success, the errno on failure; nothing to a no-reply message.
    fn answer_with(&mut self, header: &Header, result: Result<(), Errno>, body: &[u8]) -> Handled {
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

    fn send_reply(&mut self) -> Handled {
        self.hops.mark(Step::Served);
        self.channels.endpoint().send(&self.reply)?;
        self.hops.mark(Step::Sent);
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

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::fd::{AsRawFd, RawFd};
    use std::os::unix::net::UnixStream;
    use std::thread::JoinHandle;

    use vmm_sys_util::sock_ctrl_msg::ScmSocket;
    use zerocopy::FromZeros;

    use super::*;
    use crate::testkit::message;
    use crate::transport::wire::flags;

    type Answer = Result<(), Refused>;

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
        fn dma_unmap(&mut self, what: Unmap) -> Answer {
            self.0.push(format!("unmap {what:?}"));
            Ok(())
        }
        fn reset(&mut self) -> Answer {
            Ok(())
        }
        fn set_irqs(&mut self, _: u32, _: u32, _: u32, _: u32, _: Vec<File>) -> Answer {
            Ok(())
        }
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
            let description = Description {
                regions: Vec::new(),
                irqs: Vec::new(),
                resettable: false,
            };
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
        assert_eq!(reply(&client), (1, Errno::ENOSYS as u32), "not agreed");
        c.write_all(&version(2, WITH_CAP)).unwrap();
        assert_eq!(reply(&client).1, 0);
        let pipe = nix::unistd::pipe().unwrap();
        with_fd(&client, &open(3), pipe.0.as_raw_fd());
        assert_eq!(reply(&client), (3, Errno::EINVAL as u32), "a pipe");
        let (dgram, _) = std::os::unix::net::UnixDatagram::pair().unwrap();
        with_fd(&client, &open(4), dgram.as_raw_fd());
        assert_eq!(
            reply(&client),
            (4, Errno::EINVAL as u32),
            "a datagram socket"
        );
        c.write_all(&open(5)).unwrap();
        assert_eq!(reply(&client), (5, Errno::EINVAL as u32), "no descriptor");
        with_fd(&client, &open(6), theirs.as_raw_fd());
        assert_eq!(reply(&client), (6, 0));
        with_fd(&client, &open(7), theirs.as_raw_fd());
        assert_eq!(reply(&client), (7, Errno::EEXIST as u32), "a second one");
        // On the waited channel itself, a descriptor is refused there.
        with_fd(
            &ours,
            &access(8, cmd::REGION_WRITE, 0, 0, b"x"),
            pipe.1.as_raw_fd(),
        );
        assert_eq!(reply(&ours), (8, Errno::EINVAL as u32));
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

    fn unmap(id: u16, flag_bits: u32) -> Vec<u8> {
        let body = wire::DmaUnmap {
            argsz: (size_of::<wire::DmaUnmap>() as u32).into(),
            flags: flag_bits.into(),
            address: 0x1000.into(),
            size: 0x2000.into(),
        };
        message(id, cmd::DMA_UNMAP, 0, body.as_bytes())
    }

    #[test]
    fn dma_unmap_takes_linux_s_unmap_all_bit_and_refuses_flags_vfio_user_does_not_define() {
        let (server, client) = UnixStream::pair().unwrap();
        let served = serve(server);
        let mut c = &client;
        c.write_all(&unmap(1, 0)).unwrap();
        assert_eq!(reply(&client), (1, 0));
        c.write_all(&unmap(2, 1 << 1)).unwrap();
        assert_eq!(reply(&client), (2, 0));
        // Bit 2 is Linux's VFIO_DMA_UNMAP_FLAG_VADDR (the vfio_user crate's "unmap all").
        c.write_all(&unmap(3, 1 << 2)).unwrap();
        assert_eq!(reply(&client), (3, Errno::EINVAL as u32));
        drop(client);
        assert_eq!(
            served.join().unwrap(),
            ["unmap Range { iova: 4096, size: 8192 }", "unmap All"]
        );
    }
}
