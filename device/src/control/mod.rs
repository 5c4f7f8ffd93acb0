//! The control socket: a local Unix socket on which `ism-emu observe` and `ism-emu
//! fault` talk to a running emulator. [`api`] is its wire format, [`server`] the side
//! that serves it.

pub mod api;
pub mod server;

pub use server::Control;
