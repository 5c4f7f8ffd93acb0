//! The event stream as a timeline: `ism-emu observe timeline` turns the observer's JSON
//! lines (a `serve --events` file, or what a follower received) into a trace-event
//! document for Perfetto's UI or chrome://tracing (docs/observer.md, "Timeline").
//!
//! Layout: a process per function, its track 0 for the function itself (attachments),
//! a track per DMB token with the DMB's registered lifetime and, nested in it, one slice
//! per connection; zeroing, reuse verdicts and faults are instants on the DMB's track.
//! Counters per function: connections open, and the data rate into its DMBs.
//!
//! The stream carries no per-move samples, only each connection's byte count at its
//! close, so the rate is derived: a connection moves its bytes at its mean rate from open
//! to close, and the counter sums that over the connections open at each moment.
//!
//! Lines are read in stream order (the observer emits one DMB's events in order), and
//! anything the stream could miss (a follower joining late, dropped lines) is closed or
//! opened where it is seen, with an arg that says so, so that slices always nest.

use std::collections::BTreeMap;
use std::io::BufRead;

use serde::Deserialize;
use serde_json::{Map, Value};

mod tracks;

use super::chrome_trace::{Scope, TraceDocument, TraceEvent};
use crate::observer::{Line, ObservedEvent, What};
use tracks::{counters, end_slice, track, ConnSpan, OpenSlice, Track};

/// Why the events could not be turned into a timeline.
#[derive(Debug, thiserror::Error)]
pub enum TimelineError {
    #[error("line {line}: not JSON")]
    NotJson {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("line {line}: not an event of the observer's stream (kind {kind:?})")]
    BadEvent {
        line: usize,
        kind: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("reading the events")]
    Read(#[source] std::io::Error),
    #[error("line {0}: not text: not an event file (nor an ism-emu trace)")]
    NotText(usize),
}

/// The fields of a line that are not its event's own: what a fault instant leaves out of
/// the args it shows.
const LINE_FIELDS: [&str; 5] = ["time_us", "function", "gid", "token", "kind"];

struct Process {
    pid: u32,
    gid: u64,
    attached: Option<OpenSlice>,
    tracks: BTreeMap<u64, Track>,
    conns: Vec<ConnSpan>,
}

/// Turns event lines into trace events, one line at a time (a live follower feeds it as
/// lines arrive). Times stay absolute until [`Self::finish`].
#[derive(Default)]
pub struct TimelineBuilder {
    processes: BTreeMap<String, Process>,
    events: Vec<TraceEvent>,
    first_us: Option<u64>,
    last_us: u64,
    lines: u64,
    skipped: BTreeMap<String, u64>,
}

/// The process id of the function `-` (lines about the stream itself).
const STREAM_FUNCTION: &str = "-";

impl TimelineBuilder {
    /// Takes one line of the stream (`line` is its number, for errors). Blank lines are
    /// ignored; a line of a kind the timeline does not know is skipped with a warning.
    pub fn push_line(&mut self, line: usize, text: &str) -> Result<(), TimelineError> {
        if text.trim().is_empty() {
            return Ok(());
        }
        let value: Value =
            serde_json::from_str(text).map_err(|source| TimelineError::NotJson { line, source })?;
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let parsed = Line::<ObservedEvent>::deserialize(&value).map_err(|source| {
            TimelineError::BadEvent {
                line,
                kind: kind.clone(),
                source,
            }
        })?;
        if let What::Unrecognised = parsed.event.what {
            let seen = self.skipped.entry(kind.clone()).or_insert(0);
            if *seen == 0 {
                log::warn!("line {line}: event kind {kind:?} is not drawn; skipping lines of it");
            }
            *seen += 1;
            return Ok(());
        }
        // A fault's instant shows whatever its line carries, known fields or not.
        let mut fault_args = match value {
            Value::Object(fields) => fields,
            _ => Map::new(),
        };
        fault_args.retain(|key, _| !LINE_FIELDS.contains(&key.as_str()));
        self.push(parsed, fault_args);
        Ok(())
    }

