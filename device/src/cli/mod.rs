//! The subcommands of `ism-emu`, one file each: `serve`, `observe` (with its `timeline`
//! in `timeline.rs`), `fault` and `replay`. What they share is here: the error type and
//! exit statuses, the log's set-up, the control socket's client side (over
//! `ism_emu::control::api`), and the completion and manual pages.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use ism_emu::control::api::{Answer, Envelope, Refusal, Request};
use ism_emu::export::timeline::TimelineError;
use ism_emu::server::ServeError;

/// `print!`/`println!` that return stdout's error (`?`, as `CliError::Io`) instead of
/// panicking: `ism-emu observe follow | head -1` must end with a message, not a panic.
macro_rules! out {
    ($($arg:tt)*) => { write!(std::io::stdout(), $($arg)*)? };
}
macro_rules! outln {
    ($($arg:tt)*) => { writeln!(std::io::stdout(), $($arg)*)? };
}

pub mod fault;
pub mod observe;
pub mod replay;
pub mod serve;
pub mod timeline;

/// The control socket when `--control` is not given: `serve` creates it, `observe` and
/// `fault` talk to it. A second emulator needs a `--control` of its own.
pub const DEFAULT_CONTROL: &str = "/tmp/ism-emu.ctl";

/// Exit statuses (also in `--help`): a script tells a usage error from a failure, and a
/// stale verdict from both.
pub mod exit {
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

pub const EXIT_STATUS_HELP: &str = "\
Exit status: 0 success; 1 failure; 2 usage error (bad arguments, a fault spec naming a
function or rule that does not exist); with `observe summary --check`, 3 for a STALE
verdict and 4 for an UNKNOWN one.";

/// Why a command of the CLI failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
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
    Trace(#[from] ism_emu::record::TraceError),
    #[error(transparent)]
    Replay(#[from] ism_emu::record::replay::ReplayError),
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
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::FaultAtStart { .. } | Self::DuplicateSocket(_) | Self::ControlIsSocket(_) => {
                exit::USAGE
            }
            Self::Refused { usage: true, .. } => exit::USAGE,
            _ => exit::FAILURE,
        }
    }
}

impl From<Refusal> for CliError {
    fn from(refusal: Refusal) -> Self {
        Self::Refused {
            message: refusal.error,
            usage: refusal.usage,
        }
    }
}

pub fn parse_level(s: &str) -> Result<log::LevelFilter, String> {
    s.parse()
        .map_err(|_| format!("{s:?}: use off, error, warn, info, debug or trace"))
}

/// Sets up the process's log: `level` (from the command line) replaces RUST_LOG's filter.
pub fn install_logger(level: Option<log::LevelFilter>) {
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

/// Connects to the emulator at `control` and sends `request`; the answer is to be read
/// from the stream.
pub fn send(control: &Path, request: Request) -> Result<UnixStream, CliError> {
    let mut stream = UnixStream::connect(control).map_err(|cause| CliError::Unreachable {
        path: control.to_path_buf(),
        cause,
    })?;
    writeln!(stream, "{}", Envelope::new(request).to_line())?;
    Ok(stream)
}

/// Sends `request` and reads its one answer line: the `T` it answers with (and the line
/// as it came), or the emulator's refusal as an error. `bad` names a line that is
/// neither.
pub fn ask<T: DeserializeOwned>(
    control: &Path,
    request: Request,
    bad: impl FnOnce(&str, serde_json::Error) -> CliError,
) -> Result<(T, String), CliError> {
    let mut line = String::new();
    BufReader::new(send(control, request)?).read_line(&mut line)?;
    match Answer::parse_as::<T>(&line) {
        Ok(Ok(answer)) => Ok((answer, line)),
        Ok(Err(refusal)) => Err(refusal.into()),
        Err(e) => Err(bad(&line, e)),
    }
}

/// The first line of a `follow` answer: an error if it is the emulator's refusal (the
/// stream's lines are events otherwise).
pub fn refused_follow(first: &str) -> Result<(), CliError> {
    match serde_json::from_str::<Refusal>(first) {
        Ok(refusal) => Err(refusal.into()),
        Err(_) => Ok(()),
    }
}

/// `ism-emu completions SHELL`: the script on stdout.
pub fn completions(
    mut command: clap::Command,
    shell: clap_complete::Shell,
) -> Result<(), CliError> {
    // Into memory first: clap_complete panics when its writer fails (`| head`), a
    // Vec never does; stdout's error is then ours to report.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "ism-emu", &mut script);
    std::io::stdout().write_all(&script)?;
    Ok(())
}

/// `ism-emu man`: the top page on stdout, or every command's page into `dir` (created
/// if missing, as an install step wants).
pub fn man(command: clap::Command, dir: Option<PathBuf>) -> Result<(), CliError> {
    match dir {
        None => clap_mangen::Man::new(command)
            .render(&mut std::io::stdout())
            .map_err(CliError::Io),
        Some(path) => std::fs::create_dir_all(&path)
            .and_then(|()| clap_mangen::generate_to(command, &path))
            .map_err(|source| CliError::Man { path, source }),
    }
}

/// An error and its causes on one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}
