//! The life of every DMB as seen from the device: registration, the connections that use
//! it, their close, the owner zeroing it, and reuse by the next connection.
//!
//! A DMB receives the CDC messages of one direction of one connection at a time: the peer
//! writes its 32-byte CDC at offset 0 with the signal flag after each send. The state of a
//! DMB therefore follows the peer's CDCs:
//!
//! ```text
//!   registered --first move--> open --CDC with closed/abort flag--> closed
//!       closed --owner's memory all zero--> closed (zeroed at release, delay recorded)
//!       closed --first move of a new connection--> open (a reuse: clean or stale?)
//! ```
//!
//! "A new connection" is any move into a closed DMB except a CDC that still carries the
//! close flags (the closing side may repeat them). The reuse check reads the whole DMB
//! *before* that first move is applied; the fabric does the reading, outside its lock and
//! within a byte budget, and hands the result in ([`ReuseCheck`]). A read that did not
//! happen is an *unknown* reuse, never a clean one.
//!
//! The zeroing watch resumes where it stopped: bytes up to `scan_from` were seen zero, and
//! a byte seen nonzero is looked at first next time (one page, not the whole DMB, while a
//! guest keeps it dirty).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::json::{gid, hex};
use super::{ObservedEvent, What, ZERO_WATCH_LIMIT};
use crate::dmb::{now_us, Dmb};
use crate::ism::MoveAddress;
use crate::util::ratelimit::guest_log;

/// CDC message layout (net/smc/smc_cdc.h, struct smcd_cdc_msg).
pub mod cdc {
    pub const LEN: usize = 32;
    pub const TYPE: u8 = 0xfe;
    pub const CONN_STATE: usize = 23;
    pub const PEER_DONE_WRITING: u8 = 0x80;
    pub const PEER_CONN_CLOSED: u8 = 0x40;
    pub const PEER_CONN_ABORT: u8 = 0x20;
}

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
    /// The most recent connections, oldest first (at most `RECENT_CONNS`).
    pub recent: Vec<ConnRecord>,
}

/// Upper bounds (inclusive) of the zeroing-delay histogram's buckets, in ms. 750 ms is
/// the release window `scripts/check_e2e.py` checks.
pub const DELAY_BOUNDS_MS: [f64; 14] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 750.0, 1000.0, 2000.0, 5000.0, 10000.0,
];

/// Delays in fixed buckets: `counts[i]` delays were at most `le_ms[i]` and above
/// `le_ms[i - 1]`; `over` were above the last bound.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DelayHistogram {
    pub le_ms: Vec<f64>,
    pub counts: Vec<u64>,
    pub over: u64,
    pub count: u64,
    pub max_ms: Option<f64>,
}

impl Default for DelayHistogram {
    fn default() -> Self {
        Self {
            le_ms: DELAY_BOUNDS_MS.to_vec(),
            counts: vec![0; DELAY_BOUNDS_MS.len()],
            over: 0,
            count: 0,
            max_ms: None,
        }
    }
}

impl DelayHistogram {
    pub fn record(&mut self, ms: f64) {
        match self.le_ms.iter().position(|&le| ms <= le) {
            Some(i) => self.counts[i] += 1,
            None => self.over += 1,
        }
        self.count += 1;
        self.max_ms = Some(self.max_ms.map_or(ms, |max| max.max(ms)));
    }

    /// How many delays were at most `ms` (exact when `ms` is a bucket bound).
    pub fn at_most(&self, ms: f64) -> u64 {
        self.le_ms
            .iter()
            .zip(&self.counts)
            .filter(|(&le, _)| le <= ms)
            .map(|(_, &n)| n)
            .sum()
    }

