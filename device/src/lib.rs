//! ism-emu: an emulated IBM ISM PCI function (the SMC-D device of IBM Z) for QEMU s390x
//! guests, served over vfio-user.
//!
//! Layers, from the wire inwards:
//! - [`server`]: one vfio-user server per function socket, the main event loop;
//! - [`ism::function`]: one function as its client sees it (regions, DMA, interrupts);
//! - [`pci`]: configuration space and the BAR table;
//! - [`ism`]: commands, data-move addresses, status block and event queue;
//! - [`fabric`]: the functions of one machine, their DMBs, routing between guests;
//! - [`dma`]: a guest's IOVA space over its shared RAM;
//! - [`interrupts`]: the one MSI/MSI-X vector;
//! - [`observer`]: the host's view: DMB lives, events, control socket;
//! - [`ratelimit`]: keeps guest-triggered log lines from flooding the host's log.

pub mod dma;
pub mod fabric;
pub mod interrupts;
pub mod ism;
pub mod observer;
pub mod pci;
pub mod ratelimit;
pub mod server;
pub mod testkit;

/// The GID of function `index` on fabric `chid`: nonzero, unique on the fabric and the
/// same every time the emulator starts with the same configuration.
pub fn default_gid(chid: u16, index: usize) -> u64 {
    // "ISM" in the middle makes GIDs easy to spot in guest logs.
    (u64::from(chid) << 48) | (0x49_53_4d << 16) | (index as u64 + 1)
}
