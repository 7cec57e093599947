//! `quorumkv member list | add | remove | replace`: who votes, and online
//! changes to it where the protocol has them (Zab's reconfiguration,
//! `docs/src/operations/membership.md`).
//!
//! On a native connection after its hello, `Frame::MemberRequest` asks a
//! replica for its [`Membership`] or, with voters, has its core propose
//! them (only the established leader takes one; an admin request where
//! the replica has users). The tool asks the leader, proposes, and then
//! waits until the leader's committed configuration is the new one: a
//! change is in effect once its log entry is committed by a quorum of the
//! old configuration and one of the new.

use crate::client::open_one;
use crate::codec::Frame;
use crate::driver::Input;
use crate::net::FrameTx;
use crate::snapshot::{next, send, Reach};
use quorumkv_core::protocol::Membership;
use quorumkv_core::NodeId;
use serde::Serialize;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The driver input for a `MemberRequest`; the answer goes to `ftx` as
/// `Frame::Members`.
pub fn request_input<M: Serialize + Send + 'static>(
    ftx: &FrameTx<M>,
    voters: Option<Vec<NodeId>>,
) -> Input<M> {
    let (otx, orx) = oneshot::channel();
    let ftx = ftx.clone();
    tokio::spawn(async move {
        if let Ok(answer) = orx.await {
            let _ = ftx.send(Frame::Members { answer });
        }
    });
    Input::Member { voters, reply: otx }
}

/// A change of the voting servers, as the tool names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Add(NodeId),
    Remove(NodeId),
    Replace { old: NodeId, new: NodeId },
}

impl Change {
    /// The voters after this change to `now`, or why it makes no sense
    /// there (the leader checks the rest: known servers, one change at a
    /// time).
    pub fn apply(&self, now: &Membership) -> Result<Vec<NodeId>, String> {
        let mut v = now.voters.clone();
        let voting = |n: NodeId| v.contains(&n);
        match *self {
            Change::Add(n) if voting(n) => return Err(format!("server {n} votes already")),
            Change::Remove(n) | Change::Replace { old: n, .. } if !voting(n) => {
                return Err(format!("server {n} does not vote"))
            }
            Change::Replace { new, .. } if voting(new) => {
                return Err(format!("server {new} votes already"))
            }
            Change::Add(n) => v.push(n),
            Change::Remove(n) => v.retain(|&m| m != n),
            Change::Replace { old, new } => {
                v.retain(|&m| m != old);
                v.push(new);
            }
        }
        if v.is_empty() {
            return Err("the last voting server cannot be removed".into());
        }
        v.sort_unstable();
        Ok(v)
    }
}

/// One replica's answer: who it is and its native address book.
struct Asked {
    membership: Membership,
    addrs: Vec<(NodeId, String)>,
}

/// Ask the replica at `endpoint` (with `voters`: propose them).
async fn ask(endpoint: &str, reach: &Reach, voters: Option<Vec<NodeId>>) -> Result<Asked, String> {
    let fut = async {
        let opened = open_one(
            endpoint,
            reach.tls.clone(),
            reach.credentials.clone(),
            reach.timeout,
        );
        let (hello, mut reader, mut wr) = opened.await.map_err(|e| e.to_string())?;
        send(&mut wr, &Frame::MemberRequest { voters })
            .await
            .map_err(|e| format!("{endpoint}: {e}"))?;
        let answer = match next(&mut reader, endpoint).await? {
            Frame::Members { answer } => answer,
            _ => return Err(format!("{endpoint}: unexpected answer to a member request")),
        };
        let membership = answer.map_err(|e| format!("{endpoint}: {e}"))?;
        Ok(Asked {
            membership,
            addrs: hello.addrs,
        })
    };
    tokio::time::timeout(reach.timeout, fut)
        .await
        .unwrap_or_else(|_| Err(format!("{endpoint}: no answer within {:?}", reach.timeout)))
}

/// The membership as the leader sees it (else as the first replica that
/// answers sees it, its `leader` then `None`), and the leader's endpoint.
/// Every endpoint is asked: of the replicas that lead (Zab's leader, or
/// every replica of a protocol without one, which runs the changes asked
/// of it), the one with the highest commit (log index, or configuration
/// epoch) answers; a replica removed earlier may not know the newest.
pub async fn list(reach: &Reach) -> Result<(Membership, Option<String>), String> {
    let mut why = Vec::new();
    let mut answers = Vec::new();
    for endpoint in &reach.endpoints {
        match ask(endpoint, reach, None).await {
            Ok(a) => answers.push((endpoint.clone(), a)),
            Err(e) => why.push(e),
        }
    }
    let leading = (answers.iter())
        .filter(|(_, a)| a.membership.leader == Some(a.membership.node))
        .max_by_key(|(_, a)| a.membership.commit);
    if let Some((endpoint, a)) = leading {
        return Ok((a.membership.clone(), Some(endpoint.clone())));
    }
    let Some((_, first)) = answers.into_iter().next() else {
        return Err(format!("no replica answered: {}", why.join("; ")));
    };
    // The leader may be a server not among the endpoints given.
    let Some(leader) = first.membership.leader else {
        return Ok((first.membership, None));
    };
    let at = first.addrs.iter().find(|(n, _)| *n == leader);
    let Some((_, addr)) = at else {
        return Ok((first.membership, None));
    };
    match ask(addr, reach, None).await {
        Ok(a) if a.membership.leader == Some(leader) => Ok((a.membership, Some(addr.clone()))),
        Ok(_) | Err(_) => Ok((first.membership, None)),
    }
}

