//! The command line as a user runs it: values from stdin and files (binary
//! too), endpoints from host names, the environment or a cluster file,
//! `endpoints status`, plain-text logs when piped, and what
//! `--exit-on-stdin-eof` does.

mod common;

use common::{binary, start_cluster};
use quorumkv_node::local::LocalCluster;
use quorumkv_node::version::{RELEASE, STORAGE_FORMAT, WIRE_MAJOR, WIRE_MINOR};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `quorumkv ARGS` with `env` set and `stdin` piped in; the ambient
/// endpoint variables are cleared so only what the test gives counts.
fn qkv(args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Output {
    let mut child = Command::new(binary())
        .args(args)
        .env_remove("QUORUMKV_ENDPOINTS")
        .env_remove("QUORUMKV_CLUSTER")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// The cluster's endpoints written with the host name `localhost`.
fn by_name(cluster: &LocalCluster) -> String {
    let eps: Vec<String> = cluster
        .endpoints()
        .iter()
        .map(|e| format!("localhost:{}", e.native.port()))
        .collect();
    eps.join(",")
}

fn every_byte() -> Vec<u8> {
    let mut v: Vec<u8> = (0..=255u8).collect();
    v.extend_from_slice(b"\r\n\0trailing newline\n");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_takes_binary_values_from_stdin_files_and_arguments() {
    let cluster = start_cluster(3).await;
    let eps = by_name(&cluster);
    let env = [("QUORUMKV_ENDPOINTS", eps.as_str())];
    let value = every_byte();

    let put = qkv(&["put", "bin", "-"], &env, &value);
    assert!(put.status.success(), "{put:?}");
    let got = qkv(&["get", "bin", "--raw"], &env, b"");
    assert_eq!(got.stdout, value, "stdin value round-trips byte for byte");

    let file = cluster.dir().join("value.bin");
    std::fs::write(&file, value.iter().rev().copied().collect::<Vec<_>>()).unwrap();
    let put = qkv(&["put", "bin", "--file", file.to_str().unwrap()], &env, b"");
    assert!(put.status.success(), "{put:?}");
    let got = qkv(&["get", "bin", "--raw"], &env, b"");
    assert_eq!(got.stdout, std::fs::read(&file).unwrap());

    // A value argument need not be UTF-8.
    use std::os::unix::ffi::OsStrExt;
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9\xff");
    let out = Command::new(binary())
        .args(["put", "-e", &eps, "odd"])
        .arg(odd)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let got = qkv(&["get", "odd"], &env, b"");
    assert_eq!(
        got.stdout, b"caf\xe9\xff\n",
        "without --raw a newline follows"
    );

    let none = qkv(&["put", "k"], &env, b"");
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("required"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_come_from_a_cluster_file_or_the_environment() {
    let cluster = start_cluster(3).await;
    let file = cluster.dir().join("mine.toml");
    std::fs::write(&file, cluster.cluster_file().to_toml()).unwrap();
    let path = file.to_str().unwrap();

    let put = qkv(&["put", "colour", "green", "--cluster", path], &[], b"");
    assert!(put.status.success(), "{put:?}");
    let got = qkv(&["get", "colour"], &[("QUORUMKV_CLUSTER", path)], b"");
    assert_eq!(got.stdout, b"green\n", "{got:?}");
    let eps = by_name(&cluster);
    let got = qkv(&["get", "colour"], &[("QUORUMKV_ENDPOINTS", &eps)], b"");
    assert_eq!(got.stdout, b"green\n", "{got:?}");

    // --endpoints and --cluster together are a usage error.
    let both = qkv(&["get", "c", "--cluster", path, "-e", &eps], &[], b"");
    assert_eq!(both.status.code(), Some(2));
    // A missing cluster file is one clear line.
    let missing = qkv(&["get", "c", "--cluster", "/nonexistent.toml"], &[], b"");
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("cannot read cluster file /nonexistent.toml"),
        "{err}"
    );
}

/// The data rows of `endpoints status`, split on whitespace.
fn status_rows(out: &Output) -> Vec<Vec<String>> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_status_shows_each_replica_and_its_peers() {
    let mut cluster = start_cluster(3).await;
    let eps = by_name(&cluster);
    // Replicas answer before every peer link is up: wait until all are.
    let deadline = Instant::now() + Duration::from_secs(10);
    let out = loop {
        let out = qkv(&["endpoints", "status", "-e", &eps], &[], b"");
        assert!(out.status.success(), "{out:?}");
        if status_rows(&out)
            .iter()
            .all(|r| r.get(6).map(String::as_str) == Some("-"))
        {
            break out;
        }
        assert!(Instant::now() < deadline, "links never all up: {out:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let head = String::from_utf8_lossy(&out.stdout);
    assert!(head.starts_with("ENDPOINT  "), "{head}");
    let rows = status_rows(&out);
    assert_eq!(rows.len(), 3, "{head}");
    for (i, r) in rows.iter().enumerate() {
        let id = (i + 1).to_string();
        assert_eq!(r[1], id);
        assert_eq!(&r[2..4], ["abd", "replica"]);
        assert_eq!(r[6], "-", "no peer down: {head}");
        assert_eq!(r[7], "yes");
        assert_eq!(r[9], format!("{WIRE_MAJOR}.{WIRE_MINOR}"), "{head}");
    }
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("versions"),
        "{out:?}"
    );
    assert_eq!(rows[0][5], "2,3");
    let health = |code: i32| {
        let out = qkv(&["endpoints", "health", "-e", &eps], &[], b"");
        assert_eq!(out.status.code(), Some(code), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let all_up = health(0);
    assert_eq!(all_up.matches(" is healthy: ").count(), 3, "{all_up}");
    assert!(
        all_up.contains("replica 2 (abd), role replica, 2 of 2 peers up"),
        "{all_up}"
    );

    cluster.kill(3).await.unwrap();
    let one_down = health(1);
    let gone = eps.split(',').nth(2).unwrap();
    assert_eq!(one_down.matches(" is healthy: ").count(), 2, "{one_down}");
    assert!(
        one_down.contains(&format!("{gone} is unhealthy: ")),
        "{one_down}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = qkv(&["endpoints", "status", "-e", &eps], &[], b"");
        assert_eq!(out.status.code(), Some(2), "replica 3 is gone");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&eps.split(',').nth(2).unwrap().to_string()),
            "{err}"
        );
        let rows = status_rows(&out);
        assert_eq!(rows.len(), 2);
        if rows[0][6] == "3" {
            assert_eq!(rows[0][5], "2");
            break;
        }
        assert!(Instant::now() < deadline, "replica 1 never saw 3 go down");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The same as JSON: an object per endpoint, the error for the one gone.
    let out = qkv(&["endpoints", "status", "-e", &eps, "--json"], &[], b"");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let all = v.as_array().expect("an array");
    assert_eq!(all.len(), 3, "{v}");
    assert_eq!(all[0]["id"], 1, "{v}");
    assert_eq!(all[0]["protocol"], "abd", "{v}");
    assert_eq!(all[0]["peers_down"], serde_json::json!([3]), "{v}");
    assert_eq!(all[0]["quorum_reachable"], true, "{v}");
    assert!(all[0]["counters"].is_object(), "{v}");
    assert_eq!(
        all[0]["wire"]["major"],
        quorumkv_node::version::WIRE_MAJOR,
        "{v}"
    );
    assert_eq!(all[2]["endpoint"], eps.split(',').nth(2).unwrap(), "{v}");
    assert!(
        all[2]["error"].is_string() && all[2].get("id").is_none(),
        "{v}"
    );
}

#[test]
fn version_and_dash_dash_version_name_the_release_wire_and_storage_format() {
    for args in [&["version"][..], &["--version"][..]] {
        let out = qkv(args, &[], b"");
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with(&format!("quorumkv {RELEASE}\n")), "{text}");
        let wire = format!("wire protocol {WIRE_MAJOR}.{WIRE_MINOR}");
        assert!(text.contains(&wire), "{text}");
        let storage = format!("storage format {STORAGE_FORMAT}");
        assert!(text.contains(&storage), "{text}");
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A one-replica `quorumkv server` with stderr piped to us.
fn server(extra: &[&str], stdin: Stdio) -> (Child, u16) {
    let port = free_port();
    let child = Command::new(binary())
        .args([
            "server",
            "--id",
            "1",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--durability",
            "memory",
        ])
        .args(extra)
        .env_remove("QUORUMKV_LOG")
        .stdin(stdin)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, port)
}

/// Read stderr lines until one contains `until`; returns them all.
fn lines_until(child: &mut Child, until: &str) -> (Vec<String>, impl BufRead) {
    let mut rd = BufReader::new(child.stderr.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        assert!(rd.read_line(&mut l).unwrap() > 0, "stderr ended: {lines:?}");
        lines.push(l.trim_end().to_string());
        if l.contains(until) {
            return (lines, rd);
        }
    }
}

#[test]
fn piped_logs_are_plain_and_name_the_replica() {
    let (mut child, _) = server(&[], Stdio::null());
    let (lines, _) = lines_until(&mut child, "replica started");
    child.kill().unwrap();
    child.wait().unwrap();
    for l in &lines {
        assert!(!l.contains('\u{1b}'), "ANSI escape in a piped log: {l:?}");
        assert!(
            l.starts_with("replica 1 "),
            "line does not name the replica: {l:?}"
        );
    }
}

#[test]
fn exit_on_stdin_eof_says_why_and_ignores_a_non_pipe() {
    // Started by a parent through a pipe: closing it stops the replica, which says why.
    let (mut child, _) = server(&["--exit-on-stdin-eof"], Stdio::piped());
    let (_, mut rest) = lines_until(&mut child, "replica started");
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let mut tail = String::new();
    rest.read_to_string(&mut tail).unwrap();
    assert!(
        tail.contains("standard input closed") && tail.contains("--exit-on-stdin-eof"),
        "exit not explained: {tail:?}"
    );

    // Copied from `ps` and run with stdin from /dev/null: it keeps running.
    let (mut child, port) = server(&["--exit-on-stdin-eof"], Stdio::null());
    let (lines, _rest) = lines_until(&mut child, "ignoring --exit-on-stdin-eof");
    assert!(
        lines.iter().any(|l| l.contains("replica started")),
        "{lines:?}"
    );
    let ep = format!("127.0.0.1:{port}");
    let status = qkv(&["endpoints", "status", "-e", &ep], &[], b"");
    assert!(status.status.success(), "replica stayed up: {status:?}");
    assert!(child.try_wait().unwrap().is_none());
    child.kill().unwrap();
    child.wait().unwrap();
}

/// What `sim --help` says about `--durability memory` is what a sweep shows:
/// safe with recovery, caught by the checker without it.
#[test]
fn sim_help_on_memory_durability_matches_a_sweep() {
    let help = qkv(&["sim", "--help"], &[], b"");
    let text = String::from_utf8_lossy(&help.stdout).replace(char::is_whitespace, " ");
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.contains("recovers from f+1 live peers"), "{text}");
    assert!(text.contains("abd-no-recovery"), "{text}");
    let sweep = qkv(
        &[
            "sim",
            "--durability",
            "memory",
            "--seeds",
            "0..40",
            "--no-progress",
        ],
        &[],
        b"",
    );
    assert!(
        sweep.status.success(),
        "memory durability sweep fails: {sweep:?}"
    );
    let bug = [
        "sim",
        "--durability",
        "memory",
        "--faults",
        "crash",
        "--inject-bug",
        "abd-no-recovery",
        "--seeds",
        "0..200",
        "--expect-failure",
        "--max-failures",
        "1",
        "--no-progress",
    ];
    let caught = qkv(&bug, &[], b"");
    assert!(
        caught.status.success(),
        "no seed failed without recovery: {caught:?}"
    );
}

/// `verify` from the command line: a clean bounded run exits 0 and says
/// so; an injected bug is found (exit 1) with a replay command, and that
/// command reproduces the same violation.
#[test]
fn verify_finds_a_bug_and_its_replay_command_reproduces_it() {
    let scope = [
        "--depth",
        "14",
        "--crashes",
        "0",
        "--losses",
        "0",
        "--dups",
        "0",
    ];
    let clean = qkv(
        &[
            &["verify", "--protocol", "lease-lock"][..],
            &scope,
            &["--timers", "0"],
        ]
        .concat(),
        &[],
        b"",
    );
    let out = String::from_utf8_lossy(&clean.stdout);
    assert!(clean.status.success(), "{clean:?}");
    assert!(out.contains("no violation found"), "{out}");
    let bug = [
        &["verify", "--protocol", "lease-lock"][..],
        &scope,
        &["--timers", "0", "--bug", "lease-lock-minority-quorum"],
    ]
    .concat();
    let found = qkv(&bug, &[], b"");
    let out = String::from_utf8_lossy(&found.stdout).to_string();
    assert_eq!(found.status.code(), Some(1), "{out}");
    assert!(out.contains("one holder per key"), "{out}");
    let trace = (out.lines())
        .find_map(|l| {
            l.split_once("--replay '")
                .map(|(_, t)| t.trim_end_matches('\''))
        })
        .unwrap_or_else(|| panic!("a replay command: {out}"));
    let again = qkv(&[&bug[..], &["--replay", trace]].concat(), &[], b"");
    let text = String::from_utf8_lossy(&again.stdout);
    assert_eq!(again.status.code(), Some(1), "{text}");
    assert!(text.contains("one holder per key"), "{text}");
}
