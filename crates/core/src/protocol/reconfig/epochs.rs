//! Every replica's side of membership change: the configuration it serves
//! in, and its acceptor state for deciding the next one.

use super::msg::{Ballot, ChangeBug, ChangeMsg, Config, Registers};
use crate::protocol::contract::{Out, Record};
use crate::types::{NodeId, Peer, Time};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What a replica promised and accepted for deciding epoch `epoch`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Paxos {
    epoch: u64,
    promised: Ballot,
    accepted: Option<(Ballot, Vec<NodeId>)>,
}

/// What a replica does with a request of some epoch ([`Epochs::admit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Its own epoch, and it serves: handle it.
    Serve,
    /// An older epoch: answer with this configuration (the protocol's
    /// `Moved`).
    Moved(Config),
    /// Frozen, not a member, or a newer epoch (asked for): no answer.
    Hold,
}

/// Every replica's side: the configuration it serves in, and its acceptor
/// state for deciding the next one.
#[derive(Debug)]
pub struct Epochs {
    me: NodeId,
    /// Every server of the cluster file (a change may name only these).
    pub servers: Vec<NodeId>,
    pub installed: Config,
    paxos: Paxos,
    /// When this replica froze (promised for the next epoch); `None` if not.
    frozen_since: Option<Time>,
    /// When it last asked to be brought up to a newer epoch.
    asked_at: Option<Time>,
    retry: Duration,
    durable: bool,
    /// The storage keys of the installed configuration and the Paxos state.
    keys: [&'static str; 2],
    bug: Option<ChangeBug>,
    /// Requests of its epoch left unanswered: frozen, or not a member.
    pub held_back: u64,
    /// Requests of an older epoch answered with the newer configuration.
    pub moved: u64,
}

impl Epochs {
    /// `keys`: where the configuration and the Paxos state are persisted
    /// (per protocol, e.g. `abd.config`, `abd.paxos`).
    pub fn new(
        me: NodeId,
        servers: Vec<NodeId>,
        initial: Config,
        durable: bool,
        keys: [&'static str; 2],
    ) -> Self {
        Epochs {
            me,
            servers,
            installed: initial,
            paxos: Paxos::default(),
            frozen_since: None,
            asked_at: None,
            retry: Duration::from_millis(100),
            durable,
            keys,
            bug: None,
            held_back: 0,
            moved: 0,
        }
    }
    pub fn set(&mut self, retry: Duration, bug: Option<ChangeBug>) {
        self.retry = retry;
        self.bug = bug;
    }

    /// Promised a proposer of the next epoch: serves nothing of its own.
    pub fn frozen(&self) -> bool {
        self.paxos.promised != Ballot::ZERO && Some(self.paxos.epoch) == self.next_epoch()
    }
    pub fn frozen_since(&self) -> Option<Time> {
        self.frozen_since.filter(|_| self.frozen())
    }
    pub fn next_epoch(&self) -> Option<u64> {
        self.installed.epoch.checked_add(1)
    }
    /// The highest ballot this replica has promised for the next epoch.
    pub fn promised(&self) -> Ballot {
        if self.frozen() {
            self.paxos.promised
        } else {
            Ballot::ZERO
        }
    }
    /// The members accepted for the next epoch, if any.
    pub fn accepted(&self) -> Option<&[NodeId]> {
        let ok = self.frozen() || Some(self.paxos.epoch) == self.next_epoch();
        (self.paxos.accepted.as_ref())
            .filter(|_| ok)
            .map(|(_, m)| m.as_slice())
    }

    /// Whether a request of `epoch` is served here ([`Admit`]); a newer
    /// epoch is asked for.
    pub fn admit<M: From<ChangeMsg> + Clone, T>(
        &mut self,
        now: Time,
        epoch: u64,
        out: &mut Out<M, T>,
    ) -> Admit {
        use std::cmp::Ordering::*;
        match epoch.cmp(&self.installed.epoch) {
            Less => {
                self.moved += 1;
                Admit::Moved(self.installed.clone())
            }
            Greater => {
                self.ask(now, epoch, out);
                Admit::Hold
            }
            Equal => {
                let frozen = self.frozen() && self.bug != Some(ChangeBug::NoFreeze);
                if frozen || !self.installed.has(self.me) {
                    self.held_back += 1;
                    return Admit::Hold;
                }
                Admit::Serve
            }
        }
    }

    /// Whether `members` is a configuration of this cluster: not empty,
    /// every one a server of the cluster file (so an id fits the quorum
    /// bitsets, which stop at 63).
    fn known(&self, members: &[NodeId]) -> bool {
        !members.is_empty() && members.iter().all(|m| self.servers.contains(m))
    }

    /// Ask every other server for epoch `epoch` or newer (once per retry).
    pub fn ask<M: From<ChangeMsg> + Clone, T>(
        &mut self,
        now: Time,
        epoch: u64,
        out: &mut Out<M, T>,
    ) {
        if self
            .asked_at
            .is_some_and(|t| now < t.saturating_add(self.retry))
        {
            return;
        }
        self.asked_at = Some(now);
        for &n in self.servers.iter().filter(|&&n| n != self.me) {
            out.send(Peer::Node(n), ChangeMsg::InstallRequest { epoch }.into());
        }
    }

    fn persist_paxos<M: Clone, T>(&self, out: &mut Out<M, T>) {
        if self.durable {
            let value = postcard::to_allocvec(&self.paxos).expect("encodes");
            out.persist(Record::Meta {
                key: self.keys[1].into(),
                value: Bytes::from(value),
            });
        }
    }

    /// Whether a Paxos message for deciding `epoch` concerns us; if it is
    /// for one already installed here, the sender is told with `Install`.
    fn deciding<M: From<ChangeMsg> + Clone, T>(
        &mut self,
        now: Time,
        from: NodeId,
        epoch: u64,
        store: &impl Registers<M, T>,
        out: &mut Out<M, T>,
    ) -> bool {
        if epoch <= self.installed.epoch {
            self.send_install(from, store, out);
            return false;
        }
        if Some(epoch) != self.next_epoch() {
            self.ask(now, epoch.saturating_sub(1), out);
            return false;
        }
        if Some(epoch) != Some(self.paxos.epoch) {
            self.paxos = Paxos {
                epoch,
                ..Paxos::default()
            };
        }
        self.installed.has(self.me)
    }

    pub fn on_prepare<M: From<ChangeMsg> + Clone, T>(
        &mut self,
        now: Time,
        from: NodeId,
        (epoch, ballot): (u64, Ballot),
        store: &impl Registers<M, T>,
        out: &mut Out<M, T>,
    ) {
        if !self.deciding(now, from, epoch, store, out) {
            return;
        }
        // The same ballot again is a retransmission (the promise may have
        // been lost): promise again. Only a lower one is refused.
        if ballot < self.paxos.promised {
            let promised = self.paxos.promised;
            let refuse = ChangeMsg::Refuse {
                epoch,
                ballot,
                promised,
            };
            return out.send(Peer::Node(from), refuse.into());
        }
        self.paxos.promised = ballot;
        // A proposer is at work: the stall counts from its last message.
        self.frozen_since = Some(now);
        self.persist_paxos(out);
        let promise = ChangeMsg::Promise {
            epoch,
            ballot,
            accepted: self.paxos.accepted.clone(),
            entries: store.snapshot(),
        };
        out.send(Peer::Node(from), promise.into());
    }

    /// An accept; `Some(config)` when the injected bug installs it at once.
    pub fn on_accept<M: From<ChangeMsg> + Clone, T>(
        &mut self,
        now: Time,
        from: NodeId,
        (epoch, ballot): (u64, Ballot),
        members: Vec<NodeId>,
        store: &impl Registers<M, T>,
        out: &mut Out<M, T>,
    ) -> Option<Config> {
        if !self.deciding(now, from, epoch, store, out) {
            return None;
        }
        if !self.known(&members) {
            return None; // a configuration must name servers of the cluster
        }
        if ballot < self.paxos.promised {
            let promised = self.paxos.promised;
            let refuse = ChangeMsg::Refuse {
                epoch,
                ballot,
                promised,
            };
            out.send(Peer::Node(from), refuse.into());
            return None;
        }
        self.paxos.promised = ballot;
        self.paxos.accepted = Some((ballot, members.clone()));
        self.frozen_since = Some(now);
        self.persist_paxos(out);
        out.send(
            Peer::Node(from),
            ChangeMsg::Accepted { epoch, ballot }.into(),
        );
        let early = Config::new(epoch, members);
        (self.bug == Some(ChangeBug::InstallOnAccept) && early.has(self.me)).then_some(early)
    }

    /// Take `config` with the old epoch's state `entries`: true if it is
    /// newer than the one installed here (it is then installed).
    pub fn install<M: Clone, T>(
        &mut self,
        config: Config,
        entries: super::msg::Entries,
        store: &mut impl Registers<M, T>,
        out: &mut Out<M, T>,
    ) -> bool {
        store.merge(entries, out);
        if config.epoch <= self.installed.epoch || !self.known(&config.members) {
            return false;
        }
        if self.durable {
            let value = postcard::to_allocvec(&config).expect("encodes");
            out.persist(Record::Meta {
                key: self.keys[0].into(),
                value: Bytes::from(value),
            });
        }
        self.installed = config;
        self.frozen_since = None;
        true
    }

    fn send_install<M: From<ChangeMsg> + Clone, T>(
        &self,
        to: NodeId,
        store: &impl Registers<M, T>,
        out: &mut Out<M, T>,
    ) {
        let config = self.installed.clone();
        let entries = store.snapshot();
        out.send(
            Peer::Node(to),
            ChangeMsg::Install { config, entries }.into(),
        );
    }

    /// A replica behind epoch `epoch` asks: bring it up to ours.
    pub fn on_install_request<M: From<ChangeMsg> + Clone, T>(
        &self,
        from: NodeId,
        epoch: u64,
        store: &impl Registers<M, T>,
        out: &mut Out<M, T>,
    ) {
        if epoch <= self.installed.epoch && self.installed.epoch > 0 {
            self.send_install(from, store, out);
        }
    }

    /// The records of this module, after a restart: whether `key` was one.
    pub fn restore(&mut self, key: &str, value: &[u8]) -> bool {
        if key == self.keys[0] {
            if let Ok(c) = postcard::from_bytes::<Config>(value) {
                if c.epoch > self.installed.epoch {
                    self.installed = c;
                }
            }
        } else if key == self.keys[1] {
            if let Ok(p) = postcard::from_bytes::<Paxos>(value) {
                self.paxos = p;
            }
        } else {
            return false;
        }
        true
    }
    /// After a restart: a frozen replica counts its stall from now.
    pub fn on_start(&mut self, now: Time) {
        if self.frozen() {
            self.frozen_since = Some(now);
        }
    }
    /// A stalled change is taken over from now on: count again.
    pub fn touch(&mut self, now: Time) {
        if self.frozen() {
            self.frozen_since = Some(now);
        }
    }
}