    /// The bound of the bucket holding the median, or None with no delays (or the
    /// median above every bound).
    pub fn median_at_most(&self) -> Option<f64> {
        let half = self.count.div_ceil(2).max(1);
        let mut seen = 0;
        for (&le, &n) in self.le_ms.iter().zip(&self.counts) {
            seen += n;
            if seen >= half && self.count > 0 {
                return Some(le);
            }
        }
        None
    }
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
    fn event(&self, what: What) -> ObservedEvent {
        ObservedEvent::dmb(&self.function, self.gid, self.token, what)
    }
}

/// The DMB's content before the first move of a reused connection. Also the trace's
/// record of it (`{"read":{"stale":N,"first":OFF}}`, `{"unknown":"why"}`): one type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReuseCheck {
    /// Read: `stale` nonzero bytes, the first at `first`.
    Read { stale: u64, first: Option<u64> },
    /// Not read, and why. A recorded reason is read back as the fabric's own text, or
    /// "unknown" (a trace may come from anyone).
    Unknown(#[serde(deserialize_with = "unread_reason")] Reason),
}

/// An unread reason: one of the fabric's texts. (Named, so that serde does not take the
/// field for one borrowed from its input.)
type Reason = &'static str;

fn unread_reason<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Reason, D::Error> {
    String::deserialize(d).map(|text| ReuseCheck::reason(&text))
}

/// Why a reuse check may go unread (the reasons the fabric gives).
const UNREAD_REASONS: &[&str] = &[
    "over the read budget",
    "DMB not all mapped",
    "unreadable",
    "not read",
];

impl ReuseCheck {
    /// The reason among the fabric's with this text (a recorded trace's), or "unknown".
    pub fn reason(text: &str) -> &'static str {
        UNREAD_REASONS
            .iter()
            .find(|r| **r == text)
            .copied()
            .unwrap_or("unknown")
    }
}

/// A closed DMB to look at: scan from `scan_from`, or first look at `dirty_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZeroWatch {
    pub token: u64,
    pub scan_from: u64,
    pub dirty_at: Option<u64>,
}

/// What one look at a watched DMB found; also the trace's record of it (`"zero"`,
/// `{"dirty":OFF}`, `{"zero_up_to":OFF}`, `"unreadable"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZeroScan {
    /// All zero from `scan_from` to the end: zeroed.
    Zero,
    /// The byte at this offset is nonzero.
    Dirty(u64),
    /// Zero from `scan_from` up to this offset; the rest next time.
    ZeroUpTo(u64),
    /// The memory could not be read (unmapped): counts as not zero.
    Unreadable,
}

#[derive(Clone, Debug)]
pub struct DmbLife {
    summary: DmbSummary,
    /// When the last connection closed (`now_us`).
    closed_us: Option<u64>,
    /// Zeroing was seen after the close, or the watch gave up.
    watch_done: bool,
    scan_from: u64,
    dirty_at: Option<u64>,
    /// The watch tick that last looked at this DMB.
    looked_at: u64,
}

impl DmbLife {
    fn current(&mut self) -> Option<&mut ConnRecord> {
        self.summary.recent.last_mut()
    }
}

#[derive(Default)]
pub struct Tracker {
    /// By token; unregistered DMBs stay listed (a token is only reused after a full
    /// rotation) until a new registration of the same token replaces them.
    dmbs: BTreeMap<u64, DmbLife>,
    /// Zeroing-watch ticks so far.
    tick: u64,
}

/// The time since `then` (both `now_us`), zero if there was none.
fn since(then: Option<u64>) -> Duration {
    then.map_or(Duration::ZERO, |t| {
        Duration::from_micros(now_us().saturating_sub(t))
    })
}

fn is_cdc(addr: &MoveAddress, data: &[u8]) -> bool {
    addr.offset == 0 && addr.signal && data.len() >= cdc::LEN && data[0] == cdc::TYPE
}

fn closing_flags(data: &[u8]) -> u8 {
    data[cdc::CONN_STATE] & (cdc::PEER_CONN_CLOSED | cdc::PEER_CONN_ABORT)
}

