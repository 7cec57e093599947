//! Per-step invariants: properties of the roles' states (not of the
//! history) that a protocol declares next to its core and a driver checks
//! after every step (the simulator after every handler call; an explorer
//! after every transition). A violation names the invariant; the driver
//! adds where it happened.

use crate::types::{ClientRef, Peer, Request, Response, Time};

/// Which role just took a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stepped {
    /// Node `i` (an index into [`Roles::nodes`], node id `i + 1`).
    Node(usize),
    /// Client-side coordinator `c` (an index into [`Roles::clients`]).
    Client(usize),
}

/// Every role's state after a step. `None` is a crashed node (or a client
/// without a coordinator: proxy mode).
#[derive(Clone, Copy, Debug)]
pub struct Roles<'a, N, C> {
    /// Virtual time of the step (leases are judged against it).
    pub now: Time,
    pub stepped: Stepped,
    pub nodes: &'a [Option<&'a N>],
    pub clients: &'a [Option<&'a C>],
}

impl<N, C> Roles<'_, N, C> {
    /// The live nodes with their index.
    pub fn live(&self) -> impl Iterator<Item = (usize, &N)> + '_ {
        (self.nodes.iter().enumerate()).filter_map(|(i, n)| n.map(|n| (i, n)))
    }
    /// The node that stepped, if a node did and is still up.
    pub fn stepped_node(&self) -> Option<(usize, &N)> {
        match self.stepped {
            Stepped::Node(i) => self.nodes.get(i).copied().flatten().map(|n| (i, n)),
            Stepped::Client(_) => None,
        }
    }
}

/// A protocol's per-step invariants over node states `N` and client-side
/// coordinators `C`. Stateful, so that properties over time can be checked
/// ("a delivered entry is never truncated"): one value per run, made by
/// `Default`. Keep `after_step` cheap (incremental where possible: it runs
/// after every step of every seed).
pub trait StepInvariants<N, C>: Default + Send + 'static {
    /// Node `i` crashed: its next life starts from what it persisted, or
    /// from nothing. Called before the next `after_step`.
    fn crashed(&mut self, _i: usize) {}
    /// Checks the states after a step: `Err` names the invariant broken
    /// and how (one line).
    fn after_step(&mut self, roles: &Roles<'_, N, C>) -> Result<(), String>;
}

/// What a driver saw pass a server, for a protocol's message-level checks
/// ([`super::ProtocolDef::observe`]): rules over what servers say and
/// when, checked from outside their states (a core's own bookkeeping may
/// be what is wrong). Node indexes as in [`Roles::nodes`].
#[derive(Clone, Copy, Debug)]
pub enum Seen<'a, N, M> {
    /// Node `from` sends `msg` to `to`, never itself, as it leaves (an
    /// output held for a sync when it is released).
    Sent { from: usize, to: Peer, msg: &'a M },
    /// `msg` from `from` reaches node `to`, before its handler runs.
    Delivered { to: usize, from: Peer, msg: &'a M },
    /// A client's request reaches node `to`, whose state before its
    /// handler runs is `node`.
    Request {
        to: usize,
        node: &'a N,
        cref: ClientRef,
        req: &'a Request,
    },
    /// Node `from` answers request `cref`, as the answer leaves.
    Reply {
        from: usize,
        cref: ClientRef,
        resp: &'a Response,
    },
}

/// The invariants of a protocol that declares none.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoInvariants;

impl<N, C> StepInvariants<N, C> for NoInvariants {
    fn after_step(&mut self, _roles: &Roles<'_, N, C>) -> Result<(), String> {
        Ok(())
    }
}
