//! ZooKeeper's client protocol on a zab cluster's `--zk-port`, through
//! clients nobody here wrote: Debian's `zkCli.sh` and kazoo
//! (`python3-kazoo`); and the port's edges (oversized packets, unknown op
//! codes, four-letter words) over a raw socket.

mod common;

use common::zookeeper::{
    python_with_kazoo, require, run_kazoo_script, zkcli, zookeeper_installed, ZooKeeper, ZKCLI,
};
use common::{binary, cluster_cfg};
use quorumkv_node::local::LocalCluster;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn zab_cluster() -> LocalCluster {
    LocalCluster::start(cluster_cfg("zab", 3, &[]))
        .await
        .expect("local cluster starts")
}

fn zk_hosts(c: &LocalCluster) -> Vec<String> {
    let hosts: Vec<String> = (c.endpoints().iter())
        .map(|e| e.zk.expect("a zab cluster has ZooKeeper ports").to_string())
        .collect();
    assert_eq!(hosts.len(), 3);
    hosts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkcli_create_get_set_ls_stat_delete_and_a_watch() {
    if !require("zkCli.sh (Debian zookeeper)", Path::new(ZKCLI).exists()) {
        return;
    }
    let cluster = zab_cluster().await;
    let hosts = zk_hosts(&cluster);
    let script = "create /app hello\ncreate /app/one 1\ncreate -s /app/seq- x\ncreate -e /app/eph e\ncreate /app/one/two 2\ngetAllChildrenNumber /app\ndelete /app/one/two\nget -w /app\nset /app world\nstat /app\nls /app\nls -s /app\ndelete -v 7 /app/one\ndelete /app/one\ndelete /app\ncreate -c /box x\ngetAcl /app\nquit\n";
    let out = zkcli(&hosts[0], script);
    for want in [
        "Created /app\n",
        "Created /app/one\n",
        "Created /app/seq-0000000000\n",
        "Created /app/eph\n",
        "Created /app/one/two\n",
        "\n4\n", // getAllChildrenNumber /app
        "hello\n",
        "WatchedEvent state:SyncConnected type:NodeDataChanged path:/app",
        "dataVersion = 1\n",
        "dataLength = 5\n",
        "numChildren = 3\n",
        "cversion = 3\n",
        "[eph, one, seq-0000000000]\n",
        "version No is not valid : /app/one",
        "Node not empty: /app",
        "Created /box\n",
        "'world,'anyone\n: cdrwa",
    ] {
        assert!(out.contains(want), "no {want:?} in zkCli's output:\n{out}");
    }
    // Another replica, another session: the write is there, the ephemeral
    // went with the first session's close.
    let out = zkcli(&hosts[2], "get /app\nls /app\nquit\n");
    assert!(out.contains("world\n"), "{out}");
    assert!(out.contains("[seq-0000000000]\n"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_crud_watches_ephemerals_and_recipes() {
    let py = python_with_kazoo();
    if !require("kazoo (Debian python3-kazoo)", py.is_some()) {
        return;
    }
    let cluster = zab_cluster().await;
    let hosts = zk_hosts(&cluster).join(",");
    let checks = run_kazoo_script(py.unwrap(), "kazoo_basic.py", &[hosts]).await;
    assert_eq!(checks, 8);
}

/// A connect packet asking for a new session (`session` 0) or to resume
/// one, with a zero password and no zxid seen.
fn connect_packet(timeout_ms: i32, session: i64) -> Vec<u8> {
    resume_packet(timeout_ms, (session, &[0; 16]), 0)
}

/// A connect packet naming a session, its password and the last zxid seen.
fn resume_packet(timeout_ms: i32, (session, passwd): (i64, &[u8]), last_zxid: i64) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0i32.to_be_bytes());
    body.extend_from_slice(&last_zxid.to_be_bytes());
    body.extend_from_slice(&timeout_ms.to_be_bytes());
    body.extend_from_slice(&session.to_be_bytes());
    body.extend_from_slice(&(passwd.len() as i32).to_be_bytes());
    body.extend_from_slice(passwd);
    body.push(0);
    let mut p = (body.len() as i32).to_be_bytes().to_vec();
    p.extend_from_slice(&body);
    p
}

/// Read one packet (its body).
async fn read_packet(s: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.unwrap();
    let mut body = vec![0; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await.unwrap();
    body
}

async fn read_to_end(s: &mut TcpStream) -> Vec<u8> {
    let mut rest = Vec::new();
    let read = s.read_to_end(&mut rest);
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("the server closes the connection")
        .unwrap();
    rest
}

/// Connect; the negotiated timeout and session id.
async fn connect(addr: &str, timeout_ms: i32) -> (TcpStream, i32, i64) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&connect_packet(timeout_ms, 0)).await.unwrap();
    let r = read_packet(&mut s).await;
    let timeout = i32::from_be_bytes(r[4..8].try_into().unwrap());
    let session = i64::from_be_bytes(r[8..16].try_into().unwrap());
    (s, timeout, session)
}

async fn four_letters(addr: &str, word: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(word).await.unwrap();
    String::from_utf8_lossy(&read_to_end(&mut s).await).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_port_refuses_oversized_packets_and_unknown_ops_and_answers_4lw() {
    let cluster = zab_cluster().await;
    let hosts = zk_hosts(&cluster);
    // Timeouts are clamped to 2..20 ticks of 2 s, as ZooKeeper's defaults.
    let (_, t, session) = connect(&hosts[0], 100).await;
    assert_eq!(t, 4000);
    assert!(session != 0);
    let (mut s, t, _) = connect(&hosts[1], 1_000_000).await;
    assert_eq!(t, 40_000);
    // An op code ZooKeeper does not know: Unimplemented (-6), then closed.
    let mut req = 8i32.to_be_bytes().to_vec();
    req.extend_from_slice(&42i32.to_be_bytes());
    req.extend_from_slice(&999i32.to_be_bytes());
    s.write_all(&req).await.unwrap();
    let r = read_packet(&mut s).await;
    assert_eq!(i32::from_be_bytes(r[0..4].try_into().unwrap()), 42, "xid");
    assert_eq!(i32::from_be_bytes(r[12..16].try_into().unwrap()), -6);
    assert!(read_to_end(&mut s).await.is_empty());
    // A packet longer than jute.maxbuffer: closed without a reply.
    let (mut s, _, _) = connect(&hosts[2], 10_000).await;
    s.write_all(&(2 * 1024 * 1024i32).to_be_bytes())
        .await
        .unwrap();
    assert!(read_to_end(&mut s).await.is_empty());
    // Resuming a session with a wrong password: told it expired (timeout 0).
    let mut s = TcpStream::connect(&hosts[0]).await.unwrap();
    s.write_all(&connect_packet(10_000, session)).await.unwrap();
    let r = read_packet(&mut s).await;
    assert_eq!(i32::from_be_bytes(r[4..8].try_into().unwrap()), 0);
    assert_eq!(four_letters(&hosts[0], b"ruok").await, "imok");
    let srvr = four_letters(&hosts[1], b"srvr").await;
    assert!(srvr.contains("Zookeeper version: 3.8.0-quorumkv"), "{srvr}");
    assert!(
        srvr.contains("Mode: leader") || srvr.contains("Mode: follower"),
        "{srvr}"
    );
    let mntr = four_letters(&hosts[2], b"mntr").await;
    assert!(mntr.contains("zk_server_state\t"), "{mntr}");
    let other = four_letters(&hosts[2], b"dump").await;
    assert_eq!(
        other,
        "dump is not executed because it is not in the whitelist.\n"
    );
}

#[test]
fn zk_port_is_refused_for_a_protocol_without_znodes() {
    let out = Command::new(binary())
        .args(["server", "--id", "1", "--protocol", "abd"])
        .args(["--listen", "127.0.0.1:0", "--zk-port", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("ZooKeeper port") && err.contains("znode operations need --protocol zab"),
        "{err}"
    );
}

/// A request packet: header, then `body`.
fn request(xid: i32, op: i32, body: &[u8]) -> Vec<u8> {
    let mut p = ((8 + body.len()) as i32).to_be_bytes().to_vec();
    p.extend_from_slice(&xid.to_be_bytes());
    p.extend_from_slice(&op.to_be_bytes());
    p.extend_from_slice(body);
    p
}

/// `create path data` (persistent, world:anyone), as jute encodes it.
fn create_body(path: &str, data: &[u8]) -> Vec<u8> {
    let mut b = (path.len() as i32).to_be_bytes().to_vec();
    b.extend_from_slice(path.as_bytes());
    b.extend_from_slice(&(data.len() as i32).to_be_bytes());
    b.extend_from_slice(data);
    b.extend_from_slice(&1i32.to_be_bytes()); // one ACL
    b.extend_from_slice(&31i32.to_be_bytes());
    for s in ["world", "anyone"] {
        b.extend_from_slice(&(s.len() as i32).to_be_bytes());
        b.extend_from_slice(s.as_bytes());
    }
    b.extend_from_slice(&0i32.to_be_bytes()); // flags: persistent
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_max_buffer_and_the_read_timeout_apply_to_the_port() {
    let args = ["--zk-max-buffer", "1KiB", "--read-timeout", "300ms"];
    let cluster = LocalCluster::start(cluster_cfg("zab", 3, &args))
        .await
        .expect("local cluster starts");
    let hosts = zk_hosts(&cluster);
    // Under the limit: created (reply: xid 1, error 0, the path).
    let (mut s, _, _) = connect(&hosts[0], 10_000).await;
    s.write_all(&request(1, 1, &create_body("/small", &[7; 900])))
        .await
        .unwrap();
    let r = read_packet(&mut s).await;
    assert_eq!(i32::from_be_bytes(r[0..4].try_into().unwrap()), 1);
    assert_eq!(i32::from_be_bytes(r[12..16].try_into().unwrap()), 0);
    assert_eq!(&r[20..], b"/small");
    // Over it: the connection closes without a reply.
    s.write_all(&request(2, 1, &create_body("/big", &[7; 1100])))
        .await
        .unwrap();
    assert!(read_to_end(&mut s).await.is_empty());
    // Half a packet, then silence: closed by the read timeout.
    let (mut s, _, _) = connect(&hosts[1], 10_000).await;
    let p = request(3, 1, &create_body("/slow", b"x"));
    s.write_all(&p[..10]).await.unwrap();
    let started = std::time::Instant::now();
    assert!(read_to_end(&mut s).await.is_empty());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
}

/// The kazoo script passes against real ZooKeeper too: what it checks is
/// ZooKeeper's behaviour, not ours.
#[test]
fn the_kazoo_script_passes_against_zookeeper_itself() {
    let py = python_with_kazoo();
    if !require(
        "kazoo and ZooKeeper (Debian)",
        py.is_some() && zookeeper_installed(),
    ) {
        return;
    }
    let zk = ZooKeeper::start("wire");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/zk/kazoo_basic.py");
    let out = Command::new(py.unwrap())
        .args([script, &zk.hosts])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all ok"),
        "kazoo_basic.py against ZooKeeper failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const CLI_MT: &str = "/usr/lib/zookeeper/bin/cli_mt";

/// ZooKeeper's C client (`cli_mt` from Debian's `zookeeper-bin`): its
/// commands are asynchronous on one connection, so they are answered in
/// the order sent; `quit` waits until they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_c_client_cli_mt_creates_sets_gets_lists_and_deletes() {
    if !require("cli_mt (Debian zookeeper-bin)", Path::new(CLI_MT).exists()) {
        return;
    }
    let cluster = zab_cluster().await;
    let hosts = zk_hosts(&cluster);
    let script = "create /c\ncreate +e /c/eph\ncreate +s /c/seq-\nset /c world\nget /c\nls /c\nget /nope\ndelete /c\n";
    // Both of its streams in one, read until the last answer is in.
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", &format!("exec {CLI_MT} {} 2>&1", hosts.join(","))])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("cli_mt runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(script.as_bytes()).await.unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut text = String::new();
    let read_all = async {
        let mut buf = [0u8; 4096];
        while !text.contains("/c: rc = -111\n") {
            let n = stdout.read(&mut buf).await.unwrap();
            assert!(n > 0, "cli_mt ended early:\n{text}");
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    let answered = tokio::time::timeout(Duration::from_secs(30), read_all).await;
    let _ = stdin.write_all(b"quit\n").await;
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    assert!(
        answered.is_ok(),
        "cli_mt's answers did not all come:\n{text}"
    );
    let want = [
        "[/c]: rc = 0\n\tname = /c\n",
        "[/c/eph]: rc = 0\n\tname = /c/eph\n",
        "[/c/seq-]: rc = 0\n\tname = /c/seq-0000000000\n",
        "\tversion=1\taversion=0\n",
        " value_len = 5\nworld\n",
        "/c: rc = 0\n\teph\n\tseq-0000000000\n",
        "/nope: rc = -101\n",
        "/c: rc = -111\n",
    ];

    let mut at = 0;
    for w in want {
        // In this order: the connection answers in request order (the
        // asynchronous calls' lines).
        let found = text[at..].find(w);
        assert!(
            found.is_some(),
            "no {w:?} (in order) in cli_mt's output:\n{text}"
        );
        at += found.unwrap() + w.len();
    }
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// A jute string.
fn jute_string(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as i32).to_be_bytes());
    b.extend_from_slice(s.as_bytes());
}

/// `setData path data`, any version.
fn set_data_body(path: &str, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    jute_string(&mut b, path);
    b.extend_from_slice(&(data.len() as i32).to_be_bytes());
    b.extend_from_slice(data);
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b
}

/// Connect with `packet`; the answer's timeout, session and password.
async fn connect_with(addr: &str, packet: &[u8]) -> (TcpStream, i32, i64, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(packet).await.unwrap();
    let r = read_packet(&mut s).await;
    (s, i32_at(&r, 4), i64_at(&r, 8), r[20..36].to_vec())
}

/// Send one request; the next packet.
async fn ask(s: &mut TcpStream, xid: i32, op: i32, body: &[u8]) -> Vec<u8> {
    s.write_all(&request(xid, op, body)).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), read_packet(s));
    r.await.expect("an answer")
}

/// A notification's event type and path.
fn event_of(p: &[u8]) -> (i32, String) {
    assert_eq!(i32_at(p, 0), -1, "a notification");
    let len = i32_at(p, 24) as usize;
    (
        i32_at(p, 16),
        String::from_utf8_lossy(&p[28..28 + len]).into(),
    )
}

/// ZooKeeper's session move at the wire: a session resumes on another
/// replica with its own password only, not on one behind what the client
/// has seen; its ephemeral is there; `setWatches` fires what changed since
/// the client's zxid and sets the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_on_another_replica_with_its_password_only() {
    let cluster = zab_cluster().await;
    let hosts = zk_hosts(&cluster);
    let (mut a, t, session, passwd) = connect_with(&hosts[0], &connect_packet(10_000, 0)).await;
    let mut eph = create_body("/r-eph", b"e");
    let n = eph.len();
    eph[n - 4..].copy_from_slice(&1i32.to_be_bytes()); // ephemeral
    assert_eq!(i32_at(&ask(&mut a, 1, 1, &eph).await, 12), 0);
    let made = i64_at(&ask(&mut a, 2, 1, &create_body("/r-w", b"0")).await, 4);
    let seen = i64_at(&ask(&mut a, 3, 5, &set_data_body("/r-w", b"1")).await, 4);
    assert!(seen > made && made > 0, "{made} {seen}");

    // A wrong password: told the session expired, then closed.
    let mut bad = passwd.clone();
    bad[3] ^= 1;
    let forged = resume_packet(10_000, (session, &bad), seen);
    let (mut s, t0, s0, _) = connect_with(&hosts[1], &forged).await;
    assert_eq!((t0, s0), (0, 0));
    assert!(read_to_end(&mut s).await.is_empty());
    // The right one, from a client that saw more than any replica applied:
    // closed without an answer (the client tries another server).
    let mut s = TcpStream::connect(&hosts[1]).await.unwrap();
    let ahead = resume_packet(10_000, (session, &passwd), seen + 1_000_000);
    s.write_all(&ahead).await.unwrap();
    assert!(read_to_end(&mut s).await.is_empty());
    // The right one: the same session, its timeout, its password.
    let resume = resume_packet(30_000, (session, &passwd), seen);
    let (mut b, tb, sb, pb) = connect_with(&hosts[2], &resume).await;
    assert_eq!((tb, sb, &pb[..]), (t, session, &passwd[..]));
    let mut exists = Vec::new();
    jute_string(&mut exists, "/r-eph");
    exists.push(0);
    let r = ask(&mut b, 1, 3, &exists).await;
    assert_eq!(i32_at(&r, 12), 0);
    assert_eq!(i64_at(&r, 60), session, "the ephemeral's owner");

    // setWatches against `made`: /r-w changed since (fired at once, before
    // the answer); /r-new does not exist yet (its exist watch is set).
    let mut sw = made.to_be_bytes().to_vec();
    for list in [&["/r-w"][..], &["/r-new"], &[]] {
        sw.extend_from_slice(&(list.len() as i32).to_be_bytes());
        for p in list {
            jute_string(&mut sw, p);
        }
    }
    let ev = ask(&mut b, -8, 101, &sw).await;
    assert_eq!(event_of(&ev), (3, "/r-w".into()), "NodeDataChanged");
    let r = read_packet(&mut b).await;
    assert_eq!((i32_at(&r, 0), i32_at(&r, 12)), (-8, 0));
    assert_eq!(
        i32_at(&ask(&mut a, 4, 1, &create_body("/r-new", b"")).await, 12),
        0
    );
    let ev = tokio::time::timeout(Duration::from_secs(10), read_packet(&mut b));
    assert_eq!(
        event_of(&ev.await.unwrap()),
        (1, "/r-new".into()),
        "NodeCreated"
    );

    // Closed from its new connection: it resumes nowhere any more.
    assert_eq!(i32_at(&ask(&mut b, 2, -11, &[]).await, 12), 0);
    let again = resume_packet(10_000, (session, &passwd), seen);
    let (_, t1, s1, _) = connect_with(&hosts[0], &again).await;
    assert_eq!((t1, s1), (0, 0));
}

/// A kazoo client holding an ephemeral node, a lock and watches on
/// replica 1 moves to another replica when replica 1 is killed
/// (`tests/zk/kazoo_resume.py` says what it checks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kazoo_session_survives_the_kill_of_its_replica() {
    use tokio::io::AsyncBufReadExt;
    let py = python_with_kazoo();
    if !require("kazoo (Debian python3-kazoo)", py.is_some()) {
        return;
    }
    let mut cluster = zab_cluster().await;
    // Replica 1 first: kazoo tries the hosts in the order given.
    let hosts = zk_hosts(&cluster).join(",");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/zk/kazoo_resume.py");
    let mut child = tokio::process::Command::new(py.unwrap())
        .args([script, &hosts])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut out = String::new();
    let run = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            out.push_str(&line);
            out.push('\n');
            if line == "ready" {
                cluster.kill(1).await.unwrap();
                stdin.write_all(b"killed\n").await.unwrap();
            }
        }
    };
    let finished = tokio::time::timeout(Duration::from_secs(120), run).await;
    if finished.is_err() {
        let _ = child.start_kill();
    }
    let rest = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&rest.stderr);
    assert!(
        finished.is_ok() && rest.status.success() && out.contains("all ok"),
        "kazoo_resume.py failed:\n{out}\n{stderr}"
    );
    assert_eq!(out.matches("\nok ").count(), 6, "{out}");
}

