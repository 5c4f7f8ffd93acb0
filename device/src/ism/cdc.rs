//! The CDC message: what net/smc's SMC-D writes at offset 0 of a DMB, with the signal
//! flag, after each send (net/smc/smc_cdc.h, `struct smcd_cdc_msg`). The device does not
//! interpret it; the host does, to follow connections (observer), to remember what a
//! held failure's DMB said (fabric) and to record it (trace). This is its one layout.
//!
//! ```text
//!   0      1        8              16             22         23          24      32
//!   +------+--------+--------------+--------------+----------+-----------+-------+
//!   | type | (res.) | prod cursor  | cons cursor  |prod_flags|conn_state | (res.)|
//!   | 0xfe |        | wrap  count  | wrap  count  |          |           |       |
//!   +------+--------+--------------+--------------+----------+-----------+-------+
//!     cursors: wrap u16 then count u32, big endian (count: an offset into the data area)
//! ```

/// The CDC area at the start of every DMB: its data area follows.
pub const LEN: usize = 32;
/// The message type in byte 0.
pub const TYPE: u8 = 0xfe;
/// The producer cursor (`smcd_cdc_msg.prod`): wrap (u16) and count (u32), big endian.
pub const PROD_WRAP: usize = 8;
pub const PROD_COUNT: usize = 10;
/// The consumer cursor (`smcd_cdc_msg.cons`), laid out as the producer's.
pub const CONS_WRAP: usize = 16;
pub const CONS_COUNT: usize = 18;
/// `smc_cdc_producer_flags`.
pub const PROD_FLAGS: usize = 22;
/// `smc_cdc_conn_state_flags` and its bits.
pub const CONN_STATE: usize = 23;
pub const PEER_DONE_WRITING: u8 = 0x80;
pub const PEER_CONN_CLOSED: u8 = 0x40;
pub const PEER_CONN_ABORT: u8 = 0x20;

/// The bytes of a DMB's CDC area.
pub type Area = [u8; LEN];

/// One cursor: how many passes over the data area, and the offset into it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub wrap: u16,
    pub count: u32,
}

/// A CDC message as a peer writes it: its cursors and flags.
pub fn message(prod: Cursor, cons: Cursor, prod_flags: u8, conn_state: u8) -> Area {
    let mut m = [0u8; LEN];
    m[0] = TYPE;
    for (at, cursor) in [(PROD_WRAP, prod), (CONS_WRAP, cons)] {
        m[at..at + 2].copy_from_slice(&cursor.wrap.to_be_bytes());
        m[at + 2..at + 6].copy_from_slice(&cursor.count.to_be_bytes());
    }
    m[PROD_FLAGS] = prod_flags;
    m[CONN_STATE] = conn_state;
    m
}

/// The producer cursor's count of a CDC message (`data` at least [`LEN`] bytes; 0 if
/// shorter).
pub fn prod_count(data: &[u8]) -> u32 {
    data.get(PROD_COUNT..PROD_COUNT + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_be_bytes)
}

/// The producer cursor's wrap of a CDC message: how many passes over the data area the
/// sender has finished (0 if `data` is shorter than [`LEN`]).
pub fn prod_wrap(data: &[u8]) -> u16 {
    data.get(PROD_WRAP..PROD_WRAP + 2)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u16::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_puts_its_fields_where_net_smc_reads_them() {
        let m = message(
            Cursor {
                wrap: 0x0102,
                count: 0x0304_0506,
            },
            Cursor {
                wrap: 0x0708,
                count: 0x090a_0b0c,
            },
            0x11,
            PEER_CONN_CLOSED,
        );
        assert_eq!(m[0], 0xfe);
        assert_eq!(m[8..14], [1, 2, 3, 4, 5, 6]);
        assert_eq!(m[16..22], [7, 8, 9, 10, 11, 12]);
        assert_eq!((m[22], m[23]), (0x11, 0x40));
        assert_eq!(prod_count(&m), 0x0304_0506);
        assert_eq!(prod_count(&m[..12]), 0, "too short");
        assert_eq!(prod_wrap(&m), 0x0102);
        assert_eq!(prod_wrap(&m[..9]), 0, "too short");
    }
}