    fn push(&mut self, line: Line<ObservedEvent>, fault_args: Map<String, Value>) {
        let t = line.time_us;
        let line = line.event;
        self.first_us = Some(self.first_us.map_or(t, |f| f.min(t)));
        self.last_us = self.last_us.max(t);
        self.lines += 1;
        let origin = self.first_us.unwrap_or(t);
        let next_pid = self.processes.len() as u32 + 1;
        let process = self
            .processes
            .entry(line.function.clone())
            .or_insert_with(|| Process {
                pid: next_pid,
                gid: line.gid,
                attached: None,
                tracks: BTreeMap::new(),
                conns: Vec::new(),
            });
        let pid = process.pid;
        let events = &mut self.events;
        match line.what {
            What::FunctionAttached => {
                if let Some(open) = process.attached.take() {
                    let slice = end_slice(open, t, (pid, 0));
                    events.push(slice.arg("detach", "not seen"));
                }
                process.attached = Some(OpenSlice::new(t, "attached"));
            }
            What::FunctionDetached { reason } => {
                let open = process
                    .attached
                    .take()
                    .unwrap_or_else(|| OpenSlice::new(origin, "attached").since_trace_start());
                events.push(end_slice(open, t, (pid, 0)).arg("detached", reason));
            }
            What::EventsDropped { count } => {
                let name = format!("{count} events dropped");
                let scope = if line.function == STREAM_FUNCTION {
                    Scope::Global
                } else {
                    Scope::Process
                };
                events.push(TraceEvent::instant(name, "stream", (pid, 0), t, scope));
            }
            What::EventFileFull { limit_bytes } => {
                let name = "event file full".to_string();
                let instant = TraceEvent::instant(name, "stream", (pid, 0), t, Scope::Global);
                events.push(instant.arg("limit_bytes", limit_bytes));
            }
            What::FaultInjected { .. } => {
                let tid = match line.token {
                    Some(token) => track(&mut process.tracks, token).tid,
                    None => 0,
                };
                let mut instant = TraceEvent::instant(
                    "fault injected".into(),
                    "fault",
                    (pid, tid),
                    t,
                    Scope::Thread,
                );
                instant.args = fault_args;
                events.push(instant);
            }
            What::VlanAdded { vlan_id } => {
                events.push(vlan_instant(format!("VLAN {vlan_id:#x} added"), pid, t));
            }
            What::VlanDeleted { vlan_id } => {
                events.push(vlan_instant(format!("VLAN {vlan_id:#x} deleted"), pid, t));
            }
            What::VlanRequired { required } => {
                events.push(vlan_instant(format!("VLAN required {required}"), pid, t));
            }
            // Skipped in `push_line`.
            What::Unrecognised => {}
            // Listed, not matched by a wildcard: a new kind must be placed here.
            dmb_kind @ (What::DmbRegistered { .. }
            | What::DmbUnregistered { .. }
            | What::ConnOpened { .. }
            | What::ConnClosed { .. }
            | What::DmbZeroed { .. }
            | What::DmbNotZeroed { .. }
            | What::DmbReused { .. }
            | What::LateWrite { .. }
            | What::ForeignCdc { .. }) => {
                let Some(token) = line.token else {
                    log::warn!("a DMB event without a token: skipped");
                    return;
                };
                let track = track(&mut process.tracks, token);
                let at = (pid, track.tid);
                track.dmb_event(dmb_kind, t, origin, at, events, &mut process.conns);
            }
        }
    }

