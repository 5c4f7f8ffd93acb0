//! The seed corpus, generated (`cargo run --bin gen_seeds`), never edited by hand.
//!
//! `command` and `vfio_user_wire` take raw bytes, so their seeds are what the driver and
//! QEMU send: the probe, DMB registration for a peer, queries, SIGNAL_IEQ, unregistration,
//! and a few hostile requests. `function` and `cdc_observer` decode their input with
//! `arbitrary`, whose format is not worth writing by hand: their seeds are fixed
//! pseudo-random byte strings (any bytes decode), and both targets start from functions
//! that already ran the driver's probe.

use ism_emu::ism::wire::ReadGidRequest;
use ism_emu::pci::Bar;
use ism_emu::testkit::{cmd, msg};
use zerocopy::little_endian::{U32 as LeU32, U64 as LeU64};
use zerocopy::IntoBytes;

use crate::{gid, wire, BASE, DMB_AT, IEQ_AT, PAGE, SBA_AT};

type Seeds = Vec<(String, Vec<u8>)>;

/// Every target's seeds.
pub fn all() -> Vec<(&'static str, Seeds)> {
    vec![
        ("command", command()),
        ("function", pseudo_random(0x5eed_0001, 8, 600)),
        ("cdc_observer", pseudo_random(0x5eed_0002, 8, 400)),
        ("vfio_user_wire", vfio_user_wire()),
    ]
}

/// `command` frames: `[function][n][n bytes]`, one store at offset 0 each.
fn frames(requests: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (f, bytes) in requests {
        out.push(*f);
        out.push(bytes.len() as u8);
        out.extend_from_slice(bytes);
    }
    out
}

fn command() -> Seeds {
    let first_token = 1u64 << 32;
    let dmb = BASE + DMB_AT;
    let probe: Vec<(u8, Vec<u8>)> = wire::probe_sequence(BASE + SBA_AT, BASE + IEQ_AT)
        .into_iter()
        .map(|r| (0, r))
        .collect();
    // ism1 and ism0 register a DMB each for the other, as a connection's two sides do.
    let connection = vec![
        (1, wire::query_rgid(gid(0), 1, 0x1fff)),
        (1, wire::reg_dmb(dmb, 16384, 32, gid(0))),
        (0, wire::reg_dmb(dmb, 16384, 32, gid(1))),
        (0, wire::query_info()),
        (2, wire::reg_dmb(dmb + 4 * PAGE, 4096, 33, gid(2))),
    ];
    let teardown = vec![
        (1, wire::reg_dmb(dmb, 16384, 32, gid(0))),
        (1, wire::signal_ieq(gid(0), 1, 0x80, 0x0001_0000_0000_0080)),
        (1, wire::unreg_dmb(first_token)),
        (1, wire::unreg_dmb(first_token)),
        (1, wire::unreg_ieq()),
        (1, wire::unreg_sba()),
        (1, wire::query_info()),
    ];
    let vlans = vec![
        (0, wire::set_vlan()),
        (0, wire::add_vlan_id(5)),
        (0, wire::reset_vlan()),
        (0, wire::del_vlan_id(5)),
    ];
    let mut bad_len = wire::read_gid();
    bad_len[7] = 16;
    let hostile = vec![
        (0, bad_len),
        (0, vec![0, 0, 0, 0x0c, 0, 0, 0, 8]),
        (0, wire::reg_dmb(dmb, 0, 32, gid(1))),
        (0, wire::reg_dmb(dmb, 16384, 31, gid(1))),
        (0, wire::reg_dmb(BASE - PAGE, 16384, 34, gid(1))),
        (0, wire::reg_dmb(dmb, 16384, 35, gid(1))),
        (0, wire::reg_dmb(dmb + PAGE, 16384, 36, gid(1))),
        (0, wire::reg_sba(u64::MAX - 100)),
        (0, wire::reg_ieq(BASE + IEQ_AT, 100)),
    ];
    vec![
        ("probe".into(), frames(&probe)),
        ("connection".into(), frames(&connection)),
        ("teardown".into(), frames(&teardown)),
        ("vlans".into(), frames(&vlans)),
        ("hostile".into(), frames(&hostile)),
    ]
}

fn message(id: u16, command: u16, payload: &[u8]) -> Vec<u8> {
    ism_emu::testkit::message(id, command, 0, payload)
}

fn version() -> Vec<u8> {
    // Major 0, minor 2 (little-endian), then the capabilities QEMU sends.
    let mut payload = vec![0, 0, 2, 0];
    payload.extend_from_slice(b"{\"capabilities\":{\"max_msg_fds\":16}}\0");
    message(0, cmd::VERSION, &payload)
}

fn region_access(region: u32, offset: u64, count: u32) -> Vec<u8> {
    msg::RegionAccess {
        offset: LeU64::new(offset),
        region: LeU32::new(region),
        count: LeU32::new(count),
    }
    .as_bytes()
    .to_vec()
}

fn vfio_user_wire() -> Seeds {
    let command_bar = Bar::Command.index();
    let mut write = region_access(command_bar, 0, 8);
    write.extend_from_slice(ReadGidRequest::new().as_bytes());
    let read = region_access(command_bar, 0, 16);
    let session = [
        version(),
        message(
            1,
            cmd::DEVICE_GET_INFO,
            &[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ),
        message(2, cmd::REGION_WRITE, &write),
        message(3, cmd::REGION_READ, &read),
        message(4, cmd::DEVICE_RESET, &[]),
    ]
    .concat();
    let huge_read = [
        version(),
        message(1, cmd::REGION_READ, &region_access(command_bar, 0, 1 << 20)),
    ]
    .concat();
    let mut truncated = version();
    truncated.extend_from_slice(&message(1, cmd::REGION_WRITE, &write)[..20]);
    vec![
        ("version".into(), version()),
        ("session".into(), session),
        ("huge_read".into(), huge_read),
        ("truncated".into(), truncated),
    ]
}

/// `count` byte strings of `len` bytes from a fixed xorshift stream.
fn pseudo_random(seed: u64, count: usize, len: usize) -> Seeds {
    let mut x = seed;
    (0..count)
        .map(|i| {
            let bytes = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect();
            (format!("random-{i}"), bytes)
        })
        .collect()
}
