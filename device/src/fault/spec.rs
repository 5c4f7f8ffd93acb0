//! The fault grammar (docs/faults.md): a spec's text to a [`FaultSpec`] and back.

use std::fmt;
use std::time::Duration;

use super::kinds::{self, Kind};
use super::FaultSpecError;
use crate::ism::command::{CommandError, ISM_ERROR};
use crate::ism::opcodes::Opcode;

/// A peer named in a spec: a function of the fabric or a bare GID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    Function(String),
    Gid(u64),
}

/// A peer by its function's name or by its GID (`0x...`).
fn parse_peer(peer: String) -> Result<Peer, FaultSpecError> {
    Ok(if peer.starts_with("0x") || peer.starts_with("0X") {
        Peer::Gid(parse_u64("peer", &peer)?)
    } else {
        Peer::Function(peer)
    })
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Function(name) => write!(f, "{name}"),
            Peer::Gid(gid) => write!(f, "{gid:#x}"),
        }
    }
}

/// What a rule does when it fires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// The command with this opcode fails with `ret` (QUERY_RGID with 0x0007 is
    /// `rgid-unknown`).
    Command { opcode: Opcode, ret: u16 },
    /// REG_DMB fails with `ret` while the function owns `max` DMBs or more.
    DmbLimit { max: usize, ret: u16 },
    /// Data moves by the function are rejected: to `token` only, if given; only those
    /// with (`Some(true)`) or without (`Some(false)`) the signal flag, if given.
    RejectMove {
        token: Option<u64>,
        signal: Option<bool>,
    },
    /// Each data move by the function waits this long first (a slow device); the wait
    /// is the sender's own and holds no lock.
    DelayMove(Duration),
    /// The interrupt a signalling move raises at the function is not raised.
    DropIrq,
    /// ... is raised this much later.
    DelayIrq(Duration),
    /// An action, not a rule: queue a GID-disabled event for `peer` at the function.
    GidDisabled(Peer),
    /// When the function registers its event queue (REG_IEQ), a GID-disabled event for
    /// `peer` is queued at once, with its interrupt: an event that comes as early as the
    /// hardware can give one, before the driver has done anything after the command.
    RegIeqEvent(Peer),
}

impl FaultKind {
    /// Its row in the table of kinds.
    pub fn kind(&self) -> Kind {
        match self {
            FaultKind::Command {
                opcode: Opcode::QueryRgid,
                ret: RGID_UNKNOWN_RET,
            } => Kind::RgidUnknown,
            FaultKind::Command { .. } => Kind::Cmd,
            FaultKind::DmbLimit { .. } => Kind::DmbLimit,
            FaultKind::RejectMove { .. } => Kind::Move,
            FaultKind::DelayMove(_) => Kind::MoveDelay,
            FaultKind::DropIrq => Kind::IrqDrop,
            FaultKind::DelayIrq(_) => Kind::IrqDelay,
            FaultKind::GidDisabled(_) => Kind::GidDisabled,
            FaultKind::RegIeqEvent(_) => Kind::RegIeqEvent,
        }
    }
}

/// The `ret` of `rgid-unknown`: QUERY_RGID's answer for a GID not on the fabric.
const RGID_UNKNOWN_RET: u16 = 0x0007;

/// Which of the matching occasions a rule fires on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trigger {
    /// Every one.
    Always,
    /// The next `n`; then the rule is spent.
    Next(u64),
    /// Every `k`-th (the k-th, the 2k-th, ...).
    Every(u64),
    /// Each with probability `p`, from a generator seeded with `seed`: the same seed and
    /// the same sequence of occasions give the same faults.
    Probability { p: f64, seed: u64 },
}

/// One fault as written, checked for form (not yet against a fabric).
#[derive(Clone, Debug, PartialEq)]
pub struct FaultSpec {
    pub kind: FaultKind,
    /// The function the rule applies to (the sender of a move, the receiver of an
    /// interrupt or event, the issuer of a command); any function if `None`.
    pub function: Option<String>,
    pub trigger: Trigger,
}

fn parse_u64(key: &'static str, value: &str) -> Result<u64, FaultSpecError> {
    crate::util::hex::parse_number(value).map_err(|e| FaultSpecError::BadValue {
        key,
        value: value.to_string(),
        why: e.why(),
    })
}

fn parse_ret(value: &str) -> Result<u16, FaultSpecError> {
    let v = parse_u64("rc", value)?;
    match u16::try_from(v) {
        Ok(0) | Err(_) => Err(FaultSpecError::BadValue {
            key: "rc",
            value: value.to_string(),
            why: "a return code is 0x0001-0xffff (0 is success)".into(),
        }),
        Ok(ret) => Ok(ret),
    }
}

