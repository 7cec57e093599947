//! The seeded fault schedule: which fault comes next, on which replicas,
//! how long it lasts and how long the cluster runs undisturbed before it.
//! Pure: the same seed gives the same schedule (the real run's timing still
//! varies with how long restarts take).

use quorumkv_core::rng::SplitMix64;
use quorumkv_core::NodeId;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A kind of fault `--faults` can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGKILL one replica or a minority, then restart them.
    Kill,
    /// SIGSTOP one replica or a minority, then SIGCONT them.
    Pause,
    /// SIGKILL every replica at once, then restart them all.
    KillAll,
    /// Cut the network (`--hosts netns`): a split, the leader isolated, a
    /// bridge replica seeing both sides, or a one-way cut; then heal it.
    Partition,
    /// Slow, lossy links out of some replicas (`--hosts netns`).
    Netem,
    /// Zab with spares: replace the longest-serving voter by a learner
    /// online (`quorumkv member replace`), SIGKILL the replaced server,
    /// then restart it (it is back as a learner).
    Replace,
    /// A machine lost and replaced: SIGKILL one replica, move its id to
    /// another port (`quorumkv member update`), start it there with an
    /// empty data directory and `--recover`; replicas in turn.
    Move,
}

impl FaultKind {
    const ALL: [FaultKind; 7] = [
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::KillAll,
        FaultKind::Partition,
        FaultKind::Netem,
        FaultKind::Replace,
        FaultKind::Move,
    ];

    fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::KillAll => "kill-all",
            FaultKind::Partition => "partition",
            FaultKind::Netem => "netem",
            FaultKind::Replace => "replace",
            FaultKind::Move => "move",
        }
    }

    /// Whether it needs every replica on a host of its own.
    pub fn needs_hosts(self) -> bool {
        matches!(self, FaultKind::Partition | FaultKind::Netem)
    }
}

/// `--faults`: a comma list of kinds, or `none`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSet(pub Vec<FaultKind>);

impl FromStr for FaultSet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim() == "none" {
            return Ok(FaultSet(Vec::new()));
        }
        let mut kinds = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let kind = FaultKind::ALL
                .into_iter()
                .find(|k| k.name() == part)
                .ok_or_else(|| {
                    format!(
                        "unknown fault '{part}' (kill, pause, kill-all, partition, netem, replace, move, or none)"
                    )
                })?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        Ok(FaultSet(kinds))
    }
}

impl fmt::Display for FaultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<&str> = self.0.iter().map(|k| k.name()).collect();
        f.write_str(&names.join(","))
    }
}

/// One fault on a set of replicas (ids sorted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    Kill(Vec<NodeId>),
    Pause(Vec<NodeId>),
    KillAll,
    Net(NetFault),
    /// A voter replaced by a learner (chosen when it comes: see `Rotation`
    /// in `nemesis.rs`).
    Replace,
    /// This replica's machine replaced: a new address, an empty data
    /// directory, recovered from its peers.
    Move(NodeId),
}

/// A host of a `--hosts netns` run: a replica's, or the clients'.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Host {
    Replica(NodeId),
    Client,
}

/// Where the client host stands in a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientSide {
    /// With the replicas of this group (0: the first) only.
    Group(usize),
    /// Reaches every replica (it bridges the partition).
    All,
}

/// A network fault (`--hosts netns`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetFault {
    /// No packet crosses between groups, either way. One group of one
    /// replica: that replica cut off.
    Split {
        groups: Vec<Vec<NodeId>>,
        client: ClientSide,
    },
    /// The replica that says it leads (asked when the fault comes) cut off
    /// from the others; `fallback` when none does (leaderless protocols).
    /// The client reaches the others (`Group(1)`) or everyone.
    IsolateLeader {
        fallback: NodeId,
        client: ClientSide,
    },
    /// `left` and `right` cut from each other; `bridge` reaches both.
    Bridge {
        left: Vec<NodeId>,
        bridge: NodeId,
        right: Vec<NodeId>,
        client: ClientSide,
    },
    /// Packets from `from` to `to` dropped; the other way flows.
    OneWay { from: Host, to: Host },
    /// Links out of `ids` slowed by `delay_ms` (netem) and losing `loss_pct`%.
    Degrade {
        ids: Vec<NodeId>,
        delay_ms: u64,
        loss_pct: u64,
    },
}

