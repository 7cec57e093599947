//! Histories written by other tools' drivers: JSON lines with
//! `invoke`/`complete`/`ok` fields, and Jepsen/Knossos EDN histories.
//! Fields not listed here are ignored; an error names the line and the field.
use std::fmt::Display;

use serde_json::{Map, Value};

use crate::edn::{self, Edn};
use crate::history::{History, HistoryError, Op, Operation, Outcome};
use crate::pairing::Pairing;

/// Whether a JSON line is `invoke-json`: it has an `invoke`, `complete` or
/// `ok` field and neither of our JSONL's (`call`, `outcome`).
pub(crate) fn is_invoke_json(line: &str) -> bool {
    let has = |m: &Map<String, Value>, keys: &[&str]| keys.iter().any(|k| m.contains_key(*k));
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(m)) => {
            has(&m, &["invoke", "complete", "ok"]) && !has(&m, &["call", "outcome"])
        }
        _ => false,
    }
}

/// Whether EDN lines are a Jepsen history rather than Porcupine's kv
/// format, by the first line whose `:f` names an operation of either
/// (nemesis lines name neither).
pub(crate) fn is_jepsen_edn(text: &str) -> bool {
    for line in text.lines().take(10_000) {
        let Ok(m) = edn::map(unwrap_vector(line)) else {
            continue;
        };
        match m.get("f") {
            Some(Edn::Kw(f)) if matches!(f.as_str(), "get" | "put" | "append" | "delete") => {
                return false
            }
            Some(Edn::Kw(f)) if matches!(f.as_str(), "read" | "write" | "cas") => return true,
            _ => {}
        }
    }
    false
}

/// A history saved as one EDN vector, one map per line: `[{…}` … `{…}]`.
fn unwrap_vector(line: &str) -> &str {
    let s = line.trim();
    let s = s.strip_prefix("[{").map_or(s, |_| &s[1..]);
    s.strip_suffix("}]").map_or(s, |_| &s[..s.len() - 1])
}

/// One line of `invoke-json`.
struct JsonLine<'a> {
    n: usize,
    obj: &'a Map<String, Value>,
}

