//! The control socket: a local Unix socket on which `ism-emu observe` asks for a snapshot
//! of the fabric or follows the event stream.
//!
//! Protocol: the client sends one line, `snapshot` or `follow`. A snapshot is answered
//! with one JSON document and the connection closes; `follow` streams event lines until
//! either side goes away.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::{hex, DmbSummary};
use crate::fabric::{Counters, Fabric};

#[derive(Serialize)]
pub struct FunctionView {
    pub name: String,
    pub gid: String,
    pub attached: bool,
    pub sba: Option<String>,
    pub ieq: Option<String>,
    pub interrupt_enabled: bool,
    pub mapped_bytes: u64,
    pub dmbs_owned: usize,
    pub counters: Counters,
}

#[derive(Serialize)]
pub struct Snapshot {
    pub chid: String,
    pub functions: Vec<FunctionView>,
    pub dmbs: Vec<DmbSummary>,
}

pub fn snapshot(fabric: &Fabric) -> Snapshot {
    let st = fabric.lock();
    let functions = st
        .functions
        .iter()
        .enumerate()
        .map(|(id, f)| FunctionView {
            name: f.name.clone(),
            gid: hex(f.gid),
            attached: f.attached,
            sba: f.sba.map(|s| hex(s.iova)),
            ieq: f.ieq.map(|q| hex(q.iova)),
            interrupt_enabled: f.irq.enabled(),
            mapped_bytes: f.dma.mapped_bytes(),
            dmbs_owned: st.dmbs.values().filter(|d| d.owner == id).count(),
            counters: f.counters.clone(),
        })
        .collect();
    drop(st);
    Snapshot {
        chid: format!("{:#06x}", fabric.chid()),
        functions,
        dmbs: fabric.observer().summaries(),
    }
}

/// Serves one control client; run on its own thread.
pub fn serve_client(fabric: Arc<Fabric>, stream: UnixStream) {
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
            let json = serde_json::to_string(&snapshot(&fabric)).unwrap_or_default();
            let _ = writeln!(stream, "{json}");
        }
        "follow" => {
            let rx = fabric.observer().follow();
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
pub fn accept_all(fabric: &Arc<Fabric>, listener: &UnixListener) {
    while let Ok((stream, _)) = listener.accept() {
        let _ = stream.set_nonblocking(false);
        let fabric = Arc::clone(fabric);
        let spawned = std::thread::Builder::new()
            .name("control-client".into())
            .spawn(move || serve_client(fabric, stream));
        if let Err(e) = spawned {
            log::warn!("control client thread: {e}");
        }
    }
}
