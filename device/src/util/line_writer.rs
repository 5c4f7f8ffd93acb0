//! A writer thread fed through a bounded channel: the observer's event stream and the
//! trace both write this way, so that whoever produces lines (under the fabric's lock)
//! never waits for a file or a socket.
//!
//! The thread does nothing while the queue is empty: after a burst it waits
//! [`PAUSE`] for more, calls [`Sink::pause`] (flush, owed counts) and then sleeps in a
//! blocking receive until the next item. An idle emulator has no timer running.

use std::io;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::Duration;

/// How long the queue stays quiet before the sink's pause work runs.
pub const PAUSE: Duration = Duration::from_millis(100);

/// What the thread writes to.
pub trait Sink: Send + 'static {
    type Item: Send + 'static;
    /// One item, in the order it was queued.
    fn write(&mut self, item: Self::Item);
    /// The queue went quiet, a [`LineWriter::sync`] came, or the writer ends: flush, and
    /// write what is owed (counts of lost lines).
    fn pause(&mut self);
}

enum Msg<T> {
    Item(T),
    /// Answered once every item queued before it is written and the sink paused.
    Sync(SyncSender<()>),
}

/// The producers' side of the writer thread.
pub struct LineWriter<T> {
    tx: SyncSender<Msg<T>>,
}

/// The queue was full (or the writer gone): the item was not queued.
#[derive(Debug)]
pub struct Full;

impl<T: Send + 'static> LineWriter<T> {
    /// Starts thread `name` writing to `sink`, with `capacity` items queued at most.
    pub fn spawn<S: Sink<Item = T>>(name: &str, capacity: usize, sink: S) -> io::Result<Self> {
        let (tx, rx) = sync_channel(capacity);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || run(sink, &rx))?;
        Ok(Self { tx })
    }

    /// Queues `item`; never blocks.
    pub fn send(&self, item: T) -> Result<(), Full> {
        match self.tx.try_send(Msg::Item(item)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => Err(Full),
        }
    }

    /// Waits until every item queued so far is written and flushed.
    pub fn sync(&self) {
        let (done, wait) = sync_channel(1);
        if self.tx.send(Msg::Sync(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

fn run<S: Sink>(mut sink: S, rx: &Receiver<Msg<S::Item>>) {
    loop {
        let msg = match rx.recv_timeout(PAUSE) {
            Ok(msg) => msg,
            Err(RecvTimeoutError::Timeout) => {
                sink.pause();
                match rx.recv() {
                    Ok(msg) => msg,
                    Err(_) => break,
                }
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match msg {
            Msg::Item(item) => sink.write(item),
            Msg::Sync(done) => {
                sink.pause();
                let _ = done.send(());
            }
        }
    }
    sink.pause();
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<Vec<String>>>);

    impl Sink for Log {
        type Item = u32;
        fn write(&mut self, item: u32) {
            self.0.lock().unwrap().push(item.to_string());
        }
        fn pause(&mut self) {
            self.0.lock().unwrap().push("pause".into());
        }
    }

    #[test]
    fn items_come_out_in_order_and_a_sync_pauses_after_them() {
        let log = Log::default();
        let writer = LineWriter::spawn("test-writer", 8, log.clone()).unwrap();
        for i in 0..3 {
            writer.send(i).unwrap();
        }
        writer.sync();
        assert_eq!(*log.0.lock().unwrap(), ["0", "1", "2", "pause"]);
    }

    #[test]
    fn a_quiet_queue_pauses_once_then_sleeps() {
        let log = Log::default();
        let writer = LineWriter::spawn("test-writer", 8, log.clone()).unwrap();
        writer.send(7).unwrap();
        std::thread::sleep(PAUSE * 4);
        assert_eq!(*log.0.lock().unwrap(), ["7", "pause"]);
    }

    #[test]
    fn a_full_queue_refuses_without_waiting() {
        struct Slow;
        impl Sink for Slow {
            type Item = ();
            fn write(&mut self, (): ()) {
                std::thread::sleep(Duration::from_millis(200));
            }
            fn pause(&mut self) {}
        }
        let writer = LineWriter::spawn("test-writer", 1, Slow).unwrap();
        let refused = (0..10).filter(|_| writer.send(()).is_err()).count();
        assert!(refused >= 8, "{refused}");
    }
}
