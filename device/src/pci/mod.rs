//! The PCI face of the function: configuration space and the region (BAR) table.

pub mod config_space;
pub mod regions;

pub use config_space::ConfigSpace;
pub use regions::{region_size, Bar, Region};
