//! A server's part in membership change: route its messages, run a change
//! asked for here, finish one that stalled, and show the membership to
//! `quorumkv member`.

use super::epochs::Epochs;
use super::msg::{ChangeBug, ChangeMsg, Config, Registers};
use super::proposer::{Outcome, Proposer};
use crate::protocol::contract::{draw_members, Membership, Out};
use crate::types::{NodeId, Peer, Time};
use std::time::Duration;

/// How many operation timeouts a change may take before it gives up.
const CHANGE_TIMEOUTS: u32 = 5;
/// How many retry intervals (plus the server's id) a frozen replica waits
/// for the change that froze it before it finishes that change itself.
pub const STALL_RETRIES: u32 = 2;

/// The protocol's timer that drives a change (retransmit, take over).
pub trait ChangeTimer {
    fn reconfig() -> Self;
}

/// A server's membership: the configuration it serves in, the change it
/// runs, how the last one ended.
#[derive(Debug)]
pub struct Changes {
    me: NodeId,
    /// The configuration it serves in, and its part in deciding the next.
    pub epochs: Epochs,
    /// A membership change this server runs.
    pub proposer: Option<Proposer>,
    /// How the last change run here ended, for `quorumkv member`.
    pub last_change: Option<Result<Config, String>>,
    ticking: bool,
    retry: Duration,
    op_timeout: Duration,
    bug: Option<ChangeBug>,
    pub changes_done: u64,
    pub changes_taken_over: u64,
}

/// The counters a protocol shows as metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeCounts {
    pub epoch: u64,
    pub held_back: u64,
    pub moved: u64,
    pub done: u64,
    pub taken_over: u64,
}

impl Changes {
    pub fn new(me: NodeId, epochs: Epochs) -> Self {
        Changes {
            me,
            epochs,
            proposer: None,
            last_change: None,
            ticking: false,
            retry: Duration::from_millis(100),
            op_timeout: Duration::from_secs(2),
            bug: None,
            changes_done: 0,
            changes_taken_over: 0,
        }
    }
    /// The coordinator's retry interval and op timeout, and the bug.
    pub fn set(&mut self, retry: Duration, op_timeout: Duration, bug: Option<ChangeBug>) {
        (self.retry, self.op_timeout, self.bug) = (retry, op_timeout, bug);
        self.epochs.set(retry, bug);
    }
    /// A change runs here or froze this replica.
    pub fn busy(&self) -> bool {
        self.proposer.is_some() || self.epochs.frozen()
    }

    /// Start changing the members to `voters` (`quorumkv member`, the
    /// simulator's `reconfig`): the epoch it decides.
    pub fn propose<M: From<ChangeMsg> + Clone, T: ChangeTimer>(
        &mut self,
        now: Time,
        voters: &[NodeId],
        out: &mut Out<M, T>,
    ) -> Result<u64, String> {
        if self.busy() {
            return Err("a reconfiguration is in flight".into());
        }
        let target = Config::new(0, voters.to_vec()).members;
        if target.is_empty() {
            return Err("a configuration needs at least one server".into());
        }
        if let Some(n) = target.iter().find(|n| !self.epochs.servers.contains(n)) {
            return Err(format!("server {n} is unknown here"));
        }
        if target == self.epochs.installed.members {
            return Err("these are the members already".into());
        }
        self.start_change(now, target, out)
            .ok_or_else(|| "the configuration epochs or ballot rounds are used up".into())
    }

    fn start_change<M: From<ChangeMsg> + Clone, T: ChangeTimer>(
        &mut self,
        now: Time,
        target: Vec<NodeId>,
        out: &mut Out<M, T>,
    ) -> Option<u64> {
        let old = self.epochs.installed.clone();
        let timeout = self.op_timeout.saturating_mul(CHANGE_TIMEOUTS);
        let times = (now, self.retry, timeout);
        let floor = self.epochs.promised();
        let p = Proposer::start(self.me, (old, target), floor, times, self.bug, out)?;
        let epoch = p.epoch();
        self.proposer = Some(p);
        self.arm(out);
        Some(epoch)
    }

