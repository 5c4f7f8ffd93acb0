//! The vfio-user backend of one ISM function: the adapter between the messages of its
//! client (QEMU) and the fabric. It sits above the fabric; the device model below knows
//! nothing of the transport.
//!
//! Guest-visible failures are *not* vfio-user errors (the transport would lose their
//! meaning): a failed command answers with a nonzero `ret`. Only a data move that the
//! device refuses fails the region write, because that is how the guest's PCISTB learns
//! that the store did not happen (condition code 1). A move the client posted cannot be
//! answered: its failure is held by the fabric instead.

use std::fs::File;
use std::sync::Arc;

use vfio_bindings::bindings::vfio::{
    VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::DmaMapFlags;

use crate::dmb::FunctionId;
use crate::fabric::{Fabric, Stored};
use crate::guest::interrupts::{has_irq_info, vector_count, IRQ_INFO_FLAGS};
use crate::ism::command::{self, HEADER_LEN};
use crate::ism::opcodes;
use crate::ism::MAX_MOVE_LEN;
use crate::pci::{region_size, Bar, ConfigSpace, Region};
use crate::transport::{wire, Description, Device, Refused, Unmap};
use crate::util::ratelimit::guest_log;

/// What every function tells its client about itself: every PCI region index (unused
/// ones with size 0) and every PCI interrupt index.
pub fn description() -> Description {
    let regions = (0..VFIO_PCI_NUM_REGIONS)
        .map(|index| {
            let size = region_size(index);
            let flags = if size == 0 {
                0
            } else {
                VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE
            };
            wire::RegionInfo {
                argsz: (size_of::<wire::RegionInfo>() as u32).into(),
                flags: flags.into(),
                index: index.into(),
                cap_offset: 0.into(),
                size: size.into(),
                offset: 0.into(),
            }
        })
        .collect();
    let irqs = (0..VFIO_PCI_NUM_IRQS)
        .map(|index| {
            has_irq_info(index).then(|| wire::IrqInfo {
                argsz: (size_of::<wire::IrqInfo>() as u32).into(),
                flags: IRQ_INFO_FLAGS.into(),
                index: index.into(),
                count: vector_count(index).into(),
            })
        })
        .collect();
    Description {
        regions,
        irqs,
        resettable: true,
    }
}

const COMMAND_AREA: usize = Bar::Command.size() as usize;

/// What one function's socket serves: its config space and command area, and the fabric.
pub struct IsmBackend {
    fabric: Arc<Fabric>,
    id: FunctionId,
    name: String,
    /// Fixed for the function's life; kept here so log lines need no fabric lock.
    gid: u64,
    /// A client is talking to us. Set by its first request to the device (VERSION and
    /// the info queries do not reach the backend).
    attached: bool,
    config: ConfigSpace,
    command_area: Box<[u8; COMMAND_AREA]>,
}

fn invalid(msg: String) -> Refused {
    Refused::Invalid(msg)
}

impl IsmBackend {
    pub fn new(fabric: Arc<Fabric>, id: FunctionId) -> Self {
        let (name, gid) = fabric.identity(id);
        Self {
            fabric,
            id,
            name,
            gid,
            attached: false,
            config: ConfigSpace::ism(),
            command_area: Box::new([0; COMMAND_AREA]),
        }
    }

    /// Runs the request now in the command area and leaves the response there.
    fn execute_command(&mut self) {
        let opcode = command::opcode_of(&self.command_area[..]);
        let result = match opcodes::decode(&self.command_area[..]) {
            Ok(cmd) => {
                log::trace!("{}: command {cmd:?}", self.name);
                self.fabric.execute(self.id, cmd)
            }
            Err(e) => {
                self.fabric.command_undecodable(self.id);
                Err(e)
            }
        };
        if let Err(e) = &result {
            let ret = e.ret();
            guest_log!(
                Warn,
                self.name,
                self.gid,
                "command {opcode:#x} failed with ret {ret:#06x}: {e}"
            );
        }
        command::encode(&mut self.command_area[..], opcode, &result);
    }

    fn command_area_range(
        &self,
        offset: u64,
        len: usize,
    ) -> Result<std::ops::Range<usize>, Refused> {
        usize::try_from(offset)
            .ok()
            .and_then(|start| Some(start..start.checked_add(len)?))
            .filter(|r| r.end <= COMMAND_AREA)
            .ok_or_else(|| {
                invalid(format!(
                    "command area access {offset:#x}+{len} out of range"
                ))
            })
    }

    /// Called when the client goes away for good.
    pub fn disconnect(&mut self) {
        if std::mem::take(&mut self.attached) {
            self.fabric.detach(self.id, "client disconnected", false);
        }
        self.config.reset();
        self.command_area.fill(0);
    }

    fn ensure_attached(&mut self) {
        if !self.attached {
            self.attached = true;
            self.fabric.attach(self.id);
        }
    }
}

/// The largest region access a client may ask for: a PCISTB block (the message loop
/// refuses larger ones before they get here; this keeps the device's own bound).
const MAX_ACCESS: usize = MAX_MOVE_LEN;

impl Device for IsmBackend {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), Refused> {
        self.ensure_attached();
        if data.len() > MAX_ACCESS {
            return Err(invalid(format!("read of {} bytes", data.len())));
        }
        match Region::from_index(region) {
            Some(Region::Config) => {
                if !self.config.read(offset, data) {
                    let len = data.len();
                    guest_log!(
                        Warn,
                        self.name,
                        self.gid,
                        "config read {offset:#x}+{len} out of range"
                    );
                    data.fill(0xff);
                }
            }
            Some(Region::Bar(Bar::Command)) => {
                let range = self.command_area_range(offset, data.len())?;
                data.copy_from_slice(&self.command_area[range]);
            }
            // The move window is write-only; MSI-X table reads are QEMU's (it emulates the
            // table) and only reach us if it lets them through.
            Some(Region::Bar(_)) => data.fill(0),
            None => return Err(invalid(format!("read from unknown region {region}"))),
        }
        Ok(())
    }

    fn region_write(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
        posted: bool,
    ) -> Result<(), Refused> {
        self.ensure_attached();
        match Region::from_index(region) {
            // QEMU bounds config accesses itself: a bad one is logged and ignored, as a
            // config write to a register that does not exist is on real hardware.
            Some(Region::Config) => {
                if !self.config.write(offset, data) {
                    let len = data.len();
                    guest_log!(
                        Warn,
                        self.name,
                        self.gid,
                        "config write {offset:#x}+{len} out of range ignored"
                    );
                }
            }
            Some(Region::Bar(Bar::Command)) => match self.command_area_range(offset, data.len()) {
                Ok(range) => {
                    let executes = range.start == 0 && range.len() >= HEADER_LEN;
                    self.command_area[range].copy_from_slice(data);
                    if executes {
                        self.execute_command();
                    }
                }
                Err(e) => {
                    guest_log!(Warn, self.name, self.gid, "{e}; refused");
                    return Err(e);
                }
            },
            // A waited move that fails is refused: QEMU turns that into the PCISTB's
            // condition code 1. A posted one's failure is held by the fabric against the
            // sender's signalling moves into that DMB (fabric/held.rs, `HeldFailures`).
            Some(Region::Bar(Bar::Move)) => {
                if data.len() > MAX_ACCESS {
                    return Err(invalid(format!("move of {} bytes", data.len())));
                }
                match self.fabric.store_move(self.id, offset, data, posted) {
                    Ok(Stored::Landed) => {}
                    Ok(Stored::Held(e)) => {
                        let len = data.len();
                        guest_log!(
                            Warn,
                            self.name,
                            self.gid,
                            "posted move to {offset:#x} ({len} bytes) rejected, held against its signals into that DMB: {e}"
                        );
                    }
                    Err(e) => {
                        let len = data.len();
                        guest_log!(
                            Warn,
                            self.name,
                            self.gid,
                            "move to {offset:#x} ({len} bytes) rejected: {e}"
                        );
                        return Err(Refused::Failed(e.to_string()));
                    }
                }
            }
            Some(Region::Bar(Bar::MsixTable)) => {}
            None => return Err(invalid(format!("write to unknown region {region}"))),
        }
        Ok(())
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> Result<(), Refused> {
        self.ensure_attached();
        self.fabric
            .dma_map(
                self.id,
                address,
                size,
                fd,
                offset,
                flags.contains(DmaMapFlags::WRITE),
            )
            .map_err(|e| {
                guest_log!(
                    Warn,
                    self.name,
                    self.gid,
                    "DMA_MAP iova {address:#x} size {size:#x}: {e}"
                );
                invalid(e.to_string())
            })
    }

    fn dma_unmap(&mut self, what: Unmap) -> Result<(), Refused> {
        self.ensure_attached();
        // An empty range at 0 means everything too.
        match what {
            Unmap::All | Unmap::Range { iova: 0, size: 0 } => self.fabric.dma_unmap_all(self.id),
            Unmap::Range { iova, size } => {
                let removed = self.fabric.dma_unmap(self.id, iova, size);
                log::trace!(
                    "{}: DMA_UNMAP {iova:#x}+{size:#x} removed {removed:#x} bytes",
                    self.name
                );
            }
        }
        Ok(())
    }

    fn reset(&mut self) -> Result<(), Refused> {
        self.ensure_attached();
        self.fabric.detach(self.id, "function reset", true);
        self.config.reset();
        self.command_area.fill(0);
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<(), Refused> {
        self.ensure_attached();
        self.fabric
            .set_irqs(self.id, index, flags, start, count, fds)
            .map_err(|e| {
                guest_log!(Warn, self.name, self.gid, "SET_IRQS index {index}: {e}");
                invalid(e.to_string())
            })
    }
}
