//! Reading vfio-user messages off a client's stream with as few system calls as the
//! stream allows: one `recvmsg` usually brings a whole message (header and body), where
//! reading the header and then the body took two. A waited ISM store is one message and
//! one reply, so the read saved is one of the three calls its round trip makes here.
//!
//! Reading more than the header means a read can run into the next message, so the bytes
//! past the current message stay in the buffer for the next one; and a file descriptor
//! that arrives with a read must be given to the right message. The kernel makes that
//! decidable: a Unix stream socket delivers a sender's descriptors with the first byte of
//! the `sendmsg` that carried them and ends the read there, and a vfio-user client sends
//! each message, descriptors with it, in one `sendmsg`. So a descriptor belongs to the
//! last message that begins inside the read it came with. A descriptor no message can
//! claim that way (a client that splits its messages oddly) is closed: it could only be
//! the client's own mistake, and it only costs that client its own request.
//!
//! The buffer is fixed (one header and the largest body the loop accepts); a larger
//! message is drained without being kept.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::net::UnixStream;

use vmm_sys_util::sock_ctrl_msg::ScmSocket;
use zerocopy::FromBytes;

use super::wire::{Header, HEADER_LEN};

/// The file descriptors a message may carry (DMA_MAP: the RAM's; SET_IRQS: the one
/// vector's eventfd). Announced as `max_msg_fds`.
pub const MAX_MSG_FDS: u32 = 1;

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

/// Descriptors received but not yet given to a message. A client following the protocol
/// never has more than two waiting (one for the message being completed, one that came
/// with the read completing it); more are the client's error and the oldest is closed.
const MAX_WAITING_FDS: usize = 4;

/// A descriptor and the stream bytes `[from, to)` of the read it came with.
struct WaitingFd {
    file: File,
    from: u64,
    to: u64,
}

/// The buffered reading side of one connection.
pub struct Framer {
    buf: Box<[u8]>,
    /// The unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// The stream offset of `buf[start]`.
    offset: u64,
    fds: VecDeque<WaitingFd>,
    /// The body of the message whose header `next_header` gave last, still to be read.
    body_due: usize,
}

impl Framer {
    /// A framer for messages whose body is at most `max_body` bytes (larger ones are
    /// drained, not kept).
    pub fn new(max_body: usize) -> Self {
        Self {
            buf: vec![0u8; HEADER_LEN + max_body].into_boxed_slice(),
            start: 0,
            end: 0,
            offset: 0,
            fds: VecDeque::new(),
            body_due: 0,
        }
    }

    /// Whether bytes of a next message are already buffered (a `next_header` may then
    /// need no read).
    pub fn has_buffered(&self) -> bool {
        self.end > self.start
    }

    /// The largest body `read_body` keeps.
    fn max_body(&self) -> usize {
        self.buf.len() - HEADER_LEN
    }

    /// The next message's header and the descriptor that came with it; None when the
    /// client closed the stream between two messages. The previous message's body must
    /// have been read or skipped.
    pub fn next_header(
        &mut self,
        stream: &UnixStream,
    ) -> Result<Option<(Header, Option<File>)>, ConnectionError> {
        debug_assert_eq!(self.body_due, 0, "the previous body was not read");
        if !self.fill(stream, HEADER_LEN)? {
            return Ok(None);
        }
        let header = Header::read_from_bytes(&self.buf[self.start..self.start + HEADER_LEN])
            .expect("HEADER_LEN bytes make a header");
        let at = self.offset;
        self.consume(HEADER_LEN);
        let size = header.size.get();
        let body = (size as usize)
            .checked_sub(HEADER_LEN)
            .ok_or(ConnectionError::Undersized(size))?;
        self.body_due = body;
        Ok(Some((header, self.claim_fd(at, u64::from(size)))))
    }

