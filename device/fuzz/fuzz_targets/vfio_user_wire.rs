//! Raw bytes on a function's socket, served by the real server (`server::spawn_function`,
//! one server thread for the whole fuzzing process, as `ism-emu serve` runs it). Each
//! input is one client connection: the bytes are written, the connection closed; then a
//! well-formed client must still be served (version negotiation and READ_GID answer with
//! the function's GID). Slow by design: the server pauses 10 ms after a client that ended
//! in an error before it accepts the next (docs/fuzzing.md).
#![no_main]

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ism_emu::fabric::Fabric;
use ism_emu::ism::wire::ReadGidRequest;
use ism_emu::testkit::rig::Recorder;
use ism_emu::testkit::Client;
use ism_emu_fuzz::{gid, CHID};
use libfuzzer_sys::fuzz_target;

/// The served socket, started once per process.
fn socket() -> &'static PathBuf {
    static SOCKET: OnceLock<PathBuf> = OnceLock::new();
    SOCKET.get_or_init(|| {
        // The message loop is the project's own (transport/connection.rs) and must not
        // panic on any input: a panic of the serving thread is a crash here too.
        let dir = std::env::temp_dir().join(format!("ism-emu-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("socket directory");
        let path = dir.join("ism0.sock");
        let _ = std::fs::remove_file(&path);
        let fabric = Arc::new(Fabric::new(
            CHID,
            vec![("ism0".into(), gid(0))],
            Arc::new(Recorder::default()),
        ));
        ism_emu::server::spawn_function(fabric, 0, &path).expect("serve ism0");
        path
    })
}

fuzz_target!(|data: &[u8]| {
    let path = socket();
    if let Ok(mut garbage) = UnixStream::connect(path) {
        let timeout = Some(Duration::from_secs(5));
        garbage.set_write_timeout(timeout).expect("timeout");
        garbage.set_read_timeout(timeout).expect("timeout");
        // The server may stop reading halfway (it dropped the client): not an error here.
        let _ = garbage.write_all(data);
        let _ = garbage.shutdown(Shutdown::Write);
        // Read until the server closes its end, so that it never writes to a closed
        // socket (libFuzzer's process does not ignore SIGPIPE).
        let mut sink = Vec::new();
        let drained = garbage.read_to_end(&mut sink);
        assert!(
            !matches!(&drained, Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut),
            "the server holds a client that sent everything and closed for 5 s"
        );
    }
    let mut client = Client::connect(path).expect("the server accepts a new client");
    let reply = client
        .ism_command(&ReadGidRequest::new())
        .expect("the server answers READ_GID");
    assert!(reply.ok(), "READ_GID fails after garbage");
    let answered = reply.get::<ism_emu::ism::wire::ReadGidResponse>();
    assert_eq!(
        answered.map(|r| r.gid.get()),
        Some(gid(0)),
        "READ_GID answer"
    );
});
