//! Per-step invariants (`ProtocolDef::Invariants`): checked after every
//! handler call of a node or a client-side coordinator, unless
//! `--no-invariants`. The first violation ends the run; the seed fails
//! with it (`Verdict::Invariant`), naming the step (events so far).

use super::World;
use quorumkv_core::protocol::{ProtocolDef, Roles, Seen, StepInvariants, Stepped};
use quorumkv_core::{ClientRef, Request, Time};

/// At most this many roles of a kind go on the stack; more spill to the heap.
const ON_STACK: usize = 16;

/// Checks `inv` over `nodes` and `clients` after `stepped`: the hook as a
/// plain function, for drivers other than the world (an explorer).
pub fn check_step<D: ProtocolDef>(
    inv: &mut D::Invariants,
    now: Time,
    stepped: Stepped,
    nodes: &[Option<&D::Node>],
    clients: &[Option<&D::Client>],
) -> Result<(), String> {
    inv.after_step(&Roles {
        now,
        stepped,
        nodes,
        clients,
    })
}

impl<D: ProtocolDef> World<'_, D> {
    /// Run the invariants after `stepped` took a step; record the first
    /// violation (the run loop stops on it).
    pub(super) fn check_invariants(&mut self, stepped: Stepped) {
        let Some(inv) = self.invariants.as_mut() else {
            return;
        };
        if self.violation.is_some() {
            return;
        }
        let mut node_buf = [None; ON_STACK];
        let node_heap: Vec<Option<&D::Node>>;
        let nodes: &[Option<&D::Node>] = if self.nodes.len() <= ON_STACK {
            for (b, s) in node_buf.iter_mut().zip(&self.nodes) {
                *b = s.core.as_ref();
            }
            &node_buf[..self.nodes.len()]
        } else {
            node_heap = self.nodes.iter().map(|s| s.core.as_ref()).collect();
            &node_heap
        };
        let client_heap: Vec<Option<&D::Client>>;
        let clients: &[Option<&D::Client>] = if self.p.client_driven {
            client_heap = self.clients.iter().map(|s| s.coord.as_ref()).collect();
            &client_heap
        } else {
            &[]
        };
        if let Err(why) = check_step::<D>(inv, Time(self.now), stepped, nodes, clients) {
            let at = match stepped {
                Stepped::Node(i) => format!("n{}", i + 1),
                Stepped::Client(c) => format!("client {c}"),
            };
            let msg = format!(
                "{why} (after step {} at {}, {:.3}ms virtual)",
                self.stats.events,
                at,
                self.now as f64 / 1000.0
            );
            trace!(self, "INVARIANT {msg}");
            self.violation = Some(msg);
        }
    }

    /// "No ACK for an entry not on disk": a message node `i` sends now
    /// (it leaves: held outputs are checked when released) may claim its
    /// log durable (`ProtocolDef::log_durable_claim`) only up to what the
    /// simulator synced. Checked where outputs wait for syncs (`fsync`);
    /// in `buffered` mode acknowledging the page cache is the mode itself.
    pub(super) fn check_durable_claim(&mut self, i: usize, msg: &D::Msg) {
        if self.invariants.is_none() || self.violation.is_some() || !self.group_commits() {
            return;
        }
        let Some(claim) = D::log_durable_claim(msg) else {
            return;
        };
        let on_disk = self.nodes[i].disk.log_last();
        if claim <= on_disk {
            return;
        }
        let msg = format!(
            "no ACK for an entry not on disk: n{} says its log is durable up to {claim}, \
             its synced records hold up to {on_disk} (after step {} at n{}, {:.3}ms virtual)",
            i + 1,
            self.stats.events,
            i + 1,
            self.now as f64 / 1000.0
        );
        trace!(self, "INVARIANT {msg}");
        self.violation = Some(msg);
    }

    /// The protocol's message-level checks (`ProtocolDef::observe`) of
    /// what passed node `i`.
    pub(super) fn observe(&mut self, i: usize, seen: Seen<'_, D::Node, D::Msg>) {
        let Some(inv) = self.invariants.as_mut() else {
            return;
        };
        if self.violation.is_some() {
            return;
        }
        let r = D::observe(inv, self.nodes.len(), seen);
        self.observed(i, r);
    }

    /// [`Self::observe`] of a client request reaching node `i`, with its
    /// state before the handler runs.
    pub(super) fn observe_request(&mut self, i: usize, cref: ClientRef, req: &Request) {
        let (Some(inv), Some(node)) = (self.invariants.as_mut(), self.nodes[i].core.as_ref())
        else {
            return;
        };
        if self.violation.is_some() {
            return;
        }
        let seen = Seen::Request {
            to: i,
            node,
            cref,
            req,
        };
        let r = D::observe(inv, self.nodes.len(), seen);
        self.observed(i, r);
    }

    fn observed(&mut self, i: usize, r: Result<(), String>) {
        if let Err(why) = r {
            let msg = format!(
                "{why} (after step {} at n{}, {:.3}ms virtual)",
                self.stats.events,
                i + 1,
                self.now as f64 / 1000.0
            );
            trace!(self, "INVARIANT {msg}");
            self.violation = Some(msg);
        }
    }

    /// Node `i` crashed: the invariants forget its life.
    pub(super) fn invariants_crashed(&mut self, i: usize) {
        if let Some(inv) = self.invariants.as_mut() {
            inv.crashed(i);
        }
    }
}
