//! The command protocol over a real socket, played the way the Linux ism driver plays it.

mod support;

use ism_emu::default_gid;
use ism_emu::ism::command::ISM_ERROR;
use ism_emu::ism::wire::{self, QueryInfoResponse};
use support::*;

#[test]
fn probe_sequence_succeeds_and_read_gid_is_stable() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    assert_eq!(g.read_gid(), default_gid(CHID, 0));
    assert_ne!(g.read_gid(), 0);
}

#[test]
fn query_info_reports_real_state() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let gid_b = m.guest(1).read_gid();
    a.reg_dmb(32768, gid_b);
    let reply = a.command(&wire::QueryInfoRequest::new());
    assert_eq!(reply.bytes.len(), 200, "QUERY_INFO response is 200 bytes");
    let qi = reply.get::<QueryInfoResponse>().unwrap();
    assert_eq!(qi.my_gid.get(), default_gid(CHID, 0));
    assert_eq!(qi.sba.get(), IOVA_BASE + SBA_PAGE * PAGE);
    assert_eq!(qi.ieq.get(), IOVA_BASE + IEQ_PAGE * PAGE);
    assert_eq!(qi.dmbs_owned.get(), 1);
    assert_eq!(qi.vlan_nr_ids.get(), 1, "one VLAN id (0x1fff)");
    assert_eq!(qi.vlan_id[0].get(), 0x1fff);
}

#[test]
fn query_rgid_finds_attached_peers_and_itself_only() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let gid_b = b.read_gid();
    assert!(a.query_rgid(gid_b).ok());
    drop(b);
    assert!(
        eventually(|| !a.query_rgid(gid_b).ok()),
        "a guest that went away is unreachable"
    );
    assert!(
        a.query_rgid(default_gid(CHID, 0)).ok(),
        "a function may talk to itself"
    );
    assert_ne!(a.query_rgid(0xdead_beef).ret, 0);
}

#[test]
fn reg_and_unreg_dmb_round_trip() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    let dmb = g.reg_dmb(65536, default_gid(CHID, 0));
    assert_eq!(
        dmb.token & 0xffff_ffff,
        0,
        "tokens leave the low 32 bits for the move address"
    );
    assert_eq!(query_info(&mut g).dmbs_owned.get(), 1);
    assert!(g.move_data(dmb.token, 0, b"own", true).is_ok());
    assert!(g.unreg_dmb(dmb.token).ok());
    assert_eq!(query_info(&mut g).dmbs_owned.get(), 0);
    assert!(
        g.move_data(dmb.token, 0, b"gone", true).is_err(),
        "the token is no longer registered"
    );
    assert_eq!(
        g.unreg_dmb(dmb.token).ret,
        ISM_ERROR,
        "second unregister: ISM_ERROR lets the guest free"
    );
}

#[test]
fn tokens_are_not_handed_out_again_at_once() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    let first = g.reg_dmb(16384, 1);
    g.unreg_dmb(first.token);
    let second = g.reg_dmb(16384, 1);
    assert_ne!(first.token, second.token);
}

#[test]
fn same_sba_index_twice_is_refused() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    g.map_pages(100, 8);
    let req = Guest::reg_dmb_request(IOVA_BASE + 100 * PAGE, 16384, 40, 1);
    assert!(g.command(&req).ok());
    let req = Guest::reg_dmb_request(IOVA_BASE + 104 * PAGE, 16384, 40, 1);
    assert_eq!(g.command(&req).ret, 0x0005);
}

/// QUERY_INFO's answer, which must be there.
fn query_info(g: &mut Guest) -> QueryInfoResponse {
    let reply = g.command(&wire::QueryInfoRequest::new());
    assert!(reply.ok());
    reply.get::<QueryInfoResponse>().unwrap()
}

fn vlan_ids(qi: &QueryInfoResponse) -> Vec<u16> {
    let n = qi.vlan_nr_ids.get() as usize;
    qi.vlan_id[..n].iter().map(|v| v.get()).collect()
}

#[test]
fn vlan_commands_change_what_query_info_reports() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    assert!(g.command(&wire::SetVlanRequest::new()).ok());
    assert_eq!(query_info(&mut g).vlan_required.get(), 1);
    assert!(g.command(&wire::ResetVlanRequest::new()).ok());
    assert_eq!(query_info(&mut g).vlan_required.get(), 0);
    assert!(g.command(&wire::AddVlanIdRequest::new(5.into())).ok());
    assert_eq!(vlan_ids(&query_info(&mut g)), vec![5, 0x1fff]);
    assert!(g.command(&wire::DelVlanIdRequest::new(5.into())).ok());
    assert_eq!(vlan_ids(&query_info(&mut g)), vec![0x1fff]);
}

#[test]
fn unreg_sba_and_ieq_then_again_gives_ism_error() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    assert!(g.command(&wire::UnregIeqRequest::new()).ok());
    assert_eq!(query_info(&mut g).ieq.get(), 0, "IEQ forgotten");
    assert!(g.command(&wire::UnregSbaRequest::new()).ok());
    let qi = query_info(&mut g);
    assert_eq!((qi.sba.get(), qi.ism_state.get()), (0, 0), "SBA forgotten");
    assert_eq!(g.command(&wire::UnregSbaRequest::new()).ret, ISM_ERROR);
    assert_eq!(g.command(&wire::UnregIeqRequest::new()).ret, ISM_ERROR);
}

#[test]
fn signal_ieq_reaches_the_peer_with_sender_gid_and_info() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let b = m.guest(1);
    let gid_b = default_gid(CHID, 1);
    assert!(a.signal_ieq(gid_b, true, 0x83, 0x0102_0304_0506_0001).ok());
    assert_eq!(b.ieq_idx(), 1);
    assert_eq!(
        b.ieq_entry(0),
        (2, 0x83, default_gid(CHID, 0), 0x0102_0304_0506_0001)
    );
    assert_eq!(b.sba()[0] & 0x40, 0x40, "event-pending bit");
    assert_eq!(b.interrupts(), 1);
}

#[test]
fn ieq_wraps_past_15_entries_with_index_semantics() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let b = m.guest(1);
    let mut idx = Vec::new();
    for code in 0..17u32 {
        let gid_b = default_gid(CHID, 1);
        assert!(a.signal_ieq(gid_b, false, code, 0).ok());
        // Within SIGNAL_IEQ's rate limit (100 a second).
        std::thread::sleep(std::time::Duration::from_millis(15));
        idx.push(b.ieq_idx());
    }
    assert_eq!(&idx[13..17], &[14, 15, 1, 2]);
    assert_eq!(b.ieq_entry(1).1, 16, "17th event in slot 1");
    assert_eq!(b.interrupts(), 0, "trigger_irq 0 raises no interrupt");
}
