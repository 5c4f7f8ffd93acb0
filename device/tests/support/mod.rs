//! A fake machine for integration tests: the real emulator serving real sockets, and
//! guests played by a vfio-user client that behaves like QEMU plus the Linux ism driver.
#![allow(dead_code)]

pub mod latency;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ism_emu::fabric::Fabric;
use ism_emu::ism::status::{IeqEntry, IEQ_ENTRY_LEN, IEQ_HEADER_LEN};
use ism_emu::ism::wire::{self, ReqHeader, Request};
use ism_emu::ism::{cdc, MoveAddress};
use ism_emu::observer::Observer;
use ism_emu::testkit::{take_count, Client, CommandReply, GuestRam, Reply, VLAN_SMCD_V2};
use ism_emu::{default_gid, server};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::tempdir::TempDir;
use zerocopy::{FromBytes, IntoBytes};

pub const CHID: u16 = 0x1234;
pub const IOVA_BASE: u64 = 0x1_0000_0000;
pub const PAGE: u64 = 4096;
pub const RAM_SIZE: u64 = 16 << 20;
pub const SBA_PAGE: u64 = 0;
pub const IEQ_PAGE: u64 = 1;
pub const MOVE_BAR: u32 = 0;
pub const CMD_BAR: u32 = 2;
pub const MSI_INDEX: u32 = 1;

/// The emulator with `n` functions on temporary sockets.
pub struct Machine {
    pub fabric: Arc<Fabric>,
    pub observer: Arc<Observer>,
    pub sockets: Vec<PathBuf>,
    _dir: TempDir,
}

impl Machine {
    pub fn start(n: usize) -> Self {
        Self::start_with(n, |_| {})
    }

    /// The same, with `setup` run on the fabric before the functions serve (a tracer).
    pub fn start_with(n: usize, setup: impl FnOnce(&Fabric)) -> Self {
        let _ = env_logger::builder().is_test(true).try_init();
        let dir = TempDir::new_with_prefix(std::env::temp_dir().join("ism-emu-test-")).unwrap();
        let functions = (0..n)
            .map(|i| (format!("ism{i}"), default_gid(CHID, i)))
            .collect();
        let observer = Arc::new(Observer::default());
        let fabric = Arc::new(Fabric::new(CHID, functions, observer.clone()));
        setup(&fabric);
        let sockets: Vec<PathBuf> = (0..n)
            .map(|i| dir.as_path().join(format!("ism{i}.sock")))
            .collect();
        for (i, path) in sockets.iter().enumerate() {
            // The server thread lives as long as the test process; that is fine.
            server::spawn_function(Arc::clone(&fabric), i, path).unwrap();
        }
        Self {
            fabric,
            observer,
            sockets,
            _dir: dir,
        }
    }

    /// A guest on function `i` that has not probed yet.
    pub fn connect(&self, i: usize) -> Guest {
        self.connect_with_ram(i, RAM_SIZE)
    }

    /// The same with `ram_size` bytes of guest RAM.
    pub fn connect_with_ram(&self, i: usize, ram_size: u64) -> Guest {
        Guest::connect(&self.sockets[i], ram_size)
    }

    /// A guest on function `i` after the driver's probe.
    pub fn guest(&self, i: usize) -> Guest {
        let mut g = self.connect(i);
        g.probe();
        g
    }
}

pub struct Dmb {
    pub token: u64,
    pub ram_offset: u64,
    pub len: u32,
    pub sba_idx: u32,
}

pub struct Guest {
    pub client: Client,
    pub ram: GuestRam,
    pub msi: Option<EventFd>,
    next_dmb_page: u64,
    next_sba_idx: u32,
}

impl Guest {
    /// A guest with `ram_size` bytes of RAM on the function socket at `path` (of this
    /// process's emulator or another's), not yet probed.
    pub fn connect(path: &Path, ram_size: u64) -> Self {
        Self {
            client: Client::connect(path).unwrap(),
            ram: GuestRam::new(ram_size).unwrap(),
            msi: None,
            next_dmb_page: 16,
            next_sba_idx: 32,
        }
    }

    pub fn map_pages(&mut self, first_page: u64, pages: u64) {
        self.client
            .dma_map_pages(
                IOVA_BASE + first_page * PAGE,
                pages,
                &self.ram,
                first_page * PAGE,
            )
            .unwrap();
    }

    /// One command, exactly as ism_cmd() issues it (see `Client::ism_command`).
    pub fn command<R: Request>(&mut self, request: &R) -> CommandReply {
        self.client.ism_command(request).unwrap()
    }

