//! Data moves: a PCISTB into the move window becomes a copy into the owner's DMB, SBA
//! bits and an interrupt; and the zeroing poll the observer asks for.

use crate::dma::DmaError;
use crate::dmb::FunctionId;
use crate::ism::{MoveAddress, MAX_MOVE_LEN};

use super::{Fabric, FabricState};

/// A rejected data move. The sender's PCISTB fails and its connection aborts.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("empty or oversized move of {0} bytes")]
    BadLength(usize),
    #[error("unknown DMB token {0:#x}")]
    UnknownToken(u64),
    #[error("sender GID {sender:#018x} is neither the owner nor the registered peer {rgid:#018x} of token {token:#x}")]
    WrongSender { token: u64, sender: u64, rgid: u64 },
    #[error(
        "move of {len} bytes at offset {offset:#x} overruns DMB {token:#x} of {dmb_len} bytes"
    )]
    OutOfRange {
        token: u64,
        offset: u32,
        len: usize,
        dmb_len: u32,
    },
    #[error("DMBE index {0} out of range")]
    BadElement(u8),
    #[error("owner of token {0:#x} is not attached")]
    OwnerGone(u64),
    #[error("owner's DMB is no longer mapped")]
    OwnerUnmapped(#[source] DmaError),
}

impl Fabric {
    /// A data move by function `sender` (a PCISTB to its BAR 0 at `window_offset`).
    pub fn move_data(
        &self,
        sender: FunctionId,
        window_offset: u64,
        data: &[u8],
    ) -> Result<(), MoveError> {
        let mut st = self.lock();
        let st = &mut *st;
        let result = self.move_locked(st, sender, window_offset, data);
        let counters = &mut st.functions[sender].counters;
        match result {
            Ok(()) => {
                counters.moves_out += 1;
                counters.bytes_out += data.len() as u64;
            }
            Err(_) => counters.moves_rejected += 1,
        }
        result
    }

    fn move_locked(
        &self,
        st: &mut FabricState,
        sender: FunctionId,
        window_offset: u64,
        data: &[u8],
    ) -> Result<(), MoveError> {
        if data.is_empty() || data.len() > MAX_MOVE_LEN {
            return Err(MoveError::BadLength(data.len()));
        }
        let addr = MoveAddress::decode(window_offset);
        let sender_gid = st.functions[sender].gid;
        let dmb = st
            .dmbs
            .get(&addr.token)
            .ok_or(MoveError::UnknownToken(addr.token))?;
        if dmb.owner != sender && dmb.rgid != sender_gid {
            return Err(MoveError::WrongSender {
                token: dmb.token,
                sender: sender_gid,
                rgid: dmb.rgid,
            });
        }
        let end = u64::from(addr.offset) + data.len() as u64;
        if end > u64::from(dmb.len) {
            return Err(MoveError::OutOfRange {
                token: dmb.token,
                offset: addr.offset,
                len: data.len(),
                dmb_len: dmb.len,
            });
        }
        if addr.dmbe >= 16 {
            return Err(MoveError::BadElement(addr.dmbe));
        }
        let owner = &mut st.functions[dmb.owner];
        if !owner.attached {
            return Err(MoveError::OwnerGone(dmb.token));
        }
        self.events.before_move(dmb, &owner.dma, &addr, data);
        owner
            .dma
            .write(dmb.iova + u64::from(addr.offset), data)
            .map_err(MoveError::OwnerUnmapped)?;
        owner.counters.moves_in += 1;
        owner.counters.bytes_in += data.len() as u64;
        if addr.signal {
            owner.counters.signals_in += 1;
            match owner.sba {
                Some(sba) => match sba.signal_dmb(&owner.dma, dmb.sba_idx, addr.dmbe) {
                    Ok(()) => owner.interrupt(),
                    Err(e) => log::warn!(
                        "{}: signal for token {:#x} lost: SBA {e}",
                        owner.name,
                        dmb.token
                    ),
                },
                None => log::warn!(
                    "{}: signal for token {:#x} lost: no SBA registered",
                    owner.name,
                    dmb.token
                ),
            }
        }
        self.events.after_move(dmb, &addr, data);
        Ok(())
    }

