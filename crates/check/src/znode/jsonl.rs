//! Znode and lock histories as JSON lines, the format `quorumkv check
//! --model znode` reads (tests/zk/kazoo_jepsen.py writes it from kazoo).
//!
//! One object per operation, after it completed:
//!
//! ```text
//! {"f":"open","session":7,"invoke":10,"complete":20,"type":"ok"}
//! {"f":"create","session":7,"path":"/q/n-","data":"x","sequential":true,"ephemeral":false,
//!  "invoke":30,"complete":41,"type":"ok","value":"/q/n-0000000003"}
//! {"f":"set","session":7,"path":"/a","data":"y","version":null,"invoke":50,"complete":null,"type":"info"}
//! {"f":"get","session":7,"path":"/a","invoke":60,"complete":70,"type":"fail","error":"NoNode"}
//! {"f":"hold","lock":"/lock","process":2,"token":3,"acquired":80,"released":95,"expired":false}
//! ```
//!
//! `f` is open, close, create, delete, set, get (`value`: `[data,
//! version]`), exists (`value`: the version or null), children (`value`:
//! the sorted names) or hold. `type` is ok (answered), fail (answered
//! with ZooKeeper's `error`: NoNode, NodeExists, BadVersion, NotEmpty,
//! NoChildrenForEphemerals, SessionExpired) or info (no answer: the
//! effect may or may not have happened; `complete` is then ignored). A
//! read without an answer constrains nothing and is skipped. Times are
//! integers (ns or µs, one unit per file). A `hold` is one lock holding:
//! its fencing token, from acquire's return to release's call (`released`
//! null: never released), `expired` when its holder saw its session end.
//! `session` is the id the server gave the session, which is never 0: a
//! 0 (a recorder that did not know the session) is refused.

use super::{check_lock, Holding, LockViolation, ZnodeOp};
use crate::SpecOp;
use quorumkv_core::znode::ZkError;
use serde_json::Value;
use std::collections::BTreeMap;

/// One lock holding read from a history, with whether its holder saw its
/// session expire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    pub holding: Holding,
    pub expired: bool,
}

/// A znode history: the operations for the model, the holdings per lock.
#[derive(Debug, Default)]
pub struct ZnodeHistory {
    pub ops: Vec<SpecOp<ZnodeOp>>,
    pub locks: BTreeMap<String, Vec<Hold>>,
}

const OPS: [&str; 9] = [
    "open", "close", "create", "delete", "set", "get", "exists", "children", "hold",
];

/// Whether `text`'s first line reads as a znode history.
pub fn looks_like(text: &str) -> bool {
    let first = text.lines().map(str::trim).find(|l| !l.is_empty());
    let Some(Ok(Value::Object(m))) = first.map(serde_json::from_str::<Value>) else {
        return false;
    };
    m.get("f")
        .and_then(Value::as_str)
        .is_some_and(|f| OPS.contains(&f))
        && (m.contains_key("session") || m.contains_key("lock"))
}

/// Parse a znode history; errors name the line.
pub fn parse(text: &str) -> Result<ZnodeHistory, String> {
    let mut h = ZnodeHistory::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        parse_line(&v, &mut h).map_err(|e| format!("line {}: {e}", i + 1))?;
    }
    if h.ops.is_empty() && h.locks.is_empty() {
        return Err("no operations".into());
    }
    Ok(h)
}

fn field<'a>(v: &'a Value, k: &str) -> Result<&'a Value, String> {
    v.get(k).ok_or_else(|| format!("no field {k:?}"))
}
fn num(v: &Value, k: &str) -> Result<u64, String> {
    field(v, k)?
        .as_u64()
        .ok_or_else(|| format!("{k:?} is not a non-negative integer"))
}
fn opt_num(v: &Value, k: &str) -> Result<Option<u64>, String> {
    match v.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => num(v, k).map(Some),
    }
}
fn string(v: &Value, k: &str) -> Result<String, String> {
    field(v, k)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{k:?} is not a string"))
}
fn flag(v: &Value, k: &str) -> bool {
    v.get(k).and_then(Value::as_bool).unwrap_or(false)
}
fn version(v: &Value) -> Result<Option<u32>, String> {
    opt_num(v, "version")?
        .map(|n| u32::try_from(n).map_err(|_| "version out of range".to_string()))
        .transpose()
}

