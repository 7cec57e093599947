//! RESP authentication: a replica started with a users file (written by
//! `quorumkv user add`) answers Redis 7's NOAUTH / WRONGPASS / NOPERM, lets
//! each role run its class of commands only, and keeps the data intact.

mod common;

use common::{binary, require_tool};
use quorumkv_node::local::{LocalCluster, LocalClusterConfig};
use quorumkv_node::storage::Durability;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const NOAUTH: &str = "-NOAUTH Authentication required.";
const WRONGPASS: &str = "-WRONGPASS invalid username-password pair or user is disabled.";

/// `quorumkv user ARGS -f FILE` with the password in $QUORUMKV_PASSWORD.
fn user_cmd(file: &Path, password: &str, args: &[&str]) {
    let out = Command::new(binary())
        .arg("user")
        .args(args)
        .arg("--file")
        .arg(file)
        .env("QUORUMKV_PASSWORD", password)
        .output()
        .expect("quorumkv user runs");
    assert!(out.status.success(), "{args:?}: {out:?}");
}

async fn start(users: &Path) -> LocalCluster {
    let cfg = LocalClusterConfig {
        protocol: "abd".parse().expect("abd is registered"),
        replicas: 1,
        binary: binary(),
        server_args: vec!["--users".into(), users.display().to_string()],
        ready_timeout: Duration::from_secs(60),
        durability: Durability::Memory,
        ..Default::default()
    };
    LocalCluster::start(cfg)
        .await
        .expect("local cluster starts")
}

/// A raw RESP connection; replies rendered on one line: `+OK`, `-ERR ...`,
/// `$value` (`$nil`), `:1`, `*[a, b]`.
struct Resp(BufReader<TcpStream>);

impl Resp {
    async fn connect(cluster: &LocalCluster) -> Resp {
        let addr = cluster.endpoints()[0].resp;
        Resp(BufReader::new(TcpStream::connect(addr).await.unwrap()))
    }

    async fn send(&mut self, words: &[&str]) {
        let mut out = format!("*{}\r\n", words.len());
        for w in words {
            out += &format!("${}\r\n{w}\r\n", w.len());
        }
        self.0.get_mut().write_all(out.as_bytes()).await.unwrap();
    }

    async fn cmd(&mut self, words: &[&str]) -> String {
        self.send(words).await;
        self.reply().await
    }