fn parse_opcode(value: &str) -> Result<Opcode, FaultSpecError> {
    if let Some(op) = Opcode::from_name(value) {
        return Ok(op);
    }
    parse_u64("cmd", value)
        .ok()
        .and_then(|v| u32::try_from(v).ok())
        .and_then(Opcode::from_code)
        .ok_or_else(|| FaultSpecError::UnknownCommand(value.to_string()))
}

/// Delays are capped: a fault is for testing timeouts, not for wedging a thread forever.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

fn parse_delay(value: &str) -> Result<Duration, FaultSpecError> {
    let us = parse_u64("us", value)?;
    let delay = Duration::from_micros(us);
    if us == 0 || delay > MAX_DELAY {
        return Err(FaultSpecError::BadValue {
            key: "us",
            value: value.to_string(),
            why: format!("a delay is 1 us to {} s", MAX_DELAY.as_secs()),
        });
    }
    Ok(delay)
}

impl FaultSpec {
    /// Parses one spec (see the module documentation).
    pub fn parse(text: &str) -> Result<Self, FaultSpecError> {
        let text = text.trim();
        let mut parts = text.split(',').map(str::trim);
        let head = parts
            .next()
            .filter(|h| !h.is_empty())
            .ok_or(FaultSpecError::Empty)?;
        let (what, function) = match head.split_once('@') {
            Some((what, f)) if !f.is_empty() => (what, Some(f.to_string())),
            Some((what, _)) => (what, None),
            None => (head, None),
        };
        let mut pairs = Vec::new();
        for part in parts.filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| FaultSpecError::NotKeyValue(part.to_string()))?;
            pairs.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        let take = |pairs: &mut Vec<(String, String)>, key: &str| {
            let at = pairs.iter().position(|(k, _)| k == key)?;
            Some(pairs.remove(at).1)
        };

        // The trigger keys apply to every kind but the action.
        let next = take(&mut pairs, "next");
        let every = take(&mut pairs, "every");
        let prob = take(&mut pairs, "prob");
        let seed = take(&mut pairs, "seed");
        let trigger = match (next, every, prob) {
            (None, None, None) if seed.is_none() => Trigger::Always,
            (Some(n), None, None) if seed.is_none() => Trigger::Next(positive("next", &n)?),
            (None, Some(k), None) if seed.is_none() => Trigger::Every(positive("every", &k)?),
            (None, None, Some(p)) => {
                let p_val: f64 = p.parse().map_err(|_| FaultSpecError::BadValue {
                    key: "prob",
                    value: p.clone(),
                    why: "not a number".into(),
                })?;
                if !(p_val > 0.0 && p_val <= 1.0) {
                    return Err(FaultSpecError::BadValue {
                        key: "prob",
                        value: p,
                        why: "a probability in (0, 1]".into(),
                    });
                }
                let seed = seed
                    .map(|s| parse_u64("seed", &s))
                    .transpose()?
                    .unwrap_or(1);
                Trigger::Probability { p: p_val, seed }
            }
            _ => return Err(FaultSpecError::TwoTriggers),
        };