    /// A membership-change message from server `from`: the configuration
    /// newly installed here, if it is one (the server's coordinator runs
    /// in it from now on).
    pub fn on_msg<M: From<ChangeMsg> + Clone, T: ChangeTimer, S: Registers<M, T>>(
        &mut self,
        now: Time,
        from: NodeId,
        msg: ChangeMsg,
        store: &mut S,
        out: &mut Out<M, T>,
    ) -> Option<Config> {
        match msg {
            ChangeMsg::Prepare { epoch, ballot } => {
                (self.epochs).on_prepare(now, from, (epoch, ballot), store, out);
                // Promised another proposer: do not duel with it.
                if from != self.me {
                    let (promised, pause) = (self.epochs.promised(), self.stall());
                    if let Some(p) = &mut self.proposer {
                        p.defer(now, epoch, promised, pause);
                    }
                }
                self.arm(out);
            }
            ChangeMsg::Accept {
                epoch,
                ballot,
                members,
            } => {
                let at = (epoch, ballot);
                let early = (self.epochs).on_accept(now, from, at, members, store, out);
                self.arm(out);
                if let Some(config) = early {
                    // The injected bug: serve before the state transfer.
                    return self.install(now, from, config, vec![], store, out);
                }
            }
            ChangeMsg::Install { config, entries } => {
                return self.install(now, from, config, entries, store, out)
            }
            ChangeMsg::InstallRequest { epoch } => {
                (self.epochs).on_install_request(from, epoch, store, out)
            }
            ChangeMsg::Promise {
                epoch,
                ballot,
                accepted,
                entries,
            } => {
                if let Some(p) = &mut self.proposer {
                    p.on_promise(now, from, (epoch, ballot), accepted, entries, out);
                }
            }
            ChangeMsg::Accepted { epoch, ballot } => {
                if let Some(p) = &mut self.proposer {
                    p.on_accepted(now, from, (epoch, ballot), out);
                }
            }
            ChangeMsg::Refuse {
                epoch,
                ballot,
                promised,
            } => {
                let o =
                    (self.proposer.as_mut()).map(|p| p.on_refuse(now, (epoch, ballot), promised));
                self.settle(o);
            }
            ChangeMsg::Installed { epoch } => {
                let o = (self.proposer.as_mut()).map(|p| p.on_installed(from, epoch));
                self.settle(o);
            }
        }
        None
    }

    /// Take `config` (from `from`) with the old epoch's state: serve in it,
    /// tell the proposer; the configuration if it is new here.
    fn install<M: From<ChangeMsg> + Clone, T: ChangeTimer, S: Registers<M, T>>(
        &mut self,
        now: Time,
        from: NodeId,
        config: Config,
        entries: super::msg::Entries,
        store: &mut S,
        out: &mut Out<M, T>,
    ) -> Option<Config> {
        let epoch = config.epoch;
        let member = config.has(self.me);
        let new = (self.epochs.install(config, entries, store, out))
            .then(|| self.epochs.installed.clone());
        if member && epoch == self.epochs.installed.epoch {
            out.send(Peer::Node(from), ChangeMsg::Installed { epoch }.into());
        }
        // A change whose epoch was decided elsewhere is overtaken (unless
        // it is installing that epoch itself): done if it got what it
        // asked for, else run again from the newest configuration.
        let installed = self.epochs.installed.clone();
        let overtaken = (self.proposer.as_ref())
            .filter(|p| p.old.epoch < installed.epoch && p.installing() != Some(installed.epoch))
            .map(|p| p.target.clone());
        match overtaken {
            Some(target) if target == installed.members => {
                self.settle(Some(Outcome::Done(installed)))
            }
            // A takeover only had to finish the change: it is finished.
            Some(_) if self.proposer.as_ref().is_some_and(|p| p.takeover) => self.proposer = None,
            Some(target) => {
                self.proposer = None;
                self.start_change(now, target, out);
            }
            None => {}
        }
        new
    }

