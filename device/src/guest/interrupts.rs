//! The function's one interrupt vector, as eventfds handed over by `SET_IRQS`.
//!
//! The ISM driver asks for exactly one MSI vector; QEMU's s390 code only plugs functions
//! that also offer MSI-X. Whichever of the two the guest enabled has an eventfd here, and
//! raising the interrupt writes to it. QEMU turns that into an adapter interrupt.
//! Only eventfds are accepted, and they are written non-blocking: a client that never
//! reads its eventfd loses interrupts, it does not stall the fabric.

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK,
    VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK,
    VFIO_PCI_ERR_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX,
};

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
    #[error("the SET_IRQS file descriptor is not an eventfd")]
    NotEventfd,
    #[error("cannot make the eventfd non-blocking: {0}")]
    NonBlocking(nix::Error),
}

/// An interrupt that did not go out: the eventfd's counter is full (the client never
/// reads it) or the write failed. The caller logs it, within the guest's share of lines.
#[derive(Debug, thiserror::Error)]
#[error("interrupt lost: eventfd write gave {0:?}")]
pub struct IrqLost(std::io::Result<usize>);

/// Accepts `file` as an interrupt only if it is an eventfd, and makes its writes
/// non-blocking: a pipe (or a saturated eventfd) must not stall the fabric's lock.
fn checked_eventfd(file: File) -> Result<File, IrqError> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()));
    if !link.is_ok_and(|target| target.as_os_str() == "anon_inode:[eventfd]") {
        return Err(IrqError::NotEventfd);
    }
    let flags = fcntl(&file, FcntlArg::F_GETFL).map_err(IrqError::NonBlocking)?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(&file, FcntlArg::F_SETFL(flags)).map_err(IrqError::NonBlocking)?;
    Ok(file)
}

/// The vectors of interrupt index `index` (no INTx, one MSI, one MSI-X vector); every
/// index is of the eventfd kind (`IRQ_INFO_FLAGS`).
pub fn vector_count(index: u32) -> u32 {
    u32::from(index == VFIO_PCI_MSI_IRQ_INDEX || index == VFIO_PCI_MSIX_IRQ_INDEX)
}

pub const IRQ_INFO_FLAGS: u32 = VFIO_IRQ_INFO_EVENTFD;

/// Whether `GET_IRQ_INFO` answers for index `index`. The error interrupt exists only for
/// a PCI Express function: the kernel's vfio-pci refuses the question (EINVAL) for any
/// other, and the ISM function has no PCI Express capability (pci/config_space.rs). So
/// the emulator refuses it too, and QEMU, as with a passed-through function, stays
/// silent instead of warning that it "could not enable error recovery".
pub fn has_irq_info(index: u32) -> bool {
    index != VFIO_PCI_ERR_IRQ_INDEX
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
                *slot = fds.pop().map(checked_eventfd).transpose()?;
                Ok(())
            }
            _ => Err(IrqError::Unsupported(flags)),
        }
    }

    /// Raises the vector. Returns false when the guest has not enabled one.
    pub fn raise(&mut self) -> Result<bool, IrqLost> {
        let Some(fd) = self.msi.as_mut().or(self.msix.as_mut()) else {
            return Ok(false);
        };
        // A full counter (EAGAIN) means the client never reads its eventfd.
        match fd.write(&1u64.to_ne_bytes()) {
            Ok(8) => Ok(true),
            result => Err(IrqLost(result)),
        }
    }

    /// A second handle on the vector's eventfd, to raise it later (a delayed interrupt);
    /// `None` when the guest has not enabled one.
    pub fn trigger(&self) -> Option<File> {
        let fd = self.msi.as_ref().or(self.msix.as_ref())?;
        match fd.try_clone() {
            Ok(fd) => Some(fd),
            Err(e) => {
                log::warn!("interrupt eventfd: {e}");
                None
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
    use nix::sys::eventfd::{EfdFlags, EventFd};
    use std::os::fd::{AsFd, OwnedFd};

    const TRIGGER_EVENTFD: u32 = VFIO_IRQ_SET_ACTION_TRIGGER | VFIO_IRQ_SET_DATA_EVENTFD;

    /// An eventfd and the file QEMU would send of it.
    fn eventfd() -> (EventFd, File) {
        let efd = EventFd::from_flags(EfdFlags::EFD_NONBLOCK).unwrap();
        let file = File::from(efd.as_fd().try_clone_to_owned().unwrap());
        (efd, file)
    }

    /// A pipe: what must not be taken for an eventfd.
    fn eventfd_pair() -> (std::io::PipeReader, File) {
        let (reader, writer) = std::io::pipe().unwrap();
        (reader, File::from(OwnedFd::from(writer)))
    }

    #[test]
    fn raise_without_eventfd_reports_no_interrupt() {
        let mut irqs = Interrupts::default();
        assert!(matches!(irqs.raise(), Ok(false)));
    }

    #[test]
    fn raise_signals_the_msi_eventfd() {
        let mut irqs = Interrupts::default();
        let (efd, file) = eventfd();
        irqs.set(VFIO_PCI_MSI_IRQ_INDEX, TRIGGER_EVENTFD, 0, 1, vec![file])
            .unwrap();
        assert!(matches!(irqs.raise(), Ok(true)));
        assert!(matches!(irqs.raise(), Ok(true)));
        assert_eq!(efd.read().unwrap(), 2);
    }

    #[test]
    fn a_pipe_is_not_taken_for_an_eventfd() {
        let mut irqs = Interrupts::default();
        let (_reader, file) = eventfd_pair();
        let err = irqs.set(VFIO_PCI_MSI_IRQ_INDEX, TRIGGER_EVENTFD, 0, 1, vec![file]);
        assert_eq!(err, Err(IrqError::NotEventfd));
    }

    #[test]
    fn raising_a_saturated_eventfd_loses_the_interrupt_instead_of_blocking() {
        // A blocking eventfd whose counter a hostile QEMU has filled to the maximum.
        let efd = EventFd::new().unwrap();
        efd.write(u64::MAX - 1).unwrap();
        let file = File::from(efd.as_fd().try_clone_to_owned().unwrap());
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut irqs = Interrupts::default();
            irqs.set(VFIO_PCI_MSI_IRQ_INDEX, TRIGGER_EVENTFD, 0, 1, vec![file])
                .unwrap();
            let _ = done.send(irqs.raise().is_err());
        });
        let lost = finished.recv_timeout(std::time::Duration::from_secs(2));
        assert_eq!(lost, Ok(true), "the raise blocked or went out");
    }

    #[test]
    fn second_vector_is_refused() {
        let mut irqs = Interrupts::default();
        let (_efd, file) = eventfd();
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
        let (_efd, file) = eventfd();
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
