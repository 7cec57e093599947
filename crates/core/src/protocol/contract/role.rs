//! A protocol role's side of the contract: the [`Protocol`] trait its
//! handlers implement, the [`Out`] they record [`Command`]s in, and the
//! [`Record`]s and [`LinkEvent`]s a driver hands them. The driver's rules
//! are in the module doc of `protocol` (`protocol/mod.rs`).

use crate::types::{ClientRef, Event, NodeId, Peer, Request, Response, Tag, Time};
use bytes::Bytes;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

/// Something that happened to a link, reported by the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkEvent {
    /// A link to this peer is (again) established.
    Up(Peer),
    /// The link to this peer closed (TCP close or heartbeat loss): the
    /// "perfect failure detector" of the ring protocol, and how a server
    /// learns that a client-side coordinator went away.
    Down(Peer),
}

/// A record a core asks the driver to make durable before it speaks again.
/// Register-based protocols (ABD, lease-lock, ring) persist `(key, tag,
/// value)`; log-based protocols (Zab) use the log-shaped variants.
///
/// After a restart `Protocol::restore` gets, in this order: every `Meta`,
/// the latest `Snapshot`, every register's latest `Register`, then the
/// log's `Entry`s above the snapshot in index order (truncations applied).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// The register `key` now holds `value` (None = deleted) at `tag`.
    Register {
        key: Bytes,
        tag: Tag,
        value: Option<Bytes>,
    },
    /// The log holds `data` at `index`, written in `epoch` (replaces an
    /// entry already at `index`).
    Entry { index: u64, epoch: u64, data: Bytes },
    /// Drop every log entry at `index` or above.
    TruncateFrom { index: u64 },
    /// The state up to and including log `index`; entries at or below it
    /// may be discarded.
    Snapshot { index: u64, data: Bytes },
    /// A small named value (current epoch, vote, …); the last write wins.
    Meta { key: String, value: Bytes },
}

/// A replica's whole state as `quorumkv snapshot save` reads it
/// ([`Protocol::export`]): the records a fresh replica of a new cluster
/// restores from, in the order `Protocol::restore` takes them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Export {
    pub records: Vec<Record>,
    /// Where the state was cut: the log index applied (Zab's zxid); 0 for
    /// the register protocols, which have no such point.
    pub cut: u64,
    /// Keys (and znodes) the state holds.
    pub entries: u64,
    /// One replica's registers are not enough: a snapshot merges those of
    /// a majority by highest tag (ABD, lease-lock). False: one replica's
    /// committed state, read after a sync, is the snapshot (Zab).
    pub merge_majority: bool,
}

/// Who votes, as one replica sees it (`quorumkv member list`,
/// [`Protocol::membership`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    /// The replica that answers.
    pub node: NodeId,
    /// The voting servers of the last configuration committed here.
    pub voters: Vec<NodeId>,
    /// A change proposed and not yet committed here: its log index and
    /// the voters it names.
    pub pending: Option<(u64, Vec<NodeId>)>,
    /// Every server this replica talks to (voters, learners and spares),
    /// itself included: a change may name only these.
    pub servers: Vec<NodeId>,
    /// The leader this replica follows or is, if it knows one.
    pub leader: Option<NodeId>,
    /// Its commit index.
    pub commit: u64,
}

/// A member set for the simulator's `reconfig` fault, drawn from `draw`
/// over the servers `all` starting from `cur`: add a server outside it,
/// remove a member (keeping two), replace one, or any set of two or more
/// (`ProtocolDef::reconfigure`). `None` if the draw gives nothing.
pub fn draw_members(cur: &[NodeId], all: &[NodeId], draw: u64) -> Option<Vec<NodeId>> {
    let outside: Vec<NodeId> = all.iter().copied().filter(|n| !cur.contains(n)).collect();
    let pick = |v: &[NodeId], k: u64| v[(k % v.len() as u64) as usize];
    let (a, b) = (draw >> 8, draw >> 32);
    let mut new = cur.to_vec();
    match draw % 4 {
        0 if !outside.is_empty() => new.push(pick(&outside, a)),
        1 if cur.len() > 2 => new.retain(|&n| n != pick(cur, a)),
        2 if !outside.is_empty() => {
            let gone = pick(cur, a);
            new.retain(|&n| n != gone);
            new.push(pick(&outside, b));
        }
        3 => {
            new = (all.iter().enumerate())
                .filter(|&(i, _)| i < 24 && (b >> i) & 1 == 1)
                .map(|(_, &n)| n)
                .collect();
            if new.len() < all.len().min(2) {
                return None;
            }
        }
        _ => return None,
    }
    Some(new)
}

