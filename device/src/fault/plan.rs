//! The rules in force and their matching: which rule fires on which occasion.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{FaultKind, FaultSpec, Peer, Trigger};
use crate::ism::opcodes::Opcode;

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

/// One rule as `fault list` shows it, and as the control API carries it (one type for
/// both). The fields are in alphabetical order, as `fault list --json` has always
/// printed them (docs/faults.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleView {
    /// Times it fired.
    pub fired: u64,
    pub id: u32,
    /// Times its hook was reached with a matching occasion.
    pub seen: u64,
    /// Its canonical text (`rc` filled in, for example).
    pub spec: String,
    /// A `next=N` rule that has fired N times: it fires no more.
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
            FaultKind::Command { opcode, ret } if opcode.code() == op => Some(ret),
            FaultKind::DmbLimit { max, ret }
                if op == Opcode::RegDmb.code() && owned_dmbs >= max =>
            {
                Some(ret)
            }
            _ => None,
        })?;
        let name = Opcode::from_code(op)
            .map_or("?", Opcode::name)
            .to_ascii_uppercase();
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

    /// `function` registered its event queue: the peer to queue a GID-disabled event
    /// for at once, if a rule fires.
    pub fn reg_ieq_event(&mut self, function: &str) -> Option<(Peer, Fired)> {
        let (peer, rule) = self.first(function, |kind| match kind {
            FaultKind::RegIeqEvent(peer) => Some(peer.clone()),
            _ => None,
        })?;
        let detail = format!("GID-disabled event for {peer} as the event queue was registered");
        Some((peer, rule.fired(detail)))
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
    use super::super::spec::tests::spec;
    use super::*;

    #[test]
    fn next_fires_n_times_then_the_rule_is_spent() {
        let mut plan = FaultPlan::default();
        plan.add(spec("cmd=reg_dmb@ism1,rc=6,next=2"));
        assert!(
            plan.command("ism0", Opcode::RegDmb.code(), 0).is_none(),
            "other function"
        );
        assert!(
            plan.command("ism1", Opcode::QueryRgid.code(), 0).is_none(),
            "other opcode"
        );
        let (ret, fired) = plan.command("ism1", Opcode::RegDmb.code(), 0).unwrap();
        assert_eq!(ret, 6);
        assert_eq!(fired.detail, "REG_DMB failed with ret 0x0006");
        assert!(plan.command("ism1", Opcode::RegDmb.code(), 0).is_some());
        assert!(plan.command("ism1", Opcode::RegDmb.code(), 0).is_none());
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
        assert!(plan.command("ism1", Opcode::RegDmb.code(), 1).is_none());
        assert_eq!(
            plan.command("ism1", Opcode::RegDmb.code(), 2).unwrap().0,
            0x0006
        );
        assert!(plan.command("ism1", Opcode::UnregDmb.code(), 5).is_none());
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
