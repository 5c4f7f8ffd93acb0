//! The control socket's wire format: the one definition of what a client asks and what
//! the emulator answers. The server (`control::server`), the CLI (`observe`, `fault`) and
//! the tests all use these types; docs/running.md ("The control socket") describes them
//! for clients in other languages.
//!
//! A request is one line of JSON, an [`Envelope`]: the protocol version and a
//! [`Request`], e.g. `{"version":1,"request":"fault_add","spec":"move@ism0,next=1"}`.
//! Compatibility, both ways a client may be older than the emulator:
//! - a JSON request without `version` is read as version 1 (the first to have one);
//! - the plain lines of the protocol before it (`snapshot`, `follow`, `fault add SPEC`,
//!   `fault list`, `fault clear [ID]`) are read as the same requests.
//!
//! A request of another version is refused with a [`Refusal`] whose reason is
//! [`Reason::Version`] and which names the version this emulator speaks: no guessing at
//! what a newer client meant.
//!
//! The answer is one line of JSON, an [`Answer`]: a [`Snapshot`] (its shape is
//! docs/observer.md's), `{"ok":...}` for a fault request, or `{"error":...}`. `follow` is
//! answered with the event stream instead (one event per line, docs/observer.md), or with
//! one refusal.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::fault::RuleView;
use crate::observer::report::Snapshot;

/// The protocol version this emulator speaks (and its clients send).
pub const VERSION: u32 = 1;

fn first_version() -> u32 {
    1
}

/// One request line: a [`Request`] and the version of the protocol it is written in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Absent in a client older than the field: read as 1.
    #[serde(default = "first_version")]
    pub version: u32,
    #[serde(flatten)]
    pub request: Request,
}

/// What a client may ask.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// The whole fabric once: answered with a [`Snapshot`], then the connection closes.
    Snapshot,
    /// The event stream, live, until either side goes away.
    Follow,
    /// Put a fault rule in force, or carry out an action (docs/faults.md).
    FaultAdd { spec: String },
    /// The rules in force.
    FaultList,
    /// Remove rule `id`, or every rule.
    FaultClear {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u32>,
    },
}

impl Envelope {
    /// `request` in this emulator's version of the protocol.
    pub fn new(request: Request) -> Self {
        Self {
            version: VERSION,
            request,
        }
    }

    /// The request line, without its newline.
    pub fn to_line(&self) -> String {
        // Serializing a struct of strings and numbers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a request line (JSON, or a line of the protocol before JSON), checking its
    /// version.
    pub fn parse(line: &str) -> Result<Request, Refusal> {
        let line = line.trim();
        if !line.starts_with('{') {
            return Request::from_plain_line(line);
        }
        let not_a_request =
            |e: serde_json::Error| Refusal::new(Reason::Request, format!("not a request: {e}"));
        // serde would take a variant's number for its name (`"request":1` for `follow`):
        // the name must be a string.
        serde_json::from_str::<RequestName>(line).map_err(not_a_request)?;
        let envelope: Envelope = serde_json::from_str(line).map_err(not_a_request)?;
        if envelope.version != VERSION {
            return Err(Refusal {
                speaks: Some(VERSION),
                ..Refusal::new(
                    Reason::Version,
                    format!(
                        "protocol version {} is not spoken here (this emulator speaks {VERSION})",
                        envelope.version
                    ),
                )
            });
        }
        Ok(envelope.request)
    }
}

/// Only the name of a request, to check that it is a string.
#[derive(Deserialize)]
#[allow(dead_code)] // Only serde builds it, only to be checked.
struct RequestName {
    request: String,
}

impl Request {
    /// A line of the protocol before JSON: `snapshot`, `follow`, `fault add SPEC`,
    /// `fault list`, `fault clear [ID]`.
    fn from_plain_line(line: &str) -> Result<Request, Refusal> {
        let usage = |error: String| Refusal {
            usage: true,
            ..Refusal::new(Reason::Request, error)
        };
        let fault_args = match line {
            "snapshot" => return Ok(Request::Snapshot),
            "follow" => return Ok(Request::Follow),
            "fault" => "",
            _ => match line.strip_prefix("fault ") {
                Some(args) => args.trim(),
                None => {
                    return Err(Refusal::new(
                        Reason::Request,
                        format!("unknown request {line:?}; use snapshot, follow or fault"),
                    ))
                }
            },
        };
        let (verb, rest) = fault_args.split_once(' ').unwrap_or((fault_args, ""));
        let rest = rest.trim();
        match verb {
            "add" => Ok(Request::FaultAdd { spec: rest.into() }),
            "list" => Ok(Request::FaultList),
            "clear" if rest.is_empty() => Ok(Request::FaultClear { id: None }),
            "clear" => match rest.parse() {
                Ok(id) => Ok(Request::FaultClear { id: Some(id) }),
                Err(_) => Err(usage(format!("not a rule id: {rest:?}"))),
            },
            _ => Err(usage(
                "use fault add SPEC, fault list or fault clear [ID]".into(),
            )),
        }
    }
}

/// One answer line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Answer {
    /// A fault request carried out.
    Done(Done),
    Refused(Refusal),
    Snapshot(Box<Snapshot>),
}

