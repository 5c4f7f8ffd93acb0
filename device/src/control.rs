//! The control socket: a local Unix socket on which `ism-emu observe` asks for a snapshot
//! of the fabric or follows the event stream. A server concern beside `server`: it reads
//! the fabric and the observer and changes neither.
//!
//! Protocol: the client sends one line, `snapshot` or `follow`. A snapshot is answered
//! with one JSON document ([`Snapshot`]) and the connection closes; `follow` streams event
//! lines until either side goes away. `fault add SPEC`, `fault list` and
//! `fault clear [ID]` manage injected faults (crate::fault), each answered with one JSON
//! line: `{"ok":...}` or `{"error":"..."}`. The socket is its user's only (mode 0600), so
//! whoever may inject faults may also stop the emulator.
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

use crate::fabric::{Fabric, FaultAdded};
use crate::fault::{FaultSpec, FaultSpecError};
use crate::observer::report::Snapshot;
use crate::observer::Observer;

/// Control clients served at once.
pub const MAX_CLIENTS: usize = 16;
/// The longest request line (`snapshot`, `follow`, `fault add SPEC`).
pub const MAX_LINE: usize = 256;
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
                loop {
                    match rx.recv_timeout(FOLLOWER_CHECK) {
                        Ok(line) => {
                            if writeln!(stream, "{line}").is_err() {
                                break;
                            }
                        }
                        // No event for a while: still there? A follower that left must
                        // give its slot back without waiting for the next event.
                        Err(RecvTimeoutError::Timeout) if gone(&stream) => break,
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            }
            line if line == "fault" || line.starts_with("fault ") => {
                let answer = self.fault_request(line["fault".len()..].trim());
                let _ = writeln!(stream, "{answer}");
            }
            other => {
                let answer = serde_json::json!({
                    "error": format!("unknown request {other:?}; use snapshot, follow or fault")
                });
                let _ = writeln!(stream, "{answer}");
            }
        }
    }

    /// `fault add SPEC`, `fault list`, `fault clear [ID]`: the answer line. An error
    /// the request itself caused (a bad spec, a function or rule that does not exist)
    /// carries `"usage": true`, so that `ism-emu fault` exits as for a bad argument.
    pub fn fault_request(&self, args: &str) -> serde_json::Value {
        use serde_json::json;
        let (verb, rest) = args.split_once(' ').unwrap_or((args, ""));
        let rest = rest.trim();
        match verb {
            "add" => match FaultSpec::parse(rest).and_then(|spec| self.fabric.add_fault(spec)) {
                Ok(FaultAdded::Rule(id)) => json!({"ok": "rule", "id": id}),
                Ok(FaultAdded::Done) => json!({"ok": "done"}),
                Err(e) => {
                    // Not delivered, or no room for a rule: the emulator's state, not
                    // the request's fault.
                    let usage = !matches!(
                        e,
                        FaultSpecError::NotDelivered { .. } | FaultSpecError::TooManyRules
                    );
                    json!({"error": e.to_string(), "usage": usage})
                }
            },
            "list" => json!({"ok": "list", "faults": self.fabric.faults()}),
            "clear" if rest.is_empty() => {
                json!({"ok": "cleared", "removed": self.fabric.clear_faults(None)})
            }
            "clear" => match rest.parse::<u32>() {
                Ok(id) => match self.fabric.clear_faults(Some(id)) {
                    0 => json!({
                        "error": format!("no fault rule {id} (`fault list` shows the rules)"),
                        "usage": true
                    }),
                    removed => json!({"ok": "cleared", "removed": removed}),
                },
                Err(_) => json!({"error": format!("not a rule id: {rest:?}"), "usage": true}),
            },
            _ => json!({
                "error": "use fault add SPEC, fault list or fault clear [ID]",
                "usage": true
            }),
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
