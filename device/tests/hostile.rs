//! Everything a guest (or a confused client) may do wrong: each gets an error and a log
//! line, never a write outside the targeted DMB, and never harm to the other functions.

mod support;

use ism_emu::default_gid;
use ism_emu::ism::opcodes::Opcode;
use ism_emu::ism::wire;
use ism_emu::testkit::{cmd, msg, request_header, GuestRam};
use support::*;
use zerocopy::IntoBytes;

/// After each abuse, the other functions still move data and get signalled.
fn still_working(a: &mut Guest, b: &mut Guest) {
    let dmb = b.reg_dmb(16384, default_gid(CHID, 0));
    assert!(a.move_data(dmb.token, 64, b"alive", true).is_ok());
    assert_eq!(b.dmb_bytes(&dmb, 64, 5), b"alive");
}

#[test]
fn unknown_opcodes_fail_with_ret_1() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    for op in [0x0c, 0x0d, 0x0f, 0x10, 0x13, 0xffff_ffff] {
        assert_eq!(g.command_with_len(op, &[], 8).ret, 0x0001, "opcode {op:#x}");
    }
}

#[test]
fn wrong_request_lengths_fail_with_ret_2() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    assert_eq!(
        g.command_with_len(Opcode::RegSba.code(), &[0; 8], 8).ret,
        0x0002
    );
    assert_eq!(
        g.command_with_len(Opcode::ReadGid.code(), &[], 4096).ret,
        0x0002
    );
    assert_eq!(
        g.command_with_len(Opcode::RegDmb.code(), &[0; 32], 0xffff)
            .ret,
        0x0002
    );
}

#[test]
fn reg_dmb_on_unmapped_iova_fails() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    let req = Guest::reg_dmb_request(IOVA_BASE + 0x80_0000, 16384, 40, 1);
    assert_eq!(g.command(&req).ret, 0x0004);
}

#[test]
fn reg_dmb_with_absurd_length_fails() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    let req = Guest::reg_dmb_request(IOVA_BASE, u32::MAX, 40, 1);
    assert_eq!(g.command(&req).ret, 0x0003);
}

#[test]
fn reg_sba_on_unmapped_iova_fails() {
    let m = Machine::start(1);
    let mut g = m.connect(0);
    let req = wire::RegSbaRequest::new(0xdead_0000.into());
    assert_eq!(g.command(&req).ret, 0x0004);
}

#[test]
fn move_to_unknown_token_is_rejected() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    assert!(a.move_data(77 << 32, 0, b"x", true).is_err());
    still_working(&mut a, &mut b);
}

#[test]
fn move_past_the_end_of_the_dmb_writes_nothing() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let dmb = b.reg_dmb(16384, default_gid(CHID, 0));
    assert!(a.store_move(dmb.token, 0, true, 16380, &[0xee; 8]).is_err());
    assert_eq!(b.dmb_bytes(&dmb, 16380, 4), vec![0; 4]);
    assert_eq!(
        b.ram.read(dmb.ram_offset + 16384, 4).unwrap(),
        vec![0; 4],
        "neighbour untouched"
    );
    assert_eq!(b.interrupts(), 0);
    still_working(&mut a, &mut b);
}

#[test]
fn move_from_a_gid_the_dmb_was_not_registered_for_is_rejected() {
    let m = Machine::start(3);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let mut c = m.guest(2);
    let dmb = b.reg_dmb(16384, default_gid(CHID, 0));
    assert!(c.move_data(dmb.token, 0, b"intruder", true).is_err());
    assert_eq!(b.dmb_bytes(&dmb, 0, 8), vec![0; 8]);
    still_working(&mut a, &mut b);
}

#[test]
fn move_with_dmbe_index_16_is_rejected() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let dmb = b.reg_dmb(16384, default_gid(CHID, 0));
    assert!(a.store_move(dmb.token, 16, true, 0, b"x").is_err());
    still_working(&mut a, &mut b);
}

