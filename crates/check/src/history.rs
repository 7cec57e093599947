//! The history model: what one client asked, when, and what it was told.
//!
//! A [`History`] is a bag of [`Operation`]s. Each operation has an invocation
//! time and, unless its outcome is unknown, a completion time. Times are
//! nanoseconds on any monotonic clock shared by all clients of one history
//! (the recorder's `Instant` base, the simulator's virtual clock, or a line
//! number for formats that carry no time).
//!
//! Real-time order: `a` precedes `b` iff `a.ret < b.call`. An invocation at the
//! same instant as a completion is concurrent with it.
use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

/// The operation and outcome types live in `quorumkv-core` (shared with the
/// client, the simulator and the bench); re-exported so these paths keep working.
pub use quorumkv_core::op::{Op, Outcome};

/// One invocation and its completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// Logical client (a client issues one operation at a time).
    pub client: u64,
    pub op: Op,
    /// Invocation time, ns.
    pub call: u64,
    /// Completion time, ns; `None` when the outcome is unknown.
    pub ret: Option<u64>,
    pub outcome: Outcome,
}

impl Operation {
    /// `op` by `client`, called at `call` and returned at `ret` (`None`
    /// with an unknown outcome).
    pub fn new(client: u64, op: Op, call: u64, ret: Option<u64>, outcome: Outcome) -> Self {
        Operation {
            client,
            op,
            call,
            ret,
            outcome,
        }
    }
}

/// A whole recorded history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub ops: Vec<Operation>,
}

/// A history file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("line {line}: {msg}")]
    Parse { line: usize, msg: String },
    #[error("no operations found")]
    Empty,
}

impl HistoryError {
    pub(crate) fn at(line: usize, msg: impl Into<String>) -> Self {
        HistoryError::Parse {
            line,
            msg: msg.into(),
        }
    }
}

/// One JSONL line (see the crate README for the schema). Other fields are
/// ignored: a driver may add its own.
#[derive(Serialize, Deserialize)]
struct Line {
    client: u64,
    op: String,
    #[serde(default)]
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    to: Option<String>,
    call: u64,
    #[serde(default)]
    ret: Option<u64>,
    outcome: String,
    /// Value read by a get/read (`null` = absent). Absent for other ops.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    result: Option<Option<String>>,
}

/// Distinguishes a missing `result` field from `"result": null`.
mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    pub fn serialize<S: Serializer>(v: &Option<Option<String>>, s: S) -> Result<S::Ok, S::Error> {
        v.as_ref().expect("skipped when None").serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<String>>, D::Error> {
        Option::<String>::deserialize(d).map(Some)
    }
}

impl Line {
    fn from_op(o: &Operation) -> Line {
        let (value, from, to) = match &o.op {
            Op::Put { value, .. } | Op::Append { value, .. } | Op::Write { value, .. } => {
                (Some(value.clone()), None, None)
            }
            Op::Cas { from, to, .. } => (None, Some(from.clone()), Some(to.clone())),
            _ => (None, None, None),
        };
        let (outcome, result) = match &o.outcome {
            Outcome::Ok(r) if o.op.is_read() => ("ok", Some(r.clone())),
            Outcome::Ok(_) => ("ok", None),
            Outcome::Fail => ("fail", None),
            Outcome::Unknown => ("unknown", None),
        };
        Line {
            client: o.client,
            op: o.op.name().to_string(),
            key: o.op.key().to_string(),
            value,
            from,
            to,
            call: o.call,
            ret: o.ret,
            outcome: outcome.to_string(),
            result,
        }
    }

