//! Fault injection: rules that make the device fail on purpose, so that SMC-D's error
//! paths (a failed REG_DMB, a move rejected mid-stream, a late or lost interrupt, a peer
//! reported gone) can be driven from the host, exactly and repeatably.
//!
//! A rule is a [`FaultSpec`] in a small text grammar (docs/faults.md):
//!
//! ```text
//! SPEC := WHAT ['@' FUNCTION] {',' KEY '=' VALUE}
//! WHAT := cmd=OPCODE | rgid-unknown | dmb-limit | move | move-delay
//!       | irq-drop | irq-delay | gid-disabled
//! KEY  := rc | max | token | signal | us | peer | next | every | prob | seed
//! ```
//!
//! e.g. `cmd=reg_dmb@ism1,rc=0x6,next=1`, `move@ism0,every=50`, `irq-delay@ism1,us=20000`.
//! Rules live in a [`FaultPlan`], which the fabric asks at each hook; a rule that fires
//! says what it did in a [`Fired`], which the fabric logs and reports as a
//! `fault_injected` event. Faults are set by the host (the command line, the control
//! socket), never by a guest.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::ism::command::{CommandError, ISM_ERROR};
use crate::ism::wire::opcode;

/// Why a fault spec was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FaultSpecError {
    #[error("empty fault spec")]
    Empty,
    #[error("unknown fault {0:?} (cmd=OPCODE, rgid-unknown, dmb-limit, move, move-delay, irq-drop, irq-delay, gid-disabled)")]
    UnknownKind(String),
    #[error("unknown command {0:?} (a name such as reg_dmb, or a number)")]
    UnknownCommand(String),
    #[error("{0:?} is not KEY=VALUE")]
    NotKeyValue(String),
    #[error(
        "key {key:?} does not apply to {kind} (its keys: {})",
        valid_keys(kind)
    )]
    KeyNotForKind { key: String, kind: &'static str },
    #[error("unknown key {key:?} (the keys of {kind}: {})", valid_keys(kind))]
    UnknownKey { key: String, kind: &'static str },
    #[error("bad value {value:?} for {key}: {why}")]
    BadValue {
        key: &'static str,
        value: String,
        why: String,
    },
    #[error("{kind} needs {key}=")]
    Missing {
        kind: &'static str,
        key: &'static str,
    },
    #[error("at most one of next=, every= and prob= (with seed=)")]
    TwoTriggers,
    #[error("gid-disabled needs the function that hears it: gid-disabled@FUNCTION,peer=...")]
    NoReceiver,
    #[error("no function named {0:?} on this fabric")]
    NoSuchFunction(String),
    #[error("{} fault rules in force already: clear some first", MAX_RULES)]
    TooManyRules,
    #[error(
        "gid-disabled is an action, not a rule: send it to a running emulator (ism-emu fault add)"
    )]
    ActionAtStart,
    /// An action whose event the function could not take: nothing happened.
    /// (The reason is the fabric's `EventLost` as text: this error compares, and fault
    /// sits below the fabric.)
    #[error("{function} did not get the event: {reason}; nothing was done")]
    NotDelivered { function: String, reason: String },
}

/// Every key of the grammar (docs/faults.md), whatever kind it belongs to.
const ALL_KEYS: &[&str] = &[
    "rc", "max", "token", "signal", "us", "peer", "next", "every", "prob", "seed",
];

/// The keys a fault kind takes, for the error that names a wrong one.
fn valid_keys(kind: &str) -> &'static str {
    match kind {
        "cmd" => "rc, next, every, prob, seed",
        "dmb-limit" => "max, rc, next, every, prob, seed",
        "move" => "token, signal, next, every, prob, seed",
        "move-delay" | "irq-delay" => "us, next, every, prob, seed",
        "gid-disabled" => "peer",
        _ => "next, every, prob, seed",
    }
}

/// A peer named in a spec: a function of the fabric or a bare GID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    Function(String),
    Gid(u64),
}

/// What a rule does when it fires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// The command with this opcode fails with `ret` (QUERY_RGID with 0x0007 is
    /// `rgid-unknown`).
    Command { opcode: u32, ret: u16 },
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
}

