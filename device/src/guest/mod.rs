//! Guest memory and interrupts: what the device reaches of each guest.
//!
//! - `backing`: one mmap per guest-RAM file (sealed memfds only), the errors;
//! - [`dma`]: a guest's IOVA space over its shared RAM (the map, checked reads and
//!   writes, atomic ORs into the status block);
//! - [`view`]: snapshots of a range of it, read without the fabric's lock;
//! - [`interrupts`]: the one MSI/MSI-X vector.

mod backing;
pub mod dma;
pub mod interrupts;
pub mod view;

pub use backing::DmaError;
pub use dma::DmaSpace;
pub use view::{DmaView, Scan};
