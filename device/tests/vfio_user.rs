//! The vfio-user message loop over real sockets: what a waited and a posted move answer,
//! and what any malformed message gets (an error reply or a clean disconnect, never a
//! lost framing).

mod support;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::time::Duration;

use ism_emu::default_gid;
use ism_emu::testkit::{msg, request_header};
use ism_emu::transport::wire::{self, command as cmd, flags};
use support::*;
use vmm_sys_util::eventfd::EventFd;
use zerocopy::{FromBytes, IntoBytes};

const EINVAL: u32 = 22;
const E2BIG: u32 = 7;
const ENOSYS: u32 = 38;
const EIO: u32 = 5;

fn header(command: u16, body_len: usize, flag_bits: u32, id: u16) -> msg::Header {
    request_header(id, command, body_len, flag_bits)
}

#[test]
fn a_waited_move_that_fails_gets_an_error_and_the_next_signal_lands_and_interrupts() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let dmb = b.reg_dmb(16384, default_gid(CHID, 0));
    // Past the end of the DMB, and to a token that names no DMB: as on ISM, the store
    // fails at once (QEMU gives the guest cc 1), whether or not it signals.
    assert_eq!(
        a.store_move(dmb.token, 0, false, 16380, b"overrun"),
        Err(EIO)
    );
    assert_eq!(a.store_move(0x99 << 32, 0, false, 0, b"nobody"), Err(EIO));
    assert_eq!(
        a.store_move(dmb.token, 0, true, 16380, b"overrun"),
        Err(EIO)
    );
    assert_eq!(b.interrupts(), 0, "a failed move interrupted");
    // Nothing is held: the next valid signalling move lands, sets the SBA bit and raises
    // the interrupt.
    assert!(a.move_data(dmb.token, 0, &cdc(0), true).is_ok());
    assert_eq!(b.dmb_bytes(&dmb, 0, 32), cdc(0));
    assert!(b.sba_signalled(dmb.sba_idx));
    assert_eq!(b.interrupts(), 1);
    let c = &m.fabric.function_views()[0].counters;
    assert_eq!((c.moves_held, c.moves_rejected), (0, 3));
}

#[test]
fn the_same_move_posted_gets_no_reply_and_its_failure_is_held() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let dmb = b.reg_dmb(16384, default_gid(CHID, 0));
    assert!(a.move_data(dmb.token, 0, &cdc(0), true).is_ok());
    assert_eq!(b.interrupts(), 1);
    a.post_move(dmb.token, false, 16380, b"overrun");
    next_reply_is_the_next_commands(&mut a);
    // Held (docs/device.md, "Posted moves"): every signalling move of this sender into
    // the DMB fails and lands nothing, until the owner resets the DMB's CDC slot.
    for _ in 0..2 {
        assert_eq!(
            a.store_move(dmb.token, 0, true, 0, &cdc(CDC_CLOSED)),
            Err(EIO)
        );
        assert_eq!(b.dmb_bytes(&dmb, 0, 32), cdc(0));
    }
    assert_eq!(b.interrupts(), 0);
    b.ram.write(dmb.ram_offset, &[0u8; 32]).unwrap();
    assert!(a.move_data(dmb.token, 0, &cdc(0), true).is_ok());
    assert_eq!(b.interrupts(), 1);
    let c = &m.fabric.function_views()[0].counters;
    assert_eq!(c.moves_held, 1);
}

