//! Acknowledged writes lost, counted directly from the final read-back.
//!
//! Every put writes a value no one else writes, so the value a key reads
//! back at the end (after every client stopped) names the put that wrote
//! it. An acknowledged put invoked after that put had returned comes after
//! it in real time, so a linearizable store must show it (or something
//! later) in the final read: it is lost. A key read back as nil (or as a
//! value no put wrote) lost every acknowledged put on it. The checker finds
//! these too, among everything else; this is the plain count a user asks
//! for first.

use quorumkv_check::{History, Operation};
use quorumkv_core::op::{Op, Outcome};
use std::collections::BTreeMap;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReadBack {
    /// Keys whose final read was answered.
    pub keys: u64,
    /// Acknowledged puts on those keys.
    pub acknowledged: u64,
    pub lost: u64,
    /// The first key that lost one, and how.
    pub example: Option<String>,
}

/// Count over `h`, whose final reads are logical client `reader`'s.
pub fn count(h: &History, reader: u64) -> ReadBack {
    let mut puts: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
    let mut last_read: BTreeMap<&str, (&Operation, Option<&str>)> = BTreeMap::new();
    for o in &h.ops {
        match (&o.op, &o.outcome) {
            (Op::Put { key, .. }, _) if o.client != reader => puts.entry(key).or_default().push(o),
            (Op::Get { key }, Outcome::Ok(v)) if o.client == reader => {
                last_read.insert(key, (o, v.as_deref()));
            }
            _ => {}
        }
    }
    let mut rb = ReadBack::default();
    for (key, (read, value)) in last_read {
        let on_key = puts.get(key).map(Vec::as_slice).unwrap_or_default();
        let acked: Vec<&Operation> = (on_key.iter().copied())
            .filter(|p| matches!(p.outcome, Outcome::Ok(_)) && p.ret.is_some_and(|r| r < read.call))
            .collect();
        let writer = on_key.iter().find(|p| put_value(p) == value);
        // Returned before these were invoked: they are later in real time.
        let lost: Vec<&Operation> = match (value, writer) {
            (Some(_), Some(w)) => match w.ret {
                Some(done) => acked.iter().copied().filter(|p| p.call > done).collect(),
                None => Vec::new(),
            },
            _ => acked.clone(),
        };
        rb.keys += 1;
        rb.acknowledged += acked.len() as u64;
        rb.lost += lost.len() as u64;
        if let (None, Some(p)) = (&rb.example, lost.last()) {
            rb.example = Some(format!(
                "key {key} read back {} although {} was acknowledged at {:.3}s{}",
                value.unwrap_or("nil"),
                put_value(p).unwrap_or_default(),
                p.ret.unwrap_or_default() as f64 / 1e9,
                writer
                    .and_then(|w| w.ret)
                    .map(|r| format!(
                        ", after that value's put returned at {:.3}s",
                        r as f64 / 1e9
                    ))
                    .unwrap_or_default()
            ));
        }
    }
    rb
}

fn put_value(o: &Operation) -> Option<&str> {
    match &o.op {
        Op::Put { value, .. } => Some(value),
        _ => None,
    }
}

impl ReadBack {
    /// One line for the report.
    pub fn line(&self, keys: u64) -> String {
        let mut s = format!(
            "acknowledged writes lost: {} (acknowledged puts newer than the value their key read back at the end; \
             final read-back of {} of {keys} keys, {} acknowledged puts on them)",
            self.lost, self.keys, self.acknowledged
        );
        if let Some(e) = &self.example {
            s += &format!("; e.g. {e}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(client: u64, value: &str, call: u64, ret: Option<u64>) -> Operation {
        let (key, value) = ("k0".to_string(), value.to_string());
        let outcome = if ret.is_some() {
            Outcome::Ok(None)
        } else {
            Outcome::Unknown
        };
        Operation::new(client, Op::Put { key, value }, call, ret, outcome)
    }
    fn read(v: Option<&str>) -> Operation {
        let key = "k0".to_string();
        Operation::new(
            9,
            Op::Get { key },
            100,
            Some(101),
            Outcome::Ok(v.map(String::from)),
        )
    }

    #[test]
    fn a_value_older_than_an_acknowledged_put_counts_it_lost() {
        let puts = vec![put(1, "a", 0, Some(10)), put(2, "b", 20, Some(30))];
        let with = |v: Option<&str>| {
            let mut ops = puts.clone();
            ops.push(read(v));
            count(&History { ops }, 9)
        };
        assert_eq!((with(Some("b")).lost, with(Some("b")).acknowledged), (0, 2));
        let old = with(Some("a"));
        assert_eq!(old.lost, 1);
        assert!(
            old.example
                .as_deref()
                .unwrap()
                .contains("read back a although b"),
            "{old:?}"
        );
        assert_eq!(with(None).lost, 2);
        assert_eq!(with(Some("zz")).lost, 2, "a value no put wrote");
        // Concurrent puts may land in either order; an unknown one may land late.
        let mut ops = vec![put(1, "a", 0, Some(30)), put(2, "b", 20, Some(40))];
        ops.push(put(3, "c", 50, None));
        for v in ["a", "b", "c"] {
            let mut h = ops.clone();
            h.push(read(Some(v)));
            assert_eq!(count(&History { ops: h }, 9).lost, 0, "{v}");
        }
    }
}
