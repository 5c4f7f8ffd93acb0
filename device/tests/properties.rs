//! Property tests of isolation (issue 8): random scenarios of 2-4 functions on one fabric
//! (the testkit's in-memory `Rig`, no sockets) run against a small reference model of who
//! may write where. Each property is a test of its own; all of them run the model, so a
//! command the model and the device disagree on (accepted by one, refused by the other)
//! fails whichever property is running.
//!
//! `PROPTEST_CASES=N cargo test --test properties` runs N cases per property (1000 by
//! default). A failure prints the shrunk scenario; it is then pinned as an ordinary test
//! below, not in a regression file (see `config`).

use std::collections::{BTreeMap, BTreeSet};

use ism_emu::dmb::Dmb;
use ism_emu::fabric::{MoveError, Stored, HELD_TOKENS};
use ism_emu::ism::command::{CommandError, Response};
use ism_emu::ism::status::{gid_code, EventType, IEQ_ENTRIES, IEQ_LEN};
use ism_emu::ism::wire;
use ism_emu::ism::{MAX_DMB_LEN, MAX_MOVE_LEN};
use ism_emu::testkit::rig::{Rig, BASE, IEQ_AT};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};

/// Small RAM keeps the before/after snapshots of every step cheap: page 0 the SBA, page 1
/// the IEQ, pages 2-7 the DMBs.
const RAM: u64 = 8 * PAGE;
const PAGE: u64 = 4096;
const PAGES: usize = (RAM / PAGE) as usize;
const DMB_FROM: u64 = 2 * PAGE;
/// SIGNAL_IEQs each function may send in a scenario, never refilled, so the rate limit
/// is deterministic (the fabric's budget refills with wall time); more than the fabric's
/// burst of 8 so that IEQs get to wrap.
const SIGNAL_BURST: u64 = 20;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000)
}

/// No regression file: the seeds in it only replay with the same generator, which these
/// strategies will change; a real failure becomes a named test below instead.
fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::with_cases(cases())
    }
}

// ---------------------------------------------------------------------------------------
// Scenarios

/// A peer GID: one of the functions, or one no function has.
#[derive(Clone, Debug)]
enum Peer {
    Function(usize),
    Stranger(u64),
}

/// A token: one the model knows is live, one that was live once, or any value.
#[derive(Clone, Debug)]
enum Tok {
    Live(usize),
    Dead(usize),
    Raw(u64),
}

#[derive(Clone, Debug)]
enum Op {
    /// `at`: an offset into the function's RAM, or (`outside`) an IOVA anywhere else.
    RegDmb {
        f: usize,
        at: u64,
        outside: bool,
        len: u32,
        sba_idx: u32,
        rgid: Peer,
    },
    UnregDmb {
        f: usize,
        tok: Tok,
    },
    /// `aim`: the sender becomes the DMB's grantee and the move is cut to fit the DMB,
    /// so that enough moves land.
    Move {
        f: usize,
        tok: Tok,
        aim: bool,
        offset: u32,
        len: usize,
        signal: bool,
        /// Sent with the no-reply flag: a failure is held, not answered.
        posted: bool,
        dmbe: u8,
        seed: u8,
    },
    Signal {
        f: usize,
        to: Peer,
        irq: bool,
        code: u32,
        info: u64,
    },
    /// The client goes away; the function stays detached until `Attach`.
    Crash {
        f: usize,
    },
    /// A new guest (fresh RAM) attaches to a detached function and probes.
    Attach {
        f: usize,
    },
    /// The guest resets the function and its driver probes again.
    Reset {
        f: usize,
    },
    Unmap {
        f: usize,
        page: usize,
        pages: usize,
    },
    Remap {
        f: usize,
        page: usize,
        pages: usize,
    },
    RegSba {
        f: usize,
        outside: bool,
    },
    RegIeq {
        f: usize,
        outside: bool,
        short: bool,
    },
    UnregSba {
        f: usize,
    },
    UnregIeq {
        f: usize,
    },
    Vlan {
        f: usize,
        which: u8,
        id: u64,
    },
    Query {
        f: usize,
        which: u8,
        rgid: Peer,
    },
}

impl Op {
    fn function(&self) -> usize {
        match *self {
            Op::RegDmb { f, .. }
            | Op::UnregDmb { f, .. }
            | Op::Move { f, .. }
            | Op::Signal { f, .. }
            | Op::Crash { f }
            | Op::Attach { f }
            | Op::Reset { f }
            | Op::Unmap { f, .. }
            | Op::Remap { f, .. }
            | Op::RegSba { f, .. }
            | Op::RegIeq { f, .. }
            | Op::UnregSba { f }
            | Op::UnregIeq { f }
            | Op::Vlan { f, .. }
            | Op::Query { f, .. } => f,
        }
    }
}

#[derive(Clone, Debug)]
struct Scenario {
    functions: usize,
    ops: Vec<Op>,
}

/// How often each kind of operation comes up; each property leans on its own.
#[derive(Clone, Copy)]
struct Mix {
    reg: u32,
    unreg: u32,
    moves: u32,
    signal: u32,
    life: u32,
    memory: u32,
    misc: u32,
}

