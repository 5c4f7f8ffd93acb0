//! The vfio-user region table: which BAR is what, and how big.

use vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX;

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

/// The size of region `index` as the client is told it: 0 for every PCI region index the
/// function does not implement (BARs 1, 3, 5, the ROM, VGA). No region is mmap-able:
/// every access must reach the device model.
pub fn region_size(index: u32) -> u64 {
    Region::from_index(index).map_or(0, Region::size)
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
    fn region_sizes_of_every_pci_index() {
        assert_eq!(region_size(0), Bar::Move.size());
        assert_eq!(region_size(1), 0);
        assert_eq!(region_size(2), 4096);
        assert_eq!(region_size(6), 0, "no expansion ROM");
        assert_eq!(region_size(7), 256);
    }
}