impl JsonLine<'_> {
    fn err(&self, field: &str, msg: impl Display) -> HistoryError {
        HistoryError::at(self.n, format!("field \"{field}\": {msg}"))
    }

    /// The first of `names` present, with its name.
    fn get(&self, names: &[&'static str]) -> Option<(&'static str, &Value)> {
        names.iter().find_map(|&k| self.obj.get(k).map(|v| (k, v)))
    }

    fn required(
        &self,
        names: &[&'static str],
        why: &str,
    ) -> Result<(&'static str, &Value), HistoryError> {
        self.get(names).ok_or_else(|| {
            let also = match names {
                [_, rest @ ..] if !rest.is_empty() => format!(" (or \"{}\")", rest.join("\", \"")),
                _ => String::new(),
            };
            self.err(names[0], format!("missing{also}{why}"))
        })
    }

    fn time(&self, name: &'static str, why: &str) -> Result<u64, HistoryError> {
        let (_, v) = self.required(&[name], why)?;
        v.as_u64().ok_or_else(|| {
            self.err(
                name,
                format!("expected nanoseconds (an integer ≥ 0), found {v}"),
            )
        })
    }

    /// A key or value: a string, a number or a boolean as text; null = none.
    fn scalar(&self, name: &str, v: &Value) -> Result<Option<String>, HistoryError> {
        match v {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            Value::Number(x) => Ok(Some(x.to_string())),
            Value::Bool(b) => Ok(Some(b.to_string())),
            other => Err(self.err(
                name,
                format!("expected a string or a number, found {other}"),
            )),
        }
    }

    fn value(&self, f: &str) -> Result<String, HistoryError> {
        let (name, v) = self.required(&["value"], &format!(" ({f} needs a value)"))?;
        self.scalar(name, v)?
            .ok_or_else(|| self.err(name, format!("{f} needs a value, found null")))
    }

    /// `cas`: `"from"` and `"to"`, or `"value": [from, to]`.
    fn cas(&self) -> Result<(String, String), HistoryError> {
        if let (Some(from), Some(to)) = (self.obj.get("from"), self.obj.get("to")) {
            let from = self.scalar("from", from)?;
            let to = self.scalar("to", to)?;
            if let (Some(from), Some(to)) = (from, to) {
                return Ok((from, to));
            }
        }
        let bad = || self.err("value", "cas needs [from, to] (or \"from\" and \"to\")");
        let (name, v) = self.get(&["value"]).ok_or_else(bad)?;
        match v.as_array().map(Vec::as_slice) {
            Some([a, b]) => match (self.scalar(name, a)?, self.scalar(name, b)?) {
                (Some(a), Some(b)) => Ok((a, b)),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }

    fn op(&self) -> Result<Op, HistoryError> {
        let (fname, f) = self.required(&["f", "op"], "")?;
        let f = f
            .as_str()
            .ok_or_else(|| self.err(fname, format!("expected an operation name, found {f}")))?;
        let key = match self.get(&["key"]) {
            Some((name, v)) => self.scalar(name, v)?.unwrap_or_default(),
            None => String::new(),
        };
        Ok(match f {
            "get" => Op::Get { key },
            "read" => Op::Read { key },
            "delete" => Op::Delete { key },
            "put" => Op::Put {
                key,
                value: self.value(f)?,
            },
            "append" => Op::Append {
                key,
                value: self.value(f)?,
            },
            "write" => Op::Write {
                key,
                value: self.value(f)?,
            },
            "cas" => {
                let (from, to) = self.cas()?;
                Op::Cas { key, from, to }
            }
            other => {
                return Err(self.err(
                    fname,
                    format!("unknown operation {other:?} (known: get, put, append, delete, read, write, cas)"),
                ))
            }
        })
    }

    fn operation(&self) -> Result<Operation, HistoryError> {
        let (pname, p) = self.required(&["process", "client"], "")?;
        let client = p
            .as_u64()
            .ok_or_else(|| self.err(pname, format!("expected a process number, found {p}")))?;
        let op = self.op()?;
        let call = self.time("invoke", "")?;
        let ok = match self
            .required(&["ok"], " (true, false, or null for unknown)")?
            .1
        {
            Value::Bool(b) => Some(*b),
            Value::Null => None,
            other => {
                return Err(self.err("ok", format!("expected true, false or null, found {other}")))
            }
        };
        let outcome = match ok {
            None => Outcome::Unknown,
            Some(false) => Outcome::Fail,
            Some(true) if op.is_read() => {
                let (name, r) = self.required(&["result", "output"], " (an ok read needs it)")?;
                Outcome::Ok(self.scalar(name, r)?)
            }
            Some(true) => Outcome::Ok(None),
        };
        let ret = match ok {
            None => None,
            Some(_) => {
                let r = self.time("complete", " (a completed operation needs it)")?;
                if r < call {
                    return Err(self.err("complete", format!("{r} is before \"invoke\" {call}")));
                }
                Some(r)
            }
        };
        Ok(Operation {
            client,
            op,
            call,
            ret,
            outcome,
        })
    }
}

/// JSON lines, one operation each, with `invoke`/`complete` times in ns and
/// `ok` (`true`, `false`, or `null` for an unknown outcome).
pub(crate) fn parse_invoke_json(text: &str) -> Result<History, HistoryError> {
    let mut ops = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let t = raw.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let v: Value = serde_json::from_str(t).map_err(|e| HistoryError::at(n, e.to_string()))?;
        let Value::Object(obj) = &v else {
            return Err(HistoryError::at(n, "expected a JSON object"));
        };
        ops.push(JsonLine { n, obj }.operation()?);
    }
    Ok(History { ops })
}

/// One client event of a Jepsen history.
struct Event {
    n: usize,
    time: Option<u64>,
    process: u64,
    ty: String,
    f: String,
    key: Option<String>,
    value: Edn,
}

fn edn_err(n: usize, field: &str, msg: impl Display) -> HistoryError {
    HistoryError::at(n, format!("field :{field}: {msg}"))
}

impl Event {
    /// The event of one line; `None` for a line of a process that is not a
    /// client (`:nemesis`).
    fn read(n: usize, line: &str) -> Result<Option<Event>, HistoryError> {
        let m = edn::map(line).map_err(|e| HistoryError::at(n, e))?;
        let process = match m.get("process") {
            Some(Edn::Int(p)) if *p >= 0 => *p as u64,
            None => return Err(edn_err(n, "process", "missing")),
            Some(Edn::Int(p)) => return Err(edn_err(n, "process", format!("negative: {p}"))),
            Some(_) => return Ok(None),
        };
        let kw = |k: &str| match m.get(k) {
            Some(Edn::Kw(w)) => Ok(w.clone()),
            None => Err(edn_err(n, k, "missing")),
            Some(other) => Err(edn_err(n, k, format!("expected a keyword, found {other}"))),
        };
        let time = match m.get("time") {
            None => None,
            Some(Edn::Int(t)) if *t >= 0 => Some(*t as u64),
            Some(other) => {
                return Err(edn_err(
                    n,
                    "time",
                    format!("expected nanoseconds, found {other}"),
                ))
            }
        };
        let key = match m.get("key") {
            None => None,
            Some(k) => Some(
                (k.scalar().and_then(|k| k.ok_or_else(|| "nil".to_string())))
                    .map_err(|e| edn_err(n, "key", e))?,
            ),
        };
        Ok(Some(Event {
            n,
            time,
            process,
            ty: kw("type")?,
            f: kw("f")?,
            key,
            value: m.get("value").cloned().unwrap_or(Edn::Nil),
        }))
    }

    /// The key and the register's value: `:key`, or an independent
    /// `[key value]` tuple, or the one register `""`.
    fn key_value(&self) -> Result<(String, &Edn), HistoryError> {
        if let Some(k) = &self.key {
            return Ok((k.clone(), &self.value));
        }
        match &self.value {
            // `[1 2]` is a plain cas; `[k [1 2]]` an independent one.
            Edn::Seq(kv) if kv.len() == 2 && (self.f != "cas" || matches!(kv[1], Edn::Seq(_))) => {
                let key = (kv[0]
                    .scalar()
                    .and_then(|k| k.ok_or_else(|| "a nil key".to_string())))
                .map_err(|e| edn_err(self.n, "value", e))?;
                Ok((key, &kv[1]))
            }
            v => Ok((String::new(), v)),
        }
    }

    fn op(&self) -> Result<Op, HistoryError> {
        let (key, v) = self.key_value()?;
        let scalar = |v: &Edn| {
            v.scalar()
                .and_then(|s| s.ok_or_else(|| "nil".to_string()))
                .map_err(|e| edn_err(self.n, "value", format!(":{} needs a value: {e}", self.f)))
        };
        Ok(match self.f.as_str() {
            "read" => Op::Read { key },
            "write" => Op::Write {
                key,
                value: scalar(v)?,
            },
            "cas" => match v {
                Edn::Seq(p) if p.len() == 2 => Op::Cas {
                    key,
                    from: scalar(&p[0])?,
                    to: scalar(&p[1])?,
                },
                other => {
                    return Err(edn_err(
                        self.n,
                        "value",
                        format!(":cas needs [from to], found {other}"),
                    ))
                }
            },
            other => {
                return Err(edn_err(
                    self.n,
                    "f",
                    format!("unknown operation :{other} (known: :read, :write, :cas)"),
                ))
            }
        })
    }
}

/// A Jepsen/Knossos history: one map per line, invocation and completion
/// apart, paired by `:process`. Times are `:time` (ns) when every client
/// event has one, else line numbers.
pub(crate) fn parse_jepsen_edn(text: &str) -> Result<History, HistoryError> {
    let mut events = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = unwrap_vector(raw);
        if line.is_empty() || line.starts_with(';') {
            continue;
        }
        events.extend(Event::read(i + 1, line)?);
    }
    let timed = events.iter().all(|e| e.time.is_some());
    let mut p = Pairing::default();
    for e in &events {
        let t = if timed {
            e.time.unwrap_or_default()
        } else {
            e.n as u64
        };
        match e.ty.as_str() {
            "invoke" => p.invoke_at(e.n, t, e.process, e.op()?)?,
            "ok" => {
                let o = p.complete_at(e.n, t, e.process, Outcome::Ok(None))?;
                if o.op.is_read() {
                    let (_, v) = e.key_value()?;
                    let v = v.scalar().map_err(|m| edn_err(e.n, "value", m))?;
                    o.outcome = Outcome::Ok(v);
                }
            }
            "fail" => {
                p.complete_at(e.n, t, e.process, Outcome::Fail)?;
            }
            "info" => {
                p.complete_at(e.n, t, e.process, Outcome::Unknown)?;
            }
            other => {
                return Err(edn_err(
                    e.n,
                    "type",
                    format!("unknown :{other} (known: :invoke, :ok, :fail, :info)"),
                ))
            }
        }
    }
    Ok(History { ops: p.ops })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{parse, Format};

    fn err(text: &str) -> String {
        parse(text, None).unwrap_err().to_string()
    }

    /// An operation as a test expects it: client, operation, call, return,
    /// outcome.
    type Row = (u64, String, u64, Option<u64>, Outcome);

    fn rows(h: &History) -> Vec<Row> {
        (h.ops.iter())
            .map(|o| (o.client, o.op.to_string(), o.call, o.ret, o.outcome.clone()))
            .collect()
    }
    fn read(key: &str) -> String {
        Op::Read { key: key.into() }.to_string()
    }
    fn get(key: &str) -> String {
        Op::Get { key: key.into() }.to_string()
    }
    fn write(key: &str, value: &str) -> String {
        let (key, value) = (key.into(), value.into());
        Op::Write { key, value }.to_string()
    }
    fn cas(key: &str, from: &str, to: &str) -> String {
        let (key, from, to) = (key.into(), from.into(), to.into());
        Op::Cas { key, from, to }.to_string()
    }
    fn ok(value: &str) -> Outcome {
        Outcome::Ok(Some(value.into()))
    }

    #[test]
    fn detects_the_foreign_formats() {
        let json = r#"{"process":1,"f":"read","invoke":5,"complete":9,"ok":true,"result":null}"#;
        assert_eq!(Format::detect(json), Some(Format::InvokeJson));
        let edn =
            "{:type :info, :f :start, :process :nemesis}\n{:type :invoke, :f :read, :process 0}";
        assert_eq!(Format::detect(edn), Some(Format::JepsenEdn));
        let kv = "{:process 0, :type :invoke, :f :get, :key \"0\"}";
        assert_eq!(Format::detect(kv), Some(Format::EdnKv));
        assert_eq!(
            Format::detect("[{:type :invoke, :f :cas, :value [1 2], :process 0}"),
            Some(Format::JepsenEdn)
        );
    }

    #[test]
    fn invoke_json_reads_each_outcome_and_alias() {
        let text = r#"
{"process":1,"f":"write","key":"x","value":3,"invoke":10,"complete":20,"ok":true,"node":"n2"}
{"client":2,"op":"read","key":"x","invoke":15,"complete":30,"ok":true,"output":"3"}
{"process":3,"f":"cas","key":"x","value":[3,4],"invoke":40,"ok":null}
{"process":4,"f":"cas","from":"3","to":"5","invoke":41,"complete":45,"ok":false}
{"process":5,"f":"get","key":7,"invoke":50,"complete":60,"ok":true,"result":null}
"#;
        let (h, f) = parse(text, None).unwrap();
        assert_eq!(f, Format::InvokeJson);
        assert_eq!(
            rows(&h),
            vec![
                (1, write("x", "3"), 10, Some(20), Outcome::Ok(None)),
                (2, read("x"), 15, Some(30), ok("3")),
                (3, cas("x", "3", "4"), 40, None, Outcome::Unknown),
                (4, cas("", "3", "5"), 41, Some(45), Outcome::Fail),
                (5, get("7"), 50, Some(60), Outcome::Ok(None)),
            ]
        );
    }

    #[test]
    fn invoke_json_errors_name_line_and_field() {
        let line = |rest: &str| format!("\n{{\"process\":1,\"invoke\":5,{rest}}}");
        let cases = [
            (
                line(r#""ok":true,"complete":9"#),
                r#"line 2: field "f": missing (or "op")"#,
            ),
            (
                line(r#""f":"zap","ok":true"#),
                r#"line 2: field "f": unknown operation "zap""#,
            ),
            (
                line(r#""f":"write","ok":true,"complete":9"#),
                r#"line 2: field "value": missing (write needs a value)"#,
            ),
            (
                line(r#""f":"read","ok":true,"complete":9"#),
                r#"line 2: field "result": missing (or "output") (an ok read needs it)"#,
            ),
            (
                line(r#""f":"read","ok":true,"result":null"#),
                r#"line 2: field "complete": missing (a completed operation needs it)"#,
            ),
            (
                line(r#""f":"read","ok":"yes""#),
                r#"line 2: field "ok": expected true, false or null, found "yes""#,
            ),
            (
                line(r#""f":"delete","ok":false,"complete":3"#),
                r#"line 2: field "complete": 3 is before "invoke" 5"#,
            ),
            (
                line(r#""f":"cas","value":[1],"ok":null"#),
                r#"line 2: field "value": cas needs [from, to]"#,
            ),
            (
                line(r#""f":"get","key":[1],"ok":null"#),
                r#"line 2: field "key": expected a string or a number, found [1]"#,
            ),
        ];
        for (text, want) in cases {
            let e = err(&text);
            assert!(e.starts_with(want), "{text}\n got: {e}\nwant: {want}");
        }
        let e = err("{\"f\":\"read\",\"invoke\":1,\"ok\":null}\n");
        assert_eq!(e, r#"line 1: field "process": missing (or "client")"#);
        let e = err("{\"process\":1,\"f\":\"read\",\"invoke\":-1,\"ok\":null}\n");
        assert!(
            e.starts_with(r#"line 1: field "invoke": expected nanoseconds"#),
            "{e}"
        );
    }

    #[test]
    fn jepsen_edn_pairs_by_process_and_reads_keys() {
        let text = "\
{:type :invoke, :f :write, :value 3, :process 0, :time 100, :index 0}
{:type :info, :f :start, :value nil, :process :nemesis, :time 110}
{:type :invoke, :f :read, :value nil, :process 1, :time 120}
{:type :ok, :f :write, :value 3, :process 0, :time 150}
{:type :ok, :f :read, :value 3, :process 1, :time 160}
{:type :invoke, :f :cas, :value [3 4], :process 0, :time 170}
{:type :info, :f :cas, :value [3 4], :process 0, :time 180, :error :timeout}
{:type :invoke, :f :read, :value [\"k\" nil], :process 2, :time 190}
{:type :fail, :f :read, :value [\"k\" nil], :process 2, :time 195}
{:type :invoke, :f :cas, :value [7 [1 2]], :process 3, :time 200}
{:type :invoke, :f :write, :key 9, :value 1, :process 4, :time 210}
";
        let (h, f) = parse(text, None).unwrap();
        assert_eq!(f, Format::JepsenEdn);
        assert_eq!(
            rows(&h),
            vec![
                (0, write("", "3"), 100, Some(150), Outcome::Ok(None)),
                (1, read(""), 120, Some(160), ok("3")),
                (0, cas("", "3", "4"), 170, None, Outcome::Unknown),
                (2, read("k"), 190, Some(195), Outcome::Fail),
                (3, cas("7", "1", "2"), 200, None, Outcome::Unknown),
                (4, write("9", "1"), 210, None, Outcome::Unknown),
            ]
        );
        // Without :time on every event, line numbers are the times.
        let (h, _) = parse(
            "{:type :invoke, :f :read, :process 0}\n\n{:type :ok, :f :read, :value nil, :process 0, :time 9}\n",
            None,
        )
        .unwrap();
        assert_eq!((h.ops[0].call, h.ops[0].ret), (1, Some(3)));
    }

    #[test]
    fn jepsen_edn_errors_name_line_and_field() {
        let first = "{:type :invoke, :f :read, :value nil, :process 0}\n";
        let cases = [
            (
                "{:type :invoke, :f :read, :value nil}",
                "line 2: field :process: missing",
            ),
            (
                "{:type :invoke, :f :frob, :process 1}",
                "line 2: field :f: unknown operation :frob",
            ),
            (
                "{:type :invoke, :f :write, :value nil, :process 1}",
                "line 2: field :value: :write needs a value",
            ),
            (
                "{:type :invoke, :f :cas, :value 3, :process 1}",
                "line 2: field :value: :cas needs [from to], found 3",
            ),
            (
                "{:type :done, :f :read, :process 0}",
                "line 2: field :type: unknown :done",
            ),
            (
                "{:type :ok, :f :read, :value [1 2 3], :process 0}",
                "line 2: field :value: expected a number or a string",
            ),
            (
                "{:type :ok, :f :read, :process 0, :time :late}",
                "line 2: field :time: expected nanoseconds",
            ),
            (
                "{:type :ok, :f :read, :process 5}",
                "line 2: process 5 completes without an invocation",
            ),
            (
                "{:type :ok :f}",
                "line 2: a map with an odd number of forms",
            ),
        ];
        for (line, want) in cases {
            let e = err(&format!("{first}{line}\n"));
            assert!(e.starts_with(want), "{line}\n got: {e}\nwant: {want}");
        }
    }
}