/// Read a child's output into `text` until it holds `want`.
async fn read_until(out: &mut tokio::process::ChildStdout, text: &mut String, want: &str) {
    let mut buf = [0u8; 4096];
    let read = async {
        while !text.contains(want) {
            let n = out.read(&mut buf).await.unwrap();
            assert!(n > 0, "the client ended:\n{text}");
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    if tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .is_err()
    {
        panic!("no {want:?} in the client's output:\n{text}");
    }
}

/// The Java client (zkCli.sh) moves its session when its replica is
/// killed and sets its watch again there with `setWatches`: the watch set
/// before the kill fires after it, and its ephemeral is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkcli_moves_its_session_and_its_watch_when_its_replica_is_killed() {
    if !require("zkCli.sh (Debian zookeeper)", Path::new(ZKCLI).exists()) {
        return;
    }
    let mut cluster = zab_cluster().await;
    let hosts = zk_hosts(&cluster);
    let mut child = tokio::process::Command::new("sh")
        .args([
            "-c",
            &format!("exec {ZKCLI} -server {} 2>&1", hosts.join(",")),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("zkCli.sh runs");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut text = String::new();
    let script = b"create -e /ze x\ncreate /zw v0\nget -w /zw\n";
    stdin.write_all(script).await.unwrap();
    read_until(&mut stdout, &mut text, "\nv0\n").await;
    // Its replica (which picks at random): the one holding a connection
    // besides the one asking.
    let mut on = Vec::new();
    for (i, h) in hosts.iter().enumerate() {
        if four_letters(h, b"mntr")
            .await
            .contains("zk_num_alive_connections\t2\n")
        {
            on.push(i);
        }
    }
    assert_eq!(on.len(), 1, "zkCli's replica: {on:?}");
    cluster.kill(on[0] as u32 + 1).await.unwrap();
    let other = &hosts[(on[0] + 1) % 3];
    let (mut s, _, _) = connect(other, 10_000).await;
    assert_eq!(
        i32_at(&ask(&mut s, 1, 5, &set_data_body("/zw", b"v1")).await, 12),
        0
    );
    let fired = "WatchedEvent state:SyncConnected type:NodeDataChanged path:/zw";
    read_until(&mut stdout, &mut text, fired).await;
    stdin.write_all(b"stat /ze\n").await.unwrap();
    read_until(&mut stdout, &mut text, "ephemeralOwner = 0x").await;
    let _ = stdin.write_all(b"quit\n").await;
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    assert!(!text.contains("state:Expired"), "{text}");
    assert!(!text.contains("ephemeralOwner = 0x0\n"), "{text}");
}

/// One operation of a `multi` or `multiRead`: its `MultiHeader` (type,
/// not done, err −1), then its record.
fn multi_op(kind: i32, record: &[u8]) -> Vec<u8> {
    let mut b = kind.to_be_bytes().to_vec();
    b.push(0);
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(record);
    b
}

/// The `MultiHeader` that ends a `multi`'s operations or results.
const MULTI_DONE: [u8; 9] = [255, 255, 255, 255, 1, 255, 255, 255, 255];

/// A `getData` / `getChildren` record without a watch.
fn path_no_watch(path: &str) -> Vec<u8> {
    let mut b = (path.len() as i32).to_be_bytes().to_vec();
    b.extend_from_slice(path.as_bytes());
    b.push(0);
    b
}

/// Jute fields read off a reply body.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }
    fn int(&mut self) -> i32 {
        i32::from_be_bytes(self.take(4).try_into().unwrap())
    }
    fn bytes(&mut self) -> Vec<u8> {
        let n = self.int() as usize;
        self.take(n).to_vec()
    }
    /// A `MultiHeader`: (type, done, err).
    fn header(&mut self) -> (i32, bool, i32) {
        let kind = self.int();
        let done = self.take(1)[0] != 0;
        (kind, done, self.int())
    }
}

/// `multi` and `multiRead` over the port against a live cluster: a
/// transaction's results, a multiRead at another replica (each read its
/// own result or error), and an operation that cannot be in a multi
/// (the record does not decode: the connection closes, as ZooKeeper's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_and_multi_read_over_the_port() {
    let cluster = zab_cluster().await;
    let hosts = zk_hosts(&cluster);
    let (mut s, _, _) = connect(&hosts[0], 10_000).await;
    let mut body = multi_op(1, &create_body("/m", b"v"));
    body.extend(multi_op(1, &create_body("/m/k", b"")));
    body.extend_from_slice(&MULTI_DONE);
    s.write_all(&request(1, 14, &body)).await.unwrap();
    let r = read_packet(&mut s).await;
    let mut f = Fields(&r);
    assert_eq!(
        (f.int(), f.take(8).len(), f.int()),
        (1, 8, 0),
        "xid, zxid, ok"
    );
    for path in ["/m", "/m/k"] {
        assert_eq!(f.header(), (1, false, 0));
        assert_eq!(f.bytes(), path.as_bytes());
    }
    assert_eq!((f.header(), f.0.len()), ((-1, true, -1), 0));
    let (mut s, _, _) = connect(&hosts[1], 10_000).await;
    let mut body = multi_op(4, &path_no_watch("/m"));
    body.extend(multi_op(4, &path_no_watch("/none")));
    body.extend(multi_op(8, &path_no_watch("/m")));
    body.extend_from_slice(&MULTI_DONE);
    s.write_all(&request(2, 22, &body)).await.unwrap();
    let r = read_packet(&mut s).await;
    let mut f = Fields(&r);
    assert_eq!((f.int(), f.take(8).len(), f.int()), (2, 8, 0));
    assert_eq!(f.header(), (4, false, 0));
    assert_eq!(f.bytes(), b"v");
    f.take(68); // the stat
    assert_eq!((f.header(), f.int()), ((-1, false, -101), -101));
    assert_eq!(
        (f.header(), f.int(), f.bytes()),
        ((8, false, 0), 1, b"k".to_vec())
    );
    assert_eq!((f.header(), f.0.len()), ((-1, true, -1), 0));
    let mut body = multi_op(9, &path_no_watch("/m")[..6]);
    body.extend_from_slice(&MULTI_DONE);
    s.write_all(&request(3, 14, &body)).await.unwrap();
    assert!(read_to_end(&mut s).await.is_empty());
}

/// An `addWatch` / `checkWatches` / `removeWatches` record: a path and an
/// int (the mode, or the watcher type).
fn path_int(path: &str, n: i32) -> Vec<u8> {
    let mut b = Vec::new();
    jute_string(&mut b, path);
    b.extend_from_slice(&n.to_be_bytes());
    b
}

/// `delete path`, any version.
fn delete_body(path: &str) -> Vec<u8> {
    path_int(path, -1)
}

/// The error code of a reply (after its xid and zxid).
fn code_of(r: &[u8]) -> i32 {
    i32_at(r, 12)
}

/// ZooKeeper 3.6's `addWatch` over the port: a persistent watch hears of
/// its node's creation, children, data and deletion and stays; a
/// recursive one hears of every node below (no children events);
/// `checkWatches` and `removeWatches` answer `NoWatcher` (-121) for a
/// watch the connection does not hold; a mode ZooKeeper cannot decode is
/// `MarshallingError` (-5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_and_recursive_watches_over_the_port() {
    let cluster = zab_cluster().await;
    persistent_watches(&zk_hosts(&cluster)).await;
}

