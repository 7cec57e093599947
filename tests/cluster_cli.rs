//! `quorumkv cluster` as a user runs it: endpoints, a `ready` line, the
//! CLI client against it, and no orphans after SIGTERM or SIGKILL.

mod common;

use common::binary;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn pid_alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; look at its state.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.split_whitespace().nth(2).is_none_or(|st| st != "Z"),
        Err(_) => false,
    }
}

fn free_base() -> u16 {
    // Find a base where P+1..P+3 and P+101..P+103 are free.
    for _ in 0..50 {
        let base = 20000 + (rand_u16() % 20000);
        let ok = [1, 2, 3, 101, 102, 103]
            .iter()
            .all(|o| std::net::TcpListener::bind(("127.0.0.1", base + o)).is_ok());
        if ok {
            return base;
        }
    }
    panic!("no free port range");
}

fn rand_u16() -> u16 {
    (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        ^ std::process::id()) as u16
}

/// Start `quorumkv cluster`, wait for `ready`, return the child and replica pids.
/// The callers wait for the child.
#[allow(clippy::zombie_processes)]
fn start(base: u16) -> (std::process::Child, Vec<u32>, String) {
    let mut child = Command::new(binary())
        .args([
            "cluster",
            "--replicas",
            "3",
            "--port-base",
            &base.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut pids = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "no ready line");
        let line = lines.next().expect("cluster printed ready").unwrap();
        if let Some(rest) = line.trim().strip_prefix("replica ") {
            let pid = rest.rsplit(' ').next().unwrap().parse().unwrap();
            pids.push(pid);
        }
        if let Some(eps) = line.strip_prefix("ready ") {
            return (child, pids, eps.to_string());
        }
    }
}

#[test]
fn cluster_serves_the_cli_and_leaves_no_orphans() {
    let base = free_base();
    let (mut child, pids, eps) = start(base);
    assert_eq!(pids.len(), 3);
    assert_eq!(
        eps,
        format!(
            "127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
            base + 1,
            base + 2,
            base + 3
        )
    );
    let q = |args: &[&str]| {
        Command::new(binary())
            .args(args)
            .args(["--endpoints", &eps])
            .output()
            .unwrap()
    };
    assert!(q(&["put", "colour", "blue"]).status.success());
    let got = q(&["get", "colour"]);
    assert_eq!(String::from_utf8_lossy(&got.stdout), "blue\n");
    let missing = q(&["get", "nothing-here"]);
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&missing.stderr).trim(), "(nil)");

    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&p| pid_alive(p)) {
        assert!(
            Instant::now() < deadline,
            "replicas outlived the cluster after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn replicas_exit_when_the_cluster_process_is_killed() {
    let base = free_base();
    let (mut child, pids, _) = start(base);
    child.kill().unwrap(); // SIGKILL: no handler runs in the parent
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&p| pid_alive(p)) {
        assert!(
            Instant::now() < deadline,
            "orphaned replicas after SIGKILL of the cluster"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
