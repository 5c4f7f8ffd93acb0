//! Inputs the fuzz targets (device/fuzz, docs/fuzzing.md) found wrong, reduced to what
//! the device did. Each test drives the backend the way the target did, without a socket.

use std::sync::Arc;

use ism_emu::backend::IsmBackend;
use ism_emu::default_gid;
use ism_emu::fabric::Fabric;
use ism_emu::ism::opcodes::Opcode;
use ism_emu::ism::wire::ReqHeader;
use ism_emu::pci::Bar;
use ism_emu::testkit::rig::Recorder;
use ism_emu::transport::Device;
use zerocopy::big_endian::{U16, U32};
use zerocopy::IntoBytes;

fn one_function() -> (Arc<Fabric>, IsmBackend) {
    let fabric = Arc::new(Fabric::new(
        0x1234,
        vec![("ism0".into(), default_gid(0x1234, 0))],
        Arc::new(Recorder::default()),
    ));
    let backend = IsmBackend::new(Arc::clone(&fabric), 0);
    (fabric, backend)
}

/// fuzz target `command`: a READ_GID whose header says 16 bytes answered ret 2 but was
/// neither a command nor a failed one in the counters, so the host's tables hid it.
#[test]
fn a_command_that_does_not_decode_counts_as_a_failed_command() {
    let (fabric, mut backend) = one_function();
    let header = ReqHeader {
        cmd: U32::new(Opcode::ReadGid.code()),
        reserved: U16::ZERO,
        len: U16::new(16),
    };
    let area = Bar::Command.index();
    backend
        .region_write(area, 0, header.as_bytes(), false)
        .unwrap();
    let mut response = [0; 8];
    backend.region_read(area, 0, &mut response).unwrap();
    assert_eq!(response[4..6], [0, 2], "ret 2: wrong length");
    let counters = &fabric.function_views()[0].counters;
    assert_eq!((counters.commands, counters.command_errors), (1, 1));
}

/// fuzz target `function` (campaign of 30 November): a guest registered a DMB over its own
/// SBA and its peer moved into it with the signal flag. The device wrote the data, then
/// set the summary and DMB bits in the SBA, i.e. inside the DMB: right, as the guest put
/// them there; the target's check ("the move's bytes are in the DMB") did not allow for
/// it and reported a crash. Pinned here: the data lands, the bits are ORed over it, and
/// nothing outside the move changes.
#[test]
fn a_signalled_move_into_a_dmb_over_the_owners_sba_leaves_the_sba_bits_in_it() {
    use ism_emu::ism::command::{Command, DmbRequest, Response};
    use ism_emu::testkit::rig::{Rig, BASE};
    use ism_emu::testkit::window;

    let rig = Rig::new(2);
    let request = DmbRequest {
        iova: BASE, // the owner's SBA
        len: 4096,
        sba_idx: 32,
        vlan_valid: 0,
        vlan_id: 0,
        rgid: rig.gid(0),
    };
    let Ok(Response::Token(token)) = rig.fabric.execute(1, Command::RegDmb(request)) else {
        panic!("REG_DMB over the SBA refused");
    };
    let before = rig.ram(1, 0, 8192);
    rig.move_data(0, window(token, 0, true), &[0x45; 64])
        .unwrap();
    let after = rig.ram(1, 0, 8192);
    let mut expected = before.clone();
    expected[..64].fill(0x45);
    expected[0] |= 0x80; // summary bit
    expected[4 + 32 / 8] |= 0x80; // DMB 32's bit
    expected[256 + 2 * 32] |= 0x80; // DMB 32's element mask (element 0), big-endian u16
    assert_eq!(
        after[..64],
        expected[..64],
        "the data, with the SBA bits over it"
    );
    assert_eq!(after, expected, "nothing else changed");
}
