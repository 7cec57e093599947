//! Links between nodes as the cores see them: a heartbeat failure detector
//! and, under the FIFO-reliable link model, TCP-like connections.
//!
//! Detector: when two nodes cannot talk (one crashed or paused, or a
//! partition cuts them) for the heartbeat timeout, each live side's core
//! gets `on_link(Down(peer))`; when they can again (heal, resume, restart),
//! `Up(peer)`. A restarted node is a new connection: a peer that had not
//! noticed the crash sees `Down` then `Up`.
//!
//! FIFO model (`World::fifo`): a connection is numbered per directed link
//! (`link_epoch`); resetting it drops what is in flight and what waits
//! behind a partition (`held`). The `loss` fault resets the connection
//! (`Down` on both ends now, `Up` a heartbeat period later), as do the
//! detector's `Down` and a crash; while a node believes a peer down it
//! sends it nothing. So a core sees each peer's messages in order, at
//! most once, with gaps only after a `Down`.
//!
//! `Reliable` model (`World::perfect_fd`): FIFO as above, but loss never
//! resets a connection, and a paused node is not suspected: `Down` comes
//! only with a crash (or a partition, outside that model).

use super::{Ep, Ev, World};
use quorumkv_core::protocol::{LinkEvent, ProtocolDef};
use quorumkv_core::{NodeId, Peer};

/// The failure detector's state for N nodes.
pub(super) struct Detector {
    n: usize,
    /// `view[a * n + b]`: what node `a`'s core was last told of `b`.
    view: Vec<bool>,
    /// Per pair `a < b` (at `a * n + b`): since when they cannot talk.
    bad_since: Vec<Option<u64>>,
    /// Per pair: a reset connection comes back then.
    reset_until: Vec<u64>,
}

impl Detector {
    pub(super) fn new(n: usize) -> Detector {
        Detector {
            n,
            view: vec![true; n * n],
            bad_since: vec![None; n * n],
            reset_until: vec![0; n * n],
        }
    }
    fn pair(&self, a: usize, b: usize) -> usize {
        a.min(b) * self.n + a.max(b)
    }
}

