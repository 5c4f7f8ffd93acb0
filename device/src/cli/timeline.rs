//! `ism-emu observe timeline`: the DMB lifecycles as a trace-event timeline, from the
//! live event stream, an event file, or a trace replayed first.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ism_emu::control::api::Request;
use ism_emu::export::chrome_trace::TraceDocument;
use ism_emu::export::timeline::{self, TimelineBuilder, TimelineError};
use ism_emu::observer::Observer;
use ism_emu::record;

use super::{chain, refused_follow, send, CliError};

/// Builds the timeline (live for `duration`, or from the file `from`) and writes it to
/// `out`.
pub fn run(
    control: &Path,
    out: &Path,
    from: Option<PathBuf>,
    duration: Option<Duration>,
) -> Result<(), CliError> {
    let doc = match from {
        Some(path) if is_trace(&path) => of_trace(&path)?,
        Some(path) => of_event_file(&path).map_err(|source| CliError::EventsIn { path, source })?,
        None => follow(control, duration)?,
    };
    write(&doc, out)
}

fn of_event_file(path: &Path) -> Result<TraceDocument, TimelineError> {
    std::fs::File::open(path)
        .map_err(TimelineError::Read)
        .and_then(|f| timeline::from_reader(BufReader::new(f)))
}

/// Follows the event stream into a timeline until `duration` elapses, SIGINT or SIGTERM
/// arrives, or the emulator closes the stream.
fn follow(control: &Path, duration: Option<Duration>) -> Result<TraceDocument, CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let stream = send(control, Request::Follow)?;
    // Reads wake up now and then to look at the clock and the signal flag.
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let deadline = duration.map(|d| Instant::now() + d);
    match duration {
        Some(d) => log::info!("following {} for {d:?}", control.display()),
        None => log::info!("following {} until SIGINT or SIGTERM", control.display()),
    }
    let mut reader = BufReader::new(stream);
    let mut builder = TimelineBuilder::default();
    // A line may arrive in pieces across read timeouts: it is kept until its newline.
    let mut line = Vec::new();
    let mut number = 0;
    while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) if line.ends_with(b"\n") => {
                number += 1;
                let text = String::from_utf8_lossy(&line);
                if number == 1 {
                    refused_follow(&text)?;
                }
                // The recording goes on: one bad line must not lose the others.
                if let Err(e) = builder.push_line(number, &text) {
                    log::warn!("{}; skipped", chain(&e));
                }
                line.clear();
            }
            Ok(_) => {}
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(builder.finish())
}

fn is_timeout(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{Interrupted, TimedOut, WouldBlock};
    matches!(e.kind(), WouldBlock | TimedOut | Interrupted)
}

/// Whether `path` starts with a trace's header (else it is taken for an event file).
fn is_trace(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut first = String::new();
    let _ = BufReader::new(file).read_line(&mut first);
    serde_json::from_str::<record::Header>(&first).is_ok_and(|h| h.trace == "ism-emu")
}

/// A trace's timeline: the trace replayed into an event file, which is then converted.
fn of_trace(path: &Path) -> Result<TraceDocument, CliError> {
    let (events, file) = private_temp_file("ism-emu-timeline", "jsonl")?;
    let observer = Arc::new(Observer::new(Some(file)));
    let replayed = ism_emu::record::replay::replay(path, Arc::clone(&observer));
    observer.sync();
    let doc = replayed.map_err(CliError::from).and_then(|(_, report)| {
        if report.mismatches > 0 {
            log::warn!(
                "the replay differs from the recording in {} operation(s)",
                report.mismatches
            );
        }
        of_event_file(&events).map_err(|source| CliError::EventsIn {
            path: path.to_path_buf(),
            source,
        })
    });
    let _ = std::fs::remove_file(&events);
    doc
}

/// A new file in the temporary directory that only this user can read. The name is not
/// guessable in advance, and `create_new` (O_EXCL) never follows a link another user
/// planted there: a name that exists is skipped, never opened.
fn private_temp_file(stem: &str, ext: &str) -> Result<(PathBuf, std::fs::File), CliError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::env::temp_dir();
    let mut attempt = 0u32;
    loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = dir.join(format!(
            "{stem}-{}-{nanos:08x}{attempt:02x}.{ext}",
            std::process::id()
        ));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 63 => attempt += 1,
            Err(source) => return Err(CliError::EventFile { path, source }),
        }
    }
}

/// Writes the timeline to `out`, or to stdout for `-` (as other tools read it).
fn write(doc: &TraceDocument, out: &Path) -> Result<(), CliError> {
    let wrap = |source| CliError::Out {
        path: out.to_path_buf(),
        source,
    };
    if out == Path::new("-") {
        let stdout = std::io::stdout().lock();
        doc.write_to(std::io::BufWriter::new(stdout))
            .map_err(wrap)?;
        log::info!("wrote {} trace events to stdout", doc.trace_events.len());
        return Ok(());
    }
    let file = std::fs::File::create(out).map_err(wrap)?;
    doc.write_to(std::io::BufWriter::new(file)).map_err(wrap)?;
    log::info!(
        "wrote {} trace events to {}",
        doc.trace_events.len(),
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::private_temp_file;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn temp_files_are_new_private_and_distinct() {
        let (a, _fa) = private_temp_file("ism-emu-test", "jsonl").unwrap();
        let (b, _fb) = private_temp_file("ism-emu-test", "jsonl").unwrap();
        assert_ne!(a, b);
        let mode = std::fs::metadata(&a).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let _ = std::fs::remove_file(a);
        let _ = std::fs::remove_file(b);
    }
}
