//! What the fabric tells a recorder: every operation, under its lock, in the order it
//! took effect. The records are the trace's lines (docs/trace.md); `record/`
//! writes and reads them. They are defined here, below the recording, so that the fabric
//! reports through its own trait ([`Recorder`]) as it reports to the observer through
//! `EventSink`, and the recording and the replay (both above the fabric) stay one
//! module without an import circle.

use serde::{Deserialize, Serialize};

use crate::dmb::FunctionId;
use crate::ism::command::Command;
use crate::util::json::hex;

use super::events::{ReuseCheck, ZeroScan};

/// Takes the fabric's records (`serve --trace`: `record::Tracer`). Called
/// under the fabric's lock: it must not block.
pub trait Recorder: Send + Sync {
    /// Whether moves' bytes are recorded in full (else only those in the CDC area).
    fn payload(&self) -> bool;
    /// One operation, at the current operation's time ([`crate::dmb::now_us`]).
    fn record(&self, record: Record);
    /// Waits until every record so far is stored.
    fn sync(&self);
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MoveVia {
    /// `Fabric::store_move` of a waited store: the backend's path (a failure is answered).
    Store,
    /// `Fabric::store_move` of a store the client posted (a failure is held).
    Posted,
}

/// What became of a recorded move.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MoveResult {
    Landed,
    Held,
    Rejected,
}

/// One operation. `f` is the function's index (its position in the header).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Record {
    Attach {
        f: FunctionId,
    },
    Detach {
        f: FunctionId,
        reason: String,
        still_attached: bool,
    },
    DmaMap {
        f: FunctionId,
        #[serde(with = "hex")]
        iova: u64,
        #[serde(with = "hex")]
        size: u64,
        writable: bool,
    },
    DmaUnmap {
        f: FunctionId,
        #[serde(with = "hex")]
        iova: u64,
        #[serde(with = "hex")]
        size: u64,
    },
    DmaUnmapAll {
        f: FunctionId,
    },
    /// A command and the `ret` it was answered with (0: success).
    Cmd {
        f: FunctionId,
        cmd: Command,
        ret: u16,
    },
    /// A command that did not decode (it never reached the fabric's state).
    Undecodable {
        f: FunctionId,
    },
    /// A data move: the store's offset in the move window, its length, its bytes (hex;
    /// all of them with `--trace-payload`, else only those in the CDC area), and its
    /// outcome.
    Move {
        f: FunctionId,
        via: MoveVia,
        #[serde(with = "hex")]
        window: u64,
        len: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        result: MoveResult,
    },
    /// The reuse check's read for the move that follows (by the same function).
    Reuse {
        f: FunctionId,
        check: ReuseCheck,
    },
    /// The failure `f` held for DMB `token` is lifted before its next move: the owner
    /// reset the DMB's CDC slot (fabric/held.rs, `HeldFailures`).
    HeldLifted {
        f: FunctionId,
        #[serde(with = "hex")]
        token: u64,
    },
    /// One tick of the zeroing watch: what each look found, by token.
    ZeroTick {
        results: Vec<(u64, ZeroScan)>,
    },
    /// The interrupt of a signalling move into a DMB of `f`.
    Irq {
        f: FunctionId,
        #[serde(with = "hex")]
        token: u64,
        how: String,
    },
    FaultAdd {
        spec: String,
    },
    FaultClear {
        id: Option<u32>,
    },
    /// Records the writer could not keep up with: the trace is incomplete here.
    Lost {
        count: u64,
    },
}
