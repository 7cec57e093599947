//! What an exhaustive run found: counts, whether the space was exhausted,
//! and the first violation with its path.

use super::choice::Choice;
use std::fmt;
use std::time::Duration;

/// A snapshot for the progress bar.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Transitions executed (states generated, duplicates included).
    pub transitions: u64,
    /// Distinct states (fingerprints) seen.
    pub distinct: u64,
    /// The BFS level being expanded.
    pub depth: u32,
    /// States queued for the next level.
    pub frontier: usize,
    pub elapsed: Duration,
}

/// A path that breaks a property, and which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub path: Vec<Choice>,
    pub what: String,
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub transitions: u64,
    pub distinct: u64,
    /// The deepest level at which a new state was found.
    pub max_depth: u32,
    /// Quiescent states: no event enabled (every operation done or stuck).
    pub leaves: u64,
    /// States at the depth bound that still had events enabled.
    pub frontier_left: u64,
    /// No state was left unexpanded: every path ended before the bound.
    pub exhausted: bool,
    /// Distinct histories checked, and those the checker could not decide.
    pub histories: u64,
    pub undecided: u64,
    /// Partial-order reduction: events left asleep (not explored) where
    /// enabled, and states expanded again for events awake on a later
    /// arrival (`sleep.rs`).
    pub slept: u64,
    pub reexpanded: u64,
    pub elapsed: Duration,
    pub violation: Option<Violation>,
}

impl Report {
    pub fn states_per_sec(&self) -> f64 {
        self.transitions as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "states explored   {}", self.transitions)?;
        writeln!(f, "distinct states   {}", self.distinct)?;
        writeln!(f, "max depth reached {}", self.max_depth)?;
        writeln!(f, "quiescent leaves  {}", self.leaves)?;
        writeln!(
            f,
            "sleep sets        {} events asleep, {} states re-expanded",
            self.slept, self.reexpanded
        )?;
        let space = match (self.exhausted, self.violation.is_some()) {
            (_, true) => "stopped at the first violation".to_string(),
            (true, false) => "exhausted (no state left below the depth bound)".to_string(),
            (false, false) => format!(
                "cut by the bound ({} states at the last level still had events)",
                self.frontier_left
            ),
        };
        writeln!(f, "space             {space}")?;
        writeln!(
            f,
            "histories checked {} ({} undecided)",
            self.histories, self.undecided
        )?;
        writeln!(
            f,
            "time              {:.2?} ({:.0} states/s)",
            self.elapsed,
            self.states_per_sec()
        )?;
        let verdict = match &self.violation {
            None if self.undecided > 0 => "no violation found (some histories undecided)",
            None => "no violation found",
            Some(_) => "VIOLATION",
        };
        write!(f, "verdict           {verdict}")
    }
}
