//! What the observer tells of a DMB: its [`DmbSummary`] (the snapshot's `dmbs`) and the
//! [`ConnRecord`]s of its recent connections.

use serde::{Deserialize, Serialize};

use super::{ObservedEvent, What};
use crate::util::histogram::DelayHistogram;
use crate::util::json::{gid, hex};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnState {
    /// Registered, no connection has written yet.
    Fresh,
    Open,
    Closed,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DmbSummary {
    pub function: String,
    #[serde(with = "gid")]
    pub gid: u64,
    #[serde(with = "hex")]
    pub token: u64,
    #[serde(with = "gid")]
    pub rgid: u64,
    pub len: u32,
    pub sba_idx: u32,
    pub registered: bool,
    pub state: ConnState,
    pub connections: u64,
    pub reuses: u64,
    pub clean_reuses: u64,
    pub stale_reuses: u64,
    /// Reuses whose DMB could not be read before the first move (unreadable, or over
    /// the read budget): neither clean nor stale.
    #[serde(default)]
    pub unchecked_reuses: u64,
    pub closes: u64,
    pub zeroed_after_close: u64,
    /// Closes after which the DMB was still not zero when the watch gave up.
    pub not_zeroed: u64,
    /// Delays between a close and the zeroing seen after it: a fixed histogram, so
    /// that a guest closing connections for ever cannot grow it.
    pub zero_delays_ms: DelayHistogram,
    pub bytes: u64,
    pub signals: u64,
    /// Writes of a closed connection's peer after the close (a CDC repeating the close
    /// flags, with any data moves before it): the `late_write` events.
    #[serde(default)]
    pub late_writes: u64,
    /// Those of them that came after the owner had zeroed the DMB, that is, into a
    /// buffer its kernel had released to its pool.
    #[serde(default)]
    pub late_writes_after_zeroed: u64,
    /// CDC messages into an open connection's DMB whose producer cursor is not that
    /// connection's: another connection's sender wrote them (`foreign_cdc` events).
    #[serde(default)]
    pub foreign_cdcs: u64,
    /// The most recent connections, oldest first (at most `RECENT_CONNS`).
    pub recent: Vec<ConnRecord>,
}

/// How many connections per DMB the observer remembers in detail.
pub const RECENT_CONNS: usize = 32;

/// One connection's use of a DMB.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConnRecord {
    pub conn: u64,
    pub opened_us: u64,
    pub closed_us: Option<u64>,
    /// "close" or "abort".
    pub how: Option<String>,
    /// Data bytes moved into the DMB (CDC messages not counted).
    pub bytes: u64,
    /// For a reuse: whether the DMB was all zero before this connection's first write.
    pub reuse_clean: Option<bool>,
    /// For a reuse that was not checked: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse_unknown: Option<String>,
    pub stale_bytes: u64,
    /// Milliseconds from this connection's close to the DMB reading all zero.
    pub zeroed_after_ms: Option<f64>,
    /// The watch gave up: not zero within the watch limit after the close.
    pub not_zeroed: bool,
}

impl DmbSummary {
    pub(super) fn event(&self, what: What) -> ObservedEvent {
        ObservedEvent::dmb(&self.function, self.gid, self.token, what)
    }
}
