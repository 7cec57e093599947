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
}

impl FaultKind {
    const ALL: [FaultKind; 3] = [FaultKind::Kill, FaultKind::Pause, FaultKind::KillAll];

    fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::KillAll => "kill-all",
        }
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
                    format!("unknown fault '{part}' (kill, pause, kill-all, or none)")
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
        };
        Some(Step { gap, fault, hold })
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
            }
            assert!(step.gap >= Duration::from_millis(300) && step.hold < Duration::from_secs(2));
        }
        assert_eq!(sizes.into_iter().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(seen, [true; 3]);
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