impl FaultKind {
    fn name(&self) -> &'static str {
        match self {
            FaultKind::Command {
                opcode: opcode::QUERY_RGID,
                ret: 0x0007,
            } => "rgid-unknown",
            FaultKind::Command { .. } => "cmd",
            FaultKind::DmbLimit { .. } => "dmb-limit",
            FaultKind::RejectMove { .. } => "move",
            FaultKind::DelayMove(_) => "move-delay",
            FaultKind::DropIrq => "irq-drop",
            FaultKind::DelayIrq(_) => "irq-delay",
            FaultKind::GidDisabled(_) => "gid-disabled",
        }
    }
}

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

const OPCODE_NAMES: &[(&str, u32)] = &[
    ("reg_sba", opcode::REG_SBA),
    ("reg_ieq", opcode::REG_IEQ),
    ("read_gid", opcode::READ_GID),
    ("add_vlan_id", opcode::ADD_VLAN_ID),
    ("del_vlan_id", opcode::DEL_VLAN_ID),
    ("set_vlan", opcode::SET_VLAN),
    ("reset_vlan", opcode::RESET_VLAN),
    ("query_info", opcode::QUERY_INFO),
    ("query_rgid", opcode::QUERY_RGID),
    ("reg_dmb", opcode::REG_DMB),
    ("unreg_dmb", opcode::UNREG_DMB),
    ("signal_ieq", opcode::SIGNAL_IEQ),
    ("unreg_sba", opcode::UNREG_SBA),
    ("unreg_ieq", opcode::UNREG_IEQ),
];

fn opcode_name(code: u32) -> Option<&'static str> {
    OPCODE_NAMES
        .iter()
        .find(|(_, c)| *c == code)
        .map(|(name, _)| *name)
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

