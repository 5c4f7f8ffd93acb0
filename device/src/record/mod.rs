//! Recorded traces: everything the device is asked to do, in order (`serve --trace`), and
//! their replay offline through the same device model and observer (`ism-emu replay`).
//!
//! - [`file`](mod@file): the trace file: header, lines, the writer thread, the reader;
//! - [`replay`]: a trace run again through a fresh fabric, with the trace's reads.
//!
//! # Layering
//!
//! The recording is below the fabric in time (the fabric writes records as it works) and
//! the replay above it (it drives a fabric). Both stay in one module above the fabric,
//! without an import circle, because the fabric defines what it needs of them itself,
//! as it does for the observer's `EventSink`:
//! - it reports through its own [`Recorder`] trait and [`Record`] type
//!   (`fabric/recorder.rs`): this module's [`Tracer`] implements the trait and writes the
//!   records as the file's lines;
//! - it reads guest memory it did not write (reuse checks, the CDC slot of a held
//!   failure, the zeroing watch's looks) and waits out delays through its own
//!   [`GuestReads`] trait: `LiveReads` in the fabric reads the guests' memory;
//!   [`replay::Recorded`] here hands in the trace's results. The fabric has one path
//!   for both, and no replay mode.
//!
//! What the device reads from guest memory on its own depends on what the *guest* wrote
//! there, which no operation carries: the trace records those reads' results, and a
//! replay uses them instead of reading. Move payloads are recorded only with
//! `--trace-payload`, except the first 32 bytes of a DMB (where the peer writes its CDC
//! messages, which the observer follows): a trace holds no user data by default; a
//! replayed move without its bytes writes zeros after the recorded ones.
//!
//! [`GuestReads`]: crate::fabric::GuestReads

pub mod file;
pub mod replay;

pub use crate::fabric::{MoveResult, MoveVia, Record, Recorder};
pub use file::{read, FunctionHeader, Header, TraceError, Tracer, VERSION};
