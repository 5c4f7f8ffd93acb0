//! The control socket: a local Unix socket on which `ism-emu observe` asks for a snapshot
//! of the fabric or follows the event stream. A server concern beside `server`: it reads
//! the fabric and the observer and changes neither.
//!
//! Protocol: the client sends one line, `snapshot` or `follow`. A snapshot is answered
//! with one JSON document ([`Snapshot`]) and the connection closes; `follow` streams event
//! lines until either side goes away.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::Duration;

use crate::fabric::Fabric;
use crate::observer::report::Snapshot;
use crate::observer::Observer;

/// What the control socket reads from.
#[derive(Clone)]
pub struct Control {
    pub fabric: Arc<Fabric>,
    pub observer: Arc<Observer>,
}

impl Control {
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            chid: self.fabric.chid(),
            functions: self.fabric.function_views(),
            dmbs: self.observer.summaries(),
        }
    }

    /// Serves one control client; run on its own thread.
    pub fn serve_client(&self, stream: UnixStream) {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut line = String::new();
        let Ok(reader) = stream.try_clone() else {
            return;
        };
        if BufReader::new(reader).read_line(&mut line).is_err() {
            return;
        }
        let mut stream = stream;
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

    /// Accepts pending control connections (the listener is non-blocking).
    pub fn accept_all(&self, listener: &UnixListener) {
        while let Ok((stream, _)) = listener.accept() {
            let _ = stream.set_nonblocking(false);
            let control = self.clone();
            let spawned = std::thread::Builder::new()
                .name("control-client".into())
                .spawn(move || control.serve_client(stream));
            if let Err(e) = spawned {
                log::warn!("control client thread: {e}");
            }
        }
    }
}
