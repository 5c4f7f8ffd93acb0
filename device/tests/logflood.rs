//! Log floods (issue 27): hostile functions make the emulator log as fast as they can, on
//! every path a guest can reach, and the emulator is the real binary in a process of
//! its own, so that its stderr can be what the host makes of it:
//!
//! - a pipe nobody reads (a paused terminal, a stopped `| tee`): the victim's moves keep
//!   the isolation bound of `isolation.rs`; lines beyond the logger's queue are dropped,
//!   and once the pipe is read again the log says how many;
//! - a file: it grows by at most 21 lines a second per function (docs/device.md);
//! - and a follower of the event stream that falls behind is told how many lines it lost.
//!
//! The floods run one at a time (`SERIAL`): they measure latencies and rates on a
//! machine of two cores.

mod support;

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ism_emu::control::api::{Envelope, Request};
use ism_emu::default_gid;
use ism_emu::ism::wire::{self, ReqHeader};
use ism_emu::testkit::window;
use ism_emu::testkit::{cmd, msg};
use nix::fcntl::{fcntl, FcntlArg};
use support::latency::{measure, windows};
use support::*;
use vmm_sys_util::tempdir::TempDir;
use zerocopy::IntoBytes;

const BIN: &str = env!("CARGO_BIN_EXE_ism-emu");
/// Functions: ism0 the victim, ism1 its peer, ism2-ism4 hostile.
const FUNCTIONS: usize = 5;
const HOSTILE: [usize; 3] = [2, 3, 4];
/// What the log may grow by, per function and second of flood (docs/device.md): 20
/// lines and the one that says how many more were not logged.
const LINES_PER_SECOND: usize = 21;
/// The config-space region (VFIO_PCI_CONFIG_REGION_INDEX).
const CONFIG_REGION: u32 = 7;
/// Replies the flood and the victim wait for at most; an emulator that does not answer
/// within this has stalled.
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);
/// The emulator's stderr, when a pipe: the smallest there is.
const PIPE_SIZE: i32 = 4096;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// `ism-emu serve` with `FUNCTIONS` functions and a control socket, killed on drop.
struct Emulator {
    child: Child,
    dir: TempDir,
}

impl Emulator {
    fn start(stderr: Stdio) -> Self {
        Self::start_logging(stderr, None)
    }

    /// The same with `RUST_LOG` set to `filter`.
    fn start_logging(stderr: Stdio, filter: Option<&str>) -> Self {
        let dir = TempDir::new_with_prefix(std::env::temp_dir().join("ism-emu-flood-")).unwrap();
        let mut command = Command::new(BIN);
        command
            .args(["serve", "--chid", &format!("{CHID:#x}")])
            .arg("--control")
            .arg(dir.as_path().join("ctl"))
            .env_remove("RUST_LOG")
            .env_remove("RUST_LOG_STYLE")
            .envs(filter.map(|f| ("RUST_LOG", f)))
            .stdout(Stdio::null())
            .stderr(stderr);
        for i in 0..FUNCTIONS {
            command
                .arg("--socket")
                .arg(dir.as_path().join(format!("ism{i}.sock")));
        }
        let emulator = Self {
            child: command.spawn().unwrap(),
            dir,
        };
        // The function sockets are bound before the control socket.
        assert!(
            eventually(|| emulator.control().exists()),
            "no control socket"
        );
        emulator
    }

    fn socket(&self, i: usize) -> PathBuf {
        self.dir.as_path().join(format!("ism{i}.sock"))
    }

    fn control(&self) -> PathBuf {
        self.dir.as_path().join("ctl")
    }

