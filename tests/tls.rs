//! TLS clusters: `quorumkv cluster --tls`'s local clusters (certificates by
//! `quorumkv cert`) served through the client library, the CLI and
//! redis-cli; plain clients refused; a replica certificate that cannot pose
//! as another replica; client certificates required; SIGHUP reload.

mod common;

use bytes::Bytes;
use common::{binary, require_tool};
use quorumkv_core::protocol::abd::Msg;
use quorumkv_core::protocol::ProtocolKind;
use quorumkv_node::client::{Client, ClientConfig, ClientMode};
use quorumkv_node::codec::{encode_to_bytes, Frame, DEFAULT_MAX_FRAME};
use quorumkv_node::local::{LocalCluster, LocalClusterConfig};
use quorumkv_node::net::FrameReader;
use quorumkv_node::stream::Conn;
use quorumkv_node::tls::{cert_names, ClientTls};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

async fn tls_cluster(protocol: &str, client_cert_auth: bool) -> LocalCluster {
    let cfg = LocalClusterConfig {
        protocol: protocol.parse().expect("registered"),
        replicas: 3,
        binary: binary(),
        server_args: vec!["--op-timeout".into(), "2s".into()],
        ready_timeout: Duration::from_secs(60),
        tls: true,
        client_cert_auth,
        ..Default::default()
    };
    LocalCluster::start(cfg).await.expect("TLS cluster starts")
}

fn tls_dir(c: &LocalCluster) -> PathBuf {
    c.dir().join("tls")
}

fn client_cfg(mode: ClientMode, tls: Option<ClientTls>) -> ClientConfig {
    ClientConfig {
        mode,
        op_timeout: Duration::from_secs(3),
        connect_timeout: Duration::from_secs(5),
        tls,
        ..Default::default()
    }
}

