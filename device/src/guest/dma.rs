//! The device's view of one guest's memory: the IOVA space QEMU maps for it.
//!
//! QEMU translates the guest's zPCI IOMMU tables and sends one `DMA_MAP` per 4 KiB page,
//! each carrying a *duplicate* fd of the same guest-RAM memfd. Mapping every message
//! would pile up thousands of mmaps, so each backing file is mapped once (keyed by its
//! device and inode) and the IOVA space is a table of `iova -> (backing, file offset)`
//! runs. Unmaps arrive coalesced into power-of-two ranges that may cover many maps or
//! part of one, so unmap has range semantics and splits runs as needed.
//!
//! Only memfds sealed against shrinking are mapped: a truncated mapping would fault.
//!
//! Every access is bounds-checked twice: against the IOVA table (an unmapped byte is an
//! error, never a fault) and by vm-memory's `VolatileSlice` against the mapping.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use vm_memory::bitmap::BS;
use vm_memory::volatile_memory::VolatileSlice;
use vm_memory::VolatileMemory;

use super::backing::{Backing, DmaError, Result};
use super::view::DmaView;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// A run of IOVA space backed by contiguous bytes of one file.
#[derive(Clone)]
struct Run {
    len: u64,
    backing: Arc<Backing>,
    file_offset: u64,
    /// DMA_MAP asked for write access; the device never writes a run without it.
    writable: bool,
}

impl Run {
    /// Whether `self` starts in the file exactly where `before` ends.
    fn continues(&self, before: &Run) -> bool {
        Arc::ptr_eq(&self.backing, &before.backing)
            && before.file_offset + before.len == self.file_offset
            && self.writable == before.writable
    }
}

/// Most IOVA runs one function may have (after merging neighbours): bounds the table a
/// client can grow with DMA_MAPs of scattered pages.
pub const MAX_RUNS: usize = 1 << 16;

/// File identity: duplicate fds of one memfd share it.
type FileKey = (u64, u64);

/// The IOVA space of one PCI function.
#[derive(Default)]
pub struct DmaSpace {
    runs: BTreeMap<u64, Run>,
    backings: HashMap<FileKey, Arc<Backing>>,
    /// The sum of the runs' lengths, kept so a snapshot does not walk the table.
    mapped: u64,
}

impl DmaSpace {
    pub fn new() -> Self {
        Self::default()
    }

    /// Maps `size` bytes of `file` starting at `offset` at `iova`, replacing whatever was
    /// mapped there before (QEMU re-maps a page when the guest re-translates it). A
    /// mapping that is not `writable` is only ever read.
    pub fn map(
        &mut self,
        iova: u64,
        size: u64,
        file: Option<File>,
        offset: u64,
        writable: bool,
    ) -> Result<()> {
        check_range(iova, size)?;
        let file = file.ok_or(DmaError::NoFd)?;
        let meta = file.metadata().map_err(DmaError::Stat)?;
        let file_len = meta.len();
        if offset.checked_add(size).is_none_or(|end| end > file_len) {
            return Err(DmaError::OutsideFile {
                offset,
                size,
                file_len,
            });
        }
        let key = (meta.dev(), meta.ino());
        let backing = match self.backings.get(&key) {
            Some(backing) => Arc::clone(backing),
            None => {
                let backing = Arc::new(Backing::map(file, file_len)?);
                self.backings.insert(key, Arc::clone(&backing));
                backing
            }
        };
        self.unmap(iova, size);
        if self.runs.len() >= MAX_RUNS {
            self.drop_unused_backings();
            return Err(DmaError::TooManyRuns(MAX_RUNS));
        }
        self.runs.insert(
            iova,
            Run {
                len: size,
                backing,
                file_offset: offset,
                writable,
            },
        );
        self.mapped += size;
        self.merge_at(iova);
        Ok(())
    }

