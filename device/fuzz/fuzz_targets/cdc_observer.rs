//! Data moves into DMBs as SMC-D makes them, watched by the real observer: CDC messages
//! (32 bytes and a little more) at offset 0 with the signal flag, carrying open, close and
//! abort flags; data at other offsets; the owner zeroing or dirtying its DMB; zeroing
//! watch ticks; unregistration and re-registration. A model of the DMB's connection
//! state, written from the rules in `observer/dmb_life.rs`'s header, is compared with the
//! observer's summaries after every step, and so are the reuse check's stale-byte count
//! (against the DMB's bytes before the move) and every "zeroed" verdict (against the
//! DMB's bytes when the watch looked).
#![no_main]

use std::collections::BTreeMap;
use std::sync::Arc;

use arbitrary::Arbitrary;
use ism_emu::ism::cdc;
use ism_emu::observer::summary::ConnState;
use ism_emu::observer::Observer;
use ism_emu_fuzz::{gid, wire, World, BASE, DMB_AT, PAGE, RAM_PAGES};
use libfuzzer_sys::fuzz_target;

const FUNCTIONS: usize = 3;
/// DMB slots in each guest's RAM after SBA and IEQ: one page each, up to two pages long.
const SLOTS: u64 = (RAM_PAGES - 2) / 2;

#[derive(Arbitrary, Debug)]
enum Op {
    Register {
        owner: u8,
        peer: u8,
        slot: u8,
        pages: u8,
    },
    Unregister {
        dmb: u8,
    },
    Cdc {
        from_owner: bool,
        dmb: u8,
        prod: u16,
        cons: u16,
        prod_flags: u8,
        conn_state: u8,
        type_byte: Option<u8>,
        extra: u8,
        signal: bool,
    },
    Data {
        from_owner: bool,
        dmb: u8,
        offset: u16,
        len: u16,
        fill: u8,
        signal: bool,
    },
    OwnerZeroes {
        dmb: u8,
    },
    OwnerDirties {
        dmb: u8,
        at: u16,
        byte: u8,
    },
    Poll,
    Reset {
        f: u8,
    },
}

/// The model's view of one DMB.
#[derive(Clone, Debug)]
struct Model {
    state: ConnState,
    connections: u64,
    reuses: u64,
    closes: u64,
    bytes: u64,
    signals: u64,
    /// Closed, with data moves since: the nonzero bytes the DMB held before the first.
    pending: Option<u64>,
    /// Where the open connection's CDC may put its producer count: the last one
    /// announced, or the end of a data move since (None: more than the observer keeps).
    announced: u64,
    ends: Option<Vec<u64>>,
    /// Closed: the connection's `announced` and `ends` before its close, should its
    /// sender write on past one ring (the close was then another connection's).
    last_close: Option<(u64, Option<Vec<u64>>)>,
    /// Closed: a move since the close found the DMB all zero before it.
    found_zero: bool,
}

impl Model {
    fn new() -> Self {
        Self {
            state: ConnState::Fresh,
            connections: 0,
            reuses: 0,
            closes: 0,
            bytes: 0,
            signals: 0,
            pending: None,
            announced: 0,
            ends: Some(Vec::new()),
            last_close: None,
            found_zero: false,
        }
    }

    fn data_moved(ends: &mut Option<Vec<u64>>, offset: u32, len: usize, dmb_len: u32) {
        let area = u64::from(dmb_len).saturating_sub(cdc::LEN as u64);
        let (Some(list), true, true) = (ends.as_mut(), area > 0, offset >= cdc::LEN as u32) else {
            return;
        };
        if list.len() < 512 {
            list.push((u64::from(offset) - cdc::LEN as u64 + len as u64) % area);
        } else {
            *ends = None;
        }
    }
}

fn is_cdc(offset: u32, signal: bool, data: &[u8]) -> bool {
    offset == 0 && signal && data.len() >= cdc::LEN && data[0] == cdc::TYPE
}

