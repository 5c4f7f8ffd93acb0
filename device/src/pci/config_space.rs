//! Type-0 PCI configuration space: bytes plus a per-byte writable mask.
//!
//! Real hardware ignores writes to read-only fields; so does this model. QEMU emulates
//! the MSI and MSI-X capabilities itself (it intercepts their writes and turns the enable
//! bits into `SET_IRQS`), but it still reads their layout from here, so the capabilities
//! must be well-formed and their control bits writable.
//!
//! ```text
//!  0x00  vendor 0x1014 | device 0x04ED
//!  0x04  command (mem, master, INTx-disable writable) | status (capability list)
//!  0x08  revision | class 0x028000 (other network controller)
//!  0x10  BAR0  64-bit memory: data-move window (token | idx | sf | offset)
//!  0x18  BAR2  64-bit memory: command area
//!  0x20  BAR4  64-bit memory: MSI-X table and PBA
//!  0x30  expansion ROM: none (reads 0, writes ignored)
//!  0x34  capabilities -> 0x40
//!  0x3c  interrupt line (writable) | pin 0 (no INTx)
//!  0x40  MSI, 64-bit, one vector                  -> 0x50
//!  0x50  MSI-X, one entry, table BAR4+0, PBA BAR4+0x800
//! ```

use super::regions::{Bar, BARS, CONFIG_SPACE_SIZE};

pub const VENDOR_IBM: u16 = 0x1014;
pub const DEVICE_ISM: u16 = 0x04ed;
const CLASS_OTHER_NETWORK: u32 = 0x02_80_00;

const COMMAND: usize = 0x04;
const STATUS: usize = 0x06;
const STATUS_CAP_LIST: u16 = 1 << 4;
/// Memory space, bus master, INTx disable. No I/O space: the function has no I/O BARs.
const COMMAND_WRITABLE: u16 = (1 << 1) | (1 << 2) | (1 << 10);
const CAP_POINTER: usize = 0x34;
const INTERRUPT_LINE: usize = 0x3c;

pub const MSI_CAP: usize = 0x40;
pub const MSIX_CAP: usize = 0x50;
const CAP_ID_MSI: u8 = 0x05;
const CAP_ID_MSIX: u8 = 0x11;
/// Message control: 64-bit address capable, one vector requested (MMC = 0).
const MSI_CTRL_64BIT: u16 = 1 << 7;
/// Writable: enable and multiple-message-enable.
const MSI_CTRL_WRITABLE: u16 = 0x0071;
/// Writable: enable and function mask.
const MSIX_CTRL_WRITABLE: u16 = 0xc000;
pub const MSIX_PBA_OFFSET: u32 = 0x800;

const BAR_MEM_64: u32 = 0b100;

#[derive(Clone)]
pub struct ConfigSpace {
    bytes: [u8; CONFIG_SPACE_SIZE],
    writable: [u8; CONFIG_SPACE_SIZE],
}

impl ConfigSpace {
    /// The ISM function's configuration space.
    pub fn ism() -> Self {
        let mut cs = Self {
            bytes: [0; CONFIG_SPACE_SIZE],
            writable: [0; CONFIG_SPACE_SIZE],
        };
        cs.set_u16(0x00, VENDOR_IBM);
        cs.set_u16(0x02, DEVICE_ISM);
        cs.set_u16(COMMAND, 0);
        cs.mask_u16(COMMAND, COMMAND_WRITABLE);
        cs.set_u16(STATUS, STATUS_CAP_LIST);
        cs.set_u32(0x08, CLASS_OTHER_NETWORK << 8);
        cs.set_u16(0x2c, VENDOR_IBM);
        cs.set_u16(0x2e, DEVICE_ISM);
        for bar in BARS {
            cs.add_bar(bar);
        }
        cs.bytes[CAP_POINTER] = MSI_CAP as u8;
        cs.writable[INTERRUPT_LINE] = 0xff;

        cs.bytes[MSI_CAP] = CAP_ID_MSI;
        cs.bytes[MSI_CAP + 1] = MSIX_CAP as u8;
        cs.set_u16(MSI_CAP + 2, MSI_CTRL_64BIT);
        cs.mask_u16(MSI_CAP + 2, MSI_CTRL_WRITABLE);
        cs.mask_u32(MSI_CAP + 4, 0xffff_fffc); // address low, dword aligned
        cs.mask_u32(MSI_CAP + 8, 0xffff_ffff); // address high
        cs.mask_u16(MSI_CAP + 12, 0xffff); // data

        cs.bytes[MSIX_CAP] = CAP_ID_MSIX;
        cs.bytes[MSIX_CAP + 1] = 0;
        cs.set_u16(MSIX_CAP + 2, 0); // table size - 1 = 0: one entry
        cs.mask_u16(MSIX_CAP + 2, MSIX_CTRL_WRITABLE);
        cs.set_u32(MSIX_CAP + 4, Bar::MsixTable.index()); // table at offset 0
        cs.set_u32(MSIX_CAP + 8, MSIX_PBA_OFFSET | Bar::MsixTable.index());
        cs
    }