    fn settle(&mut self, outcome: Option<Outcome>) {
        match outcome {
            Some(Outcome::Done(config)) => {
                self.changes_done += 1;
                self.last_change = Some(Ok(config));
                self.proposer = None;
            }
            Some(Outcome::GaveUp(why)) => {
                self.last_change = Some(Err(why));
                self.proposer = None;
            }
            Some(Outcome::Going) | None => {}
        }
    }

    /// Keep the change's timer running while a change runs here or froze
    /// this replica.
    pub fn arm<M: Clone, T: ChangeTimer>(&mut self, out: &mut Out<M, T>) {
        if self.busy() && !self.ticking {
            self.ticking = true;
            out.set_timer(self.retry, T::reconfig());
        }
    }

    /// After a restart: a frozen replica counts its stall from now.
    pub fn on_start<M: Clone, T: ChangeTimer>(&mut self, now: Time, out: &mut Out<M, T>) {
        self.epochs.on_start(now);
        self.arm(out);
    }

    /// The periodic timer of a change: drive the proposer; a replica frozen
    /// for too long by a proposer that went silent finishes its change,
    /// proposing no change (Paxos completes whatever was accepted).
    pub fn tick<M: From<ChangeMsg> + Clone, T: ChangeTimer>(
        &mut self,
        now: Time,
        out: &mut Out<M, T>,
    ) {
        self.ticking = false;
        let o = self.proposer.as_mut().map(|p| p.tick(now, out));
        self.settle(o);
        let stall = self.stall();
        let stalled = (self.epochs.frozen_since()).is_some_and(|t| now >= t.saturating_add(stall));
        if stalled && self.proposer.is_none() {
            self.epochs.touch(now);
            let same = self.epochs.installed.members.clone();
            if self.start_change(now, same, out).is_some() {
                self.changes_taken_over += 1;
                self.proposer.as_mut().expect("started").takeover = true;
            }
        }
        self.arm(out);
    }

    /// How long a change may go unheard of before this server takes it
    /// over. A change takes about three round trips, each retried every
    /// `retry`; servers wait different times, so that one takes over first.
    fn stall(&self) -> Duration {
        self.retry.saturating_mul(STALL_RETRIES + self.me.min(4))
    }

    pub fn counts(&self) -> ChangeCounts {
        ChangeCounts {
            epoch: self.epochs.installed.epoch,
            held_back: self.epochs.held_back,
            moved: self.epochs.moved,
            done: self.changes_done,
            taken_over: self.changes_taken_over,
        }
    }

    /// Who votes, as this replica sees it. No leader: every server runs
    /// the changes asked of it, so it names itself; `commit` is the
    /// configuration epoch.
    pub fn view(&self) -> Membership {
        let pending = (self.proposer.as_ref())
            .map(|p| (p.epoch(), p.target.clone()))
            .or_else(|| {
                let next = self.epochs.next_epoch()?;
                let accepted = self.epochs.accepted()?;
                self.epochs.frozen().then(|| (next, accepted.to_vec()))
            });
        Membership {
            node: self.me,
            voters: self.epochs.installed.members.clone(),
            pending,
            servers: self.epochs.servers.clone(),
            leader: Some(self.me),
            commit: self.epochs.installed.epoch,
        }
    }

    /// A configuration for the simulator's `reconfig` fault, drawn from
    /// `draw` over the servers `all`: add one, remove one (keeping two),
    /// replace one, or any set of two or more. `None` while a change is in
    /// flight here or if the draw changes nothing.
    pub fn draw(&self, all: &[NodeId], draw: u64) -> Option<Vec<NodeId>> {
        if self.busy() {
            return None;
        }
        let cur = &self.epochs.installed.members;
        let new = Config::new(0, draw_members(cur, all, draw)?).members;
        (new != *cur).then_some(new)
    }
}