/// The same requests against ZooKeeper 3.8 itself, for the same answers
/// and events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_watches_and_set_watches2_against_zookeeper_itself() {
    if !require("ZooKeeper (Debian)", zookeeper_installed()) {
        return;
    }
    let zk = ZooKeeper::start("pw");
    let hosts: Vec<String> = zk.hosts.split(',').map(String::from).collect();
    persistent_watches(&hosts).await;
    set_watches2(&hosts).await;
}

async fn persistent_watches(hosts: &[String]) {
    let (mut w, _, _) = connect(&hosts[0], 10_000).await;
    let r = ask(&mut w, 1, 106, &path_int("/pw", 0)).await;
    assert_eq!(
        (i32_at(&r, 0), code_of(&r), &r[16..]),
        (1, 0, &[0u8; 4][..])
    );
    assert_eq!(code_of(&ask(&mut w, 2, 106, &path_int("/rw", 1)).await), 0);
    assert_eq!(code_of(&ask(&mut w, 3, 106, &path_int("/x", 2)).await), -5);
    // Writes from another replica; the events arrive in commit order.
    let (mut c, _, _) = connect(&hosts[1], 10_000).await;
    let writes: [(i32, Vec<u8>); 8] = [
        (1, create_body("/pw", b"")),
        (1, create_body("/pw/k", b"")),
        (5, set_data_body("/pw", b"v")),
        (1, create_body("/rw", b"")),
        (1, create_body("/rw/a", b"")),
        (1, create_body("/rw/a/b", b"")),
        (5, set_data_body("/rw/a/b", b"v")),
        (2, delete_body("/rw/a/b")),
    ];
    for (i, (op, body)) in writes.iter().enumerate() {
        let r = ask(&mut c, 10 + i as i32, *op, body).await;
        assert_eq!(code_of(&r), 0, "write {i}");
    }
    let want = [
        (1, "/pw"),
        (4, "/pw"),
        (3, "/pw"),
        (1, "/rw"),
        (1, "/rw/a"),
        (1, "/rw/a/b"),
        (3, "/rw/a/b"),
        (2, "/rw/a/b"),
    ];
    for (kind, path) in want {
        assert_eq!(
            event_of(&read_packet(&mut w).await),
            (kind, path.to_string())
        );
    }
    // checkWatches: a persistent or recursive watch counts as a data and
    // a child watch; a one-shot one is of its kind only.
    assert_eq!(code_of(&ask(&mut w, 4, 17, &path_int("/pw", 3)).await), 0);
    assert_eq!(code_of(&ask(&mut w, 5, 17, &path_int("/pw", 2)).await), 0);
    assert_eq!(code_of(&ask(&mut w, 15, 17, &path_int("/rw", 1)).await), 0);
    let watch = [&path_no_watch("/pw/k")[..9], &[1]].concat();
    assert_eq!(code_of(&ask(&mut w, 16, 4, &watch).await), 0);
    assert_eq!(
        code_of(&ask(&mut w, 17, 17, &path_int("/pw/k", 1)).await),
        -121
    );
    assert_eq!(
        code_of(&ask(&mut w, 18, 17, &path_int("/pw/k", 2)).await),
        0
    );
    assert_eq!(
        code_of(&ask(&mut w, 6, 17, &path_int("/none", 3)).await),
        -121
    );
    assert_eq!(code_of(&ask(&mut w, 7, 18, &path_int("/pw", 9)).await), -5);
    // Removed, it hears no more: the next event is /rw's.
    assert_eq!(code_of(&ask(&mut w, 8, 18, &path_int("/pw", 3)).await), 0);
    assert_eq!(
        code_of(&ask(&mut w, 9, 18, &path_int("/pw", 3)).await),
        -121
    );
    assert_eq!(
        code_of(&ask(&mut c, 20, 5, &set_data_body("/pw", b"w")).await),
        0
    );
    assert_eq!(
        code_of(&ask(&mut c, 21, 5, &set_data_body("/rw", b"w")).await),
        0
    );
    assert_eq!(event_of(&read_packet(&mut w).await), (3, "/rw".to_string()));
}

