//! The host's view of DMB lives, driven by SMC-D-shaped traffic over the real socket:
//! CDC messages at offset 0 with sf, data moves behind them, the owner zeroing (or not).

mod support;

use std::sync::mpsc::Receiver;

use ism_emu::default_gid;
use serde_json::Value;
use support::*;

const CLOSED: u8 = CDC_CLOSED;

/// The events so far (after the writer thread sent them all).
fn kinds(m: &Machine, rx: &Receiver<String>) -> Vec<Value> {
    m.observer.sync();
    rx.try_iter()
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect()
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

struct Scene {
    m: Machine,
    owner: Guest,
    peer: Guest,
    dmb: Dmb,
    events: Receiver<String>,
}

impl Scene {
    /// The owner's kernel releases the connection: zeroes the whole DMB.
    fn owner_zeroes_the_dmb(&self) {
        let zeros = vec![0u8; self.dmb.len as usize];
        self.owner.ram.write(self.dmb.ram_offset, &zeros).unwrap();
    }

    /// The owner unmaps page `page` of the DMB.
    fn owner_unmaps_page(&mut self, page: u64) {
        let iova = IOVA_BASE + self.dmb.ram_offset + page * PAGE;
        self.owner.client.dma_unmap(iova, PAGE).unwrap().unwrap();
    }
}

fn scene() -> Scene {
    let m = Machine::start(2);
    let events = m.observer.follow();
    let mut owner = m.guest(0);
    let peer = m.guest(1);
    let dmb = owner.reg_dmb(16384, default_gid(CHID, 1));
    Scene {
        m,
        owner,
        peer,
        dmb,
        events,
    }
}

#[test]
fn registration_and_connection_events_carry_token_and_gids() {
    let mut s = scene();
    connection(&mut s.peer, &s.dmb, b"hello");
    let ev = kinds(&s.m, &s.events);
    let reg = of_kind(&ev, "dmb_registered");
    assert_eq!(reg.len(), 1);
    assert_eq!(reg[0]["token"], format!("{:#x}", s.dmb.token));
    assert_eq!(reg[0]["rgid"], format!("{:#x}", default_gid(CHID, 1)));
    assert_eq!(of_kind(&ev, "conn_opened").len(), 1);
    let closed = of_kind(&ev, "conn_closed");
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0]["bytes"], 5);
}

#[test]
fn zeroing_after_close_is_reported_then_reuse_is_clean() {
    let mut s = scene();
    connection(&mut s.peer, &s.dmb, b"first connection");
    s.m.fabric.poll_zeroing();
    assert!(
        of_kind(&kinds(&s.m, &s.events), "dmb_zeroed").is_empty(),
        "not zero yet"
    );
    // The owner's kernel releases the connection: zeroes the whole DMB.
    s.owner_zeroes_the_dmb();
    s.m.fabric.poll_zeroing();
    connection(&mut s.peer, &s.dmb, b"second");
    let ev = kinds(&s.m, &s.events);
    assert_eq!(of_kind(&ev, "dmb_zeroed").len(), 1);
    let reuse = of_kind(&ev, "dmb_reused");
    assert_eq!(reuse.len(), 1);
    assert_eq!(reuse[0]["clean"], true);
    assert_eq!(reuse[0]["conn"], 2);
}

#[test]
fn reuse_without_zeroing_is_stale_with_count_and_first_offset() {
    let mut s = scene();
    connection(&mut s.peer, &s.dmb, b"secret");
    s.m.fabric.poll_zeroing();
    connection(&mut s.peer, &s.dmb, b"next");
    let ev = kinds(&s.m, &s.events);
    let reuse = of_kind(&ev, "dmb_reused");
    assert_eq!(reuse.len(), 1);
    assert_eq!(reuse[0]["clean"], false);
    assert_eq!(reuse[0]["first_stale_offset"], 0, "the old CDC header");
    // 2 nonzero CDC bytes (type, cursor) + flags byte + 6 payload bytes.
    assert_eq!(reuse[0]["stale_bytes"], 3 + 6);
    let summary = &s.m.observer.summaries()[0];
    assert_eq!(
        (summary.reuses, summary.stale_reuses, summary.clean_reuses),
        (1, 1, 0)
    );
}

#[test]
fn zeroing_at_handout_is_a_clean_reuse_without_zeroing_at_release() {
    let mut s = scene();
    connection(&mut s.peer, &s.dmb, b"old");
    // The watcher looks after the close and sees the old bytes still there.
    assert_eq!(s.m.fabric.poll_zeroing(), 1, "the closed DMB is watched");
    assert_eq!(s.m.observer.summaries()[0].zeroed_after_close, 0);
    // Pre-5.17 kernels zero when the next connection takes the buffer: just before
    // the peer's first write, with no watcher tick in between.
    s.owner_zeroes_the_dmb();
    connection(&mut s.peer, &s.dmb, b"new");
    let summary = &s.m.observer.summaries()[0];
    assert_eq!(summary.clean_reuses, 1);
    assert_eq!(summary.zeroed_after_close, 0);
    // A tick now looks at the second close (the DMB is not zero: "new" is in it).
    assert_eq!(s.m.fabric.poll_zeroing(), 1);
    assert_eq!(s.m.observer.summaries()[0].zeroed_after_close, 0);
}