/// One effect of a handler call, executed by the driver.
#[derive(Clone, Debug, PartialEq)]
pub enum Command<M, T> {
    Send {
        to: Peer,
        msg: M,
    },
    Reply {
        client: ClientRef,
        resp: Response,
    },
    /// Push `event` to the client connection `session` unprompted (a watch
    /// fired, a lock was granted, a session expired). Dropped when the
    /// session is gone; `ClientRef::LOCAL` is the driver's in-process client.
    Notify {
        session: u64,
        event: Event,
    },
    SetTimer {
        after: Duration,
        timer: T,
    },
    CancelTimer {
        timer: T,
    },
    Persist(Record),
    /// A `Send` that does not wait for the records persisted before it
    /// (rule 2 of the contract): `msg` must reveal nothing that has to be
    /// durable first. It never overtakes an earlier `Send` to the same peer
    /// that is still held (links stay FIFO).
    SendNow {
        to: Peer,
        msg: M,
    },
    /// A `Reply` that does not wait for the records persisted before it.
    ReplyNow {
        client: ClientRef,
        resp: Response,
    },
    /// Deliver `msg` to this node itself (`on_msg` from its own `Peer`) once
    /// every record it persisted before this command is durable; at once
    /// (after the call, like a send to oneself) when nothing is pending.
    /// Dropped by a crash, like every held output.
    WhenDurable(M),
}

impl<M, T> Command<M, T> {
    /// The command as a driver executes it once nothing is held before it
    /// (a synchronous test disk, or a held command being released):
    /// `SendNow` as `Send`, `ReplyNow` as `Reply`, the rest as they are.
    pub fn plain(self) -> Self {
        match self {
            Command::SendNow { to, msg } => Command::Send { to, msg },
            Command::ReplyNow { client, resp } => Command::Reply { client, resp },
            c => c,
        }
    }
}

/// Collects the commands of one handler call.
#[derive(Debug)]
pub struct Out<M, T> {
    cmds: Vec<Command<M, T>>,
}

impl<M, T> Default for Out<M, T> {
    fn default() -> Self {
        Out { cmds: Vec::new() }
    }
}

impl<M: Clone, T> Out<M, T> {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn send(&mut self, to: Peer, msg: M) {
        self.cmds.push(Command::Send { to, msg });
    }
    /// Record `cmd` as it is (a command taken out with [`Out::drain`]).
    pub fn push(&mut self, cmd: Command<M, T>) {
        self.cmds.push(cmd);
    }
    /// Send `msg` to every replica in `members` (the coordinator's broadcast).
    pub fn broadcast(&mut self, members: &[NodeId], msg: M) {
        for &n in members {
            self.cmds.push(Command::Send {
                to: Peer::Node(n),
                msg: msg.clone(),
            });
        }
    }
    pub fn reply(&mut self, client: ClientRef, resp: Response) {
        self.cmds.push(Command::Reply { client, resp });
    }
    pub fn notify(&mut self, session: u64, event: Event) {
        self.cmds.push(Command::Notify { session, event });
    }
    pub fn set_timer(&mut self, after: Duration, timer: T) {
        self.cmds.push(Command::SetTimer { after, timer });
    }
    pub fn cancel_timer(&mut self, timer: T) {
        self.cmds.push(Command::CancelTimer { timer });
    }
    pub fn persist(&mut self, rec: Record) {
        self.cmds.push(Command::Persist(rec));
    }
    /// Send without waiting for earlier persists ([`Command::SendNow`]).
    pub fn send_now(&mut self, to: Peer, msg: M) {
        self.cmds.push(Command::SendNow { to, msg });
    }
    /// Reply without waiting for earlier persists ([`Command::ReplyNow`]).
    pub fn reply_now(&mut self, client: ClientRef, resp: Response) {
        self.cmds.push(Command::ReplyNow { client, resp });
    }
    /// Get `msg` back once what was persisted so far is durable
    /// ([`Command::WhenDurable`]).
    pub fn when_durable(&mut self, msg: M) {
        self.cmds.push(Command::WhenDurable(msg));
    }
    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }
    pub fn len(&self) -> usize {
        self.cmds.len()
    }
    /// Take the commands, leaving `self` empty (and its allocation reusable).
    pub fn drain(&mut self) -> std::vec::Drain<'_, Command<M, T>> {
        self.cmds.drain(..)
    }
    pub fn commands(&self) -> &[Command<M, T>] {
        &self.cmds
    }
}