/// Whether a move into a closed DMB starts a new connection: anything but a CDC that
/// still carries the close flags (the closing side may repeat them).
fn opens_connection(addr: &MoveAddress, data: &[u8]) -> bool {
    !(is_cdc(addr, data) && closing_flags(data) != 0)
}

impl Tracker {
    pub fn register(&mut self, dmb: &Dmb, function: &str) {
        self.dmbs.insert(
            dmb.token,
            DmbLife {
                summary: DmbSummary {
                    function: function.to_string(),
                    gid: dmb.owner_gid,
                    token: dmb.token,
                    rgid: dmb.rgid,
                    len: dmb.len,
                    sba_idx: dmb.sba_idx,
                    registered: true,
                    state: ConnState::Fresh,
                    connections: 0,
                    reuses: 0,
                    clean_reuses: 0,
                    stale_reuses: 0,
                    unchecked_reuses: 0,
                    closes: 0,
                    zeroed_after_close: 0,
                    not_zeroed: 0,
                    zero_delays_ms: DelayHistogram::default(),
                    bytes: 0,
                    signals: 0,
                    recent: Vec::new(),
                },
                closed_us: None,
                watch_done: false,
                scan_from: 0,
                dirty_at: None,
                looked_at: 0,
            },
        );
    }

    pub fn unregister(&mut self, dmb: &Dmb, reason: &str, function: &str) -> Vec<ObservedEvent> {
        let connections = self.dmbs.get_mut(&dmb.token).map_or(0, |life| {
            life.summary.registered = false;
            life.summary.connections
        });
        let reason = reason.to_string();
        let what = What::DmbUnregistered {
            reason,
            connections,
        };
        vec![ObservedEvent::dmb(function, dmb.owner_gid, dmb.token, what)]
    }

    /// Whether `data` at `addr` would open a new connection on a closed DMB.
    pub fn wants_reuse_check(&self, dmb: &Dmb, addr: &MoveAddress, data: &[u8]) -> bool {
        self.dmbs.get(&dmb.token).is_some_and(|life| {
            life.summary.state == ConnState::Closed && opens_connection(addr, data)
        })
    }

    /// A move into `dmb` was applied; `reuse` is what the DMB held before it, when
    /// [`Self::wants_reuse_check`] asked.
    pub fn moved(
        &mut self,
        dmb: &Dmb,
        addr: &MoveAddress,
        data: &[u8],
        reuse: Option<ReuseCheck>,
    ) -> Vec<ObservedEvent> {
        let mut events = self.opened(dmb, addr, data, reuse);
        events.extend(self.after_move(dmb, addr, data));
        events
    }