    /// Looks at the DMBs whose connection closed, so the observer sees the guest zero them.
    pub fn poll_zeroing(&self) {
        let st = self.lock();
        self.events.poll_zeroing(&|token| {
            let dmb = st.dmbs.get(&token)?;
            let mem = &st.functions[dmb.owner].dma;
            mem.first_nonzero(dmb.iova, u64::from(dmb.len))
                .ok()
                .map(|first| first.is_none())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::rig::Rig;
    use super::MoveError;
    use crate::ism::MoveAddress;

    fn to(token: u64, offset: u32, signal: bool) -> u64 {
        MoveAddress {
            token,
            dmbe: 0,
            signal,
            offset,
        }
        .encode()
    }

    #[test]
    fn a_move_lands_in_the_owners_dmb_and_signals_it() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 33);
        rig.fabric
            .move_data(0, to(token, 100, true), b"hello")
            .unwrap();
        let at = Rig::dmb_offset(33);
        assert_eq!(rig.ram(1, at + 99, 7), b"\0hello\0");
        let sba = rig.ram(1, 0, 4096);
        assert_eq!(sba[0] & 0x80, 0x80, "summary bit");
        assert_eq!(sba[4 + 33 / 8], 0x80 >> (33 % 8), "DMB bit");
        let st = rig.fabric.lock();
        assert_eq!(st.functions[0].counters.bytes_out, 5);
        assert_eq!(st.functions[1].counters.signals_in, 1);
        let calls = rig.sink.calls();
        let tail = &calls[calls.len() - 2..];
        assert_eq!(
            tail,
            [
                format!("before {token:#x}+100 5"),
                format!("after {token:#x}+100 5")
            ]
        );
    }

    #[test]
    fn a_move_from_a_function_that_is_not_the_peer_writes_nothing() {
        let rig = Rig::new(3);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        let err = rig.fabric.move_data(2, to(token, 0, true), b"intruder");
        assert!(matches!(err, Err(MoveError::WrongSender { .. })), "{err:?}");
        assert_eq!(rig.ram(1, Rig::dmb_offset(32), 8), [0; 8]);
        assert_eq!(rig.fabric.lock().functions[2].counters.moves_rejected, 1);
    }

    #[test]
    fn a_move_past_the_end_of_the_dmb_is_refused() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        let err = rig.fabric.move_data(0, to(token, 16380, false), &[1; 8]);
        assert!(matches!(err, Err(MoveError::OutOfRange { .. })), "{err:?}");
    }

    #[test]
    fn element_16_and_unknown_tokens_are_refused() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        let element_16 = to(token, 0, true) | 16 << 24;
        let err = rig.fabric.move_data(0, element_16, b"x");
        assert!(matches!(err, Err(MoveError::BadElement(16))), "{err:?}");
        let err = rig.fabric.move_data(0, to(99 << 32, 0, true), b"x");
        assert!(matches!(err, Err(MoveError::UnknownToken(_))), "{err:?}");
    }

    #[test]
    fn the_zeroing_poll_reads_the_owners_dmb() {
        let rig = Rig::new(2);
        let token = rig.reg_dmb(1, rig.gid(0), 32);
        rig.sink.watch.lock().unwrap().extend([token, 5 << 32]);
        rig.fabric.poll_zeroing();
        rig.fabric.move_data(0, to(token, 8, false), b"x").unwrap();
        rig.fabric.poll_zeroing();
        let calls = rig.sink.calls();
        let polls: Vec<&String> = calls.iter().filter(|c| c.starts_with("zero")).collect();
        assert_eq!(polls[0], &format!("zero {token:#x}: Some(true)"));
        assert_eq!(polls[1], "zero 0x500000000: None", "unknown token");
        assert_eq!(polls[2], &format!("zero {token:#x}: Some(false)"));
    }
}
