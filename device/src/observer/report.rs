//! The snapshot the control socket answers `snapshot` with, and the tables `ism-emu observe`
//! prints from it. The snapshot types serialize and deserialize, so the CLI reads what
//! the emulator wrote with the same types.
//!
//! GIDs, tokens and addresses are hex strings in JSON (see `util::json`).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::summary::{ConnState, DmbSummary};
pub use crate::fabric::{Counters, FunctionView};
use crate::util::histogram::DELAY_BOUNDS_MS;
use crate::util::json::chid;

/// The whole fabric as `ism-emu observe json` prints it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    #[serde(with = "chid")]
    pub chid: u16,
    pub functions: Vec<FunctionView>,
    pub dmbs: Vec<DmbSummary>,
}

/// `observe functions`: the fabric's CHID, then a row per function. `ATTACHED` and
/// `DMBS` are the state now; after a run (guests gone) they read `no` and 0, so
/// `CLIENTS` and `DMBS_SEEN` say what the run had, like the other counters.
pub struct FunctionsTable<'a>(pub &'a Snapshot);

impl fmt::Display for FunctionsTable<'_> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(out, "fabric CHID {:#06x}", self.0.chid)?;
        writeln!(
            out,
            "{:<6} {:<18} {:<8} {:>5} {:>9} {:>12} {:>9} {:>12} {:>8} {:>6} {:>6} {:>8} {:>7} {:>9}",
            "FUNC",
            "GID",
            "ATTACHED",
            "DMBS",
            "MOVES_OUT",
            "BYTES_OUT",
            "MOVES_IN",
            "BYTES_IN",
            "SIGNALS",
            "EVENTS",
            "IRQS",
            "REJECTED",
            "CLIENTS",
            "DMBS_SEEN"
        )?;
        for f in &self.0.functions {
            let c = &f.counters;
            let seen = self.0.dmbs.iter().filter(|d| d.function == f.name).count();
            writeln!(
                out,
                "{:<6} {:<18} {:<8} {:>5} {:>9} {:>12} {:>9} {:>12} {:>8} {:>6} {:>6} {:>8} {:>7} {:>9}",
                f.name,
                format!("{:#018x}", f.gid),
                if f.attached { "yes" } else { "no" },
                f.dmbs_owned,
                c.moves_out,
                c.bytes_out,
                c.moves_in,
                c.bytes_in,
                c.signals_in,
                c.events_in,
                c.interrupts,
                c.moves_rejected + c.command_errors,
                c.attaches,
                seen,
            )?;
        }
        writeln!(
            out,
            "(ATTACHED, DMBS: now; the other columns: totals since the emulator started)"
        )
    }
}

impl ConnState {
    fn name(self) -> &'static str {
        match self {
            ConnState::Fresh => "fresh",
            ConnState::Open => "open",
            ConnState::Closed => "closed",
        }
    }
}

/// The median zeroing delay as the bound of its histogram bucket (`<=10`: the snapshot
/// keeps a histogram, not the delays), then the exact maximum; or "-". The heading,
/// `ZERO_MS(<=med/max)`, says the same.
fn delays(summary: &DmbSummary) -> String {
    let h = &summary.zero_delays_ms;
    match (h.median_at_most(), h.max_ms) {
        (Some(med), Some(max)) => format!("<={med:.0}/{max:.1}"),
        (None, Some(max)) => format!(
            ">{:.0}/{max:.1}",
            DELAY_BOUNDS_MS[DELAY_BOUNDS_MS.len() - 1]
        ),
        _ => "-".into(),
    }
}

/// `observe dmbs`: a row per DMB.
pub struct DmbsTable<'a>(pub &'a Snapshot);

