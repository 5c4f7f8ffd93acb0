//! What QEMU can send for two or three functions on one fabric, interleaved: region reads
//! and writes anywhere, ISM commands (well-formed with fuzzed fields, or raw), data moves,
//! DMA maps and unmaps of any range of the guest's memfd, SET_IRQS, resets, and
//! disconnects (after which the server builds a fresh backend, as `server.rs` does).
//! Every operation is followed by the shared checks of `World::check`.
#![no_main]

use std::sync::Arc;

use arbitrary::Arbitrary;
use ism_emu::testkit::rig::Recorder;
use ism_emu_fuzz::{gid, wire, World, BASE, PAGE, RAM_PAGES};
use libfuzzer_sys::fuzz_target;

/// An IOVA: mostly pages around the guest's RAM, sometimes anything.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Iova {
    Page(u8),
    Raw(u64),
}

impl Iova {
    fn get(self) -> u64 {
        match self {
            Iova::Page(p) => BASE + (u64::from(p) % (2 * RAM_PAGES)) * PAGE,
            Iova::Raw(x) => x,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Cmd {
    QueryInfo,
    RegSba(Iova),
    RegIeq(Iova, u16),
    ReadGid,
    AddVlan(u16),
    DelVlan(u16),
    SetVlan,
    ResetVlan,
    QueryRgid(u8),
    RegDmb {
        iova: Iova,
        len: u32,
        sba_idx: u16,
        peer: u8,
    },
    UnregDmb(u8),
    SignalIeq {
        peer: u8,
        trigger: bool,
        code: u32,
        info: u64,
    },
    UnregSba,
    UnregIeq,
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum Op {
    Command {
        f: u8,
        cmd: Cmd,
    },
    Move {
        f: u8,
        dmb: u8,
        dmbe: u8,
        signal: bool,
        offset: u32,
        len: u16,
        fill: u8,
    },
    Read {
        f: u8,
        region: u8,
        offset: u64,
        len: u16,
    },
    Write {
        f: u8,
        region: u8,
        offset: u64,
        data: Vec<u8>,
    },
    DmaMap {
        f: u8,
        iova: Iova,
        pages: u8,
        file_page: u8,
        writable: bool,
    },
    DmaMapRaw {
        f: u8,
        iova: u64,
        size: u64,
        offset: u64,
    },
    DmaUnmap {
        f: u8,
        iova: Iova,
        pages: u8,
    },
    UnmapAll {
        f: u8,
    },
    SetIrqs {
        f: u8,
        index: u8,
        flags: u32,
        start: u32,
        count: u32,
        fds: u8,
    },
    Reset {
        f: u8,
    },
    Disconnect {
        f: u8,
    },
    GuestWrite {
        f: u8,
        page: u8,
        at: u16,
        fill: u8,
        len: u16,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    three: bool,
    probed: bool,
    ops: Vec<Op>,
}

/// The GID of function `pick`, or (one past the last function) one nobody has.
fn peer(pick: u8, n: usize) -> u64 {
    let i = usize::from(pick) % (n + 1);
    if i == n {
        gid(7)
    } else {
        gid(i)
    }
}

/// A registered token, or (one past the last) a token nobody holds.
fn token(world: &World, pick: u8) -> u64 {
    let tokens: Vec<u64> = world.fabric.dmbs().iter().map(|d| d.token).collect();
    let i = usize::from(pick) % (tokens.len() + 1);
    tokens.get(i).copied().unwrap_or(u64::from(pick) << 32)
}

fn request(world: &World, cmd: &Cmd, n: usize) -> Vec<u8> {
    match cmd {
        Cmd::QueryInfo => wire::query_info(),
        Cmd::RegSba(iova) => wire::reg_sba(iova.get()),
        Cmd::RegIeq(iova, len) => wire::reg_ieq(iova.get(), u64::from(*len)),
        Cmd::ReadGid => wire::read_gid(),
        Cmd::AddVlan(v) => wire::add_vlan_id(u64::from(*v)),
        Cmd::DelVlan(v) => wire::del_vlan_id(u64::from(*v)),
        Cmd::SetVlan => wire::set_vlan(),
        Cmd::ResetVlan => wire::reset_vlan(),
        Cmd::QueryRgid(p) => wire::query_rgid(peer(*p, n), 1, 0x1fff),
        Cmd::RegDmb {
            iova,
            len,
            sba_idx,
            peer: p,
        } => wire::reg_dmb(iova.get(), *len, u32::from(*sba_idx), peer(*p, n)),
        Cmd::UnregDmb(pick) => wire::unreg_dmb(token(world, *pick)),
        Cmd::SignalIeq {
            peer: p,
            trigger,
            code,
            info,
        } => wire::signal_ieq(peer(*p, n), u32::from(*trigger), *code, *info),
        Cmd::UnregSba => wire::unreg_sba(),
        Cmd::UnregIeq => wire::unreg_ieq(),
        Cmd::Raw(bytes) => {
            let mut bytes = bytes.clone();
            bytes.resize(bytes.len().max(8), 0);
            bytes.truncate(4096);
            bytes
        }
    }
}

fn region(r: u8) -> u32 {
    // 0 move window, 2 command area, 4 MSI-X table, 7 config space; the rest unknown.
    u32::from(r % 10)
}

fuzz_target!(|input: Input| {
    let n = if input.three { 3 } else { 2 };
    let sink = Arc::new(Recorder::default());
    let mut world = if input.probed {
        World::probed(n, sink)
    } else {
        World::new(n, sink)
    };
    for op in input.ops.iter().take(64) {
        match op {
            Op::Command { f, cmd } => {
                let f = usize::from(*f) % n;
                let req = request(&world, cmd, n);
                let op = u32::from_be_bytes(req[..4].try_into().unwrap());
                world.op_command(f, &req).check_shape(op);
            }
            Op::Move {
                f,
                dmb,
                dmbe,
                signal,
                offset,
                len,
                fill,
            } => {
                let f = usize::from(*f) % n;
                let at = wire::move_offset(token(&world, *dmb), *dmbe, *signal, offset & 0x7f_ffff);
                let data = vec![*fill; usize::from(*len) % 4097];
                world.move_data(f, at, &data);
            }
            Op::Read {
                f,
                region: r,
                offset,
                len,
            } => {
                let f = usize::from(*f) % n;
                let mut buf = vec![0; usize::from(*len) % 8193];
                let _ = ism_emu::transport::Device::region_read(
                    &mut world.guests[f].backend,
                    region(*r),
                    *offset,
                    &mut buf,
                );
                world.check(&ism_emu_fuzz::Allowed::new(n));
            }
            Op::Write {
                f,
                region: r,
                offset,
                data,
            } => {
                let f = usize::from(*f) % n;
                world.op_region_write(f, region(*r), *offset, data);
            }
            Op::DmaMap {
                f,
                iova,
                pages,
                file_page,
                writable,
            } => {
                let f = usize::from(*f) % n;
                let size = (u64::from(*pages) % (RAM_PAGES + 2)) * PAGE;
                let offset = (u64::from(*file_page) % (RAM_PAGES + 2)) * PAGE;
                world.dma_map(f, iova.get(), size, offset, *writable);
                world.check(&ism_emu_fuzz::Allowed::new(n));
            }
            Op::DmaMapRaw {
                f,
                iova,
                size,
                offset,
            } => {
                let f = usize::from(*f) % n;
                world.dma_map(f, *iova, *size, *offset, true);
                world.check(&ism_emu_fuzz::Allowed::new(n));
            }
            Op::DmaUnmap { f, iova, pages } => {
                let f = usize::from(*f) % n;
                world.dma_unmap(f, iova.get(), u64::from(*pages) * PAGE, false);
                world.check(&ism_emu_fuzz::Allowed::new(n));
            }
            Op::UnmapAll { f } => {
                let f = usize::from(*f) % n;
                world.dma_unmap(f, 0, 0, true);
                world.check(&ism_emu_fuzz::Allowed::new(n));
            }
            Op::SetIrqs {
                f,
                index,
                flags,
                start,
                count,
                fds,
            } => {
                let f = usize::from(*f) % n;
                world.set_irqs(f, u32::from(*index % 6), *flags, *start, *count, *fds);
            }
            Op::Reset { f } => world.reset(usize::from(*f) % n),
            Op::Disconnect { f } => world.disconnect(usize::from(*f) % n),
            Op::GuestWrite {
                f,
                page,
                at,
                fill,
                len,
            } => {
                let f = usize::from(*f) % n;
                let offset = (u64::from(*page) % RAM_PAGES) * PAGE + u64::from(*at % 4096);
                world.guest_write(f, offset, &vec![*fill; usize::from(*len) % 4097]);
            }
        }
    }
});
