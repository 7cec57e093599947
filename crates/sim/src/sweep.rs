//! Many seeds: run them on `jobs` threads (each seed is independent and
//! deterministic, so the thread count never changes a result), collect the
//! failures and the totals.

use crate::config::{SeedRange, SimConfig};
use crate::registry::Registered;
use crate::run::SeedReport;
use crate::world::Stats;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Totals of a sweep.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub seeds_run: u64,
    pub passed: u64,
    /// Reports of the seeds that did not pass, in seed order.
    pub failures: Vec<SeedReport>,
    /// Sum of every seed's counters.
    pub totals: Stats,
    /// Wall time of the whole sweep.
    pub wall: Duration,
    /// Wall time summed over seeds: simulating, and checking histories.
    pub sim_wall: Duration,
    pub check_wall: Duration,
    pub jobs: usize,
}

impl Summary {
    pub fn ops(&self) -> u64 {
        self.totals.ops_ok + self.totals.ops_fail + self.totals.ops_unknown
    }
    /// Simulated protocol messages per second of wall time (whole sweep).
    pub fn messages_per_sec(&self) -> f64 {
        self.totals.messages as f64 / self.wall.as_secs_f64().max(1e-9)
    }
    /// Simulated messages per second of one core spent simulating (without
    /// the checker): the simulator's own speed.
    pub fn sim_messages_per_core_sec(&self) -> f64 {
        self.totals.messages as f64 / self.sim_wall.as_secs_f64().max(1e-9)
    }
    pub fn seeds_per_min(&self) -> f64 {
        self.seeds_run as f64 * 60.0 / self.wall.as_secs_f64().max(1e-9)
    }
    pub fn all_passed(&self) -> bool {
        self.failures.is_empty() && self.passed == self.seeds_run
    }
}

fn add(t: &mut Stats, s: &Stats) {
    t.messages += s.messages;
    t.client_messages += s.client_messages;
    t.delivered += s.delivered;
    t.lost += s.lost;
    t.cut += s.cut;
    t.duplicated += s.duplicated;
    t.events += s.events;
    t.timers_fired += s.timers_fired;
    t.crashes += s.crashes;
    t.crashes_inside += s.crashes_inside;
    t.outages += s.outages;
    t.reconfigs += s.reconfigs;
    t.cluster_crashes += s.cluster_crashes;
    t.persisted += s.persisted;
    t.syncs += s.syncs;
    t.held_outputs += s.held_outputs;
    t.records_lost += s.records_lost;
    t.peak_down = t.peak_down.max(s.peak_down);
    t.partitions += s.partitions;
    t.pauses += s.pauses;
    t.ops_ok += s.ops_ok;
    t.ops_fail += s.ops_fail;
    t.ops_unknown += s.ops_unknown;
    t.ops_after_workload += s.ops_after_workload;
    t.virtual_us += s.virtual_us;
    t.link_downs += s.link_downs;
    t.link_ups += s.link_ups;
    t.resets += s.resets;
    t.reset_dropped += s.reset_dropped;
    t.held += s.held;
    t.reconnects += s.reconnects;
    t.retries += s.retries;
    t.notifies += s.notifies;
    t.notifies_dropped += s.notifies_dropped;
    t.sessions_abandoned += s.sessions_abandoned;
    t.expired_events += s.expired_events;
    t.znode_uncarried += s.znode_uncarried;
}

/// Run `seeds` of protocol `proto` on `jobs` threads. `on_seed` sees every
/// report as it arrives (progress bar, verbose lines). Stops early after
/// `max_failures` failing seeds (0 = never). Passing seeds' histories are
/// dropped; failing ones are kept in the summary.
pub fn sweep(
    proto: &Registered,
    cfg: &SimConfig,
    seeds: SeedRange,
    jobs: usize,
    max_failures: u64,
    mut on_seed: impl FnMut(&SeedReport),
) -> Result<Summary, String> {
    let jobs = jobs.clamp(1, seeds.len().min(256) as usize);
    let next = AtomicU64::new(seeds.start);
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let mut sum = Summary {
        jobs,
        ..Summary::default()
    };
    let mut error = None;
    let run = proto.run_seed;
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<Result<SeedReport, String>>();
        for _ in 0..jobs {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            s.spawn(move || loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= seeds.end {
                    break;
                }
                if tx.send(run(cfg, seed)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for r in rx {
            let mut rep = match r {
                Ok(rep) => rep,
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    error.get_or_insert(e);
                    continue;
                }
            };
            on_seed(&rep);
            sum.seeds_run += 1;
            add(&mut sum.totals, &rep.stats);
            sum.sim_wall += rep.sim_wall;
            sum.check_wall += rep.check_wall;
            if rep.verdict.passed() {
                sum.passed += 1;
            } else {
                sum.failures.push(rep);
                if max_failures > 0 && sum.failures.len() as u64 >= max_failures {
                    stop.store(true, Ordering::Relaxed);
                }
                continue;
            }
            rep.history = Vec::new();
            rep.trace = None;
        }
    });
    if let Some(e) = error {
        return Err(e);
    }
    sum.failures.sort_by_key(|r| r.seed);
    sum.wall = t0.elapsed();
    Ok(sum)
}
