//! The ISM function model: command area, data-move window, status block and event queue.

pub mod cdc;
pub mod command;
pub mod opcodes;
pub mod status;
pub mod wire;

/// DMBs a function can have: bits in the status block.
pub const NR_DMBS: u32 = 1920;
/// The driver never uses the first 32 status-block bits.
pub const SBA_FIRST_DMB_BIT: u32 = 32;
/// Largest DMB the driver registers (its DMA segment limit).
pub const MAX_DMB_LEN: u32 = 1 << 20;
/// A chunk of a data move never crosses a 4 KiB boundary of the DMB.
pub const MAX_MOVE_LEN: usize = 4096;

/// log2 of the move window (BAR 0). Tokens are `n << 32` and a move addresses
/// `token | idx << 24 | sf << 23 | offset`, so the window must cover the largest token plus
/// 4 GiB; 2^44 allows 4095 tokens and stays far below the guest's 2^48 iomap limit.
pub const MOVE_WINDOW_SHIFT: u32 = 44;

/// A data-move address in BAR 0: `token | idx << 24 | sf << 23 | offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoveAddress {
    pub token: u64,
    pub dmbe: u8,
    pub signal: bool,
    pub offset: u32,
}

impl MoveAddress {
    pub fn decode(window_offset: u64) -> Self {
        Self {
            token: window_offset & !0xffff_ffff,
            dmbe: ((window_offset >> 24) & 0xff) as u8,
            signal: window_offset & (1 << 23) != 0,
            offset: (window_offset & 0x7f_ffff) as u32,
        }
    }

    pub fn encode(&self) -> u64 {
        self.token
            | u64::from(self.dmbe) << 24
            | u64::from(self.signal) << 23
            | u64::from(self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn move_address_round_trips() {
        let addr = MoveAddress {
            token: 7 << 32,
            dmbe: 0,
            signal: true,
            offset: 37,
        };
        assert_eq!(addr.encode(), (7 << 32) | (1 << 23) | 37);
        assert_eq!(MoveAddress::decode(addr.encode()), addr);
    }
}
