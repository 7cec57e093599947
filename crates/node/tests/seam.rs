//! The seam every protocol plugs into, exercised through real servers and
//! the real client library with a toy protocol defined here: sessions and
//! their `Down`, pushed events, `NotLeader` redirects and operation ids.
//!
//! The toy ("leader-1"): replica 1 is the leader and serves a map; every
//! other replica answers `NotLeader { hint: 1 }`. A put notifies the
//! session it came on. `get sessions-down` answers how many client
//! sessions the core has seen go down; `get ops` how many distinct
//! operation ids it applied (a retried one counts once). A put of a key
//! starting with `bounce` is refused with `NotLeader { hint: 1 }` the first
//! time its operation id is seen (a leader that was not ready yet), and
//! applied when that same id comes back. A put of a key starting with
//! `swallow` gets no answer the first time its id is seen (a server that
//! hangs), and is applied when that same id comes back.

use bytes::Bytes;
use quorumkv_core::protocol::{
    LinkEvent, LinkModel, NoBugs, NoOptions, NodeSpec, Out, Protocol, ServerOnly,
};
use quorumkv_core::{ClientRef, Event, NodeId, OpError, OpId, Peer, Request, Response, Time};
use quorumkv_node::client::{Client, ClientConfig, ClientMode};
use quorumkv_node::config::ClusterFile;
use quorumkv_node::server::{self, Listeners, ServerOptions};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum NoMsg {}

#[derive(Debug)]
struct LeaderOne {
    id: NodeId,
    map: HashMap<Bytes, Bytes>,
    applied: HashSet<OpId>,
    bounced: HashSet<OpId>,
    swallowed: HashSet<OpId>,
    sessions_up: HashSet<u64>,
    sessions_down: u64,
}

impl Protocol for LeaderOne {
    type Msg = NoMsg;
    type Timer = ();

    fn on_client(&mut self, _: Time, c: ClientRef, req: Request, out: &mut Out<NoMsg, ()>) {
        if self.id != 1 {
            let hint = Some(1);
            return out.reply(c, Response::Failed(OpError::NotLeader { hint }));
        }
        let resp = match req {
            Request::Get { key } if &key[..] == b"sessions-down" => {
                Response::Value(Some(self.sessions_down.to_string().into()))
            }
            Request::Get { key } if &key[..] == b"ops" => {
                Response::Value(Some(self.applied.len().to_string().into()))
            }
            Request::Get { key } => Response::Value(self.map.get(&key).cloned()),
            Request::Put { key, .. } if key.starts_with(b"bounce") && self.bounced.insert(c.op) => {
                Response::Failed(OpError::NotLeader { hint: Some(1) })
            }
            Request::Put { key, .. }
                if key.starts_with(b"swallow") && self.swallowed.insert(c.op) =>
            {
                return; // no answer: the client's attempt times out
            }
            Request::Put { key, value } => {
                if self.applied.insert(c.op) {
                    self.map.insert(key.clone(), value.clone());
                }
                let event = Event {
                    kind: "put".into(),
                    key,
                    value: Some(value),
                };
                out.notify(c.session, event);
                Response::Done
            }
            _ => Response::Failed(OpError::refused("only get and put here")),
        };
        out.reply(c, resp);
    }
    fn on_msg(&mut self, _: Time, _: Peer, msg: NoMsg, _: &mut Out<NoMsg, ()>) {
        match msg {}
    }
    fn on_timer(&mut self, _: Time, _: (), _: &mut Out<NoMsg, ()>) {}
    fn on_link(&mut self, _: Time, ev: LinkEvent, _: &mut Out<NoMsg, ()>) {
        match ev {
            LinkEvent::Up(Peer::Conn(s)) => {
                self.sessions_up.insert(s);
            }
            LinkEvent::Down(Peer::Conn(s)) if self.sessions_up.remove(&s) => {
                self.sessions_down += 1;
            }
            _ => {}
        }
    }
}

struct Toy;

impl ServerOnly for Toy {
    const NAME: &'static str = "leader-1";
    const ABOUT: &'static str = "test protocol";
    const LINK_MODEL: LinkModel = LinkModel::FifoReliable;
    const PROMISES_LIVENESS: bool = true;
    type Msg = NoMsg;
    type Node = LeaderOne;
    type Options = NoOptions;
    type Bug = NoBugs;
    fn node(spec: &NodeSpec<'_>, _: &NoOptions, _: Option<NoBugs>) -> LeaderOne {
        LeaderOne {
            id: spec.id,
            map: HashMap::new(),
            applied: HashSet::new(),
            bounced: HashSet::new(),
            swallowed: HashSet::new(),
            sessions_up: HashSet::new(),
            sessions_down: 0,
        }
    }
}

