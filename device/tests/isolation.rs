//! Latency isolation: one hostile guest must not stall the others. A victim function's
//! data-move latency is measured idle and while another function runs each attack of
//! issue 13; the bound is p99 <= max(5 ms, 3 x idle p99) and max < 50 ms, measured in
//! windows as `support::latency` says.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ism_emu::default_gid;
use ism_emu::ism::wire;
use support::latency::{measure, windows};
use support::*;

const MIB: u64 = 1 << 20;

/// Runs `attack` on its own thread until the measurement is done; the measurement may
/// pause it (for a control window) through the flag it is given.
fn during<R>(
    attacker: Guest,
    attack: impl Fn(&mut Guest) + Send + 'static,
    measure: impl FnOnce(&AtomicBool) -> R,
) -> (R, Guest) {
    let stop = Arc::new(AtomicBool::new(false));
    let paused = Arc::new(AtomicBool::new(false));
    let (flag, hold) = (Arc::clone(&stop), Arc::clone(&paused));
    let thread = std::thread::spawn(move || {
        let mut attacker = attacker;
        while !flag.load(Ordering::Relaxed) {
            if hold.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            attack(&mut attacker);
        }
        attacker
    });
    std::thread::sleep(Duration::from_millis(50));
    let stats = measure(&paused);
    stop.store(true, Ordering::Relaxed);
    (stats, thread.join().unwrap())
}

/// Attack 1: many large DMBs of the attacker's own, each closed by a CDC and then left
/// zero but for its last byte, so the zeroing watcher has all of them to look at.
fn closed_dmbs_with_a_dirty_last_byte(m: &Machine, count: u32) -> Guest {
    let mut g = m.connect_with_ram(2, (u64::from(count) + 1) * MIB);
    g.probe();
    let own = default_gid(CHID, 2);
    let base = IOVA_BASE + MIB;
    g.client
        .dma_map(base, u64::from(count) * MIB, &g.ram, MIB)
        .unwrap()
        .unwrap();
    for i in 0..count {
        let iova = base + u64::from(i) * MIB;
        let req = Guest::reg_dmb_request(iova, MIB as u32, 32 + i, own);
        let r = g.command(&req);
        assert_eq!(r.ret, 0, "REG_DMB {i}");
        let token = r.get::<wire::RegDmbResponse>().unwrap().dmb_tok.get();
        g.store_move(token, 0, true, 0, &cdc(0)).unwrap();
        g.store_move(token, 0, true, 0, &cdc(CDC_CLOSED)).unwrap();
        let at = MIB + u64::from(i) * MIB;
        g.ram.write(at, &[0; 32]).unwrap();
        g.ram.write(at + MIB - 1, &[1]).unwrap();
    }
    g
}

/// Attack 2: reopen a closed 1 MiB DMB with a 1-byte move, close it, again and again:
/// each reopen is a reuse the observer checks by reading the whole DMB.
fn reuse_amplifier(m: &Machine) -> (Guest, u64) {
    let mut g = m.connect_with_ram(3, 4 * MIB);
    g.probe();
    g.client
        .dma_map(IOVA_BASE + MIB, MIB, &g.ram, MIB)
        .unwrap()
        .unwrap();
    let req = Guest::reg_dmb_request(IOVA_BASE + MIB, MIB as u32, 32, default_gid(CHID, 3));
    let r = g.command(&req);
    assert_eq!(r.ret, 0);
    let token = r.get::<wire::RegDmbResponse>().unwrap().dmb_tok.get();
    (g, token)
}

#[test]
fn a_hostile_function_does_not_stall_another_functions_moves() {
    let m = Machine::start(4);
    ism_emu::server::spawn_zero_watcher(Arc::clone(&m.fabric), &m.observer).unwrap();
    let mut victim = m.guest(0);
    let mut owner = m.guest(1);
    let dmb = owner.reg_dmb(16384, default_gid(CHID, 0));
    // Warm up: first moves map and fault in.
    for _ in 0..50 {
        victim
            .store_move(dmb.token, 0, true, 64, b"warmup")
            .unwrap();
    }

    let idle = measure(&mut victim, dmb.token);
    println!("{:<22}{idle}", "idle");
    let bound = idle.bound();

    let attacker = closed_dmbs_with_a_dirty_last_byte(&m, 64);
    std::thread::sleep(Duration::from_millis(20));
    let zero_watch = windows("zeroing-watch scans", bound, &mut victim, dmb.token, None);
    drop(attacker);

    let (amplifier, token) = reuse_amplifier(&m);
    let (reuse, amplifier) = during(
        amplifier,
        move |g| {
            g.store_move(token, 0, true, 0, &cdc(CDC_CLOSED)).unwrap();
            g.store_move(token, 0, false, 4096, b"x").unwrap();
        },
        |pause| {
            windows(
                "reuse amplification",
                bound,
                &mut victim,
                dmb.token,
                Some(pause),
            )
        },
    );

    // Attack 4: moves QEMU posts (no signal) need no reply, so a guest can queue them as
    // fast as its socket takes them: 4 KiB each, back to back, half of them failing.
    let (posted, amplifier) = during(
        amplifier,
        move |g| {
            g.post_move(token, false, 0, &[7; 4096]);
            g.post_move(token, false, MIB as u32 - 8, &[7; 4096]);
        },
        |pause| {
            windows(
                "posted-move flood",
                bound,
                &mut victim,
                dmb.token,
                Some(pause),
            )
        },
    );

    let target = default_gid(CHID, 1);
    let (flood, _) = during(
        amplifier,
        move |g| {
            g.signal_ieq(target, true, 0, 0);
        },
        |pause| {
            windows(
                "SIGNAL_IEQ flood",
                bound,
                &mut victim,
                dmb.token,
                Some(pause),
            )
        },
    );

    for (name, (s, held_to)) in [
        ("zeroing watch", &zero_watch),
        ("reuse amplification", &reuse),
        ("posted-move flood", &posted),
        ("SIGNAL_IEQ flood", &flood),
    ] {
        assert!(s.within(*held_to), "{name}: {s} (bound p99 {held_to:?})");
    }
}
