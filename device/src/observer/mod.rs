//! The host's view of what the guests do with their DMBs.
//!
//! It sits above the fabric, which reports to it through the fabric's own
//! [`EventSink`](crate::fabric::EventSink) (under the fabric's lock) when functions
//! and DMBs come and go and after every data move; the hooks are short (no guest memory
//! is read under the lock, events go to a writer thread). From the SMC-D CDC messages that
//! a peer writes at DMB offset 0 the observer
//! recognises connections; from reading the owner's memory it sees whether the guest
//! zeroed a DMB after a connection released it, and whether a reused DMB was clean. It only
//! ever *reads* guest memory.
//!
//! Events go out as JSON lines (schema in docs/observer.md) to an optional file and to live
//! followers on the control socket.
//!
//! Here: the [`Observer`] and its event writer thread. Beside it: `event` (the stream's
//! schema), `sink` (its answers to the fabric's hooks), `cursor` (reading CDC messages),
//! `dmb_life` (the tracker, with its zeroing watch), `summary` (what it tells of a DMB),
//! `report` (the snapshot and its tables).

mod cursor;
pub mod dmb_life;
mod event;
pub mod report;
mod sink;
pub mod summary;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::dmb::now_us;
use crate::util::line_writer::{LineWriter, Sink};
use crate::util::ratelimit::RateLimit;
pub use dmb_life::DmbLife;
pub use event::{to_json_line, Line, ObservedEvent, What, FOUND_CONTINUATION};
pub use summary::DmbSummary;

/// The event stream's capacity between the fabric and the writer thread.
const EVENT_QUEUE: usize = 4096;
/// At most this many lines per second per function reach the file and the followers;
/// the rest are counted in an `events_dropped` line for that function, so one guest
/// can neither flood the stream nor crowd the others' events out of it.
pub const EVENTS_PER_FUNCTION_PER_SECOND: u64 = 1000;
/// Lines waiting for one follower; beyond, its lines are lost and counted.
pub const FOLLOWER_QUEUE: usize = 4096;
/// The `--events` file stops growing here, with an `event_file_full` line.
pub const EVENT_FILE_LIMIT: u64 = 1 << 30;

/// One line for the writer thread.
struct Output {
    function: String,
    gid: u64,
    line: String,
    /// The event's time: a function's share of the stream is counted per second of
    /// event time, so a replayed trace drops what the live run dropped.
    time_us: u64,
}

/// One function's share of the stream: its GID (for the `events_dropped` line) and its
/// limit per second of event time.
struct Window {
    gid: u64,
    limit: RateLimit,
}

/// A live follower's feed (`follow` on the control socket): lines it does not take in
/// time are counted, and it is told how many in an `events_dropped` line of function
/// `-` before the next line it takes, as the event file is told of lines the queue lost.
struct Follower {
    tx: SyncSender<String>,
    lost: u64,
}