const EVEN: Mix = Mix {
    reg: 6,
    unreg: 2,
    moves: 8,
    signal: 2,
    life: 2,
    memory: 2,
    misc: 2,
};

fn peer() -> impl Strategy<Value = Peer> {
    prop_oneof![
        6 => (0..4usize).prop_map(Peer::Function),
        1 => prop_oneof![
            Just(0u64),
            Just(ism_emu::default_gid(0x1234, 4)),
            Just(ism_emu::default_gid(0x4321, 0)),
            any::<u64>(),
        ]
        .prop_map(Peer::Stranger),
    ]
}

fn tok() -> impl Strategy<Value = Tok> {
    prop_oneof![
        8 => (0..8usize).prop_map(Tok::Live),
        2 => (0..8usize).prop_map(Tok::Dead),
        1 => (0..8192u64).prop_map(|n| Tok::Raw(n << 32)),
    ]
}

fn reg_dmb() -> impl Strategy<Value = Op> {
    let len = prop_oneof![
        12 => 1..=PAGE as u32,
        2 => PAGE as u32..=2 * PAGE as u32,
        1 => Just(16384u32),
        1 => Just(0u32),
        1 => Just(MAX_DMB_LEN + 1),
        1 => any::<u32>(),
    ];
    let sba_idx = prop_oneof![8 => 32..38u32, 1 => 0..32u32, 1 => 1918..1922u32];
    let at = prop_oneof![
        12 => (DMB_FROM / 256..RAM / 256).prop_map(|n| (n * 256, false)),
        2 => (0..RAM + PAGE).prop_map(|at| (at, false)),
        1 => any::<u64>().prop_map(|iova| (iova, true)),
        1 => Just((u64::MAX - 100, true)),
    ];
    (0..4usize, at, len, sba_idx, peer()).prop_map(|(f, (at, outside), len, sba_idx, rgid)| {
        Op::RegDmb {
            f,
            at,
            outside,
            len,
            sba_idx,
            rgid,
        }
    })
}

fn move_op() -> impl Strategy<Value = Op> {
    let offset = prop_oneof![8 => 0..2 * PAGE as u32, 1 => 0..1u32 << 23];
    let len = prop_oneof![
        8 => 1..=300usize,
        2 => 1..=MAX_MOVE_LEN,
        1 => Just(0usize),
        1 => Just(MAX_MOVE_LEN + 1),
    ];
    let dmbe = prop_oneof![8 => Just(0u8), 1 => 1..16u8, 1 => 16..=255u8];
    (
        0..4usize,
        tok(),
        offset,
        len,
        (any::<bool>(), any::<bool>()),
        dmbe,
        any::<u8>(),
        prop::bool::weighted(0.7),
    )
        .prop_map(
            |(f, tok, offset, len, (signal, posted), dmbe, seed, aim)| Op::Move {
                f,
                tok,
                aim,
                offset,
                len,
                signal,
                posted,
                dmbe,
                seed,
            },
        )
}

fn op(mix: Mix) -> impl Strategy<Value = Op> {
    let f = || 0..4usize;
    let pages = || (0..PAGES, 1..=3usize);
    prop_oneof![
        mix.reg => reg_dmb(),
        mix.unreg => (f(), tok()).prop_map(|(f, tok)| Op::UnregDmb { f, tok }),
        mix.moves => move_op(),
        mix.signal => (f(), peer(), any::<bool>(), any::<u32>(), any::<u64>())
            .prop_map(|(f, to, irq, code, info)| Op::Signal { f, to, irq, code, info }),
        mix.life => prop_oneof![
            f().prop_map(|f| Op::Crash { f }),
            f().prop_map(|f| Op::Attach { f }),
            f().prop_map(|f| Op::Reset { f }),
        ],
        mix.memory => prop_oneof![
            (f(), pages()).prop_map(|(f, (page, pages))| Op::Unmap { f, page, pages }),
            (f(), pages()).prop_map(|(f, (page, pages))| Op::Remap { f, page, pages }),
            (f(), any::<bool>()).prop_map(|(f, outside)| Op::RegSba { f, outside }),
            (f(), any::<bool>(), any::<bool>())
                .prop_map(|(f, outside, short)| Op::RegIeq { f, outside, short }),
            f().prop_map(|f| Op::UnregSba { f }),
            f().prop_map(|f| Op::UnregIeq { f }),
        ],
        mix.misc => prop_oneof![
            (f(), 0..4u8, 0..8u64).prop_map(|(f, which, id)| Op::Vlan { f, which, id }),
            (f(), 0..3u8, peer()).prop_map(|(f, which, rgid)| Op::Query { f, which, rgid }),
        ],
    ]
}

/// Up to `max_ops` operations after up to four valid REG_DMBs between random pairs, so
/// that moves find DMBs from the start.
fn scenario(mix: Mix, max_ops: usize) -> impl Strategy<Value = Scenario> {
    let pairs = prop::collection::vec((0..4usize, 0..4usize), 0..=4);
    (
        2..=4usize,
        pairs,
        prop::collection::vec(op(mix), 1..=max_ops),
    )
        .prop_map(|(functions, pairs, ops)| {
            let setup = pairs
                .into_iter()
                .enumerate()
                .map(|(k, (f, peer))| Op::RegDmb {
                    f,
                    at: DMB_FROM + k as u64 * PAGE,
                    outside: false,
                    len: PAGE as u32,
                    sba_idx: 40 + k as u32,
                    rgid: Peer::Function(peer),
                });
            Scenario {
                functions,
                ops: setup.chain(ops).collect(),
            }
        })
}