/// The owner's zeroing and the old connection's last CDC message cross (fault/002 on
/// 7.3.4): the message lands behind the zeroing and the DMB is never all zero. The
/// watch finds it zero but for that message, and the next connection's stale bytes
/// are that message's.
#[test]
fn a_late_cdc_behind_the_zeroing_is_a_late_write_after_it() {
    let mut s = scene();
    connection(&mut s.peer, &s.dmb, b"the stream");
    // The close's CDC again, read before it lands with the stream still there.
    let late = cdc_after(CLOSED | 0x20, 10);
    s.peer.move_data(s.dmb.token, 0, &late, true).unwrap();
    s.m.fabric.poll_zeroing();
    // The owner zeroes all of it but the slot, which the late message took after the
    // zeroing went past it.
    let zeros = vec![0u8; s.dmb.len as usize - 32];
    s.owner.ram.write(s.dmb.ram_offset + 32, &zeros).unwrap();
    s.m.fabric.poll_zeroing();
    connection(&mut s.peer, &s.dmb, b"next");
    let ev = kinds(&s.m, &s.events);
    let late_writes = of_kind(&ev, "late_write");
    assert_eq!(late_writes.len(), 1);
    assert_eq!(
        late_writes[0]["after_zeroed"], false,
        "not known when it landed"
    );
    let zeroed = of_kind(&ev, "dmb_zeroed");
    assert_eq!(zeroed.len(), 1, "{ev:?}");
    assert_eq!(zeroed[0]["late_cdc_kept"], true);
    let reuse = of_kind(&ev, "dmb_reused");
    assert_eq!(
        (
            reuse[0]["clean"].clone(),
            reuse[0]["first_stale_offset"].clone()
        ),
        (false.into(), 0.into())
    );
    let summary = &s.m.observer.summaries()[0];
    assert_eq!(
        (summary.late_writes, summary.late_writes_after_zeroed),
        (1, 1)
    );
}

/// The owner's zeroing and the old connection's late data cross (fault/010 on 6.12): a
/// late chunk lands behind the zeroing, and the DMB is never all zero again. The watch
/// finds it zero but for the late chunk and CDC message, counts the chunk's bytes, and
/// the chunk after it is a late write after the zeroing.
#[test]
fn late_data_behind_the_zeroing_is_counted_as_after_it() {
    let mut s = scene();
    connection(&mut s.peer, &s.dmb, &[0x55; 4000]);
    let chunk: Vec<u8> = (0..1000u32).map(|i| (i % 250 + 1) as u8).collect();
    s.peer
        .move_data(s.dmb.token, 32 + 4000, &chunk, false)
        .unwrap();
    s.peer
        .move_data(s.dmb.token, 0, &cdc_after(CLOSED | 0x20, 5000), true)
        .unwrap();
    s.m.fabric.poll_zeroing();
    // The owner's zeroing went past the chunk's place before the chunk landed there:
    // everything but the slot and the chunk is zero.
    let zeros = vec![0u8; 4000];
    s.owner.ram.write(s.dmb.ram_offset + 32, &zeros).unwrap();
    let tail = vec![0u8; s.dmb.len as usize - 5032];
    s.owner.ram.write(s.dmb.ram_offset + 5032, &tail).unwrap();
    s.m.fabric.poll_zeroing();
    let ev = kinds(&s.m, &s.events);
    let zeroed = of_kind(&ev, "dmb_zeroed");
    assert_eq!(zeroed.len(), 1, "{ev:?}");
    assert_eq!(zeroed[0]["late_cdc_kept"], true);
    let cdc_bytes = cdc_after(CLOSED | 0x20, 5000)
        .iter()
        .filter(|&&b| b != 0)
        .count();
    assert_eq!(zeroed[0]["late_bytes_kept"], 1000 + cdc_bytes);
    // The next chunk and its CDC message: after the zeroing.
    s.peer
        .move_data(s.dmb.token, 32 + 5000, &chunk[..10], false)
        .unwrap();
    s.peer
        .move_data(s.dmb.token, 0, &cdc_after(CLOSED | 0x20, 5010), true)
        .unwrap();
    let ev = kinds(&s.m, &s.events);
    let late_writes = of_kind(&ev, "late_write");
    assert_eq!(late_writes.len(), 1, "{ev:?}");
    assert_eq!(
        (
            late_writes[0]["after_zeroed"].clone(),
            late_writes[0]["bytes"].clone()
        ),
        (true.into(), 10.into())
    );
    let summary = &s.m.observer.summaries()[0];
    assert_eq!(
        (summary.late_writes, summary.late_writes_after_zeroed),
        (2, 2)
    );
}