/// Whether a CDC message without close flags into a closed DMB continues the closed
/// connection (docs/observer.md, "foreign CDC messages"): past one data area, at a count
/// the connection's cursor before its close or a move since accepts, and no zeroing seen.
fn continues(m: &Model, data: &[u8], dmb_len: u32, zeroed: bool) -> bool {
    let area = u64::from(dmb_len).saturating_sub(cdc::LEN as u64);
    let Some((announced, before)) = &m.last_close else {
        return false;
    };
    let wrap = u64::from(cdc::prod_wrap(data));
    let seen = u64::from(cdc::prod_count(data));
    if zeroed || area == 0 || wrap * area + seen <= area {
        return false;
    }
    let moved_to = |ends: &Option<Vec<u64>>| ends.as_ref().is_none_or(|e| e.contains(&seen));
    seen == *announced || moved_to(before) || (m.pending.is_some() && moved_to(&m.ends))
}

/// The model's step for an accepted move (docs/observer.md: a move into a closed DMB only
/// may start a connection, the next CDC decides; a CDC whose producer count is not the
/// open connection's is foreign and changes nothing). Returns, when it reopened a closed
/// DMB, the nonzero bytes the reuse check must have found. `zeroed`: the observer saw the
/// owner zero the DMB since the last close.
fn step(
    m: &mut Model,
    offset: u32,
    signal: bool,
    data: &[u8],
    dmb_len: u32,
    before: u64,
    zeroed: bool,
) -> Option<u64> {
    m.bytes += data.len() as u64;
    m.signals += u64::from(signal);
    let is_msg = is_cdc(offset, signal, data);
    let closing =
        is_msg && data[cdc::CONN_STATE] & (cdc::PEER_CONN_CLOSED | cdc::PEER_CONN_ABORT) != 0;
    let mut reopened = None;
    match m.state {
        ConnState::Fresh => {
            m.connections += 1;
            m.state = ConnState::Open;
            m.announced = 0;
            m.ends = Some(Vec::new());
            if !is_msg {
                Model::data_moved(&mut m.ends, offset, data.len(), dmb_len);
            }
        }
        ConnState::Closed if !is_msg => {
            m.found_zero |= before == 0;
            if m.pending.is_none() {
                m.pending = Some(before);
                m.ends = Some(Vec::new());
                m.announced = 0;
            }
            Model::data_moved(&mut m.ends, offset, data.len(), dmb_len);
            return None;
        }
        ConnState::Closed if closing => {
            m.pending = None;
            m.found_zero = false;
            return None;
        }
        ConnState::Closed if continues(m, data, dmb_len, zeroed || m.found_zero || before == 0) => {
            // The close was another connection's: the connection goes on, with its
            // moves before the close and since as its own.
            m.closes -= 1;
            m.state = ConnState::Open;
            let (announced, mut ends) = m.last_close.take().expect("continues checked it");
            if m.pending.take().is_some() {
                match (&mut ends, &m.ends) {
                    (Some(list), Some(since)) => list.extend(since),
                    _ => ends = None,
                }
                if ends.as_ref().is_some_and(|e| e.len() > 512) {
                    ends = None;
                }
            }
            m.announced = announced;
            m.ends = ends;
            m.found_zero = false;
        }
        ConnState::Closed => {
            m.last_close = None;
            m.found_zero = false;
            m.connections += 1;
            m.reuses += 1;
            m.state = ConnState::Open;
            // With data moves since the close, the connection starts with their cursor.
            reopened = Some(m.pending.take().unwrap_or_else(|| {
                m.announced = 0;
                m.ends = Some(Vec::new());
                before
            }));
        }
        ConnState::Open => {
            if !is_msg {
                Model::data_moved(&mut m.ends, offset, data.len(), dmb_len);
                return None;
            }
        }
    }
    if is_msg && m.state == ConnState::Open && u64::from(dmb_len) > cdc::LEN as u64 {
        let seen = u64::from(cdc::prod_count(data));
        let ours = match &m.ends {
            None => true,
            Some(ends) => seen == m.announced || ends.contains(&seen),
        };
        if !ours {
            return reopened;
        }
        if closing {
            m.last_close = Some((m.announced, m.ends.take()));
            m.state = ConnState::Closed;
            m.closes += 1;
        }
        m.announced = seen;
        m.ends = Some(Vec::new());
    }
    reopened
}

