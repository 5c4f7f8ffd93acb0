//! A registered DMB, the index of a function and the clock: what the fabric keeps and the
//! observer follows. A leaf: it uses nothing else of the crate, so both can.

use std::time::{SystemTime, UNIX_EPOCH};

/// Index of a function on the fabric (its position on the command line).
pub type FunctionId = usize;

/// A registered DMB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dmb {
    pub token: u64,
    pub owner: FunctionId,
    pub owner_gid: u64,
    pub rgid: u64,
    /// The generation of the function with GID `rgid` when the DMB was registered (None:
    /// no such function on this fabric). Only that generation may write.
    pub rgid_generation: Option<u64>,
    pub iova: u64,
    pub len: u32,
    pub sba_idx: u32,
    pub vlan_valid: bool,
    pub vlan_id: u32,
    pub registered_at_us: u64,
}

/// Microseconds since the Unix epoch: event and registration timestamps.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