/// Data a closed DMB received that no CDC message with the close flags claimed yet may
/// be a new connection's: the watch does not read past it.
#[test]
fn unclaimed_data_behind_the_zeroing_is_not_zeroing() {
    let mut s = scene();
    connection(&mut s.peer, &s.dmb, b"the stream");
    s.owner_zeroes_the_dmb();
    s.peer.move_data(s.dmb.token, 32, b"next", false).unwrap();
    s.m.fabric.poll_zeroing();
    assert!(of_kind(&kinds(&s.m, &s.events), "dmb_zeroed").is_empty());
}

/// Without a late message the slot is read as any other byte: a DMB zeroed but for
/// its old CDC header is not zeroed.
#[test]
fn an_old_cdc_header_left_alone_is_not_zeroing() {
    let s = scene();
    let mut peer = s.peer;
    connection(&mut peer, &s.dmb, b"the stream");
    let zeros = vec![0u8; s.dmb.len as usize - 32];
    s.owner.ram.write(s.dmb.ram_offset + 32, &zeros).unwrap();
    s.m.fabric.poll_zeroing();
    assert!(of_kind(&kinds(&s.m, &s.events), "dmb_zeroed").is_empty());
}

#[test]
fn repeated_closing_cdc_does_not_start_a_connection() {
    let mut s = scene();
    connection(&mut s.peer, &s.dmb, b"x");
    s.peer
        .move_data(s.dmb.token, 0, &cdc_after(CLOSED | 0x80, 1), true)
        .unwrap();
    assert_eq!(s.m.observer.summaries()[0].connections, 1);
}

#[test]
fn unregistration_reports_the_connections_the_dmb_carried() {
    let mut s = scene();
    connection(&mut s.peer, &s.dmb, b"x");
    s.owner_zeroes_the_dmb();
    connection(&mut s.peer, &s.dmb, b"y");
    assert!(s.owner.unreg_dmb(s.dmb.token).ok());
    let ev = kinds(&s.m, &s.events);
    let unreg = of_kind(&ev, "dmb_unregistered");
    assert_eq!(unreg.len(), 1);
    assert_eq!(unreg[0]["connections"], 2);
}

#[test]
fn connection_records_keep_bytes_close_reuse_and_zeroing() {
    let mut s = scene();
    connection(&mut s.peer, &s.dmb, b"first connection");
    s.owner_zeroes_the_dmb();
    s.m.fabric.poll_zeroing();
    connection(&mut s.peer, &s.dmb, b"second");
    let recent = &s.m.observer.summaries()[0].recent;
    assert_eq!(recent.len(), 2);
    assert_eq!((recent[0].conn, recent[0].bytes), (1, 16));
    assert_eq!(recent[0].how.as_deref(), Some("close"));
    assert!(recent[0].zeroed_after_ms.is_some());
    assert_eq!(recent[0].reuse_clean, None, "first use is no reuse");
    assert_eq!((recent[1].conn, recent[1].reuse_clean), (2, Some(true)));
}

#[test]
fn a_reuse_whose_dmb_cannot_be_read_is_unchecked_never_clean() {
    let mut s = scene();
    connection(&mut s.peer, &s.dmb, b"old");
    // The owner unmaps the DMB's second page; the first still takes moves.
    s.owner_unmaps_page(1);
    s.peer.move_data(s.dmb.token, 32, b"new", false).unwrap();
    // Checked before that move, told by the CDC after it (a new connection's).
    s.peer
        .move_data(s.dmb.token, 0, &cdc_after(0, 3), true)
        .unwrap();
    let ev = kinds(&s.m, &s.events);
    let reuse = of_kind(&ev, "dmb_reused");
    assert_eq!(reuse.len(), 1);
    assert_eq!(reuse[0]["clean"], Value::Null, "{}", reuse[0]);
    assert_eq!(reuse[0]["unknown"], "DMB not all mapped");
    let summary = &s.m.observer.summaries()[0];
    assert_eq!(
        (summary.clean_reuses, summary.unchecked_reuses),
        (0, 1),
        "not counted clean"
    );
}

#[test]
fn a_rejected_move_opens_no_connection() {
    let mut s = scene();
    let past_the_end = s.peer.store_move(s.dmb.token, 0, true, 16380, b"too long");
    assert!(past_the_end.is_err());
    s.owner_unmaps_page(0);
    assert!(s.peer.move_data(s.dmb.token, 0, &cdc(0), true).is_err());
    let summary = &s.m.observer.summaries()[0];
    assert_eq!((summary.connections, summary.bytes), (0, 0));
    assert!(of_kind(&kinds(&s.m, &s.events), "conn_opened").is_empty());
}