    /// A command with any opcode and a header length that may lie.
    pub fn command_with_len(&mut self, op: u32, fields: &[u8], len: u16) -> CommandReply {
        let header = ReqHeader {
            cmd: op.into(),
            reserved: 0.into(),
            len: len.into(),
        };
        let mut request = header.as_bytes().to_vec();
        request.extend_from_slice(fields);
        self.client.ism_command_raw(&request).unwrap()
    }

    /// The driver's probe: MSI, REG_SBA, REG_IEQ, READ_GID, ADD_VLAN_ID(0x1fff), QUERY_INFO.
    pub fn probe(&mut self) -> u64 {
        self.msi = Some(self.client.set_irq_eventfd(MSI_INDEX).unwrap());
        self.map_pages(SBA_PAGE, 2);
        let sba = IOVA_BASE + SBA_PAGE * PAGE;
        assert!(self.command(&wire::RegSbaRequest::new(sba.into())).ok());
        let ieq = IOVA_BASE + IEQ_PAGE * PAGE;
        let reg_ieq = wire::RegIeqRequest::new(ieq.into(), 512.into());
        assert!(self.command(&reg_ieq).ok());
        let gid = self.read_gid();
        let vlan = wire::AddVlanIdRequest::new(VLAN_SMCD_V2.into());
        assert!(self.command(&vlan).ok());
        assert!(self.command(&wire::QueryInfoRequest::new()).ok());
        gid
    }

    pub fn read_gid(&mut self) -> u64 {
        let r = self.command(&wire::ReadGidRequest::new());
        assert!(r.ok());
        r.get::<wire::ReadGidResponse>().unwrap().gid.get()
    }

    pub fn query_rgid(&mut self, rgid: u64) -> CommandReply {
        let vlan_id = VLAN_SMCD_V2 as u32;
        self.command(&wire::QueryRgidRequest::new(
            rgid.into(),
            1.into(),
            vlan_id.into(),
        ))
    }

    /// REG_DMB of `len` bytes at `iova` for peer `rgid`, on the driver's VLAN.
    pub fn reg_dmb_request(iova: u64, len: u32, sba_idx: u32, rgid: u64) -> wire::RegDmbRequest {
        let vlan_id = VLAN_SMCD_V2 as u32;
        wire::RegDmbRequest::new(
            iova.into(),
            len.into(),
            sba_idx.into(),
            1.into(),
            vlan_id.into(),
            rgid.into(),
        )
    }

    /// Allocates, maps and registers a DMB of `len` bytes for peer `rgid`.
    pub fn reg_dmb(&mut self, len: u32, rgid: u64) -> Dmb {
        let pages = u64::from(len).div_ceil(PAGE);
        let first = self.next_dmb_page;
        self.next_dmb_page += pages;
        self.map_pages(first, pages);
        let sba_idx = self.next_sba_idx;
        self.next_sba_idx += 1;
        let r = self.command(&Self::reg_dmb_request(
            IOVA_BASE + first * PAGE,
            len,
            sba_idx,
            rgid,
        ));
        assert_eq!(r.ret, 0, "REG_DMB failed");
        Dmb {
            token: r.get::<wire::RegDmbResponse>().unwrap().dmb_tok.get(),
            ram_offset: first * PAGE,
            len,
            sba_idx,
        }
    }

    /// SIGNAL_IEQ to `rgid`: event `code` with `info`, an interrupt if `irq`.
    pub fn signal_ieq(&mut self, rgid: u64, irq: bool, code: u32, info: u64) -> CommandReply {
        let irq = u32::from(irq);
        self.command(&wire::SignalIeqRequest::new(
            rgid.into(),
            irq.into(),
            code.into(),
            info.into(),
        ))
    }

    pub fn unreg_dmb(&mut self, token: u64) -> CommandReply {
        self.command(&wire::UnregDmbRequest::new(token.into()))
    }

    /// One PCISTB to the move window, exactly as given: no chunking, no checks.
    pub fn store_move(
        &mut self,
        token: u64,
        dmbe: u8,
        signal: bool,
        offset: u32,
        data: &[u8],
    ) -> Reply {
        let addr = MoveAddress {
            token,
            dmbe,
            signal,
            offset,
        };
        self.client
            .region_write(MOVE_BAR, addr.encode(), data)
            .unwrap()
    }

    /// One store into the move window (element 0) as QEMU posts it: no reply comes back.
    /// Returns the message id.
    pub fn post_move(&mut self, token: u64, signal: bool, offset: u32, data: &[u8]) -> u16 {
        let addr = MoveAddress {
            token,
            dmbe: 0,
            signal,
            offset,
        };
        self.client
            .region_write_posted(MOVE_BAR, addr.encode(), data)
            .unwrap()
    }