/// ZooKeeper's name of an error (as its Java and Python clients spell it).
fn zk_error(name: &str) -> Result<ZkError, String> {
    Ok(
        match name.trim_end_matches("Error").trim_end_matches("Exception") {
            "NoNode" => ZkError::NoNode,
            "NodeExists" => ZkError::NodeExists,
            "BadVersion" => ZkError::BadVersion,
            "NotEmpty" => ZkError::NotEmpty,
            "NoChildrenForEphemerals" => ZkError::NoChildrenForEphemerals,
            "SessionExpired" => ZkError::SessionExpired,
            other => return Err(format!("unknown ZooKeeper error {other:?}")),
        },
    )
}

/// The outcome a line reports: `Some(Ok(value))` answered, `Some(Err)`
/// answered with an error, `None` unknown.
type Answer<'a> = Option<Result<&'a Value, ZkError>>;

fn answer(v: &Value) -> Result<Answer<'_>, String> {
    match string(v, "type")?.as_str() {
        "ok" => Ok(Some(Ok(v.get("value").unwrap_or(&Value::Null)))),
        "fail" => Ok(Some(Err(zk_error(&string(v, "error")?)?))),
        "info" => Ok(None),
        t => Err(format!("type {t:?} is not ok, fail or info")),
    }
}

fn parse_line(v: &Value, h: &mut ZnodeHistory) -> Result<(), String> {
    let f = string(v, "f")?;
    if f == "hold" {
        let holding = Holding {
            client: num(v, "process")?,
            token: num(v, "token")?,
            acquired: num(v, "acquired")?,
            released: opt_num(v, "released")?,
        };
        let hold = Hold {
            holding,
            expired: flag(v, "expired"),
        };
        h.locks.entry(string(v, "lock")?).or_default().push(hold);
        return Ok(());
    }
    let call = num(v, "invoke")?;
    let answer = answer(v)?;
    let ret = match answer {
        Some(_) => Some(num(v, "complete")?.max(call)),
        None => None,
    };
    if let Some(op) = znode_op(&f, v, answer)? {
        h.ops.push(SpecOp { call, ret, op });
    }
    Ok(())
}

/// The model's operation for line `v` (`None`: a read with no answer).
fn znode_op(f: &str, v: &Value, a: Answer<'_>) -> Result<Option<ZnodeOp>, String> {
    // No ZooKeeper session has id 0: a 0 is a recorder that did not know
    // the session (kazoo's `client_id` while disconnected), which the
    // model would take for a session never opened.
    let session = || match num(v, "session")? {
        0 => Err("\"session\" is 0, no session's id: the recorder did not know it".to_string()),
        s => Ok(s),
    };
    let path = || string(v, "path");
    let bad = |what: &str| format!("{f}: \"value\" is not {what}");
    Ok(Some(match f {
        "open" => ZnodeOp::OpenSession {
            session: session()?,
        },
        "close" => ZnodeOp::CloseSession {
            session: session()?,
        },
        "create" => ZnodeOp::Create {
            path: path()?,
            data: string(v, "data")?,
            ephemeral: flag(v, "ephemeral"),
            sequential: flag(v, "sequential"),
            session: session()?,
            result: map(a, |x| x.as_str().map(str::to_string).ok_or(bad("a path")))?,
        },
        "delete" => ZnodeOp::Delete {
            path: path()?,
            version: version(v)?,
            session: opt_num(v, "session")?.unwrap_or(0),
            result: map(a, |_| Ok(()))?,
        },
        "set" => ZnodeOp::SetData {
            path: path()?,
            data: string(v, "data")?,
            version: version(v)?,
            session: opt_num(v, "session")?.unwrap_or(0),
            result: map(a, |x| as_u32(x).ok_or(bad("a version")))?,
        },
        _ => {
            let Some(a) = a else { return Ok(None) };
            return read_op(f, path()?, a).map(Some);
        }
    }))
}

