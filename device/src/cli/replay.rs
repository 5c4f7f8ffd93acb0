//! `ism-emu replay TRACE`: a recorded trace run again through the device model and the
//! observer, without QEMU; the DMBs and the verdict printed, differences reported.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use ism_emu::control::Control;
use ism_emu::observer::report::{DmbsTable, Verdict};
use ism_emu::observer::Observer;

use super::CliError;

/// What `replay` was asked for.
#[derive(Args)]
pub struct ReplayOpts {
    /// A file written by `serve --trace`.
    trace: PathBuf,
    /// Write the replayed event stream (JSON lines) to this file.
    #[arg(long)]
    events: Option<PathBuf>,
    /// Write the replayed snapshot (as `observe json` gives it) to this file.
    #[arg(long)]
    snapshot: Option<PathBuf>,
}

pub fn run(opts: ReplayOpts) -> Result<(), CliError> {
    let ReplayOpts {
        trace,
        events,
        snapshot,
    } = opts;
    let file = match events {
        Some(path) => Some(
            std::fs::File::create(&path).map_err(|source| CliError::EventFile { path, source })?,
        ),
        None => None,
    };
    let observer = Arc::new(Observer::new(file));
    let (fabric, report) = ism_emu::record::replay::replay(&trace, Arc::clone(&observer))?;
    // What the control socket would answer at the end of the live run.
    let snap = Control::new(fabric, observer).snapshot();
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
