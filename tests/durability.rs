//! Durable replicas: acknowledged writes survive SIGKILL of every replica,
//! a data directory serves one server at a time, and restart time against
//! data size (ignored; release build).

mod common;

use bytes::Bytes;
use common::binary;
use quorumkv_node::client::{Client, ClientConfig, ClientMode};
use quorumkv_node::local::{LocalCluster, LocalClusterConfig};
use quorumkv_node::storage::Durability;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

async fn cluster(replicas: usize, durability: Durability) -> LocalCluster {
    common::start_cluster_with(replicas, durability, Duration::from_secs(2)).await
}

/// The storage engines, the default first.
const ENGINES: [&str; 2] = ["log", "fjall"];

/// A cluster whose replicas run storage engine `engine`.
async fn cluster_on(replicas: usize, durability: Durability, engine: &str) -> LocalCluster {
    let args = ["--op-timeout", "2000ms", "--storage-engine", engine];
    let cfg = LocalClusterConfig {
        durability,
        ..common::cluster_cfg("abd", replicas, &args)
    };
    LocalCluster::start(cfg)
        .await
        .expect("local cluster starts")
}

fn cfg(mode: ClientMode) -> ClientConfig {
    common::client_cfg(mode, Duration::from_secs(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_killing_every_replica() {
    let runs = ENGINES.map(|e| [(e, Durability::Fsync), (e, Durability::Buffered)]);
    for (engine, mode) in runs.into_iter().flatten() {
        let mut c = cluster_on(3, mode, engine).await;
        let client = Client::connect(c.native_addrs(), cfg(ClientMode::Proxy))
            .await
            .unwrap();
        for i in 0..100 {
            client.put(format!("k{i}"), format!("v{i}")).await.unwrap();
        }
        client.delete("k7").await.unwrap();
        drop(client);
        let info = info(c.endpoints()[0].resp).await;
        assert!(
            info.contains(&format!("# Persistence\r\ndurability:{mode}\r\n")),
            "{info}"
        );
        let field = |name: &str| -> u64 {
            let line = info.lines().find(|l| l.starts_with(name)).expect(name);
            line[name.len() + 1..].parse().expect(name)
        };
        assert!(field("persist_records") >= 101, "{info}");
        assert!(field("persist_syncs") >= 1 && field("persist_syncs") <= field("persist_records"));
        assert!(info.contains("persist_stalled:\r\n"), "{info}");
        for id in 1..=3 {
            c.kill(id).await.unwrap();
        }
        for id in 1..=3 {
            c.restart(id).await.unwrap();
        }
        assert!(c.data_dir(1).join("IDENTITY").exists());
        let client = Client::connect(c.native_addrs(), cfg(ClientMode::Direct))
            .await
            .unwrap();
        for i in 0..100 {
            let want = (i != 7).then(|| Bytes::from(format!("v{i}")));
            let got = client.get(format!("k{i}")).await.unwrap();
            assert_eq!(got, want, "{engine} {mode}");
        }
        c.stop().await;
    }
}

#[tokio::test]
async fn a_directory_in_use_is_refused_naming_its_owner() {
    let c = cluster(1, Durability::Fsync).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = std::process::Command::new(binary())
        .args(["server", "--id", "1", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--durability", "fsync", "--data-dir"])
        .arg(c.data_dir(1))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let pid = c.pid(1).unwrap();
    assert!(
        err.contains(&format!("is in use by another quorumkv server (pid {pid})")),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// Another replica's directory is refused; so is one written in a newer
/// storage format (its `IDENTITY` marker edited), untouched; one without a
/// marker (written before markers) is read and marked.
#[test]
fn another_replicas_or_a_newer_formats_directory_is_refused() {
    let dir = std::env::temp_dir().join(format!("qkv-ident-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = || {
        (std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .local_addr()
            .unwrap()
            .port()
    };
    let file = dir.join("cluster.toml");
    let text = format!(
        "protocol = \"abd\"\ncluster_id = \"t1\"\ndurability = \"buffered\"\n\
         [[replica]]\nid = 1\naddr = \"127.0.0.1:{}\"\n[[replica]]\nid = 2\naddr = \"127.0.0.1:{}\"\n",
        port(),
        port()
    );
    std::fs::write(&file, text).unwrap();
    let data = dir.join("data");
    let serve = |id: u32| {
        std::process::Command::new(binary())
            .args(["server", "--id", &id.to_string(), "--exit-on-stdin-eof"])
            .arg("--config")
            .arg(&file)
            .arg("--data-dir")
            .arg(&data)
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Replica 1 creates the directory; closing its stdin stops it.
    let mut first = serve(1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !data.join("IDENTITY").exists() {
        assert!(Instant::now() < deadline, "replica 1 never wrote IDENTITY");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(first.stdin.take());
    first.wait().unwrap();
    let ident = std::fs::read_to_string(data.join("IDENTITY")).unwrap();
    assert!(ident.contains("cluster_id = \"t1\""), "{ident}");
    let out = serve(2).wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("belongs to replica 1, not 2"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let ident_path = data.join("IDENTITY");
    let newer = quorumkv_node::version::STORAGE_FORMAT + 1;
    let unmarked: String = (ident.lines())
        .filter(|l| !l.starts_with("format") && !l.starts_with("written_by"))
        .map(|l| format!("{l}\n"))
        .collect();
    let marked = format!("{unmarked}format = {newer}\nwritten_by = \"9.9.9\"\n");
    std::fs::write(&ident_path, &marked).unwrap();
    let out = serve(1).wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let want = format!("is in storage format {newer} (written by quorumkv 9.9.9)");
    assert!(err.contains(&want), "{err}");
    assert_eq!(std::fs::read_to_string(&ident_path).unwrap(), marked);
    std::fs::write(&ident_path, &unmarked).unwrap();
    let mut again = serve(1);
    let format = format!("format = {}", quorumkv_node::version::STORAGE_FORMAT);
    while !std::fs::read_to_string(&ident_path).is_ok_and(|t| t.contains(&format)) {
        assert!(
            Instant::now() < deadline,
            "the unmarked directory was not marked"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(again.stdin.take());
    assert!(again.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The INFO text of the replica whose RESP port is `addr`.
async fn info(addr: std::net::SocketAddr) -> String {
    use tokio::io::AsyncReadExt;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"*1\r\n$4\r\nINFO\r\n").await.unwrap();
    let mut r = BufReader::new(s);
    let mut head = String::new();
    r.read_line(&mut head).await.unwrap();
    let len: usize = head.trim().trim_start_matches('$').parse().unwrap();
    let mut body = vec![0; len];
    r.read_exact(&mut body).await.unwrap();
    String::from_utf8(body).unwrap()
}

/// SET `n` keys through one pipelined RESP connection.
async fn load_keys(addr: std::net::SocketAddr, n: usize) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (rd, mut wr) = stream.into_split();
    let writer = tokio::spawn(async move {
        let mut buf = Vec::new();
        for i in 0..n {
            let (k, v) = (format!("key:{i:09}"), format!("value:{i:09}"));
            buf.extend_from_slice(
                format!(
                    "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
                    k.len(),
                    v.len()
                )
                .as_bytes(),
            );
            if buf.len() > 1 << 16 {
                wr.write_all(&buf).await.unwrap();
                buf.clear();
            }
        }
        wr.write_all(&buf).await.unwrap();
        wr
    });
    let mut lines = BufReader::new(rd).lines();
    for i in 0..n {
        let line = lines.next_line().await.unwrap().expect("a reply");
        assert_eq!(line, "+OK", "reply {i}");
    }
    drop(writer.await.unwrap());
}

/// Restart time after a crash against data size. Run with
/// `cargo test --release --test durability -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn restart_time_against_data_size() {
    for n in [100_000, 1_000_000] {
        let mut c = cluster(1, Durability::Fsync).await;
        let ep = c.endpoints()[0];
        let t = Instant::now();
        load_keys(ep.resp, n).await;
        let load = t.elapsed().as_secs_f64();
        c.kill(1).await.unwrap();
        let t = Instant::now();
        c.restart(1).await.unwrap();
        let restart = t.elapsed().as_secs_f64();
        let client = Client::connect(c.native_addrs(), cfg(ClientMode::Direct))
            .await
            .unwrap();
        let last = format!("key:{:09}", n - 1);
        let want = Bytes::from(format!("value:{:09}", n - 1));
        assert_eq!(client.get(last).await.unwrap(), Some(want));
        println!("{n} keys: loaded in {load:.2}s; restart after kill -9: {restart:.2}s");
        c.stop().await;
    }
}

/// Every file under `dir`, recursively.
fn files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The file under `dir` holding `needle`, and where.
fn find(dir: &std::path::Path, needle: &[u8]) -> (std::path::PathBuf, usize) {
    for p in files(dir) {
        let data = std::fs::read(&p).unwrap();
        if let Some(at) = data.windows(needle.len()).position(|w| w == needle) {
            return (p, at);
        }
    }
    panic!("{needle:?} not found under {}", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_is_dropped_and_a_corrupt_middle_stops_startup() {
    for engine in ENGINES {
        torn_tail_and_corrupt_middle(engine).await;
    }
}

async fn torn_tail_and_corrupt_middle(engine: &str) {
    let mut c = cluster_on(1, Durability::Fsync, engine).await;
    let client = Client::connect(c.native_addrs(), cfg(ClientMode::Proxy))
        .await
        .unwrap();
    for i in 0..20 {
        let v = format!("marker-{i:03}-{}", "x".repeat(100));
        client.put(format!("k{i}"), v).await.unwrap();
    }
    drop(client);
    c.kill(1).await.unwrap();
    // A write torn by the crash: the journal ends in the middle of the
    // last batch. It was never acknowledged; the rest comes back.
    let (journal, at) = find(&c.data_dir(1), b"marker-019");
    let len = std::fs::metadata(&journal).unwrap().len();
    assert!(at as u64 + 50 < len);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap();
    f.set_len(at as u64 + 50).unwrap();
    drop(f);
    c.restart(1).await.unwrap();
    let client = Client::connect(c.native_addrs(), cfg(ClientMode::Direct))
        .await
        .unwrap();
    let v = client.get("k18").await.unwrap().expect("k18 survives");
    assert!(v.starts_with(b"marker-018"));
    assert_eq!(client.get("k19").await.unwrap(), None, "the torn write");
    drop(client);
    c.kill(1).await.unwrap();
    // A damaged batch before the tail: refuse to start, in one line.
    let (journal, at) = find(&c.data_dir(1), b"marker-005");
    let mut data = std::fs::read(&journal).unwrap();
    data[at + 20] ^= 0x55;
    std::fs::write(&journal, data).unwrap();
    let err = c.restart(1).await.unwrap_err().to_string();
    assert!(err.contains("the data is damaged"), "{err}");
    let log = std::fs::read_to_string(c.dir().join("replica-1.log")).unwrap();
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("quorumkv: cannot open the data in"),
        "{engine}: {log}"
    );
}