    /// The descriptor of the message at stream offset `at`, `size` bytes long: the one
    /// that came with the read in which this message is the last to begin. Descriptors of
    /// reads this message has passed are closed.
    fn claim_fd(&mut self, at: u64, size: u64) -> Option<File> {
        while let Some(w) = self.fds.front() {
            if w.to <= at {
                // Its read ended before this message began: nobody's.
                log::debug!("a descriptor no message began with was closed");
                self.fds.pop_front();
                continue;
            }
            if w.from <= at && at + size >= w.to {
                return self.fds.pop_front().map(|w| w.file);
            }
            // It came with a later message's read (or this message is not the last to
            // begin in that read): leave it.
            return None;
        }
        None
    }

    /// Reads the current message's body into `body` (cleared first). A body larger than
    /// `max_body` is drained instead, and the answer is false.
    pub fn read_body(
        &mut self,
        stream: &UnixStream,
        body: &mut Vec<u8>,
    ) -> Result<bool, ConnectionError> {
        if self.body_due > self.max_body() {
            self.skip_body(stream)?;
            return Ok(false);
        }
        let len = std::mem::take(&mut self.body_due);
        if !self.fill(stream, len)? && len > 0 {
            return Err(ConnectionError::Truncated);
        }
        body.clear();
        body.extend_from_slice(&self.buf[self.start..self.start + len]);
        self.consume(len);
        Ok(true)
    }