/// `ids` as `{1,2}`.
fn set(ids: &[NodeId]) -> String {
    let list: Vec<String> = ids.iter().map(NodeId::to_string).collect();
    format!("{{{}}}", list.join(","))
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Replica(id) => write!(f, "replica {id}"),
            Host::Client => f.write_str("the client host"),
        }
    }
}

/// The groups of a split-like fault, the client's side spelled out.
fn groups_text(groups: &[Vec<NodeId>], client: ClientSide) -> String {
    let parts: Vec<String> = (groups.iter().enumerate())
        .map(|(i, g)| {
            let c = if client == ClientSide::Group(i) {
                "+client"
            } else {
                ""
            };
            format!("{}{c}", set(g))
        })
        .collect();
    let all = if client == ClientSide::All {
        " (client reaches all)"
    } else {
        ""
    };
    format!("{}{all}", parts.join(" | "))
}

impl NetFault {
    /// The directed cuts of this fault, `leader` the replica that leads now
    /// (for `IsolateLeader`). `Degrade` cuts nothing.
    pub fn cuts(&self, replicas: usize, leader: Option<NodeId>) -> Vec<(Host, Host)> {
        let split = |groups: &[Vec<NodeId>], client: ClientSide| {
            let mut hosts: Vec<Vec<Host>> = (groups.iter())
                .map(|g| g.iter().map(|&i| Host::Replica(i)).collect())
                .collect();
            if let ClientSide::Group(i) = client {
                hosts[i].push(Host::Client);
            }
            let mut cuts = Vec::new();
            for (i, a) in hosts.iter().enumerate() {
                for (j, b) in hosts.iter().enumerate() {
                    if i != j {
                        cuts.extend(a.iter().flat_map(|&x| b.iter().map(move |&y| (x, y))));
                    }
                }
            }
            cuts
        };
        match self {
            NetFault::Split { groups, client } => split(groups, *client),
            NetFault::IsolateLeader { fallback, client } => {
                let alone = leader.unwrap_or(*fallback);
                let others = (1..=replicas as NodeId).filter(|&i| i != alone).collect();
                split(&[vec![alone], others], *client)
            }
            NetFault::Bridge {
                left,
                right,
                client,
                ..
            } => split(&[left.clone(), right.clone()], *client),
            NetFault::OneWay { from, to } => vec![(*from, *to)],
            NetFault::Degrade { .. } => Vec::new(),
        }
    }

    /// What the timeline says (`leader` as for [`Self::cuts`]).
    pub fn describe(&self, leader: Option<NodeId>) -> String {
        match self {
            NetFault::Split { groups, client } => {
                format!("partition {}", groups_text(groups, *client))
            }
            NetFault::IsolateLeader { fallback, client } => {
                let (alone, who) = match leader {
                    Some(l) => (l, "the leader"),
                    None => (*fallback, "no leader: replica"),
                };
                let side = match client {
                    ClientSide::All => "client reaches all",
                    _ => "client with the others",
                };
                format!("isolate {who} {alone} ({side})")
            }
            NetFault::Bridge {
                left,
                bridge,
                right,
                client,
            } => format!(
                "bridge: {} cut, {bridge} reaches both sides",
                groups_text(&[left.clone(), right.clone()], *client)
            ),
            NetFault::OneWay { from, to } => format!("one-way cut: {from} -> {to} dropped"),
            NetFault::Degrade {
                ids,
                delay_ms,
                loss_pct,
            } => format!(
                "degrade links out of {}: +{delay_ms}ms, {loss_pct}% loss",
                set(ids)
            ),
        }
    }
}

/// The next fault: after `gap` of calm, inject `fault` and heal it `hold`
/// later (restart the killed, resume the paused).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub gap: Duration,
    pub fault: Fault,
    pub hold: Duration,
}

