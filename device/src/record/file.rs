//! The trace file: its header, one JSON line per [`Record`], the writer thread that
//! records a live run (`serve --trace`) and the reader a replay starts from.
//!
//! Format (docs/trace.md): JSON lines. The first is a [`Header`] (`"trace":"ism-emu"`,
//! `version`, the fabric's CHID and functions); each following line is one operation
//! with its time `t` (µs since the Unix epoch, the time the observer gave its events) and
//! `op`. The fabric records an operation under its lock, so the order of the lines is
//! the order in which the operations changed the device's state.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::dmb::now_us;
use crate::fabric::{Record, Recorder};
use crate::util::json::{chid, hex};
use crate::util::line_writer::{LineWriter, Sink};

/// The format's version: a replay refuses other versions. 2: `store` is a waited store
/// (its failure answered, never held) and `posted` a posted one (version 1 held the
/// failure of every store without the signal).
pub const VERSION: u32 = 2;
/// Records queued for the writer; beyond it records are lost (and counted in the trace).
const QUEUE: usize = 1 << 16;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Header {
    /// Always "ism-emu".
    pub trace: String,
    pub version: u32,
    #[serde(with = "chid")]
    pub chid: u16,
    pub functions: Vec<FunctionHeader>,
    /// Whether move payloads were recorded (`--trace-payload`).
    pub payload: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FunctionHeader {
    pub name: String,
    #[serde(with = "hex")]
    pub gid: u64,
}

/// How a move reached the fabric.
#[derive(Serialize, Deserialize)]
struct Line {
    t: u64,
    #[serde(flatten)]
    record: Record,
}

/// Why a trace could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot write the trace {}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read the trace {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: line {line}: {why}", path.display())]
    Bad {
        path: PathBuf,
        line: usize,
        why: String,
    },
    #[error("{}: not an ism-emu trace of version {VERSION} (header {found:?})", path.display())]
    Version { path: PathBuf, found: String },
}

/// Writes a trace from its own thread: recording never blocks and never does I/O.
pub struct Tracer {
    writer: LineWriter<(u64, String)>,
    lost: Arc<AtomicU64>,
    payload: bool,
}

impl Tracer {
    /// Creates `path` (truncating it), writes the header, starts the writer.
    pub fn create(path: &Path, header: &Header) -> Result<Self, TraceError> {
        let create = |source| TraceError::Create {
            path: path.to_path_buf(),
            source,
        };
        let mut file = BufWriter::new(File::create(path).map_err(create)?);
        let line = serde_json::to_string(header).map_err(|e| create(e.into()))?;
        writeln!(file, "{line}").map_err(create)?;
        let lost = Arc::new(AtomicU64::new(0));
        let sink = TraceFile {
            file,
            lost: Arc::clone(&lost),
            last_t: 0,
            failed: false,
        };
        let writer = LineWriter::spawn("trace", QUEUE, sink).map_err(create)?;
        Ok(Self {
            writer,
            lost,
            payload: header.payload,
        })
    }
}

impl Recorder for Tracer {
    fn payload(&self) -> bool {
        self.payload
    }

    /// Records one operation at the current (operation's) time. Called under the
    /// fabric's lock, within the operation ([`crate::dmb::OpTime`]): the lines reach the
    /// file in the lock's order, with times that never go back.
    fn record(&self, record: Record) {
        let t = now_us();
        let Ok(text) = serde_json::to_string(&Line { t, record }) else {
            return;
        };
        if self.writer.send((t, text)).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits until every record so far is in the file.
    fn sync(&self) {
        self.writer.sync();
    }
}

/// The trace writer thread's side: the file, and the count of records lost in between.
struct TraceFile {
    file: BufWriter<File>,
    lost: Arc<AtomicU64>,
    /// The time of the last line written: a count of lost records takes the time of the
    /// line it precedes, so that the file's times stay in order.
    last_t: u64,
    failed: bool,
}

impl TraceFile {
    fn put(&mut self, text: &str) {
        if !self.failed {
            if let Err(e) = writeln!(self.file, "{text}") {
                log::error!("trace: {e}; nothing more is recorded");
                self.failed = true;
            }
        }
    }

    /// Writes the count of records lost since the last line, if any.
    fn settle_lost(&mut self) {
        let count = self.lost.swap(0, Ordering::Relaxed);
        if count == 0 {
            return;
        }
        let line = Line {
            t: self.last_t,
            record: Record::Lost { count },
        };
        if let Ok(text) = serde_json::to_string(&line) {
            log::warn!("trace: {count} records lost (the writer was behind)");
            self.put(&text);
        }
    }
}

impl Sink for TraceFile {
    type Item = (u64, String);

    fn write(&mut self, (t, text): (u64, String)) {
        self.last_t = t;
        self.settle_lost();
        self.put(&text);
    }