    fn add_bar(&mut self, bar: Bar) {
        let reg = 0x10 + 4 * bar.index() as usize;
        let size_mask = !(bar.size() - 1);
        self.set_u32(reg, BAR_MEM_64);
        // Address bits below the BAR's size read as zero: that is how sizing works.
        self.mask_u32(reg, (size_mask as u32) & !0xf);
        self.mask_u32(reg + 4, (size_mask >> 32) as u32);
    }

    pub fn read(&self, offset: u64, data: &mut [u8]) -> bool {
        match Self::span(offset, data.len()) {
            Some(range) => {
                data.copy_from_slice(&self.bytes[range]);
                true
            }
            None => false,
        }
    }

    /// Applies a write through the writable mask. Returns false when out of range.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> bool {
        let Some(range) = Self::span(offset, data.len()) else {
            return false;
        };
        for (i, &byte) in range.zip(data) {
            let mask = self.writable[i];
            self.bytes[i] = (self.bytes[i] & !mask) | (byte & mask);
        }
        true
    }

    pub fn u16_at(&self, offset: usize) -> u16 {
        u16::from_le_bytes([self.bytes[offset], self.bytes[offset + 1]])
    }

    pub fn u32_at(&self, offset: usize) -> u32 {
        u32::from_le_bytes(self.bytes[offset..offset + 4].try_into().unwrap_or([0; 4]))
    }

    /// Back to power-on values (device reset).
    pub fn reset(&mut self) {
        *self = Self::ism();
    }

    fn span(offset: u64, len: usize) -> Option<std::ops::Range<usize>> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(len)?;
        (end <= CONFIG_SPACE_SIZE).then_some(start..end)
    }

    fn set_u16(&mut self, offset: usize, value: u16) {
        self.bytes[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
    }

    fn set_u32(&mut self, offset: usize, value: u32) {
        self.bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
    }

    fn mask_u16(&mut self, offset: usize, mask: u16) {
        self.writable[offset..offset + 2].copy_from_slice(&mask.to_le_bytes());
    }

    fn mask_u32(&mut self, offset: usize, mask: u32) {
        self.writable[offset..offset + 4].copy_from_slice(&mask.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_u32(cs: &mut ConfigSpace, offset: u64, value: u32) {
        assert!(cs.write(offset, &value.to_le_bytes()));
    }

    #[test]
    fn identity_is_ibm_ism() {
        let cs = ConfigSpace::ism();
        assert_eq!(cs.u16_at(0), 0x1014);
        assert_eq!(cs.u16_at(2), 0x04ed);
    }

    #[test]
    fn vendor_id_is_read_only() {
        let mut cs = ConfigSpace::ism();
        write_u32(&mut cs, 0, 0xdead_beef);
        assert_eq!(cs.u32_at(0), 0x04ed_1014);
    }

    #[test]
    fn bar0_sizing_reports_the_move_window() {
        let mut cs = ConfigSpace::ism();
        write_u32(&mut cs, 0x10, 0xffff_ffff);
        write_u32(&mut cs, 0x14, 0xffff_ffff);
        let size_mask = (u64::from(cs.u32_at(0x14)) << 32) | u64::from(cs.u32_at(0x10) & !0xf);
        assert_eq!(!size_mask + 1, Bar::Move.size());
        assert_eq!(cs.u32_at(0x10) & 0xf, BAR_MEM_64);
    }

    #[test]
    fn bar2_sizing_reports_4k() {
        let mut cs = ConfigSpace::ism();
        write_u32(&mut cs, 0x18, 0xffff_ffff);
        assert_eq!(cs.u32_at(0x18), 0xffff_f000 | BAR_MEM_64);
    }

    #[test]
    fn rom_bar_reads_zero_after_sizing() {
        let mut cs = ConfigSpace::ism();
        write_u32(&mut cs, 0x30, 0xffff_f800);
        assert_eq!(cs.u32_at(0x30), 0);
    }

    #[test]
    fn capability_chain_is_msi_then_msix() {
        let cs = ConfigSpace::ism();
        let first = cs.bytes[CAP_POINTER] as usize;
        assert_eq!(cs.bytes[first], CAP_ID_MSI);
        let second = cs.bytes[first + 1] as usize;
        assert_eq!(cs.bytes[second], CAP_ID_MSIX);
        assert_eq!(cs.bytes[second + 1], 0);
    }

    #[test]
    fn msi_enable_bit_is_writable_but_capability_bits_are_not() {
        let mut cs = ConfigSpace::ism();
        assert!(cs.write((MSI_CAP + 2) as u64, &0xffffu16.to_le_bytes()));
        assert_eq!(cs.u16_at(MSI_CAP + 2), MSI_CTRL_64BIT | MSI_CTRL_WRITABLE);
    }

    #[test]
    fn access_past_the_end_is_refused() {
        let mut cs = ConfigSpace::ism();
        let mut buf = [0u8; 4];
        assert!(!cs.read(254, &mut buf));
        assert!(!cs.write(u64::MAX, &buf));
    }

    #[test]
    fn reset_restores_power_on_values() {
        let mut cs = ConfigSpace::ism();
        write_u32(&mut cs, 0x04, 0x0000_0006);
        cs.reset();
        assert_eq!(cs.u16_at(COMMAND), 0);
    }
}