// ---------------------------------------------------------------------------------------
// The model

#[derive(Clone, Debug)]
struct ModelDmb {
    owner: usize,
    rgid: u64,
    /// The generation of the GID's function at registration: only it may write.
    grantee_generation: Option<u64>,
    /// Offset in the owner's RAM.
    at: u64,
    len: u32,
    sba_idx: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ModelEvent {
    kind: u32,
    code: u32,
    tok: u64,
    info: u64,
}

#[derive(Clone, Debug)]
struct ModelFunction {
    gid: u64,
    attached: bool,
    generation: u64,
    mapped: [bool; PAGES],
    sba: bool,
    /// The IEQ's next slot, None while no IEQ is registered.
    ieq: Option<u64>,
    signals_left: u64,
    /// DMBs with a failed move without the signal, which fails the signalling moves into
    /// them until their owner resets the CDC slot (at most HELD_TOKENS), with the slot as
    /// it was then; and whether one more failed beyond them.
    held: BTreeMap<u64, Option<Vec<u8>>>,
    held_overflow: bool,
}

impl ModelFunction {
    fn probed(gid: u64, generation: u64, signals_left: u64) -> Self {
        Self {
            gid,
            attached: true,
            generation,
            mapped: [true; PAGES],
            sba: true,
            ieq: Some(0),
            signals_left,
            held: BTreeMap::new(),
            held_overflow: false,
        }
    }

    fn mapped(&self, at: u64, len: u64) -> bool {
        at.checked_add(len).is_some_and(|end| end <= RAM)
            && (at / PAGE..(at + len).div_ceil(PAGE)).all(|p| self.mapped[p as usize])
    }
}

/// What one step may do to guest memory and which events it posts.
#[derive(Default, Debug)]
struct Effects {
    accepted: bool,
    /// `(function, from, to)`: byte ranges of RAM the step may change.
    writes: Vec<(usize, u64, u64)>,
    /// Events that land in each function's IEQ.
    events: BTreeMap<usize, Vec<ModelEvent>>,
    /// A function whose RAM was replaced by a new guest's.
    fresh: Option<usize>,
    /// A REG_DMB the model accepted: the token is checked against what the device gave.
    registered: Option<ModelDmb>,
    /// The GID that departed in this step, if any.
    departed: Option<u64>,
    /// A function whose IEQ index a data move overwrote: a guest may place a DMB over
    /// its own IEQ (the model first missed that the device allows this).
    ieq_overwritten: Option<usize>,
}

struct Model {
    functions: Vec<ModelFunction>,
    dmbs: BTreeMap<u64, ModelDmb>,
    /// Tokens once handed out and since freed, oldest first.
    dead: Vec<u64>,
    /// Every token handed out in the scenario.
    issued: BTreeSet<u64>,
}

impl Model {
    fn new(rig: &Rig, n: usize) -> Self {
        Self {
            functions: (0..n)
                .map(|id| ModelFunction::probed(rig.gid(id), 0, SIGNAL_BURST))
                .collect(),
            dmbs: BTreeMap::new(),
            dead: Vec::new(),
            issued: BTreeSet::new(),
        }
    }

    fn gid(&self, peer: &Peer) -> u64 {
        match *peer {
            Peer::Function(i) => self.functions[i % self.functions.len()].gid,
            Peer::Stranger(gid) => gid,
        }
    }

    fn token(&self, tok: &Tok) -> u64 {
        match *tok {
            Tok::Live(i) if !self.dmbs.is_empty() => {
                *self.dmbs.keys().nth(i % self.dmbs.len()).unwrap()
            }
            Tok::Dead(i) if !self.dead.is_empty() => self.dead[i % self.dead.len()],
            Tok::Raw(t) => t,
            _ => 0x7ff << 32,
        }
    }

    /// `op` with an aimed move's sender, offset and length made concrete.
    fn resolve(&self, op: &Op) -> Op {
        let mut op = op.clone();
        if let Op::Move {
            f,
            tok,
            aim: true,
            offset,
            len,
            ..
        } = &mut op
        {
            if let Some(dmb) = self.dmbs.get(&self.token(tok)) {
                *f = (0..self.functions.len())
                    .find(|&p| self.functions[p].gid == dmb.rgid)
                    .unwrap_or(dmb.owner);
                *offset %= dmb.len;
                if (1..=MAX_MOVE_LEN).contains(len) {
                    *len = (*len).min((dmb.len - *offset) as usize);
                }
            }
        }
        op
    }