    /// The trace-event document: every slice still open ends at the last event seen.
    pub fn finish(mut self) -> TraceDocument {
        let end = self.last_us;
        let origin = self.first_us.unwrap_or(0);
        let mut metadata = Vec::new();
        for (function, process) in &mut self.processes {
            let pid = process.pid;
            for track in process.tracks.values_mut() {
                let at = (pid, track.tid);
                if let Some(conn) = track.conn.take() {
                    let start = conn.start;
                    self.events
                        .push(end_slice(conn, end, at).arg("close", "not seen by the end"));
                    process.conns.push(ConnSpan {
                        start,
                        end,
                        rate: None,
                    });
                }
                if let Some(registration) = track.registration.take() {
                    let slice = end_slice(registration, end, at);
                    self.events
                        .push(slice.arg("unregistration", "not seen by the end"));
                }
                metadata.push(TraceEvent::metadata(
                    "thread_name",
                    at,
                    "name",
                    format!("DMB {:#x}", track.token),
                ));
                metadata.push(TraceEvent::metadata(
                    "thread_sort_index",
                    at,
                    "sort_index",
                    track.tid,
                ));
            }
            if let Some(attached) = process.attached.take() {
                let slice = end_slice(attached, end, (pid, 0));
                self.events.push(slice.arg("detach", "not seen by the end"));
            }
            let name = if function == STREAM_FUNCTION {
                "event stream".to_string()
            } else {
                format!("{function} (GID {:#018x})", process.gid)
            };
            metadata.push(TraceEvent::metadata("process_name", (pid, 0), "name", name));
            metadata.push(TraceEvent::metadata(
                "process_sort_index",
                (pid, 0),
                "sort_index",
                pid,
            ));
            metadata.push(TraceEvent::metadata(
                "thread_name",
                (pid, 0),
                "name",
                "function",
            ));
            self.events.extend(counters(pid, &process.conns));
        }
        for event in &mut self.events {
            event.ts = event.ts.saturating_sub(origin);
        }
        // By time; at one time, enclosing slices before the ones they enclose, so that a
        // viewer that nests by order (chrome://tracing) nests as the durations say.
        self.events.sort_by(|a, b| {
            (a.ts, a.ph, std::cmp::Reverse(a.dur)).cmp(&(b.ts, b.ph, std::cmp::Reverse(b.dur)))
        });
        metadata.append(&mut self.events);
        let mut other = Map::new();
        other.insert("source".into(), "ism-emu observe timeline".into());
        other.insert("version".into(), env!("CARGO_PKG_VERSION").into());
        other.insert("origin_time_us".into(), origin.into());
        other.insert("events_read".into(), self.lines.into());
        let skipped: Map<String, Value> = self
            .skipped
            .into_iter()
            .map(|(kind, n)| (kind, n.into()))
            .collect();
        other.insert("events_skipped".into(), skipped.into());
        other.insert(
            "rate".into(),
            "derived: each connection's bytes (reported at its close) over its duration".into(),
        );
        TraceDocument {
            trace_events: metadata,
            display_time_unit: "ms",
            other_data: other,
        }
    }
}

/// A VLAN change, as an instant on its function's own track.
fn vlan_instant(name: String, pid: u32, t: u64) -> TraceEvent {
    TraceEvent::instant(name, "vlan", (pid, 0), t, Scope::Thread)
}

/// Reads a whole event file (JSON lines) into a timeline.
pub fn from_reader(reader: impl BufRead) -> Result<TraceDocument, TimelineError> {
    let mut builder = TimelineBuilder::default();
    for (i, line) in reader.lines().enumerate() {
        // A binary file is named as such, not as a UTF-8 error.
        let line = line.map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => TimelineError::NotText(i + 1),
            _ => TimelineError::Read(e),
        })?;
        builder.push_line(i + 1, &line)?;
    }
    Ok(builder.finish())
}

#[cfg(test)]
mod tests {
    use super::tracks::BEFORE_TRACE;
    use super::*;
    use crate::export::chrome_trace::Phase;
    use crate::observer::{to_json_line, FOUND_CONTINUATION};

    const GID: u64 = 0x1234_0049_534d_0001;
    const TOKEN: u64 = 0x1_0000_0000;

    fn line(t: u64, what: What) -> String {
        to_json_line(t, &ObservedEvent::dmb("ism0", GID, TOKEN, what))
    }

    fn convert(lines: &[String]) -> TraceDocument {
        from_reader(lines.join("\n").as_bytes()).unwrap()
    }