impl fmt::Display for DmbsTable<'_> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            out,
            "{:<6} {:<14} {:<18} {:>7} {:>4} {:<12} {:>5} {:>6} {:>5} {:>5} {:>6} {:>18} {:>12}",
            "FUNC",
            "TOKEN",
            "PEER",
            "LEN",
            "IDX",
            "STATE",
            "CONNS",
            "REUSES",
            "CLEAN",
            "STALE",
            "ZEROED",
            "ZERO_MS(<=med/max)",
            "BYTES"
        )?;
        for d in &self.0.dmbs {
            let state = if d.registered {
                d.state.name().to_string()
            } else {
                format!("{}/unreg", d.state.name())
            };
            writeln!(
                out,
                "{:<6} {:<14} {:<18} {:>7} {:>4} {:<12} {:>5} {:>6} {:>5} {:>5} {:>6} {:>18} {:>12}",
                d.function,
                format!("{:#x}", d.token),
                format!("{:#018x}", d.rgid),
                d.len,
                d.sba_idx,
                state,
                d.connections,
                d.reuses,
                d.clean_reuses,
                d.stale_reuses,
                d.zeroed_after_close,
                delays(d),
                d.bytes,
            )?;
        }
        Ok(())
    }
}

/// `observe conns`: a row per remembered connection, times relative to the first.
pub struct ConnsTable<'a>(pub &'a Snapshot);

impl fmt::Display for ConnsTable<'_> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            out,
            "{:<6} {:<14} {:>5} {:>12} {:>10} {:>12} {:<6} {:<13} {:>11}",
            "FUNC", "TOKEN", "CONN", "OPENED(s)", "OPEN_MS", "BYTES", "CLOSE", "REUSE", "ZEROED_MS"
        )?;
        let dmbs = &self.0.dmbs;
        let start = dmbs
            .iter()
            .flat_map(|d| &d.recent)
            .map(|c| c.opened_us)
            .min()
            .unwrap_or(0);
        for d in dmbs {
            for c in &d.recent {
                let open_ms = c.closed_us.map_or("-".to_string(), |closed| {
                    format!("{:.1}", closed.saturating_sub(c.opened_us) as f64 / 1e3)
                });
                let reuse = match c.reuse_clean {
                    // A reuse that could not be read is not "no reuse".
                    None if c.reuse_unknown.is_some() => "unchecked".to_string(),
                    None => "-".to_string(),
                    Some(true) => "clean".to_string(),
                    Some(false) => format!("STALE {}B", c.stale_bytes),
                };
                let zeroed = match (c.zeroed_after_ms, c.not_zeroed) {
                    (Some(ms), _) => format!("{ms:.1}"),
                    (None, true) => "never".to_string(),
                    (None, false) => "-".to_string(),
                };
                writeln!(
                    out,
                    "{:<6} {:<14} {:>5} {:>12.3} {:>10} {:>12} {:<6} {:<13} {:>11}",
                    d.function,
                    format!("{:#x}", d.token),
                    c.conn,
                    c.opened_us.saturating_sub(start) as f64 / 1e6,
                    open_ms,
                    c.bytes,
                    c.how.as_deref().unwrap_or("-"),
                    reuse,
                    zeroed,
                )?;
            }
        }
        Ok(())
    }
}

/// What the reuses of a snapshot's DMBs add up to (`observe summary --check` turns it
/// into the exit status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerdictKind {
    /// A connection's CDC message landed in a DMB that another connection was using.
    Crossed,
    /// A reused DMB still held an earlier connection's bytes.
    Stale,
    /// Some reuse could not be checked, none was seen stale.
    Unknown,
    /// Every reuse was read and was zero.
    Clean,
    /// No DMB was reused: nothing to judge.
    NoReuse,
}

impl VerdictKind {
    pub fn of(snap: &Snapshot) -> Self {
        let sum = |field: fn(&DmbSummary) -> u64| snap.dmbs.iter().map(field).sum::<u64>();
        if sum(|d| d.foreign_cdcs) > 0 {
            Self::Crossed
        } else if sum(|d| d.stale_reuses) > 0 {
            Self::Stale
        } else if sum(|d| d.unchecked_reuses) > 0 {
            Self::Unknown
        } else if sum(|d| d.reuses) > 0 {
            Self::Clean
        } else {
            Self::NoReuse
        }
    }
}

