//! Helpers shared by the protocols' unit tests: pick commands out of an
//! [`Out`], build plain KV requests, and check a protocol's injected bugs.

use crate::protocol::contract::{
    Command, InjectedBugs, NodeSpec, Out, Roles, StepInvariants, Stepped, Timing,
};
use crate::types::NodeId;
use crate::types::{Peer, Request, Response, Time};
use bytes::Bytes;
use std::collections::HashSet;
use std::time::Duration;

pub const T0: Time = Time(0);

/// Node `id`'s spec at its first boot: memory mode, state kept, default
/// timing, seed 0 (change a field with `NodeSpec { …, ..node_spec() }`).
pub fn node_spec(id: NodeId, members: &[NodeId]) -> NodeSpec<'_> {
    NodeSpec {
        id,
        members,
        incarnation: 0,
        durable: false,
        lost_state: false,
        timing: Timing::default(),
        seed: 0,
    }
}

/// Run the per-step invariants `inv` after a step of node `i` of `nodes`
/// (all live, no client coordinators), at time zero.
pub fn after_node_step<N, C, I: StepInvariants<N, C>>(
    inv: &mut I,
    nodes: &[&N],
    i: usize,
) -> Result<(), String> {
    let nodes: Vec<Option<&N>> = nodes.iter().map(|n| Some(*n)).collect();
    inv.after_step(&Roles {
        now: T0,
        stepped: Stepped::Node(i),
        nodes: &nodes,
        clients: &[],
    })
}

/// Drain `out`, keeping what `pick` picks.
pub fn drained<M: Clone, T, X>(
    out: &mut Out<M, T>,
    pick: impl FnMut(Command<M, T>) -> Option<X>,
) -> Vec<X> {
    out.drain().filter_map(pick).collect()
}

/// The messages `Send` in `out` (draining it), with their recipients.
pub fn sends<M: Clone, T>(out: &mut Out<M, T>) -> Vec<(Peer, M)> {
    drained(out, |c| match c {
        Command::Send { to, msg } => Some((to, msg)),
        _ => None,
    })
}

/// The client answers (`Reply`) in `out` (draining it).
pub fn replies<M: Clone, T>(out: &mut Out<M, T>) -> Vec<Response> {
    drained(out, |c| match c {
        Command::Reply { resp, .. } => Some(resp),
        _ => None,
    })
}

/// The timers set in `out` (draining it).
pub fn timers<M: Clone, T>(out: &mut Out<M, T>) -> Vec<(Duration, T)> {
    drained(out, |c| match c {
        Command::SetTimer { after, timer } => Some((after, timer)),
        _ => None,
    })
}

/// A get's answer: `v`.
pub fn value(v: &'static [u8]) -> Response {
    Response::Value(Some(Bytes::from_static(v)))
}

pub fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

pub fn put(k: &str, v: &str) -> Request {
    Request::Put {
        key: b(k),
        value: b(v),
    }
}

pub fn get(k: &str) -> Request {
    Request::Get { key: b(k) }
}

/// A protocol's injected bugs have distinct names, all starting with
/// `prefix`, distinct descriptions, and are found by name.
pub fn check_injected_bugs<B: InjectedBugs>(prefix: &str) {
    let names: HashSet<_> = B::all().iter().map(|b| b.name()).collect();
    assert_eq!(names.len(), B::all().len(), "two bugs share a name");
    for n in &names {
        assert!(n.starts_with(prefix), "{n} does not start with {prefix}");
    }
    let about: HashSet<_> = B::all().iter().map(|b| b.about()).collect();
    assert_eq!(about.len(), B::all().len(), "two bugs share a description");
    for &bug in B::all() {
        assert_eq!(B::find(bug.name()), Some(bug));
    }
}
