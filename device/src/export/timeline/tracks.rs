//! The timeline's tracks: a DMB's registration and connection slices, opened and ended
//! as its events arrive, and the counters of each function's connections.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::export::chrome_trace::{Scope, TraceEvent};
use crate::observer::{What, FOUND_CONTINUATION};

/// The `start` arg of a slice whose start the stream did not show.
pub(super) const BEFORE_TRACE: &str = "before the trace began";

/// The `continued` arg of a connection's slice after a close that was not its own.
pub(super) const CONTINUED: &str = "its close was another connection's CDC message";

/// What the stream says about one track, waiting for its end.
pub(super) struct OpenSlice {
    pub(super) start: u64,
    name: String,
    pub(super) args: Map<String, Value>,
}

pub(super) struct Track {
    pub(super) tid: u32,
    pub(super) token: u64,
    pub(super) registration: Option<OpenSlice>,
    pub(super) conn: Option<OpenSlice>,
    /// The latest time on this track: a wall clock stepping back must not unnest slices.
    latest: u64,
}

/// A connection as the counters see it.
pub(super) struct ConnSpan {
    pub(super) start: u64,
    pub(super) end: u64,
    /// Bytes per second over the whole connection; None when it is not known.
    pub(super) rate: Option<f64>,
}

impl OpenSlice {
    pub(super) fn new(start: u64, name: &str) -> Self {
        Self {
            start,
            name: name.to_string(),
            args: Map::new(),
        }
    }

    pub(super) fn since_trace_start(mut self) -> Self {
        self.args.insert("start".into(), BEFORE_TRACE.into());
        self
    }
}

/// The slice from `open`'s start to `end` (never a negative duration, whatever the
/// clock did between the two lines).
pub(super) fn end_slice(open: OpenSlice, end: u64, at: (u32, u32)) -> TraceEvent {
    let cat = if open.name == "registered" {
        "dmb"
    } else if open.name == "attached" {
        "function"
    } else {
        "conn"
    };
    let mut slice = TraceEvent::complete(
        open.name,
        cat,
        at,
        open.start,
        end.saturating_sub(open.start),
    );
    slice.args = open.args;
    slice
}

/// The track of DMB `token`, made on first sight (track 0 is the function's).
pub(super) fn track(tracks: &mut BTreeMap<u64, Track>, token: u64) -> &mut Track {
    let tid = tracks.len() as u32 + 1;
    tracks.entry(token).or_insert(Track {
        tid,
        token,
        registration: None,
        conn: None,
        latest: 0,
    })
}