struct Run {
    world: World,
    observer: Arc<Observer>,
    models: BTreeMap<u64, Model>,
}

impl Run {
    fn pick(&self, i: u8) -> Option<u64> {
        let tokens: Vec<u64> = self.world.fabric.dmbs().iter().map(|d| d.token).collect();
        (!tokens.is_empty()).then(|| tokens[usize::from(i) % tokens.len()])
    }

    /// The DMB's bytes in its owner's RAM (each guest maps its RAM once, at BASE).
    fn dmb_bytes(&self, token: u64) -> Option<Vec<u8>> {
        let dmb = self.world.fabric.dmb(token)?;
        let ram = &self.world.guests[dmb.owner].ram;
        Some(ram.read(dmb.iova - BASE, dmb.len as usize).expect("RAM"))
    }

    fn do_move(&mut self, token: u64, from_owner: bool, offset: u32, signal: bool, data: &[u8]) {
        let Some(dmb) = self.world.fabric.dmb(token) else {
            return;
        };
        let sender = if from_owner {
            dmb.owner
        } else {
            match (0..FUNCTIONS).find(|&f| gid(f) == dmb.rgid) {
                Some(f) => f,
                None => return,
            }
        };
        let before = self.dmb_bytes(token).unwrap_or_default();
        let at = wire::move_offset(token, 0, signal, offset);
        if !self.world.move_data(sender, at, data) {
            return;
        }
        let dmb_len = self.world.fabric.dmb(token).map_or(0, |d| d.len);
        let nonzero = before.iter().filter(|&&b| b != 0).count() as u64;
        let zeroed = self
            .observer
            .summaries()
            .into_iter()
            .find(|s| s.token == token)
            .and_then(|s| s.recent.last().map(|r| r.zeroed_after_ms.is_some()))
            .unwrap_or(false);
        let model = self.models.entry(token).or_insert_with(Model::new);
        if let Some(stale) = step(model, offset, signal, data, dmb_len, nonzero, zeroed) {
            let summary = self.summary(token);
            let record = summary.recent.last().expect("a reuse has a record");
            if let Some(clean) = record.reuse_clean {
                assert_eq!(record.stale_bytes, stale, "stale bytes of the reuse check");
                assert_eq!(clean, stale == 0, "clean verdict of the reuse check");
            }
        }
    }

    fn summary(&self, token: u64) -> ism_emu::observer::DmbSummary {
        self.observer
            .summaries()
            .into_iter()
            .find(|s| s.token == token)
            .expect("observer knows every registered DMB")
    }