    /// Queues `event` at function `id` as the device would: entry and index when SBA and
    /// IEQ are registered and the IEQ's page is mapped, the event bit when the SBA's is.
    fn post(&mut self, id: usize, event: ModelEvent, fx: &mut Effects) {
        let f = &mut self.functions[id];
        let (Some(next), true) = (f.ieq, f.sba) else {
            return;
        };
        if !f.mapped(IEQ_AT, IEQ_LEN) {
            return;
        }
        f.ieq = Some((next + 1) % IEQ_ENTRIES);
        fx.writes.push((id, IEQ_AT, IEQ_AT + IEQ_LEN));
        if f.mapped(0, 1) {
            fx.writes.push((id, 0, 1));
        }
        fx.events.entry(id).or_default().push(event);
    }

    /// The client of `id` leaves (reset or crash): its DMBs go, and every attached peer
    /// it shared a DMB with, in either direction, hears one GID event.
    fn detach(&mut self, id: usize, fx: &mut Effects) {
        let gid = self.functions[id].gid;
        let mut peers = BTreeSet::new();
        let owned: Vec<u64> = self
            .dmbs
            .iter()
            .filter(|(_, d)| d.owner == id)
            .map(|(&t, _)| t)
            .collect();
        for token in owned {
            let dmb = self.dmbs.remove(&token).unwrap();
            peers.insert(dmb.rgid);
            self.dead.push(token);
            self.forget_held(token);
        }
        for dmb in self.dmbs.values() {
            if dmb.rgid == gid {
                peers.insert(self.functions[dmb.owner].gid);
            }
        }
        peers.remove(&gid);
        let f = &mut self.functions[id];
        f.held.clear();
        f.held_overflow = false;
        f.generation += 1;
        f.attached = false;
        f.sba = false;
        f.ieq = None;
        f.mapped = [false; PAGES];
        fx.departed = Some(gid);
        let event = ModelEvent {
            kind: EventType::Gid as u32,
            code: gid_code::GID_DISABLED,
            tok: gid,
            info: 0,
        };
        for peer in 0..self.functions.len() {
            let p = &self.functions[peer];
            if p.attached && peers.contains(&p.gid) {
                self.post(peer, event.clone(), fx);
            }
        }
    }

    /// A posted move by `id` into `token` failed: held, as the device does,
    /// with the DMB's CDC slot.
    fn hold(&mut self, id: usize, token: u64, slot: Option<Vec<u8>>) {
        let f = &mut self.functions[id];
        if f.held.len() < HELD_TOKENS || f.held.contains_key(&token) {
            f.held.entry(token).or_insert(slot);
        } else {
            f.held_overflow = true;
        }
    }

    /// The DMB is gone: no function's held failure applies to a later DMB with its token.
    fn forget_held(&mut self, token: u64) {
        for f in &mut self.functions {
            f.held.remove(&token);
        }
    }

    fn probe(&mut self, id: usize, fx: &mut Effects) {
        let f = &self.functions[id];
        self.functions[id] = ModelFunction::probed(f.gid, f.generation, f.signals_left);
        // REG_IEQ writes the header's length fields.
        fx.writes.push((id, IEQ_AT, IEQ_AT + IEQ_LEN));
    }