#[test]
fn move_after_the_owner_unmapped_its_dmb_fails_cleanly() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let dmb = b.reg_dmb(16384, default_gid(CHID, 0));
    // A partial unmap: the second page of the DMB only.
    b.client
        .dma_unmap(IOVA_BASE + dmb.ram_offset + PAGE, PAGE)
        .unwrap()
        .unwrap();
    assert!(a.move_data(dmb.token, 0, b"first page", false).is_ok());
    // A waited move fails at once, with or without the signal; the first page's signal
    // lands.
    assert!(a
        .move_data(dmb.token, PAGE as u32 + 8, b"second page", false)
        .is_err());
    assert!(a
        .move_data(dmb.token, PAGE as u32 + 8, b"second page", true)
        .is_err());
    assert!(a.move_data(dmb.token, 0, b"cdc", true).is_ok());
    // Posted, the failure is held and fails the signal that would tell the owner to
    // look.
    a.post_move(dmb.token, false, PAGE as u32 + 8, b"second page");
    assert!(a.move_data(dmb.token, 0, b"cdc", true).is_err());
    still_working(&mut a, &mut b);
}

#[test]
fn command_area_access_out_of_range_is_refused_not_a_crash() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    // Refused (the store did not happen), and nothing executes.
    assert!(a
        .client
        .region_write(CMD_BAR, 4090, &[0; 16])
        .unwrap()
        .is_err());
    assert!(a
        .client
        .region_read(CMD_BAR, u64::MAX - 3, 8)
        .unwrap()
        .is_err());
    still_working(&mut a, &mut b);
}

#[test]
fn dma_map_without_fd_and_beyond_the_file_are_refused() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    let no_fd = msg::DmaMap::new(0x2_0000_0000, 4096, 0);
    let reply = g.client.call(cmd::DMA_MAP, no_fd.as_bytes(), &[]);
    assert!(reply.unwrap().is_err());
    assert!(g
        .client
        .dma_map(0x3_0000_0000, 4096, &g.ram, RAM_SIZE)
        .unwrap()
        .is_err());
    assert!(g.read_gid() != 0, "the function still answers");
}

#[test]
fn client_disconnect_mid_message_leaves_others_working_and_notifies_peers() {
    let m = Machine::start(3);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    {
        let mut c = m.guest(2);
        // C registers a DMB for A: A must hear that C went away.
        c.reg_dmb(16384, default_gid(CHID, 0));
        // Half a message header, then the socket closes.
        c.client.send_raw(&[1, 0, 10, 0, 200]).unwrap();
    }
    assert!(eventually(|| a.ieq_idx() == 1), "A got the GID event");
    let (kind, code, tok, _) = a.ieq_entry(0);
    assert_eq!((kind, code, tok), (1, 7, default_gid(CHID, 2)));
    assert_eq!(b.ieq_idx(), 0, "B shared nothing with C and hears nothing");
    still_working(&mut a, &mut b);
}

#[test]
fn reconnect_after_disconnect_starts_from_scratch() {
    let m = Machine::start(2);
    {
        let mut b = m.guest(1);
        b.reg_dmb(16384, default_gid(CHID, 0));
    }
    assert!(eventually(
        || !m.fabric.function_views()[1].attached || m.fabric.dmbs().is_empty()
    ));
    let mut b = m.guest(1);
    let mut a = m.guest(0);
    assert!(
        eventually(|| m.fabric.dmbs().is_empty()),
        "the old DMB was dropped"
    );
    still_working(&mut a, &mut b);
}

#[test]
fn device_reset_drops_dmbs_and_notifies_the_peer() {
    let m = Machine::start(2);
    let a = m.guest(0);
    let mut b = m.guest(1);
    let dmb = b.reg_dmb(16384, default_gid(CHID, 0));
    assert!(b.client.reset().unwrap().is_ok());
    assert_eq!(a.ieq_idx(), 1);
    assert_eq!(a.ieq_entry(0).2, default_gid(CHID, 1));
    let mut a = a;
    assert!(
        a.move_data(dmb.token, 0, b"x", true).is_err(),
        "token gone with the reset"
    );
}

#[test]
fn posted_moves_get_no_reply_and_keep_the_stream_in_sync() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let dmb = b.reg_dmb(16384, default_gid(CHID, 0));
    a.post_move(dmb.token, true, 0, b"posted");
    next_reply_is_the_next_commands(&mut a);
    assert_eq!(b.dmb_bytes(&dmb, 0, 6), b"posted");
}

