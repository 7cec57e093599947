//! Plays the fault schedule on a local cluster's processes, one fault at a
//! time: inject, hold, heal, then wait until every replica serves again
//! before the calm that precedes the next one.

use super::netns::Hosts;
use super::schedule::{Fault, NetFault, Schedule};
use super::timeline::Timeline;
use super::workload::{key_name, recorded, OpCounts};
use anyhow::Context;
use quorumkv_check::recorder::ClientLog;
use quorumkv_core::op::Outcome;
use quorumkv_core::{NodeId, Request};
use quorumkv_node::client::Client;
use quorumkv_node::local::{LocalCluster, PortTaken};
use quorumkv_node::member::{self, Change};
use quorumkv_node::member_update;
use quorumkv_node::snapshot::Reach;
use quorumkv_node::status::fetch;
use quorumkv_node::storage::Durability;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How many of each fault were injected (and healed).
#[derive(Debug, Default)]
pub struct FaultCounts {
    pub kills: AtomicU64,
    pub pauses: AtomicU64,
    pub kill_alls: AtomicU64,
    pub partitions: AtomicU64,
    pub degrades: AtomicU64,
    pub replaces: AtomicU64,
    pub moves: AtomicU64,
}

impl FaultCounts {
    pub fn total(&self) -> u64 {
        self.kills.load(Ordering::Relaxed)
            + self.pauses.load(Ordering::Relaxed)
            + self.kill_alls.load(Ordering::Relaxed)
            + self.partitions.load(Ordering::Relaxed)
            + self.degrades.load(Ordering::Relaxed)
            + self.replaces.load(Ordering::Relaxed)
            + self.moves.load(Ordering::Relaxed)
    }
}

/// After each heal, one more client reads every key (recorded in the
/// history like any other), so that "the cluster serves again" is
/// measured, not assumed: the time from the heal until every key was read.
pub struct Liveness {
    pub client: Client,
    pub log: ClientLog,
    pub keys: u64,
    pub counts: Arc<OpCounts>,
    /// The longest heal-to-serve time seen, by fault kind, and how many.
    pub worst: BTreeMap<&'static str, (Duration, u32)>,
}

impl Liveness {
    /// Read every key until each read succeeds or `deadline` passes;
    /// the time it took since `healed`, or the key not served.
    async fn every_key(&mut self, healed: Instant, deadline: Instant) -> Result<Duration, String> {
        for k in 0..self.keys {
            loop {
                let req = Request::Get {
                    key: key_name(k).into_bytes().into(),
                };
                let (outcome, err) = recorded(&self.client, &mut self.log, req, &self.counts).await;
                if let Outcome::Ok(_) = outcome {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "key {} not served (last error: {})",
                        key_name(k),
                        err.unwrap_or_default()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(healed.elapsed())
    }

    /// One line: the worst heal-to-serve time of each kind.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = (self.worst.iter())
            .map(|(k, (d, n))| format!("{k} {:.2}s ({n} heals)", d.as_secs_f64()))
            .collect();
        let max = self
            .worst
            .values()
            .map(|(d, _)| *d)
            .max()
            .unwrap_or_default();
        format!(
            "every key served again after each heal within {:.2}s (worst by fault: {})",
            max.as_secs_f64(),
            if parts.is_empty() {
                "no heals".into()
            } else {
                parts.join(", ")
            }
        )
    }
}

pub struct Nemesis<'a> {
    pub cluster: &'a mut LocalCluster,
    pub durability: Durability,
    /// Whether the protocol keeps its state in the data directory
    /// (`ProtocolInfo::persists_state`); when not, a restart asks its peers.
    pub persists: bool,
    pub timeline: &'a mut Timeline,
    pub counts: &'a FaultCounts,
    /// How long a healed replica may take to serve again.
    pub serve_timeout: Duration,
    /// The hosts of `--hosts netns` (network faults need them).
    pub hosts: Option<&'a Hosts>,
    pub liveness: &'a mut Liveness,
    /// Who votes and who waits, for `replace` faults (Zab with spares).
    pub rotation: Option<Rotation>,
    /// The loopback ports' base (`None` with `--hosts netns`): where
    /// `move` faults take a replica (`ports::MOVED`).
    pub port_base: Option<u16>,
}

/// The order in which `replace` faults move servers: the voter that has
/// voted longest goes out, the learner that has waited longest comes in.
/// With N voters and at least one spare, every voter of the start has
/// been replaced after N replace faults, and again after 2N.
#[derive(Debug)]
pub struct Rotation {
    pub voters: VecDeque<NodeId>,
    pub learners: VecDeque<NodeId>,
}

impl Rotation {
    /// `--opt spares=K` over `n` servers: the first `n - K` vote.
    pub fn new(n: usize, spares: usize) -> Option<Rotation> {
        let all: Vec<NodeId> = (1..=n as NodeId).collect();
        let (voters, learners) = all.split_at(n.checked_sub(spares)?);
        (!voters.is_empty() && !learners.is_empty()).then(|| Rotation {
            voters: voters.iter().copied().collect(),
            learners: learners.iter().copied().collect(),
        })
    }

