//! Users and TLS on the ZooKeeper port: a replica with a users file asks
//! ZooKeeper clients to log in with `addAuth digest NAME:PASSWORD` for a
//! user of that file, and checks each request against the user's role
//! (`zkwire/login.rs`); with `[tls]` the port speaks TLS. Through kazoo
//! (Debian's `python3-kazoo`) and zkCli.sh, over a raw socket for the exact
//! codes, and across ports: a node the ZooKeeper port made for `user:NAME`
//! is read by a native login as NAME.

mod common;

use common::binary;
use common::zookeeper::{python_with_kazoo, require, run_kazoo_script, zkcli, ZKCLI};
use quorumkv_node::local::{LocalCluster, LocalClusterConfig};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A users file with `writer` (readwrite, password `w-pass`) and
/// `reader` (read, `r-pass`).
fn users_file(dir: &Path) -> std::path::PathBuf {
    common::users_file(
        dir,
        &[
            ("writer", "readwrite", "w-pass"),
            ("reader", "read", "r-pass"),
        ],
    )
}

async fn cluster(users: &Path, tls: bool) -> LocalCluster {
    let cfg = LocalClusterConfig {
        users: Some(users.to_path_buf()),
        tls,
        ..common::cluster_cfg("zab", 3, &[])
    };
    LocalCluster::start(cfg)
        .await
        .expect("local cluster starts")
}

fn zk_hosts(c: &LocalCluster) -> String {
    let hosts: Vec<String> = (c.endpoints().iter())
        .map(|e| e.zk.expect("a zab cluster has ZooKeeper ports").to_string())
        .collect();
    hosts.join(",")
}

/// Run `tests/zk/kazoo_users.py` with `extra` arguments (TLS files).
async fn kazoo_users(py: &str, hosts: &str, extra: &[String]) {
    let mut args: Vec<String> = vec![hosts.into(), "writer:w-pass".into(), "reader:r-pass".into()];
    args.extend_from_slice(extra);
    assert_eq!(run_kazoo_script(py, "kazoo_users.py", &args).await, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_logs_in_as_a_user_of_the_users_file_and_its_role_holds() {
    let Some(py) = python_with_kazoo() else {
        require("kazoo (Debian python3-kazoo)", false);
        return;
    };
    let dir = common::temp_dir("zk-users-kazoo");
    let c = cluster(&users_file(&dir), false).await;
    kazoo_users(py, &zk_hosts(&c), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_over_tls_checks_the_replicas_certificates_and_logs_in() {
    let Some(py) = python_with_kazoo() else {
        require("kazoo (Debian python3-kazoo)", false);
        return;
    };
    let dir = common::temp_dir("zk-users-tls");
    let c = cluster(&users_file(&dir), true).await;
    let tls = c.dir().join("tls");
    let files = ["ca.pem", "client-quorumkv.pem", "client-quorumkv.key"];
    let files: Vec<String> = (files.iter())
        .map(|f| tls.join(f).display().to_string())
        .collect();
    kazoo_users(py, &zk_hosts(&c), &files).await;
    // A plain connection to the TLS port gets no session.
    let zk = c.endpoints()[0].zk.unwrap();
    let mut s = TcpStream::connect(zk).await.unwrap();
    s.write_all(&connect_packet()).await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
    assert!(
        !matches!(read, Ok(Ok(n)) if n >= 4 + 36),
        "a plain connect was answered on the TLS port: {got:?}"
    );
}

/// A connect packet asking for a new session.
fn connect_packet() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0i32.to_be_bytes()); // protocol version
    b.extend_from_slice(&0i64.to_be_bytes()); // last zxid seen
    b.extend_from_slice(&10_000i32.to_be_bytes()); // timeout
    b.extend_from_slice(&0i64.to_be_bytes()); // session
    b.extend_from_slice(&16i32.to_be_bytes());
    b.extend_from_slice(&[0; 16]); // password
    framed(b)
}

fn framed(body: Vec<u8>) -> Vec<u8> {
    let mut p = (body.len() as i32).to_be_bytes().to_vec();
    p.extend_from_slice(&body);
    p
}

fn string(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as i32).to_be_bytes());
    b.extend_from_slice(s.as_bytes());
}

/// A request packet: xid, op code, body.
fn request(xid: i32, op: i32, body: &[u8]) -> Vec<u8> {
    let mut b = xid.to_be_bytes().to_vec();
    b.extend_from_slice(&op.to_be_bytes());
    b.extend_from_slice(body);
    framed(b)
}

fn auth_body(scheme: &str, auth: &str) -> Vec<u8> {
    let mut b = 0i32.to_be_bytes().to_vec(); // type
    string(&mut b, scheme);
    string(&mut b, auth);
    b
}

fn get_body(path: &str) -> Vec<u8> {
    let mut b = Vec::new();
    string(&mut b, path);
    b.push(0); // no watch
    b
}