    fn guest(&self, i: usize) -> Guest {
        let guest = Guest::connect(&self.socket(i), RAM_SIZE);
        guest.client.set_reply_timeout(REPLY_TIMEOUT).unwrap();
        guest
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// ism2: with its SBA and IEQ unregistered, every path that logs a line for a guest.
struct Paths {
    g: Guest,
    gid: u64,
    /// Signals into it find no SBA.
    own: Dmb,
    /// Closed and reopened with a byte left from before: a stale reuse each time.
    reuse: Dmb,
    /// A failed move held against the signals into it, lifted by changing its CDC slot.
    held: Dmb,
}

impl Paths {
    fn new(emu: &Emulator, i: usize) -> Self {
        let mut g = emu.guest(i);
        g.probe();
        let gid = default_gid(CHID, i);
        let own = g.reg_dmb(4096, gid);
        let reuse = g.reg_dmb(16384, gid);
        let held = g.reg_dmb(4096, gid);
        assert!(g.command(&wire::UnregSbaRequest::new()).ok());
        assert!(g.command(&wire::UnregIeqRequest::new()).ok());
        Self {
            g,
            gid,
            own,
            reuse,
            held,
        }
    }

    /// One request for every path. Each is answered (refused or not): only one that is
    /// not ends the flood.
    fn round(&mut self, n: u64) -> io::Result<()> {
        let c = &mut self.g.client;
        // fabric/moves.rs: "signal for token ... lost: no SBA registered".
        let _ = c.region_write(MOVE_BAR, window(self.own.token, 64, true), b"lost")?;
        // fabric/mod.rs: "event ... dropped: no IEQ/SBA registered", then (over the
        // SIGNAL_IEQ budget) backend.rs: "command ... failed".
        let signal = wire::SignalIeqRequest::new(self.gid.into(), 1.into(), 0.into(), 0.into());
        let _ = c.ism_command(&signal)?;
        // observer/dmb_life.rs: "DMB ... reused with N stale bytes".
        let _ = c.region_write(
            MOVE_BAR,
            window(self.reuse.token, 0, true),
            &cdc(CDC_CLOSED),
        )?;
        let _ = c.region_write(MOVE_BAR, window(self.reuse.token, 4096, false), b"x")?;
        // backend.rs: "move ... rejected, held"; fabric/held.rs: "... the held failure
        // of an earlier move into it is lifted".
        let _ = c.region_write(MOVE_BAR, window(self.held.token, 4094, false), b"over")?;
        self.g.ram.write(self.held.ram_offset, &n.to_be_bytes())?;
        let _ = c.region_write(MOVE_BAR, window(self.held.token, 64, true), b"cdc")?;
        // backend.rs: "config read ... out of range".
        let _ = c.region_read(CONFIG_REGION, 4096, 4)?;
        // backend.rs: "DMA_MAP ...": beyond the end of the guest's memory file.
        let _ = c.dma_map(0x7_0000_0000, 4096, &self.g.ram, RAM_SIZE)?;
        // backend.rs: "SET_IRQS index 0: ...": INTx has no vectors.
        let irqs = msg::SetIrqs {
            argsz: (size_of::<msg::SetIrqs>() as u32).into(),
            flags: (0x1 | 0x20).into(),
            index: 0.into(),
            start: 0.into(),
            count: 0.into(),
        };
        let _ = c.call(cmd::DEVICE_SET_IRQS, irqs.as_bytes(), &[])?;
        // backend.rs: "command 0x77 failed": no such opcode.
        let unknown = ReqHeader {
            cmd: 0x77.into(),
            reserved: 0.into(),
            len: 8.into(),
        };
        let _ = c.ism_command_raw(unknown.as_bytes())?;
        Ok(())
    }
}

/// ism3: maps a page and resets the function: fabric/mod.rs "function reset; ...".
struct Resets {
    g: Guest,
}

impl Resets {
    fn round(&mut self) -> io::Result<()> {
        let c = &mut self.g.client;
        let _ = c.dma_map(IOVA_BASE, 4096, &self.g.ram, 0)?;
        let _ = c.reset()?;
        Ok(())
    }
}

/// ism4: never reads its interrupt's eventfd, whose counter is full: every signal into
/// its own DMB loses the interrupt (guest/interrupts.rs).
struct Unheard {
    g: Guest,
    own: u64,
}

impl Unheard {
    fn new(emu: &Emulator, i: usize) -> Self {
        let mut g = emu.guest(i);
        g.probe();
        let own = g.reg_dmb(4096, default_gid(CHID, i)).token;
        g.msi.as_ref().unwrap().write(u64::MAX - 1).unwrap();
        Self { g, own }
    }

    fn round(&mut self) -> io::Result<()> {
        let c = &mut self.g.client;
        let _ = c.region_write(MOVE_BAR, window(self.own, 64, true), b"irq")?;
        Ok(())
    }
}

/// The hostile functions, one round of each after the other on one thread, until
/// stopped or the emulator stops answering.
struct Flood {
    stop: Arc<AtomicBool>,
    /// Rounds done so far.
    done: Arc<AtomicU64>,
    thread: JoinHandle<(u64, io::Result<()>)>,
    started: Instant,
}

impl Flood {
    fn start(emu: &Emulator) -> Self {
        let mut paths = Paths::new(emu, HOSTILE[0]);
        let mut resets = Resets {
            g: emu.guest(HOSTILE[1]),
        };
        let mut unheard = Unheard::new(emu, HOSTILE[2]);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let done = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&done);
        let thread = std::thread::spawn(move || {
            let mut rounds = 0;
            while !flag.load(Ordering::Relaxed) {
                let round = paths
                    .round(rounds)
                    .and_then(|()| resets.round())
                    .and_then(|()| unheard.round());
                if round.is_err() {
                    return (rounds, round);
                }
                rounds += 1;
                counter.store(rounds, Ordering::Relaxed);
            }
            (rounds, Ok(()))
        });
        Self {
            stop,
            done,
            thread,
            started: Instant::now(),
        }
    }

    /// Waits until the flood has done `rounds` rounds (or `limit` has passed: a flood
    /// that stopped early says why in `stop`).
    fn wait_rounds(&self, rounds: u64, limit: Duration) {
        while self.done.load(Ordering::Relaxed) < rounds
            && self.started.elapsed() < limit
            && !self.thread.is_finished()
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the flood and prints how fast it went.
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let (rounds, ended) = self.thread.join().unwrap();
        let secs = self.started.elapsed().as_secs_f64();
        println!(
            "flood: {rounds} rounds in {secs:.1} s ({:.0} a second){}",
            rounds as f64 / secs,
            match ended {
                Ok(()) => String::new(),
                Err(e) => format!("; ended by {e}"),
            }
        );
    }
}

/// The victim (ism0) and its peer (ism1), whose DMB the victim moves into.
fn victim_and_peer(emu: &Emulator) -> (Guest, Guest, u64) {
    let mut victim = emu.guest(0);
    victim.probe();
    let mut peer = emu.guest(1);
    peer.probe();
    let token = peer.reg_dmb(16384, default_gid(CHID, 0)).token;
    // Warm up: first moves map and fault in.
    for _ in 0..50 {
        victim.store_move(token, 0, true, 64, b"warmup").unwrap();
    }
    (victim, peer, token)
}

/// Everything that arrives on `stderr` from now on, read by a thread of its own.
fn drain(mut stderr: ChildStderr) -> Arc<Mutex<Vec<u8>>> {
    let text = Arc::new(Mutex::new(Vec::new()));
    let into = Arc::clone(&text);
    std::thread::spawn(move || {
        let mut buf = [0; 65536];
        while let Ok(n @ 1..) = stderr.read(&mut buf) {
            into.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    text
}

/// The emulator's stderr, made the smallest pipe there is (a page): a few lines fill it,
/// as a longer flood fills a paused terminal or a stopped `| tee`.
fn stderr_of(emu: &mut Emulator) -> ChildStderr {
    let stderr = emu.child.stderr.take().unwrap();
    fcntl(&stderr, FcntlArg::F_SETPIPE_SZ(PIPE_SIZE)).unwrap();
    stderr
}

/// What came out of `stderr` once read again, waiting (bounded) until it is `enough`.
fn read_again(stderr: ChildStderr, enough: impl Fn(&str) -> bool) -> String {
    let log = drain(stderr);
    let text = || String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    eventually(|| enough(&text()));
    text()
}

#[test]
fn a_log_flood_into_a_stderr_nobody_reads_does_not_stall_another_functions_moves() {
    let _serial = serial();
    let mut emu = Emulator::start(Stdio::piped());
    let stderr = stderr_of(&mut emu);
    let (mut victim, _peer, token) = victim_and_peer(&emu);

    let idle = measure(&mut victim, token);
    println!("{:<22}{idle}", "idle");
    let bound = idle.bound();

    let flood = Flood::start(&emu);
    // The hostile functions' first lines fill the pipe at once.
    std::thread::sleep(Duration::from_millis(500));
    // The flood is the device's own logging: no attack thread to pause for a control.
    let (flooded, bound) = windows("stderr unread", bound, &mut victim, token, None);
    flood.stop();

    let more_than_the_pipe = |log: &str| log.len() > 2 * PIPE_SIZE as usize;
    let log = read_again(stderr, more_than_the_pipe);
    println!("stderr read again: {} bytes", log.len());
    assert!(
        flooded.within(bound),
        "log flood: {flooded} (bound p99 {bound:?})"
    );
    assert!(more_than_the_pipe(&log), "stderr was never full:\n{log}");
}

#[test]
fn a_stalled_stderr_costs_log_lines_and_the_log_says_how_many() {
    let _serial = serial();
    // Trace and debug lines (one per command, per event) are not limited: with them the
    // flood overflows the logger's queue within a second.
    let mut emu = Emulator::start_logging(Stdio::piped(), Some("trace"));
    let stderr = stderr_of(&mut emu);
    let flood = Flood::start(&emu);
    std::thread::sleep(Duration::from_secs(2));
    // Enough rounds to overflow the queue whatever the host's speed: 870 rounds (2 s on
    // an idle 2-core host) wrote ~6,000 lines, 415 of them dropped; under a parallel
    // build 2 s of flood may not fill the queue (seen), so the test waits for 2,500.
    flood.wait_rounds(2_500, Duration::from_secs(60));
    flood.stop();
    // Read again: the log catches up and says what it dropped meanwhile.
    let log = read_again(stderr, |log| log.contains("log lines dropped"));
    let dropped = log.lines().find(|l| l.contains("log lines dropped"));
    println!("stderr read again: {} bytes; {dropped:?}", log.len());
    assert!(dropped.is_some(), "no line about dropped log lines");
}

/// Lines of the log per function, by the name each line starts with after its header;
/// lines of no function under "-".
fn lines_per_function(log: &str) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for line in log.lines() {
        let text = line.split_once("] ").map_or(line, |(_, text)| text);
        let first = text.split([' ', ':']).next().unwrap_or("");
        let who = if first.starts_with("ism") && first[3..].parse::<usize>().is_ok() {
            first
        } else {
            "-"
        };
        match counts.iter_mut().find(|(name, _)| name == who) {
            Some((_, n)) => *n += 1,
            None => counts.push((who.to_string(), 1)),
        }
    }
    counts.sort();
    counts
}

#[test]
fn a_log_flood_grows_the_log_by_at_most_21_lines_a_second_per_function() {
    const FLOOD_FOR: Duration = Duration::from_secs(3);
    let _serial = serial();
    let dir = TempDir::new_with_prefix(std::env::temp_dir().join("ism-emu-log-")).unwrap();
    let path = dir.as_path().join("stderr");
    let emu = Emulator::start(Stdio::from(File::create(&path).unwrap()));
    let flood = Flood::start(&emu);
    std::thread::sleep(Duration::from_millis(500));
    let before = std::fs::metadata(&path).unwrap().len() as usize;
    std::thread::sleep(FLOOD_FOR);
    let log = std::fs::read(&path).unwrap();
    flood.stop();
    let during = String::from_utf8_lossy(&log[before..]);
    let secs = FLOOD_FOR.as_secs_f64();
    let counts = lines_per_function(&during);
    println!(
        "log during {secs} s of flood: {} lines, {} bytes ({:.0} lines/s, {:.0} bytes/s); per function {counts:?}",
        during.lines().count(),
        during.len(),
        during.lines().count() as f64 / secs,
        during.len() as f64 / secs
    );
    // Windows of a second start at the first line after the last one ended: `secs`
    // seconds overlap at most `secs + 1` of them.
    let most = LINES_PER_SECOND * (FLOOD_FOR.as_secs() as usize + 1);
    for (who, n) in &counts {
        let allowed = if who == "-" { 2 } else { most };
        assert!(
            *n <= allowed,
            "{who}: {n} lines in {secs} s (at most {allowed}):\n{during}"
        );
    }
    let hostile = |i: usize| counts.iter().any(|(who, _)| *who == format!("ism{i}"));
    assert!(
        HOSTILE.into_iter().all(hostile),
        "a hostile function logged nothing"
    );
}

/// Whether `line` is the stream's count of lines it lost (function `-`).
fn is_lost_line(line: &str) -> Option<u64> {
    let event: serde_json::Value = serde_json::from_str(line).ok()?;
    (event["kind"] == "events_dropped" && event["function"] == "-")
        .then(|| event["count"].as_u64())
        .flatten()
}

#[test]
fn a_follower_that_falls_behind_is_told_how_many_lines_it_lost() {
    let _serial = serial();
    let emu = Emulator::start(Stdio::null());
    let mut follower = UnixStream::connect(emu.control()).unwrap();
    writeln!(follower, "{}", Envelope::new(Request::Follow).to_line()).unwrap();
    follower
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let flood = Flood::start(&emu);
    // First about 20 KB a second, a tenth of what the flood makes the stream carry but
    // often enough that the emulator never gives up on the follower (5 s per line),
    // until its queue must have overflowed; then as fast as it comes.
    const SLOW_FOR: Duration = Duration::from_secs(6);
    let start = Instant::now();
    let mut stream = Vec::new();
    let mut lines = 0;
    let mut buf = [0; 65536];
    let lost = loop {
        let slow = start.elapsed() < SLOW_FOR;
        match follower.read(&mut buf[..if slow { 2048 } else { 65536 }]) {
            Ok(0) => break None,
            Ok(n) => stream.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("follower: {e}"),
        }
        // The complete lines read so far, each looked at once.
        let complete = stream
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |end| end + 1);
        let text = String::from_utf8_lossy(&stream[..complete]).into_owned();
        stream.drain(..complete);
        lines += text.lines().count();
        if let Some(count) = text.lines().find_map(is_lost_line) {
            break Some(count);
        }
        if start.elapsed() > SLOW_FOR + Duration::from_secs(10) {
            break None;
        }
        if slow {
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    flood.stop();
    println!(
        "follower: {lines} lines read in {:.1} s; lost line: {lost:?}",
        start.elapsed().as_secs_f64()
    );
    assert!(lost.is_some_and(|n| n > 0), "no lost line in {lines} lines");
}
