//! `ism-emu fault`: add, list and clear the fault rules of a running emulator over its
//! control socket.

use std::io::Write;
use std::path::Path;

use clap::Subcommand;

use ism_emu::control::api::{Done, FaultList, Request};

use super::{ask, CliError};

#[derive(Subcommand, Clone)]
pub enum FaultCmd {
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

pub fn run(control: &Path, what: FaultCmd) -> Result<(), CliError> {
    let request = match &what {
        FaultCmd::Add { spec } => Request::FaultAdd { spec: spec.clone() },
        FaultCmd::List { .. } => Request::FaultList,
        FaultCmd::Clear { id } => Request::FaultClear { id: *id },
    };
    let (done, line) = ask::<Done>(control, request, |line, _| {
        CliError::BadAnswer(line.to_string())
    })?;
    match (what, done) {
        (FaultCmd::Add { .. }, Done::Rule { id }) => outln!("rule {id}"),
        (FaultCmd::Add { .. }, Done::Done) => outln!("done"),
        (FaultCmd::List { json: true }, Done::List { faults }) => {
            let list = serde_json::to_string(&FaultList { faults })
                .map_err(|_| CliError::BadAnswer(line))?;
            outln!("{list}");
        }
        (FaultCmd::List { json: false }, Done::List { faults }) => {
            outln!(
                "{:>4} {:>8} {:>8} {:>5}  spec",
                "rule",
                "seen",
                "fired",
                "spent"
            );
            for r in faults {
                let spent = if r.spent { "yes" } else { "no" };
                outln!(
                    "{:>4} {:>8} {:>8} {:>5}  {}",
                    r.id,
                    r.seen,
                    r.fired,
                    spent,
                    r.spec
                );
            }
        }
        (FaultCmd::Clear { .. }, Done::Cleared { removed }) => outln!("removed {removed}"),
        // An answer to another request than this one.
        _ => return Err(CliError::BadAnswer(line)),
    }
    Ok(())
}
