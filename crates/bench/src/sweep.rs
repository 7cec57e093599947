//! Runs the whole matrix: checks everything that can be checked before any
//! work (output directory, reachability of existing targets, the executable
//! for local clusters), then deployment by deployment, point by point.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::config::{BenchConfig, DeploySpec, Plan, TargetSpec};
use crate::floors::Floors;
use crate::report::{self, PointResult};
use crate::runner::{interrupted, run_point};
use crate::target::{DeployOptions, Deployment};

/// A sweep that ran (perhaps only partly).
#[derive(Debug)]
pub struct Outcome {
    pub results: Vec<PointResult>,
    /// Why the sweep ended early, if it did.
    pub incomplete: Option<String>,
    /// Files written into `--out`.
    pub files: Vec<PathBuf>,
    /// The host's floors measured beside the run (also in every result).
    pub floors: Option<Floors>,
}

/// Checks that `dir` exists or can be created, and can be written.
pub fn check_out_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create output directory {}: {e}", dir.display()))?;
    let probe = dir.join(".quorumkv-bench-probe");
    std::fs::write(&probe, b"")
        .map_err(|e| format!("cannot write to output directory {}: {e}", dir.display()))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

pub fn deploy_options(cfg: &BenchConfig) -> Result<DeployOptions, String> {
    let binary = match &cfg.binary {
        Some(b) => b.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find the quorumkv executable: {e}"))?,
    };
    Ok(DeployOptions {
        binary,
        port_base: cfg.port_base,
        coord: cfg.coord,
        op_timeout: cfg.op_timeout,
        options: cfg.options.clone(),
        replica_cpu: cfg.replica_cpu,
        server_args: [cfg.server_args.clone(), cfg.rtt.server_args()].concat(),
    })
}

/// Everything that must hold before the first point; one line on failure.
/// Returns the existing (non-local) targets, already connected once.
pub async fn preflight(cfg: &BenchConfig) -> Result<Vec<Option<Deployment>>, String> {
    cfg.validate().map_err(|e| e.to_string())?;
    if let Some(dir) = &cfg.out {
        check_out_dir(dir)?;
    }
    let opts = deploy_options(cfg)?;
    let plans = cfg.plans();
    if plans
        .iter()
        .any(|p| matches!(p.deploy, DeploySpec::Local { .. }))
        && !opts.binary.is_file()
    {
        return Err(format!(
            "the quorumkv executable {} does not exist",
            opts.binary.display()
        ));
    }
    let mut found = Vec::with_capacity(plans.len());
    for p in &plans {
        found.push(match &p.deploy {
            DeploySpec::Local { .. } => None,
            other => Some(
                Deployment::start(other.clone(), opts.clone())
                    .await
                    .map_err(|e| format!("{e:#}"))?,
            ),
        });
    }
    Ok(found)
}

fn progress_bar(cfg: &BenchConfig, points: usize) -> ProgressBar {
    let pb = ProgressBar::new(points as u64 * 1000);
    if !cfg.progress {
        pb.set_draw_target(ProgressDrawTarget::hidden());
    }
    pb.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {percent:>3}% ETA {eta:>4} {wide_msg}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// Without `--protocol`, a `quorumkv://` target is benchmarked with the
/// protocol its first endpoint says it runs (and so are local targets).
pub(crate) async fn learn_protocol(cfg: &BenchConfig) -> Result<Option<BenchConfig>, String> {
    if !cfg.protocol_from_target {
        return Ok(None);
    }
    let first = cfg.targets.iter().find_map(|t| match t {
        TargetSpec::Quorumkv { endpoints } => endpoints.first().copied(),
        _ => None,
    });
    let Some(addr) = first else { return Ok(None) };
    let hello = quorumkv_node::client::probe(addr, cfg.op_timeout.max(Duration::from_secs(2)))
        .await
        .map_err(|e| format!("cannot ask {addr} which protocol it runs ({e}); give --protocol"))?;
    let mut learned = cfg.clone();
    learned.protocols = vec![hello.protocol];
    learned.protocol_from_target = false;
    learned.validate().map_err(|e| e.to_string())?;
    Ok(Some(learned))
}

/// The plans, in order, grouped into those that run at the same time: the
/// local clusters that differ only in their security setting (`--security`)
/// form one group; every other plan is a group of its own.
pub fn security_groups(plans: &[Plan]) -> Vec<Vec<usize>> {
    let key = |p: &Plan| match &p.deploy {
        DeploySpec::Local {
            protocol,
            replicas,
            variant,
            durability,
            ..
        } => Some((*protocol, *replicas, variant.clone(), *durability)),
        _ => None,
    };
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        match groups.last_mut() {
            Some(g) if key(p).is_some() && key(&plans[g[0]]) == key(p) => g.push(i),
            _ => groups.push(vec![i]),
        }
    }
    groups
}

async fn stop_all(live: Vec<(usize, Deployment)>) {
    for (_, d) in live {
        d.stop().await;
    }
}

