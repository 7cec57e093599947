//! Reading histories: our JSONL, JSON lines with `invoke`/`complete`/`ok`
//! fields, Jepsen/Knossos EDN histories, Jepsen register logs, and the
//! EDN-like key-value format of Porcupine's test data. Formats without
//! times use the line number as the time of each event. Fields a format
//! does not use are ignored.

use crate::edn::{self, Edn};
use crate::foreign;
use crate::history::{History, HistoryError, Op, Outcome};
use crate::pairing::Pairing;

/// A history file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// One JSON object per operation (see the README).
    Jsonl,
    /// Jepsen register log: `INFO  jepsen.util - 3 :invoke :cas [1 4]`, fields
    /// separated by tabs or runs of spaces.
    Jepsen,
    /// `{:process 0, :type :invoke, :f :append, :key "0", :value "x"}`.
    EdnKv,
    /// One JSON object per operation with `invoke`, `complete` and `ok`.
    InvokeJson,
    /// Jepsen/Knossos EDN: `{:type :invoke, :f :cas, :value [1 2], :process 3}`.
    JepsenEdn,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Jepsen => "jepsen",
            Format::EdnKv => "edn-kv",
            Format::InvokeJson => "invoke-json",
            Format::JepsenEdn => "jepsen-edn",
        }
    }

    /// Guesses the format from the first meaningful line (for EDN, from
    /// the first line that names a known operation).
    pub fn detect(text: &str) -> Option<Format> {
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))?;
        if line.starts_with("{:") || line.starts_with("[{:") {
            Some(if foreign::is_jepsen_edn(text) {
                Format::JepsenEdn
            } else {
                Format::EdnKv
            })
        } else if line.starts_with('{') {
            Some(if foreign::is_invoke_json(line) {
                Format::InvokeJson
            } else {
                Format::Jsonl
            })
        } else if text.contains("jepsen.util") || jepsen_fields(line).is_some() {
            Some(Format::Jepsen)
        } else {
            None
        }
    }
}

/// Parses `text` in `format` (or the detected one).
pub fn parse(text: &str, format: Option<Format>) -> Result<(History, Format), HistoryError> {
    let format = match format.or_else(|| Format::detect(text)) {
        Some(f) => f,
        None if text.trim().is_empty() => return Err(HistoryError::Empty),
        None => {
            return Err(HistoryError::at(
                1,
                "not a history: expected JSONL, a Jepsen log or EDN",
            ))
        }
    };
    let h = match format {
        Format::Jsonl => History::read_jsonl(text.as_bytes())?,
        Format::Jepsen => parse_jepsen(text)?,
        Format::EdnKv => parse_edn_kv(text)?,
        Format::InvokeJson => foreign::parse_invoke_json(text)?,
        Format::JepsenEdn => foreign::parse_jepsen_edn(text)?,
    };
    if h.ops.is_empty() {
        return Err(HistoryError::Empty);
    }
    Ok((h, format))
}

/// Splits `3 :invoke :cas [1 4]` (after `jepsen.util - `) into (process,
/// type, f, value). Fields are separated by any run of whitespace (tabs in
/// some Jepsen versions, padding spaces in others); the value is the rest.
fn jepsen_fields(s: &str) -> Option<(u64, &str, &str, &str)> {
    let (process, rest) = next_field(s)?;
    let (ty, rest) = next_field(rest)?;
    let (f, rest) = next_field(rest)?;
    let ty = ty.strip_prefix(':')?;
    let f = f.strip_prefix(':')?;
    Some((process.parse().ok()?, ty, f, rest.trim()))
}

/// The first whitespace-delimited field of `s` and what follows it.
fn next_field(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    (end > 0).then(|| s.split_at(end))
}

fn parse_jepsen(text: &str) -> Result<History, HistoryError> {
    let mut p = Pairing::default();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let logged = raw
            .split_once("jepsen.util")
            .and_then(|(_, b)| b.trim_start().strip_prefix('-'));
        let body = match logged {
            Some(b) => b.trim_start(),
            None if raw.trim().is_empty() || !raw.trim_start().starts_with(char::is_numeric) => {
                continue; // other log lines
            }
            None => raw.trim(),
        };
        if body.starts_with(':') {
            continue; // :nemesis and friends
        }
        let (process, ty, f, value) =
            jepsen_fields(body).ok_or_else(|| HistoryError::at(n, "malformed Jepsen line"))?;
        let bad = |what: &str| HistoryError::at(n, format!("{what}: {value:?}"));
        match ty {
            "invoke" => {
                let key = String::new();
                let op = match f {
                    "read" => Op::Read { key },
                    "write" => Op::Write {
                        key,
                        value: atom(value).ok_or_else(|| bad("bad value"))?,
                    },
                    "cas" => {
                        let (from, to) = pair(value).ok_or_else(|| bad("bad cas pair"))?;
                        Op::Cas { key, from, to }
                    }
                    other => {
                        return Err(HistoryError::at(n, format!("unknown Jepsen op :{other}")))
                    }
                };
                p.invoke(n, process, op)?;
            }
            "ok" => {
                let o = p.complete(n, process, Outcome::Ok(None))?;
                if o.op.is_read() {
                    let v = if value == "nil" {
                        None
                    } else {
                        Some(atom(value).ok_or_else(|| bad("bad value"))?)
                    };
                    o.outcome = Outcome::Ok(v);
                }
            }
            "fail" => {
                p.complete(n, process, Outcome::Fail)?;
            }
            "info" => {
                p.complete(n, process, Outcome::Unknown)?;
            }
            other => return Err(HistoryError::at(n, format!("unknown Jepsen type :{other}"))),
        }
    }
    Ok(History { ops: p.ops })
}

