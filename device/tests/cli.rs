//! The `ism-emu` binary: serving, observing, shutting down.
//!
//! Every process a test starts belongs to a `Running` guard that kills it when the test
//! ends, failed or not, so no `ism-emu serve` outlives its test.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

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
    assert!(text.contains("0x420049534d0001"), "GID of ism0: {text}");
    assert!(text.contains("ism1"), "{text}");
}

#[test]
fn observe_json_gives_gids_as_hex_strings() {
    let out = observe_fresh("json");
    assert!(out.status.success());
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(snap["chid"], "0x0042");
    assert_eq!(snap["functions"][1]["gid"], "0x420049534d0002");
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
fn chid_zero_and_reserved_chids_are_refused() {
    let dir = tempdir();
    // A socket that `serve` could bind: only the CHID check can make it fail (and
    // `run` kills a `serve` that did not fail within its patience).
    let socket = dir.as_path().join("a.sock");
    for chid in ["0", "0xff00", "0xffff"] {
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
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no function named \"ism7\""), "{stderr}");
    let out = fault(&["add", "frobnicate"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown fault"));
    let out = fault(&["list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cmd=reg_dmb@ism1,rc=0x0006,next=1"), "{text}");
    assert_eq!(text.lines().count(), 2, "{text}");
    let out = fault(&["clear"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "removed 1\n");
    // An action: the event goes out at once and is reported on the stream (again until
    // the follower, started above, is seen to be connected).
    let start = Instant::now();
    let seen = loop {
        let out = fault(&["add", "gid-disabled@ism0,peer=ism1"]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
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
        let _ = writeln!(follower, "follow");
    }
    // No guest, so no event: the slots must come back by themselves.
    std::thread::sleep(Duration::from_millis(1500));
    assert_answers(&ctl);
}