    /// Drains the current message's body without keeping it. Reads stop at the message's
    /// end, so no byte or descriptor of the next message is taken here.
    fn skip_body(&mut self, stream: &UnixStream) -> Result<(), ConnectionError> {
        let mut left = std::mem::take(&mut self.body_due) as u64;
        let buffered = (self.end - self.start) as u64;
        let now = left.min(buffered) as usize;
        self.consume(now);
        left -= now as u64;
        // The buffer is empty from here on (or the body ended inside it).
        let mut stream = stream;
        while left > 0 {
            let chunk = left.min(self.buf.len() as u64) as usize;
            match stream.read(&mut self.buf[..chunk]) {
                Ok(0) => return Err(ConnectionError::Truncated),
                Ok(n) => {
                    left -= n as u64;
                    self.offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ConnectionError::Read(e)),
            }
        }
        Ok(())
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads until `want` bytes are buffered. False if the stream ended with nothing
    /// buffered; an end with some bytes buffered but fewer than `want` is `Truncated`.
    fn fill(&mut self, stream: &UnixStream, want: usize) -> Result<bool, ConnectionError> {
        debug_assert!(want <= self.buf.len());
        if self.end - self.start >= want {
            return Ok(true);
        }
        if self.start + want > self.buf.len() {
            // Move what is left to the front so that the whole message fits.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        while self.end - self.start < want {
            let from = self.offset + (self.end - self.start) as u64;
            let (got, fd) = match stream.recv_with_fd(&mut self.buf[self.end..]) {
                Ok(r) => r,
                Err(e) if e.errno() == nix::errno::Errno::EINTR as i32 => continue,
                Err(e) => return Err(ConnectionError::Fds(e)),
            };
            if got == 0 {
                return if self.end == self.start {
                    Ok(false)
                } else {
                    Err(ConnectionError::Truncated)
                };
            }
            self.end += got;
            if let Some(file) = fd {
                if self.fds.len() == MAX_WAITING_FDS {
                    log::debug!("too many descriptors waiting for their messages; oldest closed");
                    self.fds.pop_front();
                }
                self.fds.push_back(WaitingFd {
                    file,
                    from,
                    to: from + got as u64,
                });
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    fn message(id: u16, body: &[u8]) -> Vec<u8> {
        crate::testkit::message(id, 2, 0, body)
    }

    fn next(f: &mut Framer, s: &UnixStream) -> (u16, Vec<u8>, Option<File>) {
        let (h, fd) = f.next_header(s).unwrap().unwrap();
        let mut body = Vec::new();
        assert!(f.read_body(s, &mut body).unwrap(), "body kept");
        (h.id.get(), body, fd)
    }

    /// Any descriptor will do.
    fn tmp_file() -> File {
        File::open("/dev/null").unwrap()
    }

    #[test]
    fn messages_written_together_are_read_apart_in_order() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut all = message(1, &[1; 40]);
        all.extend(message(2, &[]));
        all.extend(message(3, &[3; 4096]));
        a.write_all(&all).unwrap();
        let mut f = Framer::new(4096 + 16);
        assert_eq!(next(&mut f, &b).0, 1);
        assert_eq!(next(&mut f, &b).1, Vec::<u8>::new());
        let (id, body, _) = next(&mut f, &b);
        assert_eq!((id, body), (3, vec![3; 4096]));
        drop(a);
        assert!(f.next_header(&b).unwrap().is_none());
    }

    #[test]
    fn a_message_split_over_writes_and_headers_cut_anywhere_are_whole() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut all = message(7, &[7; 100]);
        all.extend(message(8, &[8; 10]));
        let t = std::thread::spawn(move || {
            for chunk in all.chunks(5) {
                a.write_all(chunk).unwrap();
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        });
        let mut f = Framer::new(200);
        assert_eq!(next(&mut f, &b).1, vec![7; 100]);
        assert_eq!(next(&mut f, &b).1, vec![8; 10]);
        t.join().unwrap();
    }

    #[test]
    fn a_descriptor_goes_to_the_message_it_was_sent_with() {
        let (a, b) = UnixStream::pair().unwrap();
        // Message 1 without a descriptor, message 2 with one, both queued before the
        // first read: the read takes both, the descriptor is message 2's.
        (&a).write_all(&message(1, &[1; 24])).unwrap();
        let file = tmp_file();
        a.send_with_fd(&message(2, &[2; 24])[..], file.as_raw_fd())
            .unwrap();
        (&a).write_all(&message(3, &[3; 8])).unwrap();
        let mut f = Framer::new(64);
        let (id, _, fd) = next(&mut f, &b);
        assert_eq!((id, fd.is_some()), (1, false));
        let (id, _, fd) = next(&mut f, &b);
        assert_eq!((id, fd.is_some()), (2, true));
        let (id, _, fd) = next(&mut f, &b);
        assert_eq!((id, fd.is_some()), (3, false));
    }

    #[test]
    fn a_descriptor_on_the_first_message_stays_with_it() {
        let (a, b) = UnixStream::pair().unwrap();
        let file = tmp_file();
        a.send_with_fd(&message(1, &[1; 24])[..], file.as_raw_fd())
            .unwrap();
        (&a).write_all(&message(2, &[2; 24])).unwrap();
        let mut f = Framer::new(64);
        assert!(next(&mut f, &b).2.is_some());
        assert!(next(&mut f, &b).2.is_none());
    }

    #[test]
    fn an_oversized_body_is_drained_and_the_next_message_read() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut all = message(1, &vec![9; 10_000]);
        all.extend(message(2, &[2; 4]));
        let t = std::thread::spawn(move || a.write_all(&all).unwrap());
        let mut f = Framer::new(64);
        let (h, _) = f.next_header(&b).unwrap().unwrap();
        assert_eq!(h.size.get() as usize, HEADER_LEN + 10_000);
        let mut body = Vec::new();
        assert!(!f.read_body(&b, &mut body).unwrap(), "drained, not kept");
        let (id, body, fd) = next(&mut f, &b);
        assert_eq!((id, body, fd.is_some()), (2, vec![2; 4], false));
        t.join().unwrap();
    }

    #[test]
    fn an_end_inside_a_message_is_truncation_and_between_messages_a_clean_end() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let m = message(1, &[1; 30]);
        a.write_all(&m[..20]).unwrap();
        drop(a);
        let mut f = Framer::new(64);
        let (_, _) = f.next_header(&b).unwrap().unwrap();
        let mut body = Vec::new();
        assert!(matches!(
            f.read_body(&b, &mut body),
            Err(ConnectionError::Truncated)
        ));

        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(&m[..10]).unwrap();
        drop(a);
        let mut f = Framer::new(64);
        assert!(matches!(f.next_header(&b), Err(ConnectionError::Truncated)));
    }

    #[test]
    fn a_size_below_the_header_is_refused() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut m = message(1, &[]);
        m[4..8].copy_from_slice(&8u32.to_le_bytes());
        a.write_all(&m).unwrap();
        let mut f = Framer::new(64);
        assert!(matches!(
            f.next_header(&b),
            Err(ConnectionError::Undersized(8))
        ));
    }
}