/// Runs the sweep. `Err` = nothing could start (one line for the user).
pub async fn execute(cfg: &BenchConfig) -> Result<Outcome, String> {
    let learned = learn_protocol(cfg).await?;
    let cfg = learned.as_ref().unwrap_or(cfg);
    let mut existing = preflight(cfg).await?;
    // A protocol without a client-side coordinator runs in proxy mode
    // whatever was asked (see `Deployment::coord`): say so, once.
    for p in cfg.proxy_fallbacks() {
        eprintln!("{}", BenchConfig::proxy_fallback_notice(p));
    }
    let opts = deploy_options(cfg)?;
    let plans: Vec<Plan> = cfg.plans();
    let total: usize = plans.iter().map(|p| p.workloads.len()).sum();
    let mut sweep = Sweep {
        cfg,
        pb: progress_bar(cfg, total * cfg.rounds),
        plans,
        opts,
        results: Vec::new(),
        done: 0,
    };
    let mut floors = match cfg.floors {
        true => Some(measure_floors(&sweep.pb, None).await),
        false => None,
    };
    let incomplete = sweep.run(&mut existing).await.err();
    if !interrupted() {
        floors = match floors {
            Some(f) => Some(measure_floors(&sweep.pb, Some(f)).await),
            None => None,
        };
    }
    sweep.pb.finish_and_clear();
    let mut results = sweep.results;
    for r in &mut results {
        r.floors = floors.clone();
    }
    let files = write_outputs(cfg, &results, incomplete.is_some())?;
    Ok(Outcome {
        results,
        incomplete,
        files,
        floors,
    })
}

/// The host's floors: measured now in the directory where local clusters
/// keep their data, or measured again beside `earlier` (on a blocking
/// thread: each measurement takes up to `floors::BUDGET`).
async fn measure_floors(pb: &ProgressBar, earlier: Option<Floors>) -> Floors {
    pb.set_message("measuring the host's disk and loopback floors …");
    let measured = tokio::task::spawn_blocking(move || match earlier {
        Some(mut f) => {
            f.measure_again();
            f
        }
        // `LocalCluster` makes its replicas' directories in the temp dir.
        None => Floors::measure(&std::env::temp_dir()),
    })
    .await;
    measured.unwrap_or_else(|e| {
        eprintln!("quorumkv bench: the floors were not measured: {e}");
        Floors::default()
    })
}

/// A KV sweep under way.
struct Sweep<'a> {
    cfg: &'a BenchConfig,
    plans: Vec<Plan>,
    opts: DeployOptions,
    pb: ProgressBar,
    results: Vec<PointResult>,
    /// Points run so far (the next point's number).
    done: usize,
}

impl Sweep<'_> {
    /// Every group in turn; `Err` = why the sweep ended early.
    async fn run(&mut self, existing: &mut [Option<Deployment>]) -> Result<(), String> {
        for group in security_groups(&self.plans) {
            let live = self.start_group(&group, existing).await?;
            let ran = self.run_group(&live).await;
            stop_all(live).await;
            ran?;
        }
        Ok(())
    }

    /// The deployments of `group`: the existing targets found by the
    /// preflight, local clusters started now. `Err`: one did not start
    /// (those started are stopped again).
    async fn start_group(
        &self,
        group: &[usize],
        existing: &mut [Option<Deployment>],
    ) -> Result<Vec<(usize, Deployment)>, String> {
        let mut live: Vec<(usize, Deployment)> = Vec::with_capacity(group.len());
        for (k, &i) in group.iter().enumerate() {
            let plan = &self.plans[i];
            let d = match existing[i].take() {
                Some(d) => d,
                None => {
                    self.pb
                        .set_message(format!("starting {} …", plan.deploy.label()));
                    let mut opts = self.opts.clone();
                    // Side by side on fixed ports: each cluster 200 ports up.
                    opts.port_base =
                        (opts.port_base).map(|b| b.checked_add(200 * k as u16).unwrap_or(b));
                    match Deployment::start(plan.deploy.clone(), opts).await {
                        Ok(d) => d,
                        Err(e) => {
                            stop_all(live).await;
                            return Err(format!("{e:#}"));
                        }
                    }
                }
            };
            live.push((i, d));
        }
        Ok(live)
    }

    /// Every deployment of the group runs at once (a protocol's
    /// `--security` settings), so each workload is measured on each in
    /// turn, under the same conditions. `Err` = why the sweep ends here.
    async fn run_group(&mut self, live: &[(usize, Deployment)]) -> Result<(), String> {
        let workloads = self.plans[live[0].0].workloads.len();
        let rounds = self.cfg.rounds;
        for (wi, round) in (0..workloads).flat_map(|w| (0..rounds).map(move |r| (w, r))) {
            for (i, d) in live {
                self.run_one(*i, d, wi, round).await?;
            }
        }
        Ok(())
    }

    /// Workload `wi` of plan `i` on `d`, in round `round`.
    async fn run_one(
        &mut self,
        i: usize,
        d: &Deployment,
        wi: usize,
        round: usize,
    ) -> Result<(), String> {
        let plan = &self.plans[i];
        let label = plan.deploy.label();
        let w = &plan.workloads[wi];
        self.pb.set_message(format!(
            "{label} N={} get={} clients={}{}",
            d.replicas,
            w.get_fraction,
            w.clients,
            w.rate.map(|r| format!(" rate={r}")).unwrap_or_default()
        ));
        let base = self.done as u64 * 1000;
        let bar = self.pb.clone();
        let progress = move |f: f64| bar.set_position(base + (f * 999.0) as u64);
        let mut run = run_point(self.cfg, d, self.done, w, &progress).await;
        run.result.round = (self.cfg.rounds > 1).then_some(round + 1);
        self.done += 1;
        self.pb.set_position(self.done as u64 * 1000);
        let died = run.target_died && !interrupted();
        let why = run.result.note.clone().unwrap_or_default();
        self.results.push(run.result);
        if interrupted() {
            return Err("interrupted (Ctrl-C)".into());
        }
        if died {
            return Err(format!(
                "{label} (N={}) stopped answering: {why}",
                d.replicas
            ));
        }
        Ok(())
    }
}

