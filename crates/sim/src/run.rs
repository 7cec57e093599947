//! One seed end to end: draw its parameters, run the world, check the
//! history (safety) and the liveness phase, and report.

use crate::config::{SeedParams, SimConfig};
use crate::history::OpRecord;
use crate::verify::{self, Safety};
use crate::world::{RunEnd, RunResult, Stats, World};
use quorumkv_core::protocol::{InjectedBugs, ProtocolDef, ProtocolOptions};
use std::fmt;
use std::time::{Duration, Instant};

/// The verdict on one seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Linearizable, and live after the heal (if the protocol promises it).
    Pass,
    /// The checker found a linearizability violation.
    Unsafe { details: String },
    /// Liveness failure: see the message.
    Stuck { details: String },
    /// The checker ran out of budget before deciding.
    Undecided { details: String },
    /// A protocol core (or the checker) panicked: the message and where.
    Panicked { details: String },
    /// A per-step invariant of the protocol broke (the run stopped there).
    Invariant { details: String },
}

impl Verdict {
    pub fn passed(&self) -> bool {
        matches!(self, Verdict::Pass)
    }
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Unsafe { .. } => "NOT LINEARIZABLE",
            Verdict::Stuck { .. } => "LIVENESS",
            Verdict::Undecided { .. } => "UNDECIDED",
            Verdict::Panicked { .. } => "PANIC",
            Verdict::Invariant { .. } => "INVARIANT",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Pass => f.write_str("pass"),
            Verdict::Unsafe { details }
            | Verdict::Stuck { details }
            | Verdict::Undecided { details }
            | Verdict::Panicked { details }
            | Verdict::Invariant { details } => {
                write!(f, "{}: {details}", self.label())
            }
        }
    }
}

/// Everything one seed produced.
#[derive(Clone, Debug)]
pub struct SeedReport {
    pub seed: u64,
    pub params: SeedParams,
    pub stats: Stats,
    pub verdict: Verdict,
    pub history: Vec<OpRecord>,
    /// The message trace, when `SimConfig::trace` was set.
    pub trace: Option<Vec<String>>,
    /// Wall time spent simulating and checking.
    pub sim_wall: Duration,
    pub check_wall: Duration,
}

/// Run seed `seed` of protocol `D`. `Err` only for configuration errors.
pub fn run_seed<D: ProtocolDef>(cfg: &SimConfig, seed: u64) -> Result<SeedReport, String> {
    if let Some(n @ (0 | 64..)) = cfg.replicas {
        return Err(format!("--replicas must be 1..=63, not {n}"));
    }
    if cfg.clients == 0 {
        return Err("--clients must be at least 1".into());
    }
    let bug = find_bug::<D>(cfg)?;
    let mut params = SeedParams::draw(cfg, seed, D::HAS_CLIENT_COORDINATOR);
    if D::LINK_MODEL.is_fifo() && !cfg.break_assumptions {
        params.keep_fifo();
    }
    let opts = seed_options::<D>(cfg, params.knobs)?;
    opts.check_size(params.replicas as usize).map_err(|e| {
        let drawn = if cfg.replicas.is_none() {
            " (N was drawn: pass --replicas)"
        } else {
            ""
        };
        format!("protocol {}: {e}{drawn}", D::NAME)
    })?;
    let t0 = Instant::now();
    let (result, panicked) = World::<D>::new(cfg, params.clone(), bug, opts).run_catching();
    let sim_wall = t0.elapsed();
    let t1 = Instant::now();
    let verdict = match panicked {
        Some(msg) => Verdict::Panicked {
            details: format!("a protocol core panicked: {msg}"),
        },
        None => crate::panics::catch(|| verdict::<D>(cfg, &result)).unwrap_or_else(|msg| {
            Verdict::Panicked {
                details: format!("the checker panicked: {msg}"),
            }
        }),
    };
    let check_wall = t1.elapsed();
    Ok(SeedReport {
        seed,
        params,
        stats: result.stats,
        verdict,
        history: result.history,
        trace: result.trace,
        sim_wall,
        check_wall,
    })
}

/// The verdict on a run that ended without a panic: its history checked.
fn verdict<D: ProtocolDef>(cfg: &SimConfig, result: &RunResult) -> Verdict {
    if let Some(details) = &result.invariant {
        return Verdict::Invariant {
            details: details.clone(),
        };
    }
    let mut safety = verify::check(&result.history, cfg.check_timeout);
    if cfg.znode && safety == Safety::Linearizable {
        safety = verify::check_znode(result, cfg.check_timeout);
    }
    match (safety, &result.end) {
        (Safety::Violation(details), _) => Verdict::Unsafe { details },
        (_, RunEnd::Stuck(details)) if D::PROMISES_LIVENESS => Verdict::Stuck {
            details: details.clone(),
        },
        (Safety::Unknown(details), _) => Verdict::Undecided { details },
        (Safety::Linearizable, _) => Verdict::Pass,
    }
}

/// The injected bug `--inject-bug` names, if any.
pub fn find_bug<D: ProtocolDef>(cfg: &SimConfig) -> Result<Option<D::Bug>, String> {
    let Some(name) = cfg.bug.as_deref() else {
        return Ok(None);
    };
    D::Bug::find(name).map(Some).ok_or_else(|| {
        let names: Vec<_> = D::Bug::all().iter().map(|b| b.name()).collect();
        format!(
            "protocol {} has no injected bug '{name}' (it has: {})",
            D::NAME,
            names.join(", ")
        )
    })
}

/// The options of one seed: defaults, varied by the seed's knobs, then the
/// user's `--opt`s (which therefore pin what they name).
pub fn seed_options<D: ProtocolDef>(cfg: &SimConfig, knobs: u64) -> Result<D::Options, String> {
    let mut opts = D::Options::default();
    D::vary(&mut opts, knobs);
    opts.apply(&cfg.options)
        .map_err(|e| format!("protocol {}: {e}", D::NAME))?;
    Ok(opts)
}