/// A fault request carried out: `{"ok":"rule","id":1}` and so on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ok", rename_all = "snake_case")]
pub enum Done {
    /// `fault_add` of a rule: in force from now on, with this id.
    Rule { id: u32 },
    /// `fault_add` of an action: carried out.
    Done,
    /// `fault_list`.
    List { faults: Vec<FaultRule> },
    /// `fault_clear`: how many rules went.
    Cleared { removed: usize },
}

/// One rule in force: the fault plan's own view of it (serde both ways).
pub type FaultRule = RuleView;

/// `fault list --json`'s output: the rules of a `fault_list` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultList {
    pub faults: Vec<FaultRule>,
}

/// A request not carried out: `{"error":"...","usage":true,"reason":"fault"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
// No event of the stream has these fields only: a follower tells a refusal from an event.
#[serde(deny_unknown_fields)]
pub struct Refusal {
    /// What went wrong, for a person.
    pub error: String,
    /// The request itself is wrong (a bad spec, a rule that does not exist): the CLI
    /// exits as for a bad argument. False when the emulator's state is why.
    #[serde(default)]
    pub usage: bool,
    #[serde(default)]
    pub reason: Reason,
    /// With [`Reason::Version`]: the version this emulator speaks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speaks: Option<u32>,
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The line is no request: unknown, malformed, too long or too slow to come.
    #[default]
    Request,
    /// The request's protocol version is not this emulator's.
    Version,
    /// The fault request was refused (its spec, its rule, or the emulator's state).
    Fault,
}

impl Refusal {
    pub fn new(reason: Reason, error: String) -> Self {
        Self {
            error,
            usage: false,
            reason,
            speaks: None,
        }
    }
}

