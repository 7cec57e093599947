//! Hostile and careless clients against a three-replica cluster: memory
//! stays within the configured budget, idle and slow connections are
//! closed, a client's `--timeout` bounds the whole call, and floods of
//! connections leave nothing behind.

mod common;

use common::binary;
use quorumkv_core::protocol::abd::Msg;
use quorumkv_core::Request;
use quorumkv_node::codec::{encode_to_bytes, Frame, FrameBuf, DEFAULT_MAX_FRAME};
use quorumkv_node::local::{LocalCluster, LocalClusterConfig};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MIB: u64 = 1024 * 1024;

async fn start_with(args: &[&str]) -> LocalCluster {
    let server_args = [&["--op-timeout", "1s"][..], args].concat();
    let cfg = LocalClusterConfig {
        ready_timeout: Duration::from_secs(20),
        ..common::cluster_cfg("abd", 3, &server_args)
    };
    LocalCluster::start(cfg).await.expect("cluster starts")
}

/// A field of /proc/PID/status in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process alive");
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in status"));
    kb * 1024
}

/// Open sockets of a process.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("process alive")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.to_string_lossy().starts_with("socket:"))
        .count()
}

async fn info(resp: SocketAddr) -> String {
    let mut s = TcpStream::connect(resp).await.unwrap();
    s.write_all(b"INFO\r\nQUIT\r\n").await.unwrap();
    let mut text = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut text)).await;
    text
}

fn info_field(info: &str, name: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO has no {name}: {info}"))
}

