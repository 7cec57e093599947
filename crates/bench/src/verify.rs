//! `--check`: recording each point's history and deciding linearizability.

use std::time::Duration;

use bytes::Bytes;
use quorumkv_check::history::{History, Op, Outcome};
use quorumkv_check::recorder::{ClientLog, OpHandle, Recorder};

use crate::target::OpFailure;
use crate::workload::value_id;

/// The history log of one logical client, or nothing when not checking.
pub struct Log(Option<ClientLog>);

impl Log {
    pub fn new(rec: Option<&Recorder>, client: u64) -> Log {
        Log(rec.map(|r| r.client(client)))
    }

    pub fn invoke_get(&mut self, key: &Bytes) -> Option<OpHandle> {
        let log = self.0.as_mut()?;
        Some(log.invoke(Op::Get { key: text(key) }))
    }

    pub fn invoke_put(&mut self, key: &Bytes, value: &Bytes) -> Option<OpHandle> {
        let log = self.0.as_mut()?;
        Some(log.invoke(Op::Put {
            key: text(key),
            value: value_id(value),
        }))
    }

    pub fn complete_get(&mut self, h: Option<OpHandle>, r: &Result<Option<Bytes>, OpFailure>) {
        if let (Some(log), Some(h)) = (self.0.as_mut(), h) {
            let outcome = match r {
                Ok(v) => Outcome::Ok(v.as_deref().map(value_id)),
                Err(f) => failure(f),
            };
            log.complete(h, outcome);
        }
    }

    pub fn complete_put(&mut self, h: Option<OpHandle>, r: &Result<(), OpFailure>) {
        if let (Some(log), Some(h)) = (self.0.as_mut(), h) {
            let outcome = match r {
                Ok(()) => Outcome::Ok(None),
                Err(f) => failure(f),
            };
            log.complete(h, outcome);
        }
    }
}

fn failure(f: &OpFailure) -> Outcome {
    if f.definite {
        Outcome::Fail
    } else {
        Outcome::Unknown
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
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