#[test]
fn a_failed_posted_move_fails_the_signals_into_its_dmb_until_the_owner_resets_it() {
    // The patched QEMU posts moves without the signal flag: no reply may come for them,
    // not even an error. The failure surfaces on the signalling moves into the same
    // DMB, which QEMU waits for: all of them, since any would advertise the lost bytes,
    // until the owner zeroes the DMB for its next connection.
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let dmb = b.reg_dmb(16384, default_gid(CHID, 0));
    let other = b.reg_dmb(16384, default_gid(CHID, 0));
    assert!(a.move_data(dmb.token, 0, &cdc(0), true).is_ok());
    a.post_move(dmb.token, false, 16380, b"overrun");
    next_reply_is_the_next_commands(&mut a);
    assert!(a.move_data(other.token, 0, b"other", true).is_ok());
    assert_eq!(b.dmb_bytes(&other, 0, 5), b"other");
    for _ in 0..2 {
        assert!(a.move_data(dmb.token, 0, &cdc(CDC_CLOSED), true).is_err());
        assert_eq!(
            b.dmb_bytes(&dmb, 0, 32),
            cdc(0),
            "a failed signal landed something"
        );
    }
    b.ram.write(dmb.ram_offset, &[0u8; 32]).unwrap();
    assert!(a.move_data(dmb.token, 0, &cdc(0), true).is_ok());
    still_working(&mut a, &mut b);
}

#[test]
fn a_failed_posted_signalling_move_gets_no_reply_either() {
    // No reply to a no-reply message, not even an error: QEMU would take it for the
    // reply to its next request.
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    a.post_move(99 << 32, true, 0, b"lost");
    next_reply_is_the_next_commands(&mut a);
    still_working(&mut a, &mut b);
}

#[test]
fn reg_ieq_at_the_top_of_the_iova_space_is_refused_not_wrapped() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let top = wire::RegIeqRequest::new(0xffff_ffff_ffff_fff8.into(), 512.into());
    assert_eq!(a.command(&top).ret, 0x0004);
    still_working(&mut a, &mut b);
}

#[test]
fn reg_ieq_needs_the_whole_512_byte_queue_mapped() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    // The last 256 bytes of the mapped pages: the header fits, the entries do not.
    let end = IOVA_BASE + (SBA_PAGE + 2) * PAGE - 256;
    let short = wire::RegIeqRequest::new(end.into(), 512.into());
    assert_eq!(g.command(&short).ret, 0x0004);
}

#[test]
fn a_client_that_ends_inside_a_message_detaches_the_function_like_a_disconnect() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut c = m.guest(1);
    c.reg_dmb(16384, default_gid(CHID, 0));
    // A REGION_WRITE that announces 100 bytes, of which 4 arrive before the client ends.
    let header = request_header(99, cmd::REGION_WRITE, 100 - 16, 0);
    c.client.send_raw(header.as_bytes()).unwrap();
    c.client.send_raw(&[0, 0, 2, 0]).unwrap();
    c.client.shutdown_write().unwrap();
    assert!(eventually(|| a.ieq_idx() == 1), "A got the GID event");
    assert_eq!(a.ieq_entry(0).2, default_gid(CHID, 1));
    assert!(m.fabric.dmbs().is_empty(), "C's DMB was dropped");
    assert!(!m.fabric.function_views()[1].attached);
    drop(c);
    // The next QEMU connects to the same socket and works.
    let mut c = m.guest(1);
    still_working(&mut a, &mut c);
}

#[test]
fn an_oversized_region_read_is_refused_before_it_touches_the_buffer() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    for region in [MOVE_BAR, CMD_BAR, 7] {
        let reply = a.client.region_read(region, 0, 64 << 20).unwrap();
        assert!(reply.is_err(), "region {region}: 64 MiB read answered");
    }
    still_working(&mut a, &mut b);
}

