//! Throughput of the emulated device through its real vfio-user socket, beside a raw
//! AF_UNIX baseline that sends the same message sizes in the same request/reply pattern.
//! The ratio is what the device adds on top of the transport.
//!
//! Run with `cargo bench` (or `make bench`). Prints a table; asserts nothing.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ism_emu::fabric::Fabric;
use ism_emu::ism::command::opcode;
use ism_emu::ism::MoveAddress;
use ism_emu::observer::Observer;
use ism_emu::testkit::{Client, GuestRam};
use ism_emu::{default_gid, server};

const IOVA: u64 = 0x1_0000_0000;
const CHID: u16 = 0x1234;
const RUN_FOR: Duration = Duration::from_millis(1500);

/// Runs `op` repeatedly for about RUN_FOR and returns operations per second.
fn rate(mut op: impl FnMut()) -> f64 {
    for _ in 0..200 {
        op();
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < RUN_FOR {
        for _ in 0..100 {
            op();
        }
        n += 100;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// The raw transport: a peer thread that reads `req` bytes and answers `reply` bytes.
fn baseline(exchanges: &[(usize, usize)]) -> f64 {
    let (mut client, mut peer) = UnixStream::pair().unwrap();
    let pattern: Vec<(usize, usize)> = exchanges.to_vec();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 8192];
        'outer: loop {
            for &(req, reply) in &pattern {
                if peer.read_exact(&mut buf[..req]).is_err() {
                    break 'outer;
                }
                if peer.write_all(&buf[..reply]).is_err() {
                    break 'outer;
                }
            }
        }
    });
    let buf = vec![0x5au8; 8192];
    let mut back = vec![0u8; 8192];
    let r = rate(|| {
        for &(req, reply) in exchanges {
            client.write_all(&buf[..req]).unwrap();
            client.read_exact(&mut back[..reply]).unwrap();
        }
    });
    drop(client);
    r
}

fn main() {
    let dir = std::env::temp_dir().join(format!("ism-emu-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let functions = (0..2)
        .map(|i| (format!("ism{i}"), default_gid(CHID, i)))
        .collect();
    let fabric = Arc::new(Fabric::new(CHID, functions, Observer::default()));
    let paths: Vec<_> = (0..2).map(|i| dir.join(format!("ism{i}.sock"))).collect();
    for (i, p) in paths.iter().enumerate() {
        server::spawn_function(Arc::clone(&fabric), i, p).unwrap();
    }
    let mut sender = Client::connect(&paths[0]).unwrap();
    let mut owner = Client::connect(&paths[1]).unwrap();
    let ram = GuestRam::new(4 << 20);
    owner.dma_map_pages(IOVA, 768, &ram, 0).unwrap();
    owner.set_irq_eventfd(1).unwrap();
    let cmd = |c: &mut Client, op: u32, payload: &[u8]| -> Vec<u8> {
        if !payload.is_empty() {
            c.region_write(2, 8, payload).unwrap().unwrap();
        }
        let mut h = op.to_be_bytes().to_vec();
        h.extend_from_slice(&0u16.to_be_bytes());
        h.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        c.region_write(2, 0, &h).unwrap().unwrap();
        let resp = c.region_read(2, 0, 8).unwrap().unwrap();
        assert_eq!(&resp[4..6], &[0, 0], "command {op:#x} failed");
        let len = u16::from_be_bytes([resp[6], resp[7]]) as u64;
        let mut out = Vec::new();
        let mut off = 8;
        while off < len {
            out.extend(c.region_read(2, off, 8).unwrap().unwrap());
            off += 8;
        }
        out
    };
    cmd(&mut owner, opcode::REG_SBA, &IOVA.to_be_bytes());
    let mut req = (IOVA + 0x10_0000).to_be_bytes().to_vec();
    req.extend_from_slice(&(1u32 << 20).to_be_bytes());
    req.extend_from_slice(&32u32.to_be_bytes());
    req.extend_from_slice(&1u32.to_be_bytes());
    req.extend_from_slice(&0x1fffu32.to_be_bytes());
    req.extend_from_slice(&default_gid(CHID, 0).to_be_bytes());
    let token = u64::from_be_bytes(
        cmd(&mut owner, opcode::REG_DMB, &req)[..8]
            .try_into()
            .unwrap(),
    );

    println!("ism-emu throughput through the vfio-user socket (one sender, one owner, 1 MiB DMB)");
    println!();
    println!(
        "{:<22} {:>12} {:>10} {:>14} {:>10} {:>8}",
        "operation", "device op/s", "MB/s", "AF_UNIX op/s", "MB/s", "ratio"
    );
    // A region write is a 16-byte header + 16-byte access header + data; the reply is 32.
    for size in [64usize, 1024, 4096] {
        let data = vec![0xa5u8; size];
        let mut offset = 0u32;
        let dev = rate(|| {
            let addr = MoveAddress {
                token,
                dmbe: 0,
                signal: true,
                offset,
            };
            sender
                .region_write(0, addr.encode(), &data)
                .unwrap()
                .unwrap();
            offset = (offset + size as u32) % (1 << 20);
        });
        let raw = baseline(&[(32 + size, 32)]);
        let mb = |r: f64| r * size as f64 / 1e6;
        println!(
            "{:<22} {:>12.0} {:>10.1} {:>14.0} {:>10.1} {:>7.2}x",
            format!("move {size} B (sf=1)"),
            dev,
            mb(dev),
            raw,
            mb(raw),
            raw / dev
        );
    }
    // READ_GID as the driver does it: header store, response header load, one 8-byte load.
    let dev = rate(|| {
        cmd(&mut sender, opcode::READ_GID, &[]);
    });
    let raw = baseline(&[(40, 32), (32, 40), (32, 40)]);
    println!(
        "{:<22} {:>12.0} {:>10} {:>14.0} {:>10} {:>7.2}x",
        "command READ_GID",
        dev,
        "-",
        raw,
        "-",
        raw / dev
    );
    println!();
    println!(
        "ratio = AF_UNIX rate / device rate (1.00x: the device adds nothing to the transport)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