/// results.csv, results.json and the plots in `--out`, if given; the
/// files written. A plot that cannot be drawn is reported, not an error.
fn write_outputs(
    cfg: &BenchConfig,
    results: &[PointResult],
    incomplete: bool,
) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    if let Some(dir) = &cfg.out {
        report::write_files(dir, cfg, results, incomplete)
            .map_err(|e| format!("cannot write results to {}: {e}", dir.display()))?;
        files.push(dir.join("results.csv"));
        files.push(dir.join("results.json"));
        match crate::plot::write_plots(dir, results) {
            Ok(f) => files.extend(f),
            Err(e) => eprintln!("quorumkv bench: plots not written: {e:#}"),
        }
    }
    Ok(files)
}

/// Start each deployment of the matrix in turn (one at a time: they share
/// the machine) and run `points` on it, which adds its results. `Err`:
/// nothing could start, or a point could not run (one line); a deployment
/// that fails to start after some results ends the sweep early instead, as
/// does Ctrl-C (the second member: why).
pub(crate) async fn each_deployment<R>(
    cfg: &BenchConfig,
    mut points: impl AsyncFnMut(&Deployment, &mut Vec<R>) -> Result<(), String>,
) -> Result<(Vec<R>, Option<String>), String> {
    // Without --protocol a quorumkv:// target is named by the protocol it
    // runs, as in the KV sweep.
    let learned = learn_protocol(cfg).await?;
    let cfg = learned.as_ref().unwrap_or(cfg);
    cfg.validate().map_err(|e| e.to_string())?;
    if let Some(dir) = &cfg.out {
        check_out_dir(dir)?;
    }
    let opts = deploy_options(cfg)?;
    let mut results = Vec::new();
    for plan in cfg.plans() {
        let label = plan.deploy.label();
        eprintln!("quorumkv bench: starting {label} …");
        let d = match Deployment::start(plan.deploy.clone(), opts.clone()).await {
            Ok(d) => d,
            Err(e) if results.is_empty() => return Err(format!("{e:#}")),
            Err(e) => return Ok((results, Some(format!("{e:#}")))),
        };
        let ran = points(&d, &mut results).await;
        d.stop().await;
        ran?;
        if interrupted() {
            return Ok((results, Some("interrupted (Ctrl-C)".into())));
        }
    }
    Ok((results, None))
}

/// How a lock or znode sweep ends: its table, its files (`write` says the
/// line to print, or why they could not be written), the problems found
/// (`problems` prints them and says whether there were any), and the exit
/// status: 0 = done; 1 = a problem, or the run ended early; 2 = nothing
/// could start, or the files could not be written.
pub(crate) fn finish<R>(
    cfg: &BenchConfig,
    swept: Result<(Vec<R>, Option<String>), String>,
    table: fn(&[R]) -> String,
    write: impl FnOnce(&Path, &[R], bool) -> Result<String, String>,
    problems: impl FnOnce(&[R]) -> bool,
) -> ExitCode {
    let (results, incomplete) = match swept {
        Ok(r) => r,
        Err(line) => {
            eprintln!("quorumkv bench: {line}");
            return ExitCode::from(2);
        }
    };
    print!("{}", table(&results));
    if let Some(dir) = &cfg.out {
        match write(dir, &results, incomplete.is_some()) {
            Ok(line) => println!("{line}"),
            Err(line) => {
                eprintln!("quorumkv bench: {line}");
                return ExitCode::from(2);
            }
        }
    }
    let bad = problems(&results);
    if let Some(why) = &incomplete {
        eprintln!("quorumkv bench: run ended early, results cover what was measured: {why}");
    }
    if bad || incomplete.is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
