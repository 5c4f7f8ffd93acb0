//! The timeline of a real event stream: SMC-D-shaped traffic over the real sockets, the
//! observer's own lines, turned into trace events; and `ism-emu observe timeline` from a
//! recorded file and live from a serving emulator.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ism_emu::default_gid;
use ism_emu::export::chrome_trace::{Phase, TraceDocument, TraceEvent};
use ism_emu::export::timeline::TimelineBuilder;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use support::*;
use vmm_sys_util::tempdir::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_ism-emu");

fn named<'a>(doc: &'a TraceDocument, name: &str) -> Vec<&'a TraceEvent> {
    doc.trace_events.iter().filter(|e| e.name == name).collect()
}

#[test]
fn a_dmbs_life_over_the_real_sockets_becomes_its_track() {
    let m = Machine::start(2);
    let lines = m.observer.follow();
    let mut owner = m.guest(0);
    let mut peer = m.guest(1);
    let dmb = owner.reg_dmb(16384, default_gid(CHID, 1));
    zeroed_then_reused(&m, &mut owner, &mut peer, &dmb);
    connection(&mut peer, &dmb, b"third, on a DMB nobody zeroed");
    owner.unreg_dmb(dmb.token);
    m.observer.sync();

    let mut builder = TimelineBuilder::default();
    for (i, line) in lines.try_iter().enumerate() {
        builder.push_line(i + 1, &line).unwrap();
    }
    let doc = builder.finish();
    assert_eq!(
        doc.other_data["events_skipped"],
        Value::Object(Default::default())
    );
    let reg = named(&doc, "registered");
    assert_eq!(reg.len(), 1);
    assert_eq!(reg[0].args["token"], format!("{:#x}", dmb.token));
    assert_eq!(
        reg[0].args["unregistered"].as_str().map(|s| !s.is_empty()),
        Some(true)
    );
    let (reg_start, reg_end) = (reg[0].ts, reg[0].ts + reg[0].dur.unwrap());
    for n in 1..=3 {
        let conn = named(&doc, &format!("conn {n}"));
        assert_eq!(conn.len(), 1, "conn {n}");
        let c = conn[0];
        assert_eq!((c.pid, c.tid), (reg[0].pid, reg[0].tid));
        assert!(
            c.ts >= reg_start && c.ts + c.dur.unwrap() <= reg_end,
            "conn {n} nests"
        );
        assert_eq!(c.args["how"], "close");
    }
    assert_eq!(named(&doc, "conn 1")[0].args["bytes"], 1000);
    assert_eq!(named(&doc, "zeroed").len(), 1);
    assert_eq!(named(&doc, "reuse clean").len(), 1);
    // "second" and the closing CDC's type, cursor and flag bytes were never zeroed.
    assert_eq!(named(&doc, "reuse STALE")[0].args["stale_bytes"], 9);
    let attached = named(&doc, "attached");
    assert_eq!(attached.len(), 2, "one per function");
    assert!(attached.iter().all(|e| e.tid == 0));
    let counts: Vec<f64> = named(&doc, "open connections")
        .iter()
        .filter(|e| e.pid == reg[0].pid)
        .map(|e| e.args["connections"].as_f64().unwrap())
        .collect();
    assert_eq!(counts.last(), Some(&0.0));
    assert!(
        counts.iter().all(|&n| n <= 1.0),
        "one connection at a time: {counts:?}"
    );
    assert!(doc
        .trace_events
        .iter()
        .all(|e| e.ph == Phase::Metadata || e.dur.is_none() || e.ph == Phase::Complete));
}

fn tempdir() -> TempDir {
    TempDir::new_with_prefix(std::env::temp_dir().join("ism-emu-timeline-")).unwrap()
}

fn read_doc(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/tools/testdata/demo-events.jsonl")
}

#[test]
fn the_recorded_demo_run_converts() {
    let dir = tempdir();
    let out = dir.as_path().join("t.json");
    let status = Command::new(BIN)
        .args(["observe", "timeline", "--from"])
        .arg(fixture())
        .arg("--out")
        .arg(&out)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let doc = read_doc(&out);
    let lines = std::fs::read_to_string(fixture()).unwrap().lines().count();
    assert_eq!(doc["otherData"]["events_read"], lines);
    assert_eq!(doc["displayTimeUnit"], "ms");
    let events = doc["traceEvents"].as_array().unwrap();
    assert!(events
        .iter()
        .any(|e| e["ph"] == "X" && e["name"] == "conn 1"));
}

#[test]
fn a_missing_event_file_is_named_in_the_error() {
    let dir = tempdir();
    let out = Command::new(BIN)
        .args([
            "observe",
            "timeline",
            "--from",
            "/nonexistent/events.jsonl",
            "--out",
        ])
        .arg(dir.as_path().join("t.json"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/events.jsonl"), "{err}");
}

/// A child process, killed and reaped on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(path: &Path) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn exits_within(child: &mut Child, patience: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < patience {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// `ism-emu serve` with one function and a control socket in `dir`, ready.
fn serve_one(dir: &Path) -> Running {
    let serve = Running(
        Command::new(BIN)
            .args(["serve", "--socket"])
            .arg(dir.join("a.sock"))
            .arg("--control")
            .arg(dir.join("ctl"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(wait_for(&dir.join("ctl")));
    serve
}

/// `ism-emu observe timeline [ARGS] --out OUT` against the emulator in `dir`.
fn timeline(dir: &Path, args: &[&str], out: &Path) -> Running {
    Running(
        Command::new(BIN)
            .args(["observe", "--control"])
            .arg(dir.join("ctl"))
            .arg("timeline")
            .args(args)
            .arg("--out")
            .arg(out)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn live_follows_until_sigint_then_writes_what_it_saw() {
    let dir = tempdir();
    let dir = dir.as_path();
    let _serve = serve_one(dir);
    let out = dir.join("live.json");
    let mut follow = timeline(dir, &[], &out);
    // Time for the follower to be registered: events before it are not sent to it.
    std::thread::sleep(Duration::from_secs(1));
    let mut client = ism_emu::testkit::Client::connect(&dir.join("a.sock")).unwrap();
    client.region_read(CMD_BAR, 0, 4).unwrap().unwrap();
    drop(client);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!out.exists(), "written only at the end");
    kill(Pid::from_raw(follow.0.id() as i32), Signal::SIGINT).unwrap();
    let status = exits_within(&mut follow.0, Duration::from_secs(5)).expect("ended by SIGINT");
    assert!(status.success(), "{status}");
    let doc = read_doc(&out);
    let attached: Vec<&Value> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "attached")
        .collect();
    assert_eq!(attached.len(), 1, "{doc}");
    assert_eq!(attached[0]["args"]["detached"], "client disconnected");
}

#[test]
fn live_with_for_ends_by_itself_and_without_an_emulator_says_so() {
    let dir = tempdir();
    let dir = dir.as_path();
    let _serve = serve_one(dir);
    let out = dir.join("for.json");
    let mut follow = timeline(dir, &["--for", "0.5"], &out);
    let status = exits_within(&mut follow.0, Duration::from_secs(5)).expect("ended by --for");
    assert!(status.success());
    assert_eq!(read_doc(&out)["traceEvents"], Value::Array(Vec::new()));

    let gone = Command::new(BIN)
        .args(["observe", "--control"])
        .arg(dir.join("nothing-here"))
        .args(["timeline", "--for", "1", "--out"])
        .arg(dir.join("never.json"))
        .output()
        .unwrap();
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains("cannot reach the emulator"));
    assert!(!dir.join("never.json").exists());
}
