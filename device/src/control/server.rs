//! The control socket's server: a local Unix socket on which `ism-emu observe` asks for a
//! snapshot of the fabric or follows the event stream, and `ism-emu fault` manages
//! injected faults (crate::fault). A server concern beside `server`: it reads the fabric
//! and the observer, and changes only the fault rules. What goes over it is
//! [`super::api`]. The socket is its user's only (mode 0600), so whoever may inject
//! faults may also stop the emulator.
//!
//! Limits, so that no local client can grow the emulator: at most `MAX_CLIENTS` served
//! at once (more are closed at once), a request line of at most `MAX_LINE` bytes within
//! `REQUEST_DEADLINE`, and every write within `WRITE_DEADLINE` (a follower that stops
//! reading is dropped; one that left is noticed within a second, events or not).

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::api::{Answer, Done, Envelope, Reason, Refusal, Request};
use crate::fabric::{Fabric, FaultAdded};
use crate::fault::{FaultSpec, FaultSpecError};
use crate::observer::report::Snapshot;
use crate::observer::Observer;

/// Control clients served at once.
pub const MAX_CLIENTS: usize = 16;
/// The longest request line: a JSON `fault_add` with a long spec fits.
pub const MAX_LINE: usize = 512;
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// How often a follower with no events to send is checked for having left.
const FOLLOWER_CHECK: Duration = Duration::from_secs(1);

/// What the control socket reads from.
#[derive(Clone)]
pub struct Control {
    pub fabric: Arc<Fabric>,
    pub observer: Arc<Observer>,
    /// Clients being served now.
    pub clients: Arc<AtomicUsize>,
}

/// Gives a client's slot back when its thread ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether the client closed its end (it sends nothing after its request line).
fn gone(stream: &UnixStream) -> bool {
    let mut byte = [0u8; 1];
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let closed = match (&*stream).read(&mut byte) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    closed || stream.set_nonblocking(false).is_err()
}

/// Reads one request line: at most `MAX_LINE` bytes, all within `REQUEST_DEADLINE`.
fn read_request(stream: &mut UnixStream) -> Option<String> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let mut line = Vec::new();
    let mut buf = [0u8; MAX_LINE + 1];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        // One byte past the cap at most, to see that the line is too long.
        let n = stream.read(&mut buf[..MAX_LINE + 1 - line.len()]).ok()?;
        if n == 0 {
            return None;
        }
        line.extend_from_slice(&buf[..n]);
        if let Some(end) = line.iter().position(|&b| b == b'\n') {
            line.truncate(end);
            return String::from_utf8(line).ok();
        }
        if line.len() > MAX_LINE {
            return None;
        }
    }
}

impl Control {
    pub fn new(fabric: Arc<Fabric>, observer: Arc<Observer>) -> Self {
        Self {
            fabric,
            observer,
            clients: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            chid: self.fabric.chid(),
            functions: self.fabric.function_views(),
            dmbs: self.observer.summaries(),
        }
    }

    /// Serves one control client; run on its own thread.
    pub fn serve_client(&self, mut stream: UnixStream) {
        let request = read_request(&mut stream);
        let _ = stream.set_write_timeout(Some(WRITE_DEADLINE));
        let answer = match request.map(|line| Envelope::parse(&line)) {
            None => Answer::Refused(Refusal::new(
                Reason::Request,
                format!("no request line of at most {MAX_LINE} bytes within {REQUEST_DEADLINE:?}"),
            )),
            Some(Ok(Request::Follow)) => return self.follow(stream),
            Some(Ok(Request::Snapshot)) => Answer::Snapshot(Box::new(self.snapshot())),
            Some(Ok(fault)) => self.fault(fault),
            Some(Err(refusal)) => Answer::Refused(refusal),
        };
        let _ = writeln!(stream, "{}", answer.to_line());
    }

    /// Streams the event lines to a follower until it or the observer goes away.
    fn follow(&self, mut stream: UnixStream) {
        let rx = self.observer.follow();
        loop {
            match rx.recv_timeout(FOLLOWER_CHECK) {
                Ok(line) => {
                    if writeln!(stream, "{line}").is_err() {
                        break;
                    }
                }
                // No event for a while: still there? A follower that left must give
                // its slot back without waiting for the next event.
                Err(RecvTimeoutError::Timeout) if gone(&stream) => break,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
    }

    /// A fault request's answer. A refusal the request itself caused (a bad spec, a
    /// function or rule that does not exist) has `usage`, so that `ism-emu fault` exits
    /// as for a bad argument.
    fn fault(&self, request: Request) -> Answer {
        let refused = |error: String, usage: bool| {
            Answer::Refused(Refusal {
                usage,
                ..Refusal::new(Reason::Fault, error)
            })
        };
        match request {
            Request::FaultAdd { spec } => {
                match FaultSpec::parse(&spec).and_then(|spec| self.fabric.add_fault(spec)) {
                    Ok(FaultAdded::Rule(id)) => Answer::Done(Done::Rule { id }),
                    Ok(FaultAdded::Done) => Answer::Done(Done::Done),
                    Err(e) => {
                        // Not delivered, or no room for a rule: the emulator's state,
                        // not the request's fault.
                        let usage = !matches!(
                            e,
                            FaultSpecError::NotDelivered { .. } | FaultSpecError::TooManyRules
                        );
                        refused(e.to_string(), usage)
                    }
                }
            }
            Request::FaultList => Answer::Done(Done::List {
                faults: self.fabric.faults(),
            }),
            Request::FaultClear { id } => match (self.fabric.clear_faults(id), id) {
                (0, Some(id)) => refused(
                    format!("no fault rule {id} (`fault list` shows the rules)"),
                    true,
                ),
                (removed, _) => Answer::Done(Done::Cleared { removed }),
            },
            Request::Snapshot | Request::Follow => refused("not a fault request".into(), true),
        }
    }

    /// Accepts pending control connections (the listener is non-blocking). Beyond
    /// `MAX_CLIENTS` at once, a connection is closed without an answer.
    pub fn accept_all(&self, listener: &UnixListener) {
        while let Ok((stream, _)) = listener.accept() {
            if self.clients.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
                self.clients.fetch_sub(1, Ordering::SeqCst);
                log::debug!("control client refused: {MAX_CLIENTS} already served");
                continue;
            }
            let slot = Slot(Arc::clone(&self.clients));
            let _ = stream.set_nonblocking(false);
            let control = self.clone();
            let spawned = std::thread::Builder::new()
                .name("control-client".into())
                .spawn(move || {
                    let _slot = slot;
                    control.serve_client(stream)
                });
            if let Err(e) = spawned {
                log::warn!("control client thread: {e}");
            }
        }
    }
}