    async fn reply(&mut self) -> String {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(20), self.0.read_line(&mut line))
            .await
            .expect("a reply within 20s")
            .unwrap();
        if n == 0 {
            return "EOF".into();
        }
        let line = line.trim_end().to_string();
        match line.as_bytes()[0] {
            b'$' if line == "$-1" => "$nil".into(),
            b'$' => {
                let len: usize = line[1..].parse().unwrap();
                let mut buf = vec![0; len + 2];
                self.0.read_exact(&mut buf).await.unwrap();
                format!("${}", String::from_utf8_lossy(&buf[..len]))
            }
            b'*' => {
                let n: usize = line[1..].parse().unwrap();
                let mut items = Vec::new();
                for _ in 0..n {
                    items.push(Box::pin(self.reply()).await);
                }
                format!("*[{}]", items.join(", "))
            }
            _ => line,
        }
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("qkv-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_authenticate_and_roles_limit_commands() {
    let dir = temp_dir("resp-auth");
    let users = dir.join("users.toml");
    user_cmd(&users, "w-pass", &["add", "writer", "--role", "readwrite"]);
    user_cmd(&users, "r-pass", &["add", "reader", "--role", "read"]);
    let cluster = start(&users).await;

    // Before AUTH: NOAUTH for everything, PING included (Redis 7).
    let mut c = Resp::connect(&cluster).await;
    assert_eq!(c.cmd(&["GET", "k"]).await, NOAUTH);
    assert_eq!(c.cmd(&["SET", "k", "x"]).await, NOAUTH);
    assert_eq!(c.cmd(&["PING"]).await, NOAUTH);
    assert!(c
        .cmd(&["HELLO", "2"])
        .await
        .starts_with("-NOAUTH HELLO must be called"));
    // A wrong password, or a user that does not exist, answer the same.
    assert_eq!(c.cmd(&["AUTH", "writer", "wrong"]).await, WRONGPASS);
    assert_eq!(c.cmd(&["AUTH", "nobody", "w-pass"]).await, WRONGPASS);
    assert_eq!(
        c.cmd(&["AUTH", "w-pass"]).await,
        WRONGPASS,
        "no user default"
    );
    assert_eq!(
        c.cmd(&["GET", "k"]).await,
        NOAUTH,
        "still not authenticated"
    );

    // readwrite: writes and reads.
    assert_eq!(c.cmd(&["AUTH", "writer", "w-pass"]).await, "+OK");
    assert_eq!(c.cmd(&["ACL", "WHOAMI"]).await, "$writer");
    assert_eq!(c.cmd(&["SET", "k", "v1"]).await, "+OK");
    assert_eq!(c.cmd(&["MSET", "a", "1", "b", "2"]).await, "+OK");
    assert_eq!(c.cmd(&["GET", "k"]).await, "$v1");
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "save"]).await,
        "-NOPERM User writer has no permissions to run the 'config' command"
    );

    // read: reads; every write is refused and changes nothing.
    let mut r = Resp::connect(&cluster).await;
    // Pipelined: the GET after the AUTH runs as the reader.
    r.send(&["AUTH", "reader", "r-pass"]).await;
    r.send(&["GET", "k"]).await;
    assert_eq!(r.reply().await, "+OK");
    assert_eq!(r.reply().await, "$v1");
    for (words, name) in [
        (&["SET", "k", "evil"][..], "set"),
        (&["DEL", "k"], "del"),
        (&["MSET", "k", "evil", "a", "evil"], "mset"),
    ] {
        assert_eq!(
            r.cmd(words).await,
            format!("-NOPERM User reader has no permissions to run the '{name}' command")
        );
    }
    assert_eq!(r.cmd(&["MGET", "k", "a", "b"]).await, "*[$v1, $1, $2]");
    assert_eq!(r.cmd(&["PING"]).await, "+PONG");

    // HELLO 2 AUTH logs in and describes the server; a wrong pair fails.
    let mut h = Resp::connect(&cluster).await;
    assert_eq!(
        h.cmd(&["HELLO", "2", "AUTH", "writer", "nope"]).await,
        WRONGPASS
    );
    let hello = h.cmd(&["HELLO", "2", "AUTH", "writer", "w-pass"]).await;
    assert!(
        hello.contains("$proto, :2") && hello.contains("$version, $7.0.0"),
        "{hello}"
    );
    assert_eq!(h.cmd(&["GET", "k"]).await, "$v1");

    // Ten failed AUTHs close the connection.
    let mut bad = Resp::connect(&cluster).await;
    for _ in 0..9 {
        assert_eq!(bad.cmd(&["AUTH", "writer", "guess"]).await, WRONGPASS);
    }
    let last = bad.cmd(&["AUTH", "writer", "guess"]).await;
    assert!(
        last.starts_with(WRONGPASS) && last.contains("Closing"),
        "{last}"
    );
    assert_eq!(bad.reply().await, "EOF");

    // redis-cli's own --user / --pass.
    if require_tool("redis-cli") {
        let port = cluster.endpoints()[0].resp.port().to_string();
        let cli = |args: &[&str]| {
            let out = Command::new("redis-cli")
                .args(["-p", &port])
                .args(args)
                .output()
                .expect("redis-cli runs");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let as_writer = ["--user", "writer", "--pass", "w-pass", "--no-auth-warning"];
        assert_eq!(
            cli(&[&as_writer[..], &["SET", "cli", "yes"]].concat()),
            "OK"
        );
        assert_eq!(cli(&[&as_writer[..], &["GET", "cli"]].concat()), "yes");
        let as_reader = ["--user", "reader", "--pass", "r-pass", "--no-auth-warning"];
        assert!(cli(&[&as_reader[..], &["SET", "cli", "no"]].concat()).contains("NOPERM"));
        assert!(cli(&["GET", "cli"]).contains("NOAUTH"));
        assert_eq!(cli(&[&as_reader[..], &["GET", "cli"]].concat()), "yes");
    }

    // SIGHUP reads the file again: a user added since can log in, one
    // removed loses its connection's rights at its next command.
    user_cmd(&users, "late-pass", &["add", "late", "--role", "read"]);
    user_cmd(&users, "", &["remove", "reader"]);
    let pid = cluster.pid(1).expect("replica 1 runs") as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let mut l = Resp::connect(&cluster).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while l.cmd(&["AUTH", "late", "late-pass"]).await != "+OK" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "SIGHUP did not reload"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        r.cmd(&["GET", "k"]).await,
        NOAUTH,
        "the removed user's connection"
    );
    // An invalid file is refused on SIGHUP and the users before stay.
    std::fs::write(
        &users,
        "[[user]]\nname = \"x\"\nrole = \"read\"\npassword = \"plain\"\n",
    )
    .unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut again = Resp::connect(&cluster).await;
    assert_eq!(again.cmd(&["AUTH", "writer", "w-pass"]).await, "+OK");

    // The refused commands changed nothing.
    assert_eq!(again.cmd(&["MGET", "k", "a", "b"]).await, "*[$v1, $1, $2]");
    cluster.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `users = "users.toml"` in a cluster file is relative to the cluster
/// file, wherever the server is started from.
#[test]
fn a_cluster_files_users_is_relative_to_it() {
    let dir = temp_dir("resp-auth-relative");
    std::fs::write(
        dir.join("cluster.toml"),
        "protocol = \"abd\"\nusers = \"users.toml\"\n[[replica]]\nid = 1\naddr = \"127.0.0.1:1\"\n",
    )
    .unwrap();
    std::fs::write(dir.join("users.toml"), "[[user]]\nname = \"a\"\n").unwrap();
    let out = Command::new(binary())
        .args(["server", "--id", "1", "--durability", "memory", "--config"])
        .arg(dir.join("cluster.toml"))
        .current_dir(std::env::temp_dir())
        .env_remove("QUORUMKV_USERS")
        .output()
        .expect("quorumkv server runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let want = format!("invalid users file {}", dir.join("users.toml").display());
    assert!(
        err.contains(&want) && err.contains("missing field"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_users_file_stops_the_server_with_a_clear_error() {
    let dir = temp_dir("resp-auth-broken");
    let users = dir.join("users.toml");
    std::fs::write(
        &users,
        "[[user]]\nname = \"alice\"\nrole = \"superuser\"\npassword = \"$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHQ$aGFzaA\"\n",
    )
    .unwrap();
    let out = Command::new(binary())
        .args([
            "server",
            "--id",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--durability",
            "memory",
        ])
        .arg("--users")
        .arg(&users)
        .output()
        .expect("quorumkv server runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid users file") && err.contains("unknown role 'superuser'"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