pub struct Schedule {
    rng: SplitMix64,
    kinds: Vec<FaultKind>,
    replicas: usize,
    /// Most replicas a `Kill` or `Pause` takes down (the protocol's
    /// tolerance; at least one).
    minority: usize,
    /// How many `Move` faults came so far (they take the replicas in turn).
    moves: usize,
}

/// Uniform in [lo, hi) milliseconds.
fn millis(rng: &mut SplitMix64, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(lo + rng.below(hi - lo))
}

impl Schedule {
    /// `max_down`: how many replicas the protocol tolerates losing
    /// (`ProtocolInfo::max_crashed`).
    pub fn new(seed: u64, kinds: &FaultSet, replicas: usize, max_down: usize) -> Schedule {
        Schedule {
            rng: SplitMix64(seed),
            kinds: kinds.0.clone(),
            replicas,
            minority: max_down.clamp(1, replicas.max(1)),
            moves: 0,
        }
    }

    /// The next step, or `None` when no faults were asked for.
    pub fn next_step(&mut self) -> Option<Step> {
        if self.kinds.is_empty() {
            return None;
        }
        let kind = self.kinds[self.rng.below(self.kinds.len() as u64) as usize];
        let gap = millis(&mut self.rng, 300, 1500);
        let (fault, hold) = match kind {
            FaultKind::Kill => (
                Fault::Kill(self.some_replicas()),
                millis(&mut self.rng, 0, 1000),
            ),
            FaultKind::Pause => (
                Fault::Pause(self.some_replicas()),
                millis(&mut self.rng, 200, 2000),
            ),
            FaultKind::KillAll => (Fault::KillAll, millis(&mut self.rng, 0, 1000)),
            FaultKind::Replace => (Fault::Replace, millis(&mut self.rng, 0, 1000)),
            FaultKind::Move => {
                let id = (self.moves % self.replicas.max(1)) as NodeId + 1;
                self.moves += 1;
                (Fault::Move(id), millis(&mut self.rng, 0, 1000))
            }
            // Long enough for heartbeats (1s) to notice and elections to run.
            FaultKind::Partition => (
                Fault::Net(self.partition()),
                millis(&mut self.rng, 1000, 5000),
            ),
            FaultKind::Netem => (
                Fault::Net(NetFault::Degrade {
                    ids: self.some_replicas(),
                    delay_ms: 10 + self.rng.below(140),
                    loss_pct: 1 + self.rng.below(20),
                }),
                millis(&mut self.rng, 1000, 4000),
            ),
        };
        Some(Step { gap, fault, hold })
    }

