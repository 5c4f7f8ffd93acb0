//! What the fabric shows of each function outside its lock: its counters and a view of its
//! state, as the snapshot (`observer::report`) and `ism-emu observe` print them.

use serde::{Deserialize, Serialize};

use crate::util::histogram::ServiceTimes;
use crate::util::json::{gid, hex_opt};

/// Per-function counters, kept by the fabric.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Clients (QEMUs) that attached over the run: `attached` is only the state now.
    #[serde(default)]
    pub attaches: u64,
    pub commands: u64,
    pub command_errors: u64,
    pub moves_out: u64,
    pub bytes_out: u64,
    pub moves_rejected: u64,
    /// Rejected moves without the signal flag: answered as done (QEMU may have posted
    /// them), the failure held against the sender's signalling moves into the same DMB.
    #[serde(default)]
    pub moves_held: u64,
    pub moves_in: u64,
    pub bytes_in: u64,
    pub signals_in: u64,
    pub events_in: u64,
    pub interrupts: u64,
    /// How long the device took to serve each of this function's moves (out).
    #[serde(default)]
    pub move_service: ServiceTimes,
}

/// One function in the snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionView {
    pub name: String,
    #[serde(with = "gid")]
    pub gid: u64,
    pub attached: bool,
    #[serde(with = "hex_opt")]
    pub sba: Option<u64>,
    #[serde(with = "hex_opt")]
    pub ieq: Option<u64>,
    pub interrupt_enabled: bool,
    pub mapped_bytes: u64,
    pub dmbs_owned: usize,
    pub counters: Counters,
}
