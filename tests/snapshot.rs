//! `quorumkv snapshot save | restore | status` on real clusters: every
//! write acknowledged before the save comes back in a new cluster started
//! on the restored directories, nothing written after it does, a damaged
//! file or a used directory is refused, and only an admin may save.

mod common;

use bytes::Bytes;
use common::qkv;
use quorumkv_node::client::{Client, ClientMode};
use quorumkv_node::local::{LocalCluster, LocalClusterConfig};
use quorumkv_node::storage::Durability;
use quorumkv_node::zk::{CreateMode, ZkClient};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

const N: usize = 60;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("qkv-snap-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn eps(c: &LocalCluster) -> String {
    (c.native_addrs().iter())
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "{}", text(&out));
    text(&out)
}

fn save(c: &LocalCluster, file: &Path, extra: &[&str]) -> Output {
    let f = file.display().to_string();
    let e = eps(c);
    let mut args = vec!["snapshot", "save", f.as_str(), "--endpoints", e.as_str()];
    args.extend_from_slice(extra);
    qkv(&args)
}

fn restore(file: &Path, root: &Path) -> Output {
    qkv(&[
        "snapshot",
        "restore",
        &file.display().to_string(),
        "--data-dir",
        &root.display().to_string(),
        "--replicas",
        "1,2,3",
    ])
}

/// A cluster of `protocol` whose replicas keep their data under `root`.
async fn durable(protocol: &str, root: Option<&Path>) -> LocalCluster {
    let cfg = LocalClusterConfig {
        durability: Durability::Fsync,
        data_root: root.map(Path::to_path_buf),
        ..common::cluster_cfg(protocol, 3, &["--op-timeout", "3s"])
    };
    LocalCluster::start(cfg).await.expect("cluster starts")
}

