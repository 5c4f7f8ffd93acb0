//! Inputs the fuzz targets (device/fuzz, docs/fuzzing.md) found wrong, reduced to what
//! the device did. Each test drives the backend the way the target did, without a socket.

use std::sync::Arc;

use ism_emu::backend::IsmBackend;
use ism_emu::default_gid;
use ism_emu::fabric::Fabric;
use ism_emu::ism::wire::{self, ReqHeader};
use ism_emu::pci::Bar;
use ism_emu::testkit::rig::Recorder;
use vfio_user::ServerBackend;
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
        cmd: U32::new(wire::opcode::READ_GID),
        reserved: U16::ZERO,
        len: U16::new(16),
    };
    let area = Bar::Command.index();
    backend.region_write(area, 0, header.as_bytes()).unwrap();
    let mut response = [0; 8];
    backend.region_read(area, 0, &mut response).unwrap();
    assert_eq!(response[4..6], [0, 2], "ret 2: wrong length");
    let counters = &fabric.function_views()[0].counters;
    assert_eq!((counters.commands, counters.command_errors), (1, 1));
}
