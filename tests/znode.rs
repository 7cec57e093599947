//! The coordination service on a real 3-replica Zab cluster (child
//! processes, TCP): ephemerals die with their session, watches fire,
//! sequential names grow, and the `quorumkv zk` CLI.

mod common;

use quorumkv_core::znode::{EventType, ZkError};
use quorumkv_node::client::{ClientConfig, ClientMode};
use quorumkv_node::local::LocalCluster;
use quorumkv_node::zk::{CreateMode, WatchEvent, ZkClient, ZkClientError};
use std::time::Duration;

async fn zab_cluster() -> LocalCluster {
    common::zab_cluster_with(Vec::new()).await
}

fn cfg() -> ClientConfig {
    common::client_cfg(ClientMode::Proxy, Duration::from_secs(5))
}

/// A client of one replica (so that two clients sit on different servers).
async fn at(cluster: &LocalCluster, i: usize, timeout: Duration) -> ZkClient {
    let addr = cluster.native_addrs()[i];
    ZkClient::connect(vec![addr], cfg(), timeout).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemerals_watches_and_sequential_names_on_a_real_cluster() {
    let cluster = zab_cluster().await;
    let owner = at(&cluster, 0, Duration::from_secs(10)).await;
    let watcher = at(&cluster, 1, Duration::from_secs(10)).await;
    let mut events = watcher.watches().unwrap();

    // Sequential names grow, across clients at different servers.
    owner
        .create("/q", "", CreateMode::PERSISTENT)
        .await
        .unwrap();
    let mut names = Vec::new();
    for c in [&owner, &watcher, &owner] {
        let (p, _) = c
            .create("/q/n-", "", CreateMode::EPHEMERAL_SEQUENTIAL)
            .await
            .unwrap();
        names.push(p);
    }
    assert_eq!(
        names,
        ["/q/n-0000000000", "/q/n-0000000001", "/q/n-0000000002"]
    );

    // A watch set at one server fires for a change made through another.
    let (eph, stat) = owner
        .create("/e", "x", CreateMode::EPHEMERAL)
        .await
        .unwrap();
    assert_eq!(stat.ephemeral_owner, owner.session());
    assert!(watcher.exists(&eph, true).await.unwrap().is_some());
    assert!(watcher.children("/q", true).await.unwrap().len() == 3);

    // Closing the session deletes its ephemerals in one transaction; both
    // watches fire, and arrive before the answer to the next call.
    let mut deleted = owner.close().await.unwrap();
    deleted.sort();
    assert_eq!(deleted, ["/e", "/q/n-0000000000", "/q/n-0000000002"]);
    watcher.sync().await.unwrap();
    let mut got = Vec::new();
    while let Ok(e) = events.try_recv() {
        got.push(e);
    }
    assert!(
        got.contains(&WatchEvent::Node {
            event: EventType::NodeDeleted,
            path: "/e".into()
        }),
        "{got:?}"
    );
    assert!(
        got.contains(&WatchEvent::Node {
            event: EventType::NodeChildrenChanged,
            path: "/q".into()
        }),
        "{got:?}"
    );
    assert_eq!(got.len(), 2, "one-shot: {got:?}");
    assert_eq!(watcher.exists("/e", false).await.unwrap(), None);
    assert_eq!(
        watcher.children("/q", false).await.unwrap(),
        ["n-0000000001"]
    );

    // ZooKeeper's errors come back as such, definite.
    let err = watcher
        .create("/q", "", CreateMode::PERSISTENT)
        .await
        .unwrap_err();
    assert_eq!(err, ZkClientError::Zk(ZkError::NodeExists));
    assert!(err.is_definite());
    let err = watcher.delete("/q", None).await.unwrap_err();
    assert_eq!(err, ZkClientError::Zk(ZkError::NotEmpty));
}

/// The next watch event, or `Err` after 10 s.
async fn next_event(
    events: &mut tokio::sync::mpsc::UnboundedReceiver<WatchEvent>,
) -> Result<Option<WatchEvent>, tokio::time::error::Elapsed> {
    tokio::time::timeout(Duration::from_secs(10), events.recv()).await
}

/// A session that moves to another server takes its watches along
/// (ZooKeeper's `SetWatches`): a change made while it moved fires at once,
/// and a watch on an unchanged node is set at the new server and fires
/// there later. Without re-registration no event could come: the server
/// that held the watches is dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_move_with_the_session_to_another_server() {
    let mut cluster = zab_cluster().await;
    let addrs = cluster.native_addrs();
    let first = cluster.endpoints()[0].id;
    // The mover talks to server 1, and to server 2 once 1 is gone.
    let mover = ZkClient::connect(vec![addrs[0], addrs[1]], cfg(), Duration::from_secs(10))
        .await
        .unwrap();
    let other = at(&cluster, 2, Duration::from_secs(10)).await;
    let mut events = mover.watches().unwrap();
    for p in ["/same", "/dir"] {
        other.create(p, "", CreateMode::PERSISTENT).await.unwrap();
    }
    assert!(mover.exists("/same", true).await.unwrap().is_some());
    assert!(mover.exists("/born", true).await.unwrap().is_none());
    assert!(mover.children("/dir", true).await.unwrap().is_empty());

    cluster.kill(first).await.unwrap();
    other
        .create("/born", "", CreateMode::PERSISTENT)
        .await
        .unwrap();
    other
        .create("/dir/kid", "", CreateMode::PERSISTENT)
        .await
        .unwrap();
    // The mover's next successful call went through server 2.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while mover.sync().await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "never reconnected");
    }
    let mut missed = Vec::new();
    for _ in 0..2 {
        match next_event(&mut events).await {
            Ok(Some(WatchEvent::Node { event, path })) => missed.push((event, path)),
            other => panic!("expected the two missed changes, got {other:?}"),
        }
    }
    missed.sort();
    assert_eq!(
        missed,
        [
            (EventType::NodeCreated, "/born".to_string()),
            (EventType::NodeChildrenChanged, "/dir".to_string())
        ]
    );
    // /same did not change: its watch was set at server 2, and fires now.
    other.set_data("/same", "b", None).await.unwrap();
    match next_event(&mut events).await {
        Ok(Some(WatchEvent::Node { event, path })) => {
            assert_eq!(
                (event, path.as_str()),
                (EventType::NodeDataChanged, "/same")
            )
        }
        other => panic!("expected /same's change, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_stops_heartbeating_expires() {
    let cluster = zab_cluster().await;
    let short = at(&cluster, 2, Duration::from_millis(600)).await;
    let other = at(&cluster, 0, Duration::from_secs(10)).await;
    let (p, _) = short
        .create("/gone", "", CreateMode::EPHEMERAL)
        .await
        .unwrap();
    // Alive while it heartbeats, well past its timeout.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(other.exists(&p, false).await.unwrap().is_some());
    // Dropped: no more heartbeats (the connection goes too). Wait for the
    // leader to expire it, bounded.
    drop(short);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while other.exists(&p, false).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn the_zk_cli_creates_lists_and_reports_errors() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(zab_cluster());
    let zk = |args: &[&str]| common::zk_cli(&cluster, args);
    assert_eq!(zk(&["create", "/cli", "v1"]).1, "/cli\n");
    assert_eq!(
        zk(&["create", "/cli/s-", "--sequential"]).1,
        "/cli/s-0000000000\n"
    );
    assert_eq!(zk(&["set", "/cli", "v2"]).1, "version 1\n");
    assert_eq!(zk(&["get", "/cli"]).1, "v2\n");
    assert_eq!(zk(&["ls", "/cli"]).1, "s-0000000000\n");
    assert!(zk(&["stat", "/cli"]).1.contains("num_children 1\n"));
    let (code, _, err) = zk(&["rm", "/cli"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("directory not empty"), "{err}");
    let (code, _, err) = zk(&["get", "/nope"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no node"), "{err}");
    assert!(zk(&["sync"]).1.starts_with("zxid "));
    drop(cluster);
}

/// Seed 001's recipes (§II.D), synchronous and asynchronous, on a real cluster: four clients
/// on different servers take each lock in turn; by fencing token and by
/// real time no two hold it at once (no faults, no pauses here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_recipes_keep_mutual_exclusion() {
    use quorumkv_check::znode::{check_lock, Holding};
    use quorumkv_node::zk_recipes::{acquire, release, Recipe};
    let cluster = zab_cluster().await;
    let setup = at(&cluster, 0, Duration::from_secs(10)).await;
    setup
        .create("/locks", "", CreateMode::PERSISTENT)
        .await
        .unwrap();
    setup
        .create("/locks/q", "", CreateMode::PERSISTENT)
        .await
        .unwrap();
    let t0 = tokio::time::Instant::now();
    let micros = move || t0.elapsed().as_micros() as u64;
    for recipe in Recipe::ALL {
        let mut tasks = Vec::new();
        for c in 0..4u64 {
            let zk = at(&cluster, c as usize % 3, Duration::from_secs(10)).await;
            tasks.push(tokio::spawn(async move {
                let mut events = zk.watches().unwrap();
                let mut held = Vec::new();
                for _ in 0..4 {
                    let path = if recipe.is_queue() {
                        "/locks/q"
                    } else {
                        "/locks/tas"
                    };
                    let poll = Duration::from_millis(2);
                    let (h, at) = acquire(recipe, &zk, path, poll, &mut events).await.unwrap();
                    // When the lock was held (async-tas: before `acquire` returns).
                    let acquired = at.duration_since(t0).as_micros() as u64;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let released = micros();
                    release(&zk, &h).await.unwrap();
                    held.push(Holding {
                        client: c,
                        token: h.token,
                        acquired,
                        released: Some(released),
                    });
                }
                held
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        assert_eq!(all.len(), 16, "{recipe:?}");
        let bad = check_lock(&all, true);
        assert!(bad.is_empty(), "{recipe:?}: {bad:?}");
    }
}

/// Another protocol refuses znode operations, and says what to do.
#[test]
fn other_protocols_refuse_znode_operations_clearly() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(common::start_cluster(3));
    let eps = cluster.native_addrs()[0].to_string();
    let out = std::process::Command::new(common::binary())
        .args(["zk", "ls", "/", "--endpoints", &eps])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("znode operations need --protocol zab"),
        "{err}"
    );
    drop(cluster);
}

/// Jepsen's finding on etcd, here: a lock holder paused (SIGSTOP) past its
/// session timeout loses its node while it still believes it holds the
/// lock, and the next client acquires it. Two holders by real time; the
/// fencing tokens still tell the newer holder (what the lock promises).
#[test]
fn a_paused_holder_breaks_real_time_exclusion_but_not_the_tokens() {
    use quorumkv_check::znode::{check_lock, Holding, LockViolation};
    use quorumkv_node::zk_recipes::tas_lock;
    use std::io::BufRead;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_rt = rt.enter();
    let cluster = rt.block_on(zab_cluster());
    let eps = cluster.native_addrs()[0].to_string();
    let t0 = std::time::Instant::now();
    let micros = || t0.elapsed().as_micros() as u64;
    // Holder A: the CLI, holding its ephemeral lock node with a 500 ms session.
    let mut a = std::process::Command::new(common::binary())
        .args(["zk", "create", "/p", "--ephemeral", "--hold"])
        .args(["--session-timeout", "500ms", "--endpoints", &eps])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(a.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "/p\n");
    let a_acquired = micros();
    let b = rt.block_on(at(&cluster, 1, Duration::from_secs(10)));
    let a_token = rt.block_on(b.exists("/p", false)).unwrap().unwrap().czxid;
    // Pause A: no more heartbeats; the leader expires its session.
    let pid = a.id() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let mut events = b.watches().unwrap();
    let held = rt.block_on(async {
        let lock = tas_lock(&b, "/p", true, Duration::from_millis(5), &mut events);
        tokio::time::timeout(Duration::from_secs(10), lock).await
    });
    let b_acquired = micros();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    drop(a.stdin.take()); // A ends its hold (closing an already expired session)
    let _ = a.wait();
    let held = held.expect("B acquires once A's session expired").unwrap();
    let holdings = [
        Holding {
            client: 1,
            token: a_token,
            acquired: a_acquired,
            released: None, // A never released: it still believes it holds
        },
        Holding {
            client: 2,
            token: held.token,
            acquired: b_acquired,
            released: Some(micros()),
        },
    ];
    assert!(held.token > a_token);
    assert_eq!(check_lock(&holdings, false), vec![]);
    let by_time = check_lock(&holdings, true);
    assert!(
        matches!(by_time[..], [LockViolation::Overlap(..)]),
        "{by_time:?}"
    );
}

/// One RESP command on a fresh connection; the raw reply.
async fn resp(addr: std::net::SocketAddr, words: &[&str]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!("*{}\r\n", words.len());
    for w in words {
        req += &format!("${}\r\n{w}\r\n", w.len());
    }
    s.write_all(req.as_bytes()).await.unwrap();
    s.shutdown().await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// The znode commands on the RESP port (`ZK.CREATE`, `ZK.GET`, `ZK.SET`,
/// `ZK.LS`, `ZK.STAT`, `ZK.DEL`, `ZK.SYNC`), written through one replica
/// and read through another; ephemerals (which need a session) refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn znode_commands_over_resp() {
    let cluster = zab_cluster().await;
    let ports: Vec<_> = cluster.endpoints().iter().map(|e| e.resp).collect();
    let (a, b) = (ports[0], ports[1]);
    assert_eq!(
        resp(a, &["ZK.CREATE", "/app", "v1"]).await,
        "$4\r\n/app\r\n"
    );
    let seq = resp(a, &["zk.create", "/app/w-", "x", "SEQUENTIAL"]).await;
    assert_eq!(seq, "$17\r\n/app/w-0000000000\r\n");
    assert_eq!(resp(b, &["ZK.GET", "/app"]).await, "$2\r\nv1\r\n");
    assert_eq!(resp(b, &["ZK.SET", "/app", "v2", "0"]).await, ":1\r\n");
    let stale = resp(a, &["ZK.SET", "/app", "v3", "0"]).await;
    assert_eq!(stale, "-ERR bad version\r\n");
    let ls = resp(a, &["ZK.LS", "/app"]).await;
    assert_eq!(ls, "*1\r\n$12\r\nw-0000000000\r\n");
    let stat = resp(b, &["ZK.STAT", "/app"]).await;
    assert!(stat.starts_with("*20\r\n$5\r\nczxid\r\n"), "{stat}");
    assert!(stat.contains("$7\r\nversion\r\n:1\r\n"), "{stat}");
    assert!(stat.contains("$11\r\nnumChildren\r\n:1\r\n"), "{stat}");
    assert_eq!(resp(a, &["ZK.STAT", "/nope"]).await, "$-1\r\n");
    assert_eq!(resp(a, &["ZK.GET", "/nope"]).await, "-ERR no node\r\n");
    let busy = resp(a, &["ZK.DEL", "/app"]).await;
    assert_eq!(busy, "-ERR directory not empty\r\n");
    let eph = resp(a, &["ZK.CREATE", "/e", "x", "EPHEMERAL"]).await;
    assert!(
        eph.starts_with("-ERR ephemeral znodes need a session"),
        "{eph}"
    );
    assert_eq!(resp(a, &["ZK.DEL", "/app/w-0000000000"]).await, "+OK\r\n");
    assert_eq!(resp(a, &["ZK.DEL", "/app", "1"]).await, "+OK\r\n");
    let synced = resp(b, &["ZK.SYNC"]).await;
    assert!(synced.starts_with(':'), "{synced}");
    assert_eq!(resp(b, &["ZK.GET", "/app"]).await, "-ERR no node\r\n");
}

/// `ZK.WATCH` on the RESP port blocks until the watch fires: a data watch
/// set through one replica is answered by a change written through another,
/// and the connection's later command is answered after it (pipeline
/// order). The writer keeps writing until the event comes: each write
/// either precedes the watch's read (no event) or follows it (the event).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_watch_over_resp() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = zab_cluster().await;
    let ports: Vec<_> = cluster.endpoints().iter().map(|e| e.resp).collect();
    let (a, b) = (ports[0], ports[1]);
    assert_eq!(resp(a, &["ZK.CREATE", "/w", "v"]).await, "$2\r\n/w\r\n");
    let no_node = resp(a, &["ZK.WATCH", "/nope", "DATA"]).await;
    assert_eq!(no_node, "-ERR no node\r\n", "a failed read sets no watch");
    let timed_out = resp(a, &["ZK.WATCH", "/w", "CHILDREN", "0.2"]).await;
    assert_eq!(
        timed_out, "$-1\r\n",
        "nothing changed: nil after the timeout"
    );

    for (kind, expect) in [("DATA", "changed"), ("CHILDREN", "children")] {
        let mut s = tokio::net::TcpStream::connect(a).await.unwrap();
        let cmd = format!(
            "*3\r\n$8\r\nZK.WATCH\r\n$2\r\n/w\r\n${}\r\n{kind}\r\n*1\r\n$4\r\nPING\r\n",
            kind.len()
        );
        s.write_all(cmd.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut n = 0;
        while !got.ends_with(b"+PONG\r\n") {
            assert!(tokio::time::Instant::now() < deadline, "no event: {got:?}");
            let w = match kind {
                "DATA" => resp(b, &["ZK.SET", "/w", &format!("v{n}")]).await,
                _ => resp(b, &["ZK.CREATE", &format!("/w/c{n}"), "x"]).await,
            };
            assert!(!w.starts_with('-'), "{w}");
            n += 1;
            let mut buf = [0u8; 256];
            if let Ok(r) = tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await
            {
                let r = r.unwrap();
                assert!(r > 0, "connection closed: {got:?}");
                got.extend_from_slice(&buf[..r]);
            }
        }
        let want = format!(
            "*2\r\n${}\r\n{expect}\r\n$2\r\n/w\r\n+PONG\r\n",
            expect.len()
        );
        assert_eq!(String::from_utf8_lossy(&got), want);
    }
}
