//! A trace recorded over the real sockets, replayed offline: the observer says exactly
//! what it said live.

mod support;

use std::sync::Arc;

use ism_emu::default_gid;
use ism_emu::fault::FaultSpec;
use ism_emu::observer::Observer;
use ism_emu::record::{self as trace, FunctionHeader, Header, Tracer};
use support::*;
use vmm_sys_util::tempdir::TempDir;

fn header(n: usize, payload: bool) -> Header {
    Header {
        trace: "ism-emu".into(),
        version: trace::VERSION,
        chid: CHID,
        functions: (0..n)
            .map(|i| FunctionHeader {
                name: format!("ism{i}"),
                gid: default_gid(CHID, i),
            })
            .collect(),
        payload,
    }
}

/// Runs DMB lives with zeroing, a clean and a stale reuse, a failed posted move (held
/// until the owner resets the CDC slot), a refused command, a fault and a guest that goes
/// away, recording to `path`; returns the live event lines and summaries.
fn record(path: &std::path::Path, payload: bool) -> (Vec<String>, String) {
    let m = Machine::start_with(2, |fabric| {
        fabric.set_tracer(Tracer::create(path, &header(2, payload)).unwrap());
    });
    let lines = m.observer.follow();
    let mut owner = m.guest(0);
    let mut peer = m.guest(1);
    let dmb = owner.reg_dmb(16384, default_gid(CHID, 1));
    zeroed_then_reused(&m, &mut owner, &mut peer, &dmb);
    m.fabric
        .add_fault(FaultSpec::parse("cmd=unreg_dmb@ism0,rc=0x77,next=1").unwrap())
        .unwrap();
    // A posted move fails: the signals into the DMB fail until the owner resets its CDC
    // slot (the guest's own write, which only the trace's held_lifted tells a replay).
    peer.post_move(dmb.token, false, 16380, b"overrun");
    assert!(peer.move_data(dmb.token, 0, &cdc(0), true).is_err());
    owner.ram.write(dmb.ram_offset, &[0u8; 32]).unwrap();
    connection(&mut peer, &dmb, b"third, on a DMB nobody zeroed");
    assert!(!owner.unreg_dmb(dmb.token).ok(), "the fault refuses it");
    owner.unreg_dmb(dmb.token);
    drop(peer);
    // The server notices the disconnect on its own thread.
    let start = std::time::Instant::now();
    while m.fabric.function_views()[1].attached && start.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    m.observer.sync();
    m.fabric.tracer().unwrap().sync();
    let live: Vec<String> = lines.try_iter().collect();
    let summaries = serde_json::to_string(&m.observer.summaries()).unwrap();
    (live, summaries)
}

fn replayed(
    path: &std::path::Path,
) -> (Vec<String>, String, ism_emu::record::replay::ReplayReport) {
    let observer = Arc::new(Observer::default());
    let lines = observer.follow();
    let (_fabric, report) = ism_emu::record::replay::replay(path, Arc::clone(&observer)).unwrap();
    let events: Vec<String> = lines.try_iter().collect();
    let summaries = serde_json::to_string(&observer.summaries()).unwrap();
    (events, summaries, report)
}

#[test]
fn a_replayed_trace_gives_the_live_events_and_summaries_exactly() {
    let dir = TempDir::new().unwrap();
    let path = dir.as_path().join("trace.jsonl");
    let (live, live_summaries) = record(&path, false);
    let (events, summaries, report) = replayed(&path);
    assert_eq!(report.mismatches, 0, "{:?}", report.first_mismatches);
    assert_eq!(report.lost, 0);
    assert!(report.moves >= 11 && report.zero_ticks == 2, "{report:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"op\":\"held_lifted\""), "no held_lifted");
    for kind in [
        "dmb_zeroed",
        "dmb_reused",
        "fault_injected",
        "function_detached",
    ] {
        assert!(
            live.iter().any(|l| l.contains(kind)),
            "no {kind} live: {live:#?}"
        );
    }
    assert!(
        live.iter().any(|l| l.contains("\"clean\":false")),
        "a stale reuse"
    );
    assert_eq!(events, live);
    assert_eq!(summaries, live_summaries);
    // Times never go back: operations are recorded in the order they took effect.
    let (_, records) = trace::read(&path).unwrap();
    assert!(
        records.windows(2).all(|w| w[0].0 <= w[1].0),
        "times go back"
    );
    // No user data without --trace-payload: the 1000 bytes of 7s are not in the file.
    assert!(!text.contains(&"07".repeat(64)), "payload recorded");
}