    fn check(&self) {
        let live: Vec<u64> = self.world.fabric.dmbs().iter().map(|d| d.token).collect();
        for s in self.observer.summaries() {
            assert_eq!(
                s.reuses,
                s.clean_reuses + s.stale_reuses + s.unchecked_reuses,
                "reuses add up"
            );
            assert!(s.closes <= s.connections, "more closes than connections");
            assert!(s.reuses <= s.connections, "more reuses than connections");
            assert!(
                s.zeroed_after_close + s.not_zeroed <= s.closes,
                "more zeroing verdicts than closes"
            );
            assert_eq!(s.registered, live.contains(&s.token), "registered flag");
            if let Some(m) = self.models.get(&s.token).filter(|_| s.registered) {
                assert_eq!(s.state, m.state, "state of DMB {:#x}", s.token);
                assert_eq!(s.connections, m.connections, "connections");
                assert_eq!(s.reuses, m.reuses, "reuses");
                assert_eq!(s.closes, m.closes, "closes");
                assert_eq!(s.bytes, m.bytes, "bytes");
                assert_eq!(s.signals, m.signals, "signals");
            }
        }
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let observer = Arc::new(Observer::new(None));
    let world = World::probed(FUNCTIONS, observer.clone());
    let mut run = Run {
        world,
        observer,
        models: BTreeMap::new(),
    };
    for op in ops.iter().take(64) {
        match op {
            Op::Register {
                owner,
                peer,
                slot,
                pages,
            } => {
                let owner = usize::from(*owner) % FUNCTIONS;
                let slot = u64::from(*slot) % SLOTS;
                let iova = BASE + DMB_AT + slot * 2 * PAGE;
                let len = (u32::from(*pages) % 2 + 1) * PAGE as u32;
                let rgid = gid(usize::from(*peer) % FUNCTIONS);
                let req = wire::reg_dmb(iova, len, 32 + slot as u32, rgid);
                let reply = run.world.op_command(owner, &req);
                if reply.ret == 0 {
                    run.models.insert(reply.u64_at(8), Model::new());
                }
            }
            Op::Unregister { dmb } => {
                if let Some(token) = run.pick(*dmb) {
                    let owner = run.world.fabric.dmb(token).expect("a live DMB").owner;
                    let reply = run.world.op_command(owner, &wire::unreg_dmb(token));
                    assert_eq!(reply.ret, 0, "the owner unregisters its DMB");
                }
            }
            Op::Cdc {
                from_owner,
                dmb,
                prod,
                cons,
                prod_flags,
                conn_state,
                type_byte,
                extra,
                signal,
            } => {
                if let Some(token) = run.pick(*dmb) {
                    let mut msg =
                        wire::cdc(u32::from(*prod), u32::from(*cons), *prod_flags, *conn_state)
                            .to_vec();
                    if let Some(t) = type_byte {
                        msg[0] = *t;
                    }
                    // 44 bytes is the v2 CDC with its trailer; anything from 16 to 48.
                    msg.resize(16 + usize::from(*extra) % 33, 0);
                    run.do_move(token, *from_owner, 0, *signal, &msg);
                }
            }
            Op::Data {
                from_owner,
                dmb,
                offset,
                len,
                fill,
                signal,
            } => {
                if let Some(token) = run.pick(*dmb) {
                    let data = vec![*fill; usize::from(*len) % 4097];
                    run.do_move(token, *from_owner, u32::from(*offset), *signal, &data);
                }
            }
            Op::OwnerZeroes { dmb } => {
                if let Some(token) = run.pick(*dmb) {
                    let dmb = run.world.fabric.dmb(token).expect("a live DMB");
                    let zeros = vec![0; dmb.len as usize];
                    run.world.guest_write(dmb.owner, dmb.iova - BASE, &zeros);
                }
            }
            Op::OwnerDirties { dmb, at, byte } => {
                if let Some(token) = run.pick(*dmb) {
                    let dmb = run.world.fabric.dmb(token).expect("a live DMB");
                    let at = u64::from(*at) % u64::from(dmb.len);
                    run.world
                        .guest_write(dmb.owner, dmb.iova - BASE + at, &[*byte]);
                }
            }
            Op::Poll => {
                let tokens: Vec<u64> = run.world.fabric.dmbs().iter().map(|d| d.token).collect();
                let before: Vec<_> = tokens
                    .iter()
                    .map(|&t| (t, run.summary(t).zeroed_after_close, run.dmb_bytes(t)))
                    .collect();
                run.world.fabric.poll_zeroing();
                for (token, zeroed, bytes) in before {
                    if run.summary(token).zeroed_after_close > zeroed {
                        let bytes = bytes.unwrap_or_default();
                        assert!(
                            bytes.iter().all(|&b| b == 0),
                            "DMB {token:#x} reported zeroed with a nonzero byte at {:#x}",
                            bytes.iter().position(|&b| b != 0).unwrap_or(0)
                        );
                    }
                }
            }
            Op::Reset { f } => {
                let f = usize::from(*f) % FUNCTIONS;
                run.world.reset(f);
                // The guest probes again after a reset, as the driver does.
                run.world.dma_map(f, BASE, ism_emu_fuzz::RAM_SIZE, 0, true);
                for req in wire::probe_sequence(BASE, BASE + PAGE) {
                    run.world.op_command(f, &req);
                }
            }
        }
        run.check();
    }
});
