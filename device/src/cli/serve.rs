//! `ism-emu serve`: the emulator itself. Checks the command line, opens the event file
//! and the trace, puts the start-up faults in force and runs the server until SIGTERM.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;

use ism_emu::default_gid;
use ism_emu::fabric::Fabric;
use ism_emu::fault::FaultSpec;
use ism_emu::observer::Observer;
use ism_emu::{record, server};

use super::CliError;

pub const SERVE_HELP: &str = "\
Logging: RUST_LOG sets the filter as env_logger reads it (e.g. RUST_LOG=debug, or
RUST_LOG=info,ism_emu::observer=debug); -v/--log-level replace it. Lines go to stderr,
each with a UTC clock: [21:03:04.123Z INFO  ism_emu::server] ...

The control socket defaults to /tmp/ism-emu.ctl: give each emulator on a machine its
own --control PATH.";

/// What `serve` was asked for.
#[derive(Args)]
pub struct ServeOpts {
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

pub fn run(opts: ServeOpts, control: &Path) -> Result<(), CliError> {
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
    let header = record::Header {
        trace: "ism-emu".into(),
        version: record::VERSION,
        chid,
        functions: functions
            .iter()
            .map(|(name, gid)| record::FunctionHeader {
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
        fabric.set_tracer(record::Tracer::create(path, &header)?);
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