impl<D: ProtocolDef> World<'_, D> {
    /// Deliver `ev` to node `i`'s current life at `at` (held while paused).
    pub(super) fn schedule_link(&mut self, at: u64, i: usize, ev: LinkEvent) {
        let incarnation = self.nodes[i].incarnation;
        self.schedule(
            at,
            Ev::Link {
                node: i,
                ev,
                incarnation,
            },
        );
    }

    /// Whether nodes `a` and `b` can exchange heartbeats now.
    fn pair_ok(&self, a: usize, b: usize) -> bool {
        // A perfect failure detector does not suspect a paused node.
        let live = |i: usize| self.node_up(i) && (self.perfect_fd || !self.nodes[i].paused);
        let k = self.links.pair(a, b);
        live(a) && live(b) && self.connected(a, b) && self.now >= self.links.reset_until[k]
    }

    /// Tell `x`'s core that `y` is up or down, if that is news to it.
    fn set_view(&mut self, x: usize, y: usize, up: bool) -> bool {
        let k = x * self.links.n + y;
        if !self.node_up(x) || self.links.view[k] == up {
            return false;
        }
        self.links.view[k] = up;
        let peer = Peer::Node(y as NodeId + 1);
        let ev = if up {
            LinkEvent::Up(peer)
        } else {
            LinkEvent::Down(peer)
        };
        self.schedule_link(self.now, x, ev);
        true
    }

    /// Whether node `a` neither sends to nor takes messages from node `b`:
    /// under the FIFO model, nothing moves on a connection `a` believes
    /// down (a restarted node may believe a peer up before the peer has
    /// seen the new connection: what it sends meanwhile is lost, after the
    /// peer's `Down`).
    pub(super) fn conn_down(&self, a: usize, b: usize) -> bool {
        self.fifo && a != b && !self.links.view[a * self.links.n + b]
    }

    /// Re-evaluate every pair after the nemesis changed something: pairs
    /// that can talk again come `Up`; pairs that just stopped start the
    /// heartbeat timeout.
    pub(super) fn refresh_links(&mut self) {
        let n = self.nodes.len();
        let timeout = self.cfg.timing.heartbeat_timeout().as_micros() as u64;
        for a in 0..n {
            for b in a + 1..n {
                let k = self.links.pair(a, b);
                if self.pair_ok(a, b) {
                    self.links.bad_since[k] = None;
                    self.set_view(a, b, true);
                    self.set_view(b, a, true);
                } else if self.links.bad_since[k].is_none() {
                    self.links.bad_since[k] = Some(self.now);
                    let since = self.now;
                    self.schedule(self.now + timeout, Ev::Detect { a, b, since });
                }
            }
        }
    }

    /// The heartbeat timeout of pair `a`, `b` expired: if they still have
    /// not talked since `since`, both sides see `Down` (and, FIFO, the
    /// connection is reset).
    pub(super) fn detect(&mut self, a: usize, b: usize, since: u64) {
        if self.links.bad_since[self.links.pair(a, b)] != Some(since) {
            return;
        }
        trace!(self, "DETECT n{} / n{} down", a + 1, b + 1);
        self.set_view(a, b, false);
        self.set_view(b, a, false);
        if self.fifo {
            self.reset_epochs(a, b);
        }
    }

    /// FIFO model, the `loss` fault: the connection of nodes `a` and `b`
    /// resets, both see `Down` now and `Up` once it reconnects.
    pub(super) fn reset_connection(&mut self, a: usize, b: usize) {
        self.stats.resets += 1;
        self.reset_epochs(a, b);
        let back = self.now + self.cfg.timing.heartbeat.as_micros() as u64;
        let k = self.links.pair(a, b);
        self.links.reset_until[k] = back;
        self.set_view(a, b, false);
        self.set_view(b, a, false);
        self.schedule(back, Ev::Reconnect);
    }

    /// Drop everything in flight or held between endpoints `a` and `b`
    /// (endpoint indices: nodes, then clients).
    fn reset_epochs(&mut self, a: usize, b: usize) {
        let e = self.nodes.len() + self.clients.len();
        for link in [a * e + b, b * e + a] {
            self.link_epoch[link] = self.link_epoch[link].wrapping_add(1);
            self.stats.reset_dropped += self.held[link].len() as u64;
            self.held[link].clear();
        }
    }

    pub(super) fn crashed_links(&mut self, i: usize) {
        self.reset_all_epochs(i);
        self.refresh_links();
    }

    /// FIFO model: node `i`'s connections end (a crash; a restart, which
    /// opens new ones: nothing sent to the old life reaches the new one).
    fn reset_all_epochs(&mut self, i: usize) {
        if self.fifo {
            for j in 0..self.nodes.len() + self.clients.len() {
                self.reset_epochs(i, j);
            }
        }
    }

    /// Node `i` is about to start a new life: its connections are new, so
    /// what it sends from `on_start` on is delivered and nothing of the old
    /// life's reaches it.
    pub(super) fn new_life_links(&mut self, i: usize) {
        self.reset_all_epochs(i);
        let n = self.nodes.len();
        for j in (0..n).filter(|&j| j != i) {
            self.links.view[i * n + j] = true;
        }
    }

    /// Node `i` restarted: its core starts believing every peer up; a peer
    /// that had not noticed the crash sees the old connection go `Down`.
    pub(super) fn restarted_links(&mut self, i: usize) {
        let n = self.nodes.len();
        for j in (0..n).filter(|&j| j != i) {
            self.set_view(j, i, false);
            let k = self.links.pair(i, j);
            self.links.bad_since[k] = None;
        }
        self.refresh_links();
    }

    /// FIFO model: a healed partition delivers what waited behind it.
    pub(super) fn release_held(&mut self) {
        let e = self.nodes.len() + self.clients.len();
        let ep = |x: usize, n: usize| {
            if x < n {
                Ep::Node(x)
            } else {
                Ep::Client(x - n)
            }
        };
        for link in 0..e * e {
            if self.held[link].is_empty() || self.blocked[link] {
                continue;
            }
            let (from, to) = (
                ep(link / e, self.nodes.len()),
                ep(link % e, self.nodes.len()),
            );
            for ev in std::mem::take(&mut self.held[link]) {
                self.wire(from, to, ev, "(held)");
            }
        }
    }
}
