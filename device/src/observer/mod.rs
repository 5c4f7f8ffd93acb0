//! The host's view of what the guests do with their DMBs.
//!
//! The fabric reports to it through [`EventSink`] (under the fabric's lock) when functions
//! and DMBs come and go and around every data move. From the SMC-D CDC messages that a peer writes at DMB offset 0 the observer
//! recognises connections; from reading the owner's memory it sees whether the guest
//! zeroed a DMB after a connection released it, and whether a reused DMB was clean. It only
//! ever *reads* guest memory.
//!
//! Events go out as JSON lines (schema in docs/observer.md) to an optional file and to live
//! followers on the control socket.

pub mod dmb_life;
pub mod json;
pub mod report;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use crate::dma::DmaSpace;
use crate::dmb::{now_us, Dmb};
use crate::ism::MoveAddress;
pub use dmb_life::{DmbLife, DmbSummary};
use json::{hex, hex_opt};

/// One line of the event stream: which function (and DMB) it is about, and what happened.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ObservedEvent {
    pub function: String,
    #[serde(with = "hex")]
    pub gid: u64,
    /// The DMB's token, for DMB and connection events.
    #[serde(with = "hex_opt", skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    #[serde(flatten)]
    pub what: What,
}

/// What happened, as the event's `kind` and its own fields (docs/observer.md).
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum What {
    FunctionAttached,
    FunctionDetached {
        reason: String,
    },
    DmbRegistered {
        #[serde(with = "hex")]
        rgid: u64,
        #[serde(with = "hex")]
        iova: u64,
        len: u32,
        sba_idx: u32,
    },
    DmbUnregistered {
        reason: String,
        connections: u64,
    },
    ConnOpened {
        #[serde(with = "hex")]
        rgid: u64,
        conn: u64,
    },
    ConnClosed {
        conn: u64,
        how: String,
        bytes: u64,
    },
    DmbZeroed {
        conn: u64,
        delay_ms: f64,
    },
    DmbReused {
        conn: u64,
        clean: bool,
        stale_bytes: u64,
        first_stale_offset: Option<u64>,
    },
    DmbNotZeroed {
        conn: u64,
        watched_ms: f64,
    },
}

impl ObservedEvent {
    /// An event about function `function` as a whole.
    pub fn function(function: &str, gid: u64, what: What) -> Self {
        Self {
            function: function.to_string(),
            gid,
            token: None,
            what,
        }
    }

    /// An event about DMB `token` of function `function`.
    pub fn dmb(function: &str, gid: u64, token: u64, what: What) -> Self {
        Self {
            token: Some(token),
            ..Self::function(function, gid, what)
        }
    }
}

#[derive(Serialize)]
struct Line<'a> {
    time_us: u64,
    #[serde(flatten)]
    event: &'a ObservedEvent,
}

/// Serialises an event with its time (GIDs, tokens and IOVAs in hex).
pub fn to_json_line(time_us: u64, event: &ObservedEvent) -> String {
    serde_json::to_string(&Line { time_us, event }).unwrap_or_default()
}

struct Outputs {
    file: Option<BufWriter<File>>,
    followers: Vec<SyncSender<String>>,
}

pub struct Observer {
    outputs: Mutex<Outputs>,
    pub(crate) life: Mutex<dmb_life::Tracker>,
}

impl Default for Observer {
    fn default() -> Self {
        Self::new(None)
    }
}

impl Observer {
    pub fn new(file: Option<File>) -> Self {
        Self {
            outputs: Mutex::new(Outputs {
                file: file.map(BufWriter::new),
                followers: Vec::new(),
            }),
            life: Mutex::new(dmb_life::Tracker::default()),
        }
    }

    fn outputs(&self) -> std::sync::MutexGuard<'_, Outputs> {
        self.outputs.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn tracker(&self) -> std::sync::MutexGuard<'_, dmb_life::Tracker> {
        self.life.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes an event. Never blocks on a follower: a slow one loses lines, and the
    /// gap is its problem, not the guests'.
    pub fn emit(&self, event: ObservedEvent) {
        let line = to_json_line(now_us(), &event);
        log::debug!("event {line}");
        let mut out = self.outputs();
        if let Some(file) = out.file.as_mut() {
            if writeln!(file, "{line}")
                .and_then(|()| file.flush())
                .is_err()
            {
                log::warn!("event file write failed; no longer writing events to it");
                out.file = None;
            }
        }
        out.followers.retain(|tx| match tx.try_send(line.clone()) {
            Ok(()) | Err(TrySendError::Full(_)) => true,
            Err(TrySendError::Disconnected(_)) => false,
        });
    }

