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
//! *before* that first move is applied.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::json::hex;
use super::{ObservedEvent, What, ZERO_WATCH_LIMIT};
use crate::dma::DmaSpace;
use crate::dmb::{now_us, Dmb};
use crate::ism::MoveAddress;

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
    #[serde(with = "hex")]
    pub gid: u64,
    #[serde(with = "hex")]
    pub token: u64,
    #[serde(with = "hex")]
    pub rgid: u64,
    pub len: u32,
    pub sba_idx: u32,
    pub registered: bool,
    pub state: ConnState,
    pub connections: u64,
    pub reuses: u64,
    pub clean_reuses: u64,
    pub stale_reuses: u64,
    pub closes: u64,
    pub zeroed_after_close: u64,
    /// Closes after which the DMB was still not zero when the watch gave up.
    pub not_zeroed: u64,
    /// Delays between a close and the zeroing seen after it, in milliseconds.
    pub zero_delays_ms: Vec<f64>,
    pub bytes: u64,
    pub signals: u64,
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

#[derive(Clone, Debug)]
pub struct DmbLife {
    summary: DmbSummary,
    closed_at: Option<Instant>,
    /// Zeroing was seen after the close, or the watch gave up.
    watch_done: bool,
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
}

fn is_cdc(addr: &MoveAddress, data: &[u8]) -> bool {
    addr.offset == 0 && addr.signal && data.len() >= cdc::LEN && data[0] == cdc::TYPE
}

fn closing_flags(data: &[u8]) -> u8 {
    data[cdc::CONN_STATE] & (cdc::PEER_CONN_CLOSED | cdc::PEER_CONN_ABORT)
}

/// Counts nonzero bytes and finds the first one.
pub fn stale_bytes(bytes: &[u8]) -> (u64, Option<u64>) {
    let first = bytes.iter().position(|&b| b != 0).map(|p| p as u64);
    let count = bytes.iter().filter(|&&b| b != 0).count() as u64;
    (count, first)
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
                    closes: 0,
                    zeroed_after_close: 0,
                    not_zeroed: 0,
                    zero_delays_ms: Vec::new(),
                    bytes: 0,
                    signals: 0,
                    recent: Vec::new(),
                },
                closed_at: None,
                watch_done: false,
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

    pub fn before_move(
        &mut self,
        dmb: &Dmb,
        mem: &DmaSpace,
        addr: &MoveAddress,
        data: &[u8],
    ) -> Vec<ObservedEvent> {
        let Some(life) = self.dmbs.get_mut(&dmb.token) else {
            return Vec::new();
        };
        let s = &mut life.summary;
        let starts_connection = match s.state {
            ConnState::Fresh => true,
            ConnState::Open => false,
            ConnState::Closed => !(is_cdc(addr, data) && closing_flags(data) != 0),
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
            stale_bytes: 0,
            zeroed_after_ms: None,
            not_zeroed: false,
        };
        if s.state == ConnState::Closed {
            let mut bytes = vec![0u8; dmb.len as usize];
            let (stale, first) = match mem.read(dmb.iova, &mut bytes) {
                Ok(()) => stale_bytes(&bytes),
                Err(e) => {
                    log::warn!(
                        "{}: cannot read DMB {:#x} for the reuse check: {e}",
                        s.function,
                        s.token
                    );
                    (0, None)
                }
            };
            s.reuses += 1;
            record.reuse_clean = Some(stale == 0);
            record.stale_bytes = stale;
            if stale == 0 {
                s.clean_reuses += 1;
            } else {
                s.stale_reuses += 1;
                log::warn!(
                    "{} (gid {:#018x}): DMB {:#x} reused with {stale} stale bytes from connection {} (first at offset {:#x})",
                    s.function, s.gid, s.token, s.connections, first.unwrap_or(0)
                );
            }
            events.push(s.event(What::DmbReused {
                conn,
                clean: stale == 0,
                stale_bytes: stale,
                first_stale_offset: first,
            }));
        }
        s.connections = conn;
        s.state = ConnState::Open;
        if s.recent.len() == RECENT_CONNS {
            s.recent.remove(0);
        }
        s.recent.push(record);
        life.closed_at = None;
        life.watch_done = false;
        events.push(s.event(What::ConnOpened { rgid: s.rgid, conn }));
        events
    }

    pub fn after_move(&mut self, dmb: &Dmb, addr: &MoveAddress, data: &[u8]) -> Vec<ObservedEvent> {
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
        life.closed_at = Some(Instant::now());
        let s = &mut life.summary;
        s.state = ConnState::Closed;
        s.closes += 1;
        vec![s.event(What::ConnClosed {
            conn: s.connections,
            how: how.to_string(),
            bytes,
        })]
    }

    /// Tokens whose connection closed and whose zeroing has not been seen yet.
    pub fn awaiting_zero(&self) -> Vec<u64> {
        self.dmbs
            .values()
            .filter(|l| {
                l.summary.registered && l.summary.state == ConnState::Closed && !l.watch_done
            })
            .map(|l| l.summary.token)
            .collect()
    }

    /// `is_zero(token)` tells whether the DMB is all zero now.
    pub fn poll_zeroing(&mut self, is_zero: impl Fn(u64) -> Option<bool>) -> Vec<ObservedEvent> {
        let mut events = Vec::new();
        for token in self.awaiting_zero() {
            let Some(life) = self.dmbs.get_mut(&token) else {
                continue;
            };
            let waited = life.closed_at.map_or(Duration::ZERO, |t| t.elapsed());
            let zero = is_zero(token) == Some(true);
            let gave_up = !zero && waited >= ZERO_WATCH_LIMIT;
            if let Some(record) = life.current() {
                if zero {
                    record.zeroed_after_ms = Some(waited.as_secs_f64() * 1e3);
                }
                record.not_zeroed = gave_up;
            }
            let s = &mut life.summary;
            if zero {
                let delay_ms = waited.as_secs_f64() * 1e3;
                life.watch_done = true;
                s.zeroed_after_close += 1;
                s.zero_delays_ms.push(delay_ms);
                events.push(s.event(What::DmbZeroed {
                    conn: s.connections,
                    delay_ms,
                }));
            } else if gave_up {
                life.watch_done = true;
                s.not_zeroed += 1;
                events.push(s.event(What::DmbNotZeroed {
                    conn: s.connections,
                    watched_ms: waited.as_secs_f64() * 1e3,
                }));
            }
        }
        events
    }

    pub fn summaries(&self) -> Vec<DmbSummary> {
        self.dmbs.values().map(|l| l.summary.clone()).collect()
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
    fn stale_bytes_counts_and_finds_first() {
        assert_eq!(stale_bytes(&[0, 0, 3, 0, 4]), (2, Some(2)));
        assert_eq!(stale_bytes(&[0; 8]), (0, None));
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
