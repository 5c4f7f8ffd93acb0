//! Raw bytes as command-area stores, executed against a fabric of three functions that
//! have probed (SBA, IEQ registered). The input is a list of frames `[function][n][n
//! bytes]`; each frame is one store at offset 0 of that function's command area (a store
//! of 8 bytes or more executes). After the frames every function moves one byte into
//! every registered DMB: only the owner and the granted peer may land.
#![no_main]

use std::sync::Arc;

use ism_emu::testkit::rig::Recorder;
use ism_emu_fuzz::{wire, World, COMMAND_REGION};
use libfuzzer_sys::fuzz_target;

const FUNCTIONS: usize = 3;

fuzz_target!(|data: &[u8]| {
    let mut world = World::probed(FUNCTIONS, Arc::new(Recorder::default()));
    let mut rest = data;
    while rest.len() >= 2 {
        let f = usize::from(rest[0]) % FUNCTIONS;
        let n = usize::from(rest[1]).min(rest.len() - 2);
        let store = &rest[2..2 + n];
        rest = &rest[2 + n..];
        world.op_region_write(f, COMMAND_REGION, 0, store);
        if store.len() >= 8 {
            let op = u32::from_be_bytes(store[..4].try_into().unwrap());
            world.read_reply(f).check_shape(op);
        }
    }
    let tokens: Vec<u64> = world.fabric.dmbs().iter().map(|d| d.token).collect();
    for token in tokens {
        for sender in 0..FUNCTIONS {
            let at = wire::move_offset(token, 0, true, 0);
            world.move_data(sender, at, &[0xa5]);
        }
    }
});
