//! RESP on the second port, through the real redis-cli and redis-benchmark.

mod common;

use common::{require_tool, start_cluster};
use std::process::Command;

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_works_against_every_replica() {
    if !require_tool("redis-cli") {
        return;
    }
    let cluster = start_cluster(3).await;
    let ports: Vec<u16> = cluster.endpoints().iter().map(|e| e.resp.port()).collect();
    assert_eq!(cli(ports[0], &["PING"]), "PONG");
    assert_eq!(cli(ports[0], &["SET", "greeting", "hello world"]), "OK");
    assert_eq!(cli(ports[1], &["GET", "greeting"]), "hello world");
    assert_eq!(cli(ports[2], &["DEL", "greeting"]), "1");
    assert_eq!(cli(ports[0], &["GET", "greeting"]), "");
    let info = cli(ports[1], &["INFO"]);
    assert!(info.contains("protocol:abd"), "{info}");
    assert!(info.contains("replica_id:2"), "{info}");
    assert!(
        info.contains("peer_1:up") && info.contains("peer_3:up"),
        "{info}"
    );
    let err = cli(ports[0], &["LPUSH", "l", "x"]);
    assert!(err.contains("unknown command"), "{err}");
    let err = cli(ports[0], &["FLUSHALL"]);
    assert!(err.contains("not supported"), "{err}");
    let err = cli(ports[0], &["GET"]);
    assert!(err.contains("wrong number of arguments"), "{err}");
    // Pipelined commands come back in order.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "printf 'SET a 1\\r\\nSET b 2\\r\\nGET a\\r\\nGET b\\r\\nPING\\r\\n' | redis-cli -p {}",
            ports[0]
        ))
        .output()
        .unwrap();
    let lines: Vec<_> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines, vec!["OK", "OK", "1", "2", "PONG"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_common_tools_send() {
    if !require_tool("redis-cli") {
        return;
    }
    let cluster = start_cluster(3).await;
    let p: Vec<u16> = cluster.endpoints().iter().map(|e| e.resp.port()).collect();
    // HELLO 2: the RESP2 server description; HELLO 3 is refused.
    let hello = cli(p[0], &["HELLO", "2"]);
    assert!(
        hello.contains("proto\n2") && hello.contains("version\n7.0.0"),
        "{hello}"
    );
    assert!(cli(p[0], &["HELLO", "3"]).contains("NOPROTO"));
    // MSET through one replica, MGET / EXISTS through others.
    assert_eq!(
        cli(p[0], &["MSET", "k1", "v1", "k2", "v2", "k1", "last"]),
        "OK"
    );
    assert_eq!(cli(p[1], &["MGET", "k1", "missing", "k2"]), "last\n\nv2");
    assert_eq!(cli(p[2], &["EXISTS", "k1", "missing", "k2", "k2"]), "3");
    assert_eq!(cli(p[2], &["EXISTS", "missing"]), "0");
    assert!(cli(p[0], &["MSET", "k1"]).contains("wrong number of arguments"));
    // DBSIZE is refused with the reason, not answered dishonestly.
    let dbsize = cli(p[0], &["DBSIZE"]);
    assert!(dbsize.contains("DBSIZE is not supported"), "{dbsize}");
    // COMMAND lists what is dispatched; DOCS describes it for hints.
    let count: usize = cli(p[0], &["COMMAND", "COUNT"]).parse().unwrap();
    assert!(count >= 15, "{count}");
    let docs = cli(p[0], &["COMMAND", "DOCS", "mget"]);
    assert!(
        docs.starts_with("mget\nsummary\n") && docs.contains("arguments"),
        "{docs}"
    );
    let info = cli(p[0], &["COMMAND", "INFO", "get"]);
    assert!(info.starts_with("get\n2\n"), "{info}");
    // INFO server carries the fields tools parse; a section filters.
    let server = cli(p[1], &["INFO", "server"]);
    for field in [
        "redis_version:7.0.0",
        "redis_mode:standalone",
        "tcp_port:",
        "uptime_in_days:",
        "replica_id:2",
    ] {
        assert!(server.contains(field), "{field} missing in {server}");
    }
    assert!(
        !server.contains("peer_1"),
        "only the server section: {server}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_benchmark_completes_get_and_set() {
    if !require_tool("redis-benchmark") {
        return;
    }
    let cluster = start_cluster(3).await;
    let port = cluster.endpoints()[0].resp.port().to_string();
    let out = Command::new("redis-benchmark")
        .args(["-p", &port, "-t", "get,set", "-n", "2000", "-c", "8", "-q"])
        .output()
        .expect("redis-benchmark runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for t in ["SET:", "GET:"] {
        let line = text
            .rsplit(['\r', '\n'])
            .find(|l| l.starts_with(t))
            .unwrap_or_else(|| panic!("no {t} in {text}"));
        assert!(line.contains("requests per second"), "{line}");
    }
}
