//! The control socket: a local Unix socket on which `ism-emu observe` asks for a snapshot
//! of the fabric or follows the event stream. A server concern beside `server`: it reads
//! the fabric and the observer and changes neither.
//!
//! Protocol: the client sends one line, `snapshot` or `follow`. A snapshot is answered
//! with one JSON document ([`Snapshot`]) and the connection closes; `follow` streams event
//! lines until either side goes away.
//!
//! Limits, so that no local client can grow the emulator: at most `MAX_CLIENTS` served
//! at once (more are closed at once), a request line of at most `MAX_LINE` bytes within
//! `REQUEST_DEADLINE`, and every write within `WRITE_DEADLINE` (a follower that stops
//! reading is dropped).

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fabric::Fabric;
use crate::observer::report::Snapshot;
use crate::observer::Observer;

/// Control clients served at once.
pub const MAX_CLIENTS: usize = 16;
/// The longest request line (`snapshot`, `follow`).
pub const MAX_LINE: usize = 64;
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);

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
        let Some(line) = read_request(&mut stream) else {
            let _ = stream.set_write_timeout(Some(WRITE_DEADLINE));
            let _ = writeln!(
                stream,
                "{{\"error\":\"no request line of at most {MAX_LINE} bytes within {REQUEST_DEADLINE:?}\"}}"
            );
            return;
        };
        if stream.set_write_timeout(Some(WRITE_DEADLINE)).is_err() {
            return;
        }
        match line.trim() {
            "snapshot" => {
                let json = serde_json::to_string(&self.snapshot()).unwrap_or_default();
                let _ = writeln!(stream, "{json}");
            }
            "follow" => {
                let rx = self.observer.follow();
                while let Ok(line) = rx.recv() {
                    if writeln!(stream, "{line}").is_err() {
                        break;
                    }
                }
            }
            other => {
                let _ = writeln!(
                    stream,
                    "{{\"error\":\"unknown request {other:?}; use snapshot or follow\"}}"
                );
            }
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
