//! `ism-emu serve`: run the emulated ISM functions of one machine.
//! `ism-emu observe`: look at a running emulator from the host.
//! `ism-emu fault`: make a running emulator fail on purpose.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};

use ism_emu::default_gid;
use ism_emu::fabric::Fabric;
use ism_emu::fault::FaultSpec;
use ism_emu::observer::report::{ConnsTable, DmbsTable, FunctionsTable, Snapshot, Verdict};
use ism_emu::observer::timeline::{self, TimelineBuilder, TimelineError};
use ism_emu::observer::trace_event::TraceDocument;
use ism_emu::observer::Observer;
use ism_emu::server::{self, ServeError};
use ism_emu::trace;

#[derive(Parser)]
#[command(
    version,
    about = "Emulated IBM ISM (SMC-D) PCI functions for QEMU s390x guests, over vfio-user"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve ISM functions, one vfio-user socket each, all on one fabric.
    Serve(ServeOpts),
    /// Run a recorded trace through the device model and the observer, without QEMU:
    /// prints the DMBs and the verdict the live run's observer gave.
    Replay {
        /// A file written by `serve --trace`.
        trace: PathBuf,
        /// Write the replayed event stream (JSON lines) to this file.
        #[arg(long)]
        events: Option<PathBuf>,
        /// Write the replayed snapshot (as `observe json` gives it) to this file.
        #[arg(long)]
        snapshot: Option<PathBuf>,
    },
    /// Inject faults into a running emulator through its control socket.
    Fault {
        #[arg(long, default_value = "/tmp/ism-emu.ctl")]
        control: PathBuf,
        #[command(subcommand)]
        what: FaultCmd,
    },
    /// Query a running emulator through its control socket.
    Observe {
        #[arg(long, default_value = "/tmp/ism-emu.ctl")]
        control: PathBuf,
        #[command(subcommand)]
        what: Observe,
    },
}

#[derive(Subcommand, Clone)]
enum Observe {
    /// The functions: GIDs, attachment, traffic counters.
    Functions,
    /// Every DMB seen: owner, peer, state, connections, reuse and zeroing.
    Dmbs,
    /// The recent connections on every DMB: bytes, close, reuse verdict, zeroing delay.
    Conns,
    /// Functions, DMBs and a verdict on zeroing and reuse.
    Summary,
    /// Print events as they happen (JSON lines).
    Follow,
    /// The raw snapshot as JSON.
    Json,
    /// The DMB lifecycles as a trace-event timeline (Perfetto's UI, chrome://tracing):
    /// followed live until --for elapses, SIGINT/SIGTERM or the emulator's exit, or
    /// converted from an event file.
    Timeline {
        /// Where to write the trace-event JSON.
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

#[derive(Subcommand, Clone)]
enum FaultCmd {
    /// Put a rule in force (or carry out an action such as gid-disabled); prints its id.
    Add {
        /// The fault, e.g. `cmd=reg_dmb@ism1,rc=0x6,next=1` (docs/faults.md).
        spec: String,
    },
    /// The rules in force, with how often each matched and fired.
    List,
    /// Remove one rule, or all.
    Clear { id: Option<u32> },
}

fn parse_fault(s: &str) -> Result<FaultSpec, String> {
    FaultSpec::parse(s).map_err(|e| e.to_string())
}

fn parse_chid(s: &str) -> Result<u16, String> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u16::from_str_radix(hex, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("not a 16-bit number: {e}"))?;
    if v == 0 || v >= 0xff00 {
        return Err("the CHID must be nonzero and below 0xff00".into());
    }
    Ok(v)
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|e| format!("not a number of seconds: {e}"))?;
    Duration::try_from_secs_f64(secs).map_err(|e| format!("not a duration: {e}"))
}