    fn pause(&mut self) {
        self.settle_lost();
        let _ = self.file.flush();
    }
}

/// The longest header line [`read`] takes (a header names each function: a few KiB).
const HEADER_MAX: u64 = 1 << 20;

/// Reads a whole trace: its header and its operations with their times.
pub fn read(path: &Path) -> Result<(Header, Vec<(u64, Record)>), TraceError> {
    let file = File::open(path).map_err(|source| TraceError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |line: usize, why: String| TraceError::Bad {
        path: path.to_path_buf(),
        line,
        why,
    };
    let mut reader = BufReader::new(file);
    // The header is read as bytes, and at most HEADER_MAX of them: a file that is not a
    // trace (binary, say, or one huge line) must be told as such, not as bad UTF-8.
    let mut head = Vec::new();
    Read::by_ref(&mut reader)
        .take(HEADER_MAX)
        .read_until(b'\n', &mut head)
        .map_err(|e| bad(1, e.to_string()))?;
    let first = String::from_utf8_lossy(&head);
    let header: Header = serde_json::from_str(first.trim_end())
        .ok()
        .filter(|h: &Header| h.trace == "ism-emu" && h.version == VERSION)
        .ok_or_else(|| TraceError::Version {
            path: path.to_path_buf(),
            // Bytes that are no text say so, rather than fill the message with noise.
            found: match std::str::from_utf8(&head) {
                Ok(text) => text.trim_end().chars().take(120).collect(),
                Err(_) => "binary data, not text".into(),
            },
        })?;
    let mut records = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| bad(i + 2, e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Line = serde_json::from_str(&line).map_err(|e| bad(i + 2, e.to_string()))?;
        records.push((parsed.t, parsed.record));
    }
    Ok((header, records))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::{MoveResult, MoveVia};
    use crate::fabric::{ReuseCheck, Unread, ZeroScan};
    use crate::ism::command::Command;
    use crate::util::hex::to_hex;

    #[test]
    fn records_round_trip_through_a_file() {
        let dir = vmm_sys_util::tempdir::TempDir::new().unwrap();
        let path = dir.as_path().join("t.jsonl");
        let header = Header {
            trace: "ism-emu".into(),
            version: VERSION,
            chid: 0x1234,
            functions: vec![FunctionHeader {
                name: "ism0".into(),
                gid: 0x1234_0049_534d_0001,
            }],
            payload: false,
        };
        let tracer = Tracer::create(&path, &header).unwrap();
        let records = vec![
            Record::Attach { f: 0 },
            Record::Cmd {
                f: 0,
                cmd: Command::UnregDmb { token: 1 << 32 },
                ret: 0xffff,
            },
            Record::Move {
                f: 0,
                via: MoveVia::Posted,
                window: 0x1_0080_0000,
                len: 3,
                data: Some(to_hex(b"abc")),
                result: MoveResult::Held,
            },
            Record::Reuse {
                f: 0,
                check: ReuseCheck::Unknown(Unread::OverBudget),
            },
            Record::HeldLifted {
                f: 0,
                token: 1 << 32,
            },
            Record::ZeroTick {
                results: vec![(1 << 32, ZeroScan::Dirty(7))],
            },
        ];
        for r in &records {
            tracer.record(r.clone());
        }
        tracer.sync();
        let (read_header, read_records) = read(&path).unwrap();
        assert_eq!(read_header, header);
        let got: Vec<Record> = read_records.into_iter().map(|(_, r)| r).collect();
        assert_eq!(got, records);
    }

    #[test]
    fn reads_keep_the_documented_format_and_unknown_reasons_read_as_unknown() {
        let reuse = Record::Reuse {
            f: 1,
            check: ReuseCheck::Read {
                stale: 2,
                first: Some(3),
            },
        };
        let text = serde_json::to_string(&reuse).unwrap();
        assert_eq!(
            text,
            r#"{"op":"reuse","f":1,"check":{"read":{"stale":2,"first":3}}}"#
        );
        let tick = Record::ZeroTick {
            results: vec![(5, ZeroScan::ZeroUpTo(7)), (6, ZeroScan::Unreadable)],
        };
        let text = serde_json::to_string(&tick).unwrap();
        assert_eq!(
            text,
            r#"{"op":"zero_tick","results":[[5,{"zero_up_to":7}],[6,"unreadable"]]}"#
        );
        let odd = r#"{"op":"reuse","f":0,"check":{"unknown":"cosmic rays"}}"#;
        let odd: Record = serde_json::from_str(odd).unwrap();
        assert_eq!(
            odd,
            Record::Reuse {
                f: 0,
                check: ReuseCheck::Unknown(Unread::Other)
            }
        );
    }

    #[test]
    fn a_file_that_is_not_a_trace_is_refused_with_its_line() {
        let dir = vmm_sys_util::tempdir::TempDir::new().unwrap();
        let path = dir.as_path().join("t.jsonl");
        std::fs::write(&path, "{\"time_us\":1}\n").unwrap();
        assert!(matches!(read(&path), Err(TraceError::Version { .. })));
        let header =
            r#"{"trace":"ism-emu","version":2,"chid":"0x1234","functions":[],"payload":false}"#;
        std::fs::write(&path, format!("{header}\n{{\"t\":1,\"op\":\"explode\"}}\n")).unwrap();
        let err = read(&path).unwrap_err();
        assert!(matches!(err, TraceError::Bad { line: 2, .. }), "{err}");
    }
}