/// `quorumkv ARGS` with the cluster file: (exit code, stdout, stderr).
fn cli(c: &LocalCluster, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(binary())
        .args(args)
        .arg("--cluster")
        .arg(c.dir().join("cluster.toml"))
        .env_remove("QUORUMKV_ENDPOINTS")
        .env_remove("QUORUMKV_TLS_CA")
        .output()
        .expect("quorumkv runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// A TLS connection to `addr` trusting the cluster CA, presenting
/// `cert` (a stem in the TLS directory: `replica-2`) if given.
async fn tls_conn(dir: &Path, addr: SocketAddr, cert: Option<&str>) -> std::io::Result<Conn> {
    let (c, k) = cert.map_or((PathBuf::new(), PathBuf::new()), |s| {
        (dir.join(format!("{s}.pem")), dir.join(format!("{s}.key")))
    });
    let cert_key = cert.map(|_| (c.as_path(), k.as_path()));
    let tls = ClientTls::from_files(&dir.join("ca.pem"), cert_key).unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tls.connect(tcp, &addr.ip().to_string()).await
}

/// Send `frame` on `conn` and return the first frame that comes back.
async fn exchange(conn: Conn, frame: Frame<Msg>) -> Result<Frame<Msg>, String> {
    let (rd, mut wr) = conn.split();
    quorumkv_node::stream::write_flush(&mut wr, &encode_to_bytes(&frame))
        .await
        .map_err(|e| e.to_string())?;
    let mut reader = FrameReader::new(rd, DEFAULT_MAX_FRAME);
    let next = tokio::time::timeout(Duration::from_secs(5), reader.next::<Msg>());
    next.await
        .expect("an answer or a close")
        .map_err(|e| e.to_string())
}

/// Every replica reaches every other one.
async fn all_links_up(c: &LocalCluster, within: Duration) {
    let tls = c.client_tls();
    let start = Instant::now();
    loop {
        let mut up = 0;
        for e in c.endpoints() {
            let host = e.native.ip().to_string();
            let s = quorumkv_node::status::fetch_with(
                e.native,
                &host,
                Duration::from_secs(2),
                tls.as_ref(),
            );
            if let Ok(s) = s.await {
                if s.peers_up.len() == c.endpoints().len() - 1 && s.quorum_reachable() {
                    up += 1;
                }
            }
        }
        if up == c.endpoints().len() {
            return;
        }
        assert!(
            start.elapsed() < within,
            "links not all up within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abd_and_zab_serve_over_tls_through_the_library_and_the_cli() {
    for protocol in ["abd", "zab"] {
        let c = tls_cluster(protocol, false).await;
        all_links_up(&c, Duration::from_secs(20)).await;
        for mode in [ClientMode::Direct, ClientMode::Proxy] {
            let client = Client::connect(c.native_addrs(), client_cfg(mode, c.client_tls()))
                .await
                .unwrap_or_else(|e| panic!("{protocol} {mode:?}: {e}"));
            let key = format!("k-{protocol}-{mode:?}");
            client.put(key.clone(), "v1").await.unwrap();
            assert_eq!(
                client.get(key.clone()).await.unwrap(),
                Some(Bytes::from("v1"))
            );
        }
        // The CLI finds the CA (and client certificate) in the cluster file.
        let (code, out, err) = cli(&c, &["put", "cli-key", "over tls"]);
        assert_eq!((code, out.as_str()), (0, "OK"), "{protocol}: {err}");
        let (code, out, err) = cli(&c, &["get", "cli-key"]);
        assert_eq!((code, out.as_str()), (0, "over tls"), "{protocol}: {err}");
        if protocol == "zab" {
            // The znode CLI too.
            let (code, _, err) = cli(&c, &["zk", "create", "/over-tls", "znode data"]);
            assert_eq!(code, 0, "{err}");
            let (code, out, err) = cli(&c, &["zk", "get", "/over-tls"]);
            assert_eq!((code, out.as_str()), (0, "znode data"), "{err}");
        }
        let (code, out, err) = cli(&c, &["endpoints", "status"]);
        assert_eq!(code, 0, "{protocol}: {err}");
        assert_eq!(out.matches(" yes ").count(), 3, "{out}");
        // ...or from --tls-ca, with the endpoints given by name.
        let ca = tls_dir(&c).join("ca.pem");
        let eps: Vec<String> = (c.endpoints().iter())
            .map(|e| format!("localhost:{}", e.native.port()))
            .collect();
        let out = Command::new(binary())
            .args(["get", "cli-key", "--endpoints", &eps.join(",")])
            .arg("--tls-ca")
            .arg(&ca)
            .env_remove("QUORUMKV_CLUSTER")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{protocol}: {stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "over tls");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_is_refused_clearly_and_the_replica_keeps_serving() {
    let c = tls_cluster("abd", false).await;
    let plain = client_cfg(ClientMode::Proxy, None);
    let err = Client::connect(c.native_addrs(), plain)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("this port requires TLS"), "{err}");
    // A plain status request and a plain RESP client are told so too.
    let ep = c.endpoints()[0];
    let status = quorumkv_node::status::fetch(ep.native, Duration::from_secs(2)).await;
    assert!(status.unwrap_err().contains("requires TLS"));
    let mut resp = tokio::net::TcpStream::connect(ep.resp).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    resp.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
    let mut answer = String::new();
    resp.read_to_string(&mut answer).await.unwrap();
    assert!(
        answer.starts_with("-ERR this port requires TLS"),
        "{answer}"
    );
    // A TLS client on a plain port is told what is wrong, too.
    let plain_port = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = plain_port.local_addr().unwrap();
    tokio::spawn(async move {
        let (s, _) = plain_port.accept().await.unwrap();
        drop(s);
    });
    let wrong = client_cfg(ClientMode::Proxy, c.client_tls());
    let err = Client::connect([addr], wrong).await.err().expect("fails");
    assert!(err.to_string().contains("TLS handshake failed"), "{err}");
    // The replicas still serve TLS clients, links intact.
    all_links_up(&c, Duration::from_secs(10)).await;
    let client = Client::connect(
        c.native_addrs(),
        client_cfg(ClientMode::Direct, c.client_tls()),
    )
    .await
    .unwrap();
    client.put("after", "plain").await.unwrap();
    assert_eq!(
        client.get("after").await.unwrap(),
        Some(Bytes::from("plain"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_certificate_cannot_pose_as_another_replica() {
    let c = tls_cluster("abd", false).await;
    all_links_up(&c, Duration::from_secs(20)).await;
    let client = Client::connect(
        c.native_addrs(),
        client_cfg(ClientMode::Direct, c.client_tls()),
    )
    .await
    .unwrap();
    client.put("kept", "intact").await.unwrap();
    let dir = tls_dir(&c);
    let protocol: ProtocolKind = "abd".parse().unwrap();
    let r1 = c.endpoints()[0].native;
    // Replica 2's own certificate, claiming replica 3.
    let conn = tls_conn(&dir, r1, Some("replica-2")).await.unwrap();
    let hello = Frame::HelloPeer {
        node: 3,
        protocol,
        nonce: vec![7u8; 32].into(),
        version: Some(quorumkv_node::version::Version::ours()),
    };
    match exchange(conn, hello.clone()).await {
        Ok(Frame::Error { message }) => {
            assert!(
                message.contains("certificate names replica 2, not 3"),
                "{message}"
            )
        }
        other => panic!("replica 2's certificate posed as replica 3: {other:?}"),
    }
    // A client certificate, and no certificate at all, cannot be a replica.
    for cert in [Some("client-quorumkv"), None] {
        let conn = tls_conn(&dir, r1, cert).await.unwrap();
        match exchange(conn, hello.clone()).await {
            Ok(Frame::Error { message }) => {
                assert!(message.contains("no replica certificate"), "{message}")
            }
            other => panic!("{cert:?} posed as replica 3: {other:?}"),
        }
    }
    // The real links stayed up and the data is intact.
    tokio::time::sleep(Duration::from_millis(500)).await;
    all_links_up(&c, Duration::from_secs(5)).await;
    assert_eq!(
        client.get("kept").await.unwrap(),
        Some(Bytes::from("intact"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_cert_auth_refuses_a_client_without_a_certificate() {
    let c = tls_cluster("abd", true).await;
    all_links_up(&c, Duration::from_secs(20)).await;
    let ca_only = ClientTls::from_files(&tls_dir(&c).join("ca.pem"), None).unwrap();
    let err = Client::connect(
        c.native_addrs(),
        client_cfg(ClientMode::Proxy, Some(ca_only)),
    )
    .await
    .err()
    .expect("a client without a certificate is refused");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
    // With the client certificate `quorumkv cluster` made, all is well.
    let client = Client::connect(
        c.native_addrs(),
        client_cfg(ClientMode::Direct, c.client_tls()),
    )
    .await
    .unwrap();
    client.put("k", "v").await.unwrap();
    assert_eq!(client.get("k").await.unwrap(), Some(Bytes::from("v")));
    let (code, out, err) = cli(&c, &["get", "k"]);
    assert_eq!((code, out.as_str()), (0, "v"), "{err}");
    // A container's HEALTHCHECK: `quorumkv health` with the replica's own
    // certificate, from the replica's environment.
    let dir = tls_dir(&c);
    let health = |env: &[(&str, PathBuf)]| {
        let mut cmd = Command::new(binary());
        cmd.args(["health", "--addr", &c.endpoints()[0].native.to_string()]);
        for var in [
            "QUORUMKV_TLS_CA",
            "QUORUMKV_TLS_CERT",
            "QUORUMKV_TLS_KEY",
            "QUORUMKV_CONFIG",
            "QUORUMKV_ID",
        ] {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        let out = cmd.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let own = [
        ("QUORUMKV_TLS_CA", dir.join("ca.pem")),
        ("QUORUMKV_TLS_CERT", dir.join("replica-1.pem")),
        ("QUORUMKV_TLS_KEY", dir.join("replica-1.key")),
    ];
    let (ok, out) = health(&own);
    assert!(ok && out.starts_with("healthy"), "{out}");
    let (ok, out) = health(&own[..1]);
    assert!(!ok, "no client certificate, yet healthy: {out}");
    // Or with what the container's environment names: its cluster file.
    let config = [
        ("QUORUMKV_CONFIG", c.dir().join("cluster.toml")),
        ("QUORUMKV_ID", PathBuf::from("1")),
    ];
    let (ok, out) = health(&config);
    assert!(ok && out.starts_with("healthy"), "{out}");
    if require_tool("redis-cli") {
        let port = c.endpoints()[1].resp.port().to_string();
        let ca = dir.join("ca.pem");
        let without = redis_cli(&["--tls", "--cacert", path(&ca), "-p", &port, "GET", "k"]);
        assert_ne!(without, "v", "redis-cli without a certificate was served");
        let (cert, key) = (
            dir.join("client-quorumkv.pem"),
            dir.join("client-quorumkv.key"),
        );
        let args = [
            "--tls",
            "--cacert",
            path(&ca),
            "--cert",
            path(&cert),
            "--key",
            path(&key),
        ];
        let with = redis_cli(&[&args[..], &["-p", &port, "GET", "k"]].concat());
        assert_eq!(with, "v");
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn redis_cli(args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_speaks_tls_to_every_replica() {
    if !require_tool("redis-cli") {
        return;
    }
    let c = tls_cluster("abd", false).await;
    all_links_up(&c, Duration::from_secs(20)).await;
    let ca = tls_dir(&c).join("ca.pem");
    let ports: Vec<String> = (c.endpoints().iter())
        .map(|e| e.resp.port().to_string())
        .collect();
    let tls = |port: &str, cmd: &[&str]| {
        redis_cli(&[&["--tls", "--cacert", path(&ca), "-p", port], cmd].concat())
    };
    assert_eq!(tls(&ports[0], &["PING"]), "PONG");
    assert_eq!(tls(&ports[0], &["SET", "greeting", "hello tls"]), "OK");
    assert_eq!(tls(&ports[1], &["GET", "greeting"]), "hello tls");
    assert_eq!(tls(&ports[2], &["GET", "greeting"]), "hello tls");
    let plain = redis_cli(&["-p", &ports[0], "GET", "greeting"]);
    assert!(plain.contains("requires TLS"), "{plain}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_certificates_and_a_bad_file_keeps_the_old_ones() {
    let c = tls_cluster("abd", false).await;
    let dir = tls_dir(&c);
    let r1 = c.endpoints()[0].native;
    let served = || async {
        let conn = tls_conn(&dir, r1, None).await.expect("TLS handshake");
        cert_names(&conn.peer_certificate().expect("a server certificate")).unwrap()
    };
    let before = served().await;
    assert!(
        before.dns.contains(&"replica-1.quorumkv".to_string()),
        "{before:?}"
    );
    assert!(!before.dns.contains(&"renewed.example".to_string()));
    // Renew replica 1's certificate with another name, then SIGHUP it.
    let renew = ["cert", "replica", "--id", "1", "--host", "renewed.example"];
    common::run_ok(Command::new(binary()).args(renew).arg("--dir").arg(&dir));
    let hup = |c: &LocalCluster| {
        let pid = c.pid(1).expect("replica 1 runs") as i32;
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    };
    hup(&c);
    let start = Instant::now();
    while !served().await.dns.contains(&"renewed.example".to_string()) {
        assert!(start.elapsed() < Duration::from_secs(10), "not reloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A broken file: logged, and the certificate in use stays.
    std::fs::write(dir.join("replica-1.pem"), "not a certificate").unwrap();
    hup(&c);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(served().await.dns.contains(&"renewed.example".to_string()));
    // The replica still serves, and its links (redialled with the new
    // certificate when they break) are up.
    all_links_up(&c, Duration::from_secs(10)).await;
    let client = Client::connect(
        c.native_addrs(),
        client_cfg(ClientMode::Proxy, c.client_tls()),
    )
    .await
    .unwrap();
    client.put("after-reload", "yes").await.unwrap();
}

#[test]
fn cert_makes_a_ca_and_replica_and_client_certificates() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("qkv-cert-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run = |args: &[&str]| {
        Command::new(binary())
            .arg("cert")
            .args(args)
            .arg("--dir")
            .arg(&dir)
            .output()
            .unwrap()
    };
    let no_ca = run(&["replica", "--id", "1"]);
    assert!(!no_ca.status.success());
    assert!(String::from_utf8_lossy(&no_ca.stderr).contains("quorumkv cert ca"));
    assert!(run(&["ca"]).status.success());
    let again = run(&["ca"]);
    assert!(
        !again.status.success(),
        "an existing CA is not replaced without --force"
    );
    assert!(run(&[
        "replica",
        "--id",
        "2",
        "--host",
        "qkv2.example",
        "--host",
        "10.0.0.2"
    ])
    .status
    .success());
    assert!(run(&["client", "--name", "alice"]).status.success());
    for key in ["ca.key", "replica-2.key", "client-alice.key"] {
        let mode = std::fs::metadata(dir.join(key))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }
    let der = |f: &str| {
        use rustls_pki_types::pem::PemObject;
        rustls_pki_types::CertificateDer::from_pem_file(dir.join(f))
            .unwrap()
            .to_vec()
    };
    let replica = cert_names(&der("replica-2.pem")).unwrap();
    assert_eq!(
        replica.dns,
        ["replica-2.quorumkv", "localhost", "qkv2.example"]
    );
    let client = cert_names(&der("client-alice.pem")).unwrap();
    assert_eq!(client.common_name.as_deref(), Some("alice"));
    assert!(client.dns.is_empty());
    assert!(!run(&["replica", "--id", "64"]).status.success());
    assert!(!run(&["client", "--name", "../x"]).status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}
