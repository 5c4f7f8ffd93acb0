//! The process's log: records filtered and formatted by env_logger as before (`RUST_LOG`,
//! `RUST_LOG_STYLE`, the same lines), written to stderr by a thread of their own.
//!
//! A log call never waits for stderr. The fabric logs under its lock, and stderr may be a
//! paused terminal or a pipe nobody reads: a write that blocked there would stop every
//! guest's moves. So a formatted line only goes into a bounded queue, and the `log`
//! thread does the writing. When stderr does not take lines, the queue fills and further
//! lines are dropped and counted; once the writer has caught up it logs "N log lines
//! dropped". A stalled stderr costs log lines, never a guest's move.

use std::cell::RefCell;
use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::{Level, Log, Metadata, Record, SetLoggerError};

/// Lines the queue holds (a few hundred KiB at most: lines are short).
pub const QUEUE_LINES: usize = 4096;
/// The writer hands stderr at most this much at once.
const BATCH_BYTES: usize = 64 << 10;
/// How long [`Log::flush`] (at exit) waits for stderr to take what is queued.
pub const FLUSH_PATIENCE: Duration = Duration::from_secs(1);

/// Why the logger could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum LoggerError {
    #[error("cannot start the log writer thread")]
    Thread(#[source] io::Error),
    #[error("a logger is installed already")]
    Installed(#[source] SetLoggerError),
}

enum Msg {
    Line(Vec<u8>),
    /// Answered once every line queued before it has been written.
    Flush(SyncSender<()>),
}

thread_local! {
    /// On the `log` thread only: its own lines (the count of dropped ones), which go
    /// straight into its next write. Through the queue it drains, the count could be
    /// dropped itself, and counted as one.
    static WRITER_LINES: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// env_logger's target: each formatted line arrives in one `write`, and goes into the
/// queue or is counted.
struct Queue {
    tx: SyncSender<Msg>,
    dropped: Arc<AtomicU64>,
}

impl Write for Queue {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let own = WRITER_LINES.with_borrow_mut(|own| own.as_mut().map(|own| own.extend(line)));
        if own.is_none() && self.tx.try_send(Msg::Line(line.to_vec())).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A `log` logger that formats with env_logger and never blocks.
pub struct Logger {
    format: Arc<env_logger::Logger>,
    tx: SyncSender<Msg>,
}

impl Logger {
    /// A logger formatting as `builder` says, its lines written to `out` by a thread of
    /// its own. Colours as env_logger would give them on stderr: only on a terminal, and
    /// not with `NO_COLOR` (`RUST_LOG_STYLE=always|never` decides otherwise).
    pub fn new(
        mut builder: env_logger::Builder,
        out: impl Write + Send + 'static,
    ) -> Result<Self, LoggerError> {
        let (tx, rx) = sync_channel(QUEUE_LINES);
        let dropped = Arc::new(AtomicU64::new(0));
        let style = std::env::var("RUST_LOG_STYLE").unwrap_or_default();
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        if style != "always" && style != "never" && io::stderr().is_terminal() && !no_color {
            builder.write_style(env_logger::WriteStyle::Always);
        }
        let queue = Queue {
            tx: tx.clone(),
            dropped: Arc::clone(&dropped),
        };
        let format = Arc::new(
            builder
                .target(env_logger::Target::Pipe(Box::new(queue)))
                .build(),
        );
        let writer = Writer {
            format: Arc::clone(&format),
            dropped,
        };
        std::thread::Builder::new()
            .name("log".into())
            .spawn(move || writer.run(rx, out))
            .map_err(LoggerError::Thread)?;
        Ok(Self { format, tx })
    }

    /// The most verbose level any of the filter's directives lets through.
    pub fn filter(&self) -> log::LevelFilter {
        self.format.filter()
    }
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.format.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        self.format.log(record);
    }

    /// Waits, at most `FLUSH_PATIENCE`, until every line logged so far is written: a
    /// stalled stderr must not keep the process from exiting.
    fn flush(&self) {
        let deadline = Instant::now() + FLUSH_PATIENCE;
        let (done, written) = sync_channel(1);
        let mut msg = Msg::Flush(done);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    msg = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => return,
            }
        }
        let _ = written.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }
}

/// Makes `builder` start each line with a short UTC clock, `[21:03:04.123Z INFO  module]`:
/// the scripts around the emulator print `==> [21:03:04Z]`, so one clock (UTC, marked
/// `Z`) reads across their output and this log. The date is left out: a run is minutes.
/// Level and module stay where env_logger puts them, for whoever greps the log.
pub fn utc_clock_format(builder: &mut env_logger::Builder) {
    builder.format(|buf, record| {
        let style = buf.default_level_style(record.level());
        writeln!(
            buf,
            "[{} {style}{:<5}{style:#} {}] {}",
            utc_clock(std::time::SystemTime::now()),
            record.level(),
            record.module_path().unwrap_or_else(|| record.target()),
            record.args()
        )
    });
}

/// `hh:mm:ss.mmmZ` of `at`, in UTC.
pub fn utc_clock(at: std::time::SystemTime) -> String {
    let since = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let day = since.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}Z",
        day / 3600,
        day / 60 % 60,
        day % 60,
        since.subsec_millis()
    )
}

/// Installs `builder`'s logger, writing to stderr, as the process's.
pub fn install(builder: env_logger::Builder) -> Result<(), LoggerError> {
    let logger = Logger::new(builder, io::stderr())?;
    let max = logger.filter();
    log::set_boxed_logger(Box::new(logger)).map_err(LoggerError::Installed)?;
    log::set_max_level(max);
    Ok(())
}

