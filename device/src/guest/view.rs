//! Views of guest memory to read without the fabric's lock: the pieces a range of IOVA
//! space mapped to when the view was taken, kept mapped by their backings. The zeroing
//! watch and the reuse check scan DMBs through them.

use std::sync::Arc;

use vm_memory::bitmap::BS;
use vm_memory::volatile_memory::VolatileSlice;

use super::backing::{Backing, DmaError, Result};

/// A snapshot of `[iova, iova + len)`: the pieces of guest memory it mapped to when it
/// was taken, kept alive by their backings. Reading it needs no lock; if the guest
/// unmaps or remaps meanwhile, the view still reads the memory it was taken of (never
/// freed memory, never outside it).
pub struct DmaView {
    pieces: Vec<(Arc<Backing>, u64, u64)>,
    len: u64,
}

/// What a scan of a view found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// Every byte of the scanned range is zero.
    Zero,
    /// The first nonzero byte, as an offset into the view.
    Dirty(u64),
}

impl DmaView {
    pub(super) fn new(pieces: Vec<(Arc<Backing>, u64, u64)>, len: u64) -> Self {
        Self { pieces, len }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Calls `f(slice)` for each piece of `[offset, offset + len)` of the view, in order.
    fn for_each(
        &self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(VolatileSlice<'_, BS<'_, ()>>) -> bool,
    ) -> Result<()> {
        let out_of_view = || DmaError::Unmapped { iova: offset, len };
        let end = offset.checked_add(len).ok_or_else(out_of_view)?;
        if end > self.len {
            return Err(out_of_view());
        }
        let mut piece_start = 0u64;
        for (backing, file_offset, piece_len) in &self.pieces {
            let piece_end = piece_start + piece_len;
            let from = offset.max(piece_start);
            let to = end.min(piece_end);
            if from < to {
                let n = usize::try_from(to - from).map_err(|_| out_of_view())?;
                let slice = backing
                    .slice(file_offset + (from - piece_start), n)
                    .ok_or_else(out_of_view)?;
                if !f(slice) {
                    break;
                }
            }
            piece_start = piece_end;
        }
        Ok(())
    }

    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let mut pos = 0usize;
        self.for_each(offset, buf.len() as u64, |slice| {
            let n = slice.len();
            slice.copy_to(&mut buf[pos..pos + n]);
            pos += n;
            true
        })
    }

    /// Scans `[offset, offset + len)` page by page for a nonzero byte, stopping there.
    pub fn scan(&self, offset: u64, len: u64) -> Result<Scan> {
        let mut page = [0u8; 4096];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(page.len() as u64) as usize;
            self.read(offset + done, &mut page[..n])?;
            // An OR over the page vectorises; the position is needed only once.
            if page[..n].iter().fold(0u8, |acc, &b| acc | b) != 0 {
                let at = page[..n].iter().position(|&b| b != 0).unwrap_or(0);
                return Ok(Scan::Dirty(offset + done + at as u64));
            }
            done += n as u64;
        }
        Ok(Scan::Zero)
    }

    /// How many bytes of the whole view are nonzero, and the first of them.
    pub fn nonzero(&self) -> Result<(u64, Option<u64>)> {
        let mut page = [0u8; 4096];
        let (mut count, mut first) = (0u64, None);
        let mut done = 0u64;
        while done < self.len {
            let n = (self.len - done).min(page.len() as u64) as usize;
            self.read(done, &mut page[..n])?;
            if page[..n].iter().fold(0u8, |acc, &b| acc | b) != 0 {
                let dirty = page[..n].iter().filter(|&&b| b != 0).count() as u64;
                if first.is_none() {
                    let at = page[..n].iter().position(|&b| b != 0).unwrap_or(0);
                    first = Some(done + at as u64);
                }
                count += dirty;
            }
            done += n as u64;
        }
        Ok((count, first))
    }
}