        // `cmd=NAME` is the one kind with an argument.
        let (name, arg) = match what.split_once('=') {
            Some((name, arg)) => (name, Some(arg)),
            None => (what, None),
        };
        let unknown = || FaultSpecError::UnknownKind(what.to_string());
        let table = Kind::from_name(name).ok_or_else(unknown)?;
        if arg.is_some() != (table == Kind::Cmd) {
            return Err(unknown());
        }
        let kind_name = table.name();
        let missing = |key| FaultSpecError::Missing {
            kind: kind_name,
            key,
        };
        let kind = match table {
            Kind::Cmd => {
                let opcode = parse_opcode(arg.unwrap_or_default())?;
                let ret = take(&mut pairs, "rc")
                    .map(|v| parse_ret(&v))
                    .transpose()?
                    .unwrap_or(ISM_ERROR);
                FaultKind::Command { opcode, ret }
            }
            Kind::RgidUnknown => FaultKind::Command {
                opcode: Opcode::QueryRgid,
                ret: CommandError::UnknownGid(0).ret(),
            },
            Kind::DmbLimit => {
                let max = take(&mut pairs, "max").ok_or(missing("max"))?;
                let max = parse_u64("max", &max)? as usize;
                let ret = take(&mut pairs, "rc")
                    .map(|v| parse_ret(&v))
                    .transpose()?
                    .unwrap_or(CommandError::NoToken.ret());
                FaultKind::DmbLimit { max, ret }
            }
            Kind::Move => {
                let token = take(&mut pairs, "token")
                    .map(|t| parse_u64("token", &t))
                    .transpose()?;
                let signal = take(&mut pairs, "signal")
                    .map(|v| match v.as_str() {
                        "yes" => Ok(true),
                        "no" => Ok(false),
                        _ => Err(FaultSpecError::BadValue {
                            key: "signal",
                            value: v.clone(),
                            why: "yes or no".into(),
                        }),
                    })
                    .transpose()?;
                FaultKind::RejectMove { token, signal }
            }
            Kind::MoveDelay | Kind::IrqDelay => {
                let us = take(&mut pairs, "us").ok_or(missing("us"))?;
                let delay = parse_delay(&us)?;
                if table == Kind::MoveDelay {
                    FaultKind::DelayMove(delay)
                } else {
                    FaultKind::DelayIrq(delay)
                }
            }
            Kind::IrqDrop => FaultKind::DropIrq,
            Kind::RegIeqEvent => {
                let peer = take(&mut pairs, "peer").ok_or(missing("peer"))?;
                FaultKind::RegIeqEvent(parse_peer(peer)?)
            }
            Kind::GidDisabled => {
                let peer = take(&mut pairs, "peer").ok_or(missing("peer"))?;
                let peer = parse_peer(peer)?;
                if function.is_none() {
                    return Err(FaultSpecError::NoReceiver);
                }
                if trigger != Trigger::Always {
                    return Err(FaultSpecError::KeyNotForKind {
                        key: "next/every/prob".into(),
                        kind: kind_name,
                    });
                }
                FaultKind::GidDisabled(peer)
            }
        };
        if let Some((key, _)) = pairs.into_iter().next() {
            // A typo (`nxt`) is told apart from a real key in the wrong place (`us` on
            // irq-drop): the fix differs.
            let known = kinds::is_key(&key);
            return Err(if known {
                FaultSpecError::KeyNotForKind {
                    key,
                    kind: kind_name,
                }
            } else {
                FaultSpecError::UnknownKey {
                    key,
                    kind: kind_name,
                }
            });
        }
        Ok(Self {
            kind,
            function,
            trigger,
        })
    }

    /// Whether the spec is a one-time action rather than a rule.
    pub fn is_action(&self) -> bool {
        matches!(self.kind, FaultKind::GidDisabled(_))
    }

    pub(super) fn applies_to(&self, function: &str) -> bool {
        self.function.as_deref().is_none_or(|f| f == function)
    }
}

fn positive(key: &'static str, value: &str) -> Result<u64, FaultSpecError> {
    match parse_u64(key, value)? {
        0 => Err(FaultSpecError::BadValue {
            key,
            value: value.to_string(),
            why: "must be at least 1".into(),
        }),
        n => Ok(n),
    }
}

