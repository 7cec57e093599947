//! The acceptor's handshake on arbitrary bytes, with authentication on:
//! one live replica (replica 1 of a 3-replica ABD cluster, so hellos from
//! 2 and 3 reach the cluster-secret challenge) with a cluster secret and a
//! users file, in this process. Each input is written to a fresh native
//! connection, which then half-closes. The replica must close the
//! connection within 10 s (a hello waits at most 5 s for its proof) and
//! keep running. The bounded CI version, with scripted hostile sequences:
//! crates/node/tests/hostile_peers.rs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use quorumkv_node::auth::{hash_password, Role, Users, UsersHandle};
use quorumkv_node::config::ClusterFile;
use quorumkv_node::peer_auth::ClusterSecret;
use quorumkv_node::server::{self, Listeners, ServerOptions};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Replica {
    rt: tokio::runtime::Runtime,
    addr: SocketAddr,
}

/// Set if the replica's `run` ever returns.
static ENDED: AtomicBool = AtomicBool::new(false);

fn replica() -> &'static Replica {
    static R: OnceLock<Replica> = OnceLock::new();
    R.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let native = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("a loopback port");
        let addr = native.local_addr().expect("bound");
        let mut file = ClusterFile::local("abd".parse().expect("abd"), 3, 0);
        file.replicas[0].addr = addr;
        let mut users = Users::default();
        users
            .set(
                "alice",
                Role::ReadWrite,
                hash_password("wonderland").expect("hash"),
            )
            .expect("a user");
        let mut opts = ServerOptions::new(1, file);
        opts.secret = Some(ClusterSecret::from_text(&ClusterSecret::generate()).expect("secret"));
        opts.users = Some(UsersHandle::from_users(users));
        let listeners = Listeners {
            native,
            resp: None,
            metrics: None,
        };
        rt.spawn(async move {
            let _ = server::run(opts, listeners, std::future::pending::<()>()).await;
            ENDED.store(true, Ordering::SeqCst);
        });
        Replica { rt, addr }
    })
}

fuzz_target!(|data: &[u8]| {
    let r = replica();
    r.rt.block_on(async {
        let mut s = tokio::net::TcpStream::connect(r.addr)
            .await
            .expect("the replica accepts connections");
        // It may close before reading everything: that is an answer too.
        let _ = s.write_all(data).await;
        let _ = s.shutdown().await;
        let mut sink = [0u8; 4096];
        let drained = async { while matches!(s.read(&mut sink).await, Ok(1..)) {} };
        tokio::time::timeout(Duration::from_secs(10), drained)
            .await
            .expect("the replica closes a connection after its EOF");
    });
    assert!(!ENDED.load(Ordering::SeqCst), "the replica stopped");
});
