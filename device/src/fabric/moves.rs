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
