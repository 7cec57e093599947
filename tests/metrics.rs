//! The Prometheus endpoint of a replica (`--metrics ADDR`).

mod common;

use common::binary;
use quorumkv_node::client::{Client, ClientConfig, ClientMode};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    text
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
    let missing = http_get(metrics, "/other").await;
    assert!(missing.starts_with("HTTP/1.0 404"), "{missing}");
    child.kill().await.unwrap();
}
