//! The one table of fault kinds, as `ism/opcodes.rs` is for commands: each kind's name in
//! the grammar (docs/faults.md), how the usage shows it, the keys it takes besides the
//! trigger's, and whether it is a rule (with a trigger) or a one-time action. The parser,
//! the canonical text and the errors that list kinds or keys all read it; adding a kind is
//! a row here, its `FaultKind` variant and its arm in the parser.

/// The keys that choose which occasions a rule fires on (every rule takes them).
pub const TRIGGER_KEYS: &[&str] = &["next", "every", "prob", "seed"];

/// Builds [`Kind`] from the table. A row is
/// `Variant = "name", "usage", [own keys], rule;`.
macro_rules! kinds {
    ($($variant:ident = $name:literal, $usage:literal, [$($key:literal),*], $rule:literal;)*) => {
        /// A kind of fault the grammar knows.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Kind {
            $($variant,)*
        }

        impl Kind {
            /// Every kind, in the table's order.
            pub const ALL: &[Kind] = &[$(Kind::$variant,)*];

            /// The kind's name in a spec.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Kind::$variant => $name,)*
                }
            }

            /// How the usage and the errors show it (`cmd=OPCODE`).
            pub const fn usage(self) -> &'static str {
                match self {
                    $(Kind::$variant => $usage,)*
                }
            }

            /// The keys it takes besides the trigger's.
            pub const fn own_keys(self) -> &'static [&'static str] {
                match self {
                    $(Kind::$variant => &[$($key),*],)*
                }
            }

            /// A rule (it takes the trigger keys), or a one-time action.
            pub const fn is_rule(self) -> bool {
                match self {
                    $(Kind::$variant => $rule,)*
                }
            }
        }
    };
}

kinds! {
    Cmd         = "cmd",          "cmd=OPCODE",   ["rc"],            true;
    RgidUnknown = "rgid-unknown", "rgid-unknown", [],                true;
    DmbLimit    = "dmb-limit",    "dmb-limit",    ["max", "rc"],     true;
    Move        = "move",         "move",         ["token", "signal"], true;
    MoveDelay   = "move-delay",   "move-delay",   ["us"],            true;
    IrqDrop     = "irq-drop",     "irq-drop",     [],                true;
    IrqDelay    = "irq-delay",    "irq-delay",    ["us"],            true;
    GidDisabled = "gid-disabled", "gid-disabled", ["peer"],          false;
    RegIeqEvent = "reg-ieq-event", "reg-ieq-event", ["peer"],        true;
}

impl Kind {
    /// The kind with this name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// Every key it takes, for the error that names a wrong one: `rc, next, every, ...`.
    pub fn keys(self) -> String {
        let trigger = if self.is_rule() { TRIGGER_KEYS } else { &[] };
        [self.own_keys(), trigger].concat().join(", ")
    }

    /// Every kind as the usage shows them: `cmd=OPCODE, rgid-unknown, ...`.
    pub fn usage_list() -> String {
        let all: Vec<&str> = Self::ALL.iter().map(|k| k.usage()).collect();
        all.join(", ")
    }
}

/// Whether `key` is a key of the grammar, whatever kind it belongs to.
pub fn is_key(key: &str) -> bool {
    TRIGGER_KEYS.contains(&key) || Kind::ALL.iter().any(|k| k.own_keys().contains(&key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_lists_its_keys_then_the_trigger_s() {
        assert_eq!(Kind::Cmd.keys(), "rc, next, every, prob, seed");
        assert_eq!(Kind::DmbLimit.keys(), "max, rc, next, every, prob, seed");
        assert_eq!(Kind::IrqDrop.keys(), "next, every, prob, seed");
        assert_eq!(Kind::GidDisabled.keys(), "peer");
        assert_eq!(Kind::RegIeqEvent.keys(), "peer, next, every, prob, seed");
        assert_eq!(
            Kind::usage_list(),
            "cmd=OPCODE, rgid-unknown, dmb-limit, move, move-delay, irq-drop, irq-delay, gid-disabled, reg-ieq-event"
        );
    }

    #[test]
    fn names_read_back_and_keys_are_known() {
        for &kind in Kind::ALL {
            assert_eq!(Kind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(Kind::from_name("frobnicate"), None);
        assert!(is_key("signal") && is_key("seed"));
        assert!(!is_key("nxt"));
    }
}
