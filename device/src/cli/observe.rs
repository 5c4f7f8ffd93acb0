//! `ism-emu observe`: the tables, the snapshot and the event stream of a running
//! emulator, asked over its control socket (`observe timeline` is in `timeline.rs`).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Subcommand;

use ism_emu::control::api::Request;
use ism_emu::observer::report::{
    ConnsTable, DmbsTable, FunctionsTable, Snapshot, Verdict, VerdictKind,
};

use super::{ask, exit, refused_follow, send, timeline, CliError};

#[derive(Subcommand, Clone)]
pub enum Observe {
    /// The functions: GIDs, attachment, traffic counters.
    Functions,
    /// Every DMB seen: owner, peer, state, connections, reuse and zeroing.
    Dmbs,
    /// The recent connections on every DMB: bytes, close, reuse verdict, zeroing delay.
    Conns,
    /// Functions, DMBs and a verdict on zeroing and reuse.
    Summary {
        /// Exit with 3 if the verdict is STALE or CROSSED, 4 if it is UNKNOWN (0 for CLEAN or no
        /// reuse), for scripts that need no JSON.
        #[arg(long)]
        check: bool,
    },
    /// Print events as they happen (JSON lines).
    Follow,
    /// The raw snapshot as JSON.
    Json,
    /// The DMB lifecycles as a trace-event timeline (Perfetto's UI, chrome://tracing):
    /// followed live until --for elapses, SIGINT/SIGTERM or the emulator's exit, or
    /// converted from an event file.
    Timeline {
        /// Where to write the trace-event JSON (`-`: stdout).
        #[arg(long)]
        out: PathBuf,
        /// Convert this event file (`serve --events`), or this trace (`serve --trace`,
        /// replayed first), instead of following live.
        #[arg(long)]
        from: Option<PathBuf>,
        /// Follow for this many seconds.
        #[arg(long = "for", value_name = "SECONDS", conflicts_with = "from", value_parser = parse_seconds)]
        for_secs: Option<Duration>,
    },
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|e| format!("not a number of seconds: {e}"))?;
    Duration::try_from_secs_f64(secs).map_err(|e| format!("not a duration: {e}"))
}

/// The exit status: 0, or a verdict's with `summary --check`.
pub fn run(control: &Path, what: Observe) -> Result<u8, CliError> {
    let snap = match what {
        Observe::Timeline {
            out,
            from,
            for_secs,
        } => return timeline::run(control, &out, from, for_secs).map(|()| 0),
        Observe::Follow => return follow(control).map(|()| 0),
        _ => ask::<Snapshot>(control, Request::Snapshot, |_, e| CliError::BadSnapshot(e)),
    };
    let (snap, line) = snap?;
    match what {
        // As it came (with its newline), for tools that want the emulator's own bytes.
        Observe::Json => outln!("{line}"),
        Observe::Functions => out!("{}", FunctionsTable(&snap)),
        Observe::Dmbs => out!("{}", DmbsTable(&snap)),
        Observe::Conns => out!("{}", ConnsTable(&snap)),
        Observe::Summary { check } => {
            out!(
                "{}\n{}\n{}",
                FunctionsTable(&snap),
                DmbsTable(&snap),
                Verdict(&snap)
            );
            if check {
                return Ok(match VerdictKind::of(&snap) {
                    VerdictKind::Crossed | VerdictKind::Stale => exit::STALE,
                    VerdictKind::Unknown => exit::UNKNOWN,
                    VerdictKind::Clean | VerdictKind::NoReuse => 0,
                });
            }
        }
        Observe::Follow | Observe::Timeline { .. } => {}
    }
    Ok(0)
}

/// `observe follow`: the event lines as they come, until the emulator closes the stream.
fn follow(control: &Path) -> Result<(), CliError> {
    let stream = send(control, Request::Follow)?;
    for (number, line) in BufReader::new(stream).lines().enumerate() {
        let line = line?;
        if number == 0 {
            refused_follow(&line)?;
        }
        outln!("{line}");
    }
    Ok(())
}
