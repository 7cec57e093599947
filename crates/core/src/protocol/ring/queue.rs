//! The queue handler (pc 53-75, rebuilt from lines 205-209): which message
//! goes to the successor next.

use super::msg::Msg;
use crate::types::{ClientRef, NodeId, OpId};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};

/// How the queue handler picks between forwarding and the server's own writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fairness {
    /// The seed's rule: the origin with the fewest forwarded messages goes next.
    NbMsg,
    /// Arrival order across both queues (a baseline for the bench: no
    /// starvation, but no share per origin either).
    Fifo,
    /// The injected bug: forward first, in arrival order; own writes only
    /// when nothing waits to be forwarded (they starve under load).
    ForwardFirst,
}

/// A client's write waiting to start (write_queue, pc 19).
#[derive(Clone, Debug, PartialEq)]
pub struct ClientWrite {
    /// `None`: a copy restarted by the server itself (its clients wait by `op`).
    pub client: Option<ClientRef>,
    pub op: OpId,
    pub key: Bytes,
    pub value: Option<Bytes>,
}

/// What the handler chose.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// Send as is: own writes after their pre-write round (pc 37), re-sends
    /// after a crash (pc 88-91). They go before anything else.
    Ready(Msg),
    /// Start this client's write (pc 66: `write(write_queue.first)`).
    Own(ClientWrite),
    /// Forward this message (pc 68-73).
    Forward(Msg),
}

/// write_queue, forward_queue and nb_msg (pc 14-16), plus the ready queue.
#[derive(Debug, Default)]
pub struct Queues {
    /// `(arrival, write)`; arrival numbers order the FIFO modes.
    pub writes: VecDeque<(u64, ClientWrite)>,
    pub forward: VecDeque<(u64, Msg)>,
    pub ready: VecDeque<Msg>,
    /// Messages forwarded per origin since the forward queue last emptied.
    /// A crashed server's entry is removed (an absent entry counts 0).
    pub nb_msg: BTreeMap<NodeId, u64>,
    arrivals: u64,
}