    /// The next replacement: (the voter out, the learner in).
    pub fn next(&self) -> (NodeId, NodeId) {
        (self.voters[0], self.learners[0])
    }

    /// The replacement `next` gave is committed.
    pub fn done(&mut self) {
        let (old, new) = (self.voters.pop_front(), self.learners.pop_front());
        self.voters.extend(new);
        self.learners.extend(old);
    }
}

fn kind(f: &Fault) -> &'static str {
    match f {
        Fault::Kill(_) => "kill",
        Fault::Pause(_) => "pause",
        Fault::KillAll => "kill-all",
        Fault::Replace => "replace",
        Fault::Move(_) => "move",
        Fault::Net(NetFault::Degrade { .. }) => "netem",
        Fault::Net(_) => "partition",
    }
}

/// Roles (`NodeStatus::role`) of a replica that refuses operations: ABD
/// catching up after a memory restart, a ring replica outside the view.
const NOT_SERVING: [&str; 2] = ["recovering", "fenced"];

fn ids(list: &[NodeId]) -> String {
    list.iter()
        .map(NodeId::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

impl Nemesis<'_> {
    /// Inject faults from `schedule` until `until` (a fault under way then
    /// is still healed). Errs when a replica cannot be restarted or does
    /// not serve again in time; the run then stops early.
    pub async fn run(&mut self, mut schedule: Schedule, until: Instant) -> anyhow::Result<()> {
        while let Some(step) = schedule.next_step() {
            if Instant::now() + step.gap >= until {
                break;
            }
            tokio::time::sleep(step.gap).await;
            self.inject(&step.fault).await?;
            tokio::time::sleep(step.hold).await;
            let healed = Instant::now();
            self.heal(&step.fault).await?;
            self.wait_serving().await?;
            let took = self
                .liveness
                .every_key(healed, healed + self.serve_timeout)
                .await;
            match took {
                Ok(d) => {
                    self.timeline.note(format!(
                        "every key served ({:.2}s after the heal)",
                        d.as_secs_f64()
                    ));
                    let w = self.liveness.worst.entry(kind(&step.fault)).or_default();
                    *w = (w.0.max(d), w.1 + 1);
                }
                Err(e) => {
                    let msg = format!(
                        "not every key served within {:?} of the heal: {e}",
                        self.serve_timeout
                    );
                    self.timeline.note(msg.clone());
                    anyhow::bail!(msg);
                }
            }
        }
        tokio::time::sleep_until(until).await;
        Ok(())
    }

    async fn inject(&mut self, fault: &Fault) -> anyhow::Result<()> {
        match fault {
            Fault::Kill(list) => {
                for &id in list {
                    self.cluster.kill(id).await?;
                }
                self.timeline.note(format!("kill {} (SIGKILL)", ids(list)));
            }
            Fault::Pause(list) => {
                for &id in list {
                    self.cluster.pause(id)?;
                }
                self.timeline.note(format!("pause {} (SIGSTOP)", ids(list)));
            }
            Fault::KillAll => {
                for e in self.cluster.endpoints().to_vec() {
                    self.cluster.kill(e.id).await?;
                }
                self.timeline.note("kill-all: every replica (SIGKILL)");
            }
            Fault::Replace => self.replace().await?,
            Fault::Move(id) => self.move_out(*id).await?,
            Fault::Net(f) => {
                let hosts = self.hosts.context("network faults need --hosts netns")?;
                let leader = match f {
                    NetFault::IsolateLeader { .. } => self.leader().await,
                    _ => None,
                };
                let n = self.cluster.endpoints().len();
                hosts.cut(&f.cuts(n, leader))?;
                if let NetFault::Degrade {
                    ids,
                    delay_ms,
                    loss_pct,
                } = f
                {
                    hosts.degrade(ids, *delay_ms, *loss_pct)?;
                }
                let how = match f {
                    NetFault::Degrade { .. } if !hosts.netem => {
                        " (no netem in this kernel: the delay is not applied, the loss is, by iptables)"
                    }
                    NetFault::Degrade { .. } => " (tc netem)",
                    _ => " (iptables DROP)",
                };
                self.timeline.note(format!("{}{how}", f.describe(leader)));
            }
        }
        Ok(())
    }

    /// `quorumkv member replace` of the next voter by the next learner,
    /// waited for until committed; then the replaced server is killed.
    async fn replace(&mut self) -> anyhow::Result<()> {
        let rot = self.rotation.as_mut().context("replace needs spares")?;
        let (old, new) = rot.next();
        let reach = Reach {
            endpoints: (self.cluster.endpoints().iter())
                .map(|e| e.native.to_string())
                .collect(),
            timeout: Duration::from_secs(2),
            ..Reach::default()
        };
        let change = Change::Replace { old, new };
        let done = member::change(&reach, &change, self.serve_timeout).await;
        let m = done.map_err(|e| {
            let msg = format!("replace {old} by {new} failed: {e}");
            self.timeline.note(msg.clone());
            anyhow::anyhow!(msg)
        })?;
        rot.done();
        self.timeline.note(format!(
            "replace voter {old} by {new}: committed at {} (voters {}, leader {}); kill {old} (SIGKILL)",
            m.commit,
            ids(&m.voters),
            m.leader.map_or("-".into(), |l| l.to_string())
        ));
        self.cluster.kill(old).await
    }

    /// A lost machine: SIGKILL replica `id`, then every other replica
    /// dials it at its other port (`quorumkv member update`, each one's
    /// cluster file rewritten).
    async fn move_out(&mut self, id: NodeId) -> anyhow::Result<()> {
        let base = self.port_base.context("move faults need loopback ports")?;
        let ep = self.cluster.endpoint(id).context("no such replica")?;
        let home = base + id as u16;
        let to = match ep.native.port() == home {
            true => home + super::ports::MOVED,
            false => home,
        };
        self.cluster.kill(id).await?;
        let addr = format!("127.0.0.1:{to}");
        let reach = Reach {
            endpoints: (self.cluster.endpoints().iter())
                .filter(|e| e.id != id)
                .map(|e| e.native.to_string())
                .collect(),
            timeout: Duration::from_secs(2),
            ..Reach::default()
        };
        let answers = member_update::update(&reach, id, &addr).await;
        let answers = answers.map_err(anyhow::Error::msg)?;
        if !answers.iter().all(|a| a.updated()) {
            let msg = format!(
                "move {id}: not every replica took its new address:\n{}",
                member_update::describe(&answers)
            );
            self.timeline.note(msg.clone());
            anyhow::bail!(msg);
        }
        self.cluster.reload_file()?;
        self.timeline.note(format!(
            "move {id}: SIGKILL; every other replica now dials it at {addr} (member update)"
        ));
        Ok(())
    }

    /// The new machine of a `move`: replica `id` at its new address, an
    /// empty data directory, recovering from its peers.
    async fn move_in(&mut self, id: NodeId) -> anyhow::Result<()> {
        let at = (self.cluster.endpoint(id))
            .context("no such replica")?
            .native;
        self.timeline.note(format!(
            "start {id} at {at}: an empty data directory, recovers from its peers"
        ));
        let r = self.cluster.restart_wiped(id).await;
        self.restarted(id, r)?;
        self.counts.moves.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The replica that says it leads, if one does.
    async fn leader(&self) -> Option<NodeId> {
        for e in self.cluster.endpoints() {
            if let Ok(s) = fetch(e.native, Duration::from_millis(300)).await {
                if s.role == "leader" {
                    return Some(e.id);
                }
            }
        }
        None
    }

    async fn heal(&mut self, fault: &Fault) -> anyhow::Result<()> {
        match fault {
            Fault::Kill(list) => {
                let how = match (self.durability, self.persists) {
                    (Durability::Memory, _) => " (memory: recovers from its peers)",
                    (_, false) => " (the protocol keeps nothing on disk: recovers from its peers)",
                    _ => " (reloads its data directory)",
                };
                self.timeline.note(format!("restart {}{how}", ids(list)));
                for &id in list {
                    let r = self.cluster.restart(id).await;
                    self.restarted(id, r)?;
                }
                self.counts.kills.fetch_add(1, Ordering::Relaxed);
            }
            Fault::Pause(list) => {
                for &id in list {
                    self.cluster.resume(id)?;
                }
                self.timeline
                    .note(format!("resume {} (SIGCONT)", ids(list)));
                self.counts.pauses.fetch_add(1, Ordering::Relaxed);
            }
            Fault::KillAll => {
                let all: Vec<NodeId> = self.cluster.endpoints().iter().map(|e| e.id).collect();
                if self.durability.keeps_data() {
                    self.timeline.note(match self.persists {
                        true => "restart all (each reloads its data directory)",
                        false => {
                            "restart all (the protocol keeps nothing on disk: each asks its peers)"
                        }
                    });
                    for &id in &all {
                        let r = self.cluster.restart(id).await;
                        self.restarted(id, r)?;
                    }
                } else {
                    // No peer kept anything to recover from.
                    self.timeline.note(
                        "restart all, empty (memory: every acknowledged write so far is lost; expected)",
                    );
                    for &id in &all {
                        let r = self.cluster.restart_without_recovery(id).await;
                        self.restarted(id, r)?;
                    }
                }
                self.counts.kill_alls.fetch_add(1, Ordering::Relaxed);
            }
            Fault::Replace => {
                let rot = self.rotation.as_ref().context("replace needs spares")?;
                let old = *rot.learners.back().expect("a rotation has learners");
                self.timeline
                    .note(format!("restart {old} (back as a learner, from its log)"));
                let r = self.cluster.restart(old).await;
                self.restarted(old, r)?;
                self.counts.replaces.fetch_add(1, Ordering::Relaxed);
            }
            Fault::Move(id) => self.move_in(*id).await?,
            Fault::Net(f) => {
                self.hosts
                    .context("network faults need --hosts netns")?
                    .heal()?;
                self.timeline.note("heal the network (every rule removed)");
                let c = match f {
                    NetFault::Degrade { .. } => &self.counts.degrades,
                    _ => &self.counts.partitions,
                };
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// A restart's error, saying what to do when another process took the
    /// replica's port while it was down.
    fn restarted(&mut self, id: NodeId, r: anyhow::Result<()>) -> anyhow::Result<()> {
        let Err(e) = r else { return Ok(()) };
        let ports = match self.cluster.endpoint(id) {
            Some(ep) => format!("ports {} and {}", ep.native.port(), ep.resp.port()),
            None => "its ports".into(),
        };
        let msg = match e.is::<PortTaken>() {
            true => format!(
                "replica {id} cannot have its {ports} back: another process took one while it was down; \
                 run again with --port-base on ports nothing else uses"
            ),
            false => format!("replica {id} ({ports}) did not restart"),
        };
        self.timeline.note(format!("{msg}: {e:#}"));
        Err(e.context(msg))
    }

    /// Every replica answers its status, is in a serving role, and reaches
    /// a quorum of its peers.
    pub async fn wait_serving(&mut self) -> anyhow::Result<()> {
        let start = Instant::now();
        let deadline = start + self.serve_timeout;
        for e in self.cluster.endpoints().to_vec() {
            loop {
                let seen = match fetch(e.native, Duration::from_millis(500)).await {
                    Ok(s) if !NOT_SERVING.contains(&s.role.as_str()) && s.quorum_reachable() => {
                        break
                    }
                    Ok(s) => format!("role {}, {} peers up", s.role, s.peers_up.len()),
                    Err(err) => err,
                };
                if Instant::now() >= deadline {
                    let msg = format!(
                        "replica {} did not serve again within {:?} (last seen: {seen})",
                        e.id, self.serve_timeout
                    );
                    self.timeline.note(msg.clone());
                    anyhow::bail!(msg);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.timeline.note(format!(
            "all serving ({:.2}s after the heal)",
            start.elapsed().as_secs_f64()
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Rotation;

    #[test]
    fn the_rotation_replaces_every_voter_of_the_start_in_n_steps() {
        assert!(Rotation::new(3, 0).is_none(), "no spare to swap in");
        assert!(Rotation::new(3, 3).is_none(), "no voter");
        let mut r = Rotation::new(5, 2).unwrap();
        let mut swaps = Vec::new();
        for _ in 0..6 {
            swaps.push(r.next());
            r.done();
        }
        assert_eq!(swaps, [(1, 4), (2, 5), (3, 1), (4, 2), (5, 3), (1, 4)]);
        // After N = 3 steps none of the voters of the start votes.
        let mut r = Rotation::new(6, 3).unwrap();
        for _ in 0..3 {
            r.done();
        }
        assert_eq!(Vec::from(r.voters.clone()), [4, 5, 6]);
        assert_eq!(Vec::from(r.learners), [1, 2, 3]);
    }
}