#[test]
fn the_version_reply_announces_the_limits_and_each_experimental_capability_if_proposed() {
    let m = Machine::start(1);
    let mut g = m.connect(0);
    let mut version = |client_caps: &str| {
        let mut payload = [0u16.to_le_bytes(), 1u16.to_le_bytes()].concat();
        payload.extend_from_slice(client_caps.as_bytes());
        payload.push(0);
        let body = g.client.call(cmd::VERSION, &payload, &[]).unwrap().unwrap();
        let json = body[4..].strip_suffix(&[0]).expect("NUL-terminated");
        let v: serde_json::Value = serde_json::from_slice(json).unwrap();
        v["capabilities"].clone()
    };
    let caps = version(r#"{"capabilities":{"max_msg_fds":8}}"#);
    assert_eq!(caps["max_msg_fds"], 1);
    assert_eq!(caps["max_data_xfer_size"], 4096);
    assert_eq!(caps.get(wire::CAP_ISM_POSTED_MOVES), None, "not proposed");
    assert_eq!(caps.get(wire::CAP_WAITED_CHANNEL), None, "not proposed");
    let caps = version(r#"{"capabilities":{"x_ism_posted_moves":true}}"#);
    assert_eq!(caps[wire::CAP_ISM_POSTED_MOVES], true);
    let caps = version(r#"{"capabilities":{"x_waited_channel":true}}"#);
    assert_eq!(caps[wire::CAP_WAITED_CHANNEL], true);
    assert_eq!(caps.get(wire::CAP_ISM_POSTED_MOVES), None, "not proposed");
    // Capabilities that are not a JSON object are refused.
    let mut bad = [0u16.to_le_bytes(), 1u16.to_le_bytes()].concat();
    bad.extend_from_slice(b"[1,2\0");
    assert_eq!(g.client.call(cmd::VERSION, &bad, &[]).unwrap(), Err(EINVAL));
}

#[test]
fn no_reply_messages_get_no_reply_whatever_their_outcome() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    for (command, body) in [
        (cmd::DEVICE_GET_INFO, vec![0u8; 16]),
        (cmd::DEVICE_GET_REGION_INFO, vec![0u8; 4]),
        (cmd::REGION_READ, vec![0u8; 16]),
        (77, vec![1u8; 40]),
        (cmd::DMA_UNMAP, vec![0u8; 3]),
    ] {
        g.client.send(command, &body, &[], flags::NO_REPLY).unwrap();
    }
    next_reply_is_the_next_commands(&mut g);
}

#[test]
fn malformed_messages_get_an_error_reply_and_the_stream_stays_in_sync() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    let cases: [(u16, Vec<u8>, u32); 8] = [
        // Fixed bodies shorter than their command needs.
        (cmd::DMA_MAP, vec![0; 8], EINVAL),
        (cmd::DMA_UNMAP, vec![0; 8], EINVAL),
        (cmd::DEVICE_GET_REGION_INFO, vec![0; 4], EINVAL),
        (cmd::DEVICE_SET_IRQS, vec![0; 12], EINVAL),
        (cmd::REGION_READ, vec![0; 15], EINVAL),
        // A region write whose count disagrees with the message's size.
        (
            cmd::REGION_WRITE,
            {
                let access = msg::RegionAccess {
                    offset: 0.into(),
                    region: CMD_BAR.into(),
                    count: 64.into(),
                };
                [access.as_bytes(), &[0u8; 8]].concat()
            },
            EINVAL,
        ),
        // A command that no version of the protocol has, with a payload.
        (77, vec![0xaa; 100], ENOSYS),
        // A region index past the table.
        (
            cmd::DEVICE_GET_REGION_INFO,
            {
                let mut info = vec![0u8; 32];
                info[0..4].copy_from_slice(&32u32.to_le_bytes());
                info[8..12].copy_from_slice(&9u32.to_le_bytes());
                info
            },
            EINVAL,
        ),
    ];
    for (command, body, errno) in cases {
        let reply = g.client.call(command, &body, &[]).unwrap();
        assert_eq!(
            reply,
            Err(errno),
            "command {command} with {} bytes",
            body.len()
        );
    }
    next_reply_is_the_next_commands(&mut g);
}

#[test]
fn an_oversized_message_is_drained_and_refused() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    // A region write of 1 MiB: more than any PCISTB, so more than the server reads.
    let access = msg::RegionAccess {
        offset: 0.into(),
        region: CMD_BAR.into(),
        count: (1u32 << 20).into(),
    };
    let payload = [access.as_bytes(), &vec![0x55u8; 1 << 20][..]].concat();
    assert_eq!(
        g.client.call(cmd::REGION_WRITE, &payload, &[]).unwrap(),
        Err(E2BIG)
    );
    next_reply_is_the_next_commands(&mut g);
}

