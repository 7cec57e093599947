//! Injected round trips (`--rtt-client`, `--rtt-peer`): every frame a
//! replica sends is held back, so an operation costs at least the round
//! trips its protocol needs. Only lower bounds are asserted: an upper bound
//! would time the machine, not the code.

mod common;

use common::{listeners, Replica};
use quorumkv_node::client::{Client, ClientConfig, ClientMode};
use quorumkv_node::server::ServerOptions;
use std::time::Duration;
use tokio::time::Instant;

async fn proxy_client(addr: String) -> Client {
    let cfg = ClientConfig {
        mode: ClientMode::Proxy,
        op_timeout: Duration::from_secs(10),
        ..Default::default()
    };
    Client::connect(vec![addr], cfg).await.expect("connects")
}

#[tokio::test]
async fn client_and_peer_round_trips_add_up_per_operation() {
    let (file, ls) = listeners(3).await;
    let (client_rtt, peer_rtt) = (Duration::from_millis(40), Duration::from_millis(60));
    let mut replicas = Vec::new();
    for (i, l) in ls.into_iter().enumerate() {
        let mut o = ServerOptions::new(i as u32 + 1, file.clone());
        o.rtt_client = client_rtt;
        o.rtt_peer = peer_rtt;
        o.rtt_jitter = Duration::from_millis(4);
        replicas.push(Replica::start(o, l));
    }
    let c = proxy_client(replicas[0].addr.to_string()).await;
    // The first call also waits for the links to come up; measure after it.
    c.put("k", "v0").await.expect("put");
    for i in 1..=3 {
        let t = Instant::now();
        c.put("k", format!("v{i}")).await.expect("put");
        // ABD's write: a query phase and an update phase, each a round trip
        // to a quorum (the proxy replica and one peer), then the reply.
        let put = t.elapsed();
        assert!(put >= client_rtt + 2 * peer_rtt, "put took {put:?}");
        let t = Instant::now();
        assert_eq!(
            c.get("k").await.expect("get").as_deref(),
            Some(format!("v{i}").as_bytes())
        );
        // A read: query, and a write-back only when replicas disagree.
        let get = t.elapsed();
        assert!(get >= client_rtt + peer_rtt, "get took {get:?}");
    }
    for r in replicas {
        r.shut_down().await;
    }
}