    /// Joins the run at `iova` with its neighbours where they continue one another in
    /// the same file: QEMU maps page by page, so a 1 MiB DMB becomes one run, not 256.
    fn merge_at(&mut self, iova: u64) {
        let mut start = iova;
        if let Some((&prev_start, prev)) = self.runs.range(..iova).next_back() {
            let run = &self.runs[&iova];
            if prev_start + prev.len == iova && run.continues(prev) {
                let len = run.len;
                self.runs.remove(&iova);
                if let Some(prev) = self.runs.get_mut(&prev_start) {
                    prev.len += len;
                }
                start = prev_start;
            }
        }
        let Some(end) = self.runs.get(&start).map(|run| start + run.len) else {
            return;
        };
        let joins = match (self.runs.get(&end), self.runs.get(&start)) {
            (Some(next), Some(run)) => next.continues(run),
            _ => false,
        };
        if joins {
            if let Some(next) = self.runs.remove(&end) {
                if let Some(run) = self.runs.get_mut(&start) {
                    run.len += next.len;
                }
            }
        }
    }

    /// Removes every mapping inside `[iova, iova + size)`, splitting runs that straddle
    /// its ends. Returns how many bytes were actually mapped there.
    pub fn unmap(&mut self, iova: u64, size: u64) -> u64 {
        let Some(end) = iova.checked_add(size) else {
            return self.unmap(iova, u64::MAX - iova);
        };
        let mut removed = 0;
        // The run that starts before `iova` may reach into the range.
        let mut starts: Vec<u64> = self
            .runs
            .range(..iova)
            .next_back()
            .filter(|(start, run)| *start + run.len > iova)
            .map(|(start, _)| *start)
            .into_iter()
            .collect();
        starts.extend(self.runs.range(iova..end).map(|(start, _)| *start));
        for start in starts {
            let Some(run) = self.runs.remove(&start) else {
                continue;
            };
            let run_end = start + run.len;
            if start < iova {
                let mut head = run.clone();
                head.len = iova - start;
                self.runs.insert(start, head);
            }
            if run_end > end {
                let mut tail = run.clone();
                tail.len = run_end - end;
                tail.file_offset += end - start;
                self.runs.insert(end, tail);
            }
            removed += run_end.min(end) - start.max(iova);
        }
        self.drop_unused_backings();
        self.mapped -= removed;
        removed
    }

    /// Forgets every mapping (device reset, client gone).
    pub fn clear(&mut self) {
        self.mapped = 0;
        self.runs.clear();
        self.backings.clear();
    }

    pub fn mapped_bytes(&self) -> u64 {
        self.mapped
    }

    /// A snapshot of `[iova, iova + len)` to read without holding whatever guards `self`.
    pub fn view(&self, iova: u64, len: u64) -> Result<DmaView> {
        let mut pieces = Vec::with_capacity(1);
        self.for_each_run(iova, len, Access::Read, |backing, offset, n| {
            pieces.push((Arc::clone(backing), offset, n));
        })?;
        Ok(DmaView::new(pieces, len))
    }

    /// True when every byte of `[iova, iova + len)` is mapped for the device to write
    /// (the SBA, the IEQ and DMBs are).
    pub fn is_writable(&self, iova: u64, len: u64) -> bool {
        len > 0
            && self
                .for_each_run(iova, len, Access::Write, |_, _, _| {})
                .is_ok()
    }

    pub fn write(&self, iova: u64, data: &[u8]) -> Result<()> {
        self.for_each_segment(iova, data.len() as u64, Access::Write, |slice, pos| {
            slice.copy_from(&data[pos..pos + slice.len()]);
            Ok(())
        })
    }

    pub fn read(&self, iova: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len() as u64;
        self.for_each_segment(iova, len, Access::Read, |slice, pos| {
            let n = slice.len();
            slice.copy_to(&mut buf[pos..pos + n]);
            Ok(())
        })
    }

    pub fn write_u64_be(&self, iova: u64, value: u64) -> Result<()> {
        self.write(iova, &value.to_be_bytes())
    }

