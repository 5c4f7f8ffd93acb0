//! Throughput of the emulated device through its real vfio-user socket, beside a raw
//! AF_UNIX baseline that sends the same message sizes in the same request/reply pattern.
//! The ratio is what the device adds on top of the transport.
//!
//! Run with `cargo bench` (or `make bench`). Prints a table; asserts nothing.
//!
//! Every thread runs on one CPU unless `BENCH_CPU=free`: that is how `make bench-guests`
//! places a guest's QEMU and the thread serving its function, and it keeps the VM's
//! cross-CPU wake-ups (tens of µs, varying) out of a round trip of ~15 µs. `BENCH_CPU=N`
//! picks the CPU (default: the first this process may use).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ism_emu::fabric::Fabric;
use ism_emu::ism::wire::{ReadGidRequest, RegDmbRequest, RegDmbResponse, RegSbaRequest, Request};
use ism_emu::ism::MoveAddress;
use ism_emu::observer::Observer;
use ism_emu::testkit::{Client, CommandReply, GuestRam, VLAN_SMCD_V2};
use ism_emu::{default_gid, server};
use vmm_sys_util::tempdir::TempDir;

const IOVA: u64 = 0x1_0000_0000;
const CHID: u16 = 0x1234;
/// Each measurement alternates the device and the raw transport this many times, for
/// SLICE each, so that a busy or noisy host (a VM's wake-ups, other work) weighs on both
/// alike; the table gives medians over the rounds.
const ROUNDS: usize = 21;
const SLICE: Duration = Duration::from_millis(250);

/// Puts this thread, and so every thread it starts, on the CPU `BENCH_CPU` names; returns
/// the placement for the table's heading.
fn place() -> String {
    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let wanted = std::env::var("BENCH_CPU").unwrap_or_default();
    if wanted == "free" {
        return "placement left to the scheduler (BENCH_CPU=free)".into();
    }
    let allowed = sched_getaffinity(Pid::from_raw(0)).expect("sched_getaffinity");
    let cpu = match wanted.parse::<usize>() {
        Ok(cpu) => cpu,
        Err(_) if wanted.is_empty() => (0..CpuSet::count())
            .find(|&c| allowed.is_set(c).unwrap_or(false))
            .expect("no CPU allowed"),
        Err(_) => panic!("BENCH_CPU={wanted}: a CPU number or `free`"),
    };
    let mut one = CpuSet::new();
    one.set(cpu).expect("BENCH_CPU out of range");
    sched_setaffinity(Pid::from_raw(0), &one).expect("sched_setaffinity");
    format!("every thread on CPU {cpu}, as a guest and its function's thread in make bench-guests (BENCH_CPU=free: no placement)")
}