#[test]
fn guest_ram_that_could_shrink_under_a_mapping_is_refused() {
    let m = Machine::start(1);
    let mut g = m.connect(0);
    // A truncated memfd would turn the next move into SIGBUS for the whole emulator.
    for ram in [GuestRam::unsealed(RAM_SIZE), GuestRam::tmpfs(RAM_SIZE)] {
        let ram = ram.unwrap();
        let reply = g.client.dma_map(IOVA_BASE, PAGE, &ram, 0).unwrap();
        assert!(reply.is_err(), "unsealed guest RAM mapped");
    }
    let sealed = GuestRam::new(RAM_SIZE).unwrap();
    assert!(sealed.truncate(0).is_err(), "the seal holds");
    assert!(g
        .client
        .dma_map(IOVA_BASE, PAGE, &sealed, 0)
        .unwrap()
        .is_ok());
}

#[test]
fn set_irqs_with_a_pipe_instead_of_an_eventfd_is_refused() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    // A pipe that nobody reads fills up, and a blocking write would stall every guest.
    let (_reader, writer) = std::io::pipe().unwrap();
    let set = msg::SetIrqs {
        argsz: (std::mem::size_of::<msg::SetIrqs>() as u32).into(),
        flags: (0x4 | 0x20).into(),
        index: MSI_INDEX.into(),
        start: 0.into(),
        count: 1.into(),
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&writer);
    let reply = b.client.call(cmd::DEVICE_SET_IRQS, set.as_bytes(), &[fd]);
    assert!(reply.unwrap().is_err(), "a pipe was taken for an eventfd");
    still_working(&mut a, &mut b);
}

#[test]
fn a_grant_does_not_pass_to_the_next_client_with_the_same_gid() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let dmb = {
        let _b = m.guest(1);
        a.reg_dmb(16384, default_gid(CHID, 1))
    };
    assert!(eventually(|| !m.fabric.function_views()[1].attached));
    // A has not handled the GID event yet; its DMB is still registered for that GID.
    let mut next = m.guest(1);
    assert!(next.move_data(dmb.token, 0, b"not for you", true).is_err());
    assert_eq!(a.dmb_bytes(&dmb, 0, 11), vec![0; 11]);
    // A grant made to the new client works.
    let fresh = a.reg_dmb(16384, default_gid(CHID, 1));
    assert!(next.move_data(fresh.token, 0, b"for you", true).is_ok());
}

#[test]
fn signal_ieq_is_rate_limited_per_sender() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let b = m.guest(1);
    let gid_b = default_gid(CHID, 1);
    let refused = (0..40)
        .filter(|_| a.signal_ieq(gid_b, false, 0x83, 0).ret != 0)
        .count();
    assert!(
        refused >= 20,
        "only {refused} of 40 back-to-back signals refused"
    );
    assert!(b.ieq_idx() > 0, "the first ones went through");
}

#[test]
fn read_only_dma_mappings_are_never_written() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let dmb = b.reg_dmb(16384, default_gid(CHID, 0));
    // QEMU re-maps the DMB's first page read-only (DMA_MAP flags: READ only).
    let mut map = msg::DmaMap::new(IOVA_BASE + dmb.ram_offset, PAGE, dmb.ram_offset);
    map.flags = 1.into();
    let fd = b.ram.fd();
    assert!(b
        .client
        .call(cmd::DMA_MAP, map.as_bytes(), &[fd])
        .unwrap()
        .is_ok());
    assert!(a.move_data(dmb.token, 0, b"into read-only", true).is_err());
    assert_eq!(b.dmb_bytes(&dmb, 0, 14), vec![0; 14]);
    // Nor registered as a place the device writes.
    let req = Guest::reg_dmb_request(IOVA_BASE + dmb.ram_offset, 4096, 100, 1);
    assert_eq!(b.command(&req).ret, 0x0004);
    still_working(&mut a, &mut b);
}

#[test]
fn a_posted_write_out_of_the_command_area_gets_no_reply() {
    // A posted write is never answered, not even a failed one: a reply would be a stray
    // one in QEMU's stream.
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    a.client
        .region_write_posted(CMD_BAR, 4090, &[0xff; 16])
        .unwrap();
    assert_eq!(
        a.read_gid(),
        default_gid(CHID, 0),
        "the next reply is the next command's"
    );
    still_working(&mut a, &mut b);
}