fn parse_opcode(value: &str) -> Result<u32, FaultSpecError> {
    let lower = value.to_ascii_lowercase();
    if let Some(&(_, code)) = OPCODE_NAMES.iter().find(|(name, _)| *name == lower) {
        return Ok(code);
    }
    parse_u64("cmd", value)
        .ok()
        .and_then(|v| u32::try_from(v).ok())
        .filter(|&v| opcode_name(v).is_some())
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

        let (kind_name, kind) = match what.split_once('=') {
            Some(("cmd", name)) => {
                let opcode = parse_opcode(name)?;
                let ret = take(&mut pairs, "rc")
                    .map(|v| parse_ret(&v))
                    .transpose()?
                    .unwrap_or(ISM_ERROR);
                ("cmd", FaultKind::Command { opcode, ret })
            }
            Some(_) => return Err(FaultSpecError::UnknownKind(what.to_string())),
            None => match what {
                "rgid-unknown" => (
                    "rgid-unknown",
                    FaultKind::Command {
                        opcode: opcode::QUERY_RGID,
                        ret: CommandError::UnknownGid(0).ret(),
                    },
                ),
                "dmb-limit" => {
                    let max = take(&mut pairs, "max").ok_or(FaultSpecError::Missing {
                        kind: "dmb-limit",
                        key: "max",
                    })?;
                    let max = parse_u64("max", &max)? as usize;
                    let ret = take(&mut pairs, "rc")
                        .map(|v| parse_ret(&v))
                        .transpose()?
                        .unwrap_or(CommandError::NoToken.ret());
                    ("dmb-limit", FaultKind::DmbLimit { max, ret })
                }
                "move" => {
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
                    ("move", FaultKind::RejectMove { token, signal })
                }
                "move-delay" | "irq-delay" => {
                    let us = take(&mut pairs, "us").ok_or(FaultSpecError::Missing {
                        kind: if what == "move-delay" {
                            "move-delay"
                        } else {
                            "irq-delay"
                        },
                        key: "us",
                    })?;
                    let delay = parse_delay(&us)?;
                    if what == "move-delay" {
                        ("move-delay", FaultKind::DelayMove(delay))
                    } else {
                        ("irq-delay", FaultKind::DelayIrq(delay))
                    }
                }
                "irq-drop" => ("irq-drop", FaultKind::DropIrq),
                "gid-disabled" => {
                    let peer = take(&mut pairs, "peer").ok_or(FaultSpecError::Missing {
                        kind: "gid-disabled",
                        key: "peer",
                    })?;
                    let peer = if peer.starts_with("0x") || peer.starts_with("0X") {
                        Peer::Gid(parse_u64("peer", &peer)?)
                    } else {
                        Peer::Function(peer)
                    };
                    if function.is_none() {
                        return Err(FaultSpecError::NoReceiver);
                    }
                    if trigger != Trigger::Always {
                        return Err(FaultSpecError::KeyNotForKind {
                            key: "next/every/prob".into(),
                            kind: "gid-disabled",
                        });
                    }
                    ("gid-disabled", FaultKind::GidDisabled(peer))
                }
                other => return Err(FaultSpecError::UnknownKind(other.to_string())),
            },
        };
        if let Some((key, _)) = pairs.into_iter().next() {
            // A typo (`nxt`) is told apart from a real key in the wrong place (`us` on
            // irq-drop): the fix differs.
            let known = ALL_KEYS.contains(&key.as_str());
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

    fn applies_to(&self, function: &str) -> bool {
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
        match &self.kind {
            FaultKind::Command {
                opcode: opcode::QUERY_RGID,
                ret: 0x0007,
            } => write!(f, "rgid-unknown")?,
            FaultKind::Command { opcode, .. } => match opcode_name(*opcode) {
                Some(name) => write!(f, "cmd={name}")?,
                None => write!(f, "cmd={opcode:#x}")?,
            },
            kind => write!(f, "{}", kind.name())?,
        }
        if let Some(function) = &self.function {
            write!(f, "@{function}")?;
        }
        match &self.kind {
            FaultKind::Command {
                opcode: opcode::QUERY_RGID,
                ret: 0x0007,
            } => {}
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
            FaultKind::GidDisabled(Peer::Function(p)) => write!(f, ",peer={p}")?,
            FaultKind::GidDisabled(Peer::Gid(g)) => write!(f, ",peer={g:#x}")?,
        }
        match self.trigger {
            Trigger::Always => Ok(()),
            Trigger::Next(n) => write!(f, ",next={n}"),
            Trigger::Every(k) => write!(f, ",every={k}"),
            Trigger::Probability { p, seed } => write!(f, ",prob={p},seed={seed}"),
        }
    }
}

/// A fault that fired: which rule, and what it did, for the log and the event stream.
#[derive(Clone, Debug, PartialEq)]
pub struct Fired {
    pub rule: u32,
    pub spec: String,
    pub detail: String,
}

/// What a signalling move's interrupt becomes.
#[derive(Debug, PartialEq)]
pub enum IrqFault {
    Drop(Fired),
    Delay(Duration, Fired),
}

/// A rule in the plan, with its counts.
#[derive(Debug)]
struct Rule {
    id: u32,
    spec: FaultSpec,
    /// Occasions it matched (the function and kind fit).
    seen: u64,
    fired: u64,
    rng: u64,
}

impl Rule {
    /// Counts one matching occasion and decides whether the rule fires on it.
    fn occasion(&mut self) -> bool {
        self.seen += 1;
        let fire = match self.spec.trigger {
            Trigger::Always => true,
            Trigger::Next(n) => self.fired < n,
            Trigger::Every(k) => self.seen.is_multiple_of(k),
            Trigger::Probability { p, .. } => {
                // xorshift64*: small, and the same everywhere for the same seed.
                self.rng ^= self.rng >> 12;
                self.rng ^= self.rng << 25;
                self.rng ^= self.rng >> 27;
                let draw = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
                (draw as f64) / ((1u64 << 53) as f64) < p
            }
        };
        if fire {
            self.fired += 1;
        }
        fire
    }

    fn spent(&self) -> bool {
        matches!(self.spec.trigger, Trigger::Next(n) if self.fired >= n)
    }

    fn fired(&self, detail: String) -> Fired {
        Fired {
            rule: self.id,
            spec: self.spec.to_string(),
            detail,
        }
    }
}

/// One rule as `fault list` shows it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RuleView {
    pub id: u32,
    pub spec: String,
    pub seen: u64,
    pub fired: u64,
    pub spent: bool,
}

