//! Znode ACLs on a real 3-replica Zab cluster (child processes, TCP): a
//! node an ACL gives to `digest:alice` is unreadable and unwritable to an
//! anonymous session (ZooKeeper's NoAuth) and readable once the session's
//! connection adds alice's digest; `quorumkv zk getacl / setacl / --auth /
//! create --acl`. (A native login as the identity `user:NAME`:
//! crates/node/tests/znode_login.rs, in-process, since a local cluster
//! with a users file cannot be probed for readiness without a login.)

mod common;

use quorumkv_core::znode::acl::{self, Acl, ALL, READ};
use quorumkv_core::znode::ZkError;
use quorumkv_node::client::{ClientConfig, ClientMode};
use quorumkv_node::local::LocalCluster;
use quorumkv_node::zk::{CreateMode, ZkClient, ZkClientError};
use std::time::Duration;

async fn zab_cluster(server_args: Vec<String>) -> LocalCluster {
    common::zab_cluster_with(server_args).await
}

fn cfg() -> ClientConfig {
    common::client_cfg(ClientMode::Proxy, Duration::from_secs(5))
}

async fn at(cluster: &LocalCluster, i: usize, cfg: ClientConfig) -> ZkClient {
    let addr = cluster.native_addrs()[i];
    ZkClient::connect(vec![addr], cfg, Duration::from_secs(10))
        .await
        .unwrap()
}

fn no_auth<T: std::fmt::Debug>(r: Result<T, ZkClientError>) {
    assert!(
        matches!(r, Err(ZkClientError::Zk(ZkError::NoAuth))),
        "expected NoAuth, got {r:?}"
    );
}

#[test]
fn digest_acls_on_a_real_cluster_and_the_cli() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(zab_cluster(Vec::new()));
    let hash = acl::digest("alice:secret").unwrap();
    rt.block_on(async {
        let alice = at(&cluster, 0, cfg()).await;
        let anon = at(&cluster, 1, cfg()).await;
        alice.add_auth("digest", "alice:secret").await.unwrap();
        let only_alice = vec![Acl::new(ALL, "digest", &hash)];
        alice
            .create_with_acl("/private", "s3cret", CreateMode::PERSISTENT, only_alice)
            .await
            .unwrap();
        alice
            .create("/private/kid", "", CreateMode::PERSISTENT)
            .await
            .unwrap();
        // Anonymous: every check refuses, exists answers (ZooKeeper's
        // exists needs no permission), nothing changes.
        no_auth(anon.get_data("/private", false).await);
        no_auth(anon.children("/private", false).await);
        no_auth(anon.get_acl("/private").await);
        no_auth(anon.set_data("/private", "forged", None).await);
        no_auth(anon.create("/private/x", "", CreateMode::PERSISTENT).await);
        no_auth(anon.delete("/private/kid", None).await);
        no_auth(anon.set_acl("/private", acl::open_acl_unsafe(), None).await);
        assert!(anon.exists("/private", false).await.unwrap().is_some());
        // A wrong password is another identity.
        anon.add_auth("digest", "alice:wrong").await.unwrap();
        no_auth(anon.get_data("/private", false).await);
        // The identity cannot be claimed as scheme user, nor an unknown one.
        for (scheme, auth) in [("user", "alice"), ("ip", "127.0.0.1")] {
            let r = anon.add_auth(scheme, auth).await;
            assert!(
                matches!(r, Err(ZkClientError::Zk(ZkError::BadArguments(_)))),
                "{r:?}"
            );
        }
        // After addauth with alice's password: readable, and by every
        // replica (the check is the same everywhere).
        anon.add_auth("digest", "alice:secret").await.unwrap();
        let (data, st) = anon.get_data("/private", false).await.unwrap();
        assert_eq!((&data[..], st.version), (&b"s3cret"[..], 0));
        let (acl, st) = anon.get_acl("/private").await.unwrap();
        assert_eq!(
            (acl, st.aversion),
            (vec![Acl::new(ALL, "digest", &hash)], 0)
        );
        // setACL counts versions; `auth` stands for the connection's ids.
        let mine = vec![Acl::new(ALL, "auth", ""), Acl::new(READ, "world", "anyone")];
        let st = alice
            .set_acl("/private", mine.clone(), Some(0))
            .await
            .unwrap();
        assert_eq!(st.aversion, 1);
        let r = alice.set_acl("/private", mine, Some(0)).await;
        assert!(
            matches!(r, Err(ZkClientError::Zk(ZkError::BadVersion))),
            "{r:?}"
        );
        let r = alice.set_acl("/private", Vec::new(), None).await;
        assert!(
            matches!(r, Err(ZkClientError::Zk(ZkError::InvalidAcl))),
            "{r:?}"
        );
    });

    // The CLI, one session per command.
    let zk = |args: &[&str]| common::zk_cli(&cluster, args);
    // World may read now (setACL above), without ADMIN the hash is hidden.
    let (code, out, err) = zk(&["getacl", "/private"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "digest:alice:x:cdrwa\nworld:anyone:r\naversion 1\n");
    let auth = ["--auth", "digest:alice:secret"];
    let (_, out, _) = zk(&[&auth[..], &["getacl", "/private"]].concat());
    assert_eq!(
        out,
        format!("digest:{hash}:cdrwa\nworld:anyone:r\naversion 1\n")
    );
    let (code, _, err) = zk(&["set", "/private", "forged"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("not authenticated"), "{err}");
    let (code, _, err) = zk(&["setacl", "/private", "world:anyone:cdrwa"]);
    assert_eq!(code, Some(1), "{err}");
    // --auth before or after the subcommand.
    let acl_text = format!("digest:{hash}:cdrwa");
    let (code, out, err) = zk(&[
        "setacl",
        "/private",
        &acl_text,
        "--auth",
        "digest:alice:secret",
    ]);
    assert_eq!((code, out.as_str()), (Some(0), "aversion 2\n"), "{err}");
    let (code, _, err) = zk(&["get", "/private"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("not authenticated"), "{err}");
    assert_eq!(
        zk(&[&auth[..], &["get", "/private"]].concat()).1,
        "s3cret\n"
    );
    // create --acl: auth:: needs an identity; with one it is the digest.
    let (code, _, err) = zk(&["create", "/mine", "--acl", "auth::cdrwa"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("invalid ACL"), "{err}");
    let (code, _, err) =
        zk(&[&auth[..], &["create", "/mine", "m", "--acl", "auth::cdrwa"]].concat());
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        zk(&[&auth[..], &["getacl", "/mine"]].concat()).1,
        format!("digest:{hash}:cdrwa\naversion 0\n")
    );
    assert_eq!(zk(&["get", "/mine"]).0, Some(1));
    let (code, _, err) = zk(&["setacl", "/mine", "nonsense"]);
    assert_eq!(code, Some(2), "a malformed ACL is a usage error: {err}");
    drop(cluster);
}