/// Two guests moving into each other's reused DMBs at once: each reuse check reads the
/// DMB without the lock, yet its record keeps the lock's order, so the times never go
/// back and a replay gives the live events.
#[test]
fn concurrent_reuse_checks_keep_the_traces_times_in_order() {
    let dir = TempDir::new().unwrap();
    let path = dir.as_path().join("trace.jsonl");
    let m = Machine::start_with(2, |fabric| {
        fabric.set_tracer(Tracer::create(&path, &header(2, false)).unwrap());
    });
    let lines = m.observer.follow();
    let mut a = m.guest(0);
    let mut b = m.guest(1);
    let dmb_a = a.reg_dmb(16384, default_gid(CHID, 1));
    let dmb_b = b.reg_dmb(16384, default_gid(CHID, 0));
    let run = |mut peer: Guest, dmb: Dmb| {
        std::thread::spawn(move || {
            for i in 0..200u32 {
                connection(&mut peer, &dmb, &i.to_le_bytes());
            }
            peer
        })
    };
    let (ta, tb) = (run(a, dmb_b), run(b, dmb_a));
    let (_a, _b) = (ta.join().unwrap(), tb.join().unwrap());
    m.observer.sync();
    m.fabric.tracer().unwrap().sync();
    let live: Vec<String> = lines.try_iter().collect();
    let (_, records) = trace::read(&path).unwrap();
    let reuses = records
        .iter()
        .filter(|(_, r)| matches!(r, trace::Record::Reuse { .. }))
        .count();
    assert!(reuses >= 2 * 199, "{reuses} reuse checks recorded");
    let back = records.windows(2).position(|w| w[0].0 > w[1].0);
    assert_eq!(back, None, "times go back at record {back:?}");
    let (events, _, report) = replayed(&path);
    assert_eq!(report.mismatches, 0, "{:?}", report.first_mismatches);
    assert_eq!(events, live);
}

#[test]
fn with_payloads_the_moves_bytes_are_in_the_trace() {
    let dir = TempDir::new().unwrap();
    let path = dir.as_path().join("trace.jsonl");
    let (live, _) = record(&path, true);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(&"07".repeat(1000)), "payload missing");
    let (events, _, report) = replayed(&path);
    assert_eq!(report.mismatches, 0, "{:?}", report.first_mismatches);
    assert_eq!(events, live);
}

#[test]
fn a_changed_device_answer_is_reported_as_a_difference() {
    let dir = TempDir::new().unwrap();
    let path = dir.as_path().join("trace.jsonl");
    record(&path, false);
    // Pretend the recording saw REG_DMB refused: the device model now answers 0.
    let text = std::fs::read_to_string(&path).unwrap();
    let edited: Vec<String> = text
        .lines()
        .map(|l| {
            if l.contains("\"reg_dmb\"") && l.contains("\"ret\":0") {
                l.replace("\"ret\":0", "\"ret\":3")
            } else {
                l.to_string()
            }
        })
        .collect();
    std::fs::write(&path, edited.join("\n") + "\n").unwrap();
    let (_, _, report) = replayed(&path);
    assert_eq!(report.mismatches, 1, "{:?}", report.first_mismatches);
    assert!(report.first_mismatches[0].contains("ret 0x0000, recorded 0x0003"));
}

#[test]
fn a_hostile_trace_is_refused_or_reported_never_obeyed() {
    let dir = TempDir::new().unwrap();
    let path = dir.as_path().join("trace.jsonl");
    let head = serde_json::to_string(&header(1, false)).unwrap();
    // A move of a terabyte and a mapping of an exabyte: differences, not allocations.
    let body = [
        r#"{"t":1,"op":"attach","f":0}"#,
        r#"{"t":2,"op":"move","f":0,"via":"store","window":"0x100800000","len":1099511627776,"result":"landed"}"#,
        r#"{"t":3,"op":"dma_map","f":0,"iova":"0x0","size":"0x1000000000000000","writable":true}"#,
    ];
    std::fs::write(&path, format!("{head}\n{}\n", body.join("\n"))).unwrap();
    let observer = Arc::new(Observer::default());
    match ism_emu::record::replay::replay(&path, observer) {
        Ok((_, report)) => assert!(report.mismatches >= 1, "{report:?}"),
        Err(e) => assert!(e.to_string().contains("guest memory"), "{e}"),
    }
    // A function the header does not have.
    std::fs::write(
        &path,
        format!("{head}\n{{\"t\":1,\"op\":\"attach\",\"f\":5}}\n"),
    )
    .unwrap();
    match ism_emu::record::replay::replay(&path, Arc::new(Observer::default())) {
        Err(e) => assert!(e.to_string().contains("function 5"), "{e}"),
        Ok(_) => panic!("a record for function 5 was replayed"),
    }
}

#[test]
fn a_traces_timeline_is_the_live_event_streams() {
    let dir = TempDir::new().unwrap();
    let path = dir.as_path().join("trace.jsonl");
    let (live, _) = record(&path, false);
    let events = dir.as_path().join("events.jsonl");
    std::fs::write(&events, live.join("\n") + "\n").unwrap();
    let timeline = |from: &std::path::Path, out: &str| {
        let out = dir.as_path().join(out);
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_ism-emu"))
            .args(["observe", "timeline", "--from"])
            .arg(from)
            .arg("--out")
            .arg(&out)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        std::fs::read_to_string(out).unwrap()
    };
    let of_trace = timeline(&path, "t.json");
    assert!(of_trace.contains("fault injected"), "{of_trace}");
    assert_eq!(of_trace, timeline(&events, "e.json"));
}