/// Poll `cond` every 100 ms until it holds; panic with `what` at the deadline.
async fn eventually<F: std::future::Future<Output = bool>>(
    within: Duration,
    what: &str,
    mut cond: impl FnMut() -> F,
) {
    let deadline = Instant::now() + within;
    while !cond().await {
        assert!(Instant::now() < deadline, "{what} (after {within:?})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Read until the server closes (or `within` passes); returns the bytes and
/// whether it closed.
async fn read_until_closed(
    rd: &mut (impl AsyncReadExt + Unpin),
    within: Duration,
) -> (Vec<u8>, bool) {
    let mut all = Vec::new();
    let closed = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    (all, closed)
}

fn frames(bytes: &[u8]) -> Vec<Frame<Msg>> {
    let mut fb = FrameBuf::new(DEFAULT_MAX_FRAME);
    fb.buf_mut().extend_from_slice(bytes);
    std::iter::from_fn(|| fb.next_frame::<Msg>().ok().flatten()).collect()
}

fn error_in(bytes: &[u8]) -> Option<String> {
    frames(bytes).into_iter().find_map(|f| match f {
        Frame::Error { message } => Some(message),
        _ => None,
    })
}

/// One connection announcing a maximum frame and sending all of it but
/// its last byte, reading concurrently; returns what the server said.
async fn hold_partial_max_frame(addr: SocketAddr, body: &'static [u8]) -> Vec<u8> {
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let reader =
        tokio::spawn(async move { read_until_closed(&mut rd, Duration::from_secs(60)).await.0 });
    let len = (DEFAULT_MAX_FRAME as u32).to_be_bytes();
    if wr.write_all(&len).await.is_ok() {
        let _ = wr.write_all(&body[..DEFAULT_MAX_FRAME - 1]).await;
    }
    // Keep the connection (and its partial frame) until the server acts.
    let said = reader.await.unwrap();
    drop(wr);
    said
}

/// Item 1: 100 connections each holding an unfinished 16 MiB frame. The
/// replica refuses the ones beyond its budget with a clear error, its
/// peak RSS stays near the budget (not 100 × 16 MiB), and the budget is
/// all given back once they leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_budget_bounds_memory_under_partial_max_frames() {
    const BUDGET: u64 = 64 * MIB;
    let cluster = start_with(&["--max-buffer-bytes", "64MiB", "--read-timeout", "5s"]).await;
    let pid = cluster.pid(1).unwrap();
    let ep = cluster.endpoints()[0];
    let base = status_bytes(pid, "VmRSS");
    let body: &'static [u8] = Box::leak(vec![7u8; DEFAULT_MAX_FRAME].into_boxed_slice());

    let conns: Vec<_> = (0..100)
        .map(|_| tokio::spawn(hold_partial_max_frame(ep.native, body)))
        .collect();
    let mut refused = 0;
    for c in conns {
        let said = c.await.unwrap();
        match error_in(&said) {
            Some(m) if m.contains("memory budget exhausted") => refused += 1,
            Some(m) => assert!(m.contains("not received whole"), "unexpected error: {m}"),
            None => {}
        }
    }
    let peak = status_bytes(pid, "VmHWM");
    eprintln!(
        "baseline {} KiB, peak {} KiB, {refused} of 100 refused for budget",
        base / 1024,
        peak / 1024
    );
    // 100 × 16 MiB were asked for; at most the budget may be held, plus
    // one buffer being copied while it grows and allocator slack.
    let bound = base + BUDGET + BUDGET / 2 + 16 * MIB;
    assert!(
        peak < bound,
        "peak RSS {} MiB over the bound {} MiB (baseline {} MiB)",
        peak / MIB,
        bound / MIB,
        base / MIB
    );
    assert!(
        refused >= 90,
        "only {refused} of 100 connections refused for budget"
    );
    let text = info(ep.resp).await;
    assert!(info_field(&text, "native_budget_refusals") >= refused);
    assert_eq!(info_field(&text, "native_buffer_limit"), BUDGET);
    eventually(Duration::from_secs(10), "budget given back", || async {
        info_field(&info(ep.resp).await, "native_buffer_bytes") == 0
    })
    .await;
    still_serves(&cluster).await;
}

/// Replica 1's links to its peers are up and the cluster takes a write.
async fn still_serves(cluster: &LocalCluster) {
    let text = info(cluster.endpoints()[0].resp).await;
    assert!(
        text.contains("peer_2:up") && text.contains("peer_3:up"),
        "{text}"
    );
    let client = quorumkv_node::client::Client::connect(cluster.native_addrs(), Default::default())
        .await
        .unwrap();
    client.put("still", "serves").await.unwrap();
}

/// Item 2: an idle client connection is closed after the idle timeout, on
/// both ports, with a reason; links between replicas never are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_client_connections_are_closed_but_peer_links_are_not() {
    let cluster = start_with(&["--idle-timeout", "1s"]).await;
    let ep = cluster.endpoints()[0];
    let start = Instant::now();
    let mut native = TcpStream::connect(ep.native).await.unwrap();
    native
        .write_all(&encode_to_bytes::<Msg>(&Frame::hello_client()))
        .await
        .unwrap();
    let mut resp = TcpStream::connect(ep.resp).await.unwrap();
    resp.write_all(b"PING\r\n").await.unwrap();

    let (said, closed) = read_until_closed(&mut native, Duration::from_secs(15)).await;
    let waited = start.elapsed();
    assert!(closed, "idle native connection still open after 15 s");
    assert!(
        waited >= Duration::from_millis(900),
        "closed too early: {waited:?}"
    );
    assert!(matches!(frames(&said).first(), Some(Frame::Welcome { .. })));
    let why = error_in(&said).expect("an error frame says why");
    assert!(why.contains("idle"), "{why}");

    let (said, closed) = read_until_closed(&mut resp, Duration::from_secs(15)).await;
    assert!(closed, "idle RESP connection still open");
    let said = String::from_utf8_lossy(&said);
    assert!(said.starts_with("+PONG\r\n-ERR idle"), "{said}");

    // The replica links to replica 1 have now been idle for twice the
    // timeout: still up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(info_field(&info(ep.resp).await, "connections_timed_out"), 2);
    still_serves(&cluster).await;
}

/// Item 2: a client trickling a request one byte per 100 ms is closed
/// once the read timeout has passed since the request began, on both
/// ports, and its request is never served; so is a connection that never
/// sends anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_and_silent_connections_are_closed() {
    let cluster = start_with(&["--read-timeout", "1s"]).await;
    let ep = cluster.endpoints()[0];
    let mut request = encode_to_bytes::<Msg>(&Frame::hello_client()).to_vec();
    request.extend_from_slice(&encode_to_bytes::<Msg>(&Frame::Request {
        id: 1,
        op: quorumkv_core::OpId::NONE,
        req: Request::Get {
            key: "a-key-long-enough-to-take-a-while".into(),
        },
    }));
    let cases: [(SocketAddr, Vec<u8>); 2] = [
        (ep.native, request),
        (
            ep.resp,
            b"*2\r\n$3\r\nGET\r\n$20\r\nkey-of-twenty-bytes!\r\n".to_vec(),
        ),
    ];
    for (addr, bytes) in cases {
        let start = Instant::now();
        let s = TcpStream::connect(addr).await.unwrap();
        let (mut rd, mut wr) = s.into_split();
        let trickle = tokio::spawn(async move {
            for b in bytes {
                if wr.write_all(&[b]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            std::future::pending::<()>().await;
        });
        let (said, closed) = read_until_closed(&mut rd, Duration::from_secs(10)).await;
        trickle.abort();
        assert!(closed, "slow client on {addr} still served after 10 s");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "took {:?}",
            start.elapsed()
        );
        let text = String::from_utf8_lossy(&said);
        assert!(text.contains("not received whole within 1s"), "{text}");
        assert!(!frames(&said)
            .iter()
            .any(|f| matches!(f, Frame::Response { .. })));
        assert!(!text.contains("$-1") && !text.starts_with('$'), "{text}");
    }
    // Connected, silent.
    let mut s = TcpStream::connect(ep.native).await.unwrap();
    let (said, closed) = read_until_closed(&mut s, Duration::from_secs(10)).await;
    assert!(closed, "silent connection still open");
    assert!(error_in(&said).is_some_and(|m| m.contains("first request")));
}

/// Listeners that accept connections and never answer.
async fn silent_listeners(n: usize) -> (Vec<SocketAddr>, tokio::task::JoinHandle<()>) {
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let addrs = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        let mut accepts: Vec<_> = listeners
            .into_iter()
            .map(|l| {
                tokio::spawn(async move {
                    let mut held = Vec::new();
                    while let Ok((s, _)) = l.accept().await {
                        held.push(s);
                    }
                })
            })
            .collect();
        held.append(&mut accepts);
        for h in held {
            let _ = h.await;
        }
    });
    (addrs, task)
}