impl Track {
    pub(super) fn dmb_event(
        &mut self,
        kind: What,
        t: u64,
        origin: u64,
        at: (u32, u32),
        events: &mut Vec<TraceEvent>,
        conns: &mut Vec<ConnSpan>,
    ) {
        let t = t.max(self.latest);
        self.latest = t;
        match kind {
            What::DmbRegistered { rgid, len, .. } => {
                self.end_conn(
                    t,
                    at,
                    events,
                    conns,
                    "not seen before the DMB was registered again",
                );
                if let Some(old) = self.registration.take() {
                    let slice = end_slice(old, t, at);
                    events.push(slice.arg("unregistration", "not seen"));
                }
                let mut open = OpenSlice::new(t, "registered");
                open.args
                    .insert("token".into(), format!("{:#x}", self.token).into());
                open.args
                    .insert("rgid".into(), format!("{rgid:#018x}").into());
                open.args.insert("len".into(), len.into());
                self.registration = Some(open);
            }
            What::DmbUnregistered { reason, .. } => {
                self.end_conn(t, at, events, conns, "not seen before the unregistration");
                let open = self.registration_or_start(origin);
                events.push(end_slice(open, t, at).arg("unregistered", reason));
            }
            What::ConnOpened { conn, .. } => {
                self.end_conn(t, at, events, conns, "not seen before the next connection");
                let start = self.registration_or_start(origin);
                let t = t.max(start.start);
                self.registration = Some(start);
                let mut open = OpenSlice::new(t, &format!("conn {conn}"));
                open.args.insert("conn".into(), conn.into());
                self.conn = Some(open);
            }
            What::ConnClosed { conn, how, bytes } => {
                let mut open = match self.conn.take() {
                    Some(open) => open,
                    None => {
                        let start = self.registration_or_start(origin);
                        let open = OpenSlice::new(start.start, &format!("conn {conn}"));
                        self.registration = Some(start);
                        open.since_trace_start()
                    }
                };
                let end = t.max(open.start);
                let dur = end - open.start;
                // A connection whose open was not seen has no duration to divide by, nor
                // has one continued (its bytes are since its open).
                let known = !open.args.contains_key("start")
                    && !open.args.contains_key("continued")
                    && dur > 0;
                let rate = known.then(|| bytes as f64 / (dur as f64 / 1e6));
                open.args.insert("how".into(), how.into());
                open.args.insert("bytes".into(), bytes.into());
                if let Some(rate) = rate {
                    open.args
                        .insert("mean_MB_per_s".into(), (rate / 1e6).into());
                }
                conns.push(ConnSpan {
                    start: open.start,
                    end,
                    rate,
                });
                events.push(end_slice(open, end, at));
            }
            What::DmbZeroed {
                conn,
                delay_ms,
                late_cdc_kept,
                late_bytes_kept,
            } => {
                let instant = TraceEvent::instant("zeroed".into(), "zeroing", at, t, Scope::Thread);
                let mut instant = instant.arg("conn", conn).arg("delay_ms", delay_ms);
                if late_cdc_kept {
                    instant = instant.arg("late_cdc_kept", true);
                }
                if late_bytes_kept > 0 {
                    instant = instant.arg("late_bytes_kept", late_bytes_kept);
                }
                events.push(instant);
            }
            What::DmbNotZeroed { conn, watched_ms } => {
                let name = "not zeroed".to_string();
                let instant = TraceEvent::instant(name, "zeroing", at, t, Scope::Thread);
                events.push(instant.arg("conn", conn).arg("watched_ms", watched_ms));
            }
            What::LateWrite {
                conn,
                moves,
                bytes,
                after_zeroed,
            } => {
                let name = if after_zeroed {
                    "late write after zeroing"
                } else {
                    "late write"
                };
                let instant = TraceEvent::instant(name.into(), "late", at, t, Scope::Thread)
                    .arg("conn", conn)
                    .arg("moves", moves)
                    .arg("bytes", bytes)
                    .arg("after_zeroed", after_zeroed);
                events.push(instant);
            }
            What::ForeignCdc {
                conn,
                expected,
                seen,
                conn_state,
                found,
                late_moves,
                late_bytes,
            } => {
                let name = "FOREIGN CDC".to_string();
                let mut instant = TraceEvent::instant(name, "crossed", at, t, Scope::Thread)
                    .arg("conn", conn)
                    .arg("expected", expected)
                    .arg("seen", seen)
                    .arg("conn_state", conn_state);
                for (key, value) in [("late_moves", late_moves), ("late_bytes", late_bytes)] {
                    if let Some(value) = value {
                        instant = instant.arg(key, value);
                    }
                }
                let continued = found.as_deref() == Some(FOUND_CONTINUATION);
                if let Some(found) = found {
                    instant = instant.arg("found", found);
                }
                events.push(instant);
                // The close the stream showed was this message: the connection goes on
                // from here, and its next close ends it.
                if continued && self.conn.is_none() {
                    let mut open = OpenSlice::new(t, &format!("conn {conn}"));
                    open.args.insert("conn".into(), conn.into());
                    open.args.insert("continued".into(), CONTINUED.into());
                    self.conn = Some(open);
                }
            }
            What::DmbReused {
                conn,
                clean,
                stale_bytes,
                unknown,
                ..
            } => {
                let name = match clean {
                    Some(true) => "reuse clean",
                    Some(false) => "reuse STALE",
                    None => "reuse unchecked",
                };
                let mut instant = TraceEvent::instant(name.into(), "reuse", at, t, Scope::Thread)
                    .arg("conn", conn)
                    .arg("clean", clean)
                    .arg("stale_bytes", stale_bytes);
                if let Some(why) = unknown {
                    instant = instant.arg("unknown", why);
                }
                events.push(instant);
            }
            // Not a DMB's: `push` draws those itself.
            _ => {}
        }
    }

    fn registration_or_start(&mut self, origin: u64) -> OpenSlice {
        self.registration.take().unwrap_or_else(|| {
            let mut open = OpenSlice::new(origin, "registered").since_trace_start();
            open.args
                .insert("token".into(), format!("{:#x}", self.token).into());
            open
        })
    }

    fn end_conn(
        &mut self,
        t: u64,
        at: (u32, u32),
        events: &mut Vec<TraceEvent>,
        conns: &mut Vec<ConnSpan>,
        why: &str,
    ) {
        if let Some(open) = self.conn.take() {
            let end = t.max(open.start);
            conns.push(ConnSpan {
                start: open.start,
                end,
                rate: None,
            });
            events.push(end_slice(open, end, at).arg("close", why));
        }
    }
}

/// The function's counters: connections open, and the sum of their mean rates, as a
/// sample at every moment either changes (and one at the start, so both start at 0).
pub(super) fn counters(pid: u32, conns: &[ConnSpan]) -> Vec<TraceEvent> {
    let mut times: Vec<u64> = conns.iter().flat_map(|c| [c.start, c.end]).collect();
    times.sort_unstable();
    times.dedup();
    let mut out = Vec::new();
    for &t in &times {
        // Summed afresh at each time: running sums of floats drift off zero.
        let open = conns.iter().filter(|c| c.start <= t && t < c.end);
        let (count, rate) = open.fold((0u64, 0.0), |(n, r), c| (n + 1, r + c.rate.unwrap_or(0.0)));
        out.push(TraceEvent::counter(
            "open connections",
            pid,
            t,
            "connections",
            count as f64,
        ));
        out.push(TraceEvent::counter(
            "data into DMBs",
            pid,
            t,
            "MB/s",
            rate / 1e6,
        ));
    }
    out
}
