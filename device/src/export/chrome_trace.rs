//! The subset of the Chrome trace-event format the timeline writes: the JSON object form
//! with complete (`X`), instant (`i`), counter (`C`) and metadata (`M`) events, which
//! Perfetto's UI and chrome://tracing both open. `scripts/trace-event.schema.json` is
//! the same subset as a JSON Schema; `tests/tools/test_timeline.py` holds exports to it.

use std::io::Write;

use serde::Serialize;
use serde_json::{Map, Value};

/// One trace event. `ts` and `dur` are microseconds, the format's unit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceEvent {
    pub name: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub cat: &'static str,
    pub ph: Phase,
    pub ts: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<u64>,
    pub pid: u32,
    pub tid: u32,
    /// An instant's scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s: Option<Scope>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub args: Map<String, Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Phase {
    #[serde(rename = "M")]
    Metadata,
    #[serde(rename = "X")]
    Complete,
    #[serde(rename = "i")]
    Instant,
    #[serde(rename = "C")]
    Counter,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Scope {
    #[serde(rename = "g")]
    Global,
    #[serde(rename = "p")]
    Process,
    #[serde(rename = "t")]
    Thread,
}

impl TraceEvent {
    pub fn complete(name: String, cat: &'static str, at: (u32, u32), ts: u64, dur: u64) -> Self {
        Self {
            name,
            cat,
            ph: Phase::Complete,
            ts,
            dur: Some(dur),
            pid: at.0,
            tid: at.1,
            s: None,
            args: Map::new(),
        }
    }

    pub fn instant(name: String, cat: &'static str, at: (u32, u32), ts: u64, s: Scope) -> Self {
        Self {
            ph: Phase::Instant,
            dur: None,
            s: Some(s),
            ..Self::complete(name, cat, at, ts, 0)
        }
    }

    /// A counter sample: every arg is one series of the counter `name` of process `pid`.
    pub fn counter(name: &str, pid: u32, ts: u64, series: &str, value: f64) -> Self {
        Self {
            ph: Phase::Counter,
            dur: None,
            ..Self::complete(name.to_string(), "rate", (pid, 0), ts, 0)
        }
        .arg(series, value)
    }

    /// `process_name`, `thread_name`, `process_sort_index`, `thread_sort_index`.
    pub fn metadata(what: &str, at: (u32, u32), key: &str, value: impl Into<Value>) -> Self {
        Self {
            ph: Phase::Metadata,
            dur: None,
            ..Self::complete(what.to_string(), "", at, 0, 0)
        }
        .arg(key, value)
    }

    pub fn arg(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.args.insert(key.to_string(), value.into());
        self
    }
}

/// The whole export: `{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`.
#[derive(Debug, PartialEq, Serialize)]
pub struct TraceDocument {
    #[serde(rename = "traceEvents")]
    pub trace_events: Vec<TraceEvent>,
    #[serde(rename = "displayTimeUnit")]
    pub display_time_unit: &'static str,
    #[serde(rename = "otherData")]
    pub other_data: Map<String, Value>,
}

impl TraceDocument {
    /// Writes the document with one event per line, so that an export reads (and diffs)
    /// as a list of events rather than one line of megabytes.
    pub fn write_to(&self, mut out: impl Write) -> std::io::Result<()> {
        writeln!(out, "{{\"traceEvents\": [")?;
        let last = self.trace_events.len().saturating_sub(1);
        for (i, event) in self.trace_events.iter().enumerate() {
            let sep = if i == last { "" } else { "," };
            writeln!(out, "  {}{sep}", serde_json::to_string(event)?)?;
        }
        writeln!(out, "],")?;
        writeln!(
            out,
            "\"displayTimeUnit\": {},",
            serde_json::to_string(self.display_time_unit)?
        )?;
        writeln!(
            out,
            "\"otherData\": {}",
            serde_json::to_string(&self.other_data)?
        )?;
        writeln!(out, "}}")?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_document_is_the_serialised_one() {
        let doc = TraceDocument {
            trace_events: vec![
                TraceEvent::metadata("process_name", (1, 0), "name", "ism0"),
                TraceEvent::instant("zeroed".into(), "zeroing", (1, 2), 5, Scope::Thread),
                TraceEvent::counter("open connections", 1, 7, "connections", 1.0),
            ],
            display_time_unit: "ms",
            other_data: Map::new(),
        };
        let mut text = Vec::new();
        doc.write_to(&mut text).unwrap();
        let read: Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(read, serde_json::to_value(&doc).unwrap());
        assert_eq!(read["traceEvents"][1]["s"], "t");
        assert_eq!(read["traceEvents"][2]["ph"], "C");
        assert!(read["traceEvents"][0].get("dur").is_none());
    }

    #[test]
    fn an_empty_document_is_still_json() {
        let doc = TraceDocument {
            trace_events: Vec::new(),
            display_time_unit: "ms",
            other_data: Map::new(),
        };
        let mut text = Vec::new();
        doc.write_to(&mut text).unwrap();
        let read: Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(read["traceEvents"], Value::Array(Vec::new()));
    }
}