    fn into_op(self, n: usize) -> Result<Operation, HistoryError> {
        let need = |f: Option<String>, name: &str| {
            f.ok_or_else(|| HistoryError::at(n, format!("{} needs \"{name}\"", self.op)))
        };
        let key = self.key.clone();
        let op = match self.op.as_str() {
            "get" => Op::Get { key },
            "read" => Op::Read { key },
            "delete" => Op::Delete { key },
            "put" => Op::Put {
                key,
                value: need(self.value.clone(), "value")?,
            },
            "append" => Op::Append {
                key,
                value: need(self.value.clone(), "value")?,
            },
            "write" => Op::Write {
                key,
                value: need(self.value.clone(), "value")?,
            },
            "cas" => Op::Cas {
                key,
                from: need(self.from.clone(), "from")?,
                to: need(self.to.clone(), "to")?,
            },
            other => return Err(HistoryError::at(n, format!("unknown op {other:?}"))),
        };
        let outcome = match self.outcome.as_str() {
            "ok" if op.is_read() => match self.result {
                Some(r) => Outcome::Ok(r),
                None => return Err(HistoryError::at(n, "an ok read needs \"result\"")),
            },
            "ok" => Outcome::Ok(None),
            "fail" => Outcome::Fail,
            "unknown" => Outcome::Unknown,
            other => return Err(HistoryError::at(n, format!("unknown outcome {other:?}"))),
        };
        let ret = match (&outcome, self.ret) {
            (Outcome::Unknown, _) => None,
            (_, Some(r)) if r < self.call => {
                return Err(HistoryError::at(n, "ret is before call"));
            }
            (_, Some(r)) => Some(r),
            (_, None) => return Err(HistoryError::at(n, "a completed operation needs \"ret\"")),
        };
        Ok(Operation {
            client: self.client,
            op,
            call: self.call,
            ret,
            outcome,
        })
    }
}

impl History {
    /// Reads our JSON-lines format. Blank lines and lines starting with `#`
    /// are skipped.
    pub fn read_jsonl(r: impl BufRead) -> Result<History, HistoryError> {
        let mut ops = Vec::new();
        for (i, line) in r.lines().enumerate() {
            let line = line?;
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let parsed: Line =
                serde_json::from_str(t).map_err(|e| HistoryError::at(i + 1, e.to_string()))?;
            ops.push(parsed.into_op(i + 1)?);
        }
        Ok(History { ops })
    }

    /// Writes one JSON object per operation, in the order stored.
    pub fn write_jsonl(&self, mut w: impl Write) -> std::io::Result<()> {
        for o in &self.ops {
            serde_json::to_writer(&mut w, &Line::from_op(o))?;
            w.write_all(b"\n")?;
        }
        Ok(())
    }

    /// The JSONL text of this history.
    pub fn to_jsonl(&self) -> String {
        let mut v = Vec::new();
        self.write_jsonl(&mut v).expect("writing to a Vec");
        String::from_utf8(v).expect("serde_json writes UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> History {
        let k = || "k".to_string();
        History {
            ops: vec![
                Operation {
                    client: 1,
                    op: Op::Put {
                        key: k(),
                        value: "a\"b".into(),
                    },
                    call: 1,
                    ret: Some(5),
                    outcome: Outcome::Ok(None),
                },
                Operation {
                    client: 2,
                    op: Op::Get { key: k() },
                    call: 2,
                    ret: Some(3),
                    outcome: Outcome::Ok(None),
                },
                Operation {
                    client: 2,
                    op: Op::Get { key: k() },
                    call: 4,
                    ret: Some(6),
                    outcome: Outcome::Ok(Some("".into())),
                },
                Operation {
                    client: 3,
                    op: Op::Cas {
                        key: "".into(),
                        from: "1".into(),
                        to: "2".into(),
                    },
                    call: 7,
                    ret: None,
                    outcome: Outcome::Unknown,
                },
                Operation {
                    client: 4,
                    op: Op::Delete { key: k() },
                    call: 8,
                    ret: Some(9),
                    outcome: Outcome::Fail,
                },
            ],
        }
    }

    #[test]
    fn jsonl_round_trips_and_keeps_null_apart_from_empty() {
        let h = sample();
        let text = h.to_jsonl();
        assert!(text.contains(r#""result":null"#), "{text}");
        assert!(text.contains(r#""result":"""#), "{text}");
        let back = History::read_jsonl(text.as_bytes()).unwrap();
        assert_eq!(back, h);
    }

    #[test]
    fn jsonl_errors_name_the_line() {
        let text = "\n{\"client\":1,\"op\":\"get\",\"key\":\"k\",\"call\":1,\"ret\":2,\"outcome\":\"ok\"}\n";
        let e = History::read_jsonl(text.as_bytes())
            .unwrap_err()
            .to_string();
        assert_eq!(e, "line 2: an ok read needs \"result\"");
        let text = r#"{"client":1,"op":"zap","call":1,"ret":2,"outcome":"ok"}"#;
        let e = History::read_jsonl(text.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown op \"zap\""), "{e}");
        let text =
            r#"{"client":1,"op":"put","key":"k","value":"v","call":3,"ret":2,"outcome":"ok"}"#;
        let e = History::read_jsonl(text.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("ret is before call"), "{e}");
    }
}