/// Runs `op` repeatedly for about SLICE and returns operations per second.
fn rate(op: &mut dyn FnMut()) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < SLICE {
        for _ in 0..50 {
            op();
        }
        n += 50;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The device's and the raw transport's rates (op/s, medians over the rounds) and the
/// ratio raw/device (median and range of the rounds' ratios).
struct Compared {
    device: f64,
    raw: f64,
    ratio: f64,
    ratio_lo: f64,
    ratio_hi: f64,
}

fn compare(device: &mut dyn FnMut(), raw: &mut dyn FnMut()) -> Compared {
    for _ in 0..200 {
        device();
        raw();
    }
    let (mut dev, mut base, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let d = rate(device);
        let r = rate(raw);
        dev.push(d);
        base.push(r);
        ratios.push(r / d);
    }
    let ratio = median(&mut ratios);
    Compared {
        device: median(&mut dev),
        raw: median(&mut base),
        ratio,
        ratio_lo: ratios[0],
        ratio_hi: ratios[ratios.len() - 1],
    }
}

/// The raw transport: a peer thread that reads `req` bytes and answers `reply` bytes, in
/// the given pattern; the returned closure runs one pattern from the client's side.
fn baseline(exchanges: &[(usize, usize)]) -> impl FnMut() {
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
    let exchanges = exchanges.to_vec();
    let buf = vec![0x5au8; 8192];
    let mut back = vec![0u8; 8192];
    move || {
        for &(req, reply) in &exchanges {
            client.write_all(&buf[..req]).unwrap();
            client.read_exact(&mut back[..reply]).unwrap();
        }
    }
}

/// One command that must succeed.
fn command<R: Request>(client: &mut Client, request: &R) -> CommandReply {
    let reply = client.ism_command(request).unwrap();
    assert_eq!(reply.ret, 0, "command {:#x} failed", R::OPCODE);
    reply
}

fn main() {
    let placement = place();
    let dir = TempDir::new_with_prefix(std::env::temp_dir().join("ism-emu-bench-")).unwrap();
    let functions = (0..2)
        .map(|i| (format!("ism{i}"), default_gid(CHID, i)))
        .collect();
    let fabric = Arc::new(Fabric::new(CHID, functions, Arc::new(Observer::default())));
    let paths: Vec<_> = (0..2)
        .map(|i| dir.as_path().join(format!("ism{i}.sock")))
        .collect();
    for (i, p) in paths.iter().enumerate() {
        server::spawn_function(Arc::clone(&fabric), i, p).unwrap();
    }
    let mut sender = Client::connect(&paths[0]).unwrap();
    let mut owner = Client::connect(&paths[1]).unwrap();
    let ram = GuestRam::new(4 << 20).unwrap();
    owner.dma_map_pages(IOVA, 768, &ram, 0).unwrap();
    owner.set_irq_eventfd(1).unwrap();
    command(&mut owner, &RegSbaRequest::new(IOVA.into()));
    let reg_dmb = RegDmbRequest::new(
        (IOVA + 0x10_0000).into(),
        (1u32 << 20).into(),
        32.into(),
        1.into(),
        (VLAN_SMCD_V2 as u32).into(),
        default_gid(CHID, 0).into(),
    );
    let reply = command(&mut owner, &reg_dmb);
    let token = reply.get::<RegDmbResponse>().unwrap().dmb_tok.get();

    println!("ism-emu throughput through the vfio-user socket (one sender, one owner, 1 MiB DMB)");
    println!(
        "{ROUNDS} alternating rounds of {} ms each, device then AF_UNIX; medians (ratio: median and range of the rounds)",
        SLICE.as_millis()
    );
    println!("{placement}");
    println!();
    println!(
        "{:<22} {:>12} {:>10} {:>14} {:>10} {:>8} {:>13}",
        "operation", "device op/s", "MB/s", "AF_UNIX op/s", "MB/s", "ratio", "(range)"
    );
    let row = |name: String, c: &Compared, size: Option<usize>| {
        let mb = |r: f64| match size {
            Some(size) => format!("{:.1}", r * size as f64 / 1e6),
            None => "-".into(),
        };
        println!(
            "{:<22} {:>12.0} {:>10} {:>14.0} {:>10} {:>7.2}x {:>13}",
            name,
            c.device,
            mb(c.device),
            c.raw,
            mb(c.raw),
            c.ratio,
            format!("{:.2}-{:.2}", c.ratio_lo, c.ratio_hi)
        );
    };
    // A region write is a 16-byte header + 16-byte access header + data; the reply is 32.
    for size in [64usize, 1024, 4096] {
        let data = vec![0xa5u8; size];
        let mut offset = 0u32;
        let mut device = || {
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
        };
        let mut raw = baseline(&[(32 + size, 32)]);
        let c = compare(&mut device, &mut raw);
        row(format!("move {size} B (sf=1)"), &c, Some(size));
    }
    // READ_GID as the driver does it: header store, response header load, one 8-byte load.
    let mut device = || {
        command(&mut sender, &ReadGidRequest::new());
    };
    let mut raw = baseline(&[(40, 32), (32, 40), (32, 40)]);
    let c = compare(&mut device, &mut raw);
    row("command READ_GID".into(), &c, None);
    println!();
    println!(
        "ratio = AF_UNIX rate / device rate (1.00x: the device adds nothing to the transport)"
    );
}