impl Follower {
    /// Offers the follower `line` (of time `time_us`), after the count of lines it lost
    /// before, if any. False once the follower has gone.
    fn offer(&mut self, time_us: u64, line: &str) -> bool {
        if !self.settle(time_us) {
            return false;
        }
        if self.lost > 0 {
            self.lost += 1;
            return true;
        }
        match self.tx.try_send(line.to_string()) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.lost += 1;
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// Sends the count of lines lost so far, if there is room for it now, with time
    /// `time_us`: that of the line it precedes, or at a pause that of the last line
    /// written, so that the stream's times keep their order. False once the follower
    /// has gone.
    fn settle(&mut self, time_us: u64) -> bool {
        if self.lost == 0 {
            return true;
        }
        let count = self.lost;
        let event = ObservedEvent::function("-", 0, What::EventsDropped { count });
        match self.tx.try_send(to_json_line(time_us, &event)) {
            Ok(()) => {
                self.lost = 0;
                true
            }
            Err(TrySendError::Full(_)) => true,
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

/// The writer thread's side (a [`LineWriter`]'s sink): the file and the live followers.
struct Writer {
    file: Option<BufWriter<File>>,
    file_bytes: u64,
    file_limit: u64,
    followers: Arc<Mutex<Vec<Follower>>>,
    /// The time of the last line written.
    last_us: u64,
    /// Lines lost because the queue was full (the function is not known there).
    queue_dropped: Arc<AtomicU64>,
    windows: BTreeMap<String, Window>,
}

impl Writer {
    fn line(&mut self, function: String, gid: u64, line: String, time_us: u64) {
        let window = self
            .windows
            .entry(function.clone())
            .or_insert_with(|| Window {
                gid,
                limit: RateLimit::new(EVENTS_PER_FUNCTION_PER_SECOND, Duration::from_secs(1)),
            });
        let mut dropped = 0;
        let passes = window.limit.allow(time_us, |n| dropped = n);
        if dropped > 0 {
            self.dropped_line(&function, gid, dropped);
        }
        if passes {
            self.write(time_us, line);
        }
    }

    /// Writes the `events_dropped` lines owed so far.
    fn report_dropped(&mut self) {
        let owed: Vec<(String, u64, u64)> = self
            .windows
            .iter_mut()
            .map(|(f, w)| (f.clone(), w.gid, w.limit.take_refused()))
            .filter(|&(_, _, count)| count > 0)
            .collect();
        for (function, gid, count) in owed {
            self.dropped_line(&function, gid, count);
        }
        let count = self.queue_dropped.swap(0, Ordering::Relaxed);
        if count > 0 {
            self.dropped_line("-", 0, count);
        }
        // A follower that fell behind learns what it lost when it has caught up, not
        // only with the next event, which may be long in coming.
        let last_us = self.last_us;
        let mut followers = self.followers.lock().unwrap_or_else(|p| p.into_inner());
        followers.retain_mut(|f| f.settle(last_us));
    }

    fn dropped_line(&mut self, function: &str, gid: u64, count: u64) {
        let event = ObservedEvent::function(function, gid, What::EventsDropped { count });
        let time_us = now_us();
        self.write(time_us, to_json_line(time_us, &event));
    }

    fn write(&mut self, time_us: u64, line: String) {
        self.last_us = time_us;
        if let Some(file) = self.file.as_mut() {
            let len = line.len() as u64 + 1;
            if self.file_bytes + len > self.file_limit {
                let limit_bytes = self.file_limit;
                let full = ObservedEvent::function("-", 0, What::EventFileFull { limit_bytes });
                let _ =
                    writeln!(file, "{}", to_json_line(now_us(), &full)).and_then(|()| file.flush());
                log::warn!("event file reached {limit_bytes} bytes; no more events written to it");
                self.file = None;
            } else if let Err(e) = writeln!(file, "{line}") {
                log::warn!("event file write failed ({e}); no longer writing events to it");
                self.file = None;
            } else {
                self.file_bytes += len;
            }
        }
        let mut followers = self.followers.lock().unwrap_or_else(|p| p.into_inner());
        followers.retain_mut(|f| f.offer(time_us, &line));
    }

    fn flush(&mut self) {
        if let Some(file) = self.file.as_mut() {
            let _ = file.flush();
        }
    }
}

impl Sink for Writer {
    type Item = Output;

    fn write(&mut self, out: Output) {
        self.line(out.function, out.gid, out.line, out.time_us);
    }

    fn pause(&mut self) {
        self.report_dropped();
        self.flush();
    }
}

pub struct Observer {
    /// To the writer thread: the fabric's lock never waits for a file or a socket.
    /// None: the thread could not start, and events are not written.
    out: Option<LineWriter<Output>>,
    queue_dropped: Arc<AtomicU64>,
    followers: Arc<Mutex<Vec<Follower>>>,
    pub(crate) life: Mutex<dmb_life::Tracker>,
    /// Woken when a DMB closes, so the zeroing watcher sleeps while nothing is watched.
    zero_wake: Mutex<Option<SyncSender<()>>>,
}

impl Default for Observer {
    fn default() -> Self {
        Self::new(None)
    }
}

impl Observer {
    /// An observer writing events to `file` (if any) from its own thread.
    pub fn new(file: Option<File>) -> Self {
        Self::with_file_limit(file, EVENT_FILE_LIMIT)
    }

    /// The same, with the file growing to at most about `file_limit` bytes.
    pub fn with_file_limit(file: Option<File>, file_limit: u64) -> Self {
        let queue_dropped = Arc::new(AtomicU64::new(0));
        let followers = Arc::new(Mutex::new(Vec::new()));
        let file_bytes = file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map_or(0, |m| m.len());
        let writer = Writer {
            file: file.map(BufWriter::new),
            file_bytes,
            file_limit,
            followers: Arc::clone(&followers),
            last_us: 0,
            queue_dropped: Arc::clone(&queue_dropped),
            windows: BTreeMap::new(),
        };
        let out = LineWriter::spawn("events", EVENT_QUEUE, writer)
            .map_err(|e| log::error!("event writer thread: {e}; events are not written"))
            .ok();
        Self {
            out,
            queue_dropped,
            followers,
            life: Mutex::new(dmb_life::Tracker::default()),
            zero_wake: Mutex::new(None),
        }
    }

    pub(crate) fn tracker(&self) -> std::sync::MutexGuard<'_, dmb_life::Tracker> {
        self.life.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes an event. Never blocks: when the writer is behind, the line is counted
    /// as dropped and an `events_dropped` line says how many.
    pub fn emit(&self, event: ObservedEvent) {
        let time_us = now_us();
        let line = to_json_line(time_us, &event);
        log::debug!("event {line}");
        let out = Output {
            function: event.function,
            gid: event.gid,
            line,
            time_us,
        };
        if let Some(Err(_)) = self.out.as_ref().map(|w| w.send(out)) {
            self.queue_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn emit_all(&self, events: impl IntoIterator<Item = ObservedEvent>) {
        for event in events {
            self.emit(event);
        }
    }

    /// Waits until every event emitted so far is written and sent to the followers.
    pub fn sync(&self) {
        if let Some(out) = &self.out {
            out.sync();
        }
    }

    /// A live feed of every event from now on.
    pub fn follow(&self) -> Receiver<String> {
        let (tx, rx) = sync_channel(FOLLOWER_QUEUE);
        self.followers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Follower { tx, lost: 0 });
        rx
    }

    /// Wake-ups for the zeroing watcher: one whenever a DMB's connection closes.
    pub fn zero_wakeups(&self) -> Receiver<()> {
        let (tx, rx) = sync_channel(1);
        *self.zero_wake.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        rx
    }

    /// Every DMB's summary. Taken one DMB at a time: moves take the same lock (under the
    /// fabric's), so a snapshot must not hold it for all 4095 DMBs at once.
    pub fn summaries(&self) -> Vec<DmbSummary> {
        let tokens = self.tracker().tokens();
        tokens
            .into_iter()
            .filter_map(|token| self.tracker().summary(token))
            .collect()
    }
}

/// How often the zeroing watcher looks at DMBs whose connection closed (while any is
/// watched; it sleeps otherwise).
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

    fn attached(function: &str) -> ObservedEvent {
        ObservedEvent::function(function, 7, What::FunctionAttached)
    }

    fn kind(line: &str) -> String {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        format!(
            "{} {}",
            value["function"].as_str().unwrap(),
            value["kind"].as_str().unwrap()
        )
    }

    #[test]
    fn a_flooding_function_loses_its_own_lines_not_the_others() {
        let observer = Observer::default();
        let rx = observer.follow();
        let flood = EVENTS_PER_FUNCTION_PER_SECOND + 500;
        for _ in 0..flood {
            observer.emit(attached("ism1"));
        }
        observer.emit(attached("ism0"));
        observer.sync();
        let lines: Vec<String> = rx.try_iter().map(|l| kind(&l)).collect();
        let of = |k: &str| lines.iter().filter(|l| *l == k).count() as u64;
        assert_eq!(of("ism1 function_attached"), EVENTS_PER_FUNCTION_PER_SECOND);
        assert_eq!(of("ism0 function_attached"), 1);
        assert_eq!(lines.last().unwrap(), "ism1 events_dropped");
    }

    #[test]
    fn a_follower_that_falls_behind_is_told_how_many_lines_it_lost() {
        let observer = Observer::default();
        let rx = observer.follow();
        // Spread over functions, so that none is over its rate; in batches the writer's
        // own queue takes whole, however slow its thread (a loaded test run), so that
        // only the follower loses lines.
        for i in 0..FOLLOWER_QUEUE + 100 {
            observer.emit(attached(&format!("ism{}", i % 8)));
            if i % 256 == 255 {
                observer.sync();
            }
        }
        observer.sync();
        assert_eq!(rx.try_iter().count(), FOLLOWER_QUEUE);
        // Read up: the count goes out at the writer's next pause, before any later line.
        observer.sync();
        observer.emit(attached("ism0"));
        observer.sync();
        let next: Vec<String> = rx.try_iter().collect();
        let kinds: Vec<String> = next.iter().map(|l| kind(l)).collect();
        assert_eq!(kinds, ["- events_dropped", "ism0 function_attached"]);
        let lost: serde_json::Value = serde_json::from_str(&next[0]).unwrap();
        assert_eq!(lost["count"], 100);
    }

    #[test]
    fn the_event_file_stops_at_its_limit_with_a_line_that_says_so() {
        let file = vmm_sys_util::tempfile::TempFile::new().unwrap();
        let observer = Observer::with_file_limit(Some(file.as_file().try_clone().unwrap()), 1000);
        for _ in 0..100 {
            observer.emit(attached("ism0"));
        }
        observer.sync();
        let text = std::fs::read_to_string(file.as_path()).unwrap();
        assert!(text.len() < 1200, "{} bytes", text.len());
        assert_eq!(kind(text.lines().last().unwrap()), "- event_file_full");
    }

    #[test]
    fn a_function_event_has_no_token() {
        let event = ObservedEvent::function("ism1", 2, What::FunctionAttached);
        assert_eq!(
            to_json_line(5, &event),
            r#"{"time_us":5,"function":"ism1","gid":"0x0000000000000002","kind":"function_attached"}"#
        );
    }
}