    fn drawn(doc: &TraceDocument) -> Vec<&TraceEvent> {
        doc.trace_events
            .iter()
            .filter(|e| e.ph != Phase::Metadata)
            .collect()
    }

    fn named<'a>(doc: &'a TraceDocument, name: &str) -> Vec<&'a TraceEvent> {
        drawn(doc).into_iter().filter(|e| e.name == name).collect()
    }

    fn registered(t: u64) -> String {
        let what = What::DmbRegistered {
            rgid: 2,
            iova: 0x1000,
            len: 65536,
            sba_idx: 0,
        };
        line(t, what)
    }

    fn opened(t: u64, conn: u64) -> String {
        line(t, What::ConnOpened { rgid: 2, conn })
    }

    fn closed(t: u64, conn: u64, bytes: u64) -> String {
        let how = "close".into();
        line(t, What::ConnClosed { conn, how, bytes })
    }

    fn unregistered(t: u64) -> String {
        let reason = "unreg".into();
        line(
            t,
            What::DmbUnregistered {
                reason,
                connections: 1,
            },
        )
    }

    /// One DMB, one connection moving 2 MB in 1 s, zeroed 3 ms after its close.
    fn one_connection() -> Vec<String> {
        vec![
            to_json_line(
                1_000_000,
                &ObservedEvent::function("ism0", GID, What::FunctionAttached),
            ),
            registered(1_000_100),
            opened(1_100_000, 1),
            closed(2_100_000, 1, 2_000_000),
            line(
                2_103_000,
                What::DmbZeroed {
                    conn: 1,
                    delay_ms: 3.0,
                    late_cdc_kept: false,
                    late_bytes_kept: 0,
                },
            ),
            unregistered(3_000_000),
        ]
    }

    #[test]
    fn a_dmb_is_a_track_with_its_lifetime_and_its_connection_nested() {
        let doc = convert(&one_connection());
        let reg = named(&doc, "registered");
        let conn = named(&doc, "conn 1");
        assert_eq!(reg.len(), 1);
        assert_eq!(conn.len(), 1);
        let (reg, conn) = (reg[0], conn[0]);
        assert_eq!(
            (reg.ph, reg.ts, reg.dur),
            (Phase::Complete, 100, Some(1_999_900))
        );
        assert_eq!((conn.ts, conn.dur), (100_000, Some(1_000_000)));
        assert_eq!((reg.pid, reg.tid), (conn.pid, conn.tid));
        assert_ne!(reg.tid, 0, "track 0 is the function's");
        assert_eq!(reg.args["token"], "0x100000000");
        assert_eq!(reg.args["unregistered"], "unreg");
        assert_eq!(conn.args["bytes"], 2_000_000);
        assert_eq!(conn.args["mean_MB_per_s"], 2.0);
        let zeroed = named(&doc, "zeroed");
        assert_eq!(zeroed[0].ts, 1_103_000);
        assert_eq!(zeroed[0].s, Some(Scope::Thread));
        assert_eq!(zeroed[0].tid, reg.tid);
        assert_eq!(zeroed[0].args["delay_ms"], 3.0);
        let attached = named(&doc, "attached");
        assert_eq!((attached[0].tid, attached[0].ts), (0, 0));
        assert_eq!(attached[0].args["detach"], "not seen by the end");
    }

    #[test]
    fn processes_and_tracks_are_named_by_metadata() {
        let doc = convert(&one_connection());
        let meta = |name: &str| -> Vec<&Value> {
            doc.trace_events
                .iter()
                .filter(|e| e.ph == Phase::Metadata && e.name == name)
                .map(|e| &e.args["name"])
                .collect()
        };
        assert_eq!(meta("process_name"), ["ism0 (GID 0x12340049534d0001)"]);
        assert_eq!(meta("thread_name"), ["DMB 0x100000000", "function"]);
        assert_eq!(doc.other_data["events_read"], 6);
        assert_eq!(doc.other_data["origin_time_us"], 1_000_000);
    }

    #[test]
    fn the_counters_follow_the_connections() {
        let doc = convert(&one_connection());
        let samples = |name: &str, series: &str| -> Vec<(u64, f64)> {
            named(&doc, name)
                .iter()
                .map(|e| (e.ts, e.args[series].as_f64().unwrap()))
                .collect()
        };
        assert_eq!(
            samples("open connections", "connections"),
            [(100_000, 1.0), (1_100_000, 0.0)]
        );
        assert_eq!(
            samples("data into DMBs", "MB/s"),
            [(100_000, 2.0), (1_100_000, 0.0)]
        );
        assert!(named(&doc, "data into DMBs")
            .iter()
            .all(|e| e.ph == Phase::Counter));
    }

    #[test]
    fn reuse_verdicts_are_instants_named_by_their_verdict() {
        let reused = |clean: Option<bool>, unknown: Option<&str>| {
            let what = What::DmbReused {
                conn: 2,
                clean,
                stale_bytes: if clean == Some(false) { 7 } else { 0 },
                first_stale_offset: None,
                unknown: unknown.map(str::to_string),
            };
            line(10, what)
        };
        let doc = convert(&[
            reused(Some(true), None),
            reused(Some(false), None),
            reused(None, Some("over budget")),
            line(
                11,
                What::DmbNotZeroed {
                    conn: 2,
                    watched_ms: 10000.0,
                },
            ),
        ]);
        assert_eq!(named(&doc, "reuse clean").len(), 1);
        assert_eq!(named(&doc, "reuse STALE")[0].args["stale_bytes"], 7);
        let unchecked = named(&doc, "reuse unchecked");
        assert_eq!(unchecked[0].args["clean"], Value::Null);
        assert_eq!(unchecked[0].args["unknown"], "over budget");
        assert_eq!(named(&doc, "not zeroed")[0].args["watched_ms"], 10000.0);
    }

    #[test]
    fn a_fault_is_an_instant_with_whatever_it_carries() {
        let fault = r#"{"time_us":5,"function":"ism1","gid":"0x2","token":"0x100000000","kind":"fault_injected","fault":"move_fails","status":"0x300"}"#;
        let no_token = r#"{"time_us":6,"function":"ism1","gid":"0x2","kind":"fault_injected","fault":"reset"}"#;
        let doc = convert(&[fault.into(), no_token.into()]);
        let faults = named(&doc, "fault injected");
        assert_eq!(faults.len(), 2);
        assert_eq!(
            (faults[0].ph, faults[0].s),
            (Phase::Instant, Some(Scope::Thread))
        );
        assert_eq!(faults[0].args["fault"], "move_fails");
        assert_eq!(faults[0].args["status"], "0x300");
        assert_ne!(faults[0].tid, 0);
        assert_eq!(
            faults[1].tid, 0,
            "a fault on no DMB is on the function's track"
        );
        assert!(!faults[0].args.contains_key("time_us"));
    }

    #[test]
    fn stream_lines_are_wide_instants_in_their_own_process() {
        let dropped = ObservedEvent::function("-", 0, What::EventsDropped { count: 3 });
        let full = ObservedEvent::function("-", 0, What::EventFileFull { limit_bytes: 9 });
        let own = ObservedEvent::function("ism0", GID, What::EventsDropped { count: 4 });
        let doc = convert(&[
            to_json_line(1, &dropped),
            to_json_line(2, &full),
            to_json_line(3, &own),
        ]);
        assert_eq!(named(&doc, "3 events dropped")[0].s, Some(Scope::Global));
        assert_eq!(named(&doc, "4 events dropped")[0].s, Some(Scope::Process));
        assert_eq!(named(&doc, "event file full")[0].args["limit_bytes"], 9);
        let names: Vec<&Value> = doc
            .trace_events
            .iter()
            .filter(|e| e.name == "process_name")
            .map(|e| &e.args["name"])
            .collect();
        assert!(names.contains(&&Value::from("event stream")));
    }

    #[test]
    fn every_kind_the_observer_writes_is_drawn() {
        let function = |what| to_json_line(1, &ObservedEvent::function("ism0", GID, what));
        let lines = vec![
            function(What::FunctionAttached),
            registered(2),
            opened(3, 1),
            closed(4, 1, 10),
            line(
                5,
                What::DmbZeroed {
                    conn: 1,
                    delay_ms: 1.0,
                    late_cdc_kept: false,
                    late_bytes_kept: 0,
                },
            ),
            line(
                6,
                What::DmbNotZeroed {
                    conn: 1,
                    watched_ms: 1.0,
                },
            ),
            line(
                7,
                What::DmbReused {
                    conn: 2,
                    clean: Some(true),
                    stale_bytes: 0,
                    first_stale_offset: None,
                    unknown: None,
                },
            ),
            unregistered(8),
            function(What::EventsDropped { count: 1 }),
            function(What::EventFileFull { limit_bytes: 1 }),
            function(What::FunctionDetached {
                reason: "reset".into(),
            }),
        ];
        let doc = convert(&lines);
        assert_eq!(doc.other_data["events_read"], lines.len());
        assert_eq!(doc.other_data["events_skipped"], Value::Object(Map::new()));
        assert_eq!(named(&doc, "attached")[0].args["detached"], "reset");
    }

    #[test]
    fn events_come_sorted_by_time_enclosing_slices_first() {
        let doc = convert(&[
            registered(1_000),
            opened(1_000, 1),
            closed(1_500, 1, 0),
            unregistered(2_000),
        ]);
        let events = drawn(&doc);
        let first_meta = doc
            .trace_events
            .iter()
            .position(|e| e.ph != Phase::Metadata);
        assert!(
            doc.trace_events[first_meta.unwrap()..]
                .iter()
                .all(|e| e.ph != Phase::Metadata),
            "metadata first"
        );
        assert!(events.windows(2).all(|w| w[0].ts <= w[1].ts));
        assert_eq!(events[0].name, "registered");
        assert_eq!(events[1].name, "conn 1");
        assert_eq!(events[1].args["mean_MB_per_s"], 0.0);
    }

    #[test]
    fn durations_are_never_negative_when_the_clock_steps_back() {
        let doc = convert(&[
            registered(5_000),
            opened(6_000, 1),
            closed(4_000, 1, 100),
            unregistered(3_000),
        ]);
        for event in drawn(&doc) {
            assert!(event.dur.unwrap_or(0) < u64::MAX / 2, "{event:?}");
        }
        let conn = named(&doc, "conn 1")[0];
        let reg = named(&doc, "registered")[0];
        assert_eq!(conn.dur, Some(0));
        assert!(conn.ts >= reg.ts && conn.ts + conn.dur.unwrap() <= reg.ts + reg.dur.unwrap());
        assert!(
            !conn.args.contains_key("mean_MB_per_s"),
            "no duration, no rate"
        );
    }

    #[test]
    fn what_the_stream_missed_is_closed_or_opened_where_seen_and_said() {
        // A follower that joined late: the DMB was registered and the connection open.
        let doc = convert(&[
            closed(2_000, 1, 10),
            opened(3_000, 2),
            opened(4_000, 3),
            registered(5_000),
        ]);
        let c1 = named(&doc, "conn 1")[0];
        assert_eq!((c1.ts, c1.args["start"].as_str()), (0, Some(BEFORE_TRACE)));
        assert!(!c1.args.contains_key("mean_MB_per_s"));
        assert_eq!(
            named(&doc, "conn 2")[0].args["close"],
            "not seen before the next connection"
        );
        let c3 = named(&doc, "conn 3")[0];
        assert_eq!((c3.ts, c3.dur), (2_000, Some(1_000)));
        let regs = named(&doc, "registered");
        assert_eq!(regs.len(), 2);
        assert_eq!(regs[0].args["unregistration"], "not seen");
        assert_eq!(regs[1].args["unregistration"], "not seen by the end");
        assert_eq!(regs[1].dur, Some(0));
    }

    /// Chaos round 554400509: a late CDC message closed conn 2 in the stream, and the
    /// `foreign_cdc` found as a continuation withdrew that close.
    #[test]
    fn a_close_found_foreign_goes_on_in_a_slice_of_its_own() {
        let foreign = What::ForeignCdc {
            conn: 2,
            expected: 0,
            seen: 4176,
            conn_state: 0x40,
            found: Some(FOUND_CONTINUATION.into()),
            late_moves: Some(3),
            late_bytes: Some(4176),
        };
        let doc = convert(&[
            registered(1_000),
            opened(2_000, 2),
            closed(3_000, 2, 69_680),
            line(3_500, foreign),
            closed(4_000, 2, 73_856),
            unregistered(5_000),
        ]);
        let conn = named(&doc, "conn 2");
        assert_eq!(conn.len(), 2, "{conn:?}");
        assert_eq!((conn[0].ts, conn[0].dur), (1_000, Some(1_000)));
        assert_eq!((conn[1].ts, conn[1].dur), (2_500, Some(500)));
        assert_eq!(conn[1].args["continued"], tracks::CONTINUED);
        assert!(
            !conn[1].args.contains_key("mean_MB_per_s"),
            "its bytes are since its open, not since the continuation"
        );
        let instant = named(&doc, "FOREIGN CDC")[0];
        assert_eq!(instant.args["found"], FOUND_CONTINUATION);
        assert_eq!(instant.args["late_bytes"], 4176);
    }

    #[test]
    fn unknown_kinds_are_skipped_and_counted() {
        let doc = convert(&[
            registered(1),
            r#"{"time_us":2,"function":"ism0","gid":"0x1","kind":"from_the_future","x":1}"#.into(),
            r#"{"time_us":3,"function":"ism0","gid":"0x1","kind":"from_the_future"}"#.into(),
            String::new(),
        ]);
        assert_eq!(doc.other_data["events_read"], 1);
        assert_eq!(doc.other_data["events_skipped"]["from_the_future"], 2);
    }

    #[test]
    fn a_malformed_line_is_an_error_naming_its_line() {
        let bad = |text: &str| {
            let lines = [registered(1), text.to_string()];
            from_reader(lines.join("\n").as_bytes()).unwrap_err()
        };
        let e = bad("{\"time_us\": 2, trunc");
        assert!(matches!(e, TimelineError::NotJson { line: 2, .. }), "{e:?}");
        assert_eq!(e.to_string(), "line 2: not JSON");
        let e = bad(
            r#"{"time_us":2,"function":"ism0","gid":"0x1","token":"0x1","kind":"conn_closed","conn":1}"#,
        );
        assert!(
            matches!(e, TimelineError::BadEvent { line: 2, ref kind, .. } if kind == "conn_closed"),
            "{e:?}"
        );
        let e = bad(r#"{"time_us":-2,"function":"ism0","gid":"0x1","kind":"function_attached"}"#);
        assert!(
            matches!(e, TimelineError::BadEvent { line: 2, .. }),
            "{e:?}"
        );
        let e = bad(r#"{"time_us":2,"function":"ism0","gid":"12","kind":"function_attached"}"#);
        assert!(
            matches!(e, TimelineError::BadEvent { line: 2, .. }),
            "{e:?}"
        );
        let e = bad("[1, 2]");
        assert!(
            matches!(e, TimelineError::BadEvent { line: 2, .. }),
            "{e:?}"
        );
    }

    #[test]
    fn a_dmb_event_without_a_token_is_skipped() {
        let doc = convert(&[r#"{"time_us":2,"function":"ism0","gid":"0x1","kind":"conn_opened","rgid":"0x2","conn":1}"#.into()]);
        assert!(named(&doc, "conn 1").is_empty());
    }

    #[test]
    fn no_events_make_an_empty_timeline() {
        let doc = from_reader(&b""[..]).unwrap();
        assert!(doc.trace_events.is_empty());
        assert_eq!(doc.display_time_unit, "ms");
    }
}
