//! `ism-emu serve`: run the emulated ISM functions of one machine.
//! `ism-emu observe`: look at a running emulator from the host.
//! `ism-emu fault`: make a running emulator fail on purpose.
//! `ism-emu replay`: run a recorded trace again, without QEMU.
//! `ism-emu completions` / `ism-emu man`: shell completion and manual pages, from the
//! argument definitions (here and in `cli/`, one file per subcommand).
#![forbid(unsafe_code)]

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgAction, CommandFactory, Parser, Subcommand};

use cli::{CliError, DEFAULT_CONTROL, EXIT_STATUS_HELP};

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
    #[arg(long, global = true, value_name = "LEVEL", value_parser = cli::parse_level)]
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
    #[command(after_help = cli::serve::SERVE_HELP)]
    Serve(cli::serve::ServeOpts),
    /// Run a recorded trace through the device model and the observer, without QEMU:
    /// prints the DMBs and the verdict the live run's observer gave.
    Replay(cli::replay::ReplayOpts),
    /// Inject faults into a running emulator through its control socket.
    #[command(after_help = EXIT_STATUS_HELP)]
    Fault {
        #[command(subcommand)]
        what: cli::fault::FaultCmd,
    },
    /// Query a running emulator through its control socket.
    #[command(after_help = EXIT_STATUS_HELP)]
    Observe {
        #[command(subcommand)]
        what: cli::observe::Observe,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => cli.log_level,
        1 => Some(log::LevelFilter::Debug),
        _ => Some(log::LevelFilter::Trace),
    };
    cli::install_logger(level);
    let control = cli.control;
    let result: Result<u8, CliError> = match cli.command {
        Cmd::Serve(opts) => cli::serve::run(opts, &control).map(|()| 0),
        Cmd::Replay(opts) => cli::replay::run(opts).map(|()| 0),
        Cmd::Observe { what } => cli::observe::run(&control, what),
        Cmd::Fault { what } => cli::fault::run(&control, what).map(|()| 0),
        Cmd::Completions { shell } => cli::completions(Cli::command(), shell).map(|()| 0),
        Cmd::Man { dir } => cli::man(Cli::command(), dir).map(|()| 0),
    };
    // Every line logged so far, out before the exit (within the logger's patience).
    log::logger().flush();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("ism-emu: {}", cli::chain(&e));
            ExitCode::from(e.exit_code())
        }
    }
}