fn as_u32(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

fn map<T>(
    a: Answer<'_>,
    f: impl FnOnce(&Value) -> Result<T, String>,
) -> Result<Option<Result<T, ZkError>>, String> {
    Ok(match a {
        None => None,
        Some(Err(e)) => Some(Err(e)),
        Some(Ok(v)) => Some(Ok(f(v)?)),
    })
}

/// An answered read.
fn read_op(f: &str, path: String, a: Result<&Value, ZkError>) -> Result<ZnodeOp, String> {
    let bad = |what: &str| format!("{f}: \"value\" is not {what}");
    Ok(match f {
        "get" => ZnodeOp::GetData {
            path,
            result: match a {
                Err(e) => Err(e),
                Ok(Value::Array(dv)) if dv.len() == 2 => {
                    let d = dv[0].as_str().ok_or(bad("[data, version]"))?;
                    Ok((d.to_string(), as_u32(&dv[1]).ok_or(bad("[data, version]"))?))
                }
                Ok(_) => return Err(bad("[data, version]")),
            },
        },
        "exists" => ZnodeOp::Exists {
            path,
            result: match a {
                Ok(Value::Null) | Err(ZkError::NoNode) => None,
                Ok(x) => Some(as_u32(x).ok_or(bad("a version or null"))?),
                Err(e) => return Err(format!("exists answered {e}")),
            },
        },
        "children" => ZnodeOp::Children {
            path,
            result: match a {
                Err(e) => Err(e),
                Ok(Value::Array(names)) => {
                    let mut n: Vec<String> = (names.iter())
                        .map(|x| x.as_str().map(str::to_string).ok_or(bad("names")))
                        .collect::<Result<_, _>>()?;
                    n.sort();
                    Ok(n)
                }
                Ok(_) => return Err(bad("a list of names")),
            },
        },
        other => {
            return Err(format!(
                "unknown operation {other:?} (f: {})",
                OPS.join(", ")
            ))
        }
    })
}

/// One lock's violations that break its promise: tokens shared or out of
/// order, and two holders at once while neither saw its session expire.
/// Also how many overlaps a session expiry explains (a session lock
/// allows them: the expired holder's token is the smaller one).
pub fn lock_violations(holds: &[Hold]) -> (Vec<LockViolation>, usize) {
    let holdings: Vec<Holding> = holds.iter().map(|h| h.holding).collect();
    let expired = |a: &Holding| holds.iter().any(|h| h.holding == *a && h.expired);
    let (mut broken, mut excused) = (Vec::new(), 0);
    for v in check_lock(&holdings, true) {
        match &v {
            LockViolation::Overlap(a, b) if expired(a) || expired(b) => excused += 1,
            // A stale grant answered after its session expired carries an
            // older token: fencing refuses it.
            LockViolation::TokenOrder(_, b) if expired(b) => {}
            _ => broken.push(v),
        }
    }
    (broken, excused)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"f":"open","session":1,"invoke":0,"complete":1,"type":"ok"}
{"f":"create","session":1,"path":"/a","data":"x","invoke":2,"complete":3,"type":"ok","value":"/a"}
{"f":"set","session":1,"path":"/a","data":"y","invoke":4,"complete":null,"type":"info"}
{"f":"get","session":1,"path":"/a","invoke":5,"complete":6,"type":"ok","value":["y",1]}
{"f":"exists","session":1,"path":"/b","invoke":7,"complete":8,"type":"ok","value":null}
{"f":"children","session":1,"path":"/","invoke":9,"complete":10,"type":"ok","value":["a"]}
{"f":"get","session":1,"path":"/b","invoke":11,"complete":12,"type":"fail","error":"NoNodeError"}
{"f":"hold","lock":"/l","process":1,"token":1,"acquired":13,"released":14}
{"f":"hold","lock":"/l","process":2,"token":2,"acquired":15,"released":16}
"#;

    #[test]
    fn a_history_reads_and_checks() {
        assert!(looks_like(GOOD));
        let h = parse(GOOD).unwrap();
        assert_eq!(h.ops.len(), 7);
        assert_eq!(h.ops[2].ret, None);
        let (v, _) = super::super::check_history(h.ops, std::time::Duration::from_secs(5));
        assert_eq!(v, crate::Verdict::Linearizable);
        assert_eq!(lock_violations(&h.locks["/l"]), (vec![], 0));
    }

    #[test]
    fn a_read_of_data_never_written_and_overlapping_holders_are_refused() {
        let bad = GOOD.replace(r#"["y",1]"#, r#"["z",1]"#);
        let h = parse(&bad).unwrap();
        let (v, _) = super::super::check_history(h.ops, std::time::Duration::from_secs(5));
        assert_eq!(v, crate::Verdict::NotLinearizable);
        let bad = GOOD.replace(r#""released":14"#, r#""released":20"#);
        let (broken, _) = lock_violations(&parse(&bad).unwrap().locks["/l"]);
        assert!(
            matches!(broken[..], [LockViolation::Overlap(..)]),
            "{broken:?}"
        );
        let excused = bad.replace(r#""released":20}"#, r#""released":20,"expired":true}"#);
        assert_eq!(lock_violations(&parse(&excused).unwrap().locks["/l"]).1, 1);
    }

    /// kazoo_jepsen.py once wrote session 0 for an ephemeral create made
    /// while kazoo was reconnecting (a replica killed): the model took it
    /// for a create by a session never opened, which cannot be answered
    /// NodeExists, and refused the whole history.
    #[test]
    fn a_session_of_0_is_refused_as_unknown() {
        let eph = r#"{"f":"create","session":1,"path":"/a","data":"z","ephemeral":true,"invoke":5,"complete":6,"type":"fail","error":"NodeExistsError"}"#;
        let h = parse(&format!("{GOOD}{eph}\n")).unwrap();
        let (v, _) = super::super::check_history(h.ops, std::time::Duration::from_secs(5));
        assert_eq!(v, crate::Verdict::Linearizable);
        let e = parse(&format!(
            "{GOOD}{}\n",
            eph.replace(r#""session":1"#, r#""session":0"#)
        ))
        .unwrap_err();
        assert!(e.starts_with("line 10: \"session\" is 0"), "{e}");
    }

    /// A delete's `session` is read: under a session-bound id whose session
    /// was closed, an answered delete of another client's node is refused;
    /// under an unbound id (or with no session recorded) it stands.
    #[test]
    fn a_deletes_session_is_read_and_a_gone_one_deletes_nothing() {
        let bound = (1u64 << 63) | quorumkv_core::znode::tree::SESSION_BOUND | 7;
        let history = |session: Option<u64>| {
            let s = session.map_or(String::new(), |s| format!(r#""session":{s},"#));
            let id = session.unwrap_or(1 << 63 | 7);
            format!(
                r#"{{"f":"open","session":{id},"invoke":0,"complete":1,"type":"ok"}}
{{"f":"close","session":{id},"invoke":2,"complete":3,"type":"ok"}}
{{"f":"create","session":5,"path":"/a","data":"x","invoke":4,"complete":5,"type":"ok","value":"/a"}}
{{"f":"delete",{s}"path":"/a","version":null,"invoke":6,"complete":7,"type":"ok"}}
"#
            )
        };
        let verdict = |text: String| {
            let h = parse(&text).unwrap();
            super::super::check_history(h.ops, std::time::Duration::from_secs(5)).0
        };
        assert_ne!(verdict(history(Some(bound))), crate::Verdict::Linearizable);
        assert_eq!(
            verdict(history(Some(1 << 63 | 7))),
            crate::Verdict::Linearizable
        );
        assert_eq!(verdict(history(None)), crate::Verdict::Linearizable);
        let bad = history(Some(1)).replace(r#""session":1,"path""#, r#""session":"x","path""#);
        let e = parse(&bad).unwrap_err();
        assert!(e.starts_with("line 4: \"session\" is not"), "{e}");
    }

    /// The history kept from the CI run the checker refused: its one line
    /// with session 0 is named; with the session the recording client held
    /// throughout (its other 317 operations name it) the history is
    /// linearizable.
    #[test]
    fn the_kept_kazoo_history_is_linearizable_with_its_session_known() {
        let kept = include_str!("../../tests/data/znode/kazoo-refused-1.jsonl");
        let e = parse(kept).unwrap_err();
        assert!(e.starts_with("line 1664: \"session\" is 0"), "{e}");
        let known = kept.replace(r#""session":0,"#, r#""session":12235599651992632826,"#);
        let h = parse(&known).unwrap();
        // 4 183 lines: 844 holds, 3 reads without an answer.
        assert_eq!(h.ops.len(), 3336);
        assert_eq!(h.locks["/lock"].len(), 844);
        let (v, _) = super::super::check_history(h.ops, std::time::Duration::from_secs(60));
        assert_eq!(v, crate::Verdict::Linearizable);
    }

    #[test]
    fn bad_lines_are_named() {
        let e = parse("{\"f\":\"get\",\"session\":1}\n").unwrap_err();
        assert!(e.starts_with("line 1: no field \"invoke\""), "{e}");
        let e = parse(&GOOD.replace("NoNodeError", "Weird")).unwrap_err();
        assert!(e.contains("unknown ZooKeeper error"), "{e}");
    }
}
