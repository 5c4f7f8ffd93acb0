//! A registered DMB, the index of a function and the clock: what the fabric keeps and the
//! observer follows. A leaf: it uses nothing else of the crate, so both can.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// The latest operation time handed out, for [`OpTime::begin`].
static LAST_OP_US: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The time of the operation this thread is carrying out, if it set one.
    static OP_TIME_US: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Microseconds since the Unix epoch: event and registration timestamps, and the
/// observer's delays. Within an operation (see [`OpTime`]) every call gives the
/// operation's time, so that a trace replayed with the same times gives the same events.
pub fn now_us() -> u64 {
    OP_TIME_US.with(Cell::get).unwrap_or_else(wall_us)
}

fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One operation of the device (a command, a move, a detach, a zeroing tick) seen as
/// happening at one instant: while the guard lives, [`now_us`] on this thread answers
/// its time. A nested operation keeps the outer one's time.
pub struct OpTime {
    outer: Option<u64>,
}

impl OpTime {
    /// Now (or the enclosing operation's time). Never earlier than an operation begun
    /// before on any thread: operations begun under the fabric's lock get times in the
    /// order they took effect, and a trace's times never go back.
    pub fn begin() -> Self {
        let wall = wall_us();
        let last = LAST_OP_US.fetch_max(wall, Ordering::Relaxed);
        Self::at(wall.max(last))
    }

    /// At `time_us` (a replayed operation's recorded time).
    pub fn at(time_us: u64) -> Self {
        let outer = OP_TIME_US.with(|t| t.replace(Some(t.get().unwrap_or(time_us))));
        Self { outer }
    }

    /// The operation's time.
    pub fn time_us(&self) -> u64 {
        now_us()
    }
}

impl Drop for OpTime {
    fn drop(&mut self) {
        OP_TIME_US.with(|t| t.set(self.outer));
    }
}