/// Item 2: `--timeout` bounds the whole call, connecting included, in both
/// modes, and the error names every endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_timeout_bounds_the_whole_call_against_silent_endpoints() {
    let (addrs, silent) = silent_listeners(3).await;
    let list = addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    for args in [
        vec!["get", "k"],
        vec!["put", "k", "v", "--mode", "proxy"],
        vec!["get", "k", "--mode", "proxy"],
    ] {
        let start = Instant::now();
        let out = tokio::process::Command::new(binary())
            .args(&args)
            .args(["--endpoints", &list, "--timeout", "500ms"])
            .output()
            .await
            .unwrap();
        let took = start.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            took < Duration::from_millis(700),
            "{args:?} took {took:?}: {err}"
        );
        for a in &addrs {
            assert!(
                err.contains(&a.to_string()),
                "{args:?}: {a} not named in: {err}"
            );
        }
    }
    silent.abort();
}

/// Endpoints may be host names (`localhost:PORT`), resolved when connecting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_endpoints_accept_host_names() {
    let cluster = start_with(&[]).await;
    let names: Vec<String> = cluster
        .native_addrs()
        .iter()
        .map(|a| format!("localhost:{}", a.port()))
        .collect();
    let list = names.join(",");
    for mode in ["direct", "proxy"] {
        common::run_ok(std::process::Command::new(binary()).args([
            "put",
            "host",
            mode,
            "--mode",
            mode,
            "--endpoints",
            &list,
        ]));
    }
    let out = std::process::Command::new(binary())
        .args(["get", "host", "--endpoints", &list])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "proxy\n");
    let out = std::process::Command::new(binary())
        .args([
            "get",
            "host",
            "--endpoints",
            "no-such-host.invalid:7001",
            "--timeout",
            "5s",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no-such-host.invalid:7001") && err.contains("resolve"),
        "{err}"
    );
}

/// One flood: `n` connections to both client ports, each leaving a partial
/// request behind, then all dropped at once (as a client process exiting).
async fn flood(ep: quorumkv_node::local::Endpoint, n: usize) {
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let (addr, bytes): (SocketAddr, &[u8]) = if i % 2 == 0 {
            (ep.native, &[0, 0, 16, 0, 1, 2, 3])
        } else {
            (ep.resp, b"*2\r\n$3\r\nSET\r\n$1\r\nk\r\n$4096\r\nxx")
        };
        if let Ok(mut s) = TcpStream::connect(addr).await {
            let _ = s.write_all(bytes).await;
            conns.push(s);
        }
    }
    assert!(
        conns.len() > n * 9 / 10,
        "only {} of {n} connected",
        conns.len()
    );
    drop(conns);
}

/// Item 3: after each of 5 floods of 2,000 connections the replica's
/// sockets go back to what it had before (listeners and replica links),
/// and its RSS ends within 2× of its baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_connections_leave_nothing_behind() {
    let cluster = start_with(&["--read-timeout", "2s", "--idle-timeout", "3s"]).await;
    let pid = cluster.pid(1).unwrap();
    let ep = cluster.endpoints()[0];
    eventually(Duration::from_secs(10), "replica links up", || async {
        let text = info(ep.resp).await;
        text.contains("peer_2:up") && text.contains("peer_3:up")
    })
    .await;
    // Listeners and replica links (the INFO connection may still be closing).
    let mut quiet_sockets = 0;
    eventually(Duration::from_secs(5), "a steady socket count", || {
        let before = quiet_sockets;
        quiet_sockets = sockets(pid);
        async move { before == quiet_sockets }
    })
    .await;
    let base = status_bytes(pid, "VmRSS");
    for round in 1..=5 {
        flood(ep, 2000).await;
        eventually(
            Duration::from_secs(30),
            &format!("flood {round}: sockets left open"),
            || async { sockets(pid) <= quiet_sockets },
        )
        .await;
        eprintln!(
            "flood {round}: RSS {} KiB (baseline {} KiB)",
            status_bytes(pid, "VmRSS") / 1024,
            base / 1024
        );
    }
    // Freed memory goes back to the OS within a few seconds.
    eventually(
        Duration::from_secs(10),
        &format!("RSS within 2× of its baseline of {} KiB", base / 1024),
        || async { status_bytes(pid, "VmRSS") < 2 * base },
    )
    .await;
    assert_eq!(info_field(&info(ep.resp).await, "native_buffer_bytes"), 0);
    still_serves(&cluster).await;
}