impl Queues {
    pub fn push_write(&mut self, w: ClientWrite) {
        self.arrivals += 1;
        self.writes.push_back((self.arrivals, w));
    }
    pub fn push_forward(&mut self, m: Msg) {
        self.arrivals += 1;
        self.forward.push_back((self.arrivals, m));
    }
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.forward.is_empty() && self.ready.is_empty()
    }
    fn count(&self, n: NodeId) -> u64 {
        self.nb_msg.get(&n).copied().unwrap_or(0)
    }

    /// The next message for the successor, if any (`me` is this server).
    pub fn pick(&mut self, me: NodeId, fairness: Fairness) -> Option<Next> {
        if let Some(m) = self.ready.pop_front() {
            return Some(Next::Ready(m));
        }
        let pos = match fairness {
            Fairness::NbMsg => return self.pick_nb_msg(me),
            Fairness::ForwardFirst => (!self.forward.is_empty()).then_some(0),
            Fairness::Fifo => match (self.writes.front(), self.forward.front()) {
                (Some((w, _)), Some((f, _))) if w < f => None,
                (_, Some(_)) => Some(0),
                _ => None,
            },
        };
        match pos {
            Some(i) => self.forward.remove(i).map(|(_, m)| Next::Forward(m)),
            None => self.writes.pop_front().map(|(_, w)| Next::Own(w)),
        }
    }

    /// pc 53-75: with nothing to forward, reset nb_msg and start an own
    /// write (54-58). Otherwise pick the origin p_j with the fewest
    /// forwarded messages, p_i included only if it has a write waiting
    /// (60-64); p_i: start its write (65-66); else forward p_j's first
    /// message and count it (68-73). Ties go to forwarding, oldest first:
    /// a server favouring its clients would stop the ring (line 207).
    fn pick_nb_msg(&mut self, me: NodeId) -> Option<Next> {
        if self.forward.is_empty() {
            self.nb_msg.values_mut().for_each(|c| *c = 0);
            let (_, w) = self.writes.pop_front()?;
            *self.nb_msg.entry(me).or_default() += 1;
            return Some(Next::Own(w));
        }
        let origin = |m: &Msg| m.entry().map_or(me, |e| e.origin);
        let (pos, fewest) = (self.forward.iter().enumerate())
            .map(|(i, (_, m))| (i, self.count(origin(m))))
            .min_by_key(|&(i, c)| (c, i))
            .expect("forward queue is not empty");
        if !self.writes.is_empty() && self.count(me) < fewest {
            *self.nb_msg.entry(me).or_default() += 1;
            let (_, w) = self.writes.pop_front().expect("checked");
            return Some(Next::Own(w));
        }
        let (_, m) = self.forward.remove(pos).expect("in range");
        *self.nb_msg.entry(origin(&m)).or_default() += 1;
        Some(Next::Forward(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ring::testing::entry_from;

    fn fwd(origin: NodeId, ts: u64) -> Msg {
        Msg::PreWrite(entry_from(origin, ts))
    }
    fn own(id: u64) -> ClientWrite {
        ClientWrite {
            client: Some(ClientRef::local(id)),
            op: OpId::NONE,
            key: Bytes::from_static(b"k"),
            value: None,
        }
    }
    /// Origins of the next `n` picks (`0` for an own write).
    fn order(q: &mut Queues, f: Fairness, n: usize) -> Vec<NodeId> {
        (0..n)
            .filter_map(|_| q.pick(1, f))
            .map(|x| match x {
                Next::Own(_) => 0,
                Next::Forward(m) | Next::Ready(m) => m.entry().unwrap().origin,
            })
            .collect()
    }
    fn loaded() -> Queues {
        let mut q = Queues::default();
        for ts in 1..=3 {
            q.push_forward(fwd(2, ts));
        }
        q.push_forward(fwd(3, 1));
        q.push_write(own(1));
        q.push_write(own(2));
        q
    }

    #[test]
    fn nb_msg_serves_the_origin_with_fewest_forwarded_messages() {
        // 2 has three messages queued first; 3 and this server (0 here)
        // still get their turn before 2's second and third (line 209).
        let mut q = loaded();
        assert_eq!(order(&mut q, Fairness::NbMsg, 6), vec![2, 3, 0, 2, 0, 2]);
        assert!(q.is_empty());
    }

    #[test]
    fn nb_msg_resets_when_nothing_is_left_to_forward() {
        // pc 54-55: an idle forward queue forgets the counts.
        let mut q = Queues::default();
        q.push_forward(fwd(2, 1));
        q.push_write(own(1));
        assert_eq!(order(&mut q, Fairness::NbMsg, 2), vec![2, 0]);
        assert_eq!(q.nb_msg.get(&1), Some(&1));
        q.push_write(own(2));
        assert_eq!(order(&mut q, Fairness::NbMsg, 1), vec![0]);
        assert_eq!(q.nb_msg.values().collect::<Vec<_>>(), vec![&1, &0]);
    }

    #[test]
    fn fifo_follows_arrivals_and_forward_first_starves_own_writes() {
        let mut q = loaded();
        assert_eq!(order(&mut q, Fairness::Fifo, 6), vec![2, 2, 2, 3, 0, 0]);
        let mut q = loaded();
        q.push_forward(fwd(3, 2));
        let picked = order(&mut q, Fairness::ForwardFirst, 3);
        assert_eq!(picked, vec![2, 2, 2]);
        q.push_forward(fwd(2, 4));
        assert_eq!(order(&mut q, Fairness::ForwardFirst, 3), vec![3, 3, 2]);
        assert_eq!(
            q.writes.len(),
            2,
            "own writes wait while anything is forwarded"
        );
    }

    #[test]
    fn ready_messages_go_before_everything() {
        let mut q = loaded();
        q.ready.push_back(fwd(9, 1));
        assert_eq!(order(&mut q, Fairness::NbMsg, 1), vec![9]);
    }
}
