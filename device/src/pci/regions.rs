//! The vfio-user region table: which BAR is what, and how big.

use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_NUM_REGIONS,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::ServerRegion;

use crate::ism::MOVE_WINDOW_SHIFT;

/// Bytes of type-0 configuration space (see `config_space`).
pub const CONFIG_SPACE_SIZE: usize = 256;

/// The function's BARs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bar {
    /// BAR 0: data moves into DMBs.
    Move,
    /// BAR 2: the command request/response buffer.
    Command,
    /// BAR 4: the MSI-X table and PBA (QEMU's s390 code insists on MSI-X).
    MsixTable,
}

pub const BARS: [Bar; 3] = [Bar::Move, Bar::Command, Bar::MsixTable];

impl Bar {
    pub const fn index(self) -> u32 {
        match self {
            Bar::Move => 0,
            Bar::Command => 2,
            Bar::MsixTable => 4,
        }
    }

    pub const fn size(self) -> u64 {
        match self {
            Bar::Move => 1 << MOVE_WINDOW_SHIFT,
            Bar::Command | Bar::MsixTable => 4096,
        }
    }

    pub fn from_region(region: u32) -> Option<Self> {
        BARS.into_iter().find(|bar| bar.index() == region)
    }
}

/// What a region access targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Region {
    Bar(Bar),
    Config,
}

impl Region {
    pub fn from_index(index: u32) -> Option<Self> {
        if index == VFIO_PCI_CONFIG_REGION_INDEX {
            return Some(Region::Config);
        }
        Bar::from_region(index).map(Region::Bar)
    }

    pub fn size(self) -> u64 {
        match self {
            Region::Bar(bar) => bar.size(),
            Region::Config => CONFIG_SPACE_SIZE as u64,
        }
    }
}

/// The full region list for `vfio_user::Server`: every index up to the PCI maximum, unused
/// ones with size 0. No region is mmap-able: every access must reach the device model.
pub fn server_regions() -> Vec<ServerRegion> {
    (0..VFIO_PCI_NUM_REGIONS)
        .map(|index| {
            let size = Region::from_index(index).map_or(0, Region::size);
            let flags = if size == 0 {
                0
            } else {
                VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE
            };
            ServerRegion {
                region_info: vfio_region_info {
                    argsz: std::mem::size_of::<vfio_region_info>() as u32,
                    flags,
                    index,
                    cap_offset: 0,
                    size,
                    offset: 0,
                },
                sparse_areas: Vec::new(),
                mmap_fd: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn move_window_is_a_power_of_two_below_2_pow_48() {
        let size = Bar::Move.size();
        assert!(size.is_power_of_two());
        assert!(size <= 1 << 48);
    }

    #[test]
    fn region_table_covers_every_pci_index() {
        let regions = server_regions();
        assert_eq!(regions.len(), VFIO_PCI_NUM_REGIONS as usize);
        assert_eq!(regions[0].region_info.size, Bar::Move.size());
        assert_eq!(regions[1].region_info.size, 0);
        assert_eq!(regions[2].region_info.size, 4096);
        assert_eq!(regions[6].region_info.size, 0, "no expansion ROM");
        assert_eq!(regions[7].region_info.size, 256);
    }
}
