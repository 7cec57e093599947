//! Runs the searches of many partitions side by side, fairly.
//!
//! One hard partition must not starve the others: the searches run in
//! rounds, every undecided one gets a slice of the same number of steps per
//! round (smallest partitions first), and the slice doubles each round. A
//! partition that some order of work would refute quickly is refuted after
//! at most about twice its own steps times the number of partitions,
//! whatever the number of threads.
//!
//! Given enough time the verdicts do not depend on the number of threads:
//! a slice's outcome depends only on its step budget, and when checking
//! stops at the first violation, "first" means the lowest rank (smallest
//! partition) refuted in the first round that refutes any. Searches ranked
//! before it finish their slice of that round; those after it are
//! cancelled and reported as skipped, like every search left undecided.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::check::Verdict;
use crate::search::{Deadline, Found, Progress, Search, Slice, Span, Stepper, MEMO_CAP};

/// Steps in every search's first slice; each round doubles it.
const FIRST_SLICE: u64 = 1 << 14;

/// Memo entries each search may keep at least, however many run.
const MIN_MEMO: usize = 1 << 16;

/// One partition to decide.
pub(crate) struct Job<S> {
    stepper: S,
    /// `None` once decided (its memo freed).
    search: Option<Search>,
    verdict: Option<Verdict>,
    /// The round in which `verdict` was reached (0: before any).
    round: u32,
    progress: Progress,
    /// Time spent searching, summed over slices.
    spent: Duration,
}

impl<S: Stepper> Job<S> {
    /// A search of `spans` (sorted by call) from state `init`.
    pub fn new(spans: &[Span], init: u32, stepper: S) -> Job<S> {
        let search = Search::new(spans, init);
        let progress = search.progress();
        Job {
            stepper,
            search: Some(search),
            verdict: None,
            round: 0,
            progress,
            spent: Duration::ZERO,
        }
    }

    /// A partition already known not to be linearizable (a cheap test
    /// refuted it), with `events` events.
    pub fn refuted(events: usize, stepper: S) -> Job<S> {
        Job {
            stepper,
            search: None,
            verdict: Some(Verdict::NotLinearizable),
            round: 0,
            progress: Progress {
                events,
                ..Progress::default()
            },
            spent: Duration::ZERO,
        }
    }

    fn settle(&mut self, v: Verdict, round: u32) {
        if let Some(s) = self.search.take() {
            self.progress = s.progress();
        }
        self.verdict = Some(v);
        self.round = round;
    }
}

/// How to run the jobs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    /// Worker threads (at least 1).
    pub threads: usize,
    /// Give up on every undecided job at this instant.
    pub at: Option<Instant>,
    /// Give up on a job after this much of its own search time.
    pub per_job: Option<Duration>,
    /// Stop at the first job found not linearizable.
    pub stop_at_first: bool,
}

/// What became of one job.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settled {
    pub verdict: Verdict,
    pub progress: Progress,
    pub spent: Duration,
    /// Position in round order (smallest jobs first).
    pub rank: usize,
}

/// Decides every job (see the module comment); results in job order.
pub(crate) fn run<S: Stepper + Send>(jobs: Vec<Job<S>>, plan: &Plan) -> Vec<Settled> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| (jobs[i].progress.events, i));
    let mut rank = vec![0; jobs.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r;
    }
    // The lowest rank found not linearizable (usize::MAX: none yet).
    let mark = AtomicUsize::new(usize::MAX);
    for (i, j) in jobs.iter().enumerate() {
        if j.verdict == Some(Verdict::NotLinearizable) {
            mark.fetch_min(rank[i], Ordering::Relaxed);
        }
    }
    let cells: Vec<Mutex<Job<S>>> = jobs.into_iter().map(Mutex::new).collect();
    let lock = |i: usize| cells[i].lock().expect("a checker thread panicked");
    let mut open: Vec<usize> = order;
    let mut steps = FIRST_SLICE;
    let mut round = 0;
    loop {
        open.retain(|&i| lock(i).verdict.is_none());
        let stopped = plan.stop_at_first && mark.load(Ordering::Relaxed) != usize::MAX;
        if stopped || open.is_empty() || plan.at.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        round += 1;
        let slice = Slice {
            steps,
            memo_cap: (MEMO_CAP / open.len()).max(MIN_MEMO),
        };
        par_for(&open, plan.threads, |&i| {
            run_slice(&mut lock(i), (rank[i], round), slice, plan, &mark);
        });
        steps = steps.saturating_mul(2);
    }
    let m = mark.load(Ordering::Relaxed);
    cells
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let mut j = c.into_inner().expect("a checker thread panicked");
            let stopped = plan.stop_at_first && m != usize::MAX;
            if stopped && rank[i] > m && round > 0 && j.round == round {
                // Whether it finished its slice of the last round or was
                // cancelled depends on the threads: report neither.
                j.settle(Verdict::Skipped, round);
            } else if j.verdict.is_none() {
                // Out of time, or not needed: the history is decided.
                let v = if stopped {
                    Verdict::Skipped
                } else {
                    Verdict::Unknown
                };
                j.settle(v, round);
            }
            Settled {
                verdict: j.verdict.expect("settled above"),
                progress: j.progress,
                spent: j.spent,
                rank: rank[i],
            }
        })
        .collect()
}

/// Runs one slice of `job`'s search and settles it if it is decided or out
/// of time.
fn run_slice<S: Stepper>(
    job: &mut Job<S>,
    (rank, round): (usize, u32),
    slice: Slice,
    plan: &Plan,
    mark: &AtomicUsize,
) {
    let t0 = Instant::now();
    let own = plan.per_job.map(|d| t0 + d.saturating_sub(job.spent));
    let at = match (plan.at, own) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let deadline = Deadline {
        at,
        cancel: plan.stop_at_first.then_some((mark, rank)),
    };
    let search = job.search.as_mut().expect("open jobs have a search");
    let found = search.run(&mut job.stepper, deadline, slice);
    job.spent += t0.elapsed();
    match found {
        Found::Paused => {}
        Found::Linearizable => job.settle(Verdict::Linearizable, round),
        Found::Illegal => {
            mark.fetch_min(rank, Ordering::Relaxed);
            job.settle(Verdict::NotLinearizable, round);
        }
        // Cancelled (a lower rank was refuted): leave it open; it is
        // reported skipped once the round ends.
        Found::Timeout if at.is_none_or(|t| Instant::now() < t) => {}
        Found::Timeout => job.settle(Verdict::Unknown, round),
    }
}

/// Runs `f` on every item on up to `threads` threads.
fn par_for<T: Sync>(items: &[T], threads: usize, f: impl Fn(&T) + Sync) {
    let workers = threads.clamp(1, items.len().max(1));
    if workers == 1 {
        items.iter().for_each(f);
        return;
    }
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                match items.get(i) {
                    Some(item) => f(item),
                    None => return,
                }
            });
        }
    });
}

/// Worker threads by default: the CPUs this process may run on.
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
