//! The clients: each a logical client of the history, one operation at a
//! time through the real client library, gets and puts of unique values on
//! a few keys, recorded whatever the faults do to them.

use quorumkv_check::recorder::{ClientLog, Recorder};
use quorumkv_core::op::{Op, Outcome};
use quorumkv_core::rng::SplitMix64;
use quorumkv_core::{Request, Response};
use quorumkv_node::client::Client;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Operations by outcome, for the progress bar and the summary.
#[derive(Debug, Default)]
pub struct OpCounts {
    pub ok: AtomicU64,
    pub failed: AtomicU64,
    pub unknown: AtomicU64,
}

impl OpCounts {
    pub fn total(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
            + self.failed.load(Ordering::Relaxed)
            + self.unknown.load(Ordering::Relaxed)
    }

    pub(super) fn count(&self, o: &Outcome) {
        let c = match o {
            Outcome::Ok(_) => &self.ok,
            Outcome::Fail => &self.failed,
            Outcome::Unknown => &self.unknown,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

pub fn key_name(i: u64) -> String {
    format!("k{i}")
}

/// Run `req`, recording its invocation and outcome in `log`.
pub async fn recorded(
    client: &Client,
    log: &mut ClientLog,
    req: Request,
    counts: &OpCounts,
) -> (Outcome, Option<String>) {
    let h = log.invoke(Op::from(&req));
    let (outcome, error) = match client.call(req).await {
        Ok(Response::Failed(e)) => (Outcome::failure(e.is_definite()), Some(e.to_string())),
        Ok(resp) => (Outcome::from_response(&resp), None),
        Err(e) => (Outcome::failure(e.is_definite()), Some(e.to_string())),
    };
    log.complete(h, outcome.clone());
    counts.count(&outcome);
    (outcome, error)
}

/// One logical client: until `stop`, half gets and half puts of a value
/// no one else writes (`c<client>-<n>`), on `keys` keys drawn from `seed`.
pub async fn client_loop(
    client: Client,
    mut log: ClientLog,
    id: u64,
    keys: u64,
    seed: u64,
    stop: Arc<AtomicBool>,
    counts: Arc<OpCounts>,
) {
    let mut rng = SplitMix64(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = key_name(rng.below(keys)).into_bytes().into();
        let req = if rng.chance(0.5) {
            Request::Get { key }
        } else {
            n += 1;
            Request::Put {
                key,
                value: format!("c{id}-{n}").into_bytes().into(),
            }
        };
        if !matches!(
            recorded(&client, &mut log, req, &counts).await.0,
            Outcome::Ok(_)
        ) {
            // No replica to talk to fails fast: do not spin on it.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// After the faults: read every key once (retrying a failed read a few
/// times), so that a write lost since its last read still shows. Returns
/// how many keys were read, and the last error of a key not read.
pub async fn final_reads(
    client: &Client,
    rec: &Recorder,
    id: u64,
    keys: u64,
    counts: &OpCounts,
) -> (u64, Option<String>) {
    let mut log = rec.client(id);
    let mut read = 0;
    let mut last_error = None;
    for k in 0..keys {
        for _ in 0..5 {
            let req = Request::Get {
                key: key_name(k).into_bytes().into(),
            };
            match recorded(client, &mut log, req, counts).await {
                (Outcome::Ok(_), _) => {
                    read += 1;
                    break;
                }
                (_, e) => last_error = e,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    (read, last_error)
}