/// `n` toy replicas on free ports, stopped when the senders drop. The
/// cluster file names a registered protocol (peers check it in their
/// hello); the servers run the toy.
async fn start(n: u16) -> (ClusterFile, Vec<oneshot::Sender<()>>) {
    let ports: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let mut file = ClusterFile::local("abd".parse().unwrap(), n as usize, 0);
    for (r, l) in file.replicas.iter_mut().zip(&ports) {
        r.addr = l.local_addr().unwrap();
        r.resp = None;
    }
    drop(ports);
    let mut stops = Vec::new();
    for id in 1..=n as NodeId {
        let opts = ServerOptions::new(id, file.clone());
        let listeners = Listeners::bind(&opts).await.expect("ports are free");
        let (tx, rx) = oneshot::channel::<()>();
        stops.push(tx);
        tokio::spawn(server::run_with::<Toy>(opts, listeners, async {
            let _ = rx.await;
        }));
    }
    (file, stops)
}

async fn proxy_client(endpoints: Vec<String>) -> Client {
    let cfg = ClientConfig {
        mode: ClientMode::Proxy,
        op_timeout: Duration::from_secs(3),
        ..Default::default()
    };
    Client::connect(endpoints, cfg).await.expect("connects")
}

async fn retrying_client(endpoints: Vec<String>, retry: bool) -> Client {
    let cfg = ClientConfig {
        mode: ClientMode::Proxy,
        op_timeout: Duration::from_millis(1500),
        retry_unanswered: Some(retry),
        ..Default::default()
    };
    Client::connect(endpoints, cfg).await.expect("connects")
}

fn addr(file: &ClusterFile, id: NodeId) -> String {
    file.replica(id).unwrap().addr.to_string()
}

async fn count(c: &Client, key: &'static str) -> u64 {
    let v = c.get(key).await.expect("leader answers").expect("a count");
    std::str::from_utf8(&v).unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_vanished_session_reaches_the_core_as_down() {
    let (file, _stops) = start(1).await;
    let watcher = proxy_client(vec![addr(&file, 1)]).await;
    assert_eq!(count(&watcher, "sessions-down").await, 0);
    let leaving = proxy_client(vec![addr(&file, 1)]).await;
    leaving.put("k", "v").await.unwrap();
    drop(leaving);
    let deadline = Instant::now() + Duration::from_secs(10);
    while count(&watcher, "sessions-down").await == 0 {
        assert!(
            Instant::now() < deadline,
            "the core never saw the session go"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Exactly the one that left: the watcher's own session is still up.
    assert_eq!(count(&watcher, "sessions-down").await, 1);
}

#[tokio::test]
async fn a_notify_reaches_its_session_and_no_other() {
    let (file, _stops) = start(1).await;
    let a = proxy_client(vec![addr(&file, 1)]).await;
    let b = proxy_client(vec![addr(&file, 1)]).await;
    let mut a_events = a.events().expect("events once");
    let mut b_events = b.events().expect("events once");
    assert!(a.events().is_none(), "the stream is taken once");
    a.put("k", "v1").await.unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), a_events.recv())
        .await
        .expect("a's event arrives")
        .expect("stream open");
    assert_eq!((ev.kind.as_str(), &ev.key[..]), ("put", &b"k"[..]));
    // A notify for b would have been queued on b's connection before the
    // answer to b's later request: once b has its answer, b got nothing.
    assert_eq!(b.get("k").await.unwrap().as_deref(), Some(&b"v1"[..]));
    assert!(b_events.try_recv().is_err(), "b got a's event");
    assert!(a_events.try_recv().is_err(), "a got one event per put");
}

#[tokio::test]
async fn not_leader_is_followed_to_the_hint_with_the_same_op_id() {
    let (file, _stops) = start(3).await;
    // Only a follower is given: the client must learn the leader's address
    // from the hello and follow the hint there.
    let c = proxy_client(vec![addr(&file, 3)]).await;
    c.put("k", "v").await.expect("redirected to the leader");
    assert_eq!(c.get("k").await.unwrap().as_deref(), Some(&b"v"[..]));
    c.put("k2", "v").await.unwrap();
    assert_eq!(count(&c, "ops").await, 2, "each put applied once");
    // Bounced once by the leader itself: only a retry under the same
    // operation id is applied (a fresh id would be bounced again, forever).
    c.put("bounce-1", "v")
        .await
        .expect("the retry keeps its op id");
    assert_eq!(count(&c, "ops").await, 3);
}

#[tokio::test]
async fn an_unanswered_call_is_retried_under_the_same_op_id_when_asked() {
    let (file, _stops) = start(1).await;
    let c = retrying_client(vec![addr(&file, 1)], true).await;
    // The first attempt hangs; the retry (a new connection, the same OpId)
    // is applied, once.
    c.put("swallow-1", "v")
        .await
        .expect("the retry is answered");
    assert_eq!(
        c.get("swallow-1").await.unwrap().as_deref(),
        Some(&b"v"[..])
    );
    assert_eq!(count(&c, "ops").await, 1);
    // Without retries the same hang is an unknown outcome, not an error
    // that claims nothing happened.
    let once = retrying_client(vec![addr(&file, 1)], false).await;
    let err = once.put("swallow-2", "v").await.unwrap_err();
    assert!(!err.is_definite(), "{err}");
}