/// Why a command of the CLI failed.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("cannot open event file {}", path.display())]
    EventFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Serve(#[from] ServeError),
    // The hint follows the cause, so the cause is part of this message.
    #[error(
        "cannot reach the emulator at {}: {cause} (is `ism-emu serve --control {}` running?)",
        path.display(),
        path.display()
    )]
    Unreachable {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("cannot read event file {}", path.display())]
    EventsIn {
        path: PathBuf,
        #[source]
        source: TimelineError,
    },
    #[error("cannot write {}", path.display())]
    Out {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("bad snapshot")]
    BadSnapshot(#[source] serde_json::Error),
    #[error(transparent)]
    Trace(#[from] ism_emu::trace::TraceError),
    #[error(transparent)]
    Replay(#[from] ism_emu::replay::ReplayError),
    #[error("the replay differs from the recording in {0} operation(s) ({1} records lost)")]
    ReplayDiffers(usize, u64),
    #[error("bad answer from the emulator: {0:?}")]
    BadAnswer(String),
    #[error("the emulator refused: {0}")]
    Refused(String),
    #[error("fault {spec}")]
    FaultAtStart {
        spec: String,
        #[source]
        source: ism_emu::fault::FaultSpecError,
    },
}

fn main() -> ExitCode {
    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    // The vfio_user crate logs every backend error at ERROR, without limit: a guest could
    // flood the log with rejected moves. The backend logs them itself, rate-limited.
    // RUST_LOG=vfio_user=... still turns it on.
    if !std::env::var("RUST_LOG").is_ok_and(|v| v.contains("vfio_user")) {
        logger.filter_module("vfio_user", log::LevelFilter::Off);
    }
    logger.format_timestamp_millis();
    // Lines are written by a thread of their own: a stalled stderr must not stall guests.
    if let Err(e) = ism_emu::logger::install(logger) {
        eprintln!("ism-emu: no log: {}", chain(&e));
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Serve(opts) => serve(opts),
        Cmd::Replay {
            trace,
            events,
            snapshot,
        } => replay(&trace, events, snapshot),
        Cmd::Observe { control, what } => observe(&control, what),
        Cmd::Fault { control, what } => fault(&control, what),
    };
    // Every line logged so far, out before the exit (within the logger's patience).
    log::logger().flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ism-emu: {}", chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// What `serve` was asked for.
#[derive(Args)]
struct ServeOpts {
    /// Fabric (machine) CHID: nonzero and outside 0xff00-0xffff, as SMC-Dv2 requires.
    #[arg(long, default_value = "0x1234", value_parser = parse_chid)]
    chid: u16,
    /// A vfio-user socket to serve one function on (repeat for more functions).
    /// Functions are named ism0, ism1, ... in this order.
    #[arg(long = "socket", required = true)]
    sockets: Vec<PathBuf>,
    /// Control socket for `ism-emu observe`.
    #[arg(long)]
    control: Option<PathBuf>,
    /// Append the event stream (JSON lines) to this file.
    #[arg(long)]
    events: Option<PathBuf>,
    /// A fault rule in force from the start (repeatable); grammar in docs/faults.md,
    /// e.g. `cmd=reg_dmb@ism1,rc=0x6,next=1` or `move@ism0,every=50`.
    #[arg(long = "fault", value_parser = parse_fault)]
    faults: Vec<FaultSpec>,
    /// Record everything the device is asked to do to this file (docs/trace.md), for
    /// `ism-emu replay`.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Record the moves' data too (default: only the CDC area at the start of each
    /// DMB, no user data).
    #[arg(long, requires = "trace")]
    trace_payload: bool,
}

fn serve(opts: ServeOpts) -> Result<(), CliError> {
    let ServeOpts {
        chid,
        sockets,
        control,
        events,
        faults,
        trace,
        trace_payload,
    } = opts;
    // Every socket and file the emulator creates is its user's only.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let file = match events {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|source| CliError::EventFile { path, source })?,
        ),
        None => None,
    };
    let functions: Vec<(String, u64)> = (0..sockets.len())
        .map(|i| (format!("ism{i}"), default_gid(chid, i)))
        .collect();
    let header = trace::Header {
        trace: "ism-emu".into(),
        version: trace::VERSION,
        chid,
        functions: functions
            .iter()
            .map(|(name, gid)| trace::FunctionHeader {
                name: name.clone(),
                gid: *gid,
            })
            .collect(),
        payload: trace_payload,
    };
    let observer = Arc::new(Observer::new(file));
    let fabric = Arc::new(Fabric::new(chid, functions, observer.clone()));
    // Before the faults, so that the trace has them too.
    if let Some(path) = &trace {
        fabric.set_tracer(trace::Tracer::create(path, &header)?);
    }
    for spec in faults {
        let text = spec.to_string();
        fabric
            .add_fault_at_start(spec)
            .map_err(|source| CliError::FaultAtStart { spec: text, source })?;
    }
    log::info!("fabric CHID {chid:#06x} with {} function(s)", sockets.len());
    let served = server::run(
        Arc::clone(&fabric),
        Arc::clone(&observer),
        &sockets,
        control.as_deref(),
    );
    // The writers flush when idle; at exit every line so far must be in the files.
    observer.sync();
    if let Some(tracer) = fabric.tracer() {
        tracer.sync();
    }
    served?;
    Ok(())
}

fn replay(
    trace_path: &Path,
    events: Option<PathBuf>,
    snapshot: Option<PathBuf>,
) -> Result<(), CliError> {
    let file = match events {
        Some(path) => Some(
            std::fs::File::create(&path).map_err(|source| CliError::EventFile { path, source })?,
        ),
        None => None,
    };
    let observer = Arc::new(Observer::new(file));
    let (fabric, report) = ism_emu::replay::replay(trace_path, Arc::clone(&observer))?;
    let snap = Snapshot {
        chid: fabric.chid(),
        functions: fabric.function_views(),
        dmbs: observer.summaries(),
    };
    if let Some(path) = snapshot {
        let json = serde_json::to_string(&snap).map_err(CliError::BadSnapshot)?;
        std::fs::write(&path, json + "\n")?;
    }
    println!(
        "replayed {} records: {} commands, {} moves, {} zeroing ticks; {} differ from the recording{}",
        report.records,
        report.commands,
        report.moves,
        report.zero_ticks,
        report.mismatches,
        if report.lost > 0 {
            format!("; the trace lost {} records", report.lost)
        } else {
            String::new()
        }
    );
    for m in &report.first_mismatches {
        println!("  {m}");
    }
    print!("{}\n{}", DmbsTable(&snap), Verdict(&snap));
    if report.mismatches > 0 || report.lost > 0 {
        return Err(CliError::ReplayDiffers(report.mismatches, report.lost));
    }
    Ok(())
}

fn request(control: &Path, what: &str) -> Result<UnixStream, CliError> {
    let mut stream = UnixStream::connect(control).map_err(|cause| CliError::Unreachable {
        path: control.to_path_buf(),
        cause,
    })?;
    writeln!(stream, "{what}")?;
    Ok(stream)
}

fn observe(control: &Path, what: Observe) -> Result<(), CliError> {
    if let Observe::Timeline {
        out,
        from,
        for_secs,
    } = what
    {
        let doc = match from {
            Some(path) if is_trace(&path) => timeline_of_trace(&path)?,
            Some(path) => std::fs::File::open(&path)
                .map_err(TimelineError::Read)
                .and_then(|f| timeline::from_reader(BufReader::new(f)))
                .map_err(|source| CliError::EventsIn { path, source })?,
            None => follow_timeline(control, for_secs)?,
        };
        return write_timeline(&doc, &out);
    }
    if let Observe::Follow = what {
        let stream = request(control, "follow")?;
        for line in BufReader::new(stream).lines() {
            println!("{}", line?);
        }
        return Ok(());
    }
    let mut line = String::new();
    BufReader::new(request(control, "snapshot")?).read_line(&mut line)?;
    let snap: Snapshot = serde_json::from_str(&line).map_err(CliError::BadSnapshot)?;
    match what {
        Observe::Json => println!("{line}"),
        Observe::Functions => print!("{}", FunctionsTable(&snap)),
        Observe::Dmbs => print!("{}", DmbsTable(&snap)),
        Observe::Conns => print!("{}", ConnsTable(&snap)),
        Observe::Summary => print!(
            "{}\n{}\n{}",
            FunctionsTable(&snap),
            DmbsTable(&snap),
            Verdict(&snap)
        ),
        Observe::Follow | Observe::Timeline { .. } => {}
    }
    Ok(())
}

fn fault(control: &Path, what: FaultCmd) -> Result<(), CliError> {
    let request_line = match &what {
        FaultCmd::Add { spec } => format!("fault add {spec}"),
        FaultCmd::List => "fault list".to_string(),
        FaultCmd::Clear { id: Some(id) } => format!("fault clear {id}"),
        FaultCmd::Clear { id: None } => "fault clear".to_string(),
    };
    let mut line = String::new();
    BufReader::new(request(control, &request_line)?).read_line(&mut line)?;
    let answer: serde_json::Value =
        serde_json::from_str(&line).map_err(|_| CliError::BadAnswer(line.clone()))?;
    if let Some(error) = answer.get("error").and_then(|e| e.as_str()) {
        return Err(CliError::Refused(error.to_string()));
    }
    match what {
        FaultCmd::Add { .. } => match answer.get("id") {
            Some(id) => println!("rule {id}"),
            None => println!("done"),
        },
        FaultCmd::List => {
            let rules = answer.get("faults").and_then(|f| f.as_array());
            let rules = rules.ok_or_else(|| CliError::BadAnswer(line.clone()))?;
            println!(
                "{:>4} {:>8} {:>8} {:>5}  spec",
                "rule", "seen", "fired", "spent"
            );
            for r in rules {
                println!(
                    "{:>4} {:>8} {:>8} {:>5}  {}",
                    r["id"],
                    r["seen"],
                    r["fired"],
                    if r["spent"].as_bool() == Some(true) {
                        "yes"
                    } else {
                        "no"
                    },
                    r["spec"].as_str().unwrap_or("?")
                );
            }
        }
        FaultCmd::Clear { .. } => println!("removed {}", answer["removed"]),
    }
    Ok(())
}

/// Follows the event stream into a timeline until `duration` elapses, SIGINT or SIGTERM
/// arrives, or the emulator closes the stream.
fn follow_timeline(control: &Path, duration: Option<Duration>) -> Result<TraceDocument, CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let stream = request(control, "follow")?;
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
                // The recording goes on: one bad line must not lose the others.
                if let Err(e) = builder.push_line(number, &String::from_utf8_lossy(&line)) {
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
    serde_json::from_str::<trace::Header>(&first).is_ok_and(|h| h.trace == "ism-emu")
}

/// A trace's timeline: the trace replayed into an event file, which is then converted.
fn timeline_of_trace(path: &Path) -> Result<TraceDocument, CliError> {
    let events =
        std::env::temp_dir().join(format!("ism-emu-timeline-{}.jsonl", std::process::id()));
    let file = std::fs::File::create(&events).map_err(|source| CliError::EventFile {
        path: events.clone(),
        source,
    })?;
    let observer = Arc::new(Observer::new(Some(file)));
    let replayed = ism_emu::replay::replay(path, Arc::clone(&observer));
    observer.sync();
    let doc = replayed.map_err(CliError::from).and_then(|(_, report)| {
        if report.mismatches > 0 {
            log::warn!(
                "the replay differs from the recording in {} operation(s)",
                report.mismatches
            );
        }
        std::fs::File::open(&events)
            .map_err(TimelineError::Read)
            .and_then(|f| timeline::from_reader(BufReader::new(f)))
            .map_err(|source| CliError::EventsIn {
                path: path.to_path_buf(),
                source,
            })
    });
    let _ = std::fs::remove_file(&events);
    doc
}

fn write_timeline(doc: &TraceDocument, out: &Path) -> Result<(), CliError> {
    let wrap = |source| CliError::Out {
        path: out.to_path_buf(),
        source,
    };
    let file = std::fs::File::create(out).map_err(wrap)?;
    doc.write_to(std::io::BufWriter::new(file)).map_err(wrap)?;
    log::info!(
        "wrote {} trace events to {}",
        doc.trace_events.len(),
        out.display()
    );
    Ok(())
}

/// An error and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}
