//! Correctness from real runs: histories recorded by concurrent clients of a
//! real 3-replica cluster (with a replica SIGKILLed and restarted mid-run)
//! must be linearizable according to the checker.

mod common;

use common::start_cluster;
use quorumkv_check::history::{Op, Outcome};
use quorumkv_check::recorder::Recorder;
use quorumkv_check::{check, Model, Verdict};
use quorumkv_node::client::{Client, ClientConfig, ClientError, ClientMode};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn outcome_of_error(e: &ClientError) -> Outcome {
    if e.is_definite() {
        Outcome::Fail
    } else {
        Outcome::Unknown
    }
}

async fn run_clients(
    clients: Vec<Client>,
    rec: &Recorder,
    ops: u32,
    keys: u32,
    done: Arc<AtomicU32>,
) {
    let mut tasks = Vec::new();
    for (id, c) in clients.into_iter().enumerate() {
        let mut log = rec.client(id as u64);
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut x = 0x2545_f491_4f6c_dd1d_u64 ^ id as u64; // xorshift: reproducible op mix
            for i in 0..ops {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = format!("k{}", x % keys as u64);
                if x.is_multiple_of(3) {
                    let value = format!("c{id}-{i}");
                    let h = log.invoke(Op::Put {
                        key: key.clone(),
                        value: value.clone(),
                    });
                    let r = c.put(key, value).await;
                    log.complete(
                        h,
                        r.map(|_| Outcome::Ok(None))
                            .unwrap_or_else(|e| outcome_of_error(&e)),
                    );
                } else {
                    let h = log.invoke(Op::Get { key: key.clone() });
                    let r = c.get(key).await;
                    let o = match r {
                        Ok(v) => Outcome::Ok(v.map(|b| String::from_utf8_lossy(&b).into_owned())),
                        Err(e) => outcome_of_error(&e),
                    };
                    log.complete(h, o);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            log.finish();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histories_from_a_real_cluster_with_a_crash_are_linearizable() {
    let mut cluster = start_cluster(3).await;
    let cfg = |mode| ClientConfig {
        mode,
        op_timeout: Duration::from_secs(1),
        ..Default::default()
    };
    // Two independent direct clients (each its own coordinator and writer
    // id) and proxy clients through replicas 1 and 2.
    let mut clients = Vec::new();
    for _ in 0..3 {
        let d = Client::connect(cluster.native_addrs(), cfg(ClientMode::Direct))
            .await
            .unwrap();
        clients.push(d.clone());
        clients.push(d);
    }
    for ep in &cluster.native_addrs()[..2] {
        clients.push(
            Client::connect(vec![*ep], cfg(ClientMode::Proxy))
                .await
                .unwrap(),
        );
    }
    let rec = Recorder::new();
    let done = Arc::new(AtomicU32::new(0));
    let total = 8 * 250;
    let run = run_clients(clients, &rec, 250, 3, done.clone());
    // Crash replica 3 a quarter of the way in, restart it (it recovers from
    // its peers) at half way, while the clients keep going.
    let chaos = async {
        let reach = |n| {
            let done = done.clone();
            async move {
                while done.load(Ordering::Relaxed) < n {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        };
        reach(total / 4).await;
        cluster.kill(3).await.unwrap();
        reach(total / 2).await;
        cluster.restart(3).await.unwrap();
        done.load(Ordering::Relaxed)
    };
    let ((), done_at_restart) = tokio::join!(run, chaos);
    assert!(
        done_at_restart < total * 9 / 10,
        "the restart came too late to overlap: {done_at_restart}"
    );
    let history = rec.history();
    assert_eq!(history.ops.len(), total as usize);
    let ok = history
        .ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Ok(_)))
        .count();
    assert!(
        ok > history.ops.len() * 9 / 10,
        "most operations must succeed with a majority alive: {ok}"
    );
    let report = check(&history, Model::Kv, Some(Duration::from_secs(60)));
    assert_eq!(
        report.verdict,
        Verdict::Linearizable,
        "{}",
        quorumkv_check::report::verdict_line(&report)
    );
}
