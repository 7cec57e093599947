//! What register replicas that restart without their state share (ABD,
//! lease-lock): asking the peers not yet heard from for their stores, and
//! how a recovering replica reports itself.

use crate::protocol::contract::Out;
use crate::quorum::QuorumTracker;
use crate::types::{NodeId, Peer};
use std::time::Duration;

/// How often a recovering replica asks the peers that did not answer yet.
pub const SYNC_RETRY: Duration = Duration::from_millis(200);

/// Send `request` to every member but `me` not yet counted in `votes`, and
/// arm `timer` to ask again after [`SYNC_RETRY`].
pub fn ask_missing<M: Clone, T>(
    me: NodeId,
    members: &[NodeId],
    votes: &QuorumTracker,
    request: M,
    timer: T,
    out: &mut Out<M, T>,
) {
    for &n in members.iter().filter(|&&n| n != me && !votes.has(n)) {
        out.send(Peer::Node(n), request.clone());
    }
    out.set_timer(SYNC_RETRY, timer);
}

/// `recovering` or `replica`: the role of an equal replica.
pub fn role(recovering: bool) -> &'static str {
    if recovering {
        "recovering"
    } else {
        "replica"
    }
}

/// The status line of a replica holding `keys` registers, with its
/// coordinator's status after the bar.
pub fn status(keys: usize, recovering: bool, coordinator: &str) -> String {
    let rec = if recovering { " RECOVERING" } else { "" };
    format!("replica keys={keys}{rec} | {coordinator}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Command;

    #[test]
    fn asks_only_peers_not_heard_from_and_rearms() {
        let mut votes = QuorumTracker::new(4, 2);
        votes.record(3);
        let mut out: Out<u8, &str> = Out::new();
        ask_missing(1, &[1, 2, 3, 4], &votes, 7, "sync", &mut out);
        let to: Vec<_> = (out.commands().iter())
            .filter_map(|c| match c {
                Command::Send { to, msg: 7 } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(to, [Peer::Node(2), Peer::Node(4)]);
        assert!(out.commands().contains(&Command::SetTimer {
            after: SYNC_RETRY,
            timer: "sync"
        }));
    }

    #[test]
    fn role_and_status_say_recovering() {
        assert_eq!((role(true), role(false)), ("recovering", "replica"));
        assert_eq!(status(3, true, "c"), "replica keys=3 RECOVERING | c");
        assert_eq!(status(0, false, "c"), "replica keys=0 | c");
    }
}
