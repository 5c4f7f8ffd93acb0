//! The `ism-emu` binary: serving, observing, shutting down.
//!
//! Every process a test starts belongs to a `Running` guard that kills it when the test
//! ends, failed or not, so no `ism-emu serve` outlives its test.
//!
//! The exit statuses and messages a user or a script meets are pinned here: 2 for a
//! usage error (clap's, a bad fault spec, a function or rule that does not exist), 1 for
//! a failure, 3/4 for `observe summary --check`'s STALE/UNKNOWN.

mod support;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use ism_emu::control::api::{
    Answer, Done, Envelope, FaultList, FaultRule, Reason, Refusal, Request, VERSION,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use vmm_sys_util::tempdir::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_ism-emu");
const PATIENCE: Duration = Duration::from_secs(10);

/// A child process, killed (SIGKILL) and reaped on drop.
struct Running(Child);

impl Running {
    fn spawn(command: &mut Command) -> Self {
        Self(command.spawn().unwrap())
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.0.id() as i32), signal).unwrap();
    }

    /// Waits for the exit; None if the process is still running after `PATIENCE`.
    fn wait(&mut self) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if let Some(status) = self.0.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the binary to completion (at most `PATIENCE`, then it is killed) and returns
/// what it printed.
fn run(args: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command.args(args);
    let mut child = Running::spawn(command.stdout(Stdio::piped()).stderr(Stdio::piped()));
    let status = child.wait().unwrap_or_else(|| {
        child.signal(Signal::SIGKILL);
        child.0.wait().unwrap()
    });
    let mut output = Output {
        status,
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    if let Some(out) = child.0.stdout.as_mut() {
        out.read_to_end(&mut output.stdout).unwrap();
    }
    if let Some(err) = child.0.stderr.as_mut() {
        err.read_to_end(&mut output.stderr).unwrap();
    }
    output
}

fn tempdir() -> TempDir {
    TempDir::new_with_prefix(std::env::temp_dir().join("ism-emu-cli-")).unwrap()
}

fn wait_for(path: &Path) -> bool {
    let start = Instant::now();
    while start.elapsed() < PATIENCE {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn serve(dir: &Path) -> Running {
    Running::spawn(
        Command::new(BIN)
            .args(["serve", "--chid", "0x42"])
            .arg("--socket")
            .arg(dir.join("a.sock"))
            .arg("--socket")
            .arg(dir.join("b.sock"))
            .arg("--control")
            .arg(dir.join("ctl"))
            .stderr(Stdio::null()),
    )
}

#[test]
fn sigterm_shuts_down_cleanly_and_removes_every_socket() {
    let dir = tempdir();
    let dir = dir.as_path();
    let mut child = serve(dir);
    assert!(wait_for(&dir.join("ctl")));
    assert!(dir.join("a.sock").exists() && dir.join("b.sock").exists());
    child.signal(Signal::SIGTERM);
    let status = child.wait().expect("still running after SIGTERM");
    assert!(status.success(), "exit status {status}");
    assert!(!dir.join("a.sock").exists());
    assert!(!dir.join("b.sock").exists());
    assert!(!dir.join("ctl").exists());
}

/// A serving emulator (functions ism0 and ism1), its directory and its control socket.
fn serving() -> (TempDir, Running, std::path::PathBuf) {
    let dir = tempdir();
    let child = serve(dir.as_path());
    let ctl = dir.as_path().join("ctl");
    assert!(wait_for(&ctl));
    (dir, child, ctl)
}

/// `ism-emu observe WHAT` against a fresh emulator with functions ism0 and ism1.
fn observe_fresh(what: &str) -> Output {
    let (_dir, _child, ctl) = serving();
    run(&["observe", "--control", ctl.to_str().unwrap(), what])
}

/// `observe json` succeeds: the control socket answers.
fn assert_answers(ctl: &Path) {
    let out = run(&["observe", "--control", ctl.to_str().unwrap(), "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn observe_lists_the_functions_with_their_gids() {
    let out = observe_fresh("functions");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("fabric CHID 0x0042"), "{text}");
    assert!(text.contains("0x00420049534d0001"), "GID of ism0: {text}");
    assert!(text.contains("ism1"), "{text}");
}

#[test]
fn observe_json_gives_gids_as_hex_strings() {
    let out = observe_fresh("json");
    assert!(out.status.success());
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(snap["chid"], "0x0042");
    // 16 hex digits, as the log and the tables print a GID.
    assert_eq!(snap["functions"][1]["gid"], "0x00420049534d0002");
    assert_eq!(snap["dmbs"], serde_json::json!([]));
}

#[test]
fn an_existing_socket_path_is_refused_with_a_clear_message() {
    let dir = tempdir();
    let socket = dir.as_path().join("a.sock");
    std::fs::write(&socket, b"").unwrap();
    let out = run(&["serve", "--socket", socket.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists"));
}

#[test]
fn a_stale_socket_is_replaced_and_a_live_one_refused() {
    let dir = tempdir();
    let dir = dir.as_path();
    // What an emulator killed with SIGKILL leaves: a socket file nobody listens on.
    drop(std::os::unix::net::UnixListener::bind(dir.join("a.sock")).unwrap());
    assert!(dir.join("a.sock").exists());
    let mut first = serve(dir);
    assert!(wait_for(&dir.join("ctl")));
    assert!(std::os::unix::net::UnixStream::connect(dir.join("a.sock")).is_ok());
    // A second emulator on the first one's function socket: refused, and the first one's
    // socket is left alone.
    let other = dir.join("other.ctl");
    let out = run(&[
        "serve",
        "--socket",
        dir.join("a.sock").to_str().unwrap(),
        "--control",
        other.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    assert!(
        text.contains("answers: another emulator serves it"),
        "{text}"
    );
    assert!(std::os::unix::net::UnixStream::connect(dir.join("a.sock")).is_ok());
    first.signal(Signal::SIGTERM);
    assert!(first.wait().expect("still running after SIGTERM").success());
}

#[test]
fn chid_zero_and_reserved_chids_are_refused() {
    let dir = tempdir();
    // A socket that `serve` could bind: only the CHID check can make it fail (and
    // `run` kills a `serve` that did not fail within its patience).
    let socket = dir.as_path().join("a.sock");
    for chid in ["0x0", "0xff00", "0xffff"] {
        let out = run(&[
            "serve",
            "--chid",
            chid,
            "--socket",
            socket.to_str().unwrap(),
        ]);
        assert!(!out.status.success(), "chid {chid} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("CHID must be nonzero"),
            "chid {chid}: {stderr}"
        );
        assert!(!socket.exists(), "chid {chid}: socket bound");
    }
}

#[test]
fn faults_are_added_listed_reported_and_cleared_through_the_control_socket() {
    let (dir, _child, ctl) = serving();
    let ctl = ctl.to_str().unwrap();
    let events = dir.as_path().join("events");
    let follow = Running::spawn(
        Command::new(BIN)
            .args(["observe", "--control", ctl, "follow"])
            .stdout(std::fs::File::create(&events).unwrap()),
    );
    let fault = |args: &[&str]| {
        let mut all = vec!["fault", "--control", ctl];
        all.extend_from_slice(args);
        run(&all)
    };
    let out = fault(&["add", "cmd=reg_dmb@ism1,rc=6,next=1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "rule 1\n");
    let out = fault(&["add", "move@ism7"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown function is a usage error"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no function named \"ism7\""), "{stderr}");
    let out = fault(&["add", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown fault"));
    let out = fault(&["list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cmd=reg_dmb@ism1,rc=0x0006,next=1"), "{text}");
    assert_eq!(text.lines().count(), 2, "{text}");
    let out = fault(&["clear"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "removed 1\n");
    // An action: the event goes out at once to a guest that registered its event queue,
    // and is reported on the stream (again until the follower, started above, is seen
    // to be connected).
    let mut guest = support::Guest::connect(&dir.as_path().join("a.sock"), 1 << 20);
    guest.probe();
    let start = Instant::now();
    let seen = loop {
        let out = fault(&["add", "gid-disabled@ism0,peer=ism1"]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "done\n",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
        let text = std::fs::read_to_string(&events).unwrap();
        if text.contains("fault_injected") || start.elapsed() > PATIENCE {
            break text;
        }
    };
    drop(follow);
    let line = seen.lines().find(|l| l.contains("fault_injected")).unwrap();
    let event: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(event["function"], "ism0");
    assert_eq!(event["rule"], 0);
    assert_eq!(event["fault"], "gid-disabled@ism0,peer=ism1");
}

#[test]
fn serve_refuses_a_bad_fault_and_an_action_at_start() {
    let dir = tempdir();
    let socket = dir.as_path().join("a.sock");
    for (spec, why) in [
        ("move,every=0", "must be at least 1"),
        ("gid-disabled@ism0,peer=0x5", "an action, not a rule"),
        ("irq-drop@ism3", "no function named"),
    ] {
        let out = run(&[
            "serve",
            "--socket",
            socket.to_str().unwrap(),
            "--fault",
            spec,
        ]);
        assert!(!out.status.success(), "{spec} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(why), "{spec}: {stderr}");
        assert!(!socket.exists(), "{spec}: socket bound");
    }
}

#[test]
fn the_event_file_and_the_trace_hold_everything_when_the_emulator_stops() {
    let dir = tempdir();
    let dir = dir.as_path();
    let (events, trace) = (dir.join("events.jsonl"), dir.join("trace.jsonl"));
    let mut child = Running::spawn(
        Command::new(BIN)
            .args(["serve", "--socket"])
            .arg(dir.join("a.sock"))
            .arg("--control")
            .arg(dir.join("ctl"))
            .arg("--events")
            .arg(&events)
            .arg("--trace")
            .arg(&trace)
            .stderr(Stdio::null()),
    );
    assert!(wait_for(&dir.join("ctl")));
    let mut client = ism_emu::testkit::Client::connect(&dir.join("a.sock")).unwrap();
    // An answered request: the function is attached.
    client.region_read(2, 0, 4).unwrap().unwrap();
    drop(client);
    // Stop within the writers' idle flush interval (100 ms) of the last event.
    std::thread::sleep(Duration::from_millis(20));
    child.signal(Signal::SIGTERM);
    assert!(child.wait().expect("still running after SIGTERM").success());
    let text = std::fs::read_to_string(&events).unwrap();
    assert!(text.contains("function_attached"), "{text:?}");
    assert!(text.contains("function_detached"), "{text:?}");
    let trace = std::fs::read_to_string(&trace).unwrap();
    assert!(trace.contains("\"op\":\"detach\""), "{trace:?}");
}

#[test]
fn observe_without_emulator_says_how_to_start_one() {
    let out = run(&["observe", "--control", "/nonexistent/ctl", "summary"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is `ism-emu serve --control"));
}

/// Context switches of every thread of process `pid` so far.
fn context_switches(pid: u32) -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status =
            std::fs::read_to_string(task.unwrap().path().join("status")).unwrap_or_default();
        for line in status.lines() {
            if let Some(n) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += n.trim().parse::<u64>().unwrap();
            }
        }
    }
    total
}

#[test]
fn an_idle_emulator_does_not_wake_up() {
    let (_dir, child, _ctl) = serving();
    std::thread::sleep(Duration::from_millis(300));
    let before = context_switches(child.0.id());
    std::thread::sleep(Duration::from_secs(1));
    let woke = context_switches(child.0.id()) - before;
    assert!(woke <= 2, "{woke} wake-ups in 1 s with no guest attached");
}

#[test]
fn an_idle_emulator_that_records_events_and_a_trace_does_not_wake_up() {
    let dir = tempdir();
    let ctl = dir.as_path().join("ctl");
    let child = Running::spawn(
        Command::new(BIN)
            .args(["serve", "--socket"])
            .arg(dir.as_path().join("a.sock"))
            .arg("--control")
            .arg(&ctl)
            .arg("--events")
            .arg(dir.as_path().join("events.jsonl"))
            .arg("--trace")
            .arg(dir.as_path().join("trace.jsonl"))
            .stderr(Stdio::null()),
    );
    assert!(wait_for(&ctl));
    // Past the writers' 100 ms flush of the start's lines.
    std::thread::sleep(Duration::from_millis(300));
    let before = context_switches(child.0.id());
    std::thread::sleep(Duration::from_secs(1));
    let woke = context_switches(child.0.id()) - before;
    assert!(woke <= 2, "{woke} wake-ups in 1 s with no guest attached");
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn every_socket_is_for_the_emulators_user_only() {
    let (dir, _child, _ctl) = serving();
    for name in ["a.sock", "b.sock", "ctl"] {
        assert_eq!(mode(&dir.as_path().join(name)), 0o600, "{name}");
    }
}

#[test]
fn a_control_path_that_is_not_a_socket_is_refused_and_left_alone() {
    let dir = tempdir();
    let ctl = dir.as_path().join("ctl");
    std::fs::write(&ctl, b"precious").unwrap();
    let socket = dir.as_path().join("a.sock");
    let out = run(&[
        "serve",
        "--socket",
        socket.to_str().unwrap(),
        "--control",
        ctl.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a socket"));
    assert_eq!(std::fs::read(&ctl).unwrap(), b"precious");
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn control_clients_that_never_finish_their_line_are_bounded() {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    let (_dir, child, ctl) = serving();
    let pid = child.0.id();
    let (threads_before, rss_before) = (threads(pid), rss_kib(pid));
    // One client that sends 16 MiB without a newline.
    let mut long = UnixStream::connect(&ctl).unwrap();
    long.set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let chunk = vec![b'x'; 1 << 20];
    let mut sent = 0;
    for _ in 0..16 {
        match long.write_all(&chunk) {
            Ok(()) => sent += chunk.len(),
            Err(_) => break,
        }
    }
    // Many clients that connect and say nothing.
    let idle: Vec<UnixStream> = (0..200)
        .map(|_| UnixStream::connect(&ctl).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (threads_during, rss_during) = (threads(pid), rss_kib(pid));
    println!(
        "control attack: threads {threads_before} -> {threads_during}, RSS {rss_before} -> {rss_during} KiB, {} of 16 MiB of one line taken",
        sent >> 20
    );
    assert!(
        threads_during <= threads_before + 17,
        "{threads_during} threads"
    );
    assert!(rss_during < rss_before + 8 * 1024, "RSS {rss_during} KiB");
    // Once their deadline has passed, the emulator answers again.
    std::thread::sleep(Duration::from_millis(2500));
    assert_answers(&ctl);
    drop(idle);
}

#[test]
fn followers_that_leave_give_their_slots_back_without_waiting_for_an_event() {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    let (_dir, _child, ctl) = serving();
    // More than the emulator serves at once: it closes the ones beyond, so a write
    // may find the connection closed already (EPIPE), which is what it should do.
    for _ in 0..20 {
        let mut follower = UnixStream::connect(&ctl).unwrap();
        let _ = writeln!(follower, "{}", Envelope::new(Request::Follow).to_line());
    }
    // No guest, so no event: the slots must come back by themselves.
    std::thread::sleep(Duration::from_millis(1500));
    assert_answers(&ctl);
}

/// Sends `line` to the control socket and reads the one answer line.
fn ask_raw(ctl: &Path, line: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(ctl).unwrap();
    writeln!(stream, "{line}").unwrap();
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).unwrap();
    answer
}

#[test]
fn the_control_socket_refuses_another_version_and_still_reads_the_plain_lines() {
    let (_dir, _child, ctl) = serving();
    let newer = Envelope {
        version: VERSION + 1,
        request: Request::Snapshot,
    };
    let refusal: Refusal = serde_json::from_str(&ask_raw(&ctl, &newer.to_line())).unwrap();
    assert_eq!(refusal.reason, Reason::Version);
    assert_eq!(refusal.speaks, Some(VERSION));
    // A client from before the version field, JSON or a plain line, is served.
    let unversioned = ask_raw(&ctl, r#"{"request":"fault_list"}"#);
    let plain = ask_raw(&ctl, "fault list");
    assert_eq!(unversioned, plain);
    assert!(matches!(
        Answer::parse_as::<Done>(&plain).unwrap(),
        Ok(Done::List { .. })
    ));
    let snapshot = ask_raw(&ctl, "snapshot");
    assert!(matches!(
        serde_json::from_str::<Answer>(&snapshot).unwrap(),
        Answer::Snapshot(_)
    ));
    // Not a request at all: refused, the emulator still answers.
    let junk: Refusal = serde_json::from_str(&ask_raw(&ctl, "{\"request\":1}")).unwrap();
    assert_eq!(junk.reason, Reason::Request);
    assert_answers(&ctl);
}

/// `ism-emu fault --control CTL ARGS...`.
fn fault_cmd(ctl: &Path, args: &[&str]) -> Output {
    let mut all = vec!["fault", "--control", ctl.to_str().unwrap()];
    all.extend_from_slice(args);
    run(&all)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn fault_spec_errors_are_usage_errors_whether_syntax_or_an_unknown_function() {
    let dir = tempdir();
    let socket = dir.as_path().join("a.sock");
    let socket = socket.to_str().unwrap();
    // At start: a syntax error (clap's value parser) and an unknown function (found
    // once the functions exist) exit alike.
    for spec in ["move,every=0", "irq-drop@ism7"] {
        let out = run(&["serve", "--socket", socket, "--fault", spec]);
        assert_eq!(out.status.code(), Some(2), "{spec}: {}", stderr(&out));
    }
    // On a running emulator too.
    let (_dir, _child, ctl) = serving();
    for spec in ["move,every=0", "move@ism7", "cmd=reg_dmb@ism0,nxt=4"] {
        let out = fault_cmd(&ctl, &["add", spec]);
        assert_eq!(out.status.code(), Some(2), "{spec}: {}", stderr(&out));
    }
}

#[test]
fn an_unknown_key_is_named_unknown_with_the_kinds_keys() {
    let (_dir, _child, ctl) = serving();
    let out = fault_cmd(&ctl, &["add", "cmd=reg_dmb@ism0,nxt=4"]);
    assert_eq!(
        stderr(&out),
        "ism-emu: the emulator refused: unknown key \"nxt\" (the keys of cmd: rc, next, every, prob, seed)\n"
    );
    let dir = tempdir();
    let socket = dir.as_path().join("a.sock");
    let out = run(&[
        "serve",
        "--socket",
        socket.to_str().unwrap(),
        "--fault",
        "irq-drop@ism0,us=5",
    ]);
    let text = stderr(&out);
    assert!(
        text.contains("key \"us\" does not apply to irq-drop (its keys: next, every, prob, seed)"),
        "{text}"
    );
}

#[test]
fn clearing_a_rule_that_does_not_exist_fails() {
    let (_dir, _child, ctl) = serving();
    let out = fault_cmd(&ctl, &["clear", "99"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("no fault rule 99"),
        "{}",
        stderr(&out)
    );
    // Clearing all when there is none is no error.
    let out = fault_cmd(&ctl, &["clear"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "removed 0\n");
}

#[test]
fn an_action_whose_event_is_dropped_is_not_reported_done() {
    let (_dir, _child, ctl) = serving();
    // No guest is attached: ism1 has no event queue.
    let out = fault_cmd(&ctl, &["add", "gid-disabled@ism1,peer=ism0"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = stderr(&out);
    assert!(
        text.contains("ism1 did not get the event: the function has no event queue"),
        "{text}"
    );
    assert!(text.contains("nothing was done"), "{text}");
}

#[test]
fn fault_list_prints_aligned_columns_and_json() {
    let (_dir, _child, ctl) = serving();
    assert!(fault_cmd(&ctl, &["add", "cmd=reg_dmb@ism0,next=4"])
        .status
        .success());
    let out = fault_cmd(&ctl, &["list"]);
    // As docs/faults.md shows it.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "rule     seen    fired spent  spec\n   1        0        0    no  cmd=reg_dmb@ism0,rc=0xffff,next=4\n"
    );
    let out = fault_cmd(&ctl, &["list", "--json"]);
    assert!(out.status.success());
    let list: FaultList = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        list.faults,
        [FaultRule {
            fired: 0,
            id: 1,
            seen: 0,
            spec: "cmd=reg_dmb@ism0,rc=0xffff,next=4".into(),
            spent: false
        }]
    );
}

#[test]
fn a_socket_given_twice_is_refused_before_anything_is_bound() {
    let dir = tempdir();
    let socket = dir.as_path().join("a.sock");
    let same = format!("{}/./a.sock", dir.as_path().display());
    let ctl = dir.as_path().join("ctl");
    let out = run(&[
        "serve",
        "--socket",
        socket.to_str().unwrap(),
        "--socket",
        &same,
        "--control",
        ctl.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let text = stderr(&out);
    assert!(text.contains("is given twice"), "{text}");
    assert!(!text.contains("another emulator"), "{text}");
    assert!(!socket.exists() && !ctl.exists());
    // The control socket on a function's path: the same mistake.
    let out = run(&[
        "serve",
        "--socket",
        socket.to_str().unwrap(),
        "--control",
        socket.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is also a --socket"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_socket_in_a_missing_directory_names_the_directory_once() {
    let dir = tempdir();
    let missing = dir.as_path().join("nope");
    let socket = missing.join("a.sock");
    let out = run(&[
        "serve",
        "--socket",
        socket.to_str().unwrap(),
        "--control",
        dir.as_path().join("ctl").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    let line = text.lines().find(|l| l.starts_with("ism-emu:")).unwrap();
    assert_eq!(
        line,
        format!(
            "ism-emu: cannot create socket {}: directory {} does not exist",
            socket.display(),
            missing.display()
        )
    );
    // The same for the control socket.
    let out = run(&[
        "serve",
        "--socket",
        dir.as_path().join("a.sock").to_str().unwrap(),
        "--control",
        missing.join("ctl").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("directory {} does not exist", missing.display())),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_second_emulator_on_a_live_control_socket_is_told_to_pick_another() {
    let (dir, _child, ctl) = serving();
    let out = run(&[
        "serve",
        "--socket",
        dir.as_path().join("c.sock").to_str().unwrap(),
        "--control",
        ctl.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("give this one --control PATH"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.as_path().join("c.sock").exists());
    assert_answers(&ctl);
}

#[test]
fn control_is_accepted_after_the_subcommand_too() {
    let (_dir, _child, ctl) = serving();
    let out = run(&["observe", "summary", "--control", ctl.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("VERDICT"));
}

#[test]
fn control_defaults_to_one_path_for_every_command() {
    let out = run(&["serve", "--help"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("[default: /tmp/ism-emu.ctl]"));
    for command in [["observe", "--help"], ["fault", "--help"]] {
        let out = run(&command);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("[default: /tmp/ism-emu.ctl]"),
            "{command:?}: {text}"
        );
    }
}

/// A snapshot with one DMB and the given reuse counts, as `observe summary --check`
/// would get it from an emulator.
fn check_exit_code(stale: u64, unchecked: u64, clean: u64) -> Option<i32> {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;
    let dir = tempdir();
    let ctl = dir.as_path().join("ctl");
    let listener = UnixListener::bind(&ctl).unwrap();
    let snapshot = serde_json::json!({
        "chid": "0x1234",
        "functions": [],
        "dmbs": [{
            "function": "ism0", "gid": "0x1", "token": "0x100000000", "rgid": "0x2",
            "len": 65536, "sba_idx": 32, "registered": true, "state": "closed",
            "connections": stale + unchecked + clean + 1, "closes": 1,
            "reuses": stale + unchecked + clean, "clean_reuses": clean,
            "stale_reuses": stale, "unchecked_reuses": unchecked,
            "zeroed_after_close": 0, "not_zeroed": 0,
            "zero_delays_ms": {"le_ms": [], "counts": [], "over": 0, "count": 0, "max_ms": null},
            "bytes": 0, "signals": 0, "recent": []
        }]
    });
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut request = String::new();
        BufReader::new(&stream).read_line(&mut request).unwrap();
        assert_eq!(request, Envelope::new(Request::Snapshot).to_line() + "\n");
        writeln!(&stream, "{snapshot}").unwrap();
    });
    let out = run(&[
        "observe",
        "summary",
        "--check",
        "--control",
        ctl.to_str().unwrap(),
    ]);
    server.join().unwrap();
    assert!(
        out.status.code() != Some(1),
        "the snapshot did not parse: {}",
        stderr(&out)
    );
    out.status.code()
}

#[test]
fn summary_check_exits_with_the_verdicts_documented_status() {
    assert_eq!(check_exit_code(1, 1, 1), Some(3), "STALE");
    assert_eq!(check_exit_code(0, 1, 1), Some(4), "UNKNOWN");
    assert_eq!(check_exit_code(0, 0, 1), Some(0), "CLEAN");
    assert_eq!(check_exit_code(0, 0, 0), Some(0), "no reuse");
}

#[test]
fn summary_without_check_exits_0_whatever_the_verdict() {
    // Scripts run `observe summary` for its tables: a STALE verdict is no error there.
    let (_dir, _child, ctl) = serving();
    let out = run(&["observe", "--control", ctl.to_str().unwrap(), "summary"]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn timeline_out_dash_writes_to_stdout() {
    let dir = tempdir();
    let events = dir.as_path().join("events.jsonl");
    std::fs::write(
        &events,
        "{\"time_us\":1,\"function\":\"ism0\",\"gid\":\"0x1\",\"kind\":\"function_attached\"}\n",
    )
    .unwrap();
    let out = run(&[
        "observe",
        "timeline",
        "--from",
        events.to_str().unwrap(),
        "--out",
        "-",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["traceEvents"].is_array());
    assert!(!Path::new("-").exists() && !dir.as_path().join("-").exists());
}

#[test]
fn a_bare_chid_is_refused_and_hex_is_read_as_hex() {
    let dir = tempdir();
    let socket = dir.as_path().join("a.sock");
    let out = run(&[
        "serve",
        "--chid",
        "1234",
        "--socket",
        socket.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("write the CHID in hex with 0x (e.g. 0x1234)"),
        "{}",
        stderr(&out)
    );
    let out = run(&["serve", "--help"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("a bare number is refused"));
}

#[test]
fn replay_of_a_binary_file_says_it_is_not_a_trace() {
    let dir = tempdir();
    let file = dir.as_path().join("binary");
    std::fs::write(&file, [0xff, 0xfe, 0x00, 0x80, b'\n', 0xc3]).unwrap();
    let out = run(&["replay", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    assert!(text.contains("not an ism-emu trace"), "{text}");
    assert!(!text.contains("UTF-8"), "{text}");
    // timeline --from takes an event file or a trace: neither.
    let out = run(&[
        "observe",
        "timeline",
        "--from",
        file.to_str().unwrap(),
        "--out",
        "-",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    assert!(
        text.contains("line 1: not text: not an event file"),
        "{text}"
    );
    assert!(!text.contains("UTF-8"), "{text}");
}

/// Stops a serving emulator with SIGTERM (it must exit 0) and returns what it logged.
fn stop_and_read_log(mut child: Running) -> String {
    child.signal(Signal::SIGTERM);
    assert!(child.wait().unwrap().success());
    let mut log = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    log
}

#[test]
fn log_lines_carry_a_utc_clock_and_the_level_can_be_set_on_the_command_line() {
    let dir = tempdir();
    let ctl = dir.as_path().join("ctl");
    let child = Running::spawn(
        Command::new(BIN)
            .args(["serve", "--log-level", "warn", "--socket"])
            .arg(dir.as_path().join("a.sock"))
            .arg("--control")
            .arg(&ctl)
            .env("RUST_LOG", "debug")
            .stderr(Stdio::piped()),
    );
    assert!(wait_for(&ctl));
    let quiet = stop_and_read_log(child);
    assert_eq!(quiet, "", "--log-level warn replaces RUST_LOG=debug");
    let child = Running::spawn(
        Command::new(BIN)
            .args(["serve", "-v", "--socket"])
            .arg(dir.as_path().join("a.sock"))
            .arg("--control")
            .arg(&ctl)
            .env_remove("RUST_LOG")
            .stderr(Stdio::piped()),
    );
    assert!(wait_for(&ctl));
    let log = stop_and_read_log(child);
    let first = log.lines().next().unwrap_or_default();
    // [21:03:04.123Z INFO  ism_emu::cli::serve] fabric CHID ...
    let clock = &first[1..first.find(' ').unwrap()];
    assert_eq!(clock.len(), 13, "{first}");
    assert!(
        clock.ends_with('Z') && clock.as_bytes()[2] == b':',
        "{first}"
    );
    assert!(
        first.contains(" INFO  ism_emu::cli::serve] fabric CHID"),
        "{first}"
    );
}

#[test]
fn completions_and_man_pages_come_from_the_command_line_definition() {
    let out = run(&["completions", "bash"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ism-emu") && text.contains("--control"),
        "{text}"
    );
    let out = run(&["man"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(".TH ism-emu 1"));
    let dir = tempdir();
    // A directory that does not exist yet is created, as an install step needs.
    let man1 = dir.as_path().join("share/man/man1");
    let out = run(&["man", "--dir", man1.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    for page in ["ism-emu.1", "ism-emu-serve.1", "ism-emu-observe-summary.1"] {
        assert!(man1.join(page).exists(), "{page}");
    }
}

#[test]
fn help_documents_the_exit_statuses() {
    for command in [
        &["--help"][..],
        &["fault", "--help"],
        &["observe", "--help"],
    ] {
        let out = run(command);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("Exit status: 0 success; 1 failure; 2 usage error"),
            "{command:?}: {text}"
        );
    }
    let out = run(&["observe", "summary", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Exit with 3 if the verdict is STALE or CROSSED, 4 if it is UNKNOWN"),
        "{text}"
    );
}

#[test]
fn the_dropped_event_warning_prints_the_event_in_hex() {
    let dir = tempdir();
    let ctl = dir.as_path().join("ctl");
    let child = Running::spawn(
        Command::new(BIN)
            .args(["serve", "--chid", "0x42", "--socket"])
            .arg(dir.as_path().join("a.sock"))
            .arg("--socket")
            .arg(dir.as_path().join("b.sock"))
            .arg("--control")
            .arg(&ctl)
            .env_remove("RUST_LOG")
            .stderr(Stdio::piped()),
    );
    assert!(wait_for(&ctl));
    let out = fault_cmd(&ctl, &["add", "gid-disabled@ism1,peer=ism0"]);
    assert_eq!(out.status.code(), Some(1));
    let log = stop_and_read_log(child);
    let line = log
        .lines()
        .find(|l| l.contains("dropped"))
        .unwrap_or_default();
    assert!(
        line.ends_with(
            "ism1 (gid 0x00420049534d0002): GID event code 7 (GID disabled) for GID 0x00420049534d0001 dropped: no IEQ/SBA registered"
        ),
        "{log}"
    );
}

/// Runs `ism-emu ARGS` with its stdout a pipe whose reading end is closed before the
/// child starts: its write fails with EPIPE (Rust programs ignore SIGPIPE), whatever the
/// timing. It must end with status 1 and a message, not a panic.
fn assert_closed_stdout_fails_cleanly(args: &[&str]) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = Running::spawn(
        Command::new(BIN)
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped()),
    );
    let status = child.wait().unwrap();
    let mut text = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    assert!(!text.contains("panicked"), "{text}");
    assert_eq!(status.code(), Some(1), "{text}");
}

#[test]
fn completions_into_a_closed_pipe_fail_without_a_panic() {
    assert_closed_stdout_fails_cleanly(&["completions", "bash"]);
}

#[test]
fn observe_into_a_closed_pipe_fails_without_a_panic() {
    let (_dir, _child, ctl) = serving();
    assert_closed_stdout_fails_cleanly(&["observe", "--control", ctl.to_str().unwrap(), "summary"]);
}