    /// The connection this move starts, if it starts one.
    fn opened(
        &mut self,
        dmb: &Dmb,
        addr: &MoveAddress,
        data: &[u8],
        reuse: Option<ReuseCheck>,
    ) -> Vec<ObservedEvent> {
        let Some(life) = self.dmbs.get_mut(&dmb.token) else {
            return Vec::new();
        };
        let s = &mut life.summary;
        let starts_connection = match s.state {
            ConnState::Fresh => true,
            ConnState::Open => false,
            ConnState::Closed => opens_connection(addr, data),
        };
        if !starts_connection {
            return Vec::new();
        }
        let mut events = Vec::new();
        let conn = s.connections + 1;
        let mut record = ConnRecord {
            conn,
            opened_us: now_us(),
            closed_us: None,
            how: None,
            bytes: 0,
            reuse_clean: None,
            reuse_unknown: None,
            stale_bytes: 0,
            zeroed_after_ms: None,
            not_zeroed: false,
        };
        if s.state == ConnState::Closed {
            s.reuses += 1;
            let reuse = reuse.unwrap_or(ReuseCheck::Unknown("not read"));
            let what = match reuse {
                ReuseCheck::Read { stale, first } => {
                    record.reuse_clean = Some(stale == 0);
                    record.stale_bytes = stale;
                    if stale == 0 {
                        s.clean_reuses += 1;
                    } else {
                        s.stale_reuses += 1;
                        guest_log!(
                            Warn, s.function, s.gid,
                            "DMB {:#x} reused with {stale} stale bytes from connection {} (first at offset {:#x})",
                            s.token, s.connections, first.unwrap_or(0)
                        );
                    }
                    What::DmbReused {
                        conn,
                        clean: Some(stale == 0),
                        stale_bytes: stale,
                        first_stale_offset: first,
                        unknown: None,
                    }
                }
                ReuseCheck::Unknown(why) => {
                    s.unchecked_reuses += 1;
                    record.reuse_unknown = Some(why.to_string());
                    What::DmbReused {
                        conn,
                        clean: None,
                        stale_bytes: 0,
                        first_stale_offset: None,
                        unknown: Some(why.to_string()),
                    }
                }
            };
            events.push(s.event(what));
        }
        s.connections = conn;
        s.state = ConnState::Open;
        if s.recent.len() == RECENT_CONNS {
            s.recent.remove(0);
        }
        s.recent.push(record);
        life.closed_us = None;
        life.watch_done = false;
        events.push(s.event(What::ConnOpened { rgid: s.rgid, conn }));
        events
    }

    fn after_move(&mut self, dmb: &Dmb, addr: &MoveAddress, data: &[u8]) -> Vec<ObservedEvent> {
        let Some(life) = self.dmbs.get_mut(&dmb.token) else {
            return Vec::new();
        };
        life.summary.bytes += data.len() as u64;
        life.summary.signals += u64::from(addr.signal);
        if !is_cdc(addr, data) {
            if let Some(record) = life.current() {
                record.bytes += data.len() as u64;
            }
            return Vec::new();
        }
        let flags = closing_flags(data);
        if life.summary.state != ConnState::Open || flags == 0 {
            return Vec::new();
        }
        let how = if flags & cdc::PEER_CONN_ABORT != 0 {
            "abort"
        } else {
            "close"
        };
        let bytes = life.current().map_or(0, |record| {
            record.closed_us = Some(now_us());
            record.how = Some(how.to_string());
            record.bytes
        });
        life.closed_us = Some(now_us());
        life.scan_from = 0;
        life.dirty_at = None;
        let s = &mut life.summary;
        s.state = ConnState::Closed;
        s.closes += 1;
        vec![s.event(What::ConnClosed {
            conn: s.connections,
            how: how.to_string(),
            bytes,
        })]
    }

    fn watched(life: &DmbLife) -> bool {
        life.summary.registered && life.summary.state == ConnState::Closed && !life.watch_done
    }

    /// The DMBs whose connection closed and whose zeroing has not been seen yet, the
    /// longest-unlooked-at first (so a budget that stops early starves nobody).
    pub fn zero_watch(&self) -> Vec<ZeroWatch> {
        let mut watch: Vec<(u64, ZeroWatch)> = self
            .dmbs
            .values()
            .filter(|l| Self::watched(l))
            .map(|l| {
                let w = ZeroWatch {
                    token: l.summary.token,
                    scan_from: l.scan_from,
                    dirty_at: l.dirty_at,
                };
                (l.looked_at, w)
            })
            .collect();
        watch.sort_by_key(|(looked_at, _)| *looked_at);
        watch.into_iter().map(|(_, w)| w).collect()
    }

