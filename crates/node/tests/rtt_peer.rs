//! `--rtt-peer` alone (seed 001's inter-cluster RTT): a replicated write
//! waits for at least one round trip to a peer, and not absurdly more; with
//! no added RTT it is far quicker; delayed and jittered links deliver every
//! frame, in order (the unit tests of `net` check the order frame by frame,
//! a cancelled receive included; here whole operations must all complete
//! with the values written).

mod common;

use common::{listeners, Replica};
use quorumkv_node::client::{Client, ClientConfig, ClientMode};
use quorumkv_node::server::ServerOptions;
use std::time::Duration;
use tokio::time::Instant;

/// A cluster of `n` replicas with these added delays, and a proxy client
/// of replica 1 that has done one write (the links are up).
async fn cluster(n: usize, peer: Duration, jitter: Duration) -> (Vec<Replica>, Client) {
    let (file, ls) = listeners(n).await;
    let mut replicas = Vec::new();
    for (i, l) in ls.into_iter().enumerate() {
        let mut o = ServerOptions::new(i as u32 + 1, file.clone());
        o.rtt_peer = peer;
        o.rtt_jitter = jitter;
        replicas.push(Replica::start(o, l));
    }
    let cfg = ClientConfig {
        mode: ClientMode::Proxy,
        op_timeout: Duration::from_secs(10),
        ..Default::default()
    };
    let c = Client::connect(vec![replicas[0].addr.to_string()], cfg)
        .await
        .expect("connects");
    c.put("warm", "up").await.expect("first put");
    (replicas, c)
}

/// The median of `k` sequential writes' latencies.
async fn median_put(c: &Client, k: usize) -> Duration {
    let mut lat = Vec::new();
    for i in 0..k {
        let t = Instant::now();
        c.put("k", format!("v{i}")).await.expect("put");
        lat.push(t.elapsed());
    }
    lat.sort();
    lat[k / 2]
}

#[tokio::test]
async fn a_write_costs_at_least_one_peer_round_trip_and_not_many_more() {
    let rtt = Duration::from_millis(50);
    let (replicas, c) = cluster(3, rtt, Duration::ZERO).await;
    let slow = median_put(&c, 5).await;
    for r in replicas {
        r.shut_down().await;
    }
    // A quorum of 3 needs the proxy and one peer: a round trip at least.
    assert!(
        slow >= rtt,
        "median write {slow:?} under the {rtt:?} peer RTT"
    );
    // The protocol's round trips and the machine's own delay; ten round
    // trips would mean frames wait longer than they should.
    assert!(slow <= 10 * rtt, "median write {slow:?}");
    let (replicas, c) = cluster(3, Duration::ZERO, Duration::ZERO).await;
    let fast = median_put(&c, 5).await;
    for r in replicas {
        r.shut_down().await;
    }
    // The same writes without it: the added round trip shows (compared,
    // not timed absolutely: a loaded machine slows both alike).
    assert!(
        fast + rtt / 2 <= slow,
        "median write {fast:?} without added RTT, {slow:?} with"
    );
}

#[tokio::test]
async fn jittered_peer_links_lose_no_operation() {
    let (replicas, c) = cluster(3, Duration::from_millis(20), Duration::from_millis(20)).await;
    // Pipelined writes from one connection: each frame of each round must
    // arrive, or its write times out.
    let mut writes = tokio::task::JoinSet::new();
    for i in 0..60 {
        let c = c.clone();
        writes.spawn(async move { c.put(format!("key{i}"), format!("value{i}")).await });
    }
    while let Some(r) = writes.join_next().await {
        r.expect("task").expect("put");
    }
    for i in 0..60 {
        let v = c.get(format!("key{i}")).await.expect("get");
        assert_eq!(v.as_deref(), Some(format!("value{i}").as_bytes()));
    }
    // Writes in turn on one key: the last is what every read sees.
    for i in 0..10 {
        c.put("seq", format!("{i}")).await.expect("put");
    }
    assert_eq!(c.get("seq").await.expect("get").as_deref(), Some(&b"9"[..]));
    for r in replicas {
        r.shut_down().await;
    }
}
