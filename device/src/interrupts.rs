//! The function's one interrupt vector, as eventfds handed over by `SET_IRQS`.
//!
//! The ISM driver asks for exactly one MSI vector; QEMU's s390 code only plugs functions
//! that also offer MSI-X. Whichever of the two the guest enabled has an eventfd here, and
//! raising the interrupt writes to it. QEMU turns that into an adapter interrupt.

use std::fs::File;
use std::io::Write;

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK,
    VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX, VFIO_PCI_NUM_IRQS,
};
use vfio_user::IrqInfo;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IrqError {
    #[error("interrupt index {0} has no vectors")]
    NoSuchIndex(u32),
    #[error("vectors {start}..+{count} outside the single vector of index {index}")]
    OutOfRange { index: u32, start: u32, count: u32 },
    #[error("SET_IRQS flags {0:#x} are not supported")]
    Unsupported(u32),
    #[error("SET_IRQS with {got} file descriptors for {count} vectors")]
    FdCount { got: usize, count: u32 },
}

/// The IRQ indexes the function advertises: no INTx, one MSI, one MSI-X vector.
pub fn irq_infos() -> Vec<IrqInfo> {
    (0..VFIO_PCI_NUM_IRQS)
        .map(|index| IrqInfo {
            index,
            flags: VFIO_IRQ_INFO_EVENTFD,
            count: u32::from(index == VFIO_PCI_MSI_IRQ_INDEX || index == VFIO_PCI_MSIX_IRQ_INDEX),
        })
        .collect()
}

#[derive(Default)]
pub struct Interrupts {
    msi: Option<File>,
    msix: Option<File>,
}

impl Interrupts {
    /// Applies a `SET_IRQS` message.
    pub fn set(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        mut fds: Vec<File>,
    ) -> Result<(), IrqError> {
        let slot = match index {
            VFIO_PCI_MSI_IRQ_INDEX => &mut self.msi,
            VFIO_PCI_MSIX_IRQ_INDEX => &mut self.msix,
            _ => return Err(IrqError::NoSuchIndex(index)),
        };
        if flags & VFIO_IRQ_SET_ACTION_TYPE_MASK != VFIO_IRQ_SET_ACTION_TRIGGER {
            // Masking is QEMU's business for MSI/MSI-X; nothing to do here.
            return Ok(());
        }
        match flags & VFIO_IRQ_SET_DATA_TYPE_MASK {
            // count 0 with DATA_NONE tears the vector down (guest disabled MSI).
            VFIO_IRQ_SET_DATA_NONE if count == 0 => {
                *slot = None;
                Ok(())
            }
            VFIO_IRQ_SET_DATA_EVENTFD => {
                if count == 0 {
                    *slot = None;
                    return Ok(());
                }
                if start != 0 || count != 1 {
                    return Err(IrqError::OutOfRange {
                        index,
                        start,
                        count,
                    });
                }
                if fds.len() != 1 {
                    return Err(IrqError::FdCount {
                        got: fds.len(),
                        count,
                    });
                }
                *slot = fds.pop();
                Ok(())
            }
            _ => Err(IrqError::Unsupported(flags)),
        }
    }

    /// Raises the vector. Returns false when the guest has not enabled one.
    pub fn raise(&mut self) -> bool {
        let Some(fd) = self.msi.as_mut().or(self.msix.as_mut()) else {
            return false;
        };
        match fd.write_all(&1u64.to_ne_bytes()) {
            Ok(()) => true,
            Err(e) => {
                log::warn!("interrupt eventfd write failed: {e}");
                false
            }
        }
    }

    pub fn enabled(&self) -> bool {
        self.msi.is_some() || self.msix.is_some()
    }

    pub fn clear(&mut self) {
        self.msi = None;
        self.msix = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::OwnedFd;

    const TRIGGER_EVENTFD: u32 = VFIO_IRQ_SET_ACTION_TRIGGER | VFIO_IRQ_SET_DATA_EVENTFD;

    /// A pipe stands in for the eventfd: each raise writes one 8-byte count to it.
    fn eventfd_pair() -> (std::io::PipeReader, File) {
        let (reader, writer) = std::io::pipe().unwrap();
        (reader, File::from(OwnedFd::from(writer)))
    }

    #[test]
    fn raise_without_eventfd_reports_no_interrupt() {
        let mut irqs = Interrupts::default();
        assert!(!irqs.raise());
    }

    #[test]
    fn raise_signals_the_msi_eventfd() {
        let mut irqs = Interrupts::default();
        let (efd, file) = eventfd_pair();
        irqs.set(VFIO_PCI_MSI_IRQ_INDEX, TRIGGER_EVENTFD, 0, 1, vec![file])
            .unwrap();
        assert!(irqs.raise());
        assert!(irqs.raise());
        let mut efd = efd;
        let mut counts = [0u8; 16];
        efd.read_exact(&mut counts).unwrap();
        assert_eq!(
            counts,
            [1u64.to_ne_bytes(), 1u64.to_ne_bytes()].concat()[..]
        );
    }

    #[test]
    fn second_vector_is_refused() {
        let mut irqs = Interrupts::default();
        let (_efd, file) = eventfd_pair();
        let err = irqs.set(VFIO_PCI_MSI_IRQ_INDEX, TRIGGER_EVENTFD, 1, 1, vec![file]);
        assert_eq!(
            err,
            Err(IrqError::OutOfRange {
                index: 1,
                start: 1,
                count: 1
            })
        );
    }

    #[test]
    fn intx_index_is_refused() {
        let mut irqs = Interrupts::default();
        let err = irqs.set(0, TRIGGER_EVENTFD, 0, 1, vec![]);
        assert_eq!(err, Err(IrqError::NoSuchIndex(0)));
    }

    #[test]
    fn data_none_with_count_zero_disables() {
        let mut irqs = Interrupts::default();
        let (_efd, file) = eventfd_pair();
        irqs.set(VFIO_PCI_MSI_IRQ_INDEX, TRIGGER_EVENTFD, 0, 1, vec![file])
            .unwrap();
        irqs.set(
            VFIO_PCI_MSI_IRQ_INDEX,
            VFIO_IRQ_SET_ACTION_TRIGGER | VFIO_IRQ_SET_DATA_NONE,
            0,
            0,
            vec![],
        )
        .unwrap();
        assert!(!irqs.enabled());
    }
}
