//! The connections one client talks on: the main one, and the waited channel.
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
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    getsockname, getsockopt, sockopt, AddressFamily, SockType, SockaddrLike, UnixAddr,
};

use super::framing::{ConnectionError, Framer};
use super::wire::Header;

/// One stream and the framer that reads messages off it.
pub struct Endpoint {
    stream: UnixStream,
    framer: Framer,
}

impl Endpoint {
    /// An endpoint for messages whose body is at most `max_body` bytes.
    pub fn new(stream: UnixStream, max_body: usize) -> Self {
        Self {
            stream,
            framer: Framer::new(max_body),
        }
    }

    /// The next header and the descriptor that came with it; None at a clean end.
    pub fn next_header(&mut self) -> Result<Option<(Header, Option<File>)>, ConnectionError> {
        self.framer.next_header(&self.stream)
    }

    /// The current message's body into `body`; false if it was too large and drained.
    pub fn read_body(&mut self, body: &mut Vec<u8>) -> Result<bool, ConnectionError> {
        self.framer.read_body(&self.stream, body)
    }

    /// Writes one whole reply.
    pub fn send(&self, reply: &[u8]) -> Result<(), ConnectionError> {
        (&self.stream)
            .write_all(reply)
            .map_err(ConnectionError::Write)
    }
}

/// Which connection the message being handled came on, and its reply goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    Main,
    Waited,
}

/// The main connection, the waited channel once it is open, and the channel of the
/// message being handled.
pub struct Channels {
    main: Endpoint,
    waited: Option<Endpoint>,
    /// Whether the client's VERSION proposed the waited channel (and so got it).
    pub agreed: bool,
    /// The channel of the message being handled.
    pub current: Channel,
    max_body: usize,
}

impl Channels {
    pub fn new(stream: UnixStream, max_body: usize) -> Self {
        Self {
            main: Endpoint::new(stream, max_body),
            waited: None,
            agreed: false,
            current: Channel::Main,
            max_body,
        }
    }

    /// The endpoint of the message being handled (its body is read there, its reply
    /// written there).
    pub fn endpoint(&mut self) -> &mut Endpoint {
        match (self.current, &mut self.waited) {
            (Channel::Waited, Some(w)) => w,
            _ => &mut self.main,
        }
    }

    /// The next message: its header and descriptor, on whichever channel is due (the
    /// main connection whenever it has bytes, so that a waited request never passes one
    /// sent before it). None when the client closed the main connection between two
    /// messages. An end or a failure of the waited channel closes it, and the main
    /// connection is read on.
    pub fn next_message(&mut self) -> Result<Option<(Header, Option<File>)>, ConnectionError> {
        loop {
            self.current = self.next_channel()?;
            if self.current == Channel::Main {
                return self.main.next_header();
            }
            let Some(waited) = self.waited.as_mut() else {
                continue;
            };
            match waited.next_header() {
                Ok(Some(next)) => return Ok(Some(next)),
                Ok(None) => {
                    log::debug!("the client closed the waited channel");
                    self.waited = None;
                }
                Err(e) => self.close_waited(&e),
            }
        }
    }

    /// The channel to read next: the main connection whenever it has bytes, else
    /// whichever has.
    fn next_channel(&self) -> Result<Channel, ConnectionError> {
        let Some(waited) = &self.waited else {
            return Ok(Channel::Main);
        };
        if self.main.framer.has_buffered() {
            return Ok(Channel::Main);
        }
        let timeout = if waited.framer.has_buffered() {
            PollTimeout::ZERO
        } else {
            PollTimeout::NONE
        };
        let mut fds = [
            PollFd::new(self.main.stream.as_fd(), PollFlags::POLLIN),
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

    /// A failure of the message being handled on the waited channel: that channel ends.
    pub fn close_waited(&mut self, why: &ConnectionError) {
        log::debug!("waited channel closed: {why}");
        self.waited = None;
    }

    /// `X_WAITED_CHANNEL`: takes the descriptor as the waited channel, once, after the
    /// capability was agreed, on the main connection, and only if it is a Unix stream
    /// socket.
    pub fn open_waited(&mut self, fd: Option<File>) -> Result<(), Errno> {
        if !self.agreed || self.current != Channel::Main {
            return Err(Errno::ENOSYS);
        }
        if self.waited.is_some() {
            return Err(Errno::EEXIST);
        }
        let fd = fd
            .map(OwnedFd::from)
            .filter(is_unix_stream)
            .ok_or(Errno::EINVAL)?;
        self.waited = Some(Endpoint::new(UnixStream::from(fd), self.max_body));
        log::debug!("waited channel open");
        Ok(())
    }
}

/// A descriptor the waited channel may be: a Unix stream socket (anything else would fail
/// at its first read and say less).
fn is_unix_stream(fd: &OwnedFd) -> bool {
    let stream = getsockopt(fd, sockopt::SockType).is_ok_and(|t| t == SockType::Stream);
    let unix = getsockname::<UnixAddr>(fd.as_raw_fd())
        .is_ok_and(|a| a.family() == Some(AddressFamily::Unix));
    stream && unix
}
