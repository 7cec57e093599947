//! A real 3-replica cluster (child processes, TCP): clients in both modes,
//! concurrency, and replicas killed with SIGKILL mid-run.

mod common;

use bytes::Bytes;
use common::start_cluster;
use quorumkv_core::OpError;
use quorumkv_node::client::{Client, ClientConfig, ClientError, ClientMode};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn cfg(mode: ClientMode) -> ClientConfig {
    common::client_cfg(mode, Duration::from_secs(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_delete_in_both_modes() {
    let cluster = start_cluster(3).await;
    for mode in [ClientMode::Direct, ClientMode::Proxy] {
        let c = Client::connect(cluster.native_addrs(), cfg(mode))
            .await
            .unwrap();
        let key = format!("k-{mode:?}");
        assert_eq!(c.get(key.clone()).await.unwrap(), None);
        c.put(key.clone(), "v1").await.unwrap();
        assert_eq!(c.get(key.clone()).await.unwrap(), Some(Bytes::from("v1")));
        c.put(key.clone(), "v2").await.unwrap();
        c.delete(key.clone()).await.unwrap();
        assert_eq!(c.get(key.clone()).await.unwrap(), None);
    }
    // A write by a direct client is visible to a proxy client on another replica.
    let d = Client::connect(cluster.native_addrs(), cfg(ClientMode::Direct))
        .await
        .unwrap();
    let p = Client::connect(vec![cluster.native_addrs()[2]], cfg(ClientMode::Proxy))
        .await
        .unwrap();
    d.put("shared", "from-direct").await.unwrap();
    assert_eq!(
        p.get("shared").await.unwrap(),
        Some(Bytes::from("from-direct"))
    );
}

/// Many pipelined clients on few keys: each client's own writes must be
/// read back in order (a client always sees at least its latest write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_read_their_writes() {
    let cluster = start_cluster(3).await;
    let client = Client::connect(cluster.native_addrs(), cfg(ClientMode::Direct))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for t in 0..16u32 {
        let c = client.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..50u32 {
                let key = format!("key-{t}");
                let value = format!("{t}-{i}");
                c.put(key.clone(), value.clone()).await.unwrap();
                assert_eq!(c.get(key).await.unwrap(), Some(Bytes::from(value.clone())));
                // Everyone reads a shared key too; its value is some client's write.
                c.put("hot", value).await.unwrap();
                let hot = c.get("hot").await.unwrap().expect("hot was written");
                assert!(hot.contains(&b'-'));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// SIGKILL one replica while clients run: with a majority alive every
/// operation still completes. A restarted replica recovers its state from
/// its peers. With no majority, operations fail with a timeout within a
/// bounded time instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_a_minority_crash_and_fails_cleanly_without_quorum() {
    let mut cluster = start_cluster(3).await;
    for mode in [ClientMode::Direct, ClientMode::Proxy] {
        // Proxy clients talk to replica 1, which stays alive.
        let eps = match mode {
            ClientMode::Direct => cluster.native_addrs(),
            ClientMode::Proxy => vec![cluster.native_addrs()[0]],
        };
        let client = Client::connect(eps, cfg(mode)).await.unwrap();
        let done = Arc::new(AtomicU32::new(0));
        let workers: Vec<_> = (0..8)
            .map(|t| {
                let (c, done) = (client.clone(), done.clone());
                tokio::spawn(async move {
                    for i in 0..150u32 {
                        c.put(format!("k{}", i % 5), format!("{t}.{i}")).await?;
                        c.get(format!("k{}", (i + 1) % 5)).await?;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok::<_, ClientError>(())
                })
            })
            .collect();
        let mut done_at_kill = 0;
        if mode == ClientMode::Direct {
            while done.load(Ordering::Relaxed) < 200 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            cluster.kill(3).await.unwrap();
            done_at_kill = done.load(Ordering::Relaxed);
        }
        for w in workers {
            w.await.unwrap().unwrap_or_else(|e| {
                panic!("{mode:?}: an operation failed with a majority alive: {e}")
            });
        }
        let total = done.load(Ordering::Relaxed);
        assert_eq!(total, 8 * 150);
        assert!(
            mode == ClientMode::Proxy || total - done_at_kill >= 500,
            "the kill came too late: {done_at_kill}"
        );
    }
    // Replica 3 comes back empty and recovers from 1 and 2 before it
    // answers reads; afterwards it holds every key without having been
    // written to since its restart.
    let client = Client::connect(cluster.native_addrs(), cfg(ClientMode::Direct))
        .await
        .unwrap();
    client.put("during-outage", "x").await.unwrap();
    cluster.restart(3).await.unwrap();
    let info = wait_for_info(cluster.endpoints()[2].resp, |i| !i.contains("RECOVERING")).await;
    assert!(info.contains("replica keys=6"), "{info}");
    // Now lose replica 2: {1, 3} is the majority and must serve everything.
    cluster.kill(2).await.unwrap();
    assert_eq!(
        client.get("during-outage").await.unwrap(),
        Some(Bytes::from("x"))
    );
    client.put("k0", "after").await.unwrap();
    // Lose replica 3 as well: no majority, operations fail with a bounded timeout.
    cluster.kill(3).await.unwrap();
    let start = Instant::now();
    let err = client
        .put("k0", "lost?")
        .await
        .expect_err("no majority: must fail");
    assert!(
        matches!(err, ClientError::Op(OpError::Timeout { got: 1, need: 2 })),
        "{err:?}"
    );
    assert!(
        !err.is_definite(),
        "a timed-out write has an unknown outcome"
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "bounded failure, took {:?}",
        start.elapsed()
    );
}

/// Poll a replica's RESP INFO until `ok` accepts it (at most 10 s).
async fn wait_for_info(addr: std::net::SocketAddr, ok: impl Fn(&str) -> bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"INFO\r\nQUIT\r\n").await.unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).await.unwrap();
        if ok(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "INFO never satisfied the condition: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Open file descriptors of this test process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Dropping the last clone of a client closes its connections and stops its
/// tasks: an application (or the bench) that creates clients over and over
/// does not leak sockets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_clients_close_their_connections() {
    let cluster = start_cluster(3).await;
    // Warm up whatever the runtime and the first connection allocate once.
    let c = Client::connect(cluster.native_addrs(), cfg(ClientMode::Direct))
        .await
        .unwrap();
    c.put("k", "v").await.unwrap();
    drop(c);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = open_fds();
    for i in 0..20 {
        for mode in [ClientMode::Direct, ClientMode::Proxy] {
            let c = Client::connect(cluster.native_addrs(), cfg(mode))
                .await
                .unwrap();
            c.put(format!("k{i}"), "v").await.unwrap();
        }
    }
    // 20 × (3 + 1) connections were opened; all of them must go away.
    let deadline = Instant::now() + Duration::from_secs(10);
    while open_fds() > before + 4 {
        assert!(
            Instant::now() < deadline,
            "leaked: {} fds before, {} after",
            before,
            open_fds()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A proxy-mode client whose server dies fails over to the next endpoint:
/// the operation in flight (if any) has an unknown outcome, later ones
/// succeed through another replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_client_fails_over_when_its_server_dies() {
    let mut cluster = start_cluster(3).await;
    let c = Client::connect(cluster.native_addrs(), cfg(ClientMode::Proxy))
        .await
        .unwrap();
    c.put("fo", "1").await.unwrap(); // through replica 1, the first endpoint
    cluster.kill(1).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut failures = 0;
    loop {
        match c.put("fo", "2").await {
            Ok(()) => break,
            Err(e) => {
                assert!(
                    !e.is_definite() || matches!(e, ClientError::Connect(_)),
                    "{e:?}"
                );
                failures += 1;
                assert!(Instant::now() < deadline, "no failover: {e}");
            }
        }
    }
    assert!(failures <= 1, "failover took {failures} failed calls");
    assert_eq!(c.get("fo").await.unwrap(), Some(Bytes::from("2")));
}
