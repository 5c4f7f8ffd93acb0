//! The event stream's schema (docs/observer.md): one line per [`ObservedEvent`], its kind
//! and fields a [`What`].

use serde::{Deserialize, Serialize};

use crate::util::json::{gid, hex, hex_opt};

/// `foreign_cdc`'s `found` when a close turned out to be another connection's CDC message
/// (the closed connection wrote on).
pub const FOUND_CONTINUATION: &str = "continuation";

/// One line of the event stream: which function (and DMB) it is about, and what happened.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ObservedEvent {
    pub function: String,
    #[serde(with = "gid")]
    pub gid: u64,
    /// The DMB's token, for DMB and connection events.
    #[serde(default, with = "hex_opt", skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    #[serde(flatten)]
    pub what: What,
}

/// What happened, as the event's `kind` and its own fields (docs/observer.md).
///
/// The one definition of the stream's kinds: the observer writes them and the timeline
/// (export/timeline) reads them back.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum What {
    FunctionAttached,
    FunctionDetached {
        reason: String,
    },
    DmbRegistered {
        #[serde(with = "gid")]
        rgid: u64,
        #[serde(with = "hex")]
        iova: u64,
        len: u32,
        sba_idx: u32,
    },
    DmbUnregistered {
        reason: String,
        connections: u64,
    },
    ConnOpened {
        #[serde(with = "gid")]
        rgid: u64,
        conn: u64,
    },
    ConnClosed {
        conn: u64,
        how: String,
        bytes: u64,
    },
    DmbZeroed {
        conn: u64,
        delay_ms: f64,
        /// Zero but for the closed connection's late CDC message, which landed behind
        /// the zeroing (a late write after it); absent when false.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        late_cdc_kept: bool,
        /// Zero but for this many nonzero bytes of the closed connection's late data,
        /// each where a late write put it, which landed behind the zeroing; absent
        /// when 0.
        #[serde(default, skip_serializing_if = "is_zero")]
        late_bytes_kept: u64,
    },
    DmbReused {
        conn: u64,
        /// None: the DMB could not be read before the move (see `unknown`).
        clean: Option<bool>,
        stale_bytes: u64,
        first_stale_offset: Option<u64>,
        /// Why the reuse was not checked; absent when it was.
        #[serde(skip_serializing_if = "Option::is_none")]
        unknown: Option<String>,
    },
    DmbNotZeroed {
        conn: u64,
        watched_ms: f64,
    },
    /// The peer of closed connection `conn` wrote into the DMB again: `moves` moves with
    /// `bytes` data bytes, the last a CDC that repeats the close flags. `after_zeroed`:
    /// the owner had zeroed the DMB since the close, so its kernel had released it.
    LateWrite {
        conn: u64,
        moves: u64,
        bytes: u64,
        after_zeroed: bool,
    },
    /// A CDC message landed in the DMB while connection `conn` was using it, but its
    /// producer cursor (`seen`, bytes) is not where that connection's data ends
    /// (`expected`): another connection's sender wrote it, and the owner's kernel reads
    /// it as `conn`'s. `conn_state` is its connection-state byte (0x20: abort).
    ///
    /// `found` is absent when the cursor test found it as it landed. `"continuation"`:
    /// it had passed that test and closed `conn` in the host's view, and `conn`'s sender
    /// wrote on past one pass of the data ring, so that close was this message; then
    /// `late_moves` and `late_bytes` are the data moves that came before it since
    /// `conn`'s last CDC message, and `expected` is where that message put the cursor.
    ForeignCdc {
        conn: u64,
        expected: u64,
        seen: u64,
        conn_state: u8,
        /// A string, not an enum: a reader of another version's stream keeps the line.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        found: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        late_moves: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        late_bytes: Option<u64>,
    },
    /// Lines of this function the stream dropped (over its rate; `function` is `-` for
    /// lines lost while the writer was behind).
    EventsDropped {
        count: u64,
    },
    /// The `--events` file reached its size limit: nothing more is written to it.
    EventFileFull {
        limit_bytes: u64,
    },
    /// A fault the host asked for (`ism-emu fault`) fired: `rule` 0 for an action.
    FaultInjected {
        /// Read leniently (a reader shows whatever a fault line carries).
        #[serde(default)]
        rule: u32,
        fault: String,
        #[serde(default)]
        detail: String,
    },
    /// ADD_VLAN_ID put `vlan_id` into the function's VLAN table (0x1fff: the driver
    /// asking whether the device is SMC-Dv2 capable).
    VlanAdded {
        vlan_id: u64,
    },
    /// DEL_VLAN_ID took `vlan_id` out of the function's VLAN table.
    VlanDeleted {
        vlan_id: u64,
    },
    /// SET_VLAN (`required` true) or RESET_VLAN changed the function's VLAN-required flag.
    VlanRequired {
        required: bool,
    },
    /// Read only: a line of a kind this version does not know (the timeline skips it).
    /// The observer never writes it.
    #[serde(other)]
    Unrecognised,
}

impl ObservedEvent {
    /// An event about function `function` as a whole.
    pub fn function(function: &str, gid: u64, what: What) -> Self {
        Self {
            function: function.to_string(),
            gid,
            token: None,
            what,
        }
    }

    /// An event about DMB `token` of function `function`.
    pub fn dmb(function: &str, gid: u64, token: u64, what: What) -> Self {
        Self {
            token: Some(token),
            ..Self::function(function, gid, what)
        }
    }
}

/// A line of the stream: the event and its time. `E` is `&ObservedEvent` when writing,
/// `ObservedEvent` when reading one back.
#[derive(Serialize, Deserialize)]
pub struct Line<E> {
    pub time_us: u64,
    #[serde(flatten)]
    pub event: E,
}

/// Serialises an event with its time (GIDs, tokens and IOVAs in hex).
pub fn to_json_line(time_us: u64, event: &ObservedEvent) -> String {
    serde_json::to_string(&Line { time_us, event }).unwrap_or_default()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
