//! `ism-emu serve`: run the emulated ISM functions of one machine.
//! `ism-emu observe`: look at a running emulator from the host.
//! `ism-emu fault`: make a running emulator fail on purpose.
//! `ism-emu completions` / `ism-emu man`: shell completion and manual pages, from this
//! file's argument definitions.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{ArgAction, Args, CommandFactory, Parser, Subcommand};

use ism_emu::default_gid;
use ism_emu::export::chrome_trace::TraceDocument;
use ism_emu::export::timeline::{self, TimelineBuilder, TimelineError};
use ism_emu::fabric::Fabric;
use ism_emu::fault::FaultSpec;
use ism_emu::observer::report::{
    ConnsTable, DmbsTable, FunctionsTable, Snapshot, Verdict, VerdictKind,
};
use ism_emu::observer::Observer;
use ism_emu::server::{self, ServeError};
use ism_emu::trace;

/// `print!`/`println!` that return stdout's error (`?`, as `CliError::Io`) instead of
/// panicking: `ism-emu observe follow | head -1` must end with a message, not a panic.
macro_rules! out {
    ($($arg:tt)*) => { write!(std::io::stdout(), $($arg)*)? };
}
macro_rules! outln {
    ($($arg:tt)*) => { writeln!(std::io::stdout(), $($arg)*)? };
}

/// The control socket when `--control` is not given: `serve` creates it, `observe` and
/// `fault` talk to it. A second emulator needs a `--control` of its own.
const DEFAULT_CONTROL: &str = "/tmp/ism-emu.ctl";

/// Exit statuses (also in `--help`): a script tells a usage error from a failure, and a
/// stale verdict from both.
mod exit {
    /// The command failed (the emulator unreachable, a file unwritable, ...).
    pub const FAILURE: u8 = 1;
    /// A bad argument: also a fault spec naming a function or rule that does not exist
    /// (clap uses 2 for its own errors).
    pub const USAGE: u8 = 2;
    /// `observe summary --check`: the verdict is STALE.
    pub const STALE: u8 = 3;
    /// `observe summary --check`: the verdict is UNKNOWN (some reuse not checked).
    pub const UNKNOWN: u8 = 4;
}

const EXIT_STATUS_HELP: &str = "\
Exit status: 0 success; 1 failure; 2 usage error (bad arguments, a fault spec naming a
function or rule that does not exist); with `observe summary --check`, 3 for a STALE
verdict and 4 for an UNKNOWN one.";