/// The canonical text of a spec: what `fault list` shows and events carry; it parses
/// back to the same spec.
impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self.kind.kind();
        match &self.kind {
            FaultKind::Command { opcode, .. } if kind == Kind::Cmd => {
                write!(f, "{}={}", kind.name(), opcode.name())?
            }
            _ => write!(f, "{}", kind.name())?,
        }
        if let Some(function) = &self.function {
            write!(f, "@{function}")?;
        }
        match &self.kind {
            FaultKind::Command { .. } if kind == Kind::RgidUnknown => {}
            FaultKind::Command { ret, .. } => write!(f, ",rc={ret:#06x}")?,
            FaultKind::DmbLimit { max, ret } => write!(f, ",max={max},rc={ret:#06x}")?,
            FaultKind::RejectMove { token, signal } => {
                if let Some(t) = token {
                    write!(f, ",token={t:#x}")?;
                }
                if let Some(s) = signal {
                    write!(f, ",signal={}", if *s { "yes" } else { "no" })?;
                }
            }
            FaultKind::DropIrq => {}
            FaultKind::DelayMove(d) | FaultKind::DelayIrq(d) => write!(f, ",us={}", d.as_micros())?,
            FaultKind::GidDisabled(peer) | FaultKind::RegIeqEvent(peer) => {
                write!(f, ",peer={peer}")?;
            }
        }
        match self.trigger {
            Trigger::Always => Ok(()),
            Trigger::Next(n) => write!(f, ",next={n}"),
            Trigger::Every(k) => write!(f, ",every={k}"),
            Trigger::Probability { p, seed } => write!(f, ",prob={p},seed={seed}"),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::fault::FaultSpecError;

    /// A spec that must parse (the plan's tests use it too).
    pub(in crate::fault) fn spec(text: &str) -> FaultSpec {
        FaultSpec::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn specs_parse_and_print_back_canonically() {
        for (text, canonical) in [
            (
                "cmd=reg_dmb@ism1,rc=6,next=1",
                "cmd=reg_dmb@ism1,rc=0x0006,next=1",
            ),
            ("cmd=0x0a", "cmd=reg_dmb,rc=0xffff"),
            ("CMD=REG_DMB", ""),
            ("rgid-unknown@ism0", "rgid-unknown@ism0"),
            ("dmb-limit@ism1,max=2", "dmb-limit@ism1,max=2,rc=0x0006"),
            ("move@ism0,every=50", "move@ism0,every=50"),
            ("move,token=0x100000000", "move,token=0x100000000"),
            ("move@ism1,signal=no,next=1", "move@ism1,signal=no,next=1"),
            (
                "move,signal=yes,token=0x100000000",
                "move,token=0x100000000,signal=yes",
            ),
            ("move-delay,us=200", "move-delay,us=200"),
            ("irq-drop@ism1,next=3", "irq-drop@ism1,next=3"),
            ("irq-delay@ism1, us=20000", "irq-delay@ism1,us=20000"),
            (
                "cmd=signal_ieq,prob=0.25,seed=7",
                "cmd=signal_ieq,rc=0xffff,prob=0.25,seed=7",
            ),
            ("gid-disabled@ism0,peer=ism1", "gid-disabled@ism0,peer=ism1"),
            (
                "gid-disabled@ism0,peer=0x1234",
                "gid-disabled@ism0,peer=0x1234",
            ),
            (
                "reg-ieq-event@ism0,peer=ism1,next=1",
                "reg-ieq-event@ism0,peer=ism1,next=1",
            ),
            ("reg-ieq-event,peer=0X1234", "reg-ieq-event,peer=0x1234"),
            ("reg-ieq-event@ism0", ""),
        ] {
            if canonical.is_empty() {
                assert!(FaultSpec::parse(text).is_err(), "{text} parsed");
                continue;
            }
            let s = spec(text);
            assert_eq!(s.to_string(), canonical, "{text}");
            assert_eq!(spec(canonical), s, "{canonical} does not parse back");
        }
    }

    #[test]
    fn bad_specs_say_why() {
        use FaultSpecError as E;
        let err = |t: &str| FaultSpec::parse(t).unwrap_err();
        assert_eq!(err(""), E::Empty);
        assert_eq!(err("explode"), E::UnknownKind("explode".into()));
        assert_eq!(
            err("cmd=frobnicate"),
            E::UnknownCommand("frobnicate".into())
        );
        assert_eq!(err("cmd=0x0c"), E::UnknownCommand("0x0c".into()));
        assert_eq!(err("move,oops"), E::NotKeyValue("oops".into()));
        assert!(matches!(err("irq-drop,us=5"), E::KeyNotForKind { .. }));
        let typo = err("cmd=reg_dmb@ism0,nxt=4");
        assert!(
            matches!(typo, E::UnknownKey { kind: "cmd", .. }),
            "{typo:?}"
        );
        assert_eq!(
            typo.to_string(),
            "unknown key \"nxt\" (the keys of cmd: rc, next, every, prob, seed)"
        );
        assert!(matches!(
            err("cmd=reg_dmb,rc=0"),
            E::BadValue { key: "rc", .. }
        ));
        assert!(matches!(
            err("cmd=reg_dmb,rc=0x10000"),
            E::BadValue { key: "rc", .. }
        ));
        assert!(matches!(
            err("move-delay,us=0"),
            E::BadValue { key: "us", .. }
        ));
        assert!(matches!(
            err("move-delay,us=20000000"),
            E::BadValue { key: "us", .. }
        ));
        assert!(matches!(
            err("move,every=0"),
            E::BadValue { key: "every", .. }
        ));
        assert!(matches!(
            err("move,prob=1.5"),
            E::BadValue { key: "prob", .. }
        ));
        assert_eq!(err("move,next=1,every=2"), E::TwoTriggers);
        assert_eq!(err("move,seed=3"), E::TwoTriggers);
        assert_eq!(
            err("move-delay"),
            E::Missing {
                kind: "move-delay",
                key: "us"
            }
        );
        assert_eq!(err("gid-disabled,peer=ism1"), E::NoReceiver);
        assert!(matches!(
            err("gid-disabled@ism0,peer=ism1,next=1"),
            E::KeyNotForKind { .. }
        ));
    }
}