    /// Records what the watcher found. Returns the events and how many DMBs are still
    /// watched. A DMB still not zero `ZERO_WATCH_LIMIT` after its close is given up on,
    /// looked at this tick or not.
    pub fn zero_scanned(&mut self, results: &[(u64, ZeroScan)]) -> (Vec<ObservedEvent>, usize) {
        self.tick += 1;
        let mut events = Vec::new();
        for &(token, scan) in results {
            let Some(life) = self.dmbs.get_mut(&token) else {
                continue;
            };
            if !Self::watched(life) {
                continue;
            }
            life.looked_at = self.tick;
            match scan {
                ZeroScan::Zero => {
                    let waited = since(life.closed_us);
                    let delay_ms = waited.as_secs_f64() * 1e3;
                    if let Some(record) = life.current() {
                        record.zeroed_after_ms = Some(delay_ms);
                    }
                    life.watch_done = true;
                    let s = &mut life.summary;
                    s.zeroed_after_close += 1;
                    s.zero_delays_ms.record(delay_ms);
                    events.push(s.event(What::DmbZeroed {
                        conn: s.connections,
                        delay_ms,
                    }));
                }
                ZeroScan::Dirty(at) => {
                    life.scan_from = at;
                    life.dirty_at = Some(at);
                }
                ZeroScan::ZeroUpTo(at) => {
                    life.scan_from = at;
                    life.dirty_at = None;
                }
                ZeroScan::Unreadable => {}
            }
        }
        let mut pending = 0;
        for life in self.dmbs.values_mut().filter(|l| Self::watched(l)) {
            let waited = since(life.closed_us);
            if waited < ZERO_WATCH_LIMIT {
                pending += 1;
                continue;
            }
            life.watch_done = true;
            if let Some(record) = life.current() {
                record.not_zeroed = true;
            }
            let s = &mut life.summary;
            s.not_zeroed += 1;
            events.push(s.event(What::DmbNotZeroed {
                conn: s.connections,
                watched_ms: waited.as_secs_f64() * 1e3,
            }));
        }
        (events, pending)
    }

    pub fn summaries(&self) -> Vec<DmbSummary> {
        self.dmbs.values().map(|l| l.summary.clone()).collect()
    }

    /// The tokens known, for a snapshot taken one DMB at a time.
    pub fn tokens(&self) -> Vec<u64> {
        self.dmbs.keys().copied().collect()
    }

    pub fn summary(&self, token: u64) -> Option<DmbSummary> {
        self.dmbs.get(&token).map(|l| l.summary.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cdc_msg(conn_state: u8) -> Vec<u8> {
        let mut m = vec![0u8; 32];
        m[0] = cdc::TYPE;
        m[cdc::CONN_STATE] = conn_state;
        m
    }

    #[test]
    fn the_delay_histogram_counts_in_fixed_buckets() {
        let mut h = DelayHistogram::default();
        for ms in [0.5, 3.0, 4.0, 750.0, 751.0, 20000.0] {
            h.record(ms);
        }
        assert_eq!(h.count, 6);
        assert_eq!(h.at_most(750.0), 4);
        assert_eq!(h.over, 1);
        assert_eq!(h.max_ms, Some(20000.0));
        assert_eq!(h.median_at_most(), Some(5.0));
        assert_eq!(h.counts.len(), DELAY_BOUNDS_MS.len(), "never grows");
    }

    #[test]
    fn only_a_signalled_cdc_at_offset_0_counts_as_cdc() {
        let at0 = MoveAddress {
            token: 1 << 32,
            dmbe: 0,
            signal: true,
            offset: 0,
        };
        let data_move = MoveAddress {
            signal: false,
            offset: 32,
            ..at0
        };
        assert!(is_cdc(&at0, &cdc_msg(0)));
        assert!(!is_cdc(&data_move, &cdc_msg(0)));
        assert!(!is_cdc(&at0, &[0xfe; 8]));
    }

    #[test]
    fn close_flags_are_closed_or_abort_not_done_writing() {
        assert_eq!(closing_flags(&cdc_msg(cdc::PEER_DONE_WRITING)), 0);
        assert_ne!(closing_flags(&cdc_msg(cdc::PEER_CONN_CLOSED)), 0);
        assert_ne!(closing_flags(&cdc_msg(cdc::PEER_CONN_ABORT)), 0);
    }
}