#[derive(Parser)]
#[command(
    version,
    about = "Emulated IBM ISM (SMC-D) PCI functions for QEMU s390x guests, over vfio-user",
    after_help = EXIT_STATUS_HELP
)]
struct Cli {
    /// The control socket: `serve` creates it (one per emulator), `observe` and `fault`
    /// talk to it.
    #[arg(long, global = true, value_name = "PATH", default_value = DEFAULT_CONTROL)]
    control: PathBuf,
    /// Log level: off, error, warn, info, debug or trace. Replaces RUST_LOG's filter
    /// (default: RUST_LOG, or info).
    #[arg(long, global = true, value_name = "LEVEL", value_parser = parse_level)]
    log_level: Option<log::LevelFilter>,
    /// More log: -v is --log-level debug, -vv trace.
    #[arg(short, long, global = true, action = ArgAction::Count, conflicts_with = "log_level")]
    verbose: u8,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve ISM functions, one vfio-user socket each, all on one fabric.
    #[command(after_help = SERVE_HELP)]
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
    #[command(after_help = EXIT_STATUS_HELP)]
    Fault {
        #[command(subcommand)]
        what: FaultCmd,
    },
    /// Query a running emulator through its control socket.
    #[command(after_help = EXIT_STATUS_HELP)]
    Observe {
        #[command(subcommand)]
        what: Observe,
    },
    /// Print a shell completion script, e.g. `ism-emu completions bash >
    /// ~/.local/share/bash-completion/completions/ism-emu`.
    Completions {
        /// bash, elvish, fish, powershell or zsh.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) to stdout, or write one page per command into a
    /// directory (`ism-emu.1`, `ism-emu-serve.1`, ...).
    Man {
        /// Write the pages into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

const SERVE_HELP: &str = "\
Logging: RUST_LOG sets the filter as env_logger reads it (e.g. RUST_LOG=debug, or
RUST_LOG=info,ism_emu::observer=debug); -v/--log-level replace it. Lines go to stderr,
each with a UTC clock: [21:03:04.123Z INFO  ism_emu::server] ...

The control socket defaults to /tmp/ism-emu.ctl: give each emulator on a machine its
own --control PATH.";

#[derive(Subcommand, Clone)]
enum Observe {
    /// The functions: GIDs, attachment, traffic counters.
    Functions,
    /// Every DMB seen: owner, peer, state, connections, reuse and zeroing.
    Dmbs,
    /// The recent connections on every DMB: bytes, close, reuse verdict, zeroing delay.
    Conns,
    /// Functions, DMBs and a verdict on zeroing and reuse.
    Summary {
        /// Exit with 3 if the verdict is STALE, 4 if it is UNKNOWN (0 for CLEAN or no
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

#[derive(Subcommand, Clone)]
enum FaultCmd {
    /// Put a rule in force (or carry out an action such as gid-disabled); prints its id.
    Add {
        /// The fault, e.g. `cmd=reg_dmb@ism1,rc=0x6,next=1` (docs/faults.md).
        spec: String,
    },
    /// The rules in force, with how often each matched and fired.
    List {
        /// As JSON: the emulator's answer, `{"faults":[{"id":..,"spec":..,...}]}`.
        #[arg(long)]
        json: bool,
    },
    /// Remove one rule (an error if there is none with that id), or all.
    Clear { id: Option<u32> },
}

fn parse_fault(s: &str) -> Result<FaultSpec, String> {
    FaultSpec::parse(s).map_err(|e| e.to_string())
}

/// A CHID is `0x` hex. A bare number is refused: CHIDs are written in hex everywhere
/// (`lschp`, the docs), yet a bare `1234` reads as decimal to other tools (printf), and a
/// guest whose CHID differs from the emulator's by such a misreading silently gets no
/// SMC-Dv2.
fn parse_chid(s: &str) -> Result<u16, String> {
    use ism_emu::util::hex::{parse_u16, HexError};
    let v = parse_u16(s).map_err(|e| match e {
        HexError::NoPrefix(_) => {
            format!("write the CHID in hex with 0x (e.g. 0x{s}): a bare number is ambiguous")
        }
        HexError::Invalid { why, .. } => format!("not a CHID (0x and up to 4 hex digits): {why}"),
    })?;
    if v == 0 || v >= 0xff00 {
        return Err("the CHID must be nonzero and below 0xff00".into());
    }
    Ok(v)
}

fn parse_level(s: &str) -> Result<log::LevelFilter, String> {
    s.parse()
        .map_err(|_| format!("{s:?}: use off, error, warn, info, debug or trace"))
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
    #[error("the emulator refused: {message}")]
    Refused { message: String, usage: bool },
    #[error("--socket {} is given twice: each function needs a socket of its own", .0.display())]
    DuplicateSocket(PathBuf),
    #[error("--control {} is also a --socket: pick another path", .0.display())]
    ControlIsSocket(PathBuf),
    #[error("cannot write the manual pages to {}", path.display())]
    Man {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("fault {spec}")]
    FaultAtStart {
        spec: String,
        #[source]
        source: ism_emu::fault::FaultSpecError,
    },
}

impl CliError {
    /// The exit status for this error (see `exit`).
    fn exit_code(&self) -> u8 {
        match self {
            Self::FaultAtStart { .. } | Self::DuplicateSocket(_) | Self::ControlIsSocket(_) => {
                exit::USAGE
            }
            Self::Refused { usage: true, .. } => exit::USAGE,
            _ => exit::FAILURE,
        }
    }
}

/// The level the command line asks for, if it does.
fn cli_level(cli: &Cli) -> Option<log::LevelFilter> {
    match cli.verbose {
        0 => cli.log_level,
        1 => Some(log::LevelFilter::Debug),
        _ => Some(log::LevelFilter::Trace),
    }
}

fn install_logger(level: Option<log::LevelFilter>) {
    let env = match level {
        // The command line's level replaces RUST_LOG; RUST_LOG_STYLE still counts.
        Some(_) => env_logger::Env::new().write_style("RUST_LOG_STYLE"),
        None => env_logger::Env::default().default_filter_or("info"),
    };
    let mut logger = env_logger::Builder::from_env(env);
    if let Some(level) = level {
        logger.filter_level(level);
    }
    // The vfio_user crate logs every backend error at ERROR, without limit: a guest could
    // flood the log with rejected moves. The backend logs them itself, rate-limited.
    // RUST_LOG=vfio_user=... still turns it on.
    if !std::env::var("RUST_LOG").is_ok_and(|v| v.contains("vfio_user")) || level.is_some() {
        logger.filter_module("vfio_user", log::LevelFilter::Off);
    }
    ism_emu::logger::utc_clock_format(&mut logger);
    // Lines are written by a thread of their own: a stalled stderr must not stall guests.
    if let Err(e) = ism_emu::logger::install(logger) {
        eprintln!("ism-emu: no log: {}", chain(&e));
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    install_logger(cli_level(&cli));
    let control = cli.control;
    let result = match cli.command {
        Cmd::Serve(opts) => serve(opts, &control).map(|()| 0),
        Cmd::Replay {
            trace,
            events,
            snapshot,
        } => replay(&trace, events, snapshot).map(|()| 0),
        Cmd::Observe { what } => observe(&control, what),
        Cmd::Fault { what } => fault(&control, what).map(|()| 0),
        Cmd::Completions { shell } => completions(shell).map(|()| 0),
        Cmd::Man { dir } => man(dir).map(|()| 0),
    };
    // Every line logged so far, out before the exit (within the logger's patience).
    log::logger().flush();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("ism-emu: {}", chain(&e));
            ExitCode::from(e.exit_code())
        }
    }
}

/// `ism-emu completions SHELL`: the script on stdout.
fn completions(shell: clap_complete::Shell) -> Result<(), CliError> {
    // Into memory first: clap_complete panics when its writer fails (`| head`), a
    // Vec never does; stdout's error is then ours to report.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "ism-emu", &mut script);
    std::io::stdout().write_all(&script)?;
    Ok(())
}

/// `ism-emu man`: the top page on stdout, or every command's page into `dir` (created
/// if missing, as an install step wants).
fn man(dir: Option<PathBuf>) -> Result<(), CliError> {
    match dir {
        None => clap_mangen::Man::new(Cli::command())
            .render(&mut std::io::stdout())
            .map_err(CliError::Io),
        Some(path) => std::fs::create_dir_all(&path)
            .and_then(|()| clap_mangen::generate_to(Cli::command(), &path))
            .map_err(|source| CliError::Man { path, source }),
    }
}

/// What `serve` was asked for.
#[derive(Args)]
struct ServeOpts {
    /// Fabric (machine) CHID, in hex with 0x (a bare number is refused as ambiguous):
    /// nonzero and outside 0xff00-0xffff, as SMC-Dv2 requires.
    #[arg(long, default_value = "0x1234", value_parser = parse_chid)]
    chid: u16,
    /// A vfio-user socket to serve one function on (repeat for more functions).
    /// Functions are named ism0, ism1, ... in this order.
    #[arg(long = "socket", required = true)]
    sockets: Vec<PathBuf>,
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

fn serve(opts: ServeOpts, control: &Path) -> Result<(), CliError> {
    let ServeOpts {
        chid,
        sockets,
        events,
        faults,
        trace,
        trace_payload,
    } = opts;
    check_distinct(&sockets, control)?;
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
        Some(control),
    );
    // The writers flush when idle; at exit every line so far must be in the files.
    observer.sync();
    if let Some(tracer) = fabric.tracer() {
        tracer.sync();
    }
    served?;
    Ok(())
}

/// Refuses a path given twice (as two `--socket`s, or as a `--socket` and the
/// `--control`), before anything is bound: the second bind would fail and blame another
/// emulator.
fn check_distinct(sockets: &[PathBuf], control: &Path) -> Result<(), CliError> {
    // `absolute` makes `a.sock`, `./a.sock` and `$PWD/a.sock` one path, without touching
    // the file system (the paths do not exist yet).
    let key = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut seen = std::collections::HashSet::new();
    for path in sockets {
        if !seen.insert(key(path)) {
            return Err(CliError::DuplicateSocket(path.clone()));
        }
    }
    if seen.contains(&key(control)) {
        return Err(CliError::ControlIsSocket(control.to_path_buf()));
    }
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
    outln!(
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
        outln!("  {m}");
    }
    out!("{}\n{}", DmbsTable(&snap), Verdict(&snap));
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

/// The exit status: 0, or a verdict's with `summary --check`.
fn observe(control: &Path, what: Observe) -> Result<u8, CliError> {
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
        return write_timeline(&doc, &out).map(|()| 0);
    }
    if let Observe::Follow = what {
        let stream = request(control, "follow")?;
        for line in BufReader::new(stream).lines() {
            outln!("{}", line?);
        }
        return Ok(0);
    }
    let mut line = String::new();
    BufReader::new(request(control, "snapshot")?).read_line(&mut line)?;
    let snap: Snapshot = serde_json::from_str(&line).map_err(CliError::BadSnapshot)?;
    match what {
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
                    VerdictKind::Stale => exit::STALE,
                    VerdictKind::Unknown => exit::UNKNOWN,
                    VerdictKind::Clean | VerdictKind::NoReuse => 0,
                });
            }
        }
        Observe::Follow | Observe::Timeline { .. } => {}
    }
    Ok(0)
}