    /// A data move as ism_move() does it: chunks that never cross 4 KiB, `sf` only on the
    /// last. Returns the first rejected chunk's error.
    pub fn move_data(&mut self, token: u64, offset: u32, data: &[u8], sf: bool) -> Reply {
        let mut done = 0usize;
        let mut offset = offset;
        while done < data.len() {
            let n = (4096 - (offset as usize & 4095)).min(data.len() - done);
            let last = done + n == data.len();
            let r = self.store_move(token, 0, sf && last, offset, &data[done..done + n]);
            r.as_ref().map_err(|&e| e)?;
            done += n;
            offset += n as u32;
        }
        Ok(Vec::new())
    }

    pub fn interrupts(&self) -> u64 {
        self.msi.as_ref().map_or(0, take_count)
    }

    pub fn sba(&self) -> Vec<u8> {
        self.ram.read(SBA_PAGE * PAGE, PAGE as usize).unwrap()
    }

    /// Whether the SBA shows DMB `sba_idx` signalled (and the summary bit).
    pub fn sba_signalled(&self, sba_idx: u32) -> bool {
        let sba = self.sba();
        let bit = sba[4 + (sba_idx / 8) as usize] & (0x80 >> (sba_idx % 8)) != 0;
        bit && sba[0] & 0x80 != 0
    }

    /// Clears the SBA like the guest's interrupt handler.
    pub fn ack_sba(&self) {
        self.ram.write(SBA_PAGE * PAGE, &[0u8; 4096]).unwrap();
    }

    /// IEQ header index and the entries written so far (type, code, tok, info).
    pub fn ieq_idx(&self) -> u64 {
        u64::from_be_bytes(
            self.ram
                .read(IEQ_PAGE * PAGE, 8)
                .unwrap()
                .try_into()
                .unwrap(),
        )
    }

    pub fn ieq_entry(&self, slot: u64) -> (u32, u32, u64, u64) {
        let at = IEQ_PAGE * PAGE + IEQ_HEADER_LEN + IEQ_ENTRY_LEN * slot;
        let bytes = self.ram.read(at, IEQ_ENTRY_LEN as usize).unwrap();
        let e = IeqEntry::read_from_bytes(&bytes).unwrap();
        (e.kind.get(), e.code.get(), e.tok.get(), e.info.get())
    }

    pub fn dmb_bytes(&self, dmb: &Dmb, offset: u64, len: usize) -> Vec<u8> {
        self.ram.read(dmb.ram_offset + offset, len).unwrap()
    }
}

/// Waits (bounded) until `cond` holds; for effects of another thread.
pub fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..500 {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

/// Function 0's next reply on the stream is to READ_GID: no stray reply (to a posted
/// write, or an error to a no-reply message) came before it.
pub fn next_reply_is_the_next_commands(g: &mut Guest) {
    assert_eq!(
        g.read_gid(),
        default_gid(CHID, 0),
        "a stray reply in the stream"
    );
}

/// The CDC message's conn_state flag that closes a connection.
pub const CDC_CLOSED: u8 = cdc::PEER_CONN_CLOSED;

/// A CDC message as the peer writes it at DMB offset 0, with `conn_state`, before it
/// sent any data.
pub fn cdc(conn_state: u8) -> Vec<u8> {
    cdc_after(conn_state, 0)
}

/// A CDC message whose producer cursor says `sent` data bytes were written (less than
/// one pass over the DMB: wrap 0, count `sent`).
pub fn cdc_after(conn_state: u8, sent: u32) -> Vec<u8> {
    let prod = cdc::Cursor {
        wrap: 0,
        count: sent,
    };
    cdc::message(prod, cdc::Cursor::default(), 0, conn_state).to_vec()
}

/// One SMC-D-shaped connection by `peer` on `dmb`: `payload` after the CDC area, a CDC
/// message that opens it and one that closes it.
pub fn connection(peer: &mut Guest, dmb: &Dmb, payload: &[u8]) {
    let sent = u32::try_from(payload.len()).unwrap();
    peer.move_data(dmb.token, 32, payload, false).unwrap();
    peer.move_data(dmb.token, 0, &cdc_after(0, sent), true)
        .unwrap();
    peer.move_data(dmb.token, 0, &cdc_after(CDC_CLOSED, sent), true)
        .unwrap();
}

/// A connection by `peer` on `owner`'s `dmb`, the owner zeroing it and the watch seeing
/// that, then a second connection that reuses it clean.
pub fn zeroed_then_reused(m: &Machine, owner: &mut Guest, peer: &mut Guest, dmb: &Dmb) {
    connection(peer, dmb, &[7u8; 1000]);
    owner
        .ram
        .write(dmb.ram_offset, &vec![0u8; dmb.len as usize])
        .unwrap();
    m.fabric.poll_zeroing();
    connection(peer, dmb, b"second");
    m.fabric.poll_zeroing();
}