#[test]
fn a_header_that_arrives_in_pieces_is_read_whole() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    let access = msg::RegionAccess {
        offset: 0.into(),
        region: 7.into(),
        count: 4.into(),
    };
    let h = header(cmd::REGION_READ, access.as_bytes().len(), 0, 4242);
    let bytes = [h.as_bytes(), access.as_bytes()].concat();
    for piece in bytes.chunks(5) {
        g.client.send_raw(piece).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    let reply = g.client.recv_reply(4242).unwrap().unwrap();
    // The vendor and device IDs, little-endian as config space is.
    assert_eq!(reply[16..20], [0x14, 0x10, 0xed, 0x04]);
    next_reply_is_the_next_commands(&mut g);
}

#[test]
fn a_reply_from_the_client_is_ignored() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    let h = header(cmd::DMA_MAP, 8, flags::TYPE_REPLY, 7);
    g.client
        .send_raw(&[h.as_bytes(), &[0u8; 8]].concat())
        .unwrap();
    next_reply_is_the_next_commands(&mut g);
}

#[test]
fn a_descriptor_on_a_message_that_takes_none_is_refused() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    let efd = EventFd::new(0).unwrap();
    let reply = g
        .client
        .call(cmd::DEVICE_RESET, &[], &[efd.as_raw_fd()])
        .unwrap();
    assert_eq!(reply, Err(EINVAL));
    next_reply_is_the_next_commands(&mut g);
}

#[test]
fn more_descriptors_than_announced_are_refused_and_the_stream_stays_in_sync() {
    let m = Machine::start(2);
    let mut a = m.guest(0);
    let (e1, e2) = (EventFd::new(0).unwrap(), EventFd::new(0).unwrap());
    let set = msg::SetIrqs {
        argsz: 20.into(),
        flags: (0x4u32 | 0x20).into(),
        index: MSI_INDEX.into(),
        start: 0.into(),
        count: 2.into(),
    };
    let reply = a
        .client
        .call(
            cmd::DEVICE_SET_IRQS,
            set.as_bytes(),
            &[e1.as_raw_fd(), e2.as_raw_fd()],
        )
        .unwrap();
    assert_eq!(reply, Err(EINVAL));
    next_reply_is_the_next_commands(&mut a);
}

#[test]
fn a_size_shorter_than_the_header_ends_the_connection() {
    let m = Machine::start(1);
    let g = m.guest(0);
    let mut h = header(cmd::DEVICE_RESET, 0, 0, 1);
    h.size = 8.into();
    let mut client = g.client;
    client.send_raw(h.as_bytes()).unwrap();
    let mut stream = client.stream();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    assert!(matches!((&mut stream).read_to_end(&mut rest), Ok(0)));
    // The socket serves the next client.
    let mut next = m.guest(0);
    next_reply_is_the_next_commands(&mut next);
}

#[test]
fn dma_unmap_echoes_the_request() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    let body = g
        .client
        .dma_unmap(IOVA_BASE + 64 * PAGE, PAGE)
        .unwrap()
        .unwrap();
    let echo = msg::DmaUnmap::read_from_bytes(&body).unwrap();
    assert_eq!(echo.address.get(), IOVA_BASE + 64 * PAGE);
    assert_eq!(echo.size.get(), PAGE);
}

#[test]
fn irq_info_offers_msi_and_msix_and_refuses_the_error_interrupt_like_vfio_pci() {
    let m = Machine::start(1);
    let mut g = m.guest(0);
    let ask = |g: &mut Guest, index: u32| {
        let q = wire::IrqInfo {
            argsz: (std::mem::size_of::<wire::IrqInfo>() as u32).into(),
            flags: 0.into(),
            index: index.into(),
            count: 0.into(),
        };
        g.client
            .call(cmd::DEVICE_GET_IRQ_INFO, q.as_bytes(), &[])
            .unwrap()
            .map(|body| wire::IrqInfo::read_from_bytes(&body).unwrap().count.get())
    };
    // INTx, MSI, MSI-X, error, request: the kernel's vfio-pci gives a function without a
    // PCI Express capability no error interrupt, and QEMU warns if one is offered empty.
    assert_eq!(ask(&mut g, 0), Ok(0));
    assert_eq!(ask(&mut g, 1), Ok(1));
    assert_eq!(ask(&mut g, 2), Ok(1));
    assert_eq!(ask(&mut g, 3), Err(EINVAL));
    assert_eq!(ask(&mut g, 4), Ok(0));
    assert_eq!(ask(&mut g, 5), Err(EINVAL));
}
