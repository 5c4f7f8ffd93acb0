//! Fault injection: rules that make the device fail on purpose, so that SMC-D's error
//! paths (a failed REG_DMB, a move rejected mid-stream, a late or lost interrupt, a peer
//! reported gone) can be driven from the host, exactly and repeatably.
//!
//! A rule is a [`FaultSpec`] (spec.rs) in a small text grammar (docs/faults.md):
//!
//! ```text
//! SPEC := WHAT ['@' FUNCTION] {',' KEY '=' VALUE}
//! ```
//!
//! The kinds (WHAT) and the keys each takes are one table, [`Kind`] (kinds.rs).
//!
//! e.g. `cmd=reg_dmb@ism1,rc=0x6,next=1`, `move@ism0,every=50`, `irq-delay@ism1,us=20000`.
//! Rules live in a [`FaultPlan`] (plan.rs), which the fabric asks at each hook; a rule that fires
//! says what it did in a [`Fired`], which the fabric logs and reports as a
//! `fault_injected` event. Faults are set by the host (the command line, the control
//! socket), never by a guest.

mod kinds;
mod plan;
mod spec;

pub use kinds::Kind;
pub use plan::{FaultPlan, Fired, IrqFault, RuleView, MAX_RULES};
pub use spec::{FaultKind, FaultSpec, Peer, Trigger, MAX_DELAY};

/// Why a fault spec was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FaultSpecError {
    #[error("empty fault spec")]
    Empty,
    #[error("unknown fault {0:?} ({kinds})", kinds = Kind::usage_list())]
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

/// The keys a fault kind takes, for the error that names a wrong one.
fn valid_keys(kind: &str) -> String {
    Kind::from_name(kind).map_or_else(String::new, Kind::keys)
}
