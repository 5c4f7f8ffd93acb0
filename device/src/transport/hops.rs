//! The hop log: when each message passed the connection loop's steps, for measuring a
//! waited store's round trip piece by piece against QEMU's own trace (docs/performance.md,
//! "Where a waited move's time goes"). Off unless the emulator's environment names a
//! folder in `ISM_EMU_HOPS`; then each connection keeps up to [`MAX_ROWS`] rows in memory
//! (allocated once, at the connection's start: a guest cannot make it grow) and writes
//! them to `hops-<pid>-<n>.csv` in that folder when the connection ends.
//!
//! The times are CLOCK_MONOTONIC nanoseconds, the clock QEMU's simple trace backend
//! stamps its records with, so both logs line up without any conversion.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use nix::time::{clock_gettime, ClockId};

/// The environment variable that turns the hop log on.
pub const ENV: &str = "ISM_EMU_HOPS";
/// Rows kept per connection (48 bytes each); later messages are counted, not kept.
pub const MAX_ROWS: usize = 1 << 20;

/// The steps of one message in the loop, as CLOCK_MONOTONIC nanoseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Row {
    pub id: u16,
    pub command: u16,
    /// The header was read: the serving thread woke and took the message's start.
    pub header_ns: u64,
    /// The body was read.
    pub body_ns: u64,
    /// The device was done (the move copied, SBA bit and interrupt raised), the reply
    /// not yet written.
    pub served_ns: u64,
    /// The reply was written (0: the message wanted none).
    pub sent_ns: u64,
}

/// One connection's log.
pub struct Hops {
    dir: PathBuf,
    rows: Vec<Row>,
    cap: usize,
    dropped: u64,
    /// The message under way.
    current: Row,
}

/// The clock both logs use.
pub fn now_ns() -> u64 {
    // CLOCK_MONOTONIC cannot fail on Linux; a zero would show as a missing step.
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// A step of one message in the connection loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The header was read.
    Header { id: u16, command: u16 },
    /// The body was read.
    Body,
    /// The device was done, the reply not yet written.
    Served,
    /// The reply was written.
    Sent,
    /// The loop is back for the next message (a no-reply message was served then).
    Done,
}

/// A connection's hop log, or nothing when `ISM_EMU_HOPS` is not set: the loop marks its
/// steps with one call either way.
pub struct HopLog(Option<Hops>);

impl HopLog {
    /// The log for a new connection, if `ISM_EMU_HOPS` names a folder.
    pub fn from_env() -> Self {
        Self(std::env::var_os(ENV).map(|dir| Hops::new(PathBuf::from(dir), MAX_ROWS)))
    }

    /// Stamps `step` of the message under way.
    pub fn mark(&mut self, step: Step) {
        let Some(h) = &mut self.0 else {
            return;
        };
        let now = now_ns();
        let row = &mut h.current;
        match step {
            Step::Header { id, command } => {
                row.header_ns = now;
                row.id = id;
                row.command = command;
            }
            Step::Body => row.body_ns = now,
            Step::Served => row.served_ns = now,
            Step::Sent => row.sent_ns = now,
            Step::Done => {
                if row.served_ns == 0 {
                    row.served_ns = now;
                }
                h.finish();
            }
        }
    }
}

impl Hops {
    fn new(dir: PathBuf, cap: usize) -> Self {
        Self {
            dir,
            rows: Vec::with_capacity(cap),
            cap,
            dropped: 0,
            current: Row::default(),
        }
    }

    /// The message under way is done: keep its row.
    fn finish(&mut self) {
        if self.rows.len() < self.cap {
            self.rows.push(self.current);
        } else {
            self.dropped += 1;
        }
        self.current = Row::default();
    }

    fn write(&self) -> std::io::Result<PathBuf> {
        static CONNECTIONS: AtomicU32 = AtomicU32::new(0);
        let n = CONNECTIONS.fetch_add(1, Ordering::Relaxed);
        let path = self
            .dir
            .join(format!("hops-{}-{n}.csv", std::process::id()));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        writeln!(out, "id,command,header_ns,body_ns,served_ns,sent_ns")?;
        for r in &self.rows {
            writeln!(
                out,
                "{},{},{},{},{},{}",
                r.id, r.command, r.header_ns, r.body_ns, r.served_ns, r.sent_ns
            )?;
        }
        out.flush()?;
        Ok(path)
    }
}

impl Drop for Hops {
    fn drop(&mut self) {
        match self.write() {
            Ok(path) => log::info!(
                "hop log: {} messages in {} ({} not kept)",
                self.rows.len(),
                path.display(),
                self.dropped
            ),
            Err(e) => log::warn!("hop log: cannot write to {}: {e}", self.dir.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_stop_at_the_cap_and_the_file_has_them() {
        let dir = std::env::temp_dir().join(format!("ism-emu-hops-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut hops = Hops::new(dir.clone(), 1);
        for id in [7, 8] {
            hops.current = Row {
                id,
                command: 9,
                header_ns: 1,
                body_ns: 2,
                served_ns: 3,
                sent_ns: 4,
            };
            hops.finish();
        }
        assert_eq!(hops.dropped, 1);
        drop(hops);
        let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(files.len(), 1);
        let text = std::fs::read_to_string(files[0].path()).unwrap();
        assert_eq!(
            text,
            "id,command,header_ns,body_ns,served_ns,sent_ns\n7,9,1,2,3,4\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_clock_moves_forward() {
        let a = now_ns();
        let b = now_ns();
        assert!(a > 0 && b >= a);
    }
}
