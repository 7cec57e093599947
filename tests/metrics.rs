//! The Prometheus endpoint of a replica (`--metrics ADDR`).

mod common;

use common::{binary, http_get};
use quorumkv_node::client::{Client, ClientConfig, ClientMode};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test]
async fn metrics_count_what_the_replica_did() {
    let (native, metrics) = (free_addr(), free_addr());
    let mut child = tokio::process::Command::new(binary())
        .args([
            "server",
            "--id",
            "1",
            "--listen",
            &native.to_string(),
            "--metrics",
            &metrics.to_string(),
            "--durability",
            "memory",
        ])
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let cfg = ClientConfig {
        mode: ClientMode::Proxy,
        ..Default::default()
    };
    let mut client = None;
    for _ in 0..200 {
        if let Ok(c) = Client::connect(vec![native], cfg.clone()).await {
            client = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let client = client.expect("server came up");
    client.put("a", "1").await.unwrap();
    client.put("b", "2").await.unwrap();
    assert_eq!(client.get("a").await.unwrap().as_deref(), Some(&b"1"[..]));

    let text = http_get(metrics, "/metrics").await;
    assert!(text.starts_with("HTTP/1.0 200 OK"), "{text}");
    assert!(
        text.contains("quorumkv_client_requests_total{replica=\"1\"} 3\n"),
        "{text}"
    );
    assert!(
        text.contains("quorumkv_abd_ops_completed_total{replica=\"1\"} 3\n"),
        "{text}"
    );
    assert!(
        text.contains("quorumkv_abd_replica_keys{replica=\"1\"} 2\n"),
        "{text}"
    );
    assert_eq!(
        text.matches("# TYPE quorumkv_client_requests_total counter")
            .count(),
        1
    );
    // The native port's budget: its limit, and nothing held by an idle client.
    assert!(
        text.contains(&format!(
            "quorumkv_buffer_limit_bytes{{replica=\"1\",port=\"native\"}} {}\n",
            quorumkv_node::server::DEFAULT_BUFFER_BUDGET
        )),
        "{text}"
    );
    let held: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("quorumkv_buffer_bytes{replica=\"1\",port=\"native\"} "))
        .and_then(|v| v.parse().ok())
        .expect("buffer_bytes of the native port");
    assert!(held <= quorumkv_node::net::MIN_READ_BUF, "{held}");
    assert!(text.contains("quorumkv_connections_timed_out_total{replica=\"1\"} 0\n"));
    // Every request answered is in the latency histogram.
    assert!(
        text.contains(
            "quorumkv_client_request_duration_seconds_bucket{replica=\"1\",le=\"+Inf\"} 3\n"
        ),
        "{text}"
    );
    assert!(text.contains("# TYPE quorumkv_client_request_duration_seconds histogram\n"));
    let missing = http_get(metrics, "/other").await;
    assert!(missing.starts_with("HTTP/1.0 404"), "{missing}");
    child.kill().await.unwrap();
}

/// Starts replica 1 with the metrics port, JSON logs on stderr and the
/// given peers (none: a cluster of one).
fn spawn_replica(
    native: std::net::SocketAddr,
    metrics: std::net::SocketAddr,
    peers: &[String],
) -> tokio::process::Child {
    let mut args = vec![
        "server".to_string(),
        "--id".into(),
        "1".into(),
        "--listen".into(),
        native.to_string(),
        "--metrics".into(),
        metrics.to_string(),
        "--durability".into(),
        "memory".into(),
        "--log-format".into(),
        "json".into(),
    ];
    for p in peers {
        args.extend(["--peer".to_string(), p.clone()]);
    }
    tokio::process::Command::new(binary())
        .args(args)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// GET `path` until the port answers (the replica is starting).
async fn http_get_when_up(addr: std::net::SocketAddr, path: &str) -> String {
    for _ in 0..250 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return http_get(addr, path).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("metrics port {addr} never opened");
}

#[tokio::test]
async fn probes_say_alive_and_whether_a_quorum_is_reached() {
    // Replica 1 of 3 whose peers are not running: alive, not ready.
    let (native, metrics) = (free_addr(), free_addr());
    let peers = [format!("2={}", free_addr()), format!("3={}", free_addr())];
    let mut lonely = spawn_replica(native, metrics, &peers);
    let alive = http_get_when_up(metrics, "/healthz").await;
    assert!(alive.starts_with("HTTP/1.0 200 OK"), "{alive}");
    assert!(
        alive.ends_with("ok: replica 1 (abd), role replica\n"),
        "{alive}"
    );
    let ready = http_get(metrics, "/readyz").await;
    assert!(ready.starts_with("HTTP/1.0 503"), "{ready}");
    assert!(
        ready.contains("reaches 1 of 3 replicas (no quorum)"),
        "{ready}"
    );
    let text = http_get(metrics, "/metrics").await;
    for gauge in ["members 3", "peers_up 0", "quorum_reachable 0", "ready 0"] {
        let (name, v) = gauge.split_once(' ').unwrap();
        let line = format!("quorumkv_{name}{{replica=\"1\"}} {v}\n");
        assert!(text.contains(&line), "{line} in {text}");
    }
    // HEAD: the status line without a body.
    let mut s = tokio::net::TcpStream::connect(metrics).await.unwrap();
    s.write_all(b"HEAD /healthz HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut head = String::new();
    s.read_to_string(&mut head).await.unwrap();
    assert!(
        head.starts_with("HTTP/1.0 200") && head.ends_with("\r\n\r\n"),
        "{head}"
    );
    // Its log is JSON, one object per line.
    lonely.kill().await.unwrap();
    let mut err = String::new();
    lonely
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .await
        .unwrap();
    let first = err.lines().next().expect("a log line");
    let v: serde_json::Value = serde_json::from_str(first).expect(first);
    assert_eq!(v["who"], "replica 1", "{first}");
    assert!(
        v["level"].is_string() && v["message"].is_string(),
        "{first}"
    );

    // A cluster of one reaches its quorum: ready.
    let (native, metrics) = (free_addr(), free_addr());
    let mut alone = spawn_replica(native, metrics, &[]);
    let ready = http_get_when_up(metrics, "/readyz").await;
    assert!(ready.starts_with("HTTP/1.0 200 OK"), "{ready}");
    assert!(
        ready.ends_with("ready: replica 1 (abd), role replica\n"),
        "{ready}"
    );
    let text = http_get(metrics, "/metrics").await;
    assert!(text.contains("quorumkv_ready{replica=\"1\"} 1\n"), "{text}");
    alone.kill().await.unwrap();
}

/// Runs promtool (Debian's `prometheus` package, installed by
/// scripts/deps.sh) with `args` in `dir`, `stdin` on its input.
fn promtool(dir: &std::path::Path, args: &[&str], stdin: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (scripts/deps.sh installs the prometheus package)");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

#[tokio::test]
async fn metrics_pass_promtool_and_the_shipped_alerts_hold() {
    // The exposition format, linted, with every kind of metric present.
    let (native, metrics) = (free_addr(), free_addr());
    let mut child = spawn_replica(native, metrics, &[]);
    let text = http_get_when_up(metrics, "/metrics").await;
    child.kill().await.unwrap();
    let body = text.split_once("\r\n\r\n").expect("an HTTP answer").1;
    assert!(body.contains("_bucket{"), "{body}");
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let lint = promtool(here, &["check", "metrics"], body.as_bytes());
    assert!(lint.status.success(), "promtool check metrics: {lint:?}");
    // The alerting rules parse, and fire (only) when their tests say.
    let rules = here.join("deploy/prometheus");
    let check = promtool(&rules, &["check", "rules", "alerts.yml"], b"");
    assert!(check.status.success(), "{check:?}");
    let test = promtool(&rules, &["test", "rules", "alerts_test.yml"], b"");
    assert!(test.status.success(), "{test:?}");
    // Every query of the alerts and of the dashboard (JSON) names
    // quorumkv metrics that exist (or Prometheus' own `up`).
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(here.join("deploy/grafana/quorumkv.json")).unwrap(),
    )
    .unwrap();
    let alerts = std::fs::read_to_string(rules.join("alerts.yml")).unwrap();
    let alert_exprs = (alerts.lines()).filter_map(|l| l.trim().strip_prefix("expr: "));
    let panel_exprs = (dash["panels"].as_array().unwrap().iter())
        .flat_map(|p| p["targets"].as_array().unwrap())
        .map(|t| t["expr"].as_str().unwrap());
    for expr in alert_exprs.chain(panel_exprs) {
        let names: Vec<&str> = expr
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("quorumkv_"))
            .collect();
        assert!(!names.is_empty() || expr.starts_with("up{"), "{expr}");
        for n in names {
            // Zab's own counters are absent from an ABD replica.
            let known = body.contains(&format!("\n{n}{{"))
                || body.contains(&format!("\n{n}_bucket{{"))
                || n.starts_with("quorumkv_zab_");
            assert!(known, "{n} in {expr} is not a metric");
        }
    }
}

/// GET `path` until the answer starts with `status`, for up to 10 s.
async fn http_until(addr: std::net::SocketAddr, path: &str, status: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = http_get(addr, path).await;
        if text.starts_with(status) {
            return text;
        }
        assert!(tokio::time::Instant::now() < deadline, "{path}: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_cluster_with_metrics_turns_unready_when_the_quorum_goes() {
    let cfg = quorumkv_node::local::LocalClusterConfig {
        metrics: true,
        ..common::cluster_cfg("zab", 3, &[])
    };
    let mut cluster = quorumkv_node::local::LocalCluster::start(cfg)
        .await
        .unwrap();
    let ports: Vec<_> = (cluster.endpoints().iter())
        .map(|e| e.metrics.expect("a metrics port"))
        .collect();
    for m in &ports {
        http_until(*m, "/readyz", "HTTP/1.0 200").await;
    }
    cluster.kill(2).await.unwrap();
    cluster.kill(3).await.unwrap();
    let alone = http_until(ports[0], "/readyz", "HTTP/1.0 503").await;
    assert!(alone.contains("no quorum"), "{alone}");
    http_until(ports[0], "/healthz", "HTTP/1.0 200").await;
}
