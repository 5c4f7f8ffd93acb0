//! ism-emu: an emulated IBM ISM PCI function (the SMC-D device of IBM Z) for QEMU s390x
//! guests, served over vfio-user.
//!
//! Layers, from the top down (each uses only those below it; tests/layers.rs holds the
//! code to this, docs/architecture.md draws it):
//! - [`export`]: offline converters only the CLI runs (the timeline, Chrome trace events);
//! - [`server`]: one vfio-user server thread per function socket, the main event loop;
//! - [`record`]: recorded traces (`--trace`) and their replay through a fresh fabric;
//! - [`control`]: the control socket (`ism-emu observe`, `ism-emu fault`): its typed wire
//!   format and its server;
//! - [`backend`]: one function as its vfio-user client sees it (regions, DMA, interrupts):
//!   the transport's [`transport::Device`] over the fabric;
//! - [`observer`]: the host's view: DMB lives, events, the snapshot and its tables (the
//!   fabric's `EventSink`);
//! - [`fabric`]: the functions of one machine, their DMBs, routing between guests; it
//!   reports through its own seams (`EventSink`, `Recorder`) and knows nothing above it;
//! - [`pci`]: configuration space and the BAR table;
//! - [`dmb`]: a registered DMB and the clock, shared by fabric and observer;
//! - [`fault`]: fault injection rules (the fabric asks them at its hooks);
//! - [`ism`]: commands and their wire format, the CDC message, data-move addresses, status
//!   block, events;
//! - [`guest`]: guest memory and interrupts (a guest's IOVA space over its shared RAM,
//!   views of it read without a lock, the one MSI/MSI-X vector);
//! - [`transport`]: the vfio-user message loop and the `Device` it drives, knowing nothing
//!   of ISM;
//! - [`logger`]: the process's log, written by a thread of its own: a log call never waits;
//! - [`util`]: hex, histograms, JSON fields in hex, rate limits (one budget per function for
//!   every log line its guest can cause): helpers that know nothing of ISM.
#![forbid(unsafe_code)]

pub mod backend;
pub mod control;
pub mod dmb;
pub mod export;
pub mod fabric;
pub mod fault;
pub mod guest;
pub mod ism;
pub mod logger;
pub mod observer;
pub mod pci;
pub mod record;
pub mod server;
#[cfg(any(test, feature = "testkit"))]
#[doc(hidden)]
pub mod testkit;
pub mod transport;
pub mod util;

/// The GID of function `index` on fabric `chid`: nonzero, unique on the fabric and the
/// same every time the emulator starts with the same configuration.
pub fn default_gid(chid: u16, index: usize) -> u64 {
    // "ISM" in the middle makes GIDs easy to spot in guest logs.
    (u64::from(chid) << 48) | (0x49_53_4d << 16) | (index as u64 + 1)
}