fn fault(control: &Path, what: FaultCmd) -> Result<(), CliError> {
    let request_line = match &what {
        FaultCmd::Add { spec } => format!("fault add {spec}"),
        FaultCmd::List { .. } => "fault list".to_string(),
        FaultCmd::Clear { id: Some(id) } => format!("fault clear {id}"),
        FaultCmd::Clear { id: None } => "fault clear".to_string(),
    };
    let mut line = String::new();
    BufReader::new(request(control, &request_line)?).read_line(&mut line)?;
    let answer: serde_json::Value =
        serde_json::from_str(&line).map_err(|_| CliError::BadAnswer(line.clone()))?;
    if let Some(error) = answer.get("error").and_then(|e| e.as_str()) {
        return Err(CliError::Refused {
            message: error.to_string(),
            usage: answer.get("usage").and_then(|u| u.as_bool()) == Some(true),
        });
    }
    match what {
        FaultCmd::Add { .. } => match answer.get("id") {
            Some(id) => outln!("rule {id}"),
            None => outln!("done"),
        },
        FaultCmd::List { json: true } => {
            let rules = answer
                .get("faults")
                .ok_or_else(|| CliError::BadAnswer(line.clone()))?;
            outln!("{}", serde_json::json!({ "faults": rules }));
        }
        FaultCmd::List { json: false } => {
            let rules = answer.get("faults").and_then(|f| f.as_array());
            let rules = rules.ok_or_else(|| CliError::BadAnswer(line.clone()))?;
            outln!(
                "{:>4} {:>8} {:>8} {:>5}  spec",
                "rule",
                "seen",
                "fired",
                "spent"
            );
            // Numbers as u64: a JSON value's Display ignores the widths.
            let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
            for r in rules {
                outln!(
                    "{:>4} {:>8} {:>8} {:>5}  {}",
                    n(&r["id"]),
                    n(&r["seen"]),
                    n(&r["fired"]),
                    if r["spent"].as_bool() == Some(true) {
                        "yes"
                    } else {
                        "no"
                    },
                    r["spec"].as_str().unwrap_or("?")
                );
            }
        }
        FaultCmd::Clear { .. } => outln!("removed {}", answer["removed"]),
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
    let (events, file) = private_temp_file("ism-emu-timeline", "jsonl")?;
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
fn write_timeline(doc: &TraceDocument, out: &Path) -> Result<(), CliError> {
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
