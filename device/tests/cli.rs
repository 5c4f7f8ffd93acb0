//! The `ism-emu` binary: serving, observing, shutting down.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ism-emu");

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ism-emu-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
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

fn serve(dir: &Path) -> Child {
    Command::new(BIN)
        .args(["serve", "--chid", "0x42"])
        .arg("--socket")
        .arg(dir.join("a.sock"))
        .arg("--socket")
        .arg(dir.join("b.sock"))
        .arg("--control")
        .arg(dir.join("ctl"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn sigterm_shuts_down_cleanly_and_removes_every_socket() {
    let dir = tempdir("term");
    let mut child = serve(&dir);
    assert!(wait_for(&dir.join("ctl")));
    assert!(dir.join("a.sock").exists() && dir.join("b.sock").exists());
    sigterm(&child);
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status}");
    assert!(!dir.join("a.sock").exists());
    assert!(!dir.join("b.sock").exists());
    assert!(!dir.join("ctl").exists());
}

#[test]
fn observe_lists_the_functions_with_their_gids() {
    let dir = tempdir("observe");
    let mut child = serve(&dir);
    assert!(wait_for(&dir.join("ctl")));
    let out = Command::new(BIN)
        .args(["observe", "--control"])
        .arg(dir.join("ctl"))
        .arg("functions")
        .output()
        .unwrap();
    sigterm(&child);
    child.wait().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("fabric CHID 0x0042"), "{text}");
    assert!(text.contains("0x420049534d0001"), "GID of ism0: {text}");
    assert!(text.contains("ism1"), "{text}");
}

#[test]
fn an_existing_socket_path_is_refused_with_a_clear_message() {
    let dir = tempdir("exists");
    std::fs::write(dir.join("a.sock"), b"").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--socket"])
        .arg(dir.join("a.sock"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists"));
}

#[test]
fn chid_zero_and_reserved_chids_are_refused() {
    for chid in ["0", "0xff00", "0xffff"] {
        let out = Command::new(BIN)
            .args(["serve", "--chid", chid, "--socket", "/nonexistent/x"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "chid {chid} accepted");
    }
}

#[test]
fn observe_without_emulator_says_how_to_start_one() {
    let out = Command::new(BIN)
        .args(["observe", "--control", "/nonexistent/ctl", "summary"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is `ism-emu serve --control"));
}
