//! `quorumkv member update ID HOST:PORT`: tell every live replica that
//! replica ID is dialled at a new address (`address_book`), as
//! `etcdctl member update` does with a peer URL.
//!
//! Every endpoint is asked first who it is; if replica ID itself answers,
//! nothing is changed (two servers must never run as one id). Then each
//! other replica is sent the update. A replica that cannot be reached keeps
//! the old address: the report names it, so that the command can be run
//! again once it is back (the update is idempotent).

use crate::client::open_one;
use crate::codec::Frame;
use crate::net::FrameReader;
use crate::snapshot::{next, send, Reach};
use crate::stream::ConnWrite;
use quorumkv_core::NodeId;

/// What one endpoint said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub endpoint: String,
    /// The replica that answered there (`None`: none did).
    pub node: Option<NodeId>,
    pub outcome: Result<String, String>,
}

impl Answer {
    /// A replica that was reached and took the update.
    pub fn updated(&self) -> bool {
        self.node.is_some() && self.outcome.is_ok()
    }
}

/// An open connection to one endpoint, after the hello.
struct Open {
    endpoint: String,
    node: NodeId,
    /// Where the replica dials replica `id` now.
    dials_id_at: Option<String>,
    reader: FrameReader,
    wr: ConnWrite,
}

/// Move replica `id` to `addr` at every endpoint of `reach` but its own.
/// `Err` when nothing was changed (replica `id` still answers, or no
/// replica answered); otherwise one answer per endpoint.
pub async fn update(reach: &Reach, id: NodeId, addr: &str) -> Result<Vec<Answer>, String> {
    crate::address_book::check_addr(addr)?;
    let mut open = Vec::new();
    let mut unreached = Vec::new();
    for endpoint in &reach.endpoints {
        let opened = open_one(
            endpoint,
            reach.tls.clone(),
            reach.credentials.clone(),
            reach.timeout,
        );
        match tokio::time::timeout(reach.timeout, opened).await {
            // The replacement, already running where it was moved to (the
            // command run again for a replica that was down the first time).
            Ok(Ok((hello, _, _))) if hello.node == id && endpoint == addr => {
                unreached.push((endpoint.clone(), format!("server {id} itself, at {addr}")));
            }
            Ok(Ok((hello, _, _))) if hello.node == id => {
                return Err(format!(
                    "server {id} answers at {endpoint}: stop it before you move it (two servers \
                     must never run as server {id}); nothing was changed"
                ));
            }
            Ok(Ok((hello, reader, wr))) => open.push(Open {
                endpoint: endpoint.clone(),
                node: hello.node,
                dials_id_at: (hello.addrs.iter().find(|(n, _)| *n == id)).map(|(_, a)| a.clone()),
                reader,
                wr,
            }),
            Ok(Err(e)) => unreached.push((endpoint.clone(), e.to_string())),
            Err(_) => unreached.push((
                endpoint.clone(),
                format!("no answer in {:?}", reach.timeout),
            )),
        }
    }
    if open.is_empty() {
        let why: Vec<String> = unreached.iter().map(|(e, w)| format!("{e}: {w}")).collect();
        return Err(format!("no replica answered: {}", why.join("; ")));
    }
    // The endpoint the replicas dial replica `id` at is the server moved
    // away from: not reaching it is what the procedure expects.
    let old: Vec<String> = open.iter().filter_map(|o| o.dials_id_at.clone()).collect();
    let mut answers: Vec<Answer> = (unreached.into_iter())
        .map(|(endpoint, why)| Answer {
            node: None,
            outcome: if endpoint == addr {
                Ok(format!("server {id}'s new address: skipped ({why})"))
            } else if old.contains(&endpoint) {
                Ok(format!(
                    "server {id}'s old address, not reached (as expected)"
                ))
            } else {
                Err(format!("not reached ({why}): it keeps the old address"))
            },
            endpoint,
        })
        .collect();
    for mut o in open {
        let outcome = ask(&mut o, id, addr, reach).await;
        answers.push(Answer {
            endpoint: o.endpoint,
            node: Some(o.node),
            outcome,
        });
    }
    Ok(answers)
}

/// Send the update on `o` and read its answer.
async fn ask(o: &mut Open, id: NodeId, addr: &str, reach: &Reach) -> Result<String, String> {
    let exchange = async {
        let frame = Frame::AddressUpdate {
            id,
            addr: addr.to_string(),
        };
        send(&mut o.wr, &frame).await.map_err(|e| e.to_string())?;
        match next(&mut o.reader, &o.endpoint).await? {
            Frame::AddressUpdated { answer } => answer,
            _ => Err("unexpected answer (a replica older than wire 1.4?)".into()),
        }
    };
    (tokio::time::timeout(reach.timeout, exchange).await)
        .unwrap_or_else(|_| Err(format!("no answer in {:?}", reach.timeout)))
}

/// The answers as lines for a terminal.
pub fn describe(answers: &[Answer]) -> String {
    let mut s = String::new();
    for a in answers {
        let who = a.node.map_or("-".to_string(), |n| format!("server {n}"));
        let (mark, what) = match &a.outcome {
            Ok(w) => ("ok", w),
            Err(w) => ("FAILED", w),
        };
        s.push_str(&format!("{:<24} {who:<10} {mark:<7} {what}\n", a.endpoint));
    }
    s
}