    pub fn emit_all(&self, events: impl IntoIterator<Item = ObservedEvent>) {
        for event in events {
            self.emit(event);
        }
    }

    /// A live feed of every event from now on.
    pub fn follow(&self) -> Receiver<String> {
        let (tx, rx) = sync_channel(4096);
        self.outputs().followers.push(tx);
        rx
    }

    pub fn summaries(&self) -> Vec<DmbSummary> {
        self.tracker().summaries()
    }
}

/// What the fabric reports, under its lock, as functions and DMBs come and go and data
/// moves. [`Observer`] implements it; the fabric knows only this trait.
pub trait EventSink: Send + Sync {
    fn function_attached(&self, function: &str, gid: u64);
    fn function_detached(&self, function: &str, gid: u64, reason: &str);
    fn dmb_registered(&self, dmb: &Dmb, function: &str);
    fn dmb_gone(&self, dmb: &Dmb, reason: &str, function: &str);
    /// A move into `dmb` is about to be applied; `mem` is the owner's memory without it.
    fn before_move(&self, dmb: &Dmb, mem: &DmaSpace, addr: &MoveAddress, data: &[u8]);
    /// The move has been applied.
    fn after_move(&self, dmb: &Dmb, addr: &MoveAddress, data: &[u8]);
    /// Checks closed connections' DMBs for zeroing. Called periodically by the watcher;
    /// `is_zero(token)` tells whether that DMB is all zero now (None: unreadable).
    fn poll_zeroing(&self, is_zero: &dyn Fn(u64) -> Option<bool>);
}

impl EventSink for Observer {
    fn function_attached(&self, function: &str, gid: u64) {
        self.emit(ObservedEvent::function(
            function,
            gid,
            What::FunctionAttached,
        ));
    }

    fn function_detached(&self, function: &str, gid: u64, reason: &str) {
        let reason = reason.to_string();
        let what = What::FunctionDetached { reason };
        self.emit(ObservedEvent::function(function, gid, what));
    }

    fn dmb_registered(&self, dmb: &Dmb, function: &str) {
        self.tracker().register(dmb, function);
        let what = What::DmbRegistered {
            rgid: dmb.rgid,
            iova: dmb.iova,
            len: dmb.len,
            sba_idx: dmb.sba_idx,
        };
        self.emit(ObservedEvent::dmb(function, dmb.owner_gid, dmb.token, what));
    }

    fn dmb_gone(&self, dmb: &Dmb, reason: &str, function: &str) {
        let events = self.tracker().unregister(dmb, reason, function);
        self.emit_all(events);
    }

    fn before_move(&self, dmb: &Dmb, mem: &DmaSpace, addr: &MoveAddress, data: &[u8]) {
        let events = self.tracker().before_move(dmb, mem, addr, data);
        self.emit_all(events);
    }

    fn after_move(&self, dmb: &Dmb, addr: &MoveAddress, data: &[u8]) {
        let events = self.tracker().after_move(dmb, addr, data);
        self.emit_all(events);
    }

    fn poll_zeroing(&self, is_zero: &dyn Fn(u64) -> Option<bool>) {
        let events = self.tracker().poll_zeroing(is_zero);
        self.emit_all(events);
    }
}

/// How often the zeroing watcher looks at DMBs whose connection closed.
pub const ZERO_POLL_INTERVAL: Duration = Duration::from_millis(5);
/// How long after a close the watcher keeps looking before it reports `dmb_not_zeroed`
/// (bounds the work a guest that never zeroes can cause).
pub const ZERO_WATCH_LIMIT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_line_has_time_who_and_what_with_ids_in_hex() {
        let what = What::ConnClosed {
            conn: 1,
            how: "close".into(),
            bytes: 204848,
        };
        let event = ObservedEvent::dmb("ism0", 0x1234_0049_534d_0001, 1 << 32, what);
        assert_eq!(
            to_json_line(1796006540064202, &event),
            r#"{"time_us":1796006540064202,"function":"ism0","gid":"0x12340049534d0001","token":"0x100000000","kind":"conn_closed","conn":1,"how":"close","bytes":204848}"#
        );
    }

    #[test]
    fn a_function_event_has_no_token() {
        let event = ObservedEvent::function("ism1", 2, What::FunctionAttached);
        assert_eq!(
            to_json_line(5, &event),
            r#"{"time_us":5,"function":"ism1","gid":"0x2","kind":"function_attached"}"#
        );
    }
}