    /// What `op` should do; updates the model as if it did.
    /// `slot`: the CDC slot of the DMB a move targets, as the owner's RAM holds it before
    /// the step (None: no such DMB, or not mapped).
    fn step(&mut self, op: &Op, slot: Option<Vec<u8>>) -> Effects {
        let n = self.functions.len();
        let id = op.function() % n;
        let mut fx = Effects::default();
        let f = &self.functions[id];
        if !f.attached && !matches!(op, Op::Attach { .. }) {
            // No client, so no commands and no moves.
            return fx;
        }
        fx.accepted = match op {
            Op::RegDmb {
                at,
                outside,
                len,
                sba_idx,
                rgid,
                ..
            } => {
                let rgid = self.gid(rgid);
                let ok = (1..=MAX_DMB_LEN).contains(len)
                    && (32..1920).contains(sba_idx)
                    && !*outside
                    && f.mapped(*at, u64::from(*len))
                    && !self
                        .dmbs
                        .values()
                        .any(|d| d.owner == id && d.sba_idx == *sba_idx)
                    && !self.dmbs.values().any(|d| {
                        d.owner == id
                            && d.at < at + u64::from(*len)
                            && *at < d.at + u64::from(d.len)
                    });
                if ok {
                    fx.registered = Some(ModelDmb {
                        owner: id,
                        rgid,
                        grantee_generation: self
                            .functions
                            .iter()
                            .find(|p| p.gid == rgid)
                            .map(|p| p.generation),
                        at: *at,
                        len: *len,
                        sba_idx: *sba_idx,
                    });
                }
                ok
            }
            Op::UnregDmb { tok, .. } => {
                let token = self.token(tok);
                let ok = self.dmbs.get(&token).is_some_and(|d| d.owner == id);
                if ok {
                    self.dmbs.remove(&token);
                    self.dead.push(token);
                    self.forget_held(token);
                }
                ok
            }
            Op::Move {
                tok,
                offset,
                len,
                signal,
                posted,
                dmbe,
                ..
            } => {
                let token = self.token(tok);
                let (gid, generation) = (f.gid, f.generation);
                let sender = &mut self.functions[id];
                // A failure held for this DMB fails the signalling move, which lands
                // nothing, until the owner resets the DMB's CDC slot (or the DMB goes: then
                // once). Beyond the limit, the next signalling move into any DMB fails.
                let refused = *signal
                    && match sender.held.get(&token) {
                        Some(then) => {
                            let reset = then.is_some() && slot.is_some() && *then != slot;
                            if !self.dmbs.contains_key(&token) || reset {
                                sender.held.remove(&token);
                            }
                            !reset
                        }
                        None => std::mem::take(&mut sender.held_overflow),
                    };
                if refused {
                    // A posted move's failure is held, whatever failed it.
                    if *posted {
                        let slot = self.dmbs.contains_key(&token).then_some(slot).flatten();
                        self.hold(id, token, slot);
                    }
                    return fx;
                }
                let Some(dmb) = self.dmbs.get(&token) else {
                    if *posted {
                        self.hold(id, token, None);
                    }
                    return fx;
                };
                let end = u64::from(*offset) + *len as u64;
                let owner = &self.functions[dmb.owner];
                let ok = (1..=MAX_MOVE_LEN).contains(len)
                    && (dmb.owner == id
                        || (dmb.rgid == gid && dmb.grantee_generation == Some(generation)))
                    && end <= u64::from(dmb.len)
                    && *dmbe < 16
                    && owner.attached
                    && owner.mapped(dmb.at + u64::from(*offset), *len as u64);
                if ok {
                    let at = dmb.at + u64::from(*offset);
                    fx.writes.push((dmb.owner, at, at + *len as u64));
                    if at < IEQ_AT + 8 && IEQ_AT < at + *len as u64 {
                        fx.ieq_overwritten = Some(dmb.owner);
                    }
                    if *signal && owner.sba && owner.mapped(0, PAGE) {
                        let idx = u64::from(dmb.sba_idx);
                        let mask_at = 256 + 2 * idx;
                        fx.writes.extend([
                            (dmb.owner, 0, 1),
                            (dmb.owner, 4 + idx / 8, 5 + idx / 8),
                            (dmb.owner, mask_at, mask_at + 2),
                        ]);
                    }
                } else if *posted {
                    self.hold(id, token, slot);
                }
                ok
            }
            Op::Signal { to, code, info, .. } => {
                if f.signals_left == 0 {
                    return fx;
                }
                let sender = f.gid;
                self.functions[id].signals_left -= 1;
                let rgid = self.gid(to);
                let Some(target) = (0..n).find(|&p| {
                    let p = &self.functions[p];
                    p.attached && p.gid == rgid
                }) else {
                    return fx;
                };
                let event = ModelEvent {
                    kind: EventType::Software as u32,
                    code: *code,
                    tok: sender,
                    info: *info,
                };
                self.post(target, event, &mut fx);
                true
            }
            Op::Crash { .. } => {
                self.detach(id, &mut fx);
                true
            }
            Op::Reset { .. } => {
                self.detach(id, &mut fx);
                self.probe(id, &mut fx);
                true
            }
            Op::Attach { .. } => {
                if f.attached {
                    return fx;
                }
                self.probe(id, &mut fx);
                fx.fresh = Some(id);
                true
            }
            Op::Unmap { page, pages, .. } => {
                let f = &mut self.functions[id];
                for p in *page..(page + pages).min(PAGES) {
                    f.mapped[p] = false;
                }
                true
            }
            Op::Remap { page, pages, .. } => {
                let f = &mut self.functions[id];
                for p in *page..(page + pages).min(PAGES) {
                    f.mapped[p] = true;
                }
                true
            }
            Op::RegSba { outside, .. } => {
                let ok = !outside && f.mapped(0, PAGE);
                if ok {
                    self.functions[id].sba = true;
                }
                ok
            }
            Op::RegIeq { outside, short, .. } => {
                let ok = !outside && !short && f.mapped(IEQ_AT, IEQ_LEN);
                if ok {
                    self.functions[id].ieq = Some(0);
                    fx.writes.push((id, IEQ_AT, IEQ_AT + IEQ_LEN));
                }
                ok
            }
            Op::UnregSba { .. } => std::mem::take(&mut self.functions[id].sba),
            Op::UnregIeq { .. } => self.functions[id].ieq.take().is_some(),
            // The VLAN table (64 ids) cannot fill up with ids 0-7.
            Op::Vlan { .. } => true,
            Op::Query { which, rgid, .. } => match which {
                0 => {
                    let rgid = self.gid(rgid);
                    self.functions.iter().any(|p| p.attached && p.gid == rgid)
                }
                _ => true,
            },
        };
        fx
    }
}

// ---------------------------------------------------------------------------------------
// Running a scenario on the rig

/// What a rejected step must leave as it was: the DMB table, each function's view
/// (less the counters of rejections, which count it), its VLANs, IEQ position and grant
/// generation, and what the observer was told. The SIGNAL_IEQ budget is left out: a
/// signal to an unknown GID spends it on purpose, so a flood of bad signals is limited too.
#[derive(Debug, PartialEq)]
struct FabricSnapshot {
    dmbs: Vec<Dmb>,
    functions: Vec<String>,
    observer_calls: usize,
}

fn fabric_snapshot(rig: &Rig) -> FabricSnapshot {
    let mut views = rig.fabric.function_views();
    for v in &mut views {
        v.counters.commands = 0;
        v.counters.command_errors = 0;
        v.counters.moves_rejected = 0;
        v.counters.moves_held = 0;
        // A rejected move is still timed: service time is not device state.
        v.counters.move_service = Default::default();
    }
    let functions = views
        .into_iter()
        .enumerate()
        .map(|(id, v)| format!("{v:?} {}", rig.hidden_state(id)))
        .collect();
    FabricSnapshot {
        dmbs: rig.fabric.dmbs(),
        functions,
        observer_calls: rig.sink.calls().len(),
    }
}

/// Which properties a run asserts (the model runs for all of them).
#[derive(Clone, Copy, Default)]
struct Checks {
    isolation: bool,
    rejections: bool,
    tokens: bool,
    ieq: bool,
    gid_events: bool,
}

fn snapshot_rams(rig: &Rig) -> Vec<Vec<u8>> {
    (0..rig.rams.len())
        .map(|id| rig.ram(id, 0, RAM as usize))
        .collect()
}

/// Performs `op` on the rig; true if the device accepted it.
fn perform(rig: &mut Rig, model: &Model, op: &Op) -> bool {
    let n = rig.rams.len();
    let id = op.function() % n;
    let attached = rig.fabric.function_views()[id].attached;
    if !attached && !matches!(op, Op::Attach { .. }) {
        return false;
    }
    let ok = |r: Result<Response, CommandError>| r.is_ok();
    match op {
        Op::RegDmb {
            at,
            outside,
            len,
            sba_idx,
            rgid,
            ..
        } => {
            let iova = if *outside { *at } else { BASE + at };
            let req = wire::RegDmbRequest::new(
                iova.into(),
                (*len).into(),
                (*sba_idx).into(),
                0.into(),
                0.into(),
                model.gid(rgid).into(),
            );
            ok(rig.command(id, req))
        }
        Op::UnregDmb { tok, .. } => {
            ok(rig.command(id, wire::UnregDmbRequest::new(model.token(tok).into())))
        }
        Op::Move {
            tok,
            offset,
            len,
            signal,
            posted,
            dmbe,
            seed,
            ..
        } => {
            let data: Vec<u8> = (0..*len).map(|i| seed.wrapping_add(i as u8) | 1).collect();
            let addr = ism_emu::ism::MoveAddress {
                token: model.token(tok),
                dmbe: *dmbe,
                signal: *signal,
                offset: *offset,
            };
            // As the backend stores it: a failed posted move is held.
            let result: Result<Stored, MoveError> =
                rig.fabric.store_move(id, addr.encode(), &data, *posted);
            matches!(result, Ok(Stored::Landed))
        }
        Op::Signal {
            to,
            irq,
            code,
            info,
            ..
        } => {
            let req = wire::SignalIeqRequest::new(
                model.gid(to).into(),
                u32::from(*irq).into(),
                (*code).into(),
                (*info).into(),
            );
            ok(rig.command(id, req))
        }
        Op::Crash { .. } => {
            rig.fabric.detach(id, "client disconnected", false);
            true
        }
        Op::Reset { .. } => {
            rig.fabric.detach(id, "function reset", true);
            rig.probe(id);
            true
        }
        Op::Attach { .. } => {
            if attached {
                return false;
            }
            rig.reattach(id);
            true
        }
        Op::Unmap { page, pages, .. } => {
            let from = *page as u64 * PAGE;
            rig.fabric.dma_unmap(id, BASE + from, *pages as u64 * PAGE);
            true
        }
        Op::Remap { page, pages, .. } => {
            let from = *page as u64 * PAGE;
            let size = (*pages as u64 * PAGE).min(RAM - from);
            let file = rig.rams[id].dup_file().unwrap();
            rig.fabric
                .dma_map(id, BASE + from, size, Some(file), from, true)
                .is_ok()
        }
        Op::RegSba { outside, .. } => {
            let iova = if *outside { BASE + RAM } else { BASE };
            ok(rig.command(id, wire::RegSbaRequest::new(iova.into())))
        }
        Op::RegIeq { outside, short, .. } => {
            let iova = if *outside { BASE + RAM } else { BASE + IEQ_AT };
            let len = if *short { IEQ_LEN - 1 } else { IEQ_LEN };
            ok(rig.command(id, wire::RegIeqRequest::new(iova.into(), len.into())))
        }
        Op::UnregSba { .. } => ok(rig.command(id, wire::UnregSbaRequest::new())),
        Op::UnregIeq { .. } => ok(rig.command(id, wire::UnregIeqRequest::new())),
        Op::Vlan {
            which, id: vlan, ..
        } => ok(match which {
            0 => rig.command(id, wire::AddVlanIdRequest::new((*vlan).into())),
            1 => rig.command(id, wire::DelVlanIdRequest::new((*vlan).into())),
            2 => rig.command(id, wire::SetVlanRequest::new()),
            _ => rig.command(id, wire::ResetVlanRequest::new()),
        }),
        Op::Query { which, rgid, .. } => match which {
            0 => {
                let req = wire::QueryRgidRequest::new(model.gid(rgid).into(), 0.into(), 0.into());
                ok(rig.command(id, req))
            }
            1 => rig.command(id, wire::ReadGidRequest::new()) == Ok(Response::Gid(rig.gid(id))),
            _ => ok(rig.command(id, wire::QueryInfoRequest::new())),
        },
    }
}

/// The offsets where `new` differs from `old`: equal 256-byte blocks are skipped with one
/// comparison each, which keeps a debug build fast.
fn changed<'a>(old: &'a [u8], new: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    old.chunks(256)
        .zip(new.chunks(256))
        .enumerate()
        .filter(|(_, (o, n))| o != n)
        .flat_map(|(block, (o, n))| {
            (0..o.len())
                .filter(move |&i| o[i] != n[i])
                .map(move |i| block * 256 + i)
        })
}

