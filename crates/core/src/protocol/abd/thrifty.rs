//! Thrifty mode of the coordinator: each phase goes to Q replicas instead of
//! all N, rotating and avoiding replicas that recently failed to answer.

use crate::types::{NodeId, Time};
use std::time::Duration;

/// How long thrifty mode avoids a replica that failed to answer in time.
pub(super) const AVOID_FOR: Duration = Duration::from_secs(1);

/// Thrifty mode's state: where the next phase's rotation starts, and until
/// when each replica (by id) is avoided after it failed to answer.
#[derive(Debug)]
pub(super) struct Thrifty {
    rotation: usize,
    avoid_until: Vec<Time>,
}

impl Thrifty {
    pub(super) fn new() -> Self {
        Thrifty {
            rotation: 0,
            avoid_until: vec![Time::ZERO; 64],
        }
    }

    /// Replica `n` was asked and stayed silent: avoid it for a while.
    pub(super) fn avoid(&mut self, n: NodeId, now: Time) {
        self.avoid_until[n as usize] = now.saturating_add(AVOID_FOR);
    }

    /// The replicas a new phase goes to, as a bitmask of ids: all of them;
    /// or, in thrifty mode (`on`), `quorum` of them — `prefer` (the replicas
    /// that just answered phase 1, known alive) if given, else the next
    /// `quorum` in rotation skipping replicas that recently failed to answer.
    pub(super) fn targets(
        &mut self,
        on: bool,
        members: &[NodeId],
        quorum: usize,
        now: Time,
        prefer: Option<u64>,
    ) -> u64 {
        let all = members.iter().fold(0u64, |m, &n| m | 1 << n);
        if !on {
            return all;
        }
        if let Some(p) = prefer.filter(|p| p.count_ones() as usize >= quorum) {
            return p;
        }
        let n = members.len();
        let start = self.rotation % n;
        self.rotation = self.rotation.wrapping_add(1);
        let ring = (0..n).map(|i| members[(start + i) % n]);
        let healthy = ring
            .clone()
            .filter(|&m| self.avoid_until[m as usize] <= now);
        let avoided = ring.filter(|&m| self.avoid_until[m as usize] > now);
        healthy
            .chain(avoided)
            .take(quorum)
            .fold(0u64, |m, n| m | 1 << n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::abd::testing::*;
    use crate::protocol::abd::{Coordinator, CoordinatorConfig, Msg};
    use crate::types::{ClientRef, Peer, Request, Tag};

    #[test]
    fn thrifty_asks_a_quorum_then_falls_back_and_avoids_the_silent_replica() {
        let cfg = CoordinatorConfig {
            thrifty: true,
            fast_read: false,
            ..Default::default()
        };
        let mut c = Coordinator::new(100, vec![1, 2, 3], cfg);
        let mut out = O::new();
        start_get(&mut c, 1, &mut out);
        let to: Vec<_> = sent_to(&mut out);
        assert_eq!(
            to,
            vec![Peer::Node(1), Peer::Node(2)],
            "phase 1 to Q = 2 replicas only"
        );
        qreply(&mut c, 1, 1, 1, Some("v"), &mut out);
        assert!(out.is_empty());
        // Replica 2 is silent: after the fallback delay the tick asks replica 3.
        c.tick(Time(6_000), &mut out);
        let to: Vec<_> = sent_to(&mut out);
        assert_eq!(
            to,
            vec![Peer::Node(2), Peer::Node(3)],
            "fallback: everyone who has not answered"
        );
        qreply(&mut c, 3, 2, 1, Some("w"), &mut out);
        let to: Vec<_> = sent_to(&mut out);
        assert_eq!(
            to,
            vec![Peer::Node(1), Peer::Node(3)],
            "write-back to the replicas that answered"
        );
        c.handle(T0, Peer::Node(1), Msg::StoreAck { op: 1 }, &mut out);
        c.handle(T0, Peer::Node(3), Msg::StoreAck { op: 1 }, &mut out);
        assert_eq!(replies(&mut out), vec![value(b"w")]);
        // The next operations avoid replica 2 for a while, whatever the rotation.
        for op in 2..5 {
            c.start(
                Time(7_000),
                ClientRef::local(op),
                Request::Get { key: key() },
                &mut out,
            );
            let to: Vec<_> = sent_to(&mut out);
            assert!(
                !to.contains(&Peer::Node(2)),
                "op {op} asked the silent replica: {to:?}"
            );
            assert_eq!(to.len(), 2);
        }
    }

    fn thrifty_coord(n: u32) -> Coordinator {
        let cfg = CoordinatorConfig {
            thrifty: true,
            ..Default::default()
        };
        Coordinator::new(100, (1..=n).collect(), cfg)
    }

    /// Thrifty phases start at rotating replicas, and still ask Q distinct
    /// replicas when all but one are avoided.
    #[test]
    fn thrifty_rotates_and_asks_a_quorum_even_when_most_are_avoided() {
        let mut c = thrifty_coord(3);
        let mut out = O::new();
        let mut asked = Vec::new();
        for op in 1..=3 {
            c.start(
                T0,
                ClientRef::local(op),
                Request::Get { key: key() },
                &mut out,
            );
            let to: Vec<_> = sent_to(&mut out);
            asked.push(to);
            let reply = Msg::QueryReply {
                op,
                tag: Tag::ZERO,
                value: None,
            };
            c.handle(T0, Peer::Node(1), reply, &mut out);
        }
        let n = Peer::Node;
        assert_eq!(
            asked,
            vec![vec![n(1), n(2)], vec![n(2), n(3)], vec![n(1), n(3)]]
        );
        // Replicas 2 and 3 stay silent past the fallback: both avoided.
        c.tick(Time(6_000), &mut out);
        out.drain();
        c.start(
            Time(7_000),
            ClientRef::local(9),
            Request::Get { key: key() },
            &mut out,
        );
        assert_eq!(sends(&mut out).len(), 2, "Q = 2 distinct replicas");
    }

    /// A replica that stays silent is avoided again at every retransmit,
    /// not only the first.
    #[test]
    fn thrifty_keeps_avoiding_a_replica_while_it_stays_silent() {
        let mut c = thrifty_coord(3);
        let mut out = O::new();
        start_get(&mut c, 1, &mut out);
        qreply(&mut c, 1, 0, 0, None, &mut out);
        c.tick(Time(6_000), &mut out); // 2 silent: avoided until 1.006 s
        c.tick(Time(106_000), &mut out); // 2 and 3 silent: until 1.106 s
        out.drain();
        // Rotation now starts at replica 2, but 2 and 3 are still avoided.
        c.start(
            Time(1_050_000),
            ClientRef::local(2),
            Request::Get { key: key() },
            &mut out,
        );
        let to: Vec<_> = sent_to(&mut out);
        assert_eq!(to, vec![Peer::Node(1), Peer::Node(2)]);
    }
}