/// A protocol role: a deterministic state machine driven by the caller.
pub trait Protocol {
    /// The messages this protocol exchanges between roles.
    type Msg: Clone + Debug + Serialize + DeserializeOwned + Send + 'static;
    /// The timers it sets.
    type Timer: Clone + Debug + Eq + Hash + Send + 'static;

    /// Called once by the driver before anything else (after `restore`):
    /// arm first timers, ask peers for state, start an election.
    fn on_start(&mut self, _now: Time, _out: &mut Out<Self::Msg, Self::Timer>) {}
    /// A client asks for `req`; answer later with `Out::reply(client, …)`.
    fn on_client(
        &mut self,
        now: Time,
        client: ClientRef,
        req: Request,
        out: &mut Out<Self::Msg, Self::Timer>,
    );
    /// A protocol message arrived from `from`.
    fn on_msg(
        &mut self,
        now: Time,
        from: Peer,
        msg: Self::Msg,
        out: &mut Out<Self::Msg, Self::Timer>,
    );
    /// A timer set earlier fired.
    fn on_timer(&mut self, now: Time, timer: Self::Timer, out: &mut Out<Self::Msg, Self::Timer>);
    /// A link came up or went down. Most protocols ignore it.
    fn on_link(&mut self, _now: Time, _ev: LinkEvent, _out: &mut Out<Self::Msg, Self::Timer>) {}
    /// Rebuild state from durable records after a restart (before any other
    /// call). Protocols without durable state ignore it.
    fn restore(&mut self, _rec: Record) {}
    /// This replica's state for a snapshot ([`Export`]); why not, when it
    /// cannot give one (a protocol without snapshots, a replica that is
    /// still catching up).
    fn export(&self) -> Result<Export, String> {
        Err("snapshots are not supported for this protocol".into())
    }
    /// Who votes ([`Membership`]); `None` (the default) for a protocol
    /// whose servers are fixed by the cluster file.
    fn membership(&self) -> Option<Membership> {
        None
    }
    /// Propose `voters` as the servers that vote from now on (`quorumkv
    /// member add | remove | replace`): the log index of the change, in
    /// effect once committed. The caller authenticates who asks.
    fn change_membership(
        &mut self,
        _now: Time,
        _voters: &[NodeId],
        _out: &mut Out<Self::Msg, Self::Timer>,
    ) -> Result<u64, String> {
        Err("this protocol's servers are fixed at start (the cluster file)".into())
    }
    /// This node's part in the protocol right now, one word for `quorumkv
    /// endpoints status`: `replica` (all equal), `leader`, `follower`,
    /// `recovering`, …
    fn role(&self) -> &'static str {
        "replica"
    }
    /// Why this node cannot go on, once it knows (e.g. every replica lost
    /// its state at once: nothing is left to recover from). The node
    /// runtime checks it after every call, logs it and exits with an
    /// error; `None` (the default) while all is well.
    fn fatal(&self) -> Option<String> {
        None
    }
    /// One-line status for `INFO` and logs.
    fn status(&self) -> String {
        String::new()
    }
    /// Protocol counters for the metrics endpoint: `(name, help, value)`,
    /// names in Prometheus style without the `quorumkv_` prefix.
    fn metrics(&self) -> Vec<(&'static str, &'static str, u64)> {
        Vec::new()
    }
}

/// One counter of a [`Protocol::metrics`] table: name, help, and how to
/// read it from the role `C`.
pub type Metric<C> = (&'static str, &'static str, fn(&C) -> u64);

/// Read every counter of `table` from `c`, in the table's order.
pub fn read_metrics<C>(table: &[Metric<C>], c: &C) -> Vec<(&'static str, &'static str, u64)> {
    table
        .iter()
        .map(|&(name, help, read)| (name, help, read(c)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_folds_the_now_forms_and_keeps_the_rest() {
        let client = ClientRef::local(1);
        let mut out: Out<u8, ()> = Out::new();
        out.send_now(Peer::Node(2), 7);
        out.reply_now(client, Response::Done);
        out.when_durable(9);
        out.set_timer(Duration::from_millis(1), ());
        let plain: Vec<_> = out.drain().map(Command::plain).collect();
        assert_eq!(
            plain,
            [
                Command::Send {
                    to: Peer::Node(2),
                    msg: 7
                },
                Command::Reply {
                    client,
                    resp: Response::Done
                },
                Command::WhenDurable(9),
                Command::SetTimer {
                    after: Duration::from_millis(1),
                    timer: ()
                },
            ]
        );
    }
}