    /// One of the partitions, on replicas drawn at random.
    fn partition(&mut self) -> NetFault {
        let n = self.replicas;
        let mut order: Vec<NodeId> = (1..=n as NodeId).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, self.rng.below(i as u64 + 1) as usize);
        }
        // Two groups: the client with either, or reaching both.
        let side = |rng: &mut SplitMix64| match rng.below(3) {
            2 => ClientSide::All,
            g => ClientSide::Group(g as usize),
        };
        let sorted = |mut v: Vec<NodeId>| {
            v.sort_unstable();
            v
        };
        match self.rng.below(4) {
            0 if n >= 2 => {
                let cut = 1 + self.rng.below(n as u64 / 2) as usize;
                NetFault::Split {
                    groups: vec![sorted(order[..cut].to_vec()), sorted(order[cut..].to_vec())],
                    client: side(&mut self.rng),
                }
            }
            1 => NetFault::IsolateLeader {
                fallback: order[0],
                client: if self.rng.chance(0.5) {
                    ClientSide::Group(1)
                } else {
                    ClientSide::All
                },
            },
            2 if n >= 3 => {
                let left_len = 1 + self.rng.below((n as u64 - 1) / 2) as usize;
                NetFault::Bridge {
                    left: sorted(order[..left_len].to_vec()),
                    bridge: order[left_len],
                    right: sorted(order[left_len + 1..].to_vec()),
                    client: side(&mut self.rng),
                }
            }
            _ => {
                let to = if n >= 2 && self.rng.chance(0.7) {
                    Host::Replica(order[1])
                } else {
                    Host::Client
                };
                let (from, to) = if self.rng.chance(0.5) {
                    (Host::Replica(order[0]), to)
                } else {
                    (to, Host::Replica(order[0]))
                };
                NetFault::OneWay { from, to }
            }
        }
    }

    /// One replica or up to a minority, distinct, sorted.
    fn some_replicas(&mut self) -> Vec<NodeId> {
        let count = 1 + self.rng.below(self.minority as u64) as usize;
        let mut pool: Vec<NodeId> = (1..=self.replicas as NodeId).collect();
        let mut chosen = Vec::with_capacity(count);
        for _ in 0..count {
            let i = self.rng.below(pool.len() as u64) as usize;
            chosen.push(pool.swap_remove(i));
        }
        chosen.sort_unstable();
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> FaultSet {
        "kill,pause,kill-all".parse().unwrap()
    }

    #[test]
    fn fault_sets_parse_and_print() {
        assert_eq!(all().to_string(), "kill,pause,kill-all");
        assert_eq!(
            "pause, kill,pause".parse::<FaultSet>().unwrap().to_string(),
            "pause,kill"
        );
        assert!("none".parse::<FaultSet>().unwrap().0.is_empty());
        let replace: FaultSet = "replace,kill".parse().unwrap();
        assert_eq!(replace.to_string(), "replace,kill");
        let e = "kill,crash".parse::<FaultSet>().unwrap_err();
        assert!(e.contains("'crash'"), "{e}");
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let steps = |seed| {
            let mut s = Schedule::new(seed, &all(), 5, 2);
            (0..50).map(|_| s.next_step().unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(steps(7), steps(7));
        assert_ne!(steps(7), steps(8));
    }

    #[test]
    fn kills_and_pauses_stay_within_the_minority_and_every_kind_comes() {
        let mut s = Schedule::new(1, &all(), 5, 2);
        let mut seen = [false; 3];
        let mut sizes = std::collections::BTreeSet::new();
        for _ in 0..300 {
            let step = s.next_step().unwrap();
            match &step.fault {
                Fault::Kill(ids) | Fault::Pause(ids) => {
                    sizes.insert(ids.len());
                    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
                    assert!(ids.iter().all(|&i| (1..=5).contains(&i)), "{ids:?}");
                    seen[matches!(step.fault, Fault::Pause(_)) as usize] = true;
                }
                Fault::KillAll => seen[2] = true,
                Fault::Net(_) | Fault::Replace | Fault::Move(_) => panic!("not asked for"),
            }
            assert!(step.gap >= Duration::from_millis(300) && step.hold < Duration::from_secs(2));
        }
        assert_eq!(sizes.into_iter().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(seen, [true; 3]);
    }

    #[test]
    fn partitions_cut_across_groups_only_and_every_shape_comes() {
        let mut s = Schedule::new(3, &"partition".parse().unwrap(), 5, 2);
        let mut shapes = std::collections::BTreeSet::new();
        for _ in 0..400 {
            let step = s.next_step().unwrap();
            let Fault::Net(f) = step.fault else {
                panic!("{step:?}")
            };
            assert!(step.hold >= Duration::from_secs(1));
            let cuts = f.cuts(5, Some(4));
            for &(a, b) in &cuts {
                assert_ne!(a, b);
            }
            match &f {
                NetFault::Split { groups, client } => {
                    shapes.insert("split");
                    let all: Vec<NodeId> = groups.concat();
                    assert_eq!(all.len(), 5);
                    let (g0, g1) = (groups[0].len(), groups[1].len());
                    let c = match client {
                        ClientSide::All => 0,
                        ClientSide::Group(i) => groups[1 - i].len(),
                    };
                    // Both ways between the groups, the client cut from the other side.
                    assert_eq!(cuts.len(), 2 * g0 * g1 + 2 * c, "{f:?}");
                }
                NetFault::IsolateLeader { .. } => {
                    shapes.insert("leader");
                    assert!(cuts.contains(&(Host::Replica(4), Host::Replica(1))));
                    assert!(!cuts.contains(&(Host::Replica(1), Host::Replica(2))));
                    assert!(f.describe(Some(4)).contains("the leader 4"));
                }
                NetFault::Bridge {
                    left,
                    bridge,
                    right,
                    ..
                } => {
                    shapes.insert("bridge");
                    let b = Host::Replica(*bridge);
                    assert!(cuts.iter().all(|&(x, y)| x != b && y != b), "{f:?}");
                    let (l, r) = (Host::Replica(left[0]), Host::Replica(right[0]));
                    assert!(cuts.contains(&(l, r)) && cuts.contains(&(r, l)));
                }
                NetFault::OneWay { from, to } => {
                    shapes.insert("one-way");
                    assert_eq!(cuts, vec![(*from, *to)]);
                }
                NetFault::Degrade { .. } => panic!("not a partition"),
            }
        }
        assert_eq!(shapes.len(), 4, "{shapes:?}");
    }

    #[test]
    fn a_split_with_the_client_on_one_side_cuts_it_from_the_other() {
        let f = NetFault::Split {
            groups: vec![vec![1], vec![2, 3]],
            client: ClientSide::Group(1),
        };
        let cuts = f.cuts(3, None);
        assert!(cuts.contains(&(Host::Client, Host::Replica(1))));
        assert!(cuts.contains(&(Host::Replica(1), Host::Client)));
        assert!(!cuts.contains(&(Host::Client, Host::Replica(2))));
        assert_eq!(cuts.len(), 6);
        assert_eq!(f.describe(None), "partition {1} | {2,3}+client");
    }

    /// `tests/chaos.rs` runs every protocol with seed 418 for a few
    /// seconds and expects a kill, a kill-all and a pause: its first three
    /// steps, within 3 s of schedule, whatever minority the protocol allows.
    #[test]
    fn seed_418_starts_with_a_kill_a_kill_all_and_a_pause() {
        for max_down in [0, 1, 2] {
            let mut s = Schedule::new(418, &all(), 3, max_down);
            let steps: Vec<Step> = (0..3).map(|_| s.next_step().unwrap()).collect();
            let kinds: Vec<&str> = (steps.iter()).map(|st| kind_name(&st.fault)).collect();
            assert_eq!(kinds, ["kill", "kill-all", "pause"], "max_down {max_down}");
            let total: Duration = steps.iter().map(|st| st.gap + st.hold).sum();
            assert!(total < Duration::from_secs(3), "{total:?}");
        }
    }

    fn kind_name(f: &Fault) -> &'static str {
        match f {
            Fault::Kill(_) => "kill",
            Fault::Pause(_) => "pause",
            Fault::KillAll => "kill-all",
            Fault::Net(_) => "net",
            Fault::Replace => "replace",
            Fault::Move(_) => "move",
        }
    }

    #[test]
    fn moves_take_the_replicas_in_turn() {
        let mut s = Schedule::new(5, &"move,kill".parse().unwrap(), 3, 1);
        let moved: Vec<NodeId> = (0..40)
            .filter_map(|_| match s.next_step().unwrap().fault {
                Fault::Move(id) => Some(id),
                _ => None,
            })
            .collect();
        assert!(moved.len() >= 6, "{moved:?}");
        for (i, id) in moved.iter().enumerate() {
            assert_eq!(*id as usize, i % 3 + 1, "{moved:?}");
        }
    }

    #[test]
    fn no_faults_means_no_steps_and_one_replica_still_gets_killed() {
        assert!(Schedule::new(1, &"none".parse().unwrap(), 3, 1)
            .next_step()
            .is_none());
        let mut s = Schedule::new(1, &"kill".parse().unwrap(), 1, 0);
        assert_eq!(s.next_step().unwrap().fault, Fault::Kill(vec![1]));
    }
}