    /// Atomically ORs `mask` into the byte at `iova`: the guest clears status bits with
    /// atomic instructions while the device sets others in the same word.
    pub fn fetch_or_u8(&self, iova: u64, mask: u8) -> Result<u8> {
        let (backing, offset) = self.locate(iova, 1, Access::Write)?;
        let slice = backing
            .slice(offset, 1)
            .ok_or(DmaError::Unmapped { iova, len: 1 })?;
        let byte = slice
            .get_atomic_ref::<AtomicU8>(0)
            .map_err(|_| DmaError::Unmapped { iova, len: 1 })?;
        Ok(byte.fetch_or(mask, Ordering::SeqCst))
    }

    /// Finds the run holding `[iova, iova + len)` when it lies in one run.
    fn locate(&self, iova: u64, len: u64, access: Access) -> Result<(&Backing, u64)> {
        let unmapped = DmaError::Unmapped { iova, len };
        let (start, run) = self.runs.range(..=iova).next_back().ok_or(unmapped)?;
        let within = iova - start;
        if within.checked_add(len).is_none_or(|end| end > run.len) {
            return Err(DmaError::Unmapped { iova, len });
        }
        if access == Access::Write && !run.writable {
            return Err(DmaError::ReadOnly { iova, len });
        }
        Ok((&run.backing, run.file_offset + within))
    }

    /// Calls `f(slice, position)` for each piece of `[iova, iova + len)`, in order, after
    /// checking that the whole range is mapped (so a failed access writes nothing).
    fn for_each_segment(
        &self,
        iova: u64,
        len: u64,
        access: Access,
        mut f: impl FnMut(VolatileSlice<'_, BS<'_, ()>>, usize) -> Result<()>,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let unmapped = || DmaError::Unmapped { iova, len };
        let mut pieces = Vec::with_capacity(1);
        self.for_each_run(iova, len, access, |backing, offset, n| {
            pieces.push((backing, offset, n))
        })?;
        let mut pos = 0usize;
        for (backing, offset, n) in pieces {
            let n = usize::try_from(n).map_err(|_| unmapped())?;
            let slice = backing.slice(offset, n).ok_or_else(unmapped)?;
            f(slice, pos)?;
            pos += n;
        }
        Ok(())
    }

    /// Calls `f(backing, file offset, length)` for each run piece of `[iova, iova + len)`
    /// after checking the range does not wrap; fails at the first unmapped byte (or, for
    /// a write, the first read-only one).
    fn for_each_run<'a>(
        &'a self,
        iova: u64,
        len: u64,
        access: Access,
        mut f: impl FnMut(&'a Arc<Backing>, u64, u64),
    ) -> Result<()> {
        let unmapped = || DmaError::Unmapped { iova, len };
        iova.checked_add(len).ok_or_else(unmapped)?;
        let (mut cursor, mut left) = (iova, len);
        while left > 0 {
            let (start, run) = self
                .runs
                .range(..=cursor)
                .next_back()
                .ok_or_else(unmapped)?;
            let within = cursor - start;
            if within >= run.len {
                return Err(unmapped());
            }
            if access == Access::Write && !run.writable {
                return Err(DmaError::ReadOnly { iova, len });
            }
            let n = left.min(run.len - within);
            f(&run.backing, run.file_offset + within, n);
            cursor += n;
            left -= n;
        }
        Ok(())
    }

    fn drop_unused_backings(&mut self) {
        // A backing is referenced by the table and by each run that uses it.
        self.backings
            .retain(|_, backing| Arc::strong_count(backing) > 1);
    }
}

