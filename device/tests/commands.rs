//! The command protocol over a real socket, played the way the Linux ism driver plays it.

mod support;

use ism_emu::default_gid;
use ism_emu::ism::command::{opcode, ISM_ERROR};
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
    let qi = a.command(opcode::QUERY_INFO, &[]);
    assert_eq!(qi.payload.len(), 192, "QUERY_INFO response is 200 bytes");
    assert_eq!(qi.u64_at(16), default_gid(CHID, 0), "my_gid");
    assert_eq!(qi.u64_at(24), IOVA_BASE + SBA_PAGE * PAGE, "sba");
    assert_eq!(qi.u64_at(32), IOVA_BASE + IEQ_PAGE * PAGE, "ieq");
    assert_eq!(qi.u32_at(48), 1, "dmbs_owned");
    assert_eq!(qi.u32_at(64 - 4), 1, "one VLAN id (0x1fff)");
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
    assert!(g.unreg_dmb(dmb.token).ok());
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
    assert!(g.command(opcode::REG_DMB, &req).ok());
    let req = Guest::reg_dmb_request(IOVA_BASE + 104 * PAGE, 16384, 40, 1);
    assert_eq!(g.command(opcode::REG_DMB, &req).ret, 0x0005);
}

#[test]
fn vlan_commands_succeed() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    for op in [opcode::SET_VLAN, opcode::RESET_VLAN] {
        assert!(g.command(op, &[]).ok());
    }
    assert!(g.command(opcode::ADD_VLAN_ID, &5u64.to_be_bytes()).ok());
    assert!(g.command(opcode::DEL_VLAN_ID, &5u64.to_be_bytes()).ok());
}

#[test]
fn unreg_sba_and_ieq_then_again_gives_ism_error() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    assert!(g.command(opcode::UNREG_IEQ, &[]).ok());
    assert!(g.command(opcode::UNREG_SBA, &[]).ok());
    assert_eq!(g.command(opcode::UNREG_SBA, &[]).ret, ISM_ERROR);
    assert_eq!(g.command(opcode::UNREG_IEQ, &[]).ret, ISM_ERROR);
}

#[test]
fn signal_ieq_reaches_the_peer_with_sender_gid_and_info() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let b = m.guest(1);
    let gid_b = default_gid(CHID, 1);
    let mut p = gid_b.to_be_bytes().to_vec();
    p.extend_from_slice(&1u32.to_be_bytes());
    p.extend_from_slice(&0x83u32.to_be_bytes());
    p.extend_from_slice(&0x0102_0304_0506_0001u64.to_be_bytes());
    assert!(a.command(opcode::SIGNAL_IEQ, &p).ok());
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
        let mut p = default_gid(CHID, 1).to_be_bytes().to_vec();
        p.extend_from_slice(&0u32.to_be_bytes());
        p.extend_from_slice(&code.to_be_bytes());
        p.extend_from_slice(&0u64.to_be_bytes());
        assert!(a.command(opcode::SIGNAL_IEQ, &p).ok());
        idx.push(b.ieq_idx());
    }
    assert_eq!(&idx[13..17], &[14, 15, 1, 2]);
    assert_eq!(b.ieq_entry(1).1, 16, "17th event in slot 1");
    assert_eq!(b.interrupts(), 0, "trigger_irq 0 raises no interrupt");
}