/// The CDC slot (first 32 bytes, zeros past a shorter DMB) of the DMB a move targets,
/// from its owner's RAM, as the device would read it; None without a DMB or mapping.
fn cdc_slot(rig: &Rig, model: &Model, op: &Op) -> Option<Vec<u8>> {
    let Op::Move { tok, .. } = op else {
        return None;
    };
    let dmb = model.dmbs.get(&model.token(tok))?;
    let len = dmb.len.min(32) as usize;
    if !model.functions[dmb.owner].mapped(dmb.at, len as u64) {
        return None;
    }
    let mut slot = rig.ram(dmb.owner, dmb.at, len);
    slot.resize(32, 0);
    Some(slot)
}

/// The IEQ index (last entry + 1) of function `id`.
fn ieq_index(rig: &Rig, id: usize) -> u64 {
    u64::from_be_bytes(rig.ram(id, IEQ_AT, 8).try_into().unwrap())
}

fn run(s: &Scenario, checks: Checks) -> Result<(), TestCaseError> {
    let mut rig = Rig::with_ram(s.functions, RAM);
    rig.signal_budget(SIGNAL_BURST);
    let mut model = Model::new(&rig, s.functions);
    let snapshots = checks.isolation || checks.rejections;
    for (step, op) in s.ops.iter().enumerate() {
        let before = snapshots.then(|| snapshot_rams(&rig));
        let fabric_before = checks.rejections.then(|| fabric_snapshot(&rig));
        let ieq_before: Vec<u64> = (0..s.functions).map(|id| ieq_index(&rig, id)).collect();
        let op = &model.resolve(op);
        let slot = cdc_slot(&rig, &model, op);
        let accepted = perform(&mut rig, &model, op);
        let fx = model.step(op, slot);
        let at = format!("step {step}: {op:?}");
        prop_assert_eq!(accepted, fx.accepted, "device and model disagree at {}", at);

        // The live tokens are the model's, whatever happened (token uniqueness follows:
        // the table is keyed by token, so a token the device gave twice would have
        // replaced a DMB the model still holds).
        let live: Vec<u64> = rig.fabric.dmbs().iter().map(|d| d.token).collect();
        if let Some(dmb) = fx.registered {
            let token = live.iter().copied().find(|t| !model.dmbs.contains_key(t));
            prop_assert!(token.is_some(), "no new token at {}", at);
            let token = token.unwrap();
            if checks.tokens {
                prop_assert_eq!(token & 0xffff_ffff, 0, "token {:#x} at {}", token, at);
                prop_assert!((1..4096).contains(&(token >> 32)), "token {:#x}", token);
                // Tokens rotate through all 4095: none comes back within a scenario.
                prop_assert!(
                    !model.issued.contains(&token),
                    "token {:#x} handed out again at {}",
                    token,
                    at
                );
            }
            model.issued.insert(token);
            model.dmbs.insert(token, dmb);
        }
        let expected: Vec<u64> = model.dmbs.keys().copied().collect();
        prop_assert_eq!(&live, &expected, "live tokens at {}", at);
        if checks.tokens {
            // A departed function's tokens are gone with it.
            let dmbs = rig.fabric.dmbs();
            for (id, f) in model.functions.iter().enumerate() {
                if !f.attached {
                    prop_assert!(
                        !dmbs.iter().any(|d| d.owner == id),
                        "detached ism{} still owns DMBs at {}",
                        id,
                        at
                    );
                }
            }
        }

        if let Some(before) = &before {
            let after = snapshot_rams(&rig);
            for (id, (old, new)) in before.iter().zip(&after).enumerate() {
                let zero;
                let old = if fx.fresh == Some(id) {
                    zero = vec![0u8; RAM as usize];
                    &zero
                } else {
                    old
                };
                if !accepted && checks.rejections {
                    prop_assert!(old == new, "rejected {} changed ism{}'s RAM", at, id);
                }
                if checks.isolation {
                    let stray = changed(old, new).find(|&b| {
                        !fx.writes
                            .iter()
                            .any(|&(f, from, to)| f == id && (from..to).contains(&(b as u64)))
                    });
                    prop_assert!(
                        stray.is_none(),
                        "{} wrote ism{}'s byte {:#x}, outside what it may write ({:?})",
                        at,
                        id,
                        stray.unwrap_or_default(),
                        fx.writes
                    );
                }
            }
        }
        if let (Some(before), false) = (fabric_before, accepted) {
            prop_assert_eq!(before, fabric_snapshot(&rig), "rejected {}", at);
        }

        if checks.ieq || checks.gid_events {
            for (id, &index_before) in ieq_before.iter().enumerate() {
                let events = fx.events.get(&id).map_or(&[][..], |e| &e[..]);
                let index = ieq_index(&rig, id);
                if events.is_empty() {
                    if fx.fresh != Some(id) && fx.ieq_overwritten != Some(id) {
                        prop_assert_eq!(index, index_before, "ism{} heard something at {}", id, at);
                    }
                    continue;
                }
                if let (true, Some(departed)) = (checks.gid_events, fx.departed) {
                    let gid_events: Vec<&ModelEvent> = events
                        .iter()
                        .filter(|e| e.kind == EventType::Gid as u32)
                        .collect();
                    prop_assert_eq!(gid_events.len(), 1, "ism{} at {}", id, at);
                    prop_assert_eq!(gid_events[0].tok, departed);
                }
                // The index names the last slot written (1..=15), one on per event.
                let next = model.functions[id].ieq.unwrap();
                let last = (next + IEQ_ENTRIES - 1) % IEQ_ENTRIES;
                prop_assert_eq!(index, last + 1, "ism{}'s IEQ index at {}", id, at);
                let f = &model.functions[id];
                if f.mapped(0, 1) {
                    let flags = rig.ram(id, 0, 1)[0];
                    prop_assert!(flags & 0x40 != 0, "ism{}'s event bit at {}", id, at);
                }
                for (k, event) in events.iter().rev().enumerate() {
                    let slot = (last + IEQ_ENTRIES - k as u64) % IEQ_ENTRIES;
                    let (_, entry) = rig.ieq(id, slot);
                    let seen = ModelEvent {
                        kind: entry.kind.get(),
                        code: entry.code.get(),
                        tok: entry.tok.get(),
                        info: entry.info.get(),
                    };
                    prop_assert_eq!(&seen, event, "ism{} slot {} at {}", id, slot, at);
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The properties

proptest! {
    #![proptest_config(config())]

    /// 1. After every step, the only bytes that changed in any function's RAM are in the
    /// target DMB range of an accepted move, the SBA bits of its owner, or the IEQ (and
    /// event bit) of a function the model says hears an event.
    #[test]
    fn isolation_nothing_changes_but_what_the_model_allows(s in scenario(EVEN, 24)) {
        run(&s, Checks { isolation: true, ..Checks::default() })?;
    }

    /// 2. A rejected command or move changes no RAM and no fabric state.
    #[test]
    fn a_rejected_step_changes_nothing(s in scenario(EVEN, 24)) {
        run(&s, Checks { rejections: true, ..Checks::default() })?;
    }

    /// 3. Live tokens are unique and rotate: none is handed out twice in a scenario, and
    /// a departed function's tokens are gone.
    #[test]
    fn tokens_are_unique_and_not_reused(
        s in scenario(Mix { reg: 10, unreg: 6, life: 3, ..EVEN }, 24)
    ) {
        run(&s, Checks { tokens: true, ..Checks::default() })?;
    }

    /// 4. Each event moves the target's IEQ index on by exactly one, wrapping after 15,
    /// and lands in the slot the index names.
    #[test]
    fn ieq_index_counts_events_and_wraps(
        s in scenario(Mix { signal: 40, life: 3, reg: 4, moves: 4, ..EVEN }, 48)
    ) {
        run(&s, Checks { ieq: true, ..Checks::default() })?;
    }

    /// 5. A departing function's peers (either side of a shared DMB) hear exactly one GID
    /// event with its GID; nobody else hears anything.
    #[test]
    fn a_departure_is_heard_by_its_peers_only(
        s in scenario(Mix { reg: 10, life: 6, moves: 2, ..EVEN }, 24)
    ) {
        run(&s, Checks { gid_events: true, ..Checks::default() })?;
    }
}

/// The IEQ wraps: 17 signals to one function land in slots 0..14 then 0, 1.
#[test]
fn ieq_wraps_after_15_events() {
    let ops = (0..17)
        .map(|k| Op::Signal {
            f: k % 3 + 1,
            to: Peer::Function(0),
            irq: true,
            code: k as u32,
            info: 0,
        })
        .collect();
    let s = Scenario { functions: 4, ops };
    run(
        &s,
        Checks {
            ieq: true,
            isolation: true,
            ..Checks::default()
        },
    )
    .unwrap();
}

/// The rotation promise behind property 3 in full: a freed token comes back only after
/// every other of the 4095 has been handed out once since.
#[test]
fn a_freed_token_returns_only_after_all_others() {
    let rig = Rig::new(1);
    let unreg = |token: u64| rig.command(0, wire::UnregDmbRequest::new(token.into()));
    let first = rig.reg_dmb(0, 7, 32);
    unreg(first).unwrap();
    let mut seen = BTreeSet::new();
    for _ in 1..4095 {
        let token = rig.reg_dmb(0, 7, 32);
        assert!(
            token != first && seen.insert(token),
            "{token:#x} came back early"
        );
        unreg(token).unwrap();
    }
    assert_eq!(rig.reg_dmb(0, 7, 32), first, "after a full round");
}