/// The summary's last lines: totals and a verdict on zeroing and reuse.
pub struct Verdict<'a>(pub &'a Snapshot);

impl fmt::Display for Verdict<'_> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dmbs = &self.0.dmbs;
        let sum = |field: fn(&DmbSummary) -> u64| dmbs.iter().map(field).sum::<u64>();
        writeln!(
            out,
            "{} DMBs, {} connections, {} closes, {} zeroed after close, {} reuses ({} clean, {} stale, {} unchecked)",
            dmbs.len(),
            sum(|d| d.connections),
            sum(|d| d.closes),
            sum(|d| d.zeroed_after_close),
            sum(|d| d.reuses),
            sum(|d| d.clean_reuses),
            sum(|d| d.stale_reuses),
            sum(|d| d.unchecked_reuses)
        )?;
        // Only when there were any: a peer writing after its connection closed is the
        // usual cause of a stale reuse on kernels that zero at release.
        let late = sum(|d| d.late_writes);
        if late > 0 {
            writeln!(
                out,
                "{late} late writes by a closed connection's peer ({} after the owner zeroed the DMB)",
                sum(|d| d.late_writes_after_zeroed)
            )?;
        }
        match VerdictKind::of(self.0) {
            VerdictKind::Crossed => writeln!(
                out,
                "VERDICT: CROSSED — {} CDC message(s) landed in a DMB that another connection was using",
                sum(|d| d.foreign_cdcs)
            ),
            VerdictKind::Stale => writeln!(
                out,
                "VERDICT: STALE — a reused DMB still held an earlier connection's bytes"
            ),
            VerdictKind::Unknown => writeln!(
                out,
                "VERDICT: UNKNOWN — {} reuse(s) could not be checked; none seen stale",
                sum(|d| d.unchecked_reuses)
            ),
            VerdictKind::Clean => writeln!(
                out,
                "VERDICT: CLEAN — every reused DMB was zero when the next connection started"
            ),
            VerdictKind::NoReuse => writeln!(out, "VERDICT: no DMB reuse seen"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dmb::Dmb;
    use crate::observer::dmb_life::Tracker;
    use crate::observer::summary::ConnRecord;

    fn snapshot() -> Snapshot {
        let dmb = Dmb {
            token: 0x1_0000_0000,
            owner: 0,
            owner_gid: 0x1234_0049_534d_0001,
            rgid: 0xfedc_ba98_7654_3210,
            rgid_generation: None,
            iova: 0x1_0001_0000,
            len: 65536,
            sba_idx: 32,
            vlan_valid: false,
            vlan_id: 0,
            registered_at_us: 0,
        };
        let mut tracker = Tracker::default();
        tracker.register(&dmb, "ism0");
        Snapshot {
            chid: 0x1234,
            functions: vec![FunctionView {
                name: "ism0".into(),
                gid: dmb.owner_gid,
                attached: true,
                sba: Some(0x1_0000_0000),
                ieq: None,
                interrupt_enabled: true,
                mapped_bytes: 4096,
                dmbs_owned: 1,
                counters: Counters {
                    moves_rejected: 2,
                    command_errors: 1,
                    ..Counters::default()
                },
            }],
            dmbs: tracker.summaries(),
        }
    }

    #[test]
    fn gids_and_tokens_are_hex_strings_in_json() {
        let json: serde_json::Value = serde_json::to_value(snapshot()).unwrap();
        assert_eq!(json["chid"], "0x1234");
        assert_eq!(json["functions"][0]["gid"], "0x12340049534d0001");
        assert_eq!(json["functions"][0]["ieq"], serde_json::Value::Null);
        assert_eq!(json["dmbs"][0]["token"], "0x100000000");
        assert_eq!(json["dmbs"][0]["rgid"], "0xfedcba9876543210");
        assert_eq!(json["dmbs"][0]["state"], "fresh");
    }

    #[test]
    fn a_snapshot_reads_back_what_it_wrote() {
        let snap = snapshot();
        let json = serde_json::to_string(&snap).unwrap();
        assert_eq!(serde_json::from_str::<Snapshot>(&json).unwrap(), snap);
    }

    #[test]
    fn a_decimal_gid_is_refused() {
        let mut json = serde_json::to_value(snapshot()).unwrap();
        json["functions"][0]["gid"] = 42.into();
        assert!(serde_json::from_value::<Snapshot>(json).is_err());
    }

    #[test]
    fn functions_table_shows_gid_and_rejections() {
        let text = FunctionsTable(&snapshot()).to_string();
        assert!(text.starts_with("fabric CHID 0x1234\n"), "{text}");
        let row = text.lines().nth(2).unwrap();
        assert!(row.starts_with("ism0   0x12340049534d0001 yes"), "{row}");
        let columns: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            columns[11], "3",
            "2 rejected moves + 1 failed command: {row}"
        );
        // CLIENTS and DMBS_SEEN: what the run had, whatever is attached now.
        assert_eq!(columns[12..], ["0", "1"], "{row}");
        assert!(
            text.ends_with("totals since the emulator started)\n"),
            "{text}"
        );
    }

    #[test]
    fn dmbs_table_shows_token_peer_and_state() {
        let text = DmbsTable(&snapshot()).to_string();
        let row = text.lines().nth(1).unwrap();
        assert!(
            row.starts_with("ism0   0x100000000    0xfedcba9876543210   65536   32 fresh"),
            "{row}"
        );
    }

    #[test]
    fn verdict_without_reuse_says_so() {
        let text = Verdict(&snapshot()).to_string();
        assert_eq!(
            text,
            "1 DMBs, 0 connections, 0 closes, 0 zeroed after close, 0 reuses (0 clean, 0 stale, 0 unchecked)\n\
             VERDICT: no DMB reuse seen\n"
        );
    }

    #[test]
    fn conns_table_tells_an_unchecked_reuse_from_a_first_connection() {
        let mut snap = snapshot();
        let conn = |n, unknown: Option<&str>| ConnRecord {
            conn: n,
            opened_us: n * 1_000_000,
            closed_us: Some(n * 1_000_000 + 500),
            how: Some("close".into()),
            bytes: 10,
            reuse_clean: None,
            reuse_unknown: unknown.map(str::to_string),
            stale_bytes: 0,
            zeroed_after_ms: None,
            not_zeroed: false,
        };
        snap.dmbs[0].recent = vec![conn(1, None), conn(2, Some("over the read budget"))];
        let text = ConnsTable(&snap).to_string();
        let reuse = |row: &str| row.split_whitespace().nth(7).unwrap().to_string();
        let rows: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(reuse(rows[0]), "-", "{text}");
        assert_eq!(reuse(rows[1]), "unchecked", "{text}");
    }

    #[test]
    fn the_verdict_kind_follows_the_worst_reuse() {
        let mut snap = snapshot();
        assert_eq!(VerdictKind::of(&snap), VerdictKind::NoReuse);
        snap.dmbs[0].reuses = 3;
        snap.dmbs[0].clean_reuses = 2;
        assert_eq!(VerdictKind::of(&snap), VerdictKind::Clean);
        snap.dmbs[0].unchecked_reuses = 1;
        assert_eq!(VerdictKind::of(&snap), VerdictKind::Unknown);
        snap.dmbs[0].stale_reuses = 1;
        assert_eq!(VerdictKind::of(&snap), VerdictKind::Stale);
    }

    #[test]
    fn the_zeroing_heading_says_the_median_is_a_bucket_bound() {
        let text = DmbsTable(&snapshot()).to_string();
        assert!(
            text.lines()
                .next()
                .unwrap()
                .contains(" ZERO_MS(<=med/max) "),
            "{text}"
        );
    }
}