/// `setWatches2` (op 105) on a resumed session sets its persistent and
/// recursive watches again at the new replica (nothing fires for what
/// changed meanwhile, as in ZooKeeper), and its one-shot ones as
/// `setWatches` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_watches2_moves_persistent_watches() {
    let cluster = zab_cluster().await;
    set_watches2(&zk_hosts(&cluster)).await;
}

async fn set_watches2(hosts: &[String]) {
    let (mut a, t, session, passwd) = connect_with(&hosts[0], &connect_packet(10_000, 0)).await;
    assert_eq!(
        code_of(&ask(&mut a, 1, 1, &create_body("/s2", b"")).await),
        0
    );
    drop(a);
    let resume = resume_packet(t, (session, &passwd), 0);
    let (mut b, _, again, _) = connect_with(&hosts[2], &resume).await;
    assert_eq!(again, session);
    let mut body = i64::MAX.to_be_bytes().to_vec(); // relative zxid: seen all
    for list in [&[][..], &[], &[], &["/s2"], &["/s2r"]] {
        body.extend_from_slice(&(list.len() as i32).to_be_bytes());
        for p in list {
            jute_string(&mut body, p);
        }
    }
    let r = ask(&mut b, -8, 105, &body).await;
    assert_eq!((i32_at(&r, 0), code_of(&r), r.len()), (-8, 0, 16));
    assert_eq!(code_of(&ask(&mut b, 2, 17, &path_int("/s2", 3)).await), 0);
    let (mut c, _, _) = connect(&hosts[1], 10_000).await;
    assert_eq!(
        code_of(&ask(&mut c, 1, 1, &create_body("/s2/k", b"")).await),
        0
    );
    assert_eq!(
        code_of(&ask(&mut c, 2, 1, &create_body("/s2r", b"")).await),
        0
    );
    assert_eq!(
        code_of(&ask(&mut c, 3, 1, &create_body("/s2r/k", b"")).await),
        0
    );
    for (kind, path) in [(4, "/s2"), (1, "/s2r"), (1, "/s2r/k")] {
        assert_eq!(
            event_of(&read_packet(&mut b).await),
            (kind, path.to_string())
        );
    }
}

