//! `--check`: recording each point's history and deciding linearizability.

use std::time::Duration;

use bytes::Bytes;
use quorumkv_check::history::History;
use quorumkv_check::recorder::{ClientLog, OpHandle, Recorder};
use quorumkv_core::op::{Op, Outcome};
use quorumkv_core::{Request, Response};

use crate::failure::OpFailure;
use crate::workload::id_prefix;

/// The history log of one logical client, or nothing when not checking.
///
/// Operations go through core's wire-to-history conversion, as the
/// simulator's do; values are recorded by their unique prefix (the padding
/// is the same in every value, and would only cost the checker memory).
pub struct Log(Option<ClientLog>);

impl Log {
    pub fn new(rec: Option<&Recorder>, client: u64) -> Log {
        Log(rec.map(|r| r.client(client)))
    }

    pub fn invoke_get(&mut self, key: &Bytes) -> Option<OpHandle> {
        self.invoke(|| Request::Get { key: key.clone() })
    }

    pub fn invoke_put(&mut self, key: &Bytes, value: &Bytes) -> Option<OpHandle> {
        self.invoke(|| Request::Put {
            key: key.clone(),
            value: id_prefix(value),
        })
    }

    pub fn complete_get(&mut self, h: Option<OpHandle>, r: &Result<Option<Bytes>, OpFailure>) {
        self.complete(h, || match r {
            Ok(v) => Outcome::from_response(&Response::Value(v.as_ref().map(id_prefix))),
            Err(f) => Outcome::failure(f.definite),
        });
    }

    pub fn complete_put(&mut self, h: Option<OpHandle>, r: &Result<(), OpFailure>) {
        self.complete(h, || match r {
            Ok(()) => Outcome::from_response(&Response::Done),
            Err(f) => Outcome::failure(f.definite),
        });
    }

    /// The request is only built when recording.
    fn invoke(&mut self, req: impl FnOnce() -> Request) -> Option<OpHandle> {
        let log = self.0.as_mut()?;
        Some(log.invoke(Op::from(&req())))
    }

    fn complete(&mut self, h: Option<OpHandle>, outcome: impl FnOnce() -> Outcome) {
        if let (Some(log), Some(h)) = (self.0.as_mut(), h) {
            log.complete(h, outcome());
        }
    }
}

/// The verdict column: `ok`, `VIOLATION` (with the first bad key) or
/// `unknown` (the checker ran out of time).
pub async fn check_history(history: History, limit: Duration) -> String {
    let job = tokio::task::spawn_blocking(move || {
        quorumkv_check::check(&history, quorumkv_check::Model::Kv, Some(limit))
    });
    match job.await {
        Ok(report) => verdict(&report),
        Err(_) => "unknown (checker panicked)".into(),
    }
}

fn verdict(report: &quorumkv_check::Report) -> String {
    use quorumkv_check::Verdict;
    match report.verdict {
        Verdict::Linearizable => "ok".into(),
        Verdict::NotLinearizable => match &report.violation {
            Some(v) => format!("VIOLATION ({})", v.key),
            None => "VIOLATION".into(),
        },
        // Unknown (out of time), or anything the checker adds later.
        _ => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::make_value;

    #[test]
    fn log_records_value_ids_and_failure_classes() {
        let rec = Recorder::new();
        let mut log = Log::new(Some(&rec), 3);
        let key = Bytes::from_static(b"key-7");
        let value = make_value(3, 17, 64);
        let h = log.invoke_put(&key, &value);
        log.complete_put(h, &Ok(()));
        let h = log.invoke_get(&key);
        log.complete_get(h, &Ok(Some(value.clone())));
        let h = log.invoke_put(&key, &value);
        log.complete_put(h, &Err(OpFailure::definite("rejected")));
        let h = log.invoke_get(&key);
        log.complete_get(h, &Err(OpFailure::unknown("timeout")));
        drop(log);
        let ops = rec.history().ops;
        let put = Op::Put {
            key: "key-7".into(),
            value: "c3-17".into(),
        };
        assert_eq!(ops[0].op, put);
        assert_eq!(ops[0].outcome, Outcome::Ok(None));
        assert_eq!(ops[1].outcome, Outcome::Ok(Some("c3-17".into())));
        assert_eq!(ops[2].outcome, Outcome::Fail);
        assert_eq!(ops[3].outcome, Outcome::Unknown);
        assert!(Log::new(None, 1).invoke_get(&key).is_none());
    }
}