fn create_body(path: &str) -> Vec<u8> {
    let mut b = Vec::new();
    string(&mut b, path);
    b.extend_from_slice(&1i32.to_be_bytes());
    b.push(b'x');
    b.extend_from_slice(&1i32.to_be_bytes()); // one ACL: world:anyone:all
    b.extend_from_slice(&31i32.to_be_bytes());
    string(&mut b, "world");
    string(&mut b, "anyone");
    b.extend_from_slice(&0i32.to_be_bytes()); // persistent
    b
}

/// Read one packet's body.
async fn packet(s: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.unwrap();
    let mut body = vec![0; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await.unwrap();
    body
}

/// A new session on `addr`.
async fn session(addr: std::net::SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&connect_packet()).await.unwrap();
    let answer = packet(&mut s).await;
    assert!(answer.len() >= 36, "no session: {answer:?}");
    s
}

/// Send a request; its reply's (xid, error code).
async fn ask(s: &mut TcpStream, xid: i32, op: i32, body: &[u8]) -> (i32, i32) {
    s.write_all(&request(xid, op, body)).await.unwrap();
    let r = packet(s).await;
    let int = |at: usize| i32::from_be_bytes(r[at..at + 4].try_into().unwrap());
    (int(0), int(12))
}

/// After a refusal that closes: the connection ends.
async fn closed(s: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    matches!(read, Ok(Ok(0)) | Ok(Err(_)))
}

const GET_DATA: i32 = 4;
const CREATE: i32 = 1;
const AUTH: i32 = 100;
const PING: i32 = 11;
const NO_AUTH: i32 = -102;
const AUTH_FAILED: i32 = -115;

/// The codes, exactly: `NoAuth` (−102) before a login (a ping passes, the
/// connection stays open for a login), `AuthFailed` (−115) and a close for
/// a wrong pair or a scheme other than `digest`, `NoAuth` for a reader's
/// write; and a native login reading what a ZooKeeper login made for
/// `user:writer`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_codes_over_a_raw_socket_and_a_user_acl_across_ports() {
    let dir = common::temp_dir("zk-users-raw");
    let c = cluster(&users_file(&dir), false).await;
    let zk = c.endpoints()[1].zk.unwrap();

    // Before a login: a ping passes, a read is refused, and the same
    // connection may still log in (as a zkCli user types `addauth`).
    let mut s = session(zk).await;
    assert_eq!(ask(&mut s, -2, PING, &[]).await, (-2, 0));
    assert_eq!(ask(&mut s, 1, GET_DATA, &get_body("/")).await, (1, NO_AUTH));
    assert_eq!(
        ask(&mut s, 2, CREATE, &create_body("/anon")).await,
        (2, NO_AUTH)
    );
    assert_eq!(
        ask(&mut s, -4, AUTH, &auth_body("digest", "writer:w-pass")).await,
        (-4, 0)
    );
    assert_eq!(
        ask(&mut s, 3, CREATE, &create_body("/by-writer")).await,
        (3, 0)
    );

    for (scheme, auth) in [
        ("digest", "writer:wrong"),
        ("digest", "nobody:w-pass"),
        ("user", "writer"),
    ] {
        let mut s = session(zk).await;
        let body = auth_body(scheme, auth);
        assert_eq!(
            ask(&mut s, -4, AUTH, &body).await,
            (-4, AUTH_FAILED),
            "{scheme} {auth}"
        );
        assert!(
            closed(&mut s).await,
            "open after a failed login {scheme} {auth}"
        );
    }

    let mut r = session(zk).await;
    assert_eq!(
        ask(&mut r, -4, AUTH, &auth_body("digest", "reader:r-pass")).await,
        (-4, 0)
    );
    assert_eq!(
        ask(&mut r, 1, CREATE, &create_body("/by-reader")).await,
        (1, NO_AUTH)
    );
    assert_eq!(ask(&mut r, 2, GET_DATA, &get_body("/")).await.1, 0);

    // zkCli.sh logs in with addauth and makes a node only `user:writer`
    // may read; the native CLI logged in as writer reads it, as reader not.
    if !require("zkCli.sh (Debian zookeeper)", Path::new(ZKCLI).exists()) {
        return;
    }
    let script =
        "addauth digest writer:w-pass\ncreate /private secret user:writer:r\nget /private\nquit\n";
    let out = zkcli(&zk.to_string(), script);
    assert!(out.contains("Created /private"), "{out}");
    let native = |user: &str, password: &str| {
        let eps: Vec<String> = c.native_addrs().iter().map(|a| a.to_string()).collect();
        let out = Command::new(binary())
            .args(["zk", "get", "/private", "--user", user, "--endpoints"])
            .arg(eps.join(","))
            .env("QUORUMKV_PASSWORD", password)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (ok, got) = native("writer", "w-pass");
    assert!(ok && got.contains("secret"), "{got}");
    assert!(
        !native("reader", "r-pass").0,
        "reader read a node only writer may"
    );
}
