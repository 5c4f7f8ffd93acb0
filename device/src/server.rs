//! Running the emulator: one vfio-user server thread per function socket (its message
//! loop in `transport`, its device the function's `backend`), the zeroing watcher's
//! thread, and a main event loop (event-manager) for the control socket and shutdown.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_manager::{EventManager, EventOps, Events, MutEventSubscriber, SubscriberOps};
use vmm_sys_util::epoll::EventSet;

use crate::backend::{self, IsmBackend};
use crate::control::Control;
use crate::dmb::FunctionId;
use crate::fabric::Fabric;
use crate::observer::{Observer, ZERO_POLL_INTERVAL};
use crate::transport::Connection;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("socket {0} answers: another emulator serves it; stop that one, or give this one another --socket")]
    SocketInUse(PathBuf),
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotSocket(PathBuf),
    #[error("control socket {0} answers: another emulator is running with it; give this one --control PATH")]
    ControlInUse(PathBuf),
    #[error("cannot create socket {}: directory {} does not exist", path.display(), dir.display())]
    NoDirectory { path: PathBuf, dir: PathBuf },
    #[error("cannot listen on {path}")]
    Listen {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot bind the control socket {path}")]
    Control {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot make {path} private to its user")]
    Permissions {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--control {0} exists and is not a socket; refusing to replace it")]
    ControlNotSocket(PathBuf),
    #[error("cannot start the {0} thread")]
    Thread(&'static str, #[source] std::io::Error),
    #[error("cannot create the event loop")]
    EventLoop(#[source] event_manager::Error),
    #[error("cannot make the control socket non-blocking")]
    NonBlocking(#[source] std::io::Error),
    #[error("cannot watch for SIGINT and SIGTERM")]
    Signals(#[source] std::io::Error),
}

/// Binds `path` and serves function `id` on it until the process ends. When a client goes
/// away its state is dropped and the next client is accepted on the same socket.
pub fn spawn_function(fabric: Arc<Fabric>, id: FunctionId, path: &Path) -> Result<(), ServeError> {
    let server = listen(path)?;
    let (name, _) = fabric.identity(id);
    let path = path.to_path_buf();
    // The thread lives as long as the process: nothing joins it.
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || serve_function(fabric, id, &name, &path, server))
        .map_err(|e| ServeError::Thread("function", e))?;
    Ok(())
}

/// A socket's directory must exist: bind's ENOENT names neither it nor the path.
fn directory_exists(path: &Path) -> Result<(), ServeError> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => Err(ServeError::NoDirectory {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
        }),
        _ => Ok(()),
    }
}

fn listen(path: &Path) -> Result<UnixListener, ServeError> {
    replace_stale(path)?;
    directory_exists(path)?;
    let listener = UnixListener::bind(path).map_err(|source| ServeError::Listen {
        path: path.to_path_buf(),
        source,
    })?;
    owner_only(path)?;
    Ok(listener)
}

/// Makes a socket the emulator created usable by its own user only (`ism-emu serve`
/// also runs with umask 077, so there is no moment when it is not).
fn owner_only(path: &Path) -> Result<(), ServeError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|source| {
        ServeError::Permissions {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Removes a stale socket at `path`: one nobody listens on, left by an emulator that was
/// killed before it could remove it. Anything else there (a file, a live emulator's
/// socket) is refused and left alone. A live emulator sees the probe as a client that
/// came and went.
fn replace_stale(path: &Path) -> Result<(), ServeError> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(ServeError::NotSocket(path.to_path_buf()));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(ServeError::SocketInUse(path.to_path_buf()));
    }
    log::info!(
        "{}: replacing a stale socket nobody listens on",
        path.display()
    );
    let _ = std::fs::remove_file(path);
    Ok(())
}

/// Binds the control socket; a stale one is replaced as for a function socket.
fn bind_control(path: &Path) -> Result<UnixListener, ServeError> {
    match replace_stale(path) {
        Err(ServeError::NotSocket(p)) => return Err(ServeError::ControlNotSocket(p)),
        Err(ServeError::SocketInUse(p)) => return Err(ServeError::ControlInUse(p)),
        other => other?,
    }
    directory_exists(path)?;
    let listener = UnixListener::bind(path).map_err(|source| ServeError::Control {
        path: path.to_path_buf(),
        source,
    })?;
    owner_only(path)?;
    Ok(listener)
}

/// The pause after a client ended in an error, before the next is accepted.
const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// One client after another. Whatever ends a client — a disconnect, a protocol error,
/// or a panic in the backend — detaches the function the same way (its DMBs and mappings
/// dropped, its peers told), and the socket serves the next.
fn serve_function(
    fabric: Arc<Fabric>,
    id: FunctionId,
    name: &str,
    path: &Path,
    mut listener: UnixListener,
) {
    let description = backend::description();
    let mut backend = IsmBackend::new(Arc::clone(&fabric), id);
    loop {
        let served = match listener.accept() {
            Ok((stream, _)) => catch_unwind(AssertUnwindSafe(|| {
                Connection::new(stream, &description).serve(&mut backend)
            }))
            .map(|r| r.map_err(|e| e.to_string())),
            Err(e) => Ok(Err(format!("accept: {e}"))),
        };
        let clean = matches!(served, Ok(Ok(())));
        match served {
            Ok(Ok(())) => log::info!("{name}: client disconnected"),
            Ok(Err(e)) => log::warn!("{name}: client dropped: {e}"),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                log::error!("{name}: serving the client panicked ({what}); client dropped");
            }
        }
        if !clean {
            // Errors that repeat at once (accept failing, say) must not spin a core.
            std::thread::sleep(RETRY_PAUSE);
        }
        backend.disconnect();
        // A fresh backend: a panic may have left the old one half-way.
        backend = IsmBackend::new(Arc::clone(&fabric), id);
        if !path.exists() {
            // The socket file went away (removed by hand): bind it again so that the
            // next QEMU can connect.
            match listen(path) {
                Ok(new) => listener = new,
                Err(e) => {
                    log::error!("{name}: {e}; function no longer served");
                    return;
                }
            }
        }
    }
}

/// Accepts control clients.
struct ControlSubscriber {
    control: Control,
    listener: UnixListener,
}

impl MutEventSubscriber for ControlSubscriber {
    fn process(&mut self, _events: Events, _ops: &mut EventOps) {
        self.control.accept_all(&self.listener);
    }
    fn init(&mut self, ops: &mut EventOps) {
        if let Err(e) = ops.add(Events::new(&self.listener, EventSet::IN)) {
            log::error!("control socket not watched: {e:?}");
        }
    }
}

/// Starts the zeroing watcher: a thread that sleeps until a DMB's connection closes, then
/// looks every `ZERO_POLL_INTERVAL` until nothing is watched any more. An idle emulator
/// wakes up for nothing.
pub fn spawn_zero_watcher(fabric: Arc<Fabric>, observer: &Observer) -> Result<(), ServeError> {
    let wake = observer.zero_wakeups();
    std::thread::Builder::new()
        .name("zero-watch".into())
        .spawn(move || {
            while wake.recv().is_ok() {
                while fabric.poll_zeroing() > 0 {
                    std::thread::sleep(ZERO_POLL_INTERVAL);
                }
            }
        })
        .map(|_| ())
        .map_err(|e| ServeError::Thread("zeroing watcher", e))
}

/// Turns SIGINT/SIGTERM into a readable socket for the event loop.
struct Shutdown {
    rx: UnixStream,
    requested: Arc<AtomicBool>,
}

impl MutEventSubscriber for Shutdown {
    fn process(&mut self, _events: Events, _ops: &mut EventOps) {
        self.requested.store(true, Ordering::SeqCst);
    }
    fn init(&mut self, ops: &mut EventOps) {
        if let Err(e) = ops.add(Events::new(&self.rx, EventSet::IN)) {
            log::error!("shutdown pipe not watched: {e:?}");
        }
    }
}

/// The sockets this emulator bound: removed when it stops, whichever way (a failure
/// half-way through the start removes those bound so far, and no other emulator's).
struct Bound {
    paths: Vec<PathBuf>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        for path in &self.paths {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Runs the main loop until SIGINT or SIGTERM, then removes the sockets.
pub fn run(
    fabric: Arc<Fabric>,
    observer: Arc<Observer>,
    sockets: &[PathBuf],
    control_path: Option<&Path>,
) -> Result<(), ServeError> {
    let mut bound = Bound { paths: Vec::new() };
    for (id, path) in sockets.iter().enumerate() {
        spawn_function(Arc::clone(&fabric), id, path)?;
        bound.paths.push(path.clone());
        let (name, gid) = fabric.identity(id);
        log::info!("{name}: gid {gid:#018x} listening on {}", path.display());
    }

    spawn_zero_watcher(Arc::clone(&fabric), &observer)?;
    let mut manager = EventManager::<Arc<Mutex<dyn MutEventSubscriber + Send>>>::new()
        .map_err(ServeError::EventLoop)?;
    if let Some(path) = control_path {
        let listener = bind_control(path)?;
        bound.paths.push(path.to_path_buf());
        listener
            .set_nonblocking(true)
            .map_err(ServeError::NonBlocking)?;
        manager.add_subscriber(Arc::new(Mutex::new(ControlSubscriber {
            control: Control::new(Arc::clone(&fabric), observer),
            listener,
        })));
        log::info!("control socket at {}", path.display());
    }

    let (rx, tx) = UnixStream::pair().map_err(ServeError::Signals)?;
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let tx = tx.try_clone().map_err(ServeError::Signals)?;
        signal_hook::low_level::pipe::register(signal, tx).map_err(ServeError::Signals)?;
    }
    let requested = Arc::new(AtomicBool::new(false));
    manager.add_subscriber(Arc::new(Mutex::new(Shutdown {
        rx,
        requested: Arc::clone(&requested),
    })));

    // No timeout: the loop wakes only for a control client or a signal.
    while !requested.load(Ordering::SeqCst) {
        if let Err(e) = manager.run() {
            log::warn!("event loop: {e:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    log::info!("shutting down");
    Ok(())
}

#[cfg(test)]
mod tests {
    use vmm_sys_util::tempdir::TempDir;

    use super::*;

    fn tempdir() -> TempDir {
        TempDir::new_with_prefix(std::env::temp_dir().join("ism-emu-server-")).unwrap()
    }

    #[test]
    fn a_start_that_fails_half_way_removes_the_sockets_it_bound() {
        let dir = tempdir();
        let sockets: Vec<PathBuf> = ["a.sock", "b.sock"]
            .iter()
            .map(|name| dir.as_path().join(name))
            .collect();
        let functions = (0..2)
            .map(|i| (format!("ism{i}"), crate::default_gid(0x1234, i)))
            .collect();
        let observer = Arc::new(Observer::default());
        let fabric = Arc::new(Fabric::new(0x1234, functions, observer.clone()));
        // The control socket's directory does not exist: the start fails after both
        // function sockets were bound (their threads outlive the test; that is fine).
        let control = dir.as_path().join("missing").join("ctl");
        let failed = run(fabric, observer, &sockets, Some(&control));
        assert!(matches!(failed, Err(ServeError::NoDirectory { .. })));
        for socket in &sockets {
            assert!(!socket.exists(), "{} left behind", socket.display());
        }
    }

    #[test]
    fn what_was_bound_is_removed_whichever_way_the_start_ends_and_nothing_else() {
        let dir = tempdir();
        let ours = dir.as_path().join("ours.sock");
        let theirs = dir.as_path().join("theirs.sock");
        std::fs::write(&ours, b"").unwrap();
        std::fs::write(&theirs, b"").unwrap();
        drop(Bound {
            paths: vec![ours.clone()],
        });
        assert!(!ours.exists());
        assert!(theirs.exists(), "a path this emulator did not bind stays");
    }
}