async fn client(c: &LocalCluster) -> Client {
    let cfg = common::client_cfg(ClientMode::Proxy, Duration::from_secs(5));
    Client::connect(c.native_addrs(), cfg).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abd_every_acknowledged_write_comes_back_and_nothing_after_the_save() {
    registers_come_back("abd").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lock_every_acknowledged_write_comes_back_and_nothing_after_the_save() {
    registers_come_back("lease-lock").await;
}

/// Save a register protocol's cluster, write after the save, restore into
/// a new cluster: the writes before are there, those after are not.
async fn registers_come_back(protocol: &str) {
    let dir = temp_dir(protocol);
    let file = dir.join("regs.qkv");
    let src = durable(protocol, None).await;
    let cl = client(&src).await;
    for i in 0..N {
        cl.put(format!("k{i}"), format!("v{i}")).await.unwrap();
    }
    cl.put("k1", "v1-second").await.unwrap();
    cl.delete("k2").await.unwrap();
    let said = ok(save(&src, &file, &[]));
    assert!(
        said.contains(&format!("saved {protocol} ({} entries", N - 1)),
        "{said}"
    );
    // After the save: must not appear in the restored cluster.
    cl.put("late", "x").await.unwrap();
    cl.put("k0", "overwritten-late").await.unwrap();
    drop(cl);
    src.stop().await;

    let status = ok(qkv(&["snapshot", "status", &file.display().to_string()]));
    let proto = format!("protocol: {protocol}");
    for want in [
        proto.as_str(),
        "format: 1",
        "checksum: sha256 (ok)",
        "members: 1,2,3",
    ] {
        assert!(status.contains(want), "{want}: {status}");
    }
    let root = dir.join("data");
    let said = ok(restore(&file, &root));
    let restored = format!("restored {protocol}");
    assert_eq!(said.matches(&restored).count(), 3, "{said}");
    let err = text(&restore(&file, &root));
    assert!(err.contains("is not empty"), "{err}");

    let new = durable(protocol, Some(&root)).await;
    let cl = client(&new).await;
    for i in 0..N {
        let want = match i {
            1 => Some(Bytes::from("v1-second")),
            2 => None,
            _ => Some(Bytes::from(format!("v{i}"))),
        };
        assert_eq!(cl.get(format!("k{i}")).await.unwrap(), want, "k{i}");
    }
    assert_eq!(
        cl.get("late").await.unwrap(),
        None,
        "written after the save"
    );
    // The restored registers keep their tags: new writes supersede them.
    cl.put("k3", "after-restore").await.unwrap();
    assert_eq!(
        cl.get("k3").await.unwrap(),
        Some(Bytes::from("after-restore"))
    );
    drop(cl);
    new.stop().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zab_znodes_and_keys_come_back_without_sessions() {
    let dir = temp_dir("zab");
    let file = dir.join("zab.qkv");
    let src = durable("zab", None).await;
    let cfg = common::client_cfg(ClientMode::Proxy, Duration::from_secs(5));
    let zk = ZkClient::connect(src.native_addrs(), cfg, Duration::from_secs(30))
        .await
        .unwrap();
    zk.create("/app", "root-data", CreateMode::PERSISTENT)
        .await
        .unwrap();
    for i in 0..10 {
        let p = format!("/app/n{i}");
        zk.create(&p, format!("d{i}"), CreateMode::PERSISTENT)
            .await
            .unwrap();
    }
    zk.create("/app/live", "mine", CreateMode::EPHEMERAL)
        .await
        .unwrap();
    let cl = client(&src).await;
    for i in 0..N {
        cl.put(format!("k{i}"), format!("v{i}")).await.unwrap();
    }
    let said = ok(save(&src, &file, &[]));
    assert!(said.contains("saved zab"), "{said}");
    zk.create("/app/late", "x", CreateMode::PERSISTENT)
        .await
        .unwrap();
    cl.put("late", "x").await.unwrap();
    drop(cl);
    drop(zk);
    src.stop().await;

    let status = ok(qkv(&["snapshot", "status", &file.display().to_string()]));
    assert!(status.contains("protocol: zab"), "{status}");
    let zxid: u64 = (status.lines())
        .find_map(|l| l.strip_prefix("zxid: "))
        .expect("a zxid line")
        .parse()
        .unwrap();
    assert!(zxid > N as u64, "{status}");
    let root = dir.join("data");
    ok(restore(&file, &root));
    let new = durable("zab", Some(&root)).await;
    let cfg = common::client_cfg(ClientMode::Proxy, Duration::from_secs(5));
    let zk = ZkClient::connect_without_session(new.native_addrs(), cfg)
        .await
        .unwrap();
    let mut kids = zk.children("/app", false).await.unwrap();
    kids.sort();
    let want: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
    assert_eq!(kids, want, "no ephemeral, nothing after the save");
    let (data, stat) = zk.get_data("/app/n7", false).await.unwrap();
    assert_eq!(data, Bytes::from("d7"));
    assert!(stat.czxid <= zxid);
    let (_, app) = zk.get_data("/app", false).await.unwrap();
    assert_eq!(app.num_children, 10);
    let cl = client(&new).await;
    for i in 0..N {
        let want = Some(Bytes::from(format!("v{i}")));
        assert_eq!(cl.get(format!("k{i}")).await.unwrap(), want, "k{i}");
    }
    assert_eq!(cl.get("late").await.unwrap(), None);
    // The new cluster goes on from the snapshot's zxid.
    let (_, stat) = zk
        .create("/after", "y", CreateMode::PERSISTENT)
        .await
        .unwrap();
    assert!(stat.czxid > zxid, "{} <= {zxid}", stat.czxid);
    drop((cl, zk));
    new.stop().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_file_is_refused_and_only_an_admin_may_save() {
    let dir = temp_dir("auth");
    let users = common::users_file(
        &dir,
        &[("boss", "admin", "b-pass"), ("rw", "readwrite", "w-pass")],
    );
    let cfg = LocalClusterConfig {
        users: Some(users.clone()),
        ..common::cluster_cfg("abd", 3, &[])
    };
    let c = LocalCluster::start(cfg).await.expect("cluster starts");
    let cl = common::client_as(c.native_addrs(), "rw", "w-pass").await;
    cl.put("a", "1").await.unwrap();
    drop(cl);
    let file = dir.join("s.qkv");
    let pw = |p: &str| {
        let f = dir.join(format!("{p}.txt"));
        std::fs::write(&f, p).unwrap();
        f.display().to_string()
    };
    let (wf, bf) = (pw("w-pass"), pw("b-pass"));
    let err = text(&save(&c, &file, &["--user", "rw", "--password-file", &wf]));
    assert!(
        err.contains("NOPERM user rw (role readwrite) may not take a snapshot"),
        "{err}"
    );
    assert!(!file.exists());
    let err = text(&save(&c, &file, &[]));
    assert!(err.contains("NOAUTH"), "{err}");
    ok(save(&c, &file, &["--user", "boss", "--password-file", &bf]));
    c.stop().await;

    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    let bad = dir.join("bad.qkv");
    std::fs::write(&bad, &bytes).unwrap();
    for out in [
        restore(&bad, &dir.join("data")),
        qkv(&["snapshot", "status", &bad.display().to_string()]),
    ] {
        assert!(!out.status.success());
        assert!(text(&out).contains("checksum mismatch"), "{}", text(&out));
    }
    assert!(
        !dir.join("data").exists(),
        "nothing restored from a bad file"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_without_snapshots_is_named_in_the_refusal() {
    let c = LocalCluster::start(common::cluster_cfg("ring", 3, &[]))
        .await
        .expect("cluster starts");
    let file = temp_dir("ring").join("ring.qkv");
    let err = text(&save(&c, &file, &[]));
    assert!(
        err.contains("(ring): snapshots are not supported for this protocol"),
        "{err}"
    );
    assert!(!file.exists());
    c.stop().await;
}