/// A single Jepsen value (an integer or a word).
fn atom(s: &str) -> Option<String> {
    let s = s.split_whitespace().next()?;
    (!s.starts_with('[') && !s.starts_with(':')).then(|| s.to_string())
}

/// `[1 4]`.
fn pair(s: &str) -> Option<(String, String)> {
    let inner = s.strip_prefix('[')?.split(']').next()?;
    let mut it = inner.split_whitespace();
    let r = (it.next()?.to_string(), it.next()?.to_string());
    it.next().is_none().then_some(r)
}

/// The kv format. A missing key reads as `""` there, so a get of `""` is
/// read as "absent", a put of `""` as a delete, and an append of `""` (a
/// no-op) is dropped: with these the format's semantics equal our model's.
fn parse_edn_kv(text: &str) -> Result<History, HistoryError> {
    let mut p = Pairing::default();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let m = edn::map(raw).map_err(|e| HistoryError::at(n, e))?;
        let get_str = |k: &str| match m.get(k) {
            Some(Edn::Str(s)) => Ok(Some(s.clone())),
            Some(Edn::Int(i)) => Ok(Some(i.to_string())),
            Some(Edn::Nil) | None => Ok(None),
            Some(other) => Err(HistoryError::at(n, format!(":{k} is {other}"))),
        };
        let kw = |k: &str| match m.get(k) {
            Some(Edn::Kw(w)) => Ok(w.as_str()),
            _ => Err(HistoryError::at(n, format!("missing :{k} keyword"))),
        };
        let process = match m.get("process") {
            Some(Edn::Int(i)) if *i >= 0 => *i as u64,
            _ => return Err(HistoryError::at(n, "missing :process")),
        };
        let key = get_str("key")?.ok_or_else(|| HistoryError::at(n, "missing :key"))?;
        let value = get_str("value")?;
        match kw("type")? {
            "invoke" => {
                let need = || {
                    value
                        .clone()
                        .ok_or_else(|| HistoryError::at(n, "missing :value"))
                };
                let op = match kw("f")? {
                    "get" => Op::Get { key },
                    "put" if need()?.is_empty() => Op::Delete { key },
                    "put" => Op::Put {
                        key,
                        value: need()?,
                    },
                    "append" if need()?.is_empty() => {
                        // Still pair it, then drop it below.
                        Op::Append {
                            key,
                            value: String::new(),
                        }
                    }
                    "append" => Op::Append {
                        key,
                        value: need()?,
                    },
                    "delete" => Op::Delete { key },
                    other => return Err(HistoryError::at(n, format!("unknown :f :{other}"))),
                };
                p.invoke(n, process, op)?;
            }
            "ok" => {
                let o = p.complete(n, process, Outcome::Ok(None))?;
                if o.op.is_read() {
                    o.outcome = Outcome::Ok(value.filter(|v| !v.is_empty()));
                }
            }
            "fail" => {
                p.complete(n, process, Outcome::Fail)?;
            }
            "info" => {
                p.complete(n, process, Outcome::Unknown)?;
            }
            other => return Err(HistoryError::at(n, format!("unknown :type :{other}"))),
        }
    }
    let ops = p
        .ops
        .into_iter()
        .filter(|o| !matches!(&o.op, Op::Append { value, .. } if value.is_empty()))
        .collect();
    Ok(History { ops })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_formats() {
        assert_eq!(
            Format::detect("{:process 0, :type :invoke}"),
            Some(Format::EdnKv)
        );
        assert_eq!(Format::detect("\n{\"client\": 1}"), Some(Format::Jsonl));
        assert_eq!(
            Format::detect("INFO  jepsen.util - 0\t:invoke\t:read\tnil"),
            Some(Format::Jepsen)
        );
        assert_eq!(Format::detect("hello world"), None);
    }

    #[test]
    fn jepsen_log() {
        let log = "\
INFO  jepsen.util - 0\t:invoke\t:read\tnil
INFO  jepsen.util - 1\t:invoke\t:cas\t[1 4]
INFO  jepsen.util - 2\t:invoke\t:write\t3
INFO  jepsen.util - :nemesis\t:info\t:start\tnil
INFO  jepsen.util - 0\t:ok\t:read\tnil
INFO  jepsen.util - 1\t:fail\t:cas\t[1 4]
INFO  jepsen.util - 2\t:info\t:write\t:timed-out
INFO  jepsen.util - 0\t:invoke\t:read\tnil
INFO  jepsen.util - 0\t:fail\t:read\t:timed-out
INFO  jepsen.util - 3\t:invoke\t:read\tnil
INFO  jepsen.util - 3\t:ok\t:read\t3
";
        let (h, f) = parse(log, None).unwrap();
        assert_eq!(f, Format::Jepsen);
        let got: Vec<_> = h
            .ops
            .iter()
            .map(|o| (o.client, o.op.name(), o.outcome.clone(), o.ret))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "read", Outcome::Ok(None), Some(5)),
                (1, "cas", Outcome::Fail, Some(6)),
                (2, "write", Outcome::Unknown, None),
                (0, "read", Outcome::Fail, Some(9)),
                (3, "read", Outcome::Ok(Some("3".into())), Some(11)),
            ]
        );
        assert_eq!(
            h.ops[1].op,
            Op::Cas {
                key: "".into(),
                from: "1".into(),
                to: "4".into()
            }
        );
    }

    #[test]
    fn jepsen_fields_split_on_any_run_of_whitespace() {
        let tabs = "INFO  jepsen.util - 1\t:invoke\t:cas\t[1 4]\nINFO  jepsen.util - 1\t:ok\t:cas\t[1 4]\n\
                    INFO  jepsen.util - 2\t:invoke\t:read\tnil\nINFO  jepsen.util - 2\t:ok\t:read\t4\n";
        let spaces = "INFO [2017-03-07 11:00:00,001] jepsen.util - 1   :invoke  :cas    [1  4]\n\
                      INFO [2017-03-07 11:00:00,002] jepsen.util -  1 :ok \t :cas [1 4]  \n\
                      INFO  jepsen.util -\t2     :invoke   :read   nil\n\
                      2 :ok :read 4\n";
        let (a, fa) = parse(tabs, None).unwrap();
        let (b, fb) = parse(spaces, None).unwrap();
        assert_eq!((fa, fb), (Format::Jepsen, Format::Jepsen));
        assert_eq!(a, b);
        assert_eq!(b.ops.len(), 2);
        assert_eq!(
            b.ops[0].op,
            Op::Cas {
                key: "".into(),
                from: "1".into(),
                to: "4".into()
            }
        );
        assert_eq!(b.ops[1].outcome, Outcome::Ok(Some("4".into())));
        let e = parse("INFO  jepsen.util - 1   :invoke\n", Some(Format::Jepsen)).unwrap_err();
        assert_eq!(e.to_string(), "line 1: malformed Jepsen line");
    }

    #[test]
    fn edn_kv_lines() {
        let text = r#"{:process 0, :type :invoke, :f :append, :key "0", :value "x 0 0 y"}
{:process 1, :type :invoke, :f :get, :key "0", :value nil}
{:process 0, :type :ok, :f :append, :key "0", :value "x 0 0 y"}
{:process 1, :type :ok, :f :get, :key "0", :value ""}
{:process 2, :type :invoke, :f :put, :key "1", :value "a \"q\""}
{:process 3, :type :invoke, :f :append, :key "1", :value ""}
{:process 3, :type :ok, :f :append, :key "1", :value ""}
"#;
        let (h, f) = parse(text, None).unwrap();
        assert_eq!(f, Format::EdnKv);
        assert_eq!(h.ops.len(), 3, "the empty append is dropped");
        assert_eq!(h.ops[1].outcome, Outcome::Ok(None), "\"\" reads as absent");
        assert_eq!(h.ops[1].call, 2);
        assert_eq!(h.ops[1].ret, Some(4));
        assert_eq!(
            h.ops[2].op,
            Op::Put {
                key: "1".into(),
                value: "a \"q\"".into()
            }
        );
        assert_eq!(h.ops[2].outcome, Outcome::Unknown, "no :ok by the end");
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse("{:process 0, :type :invoke, :f :get}\n", None).unwrap_err();
        assert_eq!(e.to_string(), "line 1: missing :key");
        let e = parse(
            "{:process 0, :type :ok, :f :get, :key \"a\", :value nil}",
            None,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 1: process 0 completes without an invocation"
        );
        let e = parse("{:process 0, :type :invoke, :f :get, :key \"a", None).unwrap_err();
        assert!(e.to_string().starts_with("line 1: "), "{e}");
        assert!(matches!(parse("  \n", None), Err(HistoryError::Empty)));
        let e = parse("GIF89a\0\0", None).unwrap_err();
        assert!(e.to_string().contains("not a history"), "{e}");
    }

    #[test]
    fn parsers_never_panic_on_garbage() {
        let samples = [
            "{:",
            "{:a",
            "{:a \"",
            "{:a \"\\",
            "{\"",
            "INFO jepsen.util - 1 :ok",
            "1 :invoke :cas [1",
            "{:process -1}",
            "{}",
        ];
        for s in samples {
            for f in [
                Format::Jsonl,
                Format::Jepsen,
                Format::EdnKv,
                Format::InvokeJson,
                Format::JepsenEdn,
            ] {
                let _ = parse(s, Some(f));
            }
        }
    }
}