impl Answer {
    /// The answer line, without its newline.
    pub fn to_line(&self) -> String {
        // Snapshots and fault answers are plain data: serializing them cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads an answer line as the `T` a client expects for its request, or as a
    /// refusal. A line that is neither is an error naming what did not fit in `T`.
    pub fn parse_as<T: DeserializeOwned>(
        line: &str,
    ) -> Result<Result<T, Refusal>, serde_json::Error> {
        if let Ok(refusal) = serde_json::from_str::<Refusal>(line) {
            return Ok(Err(refusal));
        }
        serde_json::from_str(line).map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(request: Request) {
        let line = Envelope::new(request.clone()).to_line();
        assert_eq!(Envelope::parse(&line), Ok(request), "{line}");
    }

    #[test]
    fn every_request_round_trips_through_its_line() {
        round_trip(Request::Snapshot);
        round_trip(Request::Follow);
        round_trip(Request::FaultAdd {
            spec: "move@ism0,next=1".into(),
        });
        round_trip(Request::FaultList);
        round_trip(Request::FaultClear { id: None });
        round_trip(Request::FaultClear { id: Some(7) });
    }

    #[test]
    fn requests_have_the_documented_shape() {
        // docs/running.md shows these lines: a change here is a change of protocol.
        let line = |r| Envelope::new(r).to_line();
        assert_eq!(
            line(Request::Snapshot),
            r#"{"version":1,"request":"snapshot"}"#
        );
        assert_eq!(
            line(Request::FaultAdd { spec: "x".into() }),
            r#"{"version":1,"request":"fault_add","spec":"x"}"#
        );
        assert_eq!(
            line(Request::FaultClear { id: Some(2) }),
            r#"{"version":1,"request":"fault_clear","id":2}"#
        );
    }

    #[test]
    fn a_request_without_a_version_is_version_one() {
        assert_eq!(
            Envelope::parse(r#"{"request":"fault_list"}"#),
            Ok(Request::FaultList)
        );
    }

    #[test]
    fn another_version_is_refused_with_the_version_spoken() {
        let refusal = Envelope::parse(r#"{"version":2,"request":"snapshot"}"#).unwrap_err();
        assert_eq!(refusal.reason, Reason::Version);
        assert_eq!(refusal.speaks, Some(VERSION));
        assert!(!refusal.usage);
        // And a client reads it back as such.
        let line = Answer::Refused(refusal.clone()).to_line();
        assert_eq!(Answer::parse_as::<Snapshot>(&line).unwrap(), Err(refusal));
    }

    #[test]
    fn the_plain_lines_of_the_first_protocol_are_still_read() {
        assert_eq!(Envelope::parse("snapshot"), Ok(Request::Snapshot));
        assert_eq!(Envelope::parse("follow\r"), Ok(Request::Follow));
        assert_eq!(
            Envelope::parse("fault add  move@ism0,next=1"),
            Ok(Request::FaultAdd {
                spec: "move@ism0,next=1".into()
            })
        );
        assert_eq!(
            Envelope::parse("fault clear 3"),
            Ok(Request::FaultClear { id: Some(3) })
        );
        assert_eq!(
            Envelope::parse("fault clear"),
            Ok(Request::FaultClear { id: None })
        );
        let bad_id = Envelope::parse("fault clear x").unwrap_err();
        assert!(bad_id.usage && bad_id.error.contains("not a rule id"));
        let unknown = Envelope::parse("hello").unwrap_err();
        assert!(!unknown.usage && unknown.error.contains("unknown request"));
        assert!(Envelope::parse("fault frob").unwrap_err().usage);
    }

    #[test]
    fn malformed_json_is_refused_not_misread() {
        for line in [
            "{",
            r#"{"version":1}"#,
            r#"{"version":1,"request":"reboot"}"#,
            r#"{"version":1,"request":1}"#,
            r#"{"version":1,"request":"fault_clear","id":-1}"#,
        ] {
            let refusal = Envelope::parse(line).unwrap_err();
            assert_eq!(refusal.reason, Reason::Request, "{line}");
        }
    }

    #[test]
    fn fault_answers_round_trip_and_keep_their_shape() {
        let answers = [
            (Done::Rule { id: 3 }, r#"{"ok":"rule","id":3}"#),
            (Done::Done, r#"{"ok":"done"}"#),
            (
                Done::Cleared { removed: 2 },
                r#"{"ok":"cleared","removed":2}"#,
            ),
            (
                Done::List {
                    faults: vec![FaultRule {
                        fired: 4,
                        id: 1,
                        seen: 4,
                        spec: "move@ism0,next=4".into(),
                        spent: true,
                    }],
                },
                r#"{"ok":"list","faults":[{"fired":4,"id":1,"seen":4,"spec":"move@ism0,next=4","spent":true}]}"#,
            ),
        ];
        for (done, line) in answers {
            assert_eq!(Answer::Done(done.clone()).to_line(), line);
            assert_eq!(Answer::parse_as::<Done>(line).unwrap(), Ok(done));
        }
    }

    #[test]
    fn an_event_line_is_no_refusal() {
        // A follower reads the stream's lines as events unless one is a refusal.
        let event = r#"{"time_us":1,"kind":"function_detached","function":"ism0","gid":"0x1","reason":"reset"}"#;
        assert!(serde_json::from_str::<Refusal>(event).is_err());
        let refusal = r#"{"error":"no request line"}"#;
        assert_eq!(
            serde_json::from_str::<Refusal>(refusal).unwrap().reason,
            Reason::Request
        );
    }

    #[test]
    fn a_snapshot_answer_is_the_snapshot_itself() {
        let snap = Snapshot {
            chid: 0x42,
            functions: vec![],
            dmbs: vec![],
        };
        let line = Answer::Snapshot(Box::new(snap.clone())).to_line();
        assert_eq!(line, serde_json::to_string(&snap).unwrap());
        assert_eq!(
            serde_json::from_str::<Answer>(&line).unwrap(),
            Answer::Snapshot(Box::new(snap))
        );
    }
}
