//! A server's part in membership change (`reconfig.rs` has the
//! protocol): route its messages, run a change asked for here, finish one
//! that stalled, and show the membership to `quorumkv member`.

use super::msg::{Msg, Timer};
use super::node::AbdNode;
use super::reconfig::{Config, Outcome, Proposer};
use crate::protocol::contract::{Membership, Out};
use crate::types::{NodeId, Peer, Time};

/// How many operation timeouts a change may take before it gives up.
const CHANGE_TIMEOUTS: u32 = 5;
/// How many retry intervals (plus the server's id) a frozen replica waits
/// for the change that froze it before it finishes that change itself.
const STALL_RETRIES: u32 = 3;

impl AbdNode {
    /// Start changing the members to `voters` (`quorumkv member`, the
    /// simulator's `reconfig`): the epoch it decides.
    pub fn propose(
        &mut self,
        now: Time,
        voters: &[NodeId],
        out: &mut Out<Msg, Timer>,
    ) -> Result<u64, String> {
        if self.proposer.is_some() || self.epochs.frozen() {
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

    fn start_change(
        &mut self,
        now: Time,
        target: Vec<NodeId>,
        out: &mut Out<Msg, Timer>,
    ) -> Option<u64> {
        let old = self.epochs.installed.clone();
        let cfg = &self.coord.cfg;
        let times = (
            now,
            cfg.retry_interval,
            cfg.op_timeout.saturating_mul(CHANGE_TIMEOUTS),
        );
        let floor = self.epochs.promised();
        let bug = self.coord.bug;
        let p = Proposer::start(self.id, (old, target), floor, times, bug, out)?;
        let epoch = p.epoch();
        self.proposer = Some(p);
        self.arm_reconfig(out);
        Some(epoch)
    }

    /// A membership-change message from server `from`.
    pub(super) fn on_reconfig(
        &mut self,
        now: Time,
        from: NodeId,
        msg: Msg,
        out: &mut Out<Msg, Timer>,
    ) {
        match msg {
            Msg::Prepare { epoch, ballot } => {
                (self.epochs).on_prepare(now, from, (epoch, ballot), &self.replica, out);
                self.arm_reconfig(out);
            }
            Msg::Accept {
                epoch,
                ballot,
                members,
            } => {
                let early = (self.epochs).on_accept(
                    now,
                    from,
                    (epoch, ballot),
                    members,
                    &self.replica,
                    out,
                );
                if let Some(config) = early {
                    // The injected bug: serve before the state transfer.
                    self.install(now, from, config, vec![], out);
                }
                self.arm_reconfig(out);
            }
            Msg::Install { config, entries } => self.install(now, from, config, entries, out),
            Msg::InstallRequest { epoch } => {
                (self.epochs).on_install_request(from, epoch, &self.replica, out)
            }
            Msg::Promise {
                epoch,
                ballot,
                accepted,
                entries,
            } => {
                if let Some(p) = &mut self.proposer {
                    p.on_promise(now, from, (epoch, ballot), accepted, entries, out);
                }
            }
            Msg::Accepted { epoch, ballot } => {
                if let Some(p) = &mut self.proposer {
                    p.on_accepted(now, from, (epoch, ballot), out);
                }
            }
            Msg::Refuse {
                epoch,
                ballot,
                promised,
            } => {
                let o = (self.proposer.as_mut()).map(|p| p.on_refuse(now, (epoch, ballot), promised));
                self.settle(o);
            }
            Msg::Installed { epoch } => {
                let o = (self.proposer.as_mut()).map(|p| p.on_installed(from, epoch));
                self.settle(o);
            }
            _ => {} // the register messages are routed in `node.rs`
        }
    }

    /// Take `config` (from `from`) with the old epoch's state: serve in it,
    /// run this server's operations in it, tell the proposer.
    fn install(
        &mut self,
        now: Time,
        from: NodeId,
        config: Config,
        entries: super::msg::Entries,
        out: &mut Out<Msg, Timer>,
    ) {
        let epoch = config.epoch;
        let member = config.has(self.id);
        if self.epochs.install(config, entries, &mut self.replica, out) {
            let installed = self.epochs.installed.clone();
            self.coord.adopt(now, &installed, out);
        }
        if member && epoch == self.epochs.installed.epoch {
            out.send(Peer::Node(from), Msg::Installed { epoch });
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
            Some(target) => {
                self.proposer = None;
                self.start_change(now, target, out);
            }
            None => {}
        }
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

    pub(super) fn arm_reconfig(&mut self, out: &mut Out<Msg, Timer>) {
        let busy = self.proposer.is_some() || self.epochs.frozen();
        if busy && !self.reconfig_ticking {
            self.reconfig_ticking = true;
            out.set_timer(self.coord.cfg.retry_interval, Timer::Reconfig);
        }
    }

    /// The periodic timer of a change: drive the proposer; a replica frozen
    /// for too long by a proposer that went silent finishes its change,
    /// proposing no change (Paxos completes whatever was accepted).
    pub(super) fn reconfig_tick(&mut self, now: Time, out: &mut Out<Msg, Timer>) {
        self.reconfig_ticking = false;
        let o = self.proposer.as_mut().map(|p| p.tick(now, out));
        self.settle(o);
        // A change takes about three round trips, each retried every
        // `retry_interval`; servers wait different times, so that one
        // takes over first.
        let stall = (self.coord.cfg.retry_interval).saturating_mul(STALL_RETRIES + self.id.min(16));
        let stalled = (self.epochs.frozen_since()).is_some_and(|t| now >= t.saturating_add(stall));
        if stalled && self.proposer.is_none() {
            self.epochs.touch(now);
            let same = self.epochs.installed.members.clone();
            if self.start_change(now, same, out).is_some() {
                self.changes_taken_over += 1;
            }
        }
        self.arm_reconfig(out);
    }

    /// Who votes, as this replica sees it. ABD has no leader: every server
    /// runs the changes asked of it, so it names itself; `commit` is the
    /// configuration epoch.
    pub fn membership_view(&self) -> Membership {
        let pending = (self.proposer.as_ref())
            .map(|p| (p.epoch(), p.target.clone()))
            .or_else(|| {
                let next = self.epochs.next_epoch()?;
                let accepted = self.epochs.accepted()?;
                self.epochs.frozen().then(|| (next, accepted.to_vec()))
            });
        Membership {
            node: self.id,
            voters: self.epochs.installed.members.clone(),
            pending,
            servers: self.epochs.servers.clone(),
            leader: Some(self.id),
            commit: self.epochs.installed.epoch,
        }
    }

    /// A configuration for the simulator's `reconfig` fault, drawn from
    /// `draw` over the servers `all`: add one, remove one (keeping two),
    /// replace one, or any set of two or more. `None` while a change is in
    /// flight here or if the draw changes nothing.
    pub fn draw_config(&self, all: &[NodeId], draw: u64) -> Option<Vec<NodeId>> {
        if self.proposer.is_some() || self.epochs.frozen() {
            return None;
        }
        let cur = self.epochs.installed.members.clone();
        let outside: Vec<NodeId> = all.iter().copied().filter(|n| !cur.contains(n)).collect();
        let pick = |v: &[NodeId], k: u64| v[(k % v.len() as u64) as usize];
        let (a, b) = (draw >> 8, draw >> 32);
        let mut new = cur.clone();
        match draw % 4 {
            0 if !outside.is_empty() => new.push(pick(&outside, a)),
            1 if cur.len() > 2 => new.retain(|&n| n != pick(&cur, a)),
            2 if !outside.is_empty() => {
                let gone = pick(&cur, a);
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
        let new = Config::new(0, new).members;
        (new != cur).then_some(new)
    }
}
