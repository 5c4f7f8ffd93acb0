//! Traces of real guests' runs (`serve --trace`, under `make faults` and `make chaos`),
//! replayed through the binary: what the host says about each is pinned here, so that an observer change
//! that would misread them fails a test instead of a user's run.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use vmm_sys_util::tempdir::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_ism-emu");

/// Unpacks `device/tests/data/NAME.gz` (Debian's gzip: the traces are kept compressed).
fn unpack(dir: &Path, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(format!("{name}.gz"));
    let out = Command::new("gzip")
        .arg("-dc")
        .arg(&src)
        .output()
        .expect("gzip runs");
    assert!(out.status.success(), "gzip -dc {}", src.display());
    let path = dir.join(name);
    std::fs::write(&path, out.stdout).unwrap();
    path
}

/// Replays `trace`: what it printed, and its event stream.
fn replay(trace: &Path) -> (String, Vec<Value>) {
    let events = trace.with_extension("replayed.jsonl");
    let out = Command::new(BIN)
        .arg("replay")
        .arg(trace)
        .arg("--events")
        .arg(&events)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "replay failed:\n{stdout}");
    let lines = std::fs::read_to_string(&events).unwrap();
    let events = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (stdout, events)
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// Replays the recorded trace NAME, which must replay exactly and end CROSSED: its
/// event stream (the directory holds the unpacked trace while the caller reads it).
fn replayed_crossed(name: &str) -> (TempDir, Vec<Value>) {
    let dir = TempDir::new_with_prefix(std::env::temp_dir().join("ism-emu-recorded-")).unwrap();
    let trace = unpack(dir.as_path(), name);
    let (stdout, events) = replay(&trace);
    assert!(stdout.contains("0 differ from the recording"), "{stdout}");
    assert!(stdout.contains("VERDICT: CROSSED"), "{stdout}");
    (dir, events)
}

/// The run's one foreign CDC message, which both recorded runs find in a's DMB.
fn the_foreign_cdc(events: &[Value]) -> &Value {
    let foreign = of_kind(events, "foreign_cdc");
    assert_eq!(foreign.len(), 1, "{foreign:?}");
    let f = foreign[0];
    assert_eq!(
        (f["function"].as_str(), f["token"].as_str()),
        (Some("ism0"), Some(A_DMB))
    );
    f
}

/// a's DMB in both recorded runs.
const A_DMB: &str = "0x100000000";

/// The events of KIND on a's DMB.
fn on_a_dmb<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    of_kind(events, kind)
        .into_iter()
        .filter(|e| e["token"] == A_DMB)
        .collect()
}

/// a's DMB was reused once, clean, by its second connection, and no third opened: the
/// stale reuse the host once reported here was a misreading.
fn one_clean_reuse_two_connections(events: &[Value], what: &str) {
    let reuses = on_a_dmb(events, "dmb_reused");
    assert_eq!(reuses.len(), 1, "{reuses:?}");
    assert_eq!(
        (&reuses[0]["conn"], &reuses[0]["clean"]),
        (&Value::from(2), &Value::from(true))
    );
    assert_eq!(on_a_dmb(events, "conn_opened").len(), 2, "{what}, no third");
}

/// `make faults` scenario late-write on stock 6.12 (issue 42): b's data move fails, a
/// gives up, b's next CDC message carries the abort, a releases its DMB and takes it for
/// an echo connection with b; 10 s later b closes the failed connection, and that close's
/// CDC message (b's old producer cursor, the abort flag) lands in the echo connection's
/// DMB. a's kernel read it as the echo connection's own.
///
/// Before the host knew CDC cursors it took that message for the echo connection's
/// abort, and the echo connection's next move for a new connection on a DMB full of the
/// echo's bytes: a STALE reuse of a connection that never existed, and no word of the
/// message that did the harm.
#[test]
fn an_old_connections_close_in_a_reused_dmb_is_crossed_not_a_stale_reuse() {
    let (_dir, events) = replayed_crossed("late-write-6.12-stock.trace.jsonl");
    let f = the_foreign_cdc(&events);
    assert_eq!(f["conn"], 2, "the echo connection");
    assert_eq!(f["conn_state"], 0x20, "the old connection's abort flag");
    assert_eq!(
        f["seen"],
        25_160_208 % 65_504,
        "the failed stream's producer cursor"
    );
    assert!(
        f["expected"].as_u64().unwrap() < 65536,
        "the echo's few bytes"
    );

    let a_dmb = |kind| on_a_dmb(&events, kind);
    // One reuse, by the echo connection, clean: a zeroed the DMB at release.
    one_clean_reuse_two_connections(&events, "the stream and the echo");
    // The stream's close is the abort b's next CDC message carried.
    let closed = a_dmb("conn_closed");
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(
        (&closed[0]["conn"], &closed[0]["how"]),
        (&Value::from(1), &Value::from("abort"))
    );
}

/// `make chaos CHAOS_ROUND=554400509 KERNEL=6.12 VARIANT=stock`, the finding's shrunk run
/// (`--fault 'irq-drop@ism1,next=2'`; docs/known-bugs.md, section 9): b's first
/// connection never learned that a had read its first pass over a's ring, closed with
/// 4,176 bytes unsent, and 0.35 s later wrote them, and a CDC message with its
/// `peer_conn_closed`, into a's DMB, which a had zeroed and given to its second
/// connection with b. The late data moves come first, so the late CDC message's cursor
/// is where they end and the cursor test passes it.
///
/// Before the continuation rule the host took that message as the second connection's
/// close, and the second connection's next message as a third connection on a DMB full
/// of the second's own bytes: a STALE reuse of 65,269 bytes, which no known bug
/// explained.
#[test]
fn an_old_connections_late_data_and_close_in_a_live_dmb_is_crossed_not_a_stale_reuse() {
    let (_dir, events) = replayed_crossed("chaos-554400509-seq-6.12-stock.trace.jsonl");
    let f = the_foreign_cdc(&events);
    assert_eq!(f["conn"], 2, "a's second connection");
    assert_eq!(f["seen"], 4176, "the old connection's cursor: 1/4176");
    assert_eq!(f["conn_state"], 0x40, "its peer_conn_closed, no abort");
    assert_eq!(f["expected"], 0, "the live connection's last cursor: 1/0");
    assert_eq!(f["found"], "continuation");
    assert_eq!(
        (&f["late_moves"], &f["late_bytes"]),
        (&3.into(), &4176.into())
    );

    let a_dmb = |kind| on_a_dmb(&events, kind);
    one_clean_reuse_two_connections(&events, "b's two connections");
    // The first's close; the late message, taken as the second's close until the
    // second wrote on; the second's own close at the end.
    let closed: Vec<(u64, &str)> = a_dmb("conn_closed")
        .iter()
        .map(|e| (e["conn"].as_u64().unwrap(), e["how"].as_str().unwrap()))
        .collect();
    assert_eq!(closed, [(1, "close"), (2, "close"), (2, "close")]);
    assert_eq!(a_dmb("conn_closed")[0]["bytes"], 65_504);
    let at = |e: &Value| e["time_us"].as_u64().unwrap();
    assert!(at(a_dmb("conn_closed")[1]) <= at(f) && at(f) <= at(a_dmb("conn_closed")[2]));
    assert!(
        of_kind(&events, "dmb_reused")
            .iter()
            .all(|e| e["clean"] != false),
        "no stale reuse anywhere"
    );
}