fn check_range(iova: u64, size: u64) -> Result<()> {
    if size == 0 || iova.checked_add(size).is_none() {
        return Err(DmaError::BadRange { iova, size });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::view::Scan;
    use crate::testkit::GuestRam;

    const PAGE: u64 = 4096;

    fn space_with_pages(ram: &GuestRam, iova: u64, pages: u64) -> DmaSpace {
        let mut space = DmaSpace::new();
        for i in 0..pages {
            space
                .map(
                    iova + i * PAGE,
                    PAGE,
                    Some(ram.dup_file().unwrap()),
                    i * PAGE,
                    true,
                )
                .unwrap();
        }
        space
    }

    #[test]
    fn page_by_page_maps_of_contiguous_file_bytes_merge_into_one_run() {
        let ram = GuestRam::new(16 * PAGE).unwrap();
        let mut space = space_with_pages(&ram, 0x1_0000_0000, 8);
        assert_eq!(space.runs.len(), 1);
        // Out of order: the gap closes and all three join.
        space.unmap(0x1_0000_0000 + 3 * PAGE, PAGE);
        assert_eq!(space.runs.len(), 2);
        let file = Some(ram.dup_file().unwrap());
        space
            .map(0x1_0000_0000 + 3 * PAGE, PAGE, file, 3 * PAGE, true)
            .unwrap();
        assert_eq!(space.runs.len(), 1);
        // Not contiguous in the file: separate runs.
        let file = Some(ram.dup_file().unwrap());
        space
            .map(0x1_0000_0000 + 8 * PAGE, PAGE, file, 0, true)
            .unwrap();
        assert_eq!(space.runs.len(), 2);
    }

    #[test]
    fn the_run_table_is_capped() {
        let ram = GuestRam::new(2 * PAGE).unwrap();
        let mut space = DmaSpace::new();
        let mut refused = None;
        // Every other page of the IOVA space, from file offset 0: nothing merges.
        for i in 0..=MAX_RUNS as u64 {
            let file = Some(ram.dup_file().unwrap());
            if let Err(e) = space.map(i * 2 * PAGE, PAGE, file, 0, true) {
                refused = Some((i, e));
                break;
            }
        }
        let (at, err) = refused.expect("no cap");
        assert_eq!(at, MAX_RUNS as u64);
        assert!(matches!(err, DmaError::TooManyRuns(_)), "{err:?}");
    }

    #[test]
    fn a_view_reads_the_memory_it_was_taken_of_after_an_unmap() {
        let ram = GuestRam::new(4 * PAGE).unwrap();
        let mut space = space_with_pages(&ram, 0x1_0000_0000, 4);
        ram.write(3 * PAGE + 10, &[7]).unwrap();
        let view = space.view(0x1_0000_0000 + 2 * PAGE, 2 * PAGE).unwrap();
        space.clear();
        assert_eq!(view.scan(0, 2 * PAGE).unwrap(), Scan::Dirty(PAGE + 10));
        assert_eq!(view.scan(0, PAGE).unwrap(), Scan::Zero);
        assert_eq!(view.nonzero().unwrap(), (1, Some(PAGE + 10)));
        assert!(view.read(PAGE, &mut [0; 4097]).is_err(), "past the view");
    }

    #[test]
    fn a_read_only_mapping_is_read_never_written() {
        let ram = GuestRam::new(2 * PAGE).unwrap();
        let mut space = DmaSpace::new();
        let file = Some(ram.dup_file().unwrap());
        space.map(0x4000, 2 * PAGE, file, 0, true).unwrap();
        let file = Some(ram.dup_file().unwrap());
        space.map(0x5000, PAGE, file, PAGE, false).unwrap();
        ram.write(PAGE, &[5]).unwrap();
        let err = space.write(0x5000 - 2, &[1, 2, 3]);
        assert!(matches!(err, Err(DmaError::ReadOnly { .. })), "{err:?}");
        assert!(space.fetch_or_u8(0x5000, 1).is_err());
        assert_eq!(
            ram.read(PAGE - 2, 3).unwrap(),
            vec![0, 0, 5],
            "nothing written"
        );
        assert!(!space.is_writable(0x4000, 2 * PAGE));
        assert_eq!(
            space.view(0x5000, 1).unwrap().nonzero().unwrap(),
            (1, Some(0))
        );
    }

    #[test]
    fn duplicate_fds_share_one_mapping() {
        let ram = GuestRam::new(16 * PAGE).unwrap();
        let space = space_with_pages(&ram, 0x1_0000_0000, 8);
        assert_eq!(space.backings.len(), 1);
        assert_eq!(space.mapped_bytes(), 8 * PAGE);
    }

    #[test]
    fn write_across_pages_lands_at_file_offsets() {
        let ram = GuestRam::new(16 * PAGE).unwrap();
        let space = space_with_pages(&ram, 0x1_0000_0000, 4);
        space
            .write(0x1_0000_0000 + PAGE - 2, &[1, 2, 3, 4])
            .unwrap();
        assert_eq!(ram.read(PAGE - 2, 4).unwrap(), vec![1, 2, 3, 4]);
    }

    #[test]
    fn write_to_unmapped_iova_fails_and_writes_nothing() {
        let ram = GuestRam::new(16 * PAGE).unwrap();
        let space = space_with_pages(&ram, 0x1_0000_0000, 1);
        let err = space.write(0x1_0000_0000 + PAGE - 2, &[9, 9, 9, 9]);
        assert!(matches!(err, Err(DmaError::Unmapped { .. })));
        assert_eq!(ram.read(PAGE - 2, 2).unwrap(), vec![0, 0]);
    }

    #[test]
    fn partial_unmap_splits_a_run() {
        let ram = GuestRam::new(16 * PAGE).unwrap();
        let mut space = DmaSpace::new();
        space
            .map(0x10_0000, 4 * PAGE, Some(ram.dup_file().unwrap()), 0, true)
            .unwrap();
        assert_eq!(space.unmap(0x10_0000 + PAGE, PAGE), PAGE);
        assert_eq!(space.mapped_bytes(), 3 * PAGE);
        assert!(space.is_writable(0x10_0000, PAGE));
        assert!(!space.is_writable(0x10_0000 + PAGE, 1));
        space.write(0x10_0000 + 2 * PAGE, &[7]).unwrap();
        assert_eq!(ram.read(2 * PAGE, 1).unwrap(), vec![7]);
        let file = Some(ram.dup_file().unwrap());
        space.map(0x10_0000, 2 * PAGE, file, 0, true).unwrap();
        assert_eq!(
            space.mapped_bytes(),
            4 * PAGE,
            "a re-map over a run and a hole"
        );
    }

    #[test]
    fn unmap_covering_many_maps_drops_the_backing() {
        let ram = GuestRam::new(16 * PAGE).unwrap();
        let mut space = space_with_pages(&ram, 0x1_0000_0000, 8);
        assert_eq!(space.unmap(0, u64::MAX), 8 * PAGE);
        assert_eq!(space.mapped_bytes(), 0);
        assert!(space.backings.is_empty());
    }

    #[test]
    fn map_beyond_the_file_is_rejected() {
        let ram = GuestRam::new(PAGE).unwrap();
        let mut space = DmaSpace::new();
        let err = space.map(0x1000, 2 * PAGE, Some(ram.dup_file().unwrap()), 0, true);
        assert!(matches!(err, Err(DmaError::OutsideFile { .. })));
    }

    #[test]
    fn wrapping_range_is_rejected() {
        let ram = GuestRam::new(PAGE).unwrap();
        let mut space = DmaSpace::new();
        let err = space.map(u64::MAX - 10, PAGE, Some(ram.dup_file().unwrap()), 0, true);
        assert!(matches!(err, Err(DmaError::BadRange { .. })));
    }

    #[test]
    fn fetch_or_sets_bits_atomically() {
        let ram = GuestRam::new(PAGE).unwrap();
        let space = space_with_pages(&ram, 0x2000, 1);
        space.fetch_or_u8(0x2004, 0x80).unwrap();
        space.fetch_or_u8(0x2004, 0x01).unwrap();
        assert_eq!(ram.read(4, 1).unwrap(), vec![0x81]);
    }
}