/// The rules in force. Every hook is a short scan of a handful of rules.
#[derive(Debug, Default)]
pub struct FaultPlan {
    rules: Vec<Rule>,
    next_id: u32,
}

/// A host should not need more rules than this; a plan stays a short scan.
pub const MAX_RULES: usize = 64;

impl FaultPlan {
    /// Adds a rule; returns its id, or `None` when the plan is full.
    pub fn add(&mut self, spec: FaultSpec) -> Option<u32> {
        if self.rules.len() >= MAX_RULES {
            return None;
        }
        self.next_id += 1;
        let seed = match spec.trigger {
            Trigger::Probability { seed, .. } => seed,
            _ => 0,
        };
        self.rules.push(Rule {
            id: self.next_id,
            spec,
            seen: 0,
            fired: 0,
            // xorshift must not start at 0; mixing keeps nearby seeds apart.
            rng: (seed ^ 0x9e37_79b9_7f4a_7c15).max(1),
        });
        Some(self.next_id)
    }

    /// Removes rule `id` (all rules if `None`); returns how many went.
    pub fn clear(&mut self, id: Option<u32>) -> usize {
        let before = self.rules.len();
        self.rules.retain(|r| id.is_some_and(|id| r.id != id));
        before - self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn list(&self) -> Vec<RuleView> {
        self.rules
            .iter()
            .map(|r| RuleView {
                id: r.id,
                spec: r.spec.to_string(),
                seen: r.seen,
                fired: r.fired,
                spent: r.spent(),
            })
            .collect()
    }

    /// The first live rule of `function` for which `pick` says the occasion matches, after
    /// counting the occasion; the rule's result if it fires.
    fn first<T>(
        &mut self,
        function: &str,
        mut pick: impl FnMut(&FaultKind) -> Option<T>,
    ) -> Option<(T, &Rule)> {
        for rule in self.rules.iter_mut() {
            if rule.spent() || !rule.spec.applies_to(function) {
                continue;
            }
            let Some(value) = pick(&rule.spec.kind) else {
                continue;
            };
            if rule.occasion() {
                return Some((value, rule));
            }
        }
        None
    }

    /// A command `function` issued: the return code to fail it with, if a rule fires.
    /// `owned_dmbs` is what the function owns now (for `dmb-limit`).
    pub fn command(&mut self, function: &str, op: u32, owned_dmbs: usize) -> Option<(u16, Fired)> {
        let (ret, rule) = self.first(function, |kind| match *kind {
            FaultKind::Command { opcode, ret } if opcode == op => Some(ret),
            FaultKind::DmbLimit { max, ret } if op == opcode::REG_DMB && owned_dmbs >= max => {
                Some(ret)
            }
            _ => None,
        })?;
        let name = opcode_name(op).unwrap_or("?").to_ascii_uppercase();
        Some((
            ret,
            rule.fired(format!("{name} failed with ret {ret:#06x}")),
        ))
    }

    /// A data move by `function` to `token`, with or without the signal flag: whether a
    /// rule rejects it.
    pub fn reject_move(&mut self, function: &str, token: u64, signal: bool) -> Option<Fired> {
        let ((), rule) = self.first(function, |kind| match *kind {
            FaultKind::RejectMove {
                token: t,
                signal: s,
            } if t.is_none_or(|t| t == token) && s.is_none_or(|s| s == signal) => Some(()),
            _ => None,
        })?;
        Some(rule.fired(format!("move to token {token:#x} rejected")))
    }

    /// A data move by `function`: how long to hold it first, if a rule fires.
    pub fn move_delay(&mut self, function: &str) -> Option<(Duration, Fired)> {
        let (delay, rule) = self.first(function, |kind| match *kind {
            FaultKind::DelayMove(d) => Some(d),
            _ => None,
        })?;
        let detail = format!("move delayed by {} us", delay.as_micros());
        Some((delay, rule.fired(detail)))
    }

    /// The interrupt a signalling move raises at `function`.
    pub fn irq(&mut self, function: &str, token: u64) -> Option<IrqFault> {
        let (delay, rule) = self.first(function, |kind| match *kind {
            FaultKind::DropIrq => Some(None),
            FaultKind::DelayIrq(d) => Some(Some(d)),
            _ => None,
        })?;
        Some(match delay {
            None => IrqFault::Drop(rule.fired(format!("interrupt for token {token:#x} dropped"))),
            Some(d) => {
                let detail = format!(
                    "interrupt for token {token:#x} delayed by {} us",
                    d.as_micros()
                );
                IrqFault::Delay(d, rule.fired(detail))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> FaultSpec {
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

    #[test]
    fn next_fires_n_times_then_the_rule_is_spent() {
        let mut plan = FaultPlan::default();
        plan.add(spec("cmd=reg_dmb@ism1,rc=6,next=2"));
        assert!(
            plan.command("ism0", opcode::REG_DMB, 0).is_none(),
            "other function"
        );
        assert!(
            plan.command("ism1", opcode::QUERY_RGID, 0).is_none(),
            "other opcode"
        );
        let (ret, fired) = plan.command("ism1", opcode::REG_DMB, 0).unwrap();
        assert_eq!(ret, 6);
        assert_eq!(fired.detail, "REG_DMB failed with ret 0x0006");
        assert!(plan.command("ism1", opcode::REG_DMB, 0).is_some());
        assert!(plan.command("ism1", opcode::REG_DMB, 0).is_none());
        let view = &plan.list()[0];
        assert_eq!((view.seen, view.fired, view.spent), (2, 2, true));
    }

    #[test]
    fn every_k_fires_on_the_kth_occasion() {
        let mut plan = FaultPlan::default();
        plan.add(spec("move,every=3"));
        let fired: Vec<bool> = (0..9)
            .map(|_| plan.reject_move("ism0", 1 << 32, false).is_some())
            .collect();
        assert_eq!(
            fired,
            [false, false, true, false, false, true, false, false, true]
        );
    }

    #[test]
    fn probability_is_repeatable_for_a_seed_and_near_p() {
        let run = |seed: u64| {
            let mut plan = FaultPlan::default();
            plan.add(spec(&format!("irq-drop,prob=0.25,seed={seed}")));
            (0..4000)
                .map(|_| plan.irq("ism0", 1 << 32).is_some())
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7), "same seed, same faults");
        assert_ne!(a, run(8), "another seed, other faults");
        let hits = a.iter().filter(|&&x| x).count();
        assert!((800..1200).contains(&hits), "{hits} of 4000 at p = 0.25");
    }

    #[test]
    fn token_moves_and_limits_match_only_their_occasions() {
        let mut plan = FaultPlan::default();
        plan.add(spec("move@ism0,token=0x200000000"));
        plan.add(spec("dmb-limit@ism1,max=2"));
        assert!(plan.reject_move("ism0", 1 << 32, true).is_none());
        assert!(plan.reject_move("ism0", 2 << 32, true).is_some());
        assert!(plan.command("ism1", opcode::REG_DMB, 1).is_none());
        assert_eq!(plan.command("ism1", opcode::REG_DMB, 2).unwrap().0, 0x0006);
        assert!(plan.command("ism1", opcode::UNREG_DMB, 5).is_none());
        // With signal=: only moves with (yes) or without (no) the signal flag.
        let mut plan = FaultPlan::default();
        plan.add(spec("move@ism0,signal=no"));
        assert!(plan.reject_move("ism0", 1 << 32, true).is_none());
        assert!(plan.reject_move("ism0", 1 << 32, false).is_some());
        assert!(FaultSpec::parse("move,signal=maybe").is_err());
    }

    #[test]
    fn clear_removes_one_rule_or_all() {
        let mut plan = FaultPlan::default();
        let a = plan.add(spec("irq-drop")).unwrap();
        plan.add(spec("move"));
        assert_eq!(plan.clear(Some(a)), 1);
        assert_eq!(plan.list().len(), 1);
        assert_eq!(plan.clear(Some(a)), 0);
        assert_eq!(plan.clear(None), 1);
        assert!(plan.is_empty());
        for _ in 0..MAX_RULES {
            assert!(plan.add(spec("irq-drop")).is_some());
        }
        assert!(plan.add(spec("irq-drop")).is_none(), "the plan is full");
    }
}
