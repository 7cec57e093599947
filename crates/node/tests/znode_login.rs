//! A native login is the znode identity `user:NAME` (znode ACLs, issue
//! 31): set by the server for the logged-in connection on whichever
//! replica the client talks to, carried to the leader in the entry, and
//! never claimable by a client (`addAuth` of scheme `user` is refused).

mod common;

use common::{fast_opts, listeners, peers_up, wait_until, Replica};
use quorumkv_core::protocol::ProtocolKind;
use quorumkv_core::znode::acl::{Acl, ALL};
use quorumkv_core::znode::ZkError;
use quorumkv_core::NodeId;
use quorumkv_node::auth::{hash_password, Role, Users, UsersHandle};
use quorumkv_node::client::{ClientConfig, ClientMode, Credentials};
use quorumkv_node::zk::{CreateMode, ZkClient, ZkClientError};
use std::net::SocketAddr;
use std::time::Duration;

fn no_auth<T: std::fmt::Debug>(r: Result<T, ZkClientError>) {
    assert!(
        matches!(r, Err(ZkClientError::Zk(ZkError::NoAuth))),
        "expected NoAuth, got {r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_login_is_the_user_identity() {
    let mut users = Users::default();
    for (name, pw) in [("alice", "a-pass"), ("bob", "b-pass")] {
        let hash = hash_password(pw).unwrap();
        users.set(name, Role::ReadWrite, hash).unwrap();
    }
    let users = UsersHandle::from_users(users);
    let (mut file, ls) = listeners(3).await;
    file.protocol = "zab".parse::<ProtocolKind>().unwrap();
    let mut replicas = Vec::new();
    for (i, l) in ls.into_iter().enumerate() {
        let mut opts = fast_opts(i as NodeId + 1, &file, 50);
        opts.users = Some(users.clone());
        replicas.push(Replica::start(opts, l));
    }
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    for (i, &a) in addrs.iter().enumerate() {
        let me = i as NodeId + 1;
        let want: Vec<NodeId> = (1..=3).filter(|&j| j != me).collect();
        wait_until(Duration::from_secs(20), "links up", || {
            let want = want.clone();
            async move { peers_up(a).await == want }
        })
        .await;
    }
    let at = |i: usize, user: &str, password: &str| {
        let cfg = ClientConfig {
            mode: ClientMode::Proxy,
            op_timeout: Duration::from_secs(10),
            credentials: Some(Credentials {
                user: user.into(),
                password: password.into(),
            }),
            ..ClientConfig::default()
        };
        ZkClient::connect(vec![addrs[i]], cfg, Duration::from_secs(10))
    };
    let alice = at(0, "alice", "a-pass").await.unwrap();
    let alice_elsewhere = at(2, "alice", "a-pass").await.unwrap();
    let bob = at(1, "bob", "b-pass").await.unwrap();
    let acl = vec![Acl::new(ALL, "user", "alice")];
    alice
        .create_with_acl("/alice", "a", CreateMode::PERSISTENT, acl)
        .await
        .unwrap();
    let (data, _) = alice_elsewhere.get_data("/alice", false).await.unwrap();
    assert_eq!(&data[..], b"a");
    no_auth(bob.get_data("/alice", false).await);
    no_auth(bob.set_data("/alice", "b", None).await);
    // Bob cannot claim alice's login as an identity.
    let r = bob.add_auth("user", "alice").await;
    assert!(
        matches!(r, Err(ZkClientError::Zk(ZkError::BadArguments(_)))),
        "{r:?}"
    );
    no_auth(bob.get_data("/alice", false).await);
    // `auth` expands to the login's identity.
    let all_mine = vec![Acl::new(ALL, "auth", "")];
    bob.create_with_acl("/bob", "", CreateMode::PERSISTENT, all_mine)
        .await
        .unwrap();
    let (acl, _) = bob.get_acl("/bob").await.unwrap();
    assert_eq!(acl, vec![Acl::new(ALL, "user", "bob")]);
    no_auth(alice.get_data("/bob", false).await);
    for r in replicas {
        r.shut_down().await;
    }
}