/// `createContainer` (op 19, mode 4) with the container's stat (its
/// owner 0 on the wire, as ZooKeeper sends it); the leader deletes it once it
/// has had a child and has none left, after `container-grace`, and a
/// client's watch hears of it; a container that never had a child stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_container_is_deleted_by_the_leader() {
    let args = ["--opt", "container-grace=200ms"];
    let cluster = LocalCluster::start(cluster_cfg("zab", 3, &args))
        .await
        .expect("local cluster starts");
    let hosts = zk_hosts(&cluster);
    let (mut s, _, _) = connect(&hosts[1], 10_000).await;
    let mut body = create_body("/box", b"");
    let n = body.len();
    body[n - 4..].copy_from_slice(&4i32.to_be_bytes());
    let r = ask(&mut s, 1, 19, &body).await;
    assert_eq!(code_of(&r), 0);
    let mut f = Fields(&r[16..]);
    assert_eq!(f.bytes(), b"/box");
    let stat = f.take(68);
    assert_eq!(
        (i64_at(stat, 44), i32_at(stat, 56)),
        (0, 0),
        "owner, children"
    );
    body[4..8].copy_from_slice(b"/new");
    assert_eq!(code_of(&ask(&mut s, 2, 19, &body).await), 0);
    assert_eq!(
        code_of(&ask(&mut s, 3, 1, &create_body("/box/k", b"")).await),
        0
    );
    // Not empty: stays. Emptied: goes.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(code_of(&ask(&mut s, 4, 3, &path_no_watch("/box")).await), 0);
    let (mut w, _, _) = connect(&hosts[2], 10_000).await;
    let watch = [&path_no_watch("/box")[..8], &[1]].concat();
    assert_eq!(code_of(&ask(&mut w, 1, 3, &watch).await), 0);
    assert_eq!(code_of(&ask(&mut s, 5, 2, &delete_body("/box/k")).await), 0);
    let gone = tokio::time::timeout(Duration::from_secs(10), read_packet(&mut w));
    let gone = gone.await.expect("the container is deleted");
    assert_eq!(event_of(&gone), (2, "/box".to_string()));
    assert_eq!(
        code_of(&ask(&mut s, 6, 3, &path_no_watch("/box")).await),
        -101
    );
    assert_eq!(code_of(&ask(&mut s, 7, 3, &path_no_watch("/new")).await), 0);
}