/// Propose `change` at the leader and wait (up to `wait`) until the
/// leader's committed configuration is the new one. The membership then,
/// or why not.
pub async fn change(reach: &Reach, change: &Change, wait: Duration) -> Result<Membership, String> {
    // A --timeout past what the clock can add waits without a deadline.
    let until = Instant::now().checked_add(wait);
    let past = || until.is_some_and(|u| Instant::now() >= u);
    // Right after a start or an election no leader may be known yet.
    let (now, leader) = loop {
        match list(reach).await? {
            (now, Some(leader)) => break (now, leader),
            _ if past() => {
                return Err(format!(
                    "no leader within {wait:?}: try again once one is elected"
                ))
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    if now.pending.is_some() {
        return Err(format!(
            "a membership change is in flight already: {}",
            describe(&now)
        ));
    }
    let voters = change.apply(&now)?;
    ask(&leader, reach, Some(voters.clone())).await?;
    loop {
        // The leader may step down once it commits its own removal: ask
        // whoever leads then.
        if let Ok((m, Some(_))) = list(reach).await {
            if m.voters == voters && m.pending.is_none() {
                return Ok(m);
            }
        }
        if past() {
            return Err(format!(
                "proposed {voters:?}, not committed within {wait:?}: a quorum of the old and of \
                 the new voters must be up (see `quorumkv member list`)"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The membership as a few lines for a terminal.
pub fn describe(m: &Membership) -> String {
    let ids = |v: &[NodeId]| {
        let s: Vec<String> = v.iter().map(|n| n.to_string()).collect();
        s.join(",")
    };
    let learners: Vec<NodeId> = (m.servers.iter().copied())
        .filter(|n| !m.voters.contains(n))
        .collect();
    let mut s = format!(
        "voters    {}\nlearners  {}\nleader    {}\ncommit    {}\n",
        ids(&m.voters),
        if learners.is_empty() {
            "-".into()
        } else {
            ids(&learners)
        },
        m.leader.map_or("-".into(), |l| l.to_string()),
        m.commit,
    );
    if let Some((at, v)) = &m.pending {
        s.push_str(&format!("pending   {} (log index {at})\n", ids(v)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(voters: &[NodeId], servers: &[NodeId]) -> Membership {
        Membership {
            node: 1,
            voters: voters.to_vec(),
            pending: None,
            servers: servers.to_vec(),
            leader: Some(1),
            commit: 7,
        }
    }

    #[test]
    fn changes_give_the_new_voters_or_say_why_not() {
        let m = view(&[1, 2, 3], &[1, 2, 3, 4]);
        assert_eq!(Change::Add(4).apply(&m), Ok(vec![1, 2, 3, 4]));
        assert_eq!(Change::Remove(2).apply(&m), Ok(vec![1, 3]));
        let r = Change::Replace { old: 1, new: 4 };
        assert_eq!(r.apply(&m), Ok(vec![2, 3, 4]));
        assert!(Change::Add(3)
            .apply(&m)
            .unwrap_err()
            .contains("votes already"));
        assert!(Change::Remove(4)
            .apply(&m)
            .unwrap_err()
            .contains("does not vote"));
        let r = Change::Replace { old: 1, new: 2 };
        assert!(r.apply(&m).unwrap_err().contains("server 2 votes already"));
        let one = view(&[1], &[1, 2]);
        assert!(Change::Remove(1).apply(&one).unwrap_err().contains("last"));
    }

    #[test]
    fn the_description_names_learners_and_a_pending_change() {
        let mut m = view(&[1, 2, 3], &[1, 2, 3, 4]);
        m.pending = Some((12, vec![1, 2, 3, 4]));
        let s = describe(&m);
        assert!(s.contains("voters    1,2,3\n"), "{s}");
        assert!(s.contains("learners  4\n"), "{s}");
        assert!(s.contains("pending   1,2,3,4 (log index 12)"), "{s}");
        assert!(describe(&view(&[1, 2], &[1, 2])).contains("learners  -\n"));
    }
}
