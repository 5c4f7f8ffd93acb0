//! Data moves between functions of one fabric: bytes, SBA bits, interrupts.

mod support;

use ism_emu::default_gid;
use ism_emu::ism::wire::RegDmbResponse;
use support::*;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn one_byte_at_an_odd_offset_lands_exactly() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let dmb = b.reg_dmb(16384, default_gid(CHID, 0));
    assert!(a.move_data(dmb.token, 37, &[0xa5], false).is_ok());
    assert_eq!(b.dmb_bytes(&dmb, 36, 3), vec![0, 0xa5, 0]);
    assert_eq!(b.interrupts(), 0, "no signal without sf");
}

#[test]
fn page_sized_move_at_a_page_boundary() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let dmb = b.reg_dmb(32768, default_gid(CHID, 0));
    let data = pattern(4096, 3);
    assert!(a.move_data(dmb.token, 8192, &data, true).is_ok());
    assert_eq!(b.dmb_bytes(&dmb, 8192, 4096), data);
    assert!(b.sba_signalled(dmb.sba_idx));
}

#[test]
fn multi_chunk_move_signals_once_after_the_last_chunk() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let dmb = b.reg_dmb(65536, default_gid(CHID, 0));
    let data = pattern(10_000, 9);
    assert!(a.move_data(dmb.token, 100, &data, true).is_ok());
    assert_eq!(b.dmb_bytes(&dmb, 100, data.len()), data);
    assert_eq!(b.interrupts(), 1);
    let sba = b.sba();
    assert_eq!(sba[0] & 0x80, 0x80, "summary bit");
    let mask_at = 256 + 2 * dmb.sba_idx as usize;
    assert_eq!(
        &sba[mask_at..mask_at + 2],
        &[0x80, 0x00],
        "dmbe mask for element 0"
    );
}

#[test]
fn signals_accumulate_until_the_guest_acknowledges() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let d1 = b.reg_dmb(16384, default_gid(CHID, 0));
    let d2 = b.reg_dmb(16384, default_gid(CHID, 0));
    a.move_data(d1.token, 0, &[1; 32], true).unwrap();
    a.move_data(d2.token, 0, &[2; 32], true).unwrap();
    assert!(b.sba_signalled(d1.sba_idx) && b.sba_signalled(d2.sba_idx));
    assert_eq!(b.interrupts(), 2);
    b.ack_sba();
    a.move_data(d2.token, 0, &[3; 32], true).unwrap();
    assert!(!b.sba_signalled(d1.sba_idx));
    assert!(b.sba_signalled(d2.sba_idx));
}

#[test]
fn a_function_can_move_into_its_own_dmb() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    let dmb = g.reg_dmb(16384, default_gid(CHID, 0));
    assert!(g.move_data(dmb.token, 32, b"loopback", true).is_ok());
    assert_eq!(g.dmb_bytes(&dmb, 32, 8), b"loopback");
    assert_eq!(g.interrupts(), 1);
}

#[test]
fn three_functions_route_by_token() {
    let m = Machine::start(3);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let mut c = m.guest(2);
    let to_b = b.reg_dmb(16384, default_gid(CHID, 0));
    let to_c = c.reg_dmb(16384, default_gid(CHID, 0));
    a.move_data(to_b.token, 0, b"for b", true).unwrap();
    a.move_data(to_c.token, 0, b"for c", true).unwrap();
    assert_eq!(b.dmb_bytes(&to_b, 0, 5), b"for b");
    assert_eq!(c.dmb_bytes(&to_c, 0, 5), b"for c");
    assert_eq!((b.interrupts(), c.interrupts()), (1, 1));
}

#[test]
fn dmb_scattered_over_non_contiguous_ram_pages() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    // Two IOVA-contiguous pages backed by RAM pages 200 and 100 (reversed).
    let iova = IOVA_BASE + 0x100_0000;
    b.client
        .dma_map(iova, PAGE, &b.ram, 200 * PAGE)
        .unwrap()
        .unwrap();
    b.client
        .dma_map(iova + PAGE, PAGE, &b.ram, 100 * PAGE)
        .unwrap()
        .unwrap();
    let req = Guest::reg_dmb_request(iova, 8192, 50, default_gid(CHID, 0));
    let r = b.command(&req);
    assert!(r.ok());
    let token = r.get::<RegDmbResponse>().unwrap().dmb_tok.get();
    a.move_data(token, 4090, &pattern(12, 1), false).unwrap();
    assert_eq!(
        b.ram.read(200 * PAGE + 4090, 6).unwrap(),
        pattern(12, 1)[..6].to_vec()
    );
    assert_eq!(
        b.ram.read(100 * PAGE, 6).unwrap(),
        pattern(12, 1)[6..].to_vec()
    );
}
