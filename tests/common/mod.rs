//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod java;
pub mod zookeeper;

use quorumkv_node::client::{ClientConfig, ClientMode};
use quorumkv_node::local::{LocalCluster, LocalClusterConfig};
use quorumkv_node::storage::Durability;
use std::path::PathBuf;
use std::time::Duration;

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_quorumkv"))
}

/// `quorumkv ARGS`, the ambient endpoint variables cleared.
pub fn qkv(args: &[&str]) -> std::process::Output {
    std::process::Command::new(binary())
        .args(args)
        .env_remove("QUORUMKV_ENDPOINTS")
        .env_remove("QUORUMKV_CLUSTER")
        .output()
        .unwrap()
}

/// A local ABD cluster on free ports, with a short operation timeout so
/// no-quorum tests finish quickly.
pub async fn start_cluster(replicas: usize) -> LocalCluster {
    start_cluster_with(replicas, Durability::Memory, Duration::from_secs(1)).await
}

/// A local ABD cluster of `durability` whose servers time operations out
/// after `op_timeout`.
pub async fn start_cluster_with(
    replicas: usize,
    durability: Durability,
    op_timeout: Duration,
) -> LocalCluster {
    let op_timeout = format!("{}ms", op_timeout.as_millis());
    let cfg = LocalClusterConfig {
        durability,
        ..cluster_cfg("abd", replicas, &["--op-timeout", &op_timeout])
    };
    LocalCluster::start(cfg)
        .await
        .expect("local cluster starts")
}

/// A local cluster of `replicas` replicas of `protocol`, of the built
/// binary, each started with `server_args` too; 60 s to come up.
pub fn cluster_cfg(protocol: &str, replicas: usize, server_args: &[&str]) -> LocalClusterConfig {
    LocalClusterConfig {
        protocol: protocol.parse().expect("a registered protocol"),
        replicas,
        binary: binary(),
        server_args: server_args.iter().map(|a| a.to_string()).collect(),
        ready_timeout: Duration::from_secs(60),
        ..Default::default()
    }
}

/// Run `cmd`, asserting that it succeeds (else its stderr is said).
pub fn run_ok(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A tool we need from the system (e.g. redis-cli). In CI it must exist:
/// `.ci/run` installs it, and a missing tool fails the test rather than
/// skipping it silently.
pub fn require_tool(name: &str) -> bool {
    let found = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is required in CI (.ci/run installs it)"
        );
        eprintln!("SKIPPED: {name} not installed");
    }
    found
}

/// `GET path` on a metrics port: the whole answer (status line, headers, body).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    text
}

/// A fresh directory for one test, `qkv-NAME-<pid>` in the temporary
/// directory (tests of a file may share a process).
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("qkv-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `DIR/users.toml` with `(name, role, password)` each, written by
/// `quorumkv user add`.
pub fn users_file(dir: &std::path::Path, users: &[(&str, &str, &str)]) -> PathBuf {
    let file = dir.join("users.toml");
    for (name, role, password) in users {
        let out = std::process::Command::new(binary())
            .args(["user", "add", name, "--role", role, "--file"])
            .arg(&file)
            .env("QUORUMKV_PASSWORD", password)
            .output()
            .expect("quorumkv user runs");
        assert!(out.status.success(), "{out:?}");
    }
    file
}

/// A proxy-mode client of `addrs` logged in as `user`.
pub async fn client_as(
    addrs: Vec<std::net::SocketAddr>,
    user: &str,
    password: &str,
) -> quorumkv_node::client::Client {
    let cfg = ClientConfig {
        credentials: Some(quorumkv_node::client::Credentials {
            user: user.into(),
            password: password.into(),
        }),
        ..client_cfg(ClientMode::Proxy, Duration::from_secs(5))
    };
    quorumkv_node::client::Client::connect(addrs, cfg)
        .await
        .unwrap()
}

/// A client configuration of `mode` with operations timing out after `op_timeout`.
pub fn client_cfg(mode: ClientMode, op_timeout: Duration) -> ClientConfig {
    ClientConfig {
        mode,
        op_timeout,
        ..Default::default()
    }
}

/// `quorumkv zk ARGS --endpoints <every replica> --timeout 5s`: the exit
/// code, stdout and stderr.
pub fn zk_cli(
    cluster: &quorumkv_node::local::LocalCluster,
    args: &[&str],
) -> (Option<i32>, String, String) {
    let eps = (cluster.native_addrs().iter())
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let out = std::process::Command::new(binary())
        .arg("zk")
        .args(args)
        .args(["--endpoints", &eps, "--timeout", "5s"])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A local three-replica Zab cluster of the built binary, each replica
/// started with `server_args` too.
pub async fn zab_cluster_with(server_args: Vec<String>) -> LocalCluster {
    let cfg = LocalClusterConfig {
        server_args,
        ..cluster_cfg("zab", 3, &[])
    };
    LocalCluster::start(cfg)
        .await
        .expect("local cluster starts")
}