/// The `log` thread: the only one that waits for stderr.
struct Writer {
    format: Arc<env_logger::Logger>,
    dropped: Arc<AtomicU64>,
}

impl Writer {
    fn run(self, rx: Receiver<Msg>, mut out: impl Write) {
        WRITER_LINES.set(Some(Vec::new()));
        let mut batch = Vec::new();
        let mut flushes = Vec::new();
        while let Ok(first) = rx.recv() {
            // Everything queued by now (up to a batch), in one write.
            let mut msg = first;
            let caught_up = loop {
                match msg {
                    Msg::Line(line) => batch.extend_from_slice(&line),
                    Msg::Flush(done) => flushes.push(done),
                }
                if batch.len() >= BATCH_BYTES {
                    break false;
                }
                match rx.try_recv() {
                    Ok(next) => msg = next,
                    Err(_) => break true,
                }
            };
            if caught_up {
                let dropped = self.dropped.swap(0, Ordering::Relaxed);
                if dropped > 0 {
                    self.report(dropped);
                    WRITER_LINES.with_borrow_mut(|own| {
                        batch.extend(own.as_mut().map(std::mem::take).unwrap_or_default())
                    });
                }
            }
            // Errors are not reported: there is nowhere left to report them.
            let _ = out.write_all(&batch).and_then(|()| out.flush());
            batch.clear();
            for done in flushes.drain(..) {
                let _ = done.send(());
            }
        }
    }

    /// Logs how many lines were dropped: formatted as any line, into `WRITER_LINES`.
    fn report(&self, dropped: u64) {
        let target = module_path!();
        let metadata = Metadata::builder()
            .level(Level::Warn)
            .target(target)
            .build();
        if self.format.enabled(&metadata) {
            self.format.log(
                &Record::builder()
                    .metadata(metadata)
                    .module_path_static(Some(target))
                    .args(format_args!(
                        "{dropped} log lines dropped: stderr did not take them in time"
                    ))
                    .build(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{channel, Sender};
    use std::sync::Mutex;

    /// What the writer wrote, and a gate that holds its writes (a stalled stderr).
    #[derive(Clone, Default)]
    struct Out {
        text: Arc<Mutex<Vec<u8>>>,
        gate: Arc<Mutex<()>>,
    }

    impl Write for Out {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let _open = self.gate.lock().unwrap();
            self.text.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Out {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.text.lock().unwrap()).into_owned()
        }
    }

    fn logger(out: &Out) -> Logger {
        let mut builder = env_logger::Builder::new();
        builder
            .filter_level(log::LevelFilter::Info)
            .format_timestamp(None);
        Logger::new(builder, out.clone()).unwrap()
    }

    fn info(logger: &Logger, line: &str) {
        logger.log(
            &Record::builder()
                .level(Level::Info)
                .target("ism_emu::fabric")
                .args(format_args!("{line}"))
                .build(),
        );
    }

    #[test]
    fn lines_come_out_as_env_logger_formats_them_and_filters_them() {
        let out = Out::default();
        let logger = logger(&out);
        info(&logger, "ism0 (gid 0x1): client attached");
        logger.log(
            &Record::builder()
                .level(Level::Debug)
                .args(format_args!("filtered"))
                .build(),
        );
        logger.flush();
        assert_eq!(
            out.text(),
            "[INFO  ism_emu::fabric] ism0 (gid 0x1): client attached\n"
        );
    }

    #[test]
    fn the_clock_is_utc_to_the_millisecond_with_a_z() {
        let at = std::time::UNIX_EPOCH + Duration::from_millis(1_796_006_540_064);
        // 1796006540 s = 20787 days + 9740 s.
        assert_eq!(utc_clock(at), "02:42:20.064Z");
        let out = Out::default();
        let mut builder = env_logger::Builder::new();
        builder.filter_level(log::LevelFilter::Info);
        utc_clock_format(&mut builder);
        let logger = Logger::new(builder, out.clone()).unwrap();
        info(&logger, "ism0 (gid 0x1): client attached");
        logger.flush();
        let text = out.text();
        let (clock, rest) = text[1..].split_once(' ').unwrap();
        assert_eq!(clock.len(), "01:02:20.064Z".len(), "{text}");
        assert!(clock.ends_with('Z'), "{text}");
        assert_eq!(
            rest,
            "INFO  ism_emu::fabric] ism0 (gid 0x1): client attached\n"
        );
    }

    /// Logs `n` lines on another thread; the time it took, unless it took more than 5 s.
    fn log_lines(logger: Arc<Logger>, n: usize) -> Option<Duration> {
        let (done, finished): (Sender<Duration>, _) = channel();
        std::thread::spawn(move || {
            let start = Instant::now();
            for i in 0..n {
                info(&logger, &format!("line {i}"));
            }
            let _ = done.send(start.elapsed());
        });
        finished.recv_timeout(Duration::from_secs(5)).ok()
    }

    #[test]
    fn a_stalled_stderr_drops_lines_instead_of_blocking_and_the_log_says_how_many() {
        let out = Out::default();
        let logger = Arc::new(logger(&out));
        let stalled = out.gate.lock().unwrap();
        let lines = 3 * QUEUE_LINES;
        let took = log_lines(Arc::clone(&logger), lines);
        assert!(took.is_some(), "logging blocked on a stalled stderr");
        drop(stalled);
        logger.flush();
        logger.flush();
        let text = out.text();
        let written = text.lines().filter(|l| l.contains("] line ")).count();
        let report = text
            .lines()
            .find(|l| l.contains("log lines dropped"))
            .unwrap();
        let dropped: usize = report
            .split("] ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        assert!(dropped > 0 && written < lines, "{report}");
        assert_eq!(written + dropped, lines, "every line written or counted");
    }
}
