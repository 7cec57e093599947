//! Plays the fault schedule on a local cluster's processes, one fault at a
//! time: inject, hold, heal, then wait until every replica serves again
//! before the calm that precedes the next one.

use super::schedule::{Fault, Schedule};
use super::timeline::Timeline;
use quorumkv_core::NodeId;
use quorumkv_node::local::LocalCluster;
use quorumkv_node::status::fetch;
use quorumkv_node::storage::Durability;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// How many of each fault were injected (and healed).
#[derive(Debug, Default)]
pub struct FaultCounts {
    pub kills: AtomicU64,
    pub pauses: AtomicU64,
    pub kill_alls: AtomicU64,
}

impl FaultCounts {
    pub fn total(&self) -> u64 {
        self.kills.load(Ordering::Relaxed)
            + self.pauses.load(Ordering::Relaxed)
            + self.kill_alls.load(Ordering::Relaxed)
    }
}

pub struct Nemesis<'a> {
    pub cluster: &'a mut LocalCluster,
    pub durability: Durability,
    pub timeline: &'a mut Timeline,
    pub counts: &'a FaultCounts,
    /// How long a healed replica may take to serve again.
    pub serve_timeout: Duration,
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
            self.heal(&step.fault).await?;
            self.wait_serving().await?;
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
        }
        Ok(())
    }

    async fn heal(&mut self, fault: &Fault) -> anyhow::Result<()> {
        match fault {
            Fault::Kill(list) => {
                let how = match self.durability {
                    Durability::Memory => " (memory: recovers from its peers)",
                    _ => " (reloads its data directory)",
                };
                self.timeline.note(format!("restart {}{how}", ids(list)));
                for &id in list {
                    self.cluster.restart(id).await?;
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
                    self.timeline
                        .note("restart all (each reloads its data directory)");
                    for &id in &all {
                        self.cluster.restart(id).await?;
                    }
                } else {
                    // No peer kept anything to recover from.
                    self.timeline.note(
                        "restart all, empty (memory: every acknowledged write so far is lost; expected)",
                    );
                    for &id in &all {
                        self.cluster.restart_without_recovery(id).await?;
                    }
                }
                self.counts.kill_alls.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
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
