//! Generated histories of a correct register, for property tests and the
//! benchmark, and mutations that make them non-linearizable.
//!
//! Each client runs operations back to back; each operation takes effect at
//! a random instant between its call and its return, and reads return what
//! the register held at that instant. The result is linearizable by
//! construction. A deterministic SplitMix64 keeps a seed's history stable
//! across versions.
use crate::history::{History, Op, Operation, Outcome};

/// The project's seeded generator (SplitMix64, in `quorumkv-core`).
pub use quorumkv_core::rng::SplitMix64;

/// Parameters of a generated register history.
#[derive(Clone, Debug)]
pub struct RegisterGen {
    pub seed: u64,
    pub ops: usize,
    pub clients: u64,
    /// Values written are drawn from `0..n`; `None`: every write is unique.
    pub values: Option<u64>,
    /// Fraction of reads.
    pub read_ratio: f64,
    /// Fraction of writes whose outcome is unknown (the client timed out;
    /// the write took effect or not, at random).
    pub unknown_ratio: f64,
    /// Mean operation latency and mean think time between operations, ns.
    pub latency: u64,
    pub think: u64,
}

impl Default for RegisterGen {
    fn default() -> Self {
        RegisterGen {
            seed: 1,
            ops: 1000,
            clients: 16,
            values: None,
            read_ratio: 0.5,
            unknown_ratio: 0.0,
            latency: 1000,
            think: 200,
        }
    }
}

impl RegisterGen {
    /// A linearizable history of one register (key `""`).
    pub fn history(&self) -> History {
        let mut rng = SplitMix64(self.seed);
        let clients = self.clients.max(1);
        let mut free_at = vec![0u64; clients as usize];
        // (effect time, op index, takes effect)
        let mut effects: Vec<(u64, usize, bool)> = Vec::with_capacity(self.ops);
        let mut ops = Vec::with_capacity(self.ops);
        let mut next_value = 0u64;
        for i in 0..self.ops {
            let client = i as u64 % clients;
            let call = free_at[client as usize] + rng.below(2 * self.think + 1);
            let effect = call + rng.below(self.latency + 1);
            let ret = effect + rng.below(self.latency + 1);
            free_at[client as usize] = ret + 1;
            let key = String::new();
            let op = if rng.chance(self.read_ratio) {
                Op::Read { key }
            } else {
                let v = match self.values {
                    Some(n) => rng.below(n.max(1)),
                    None => {
                        next_value += 1;
                        next_value
                    }
                };
                Op::Write {
                    key,
                    value: v.to_string(),
                }
            };
            let unknown = !op.is_read() && rng.chance(self.unknown_ratio);
            let applied = !unknown || rng.chance(0.5);
            effects.push((effect, i, applied));
            let (ret, outcome) = if unknown {
                (None, Outcome::Unknown)
            } else {
                (Some(ret), Outcome::Ok(None))
            };
            ops.push(Operation {
                client,
                op,
                call,
                ret,
                outcome,
            });
        }
        effects.sort_unstable();
        let mut reg: Option<String> = None;
        for (_, i, applied) in effects {
            match &ops[i].op {
                Op::Write { value, .. } if applied => reg = Some(value.clone()),
                Op::Read { .. } => ops[i].outcome = Outcome::Ok(reg.clone()),
                _ => {}
            }
        }
        ops.sort_by_key(|o| (o.call, o.client));
        History { ops }
    }
}

/// Indices of completed reads.
fn reads(h: &History) -> Vec<usize> {
    (0..h.ops.len())
        .filter(|&i| h.ops[i].op.is_read() && matches!(h.ops[i].outcome, Outcome::Ok(_)))
        .collect()
}

/// Changes one completed read to return a value nobody wrote. `None` if the
/// history has no completed read.
pub fn mutate_never_written(h: &History, rng: &mut SplitMix64) -> Option<History> {
    let r = reads(h);
    let i = *r.get(rng.below(r.len().max(1) as u64) as usize)?;
    let mut m = h.clone();
    m.ops[i].outcome = Outcome::Ok(Some("never-written".into()));
    Some(m)
}

/// Makes a read return an older value after a newer one was read: picks
/// reads `r1` before `r2` (in real time) where `r1` returned the value of a
/// completed write `w1`, and makes `r2` return the value of a write `w0`
/// that completed before `w1` was invoked (or the initial "absent" if there
/// is none). With unique written values the result is never linearizable.
/// `None` if the history has no such pair.
pub fn mutate_stale_read(h: &History, rng: &mut SplitMix64) -> Option<History> {
    let ops = &h.ops;
    let writer = |v: &str| {
        ops.iter()
            .position(|o| matches!(&o.op, Op::Write { value, .. } if value == v) && o.ret.is_some())
    };
    let mut candidates = Vec::new();
    for &r1 in &reads(h) {
        let Outcome::Ok(Some(v1)) = &ops[r1].outcome else {
            continue;
        };
        let Some(w1) = writer(v1) else { continue };
        let (r1_ret, w1_call) = (ops[r1].ret.expect("completed"), ops[w1].call);
        let older: Vec<usize> = (0..ops.len())
            .filter(|&w0| matches!(ops[w0].op, Op::Write { .. }))
            .filter(|&w0| ops[w0].ret.is_some_and(|r| r < w1_call))
            .collect();
        for &r2 in &reads(h) {
            if ops[r2].call > r1_ret {
                candidates.push((r2, older.clone()));
            }
        }
        if candidates.len() > 64 {
            break;
        }
    }
    if candidates.is_empty() {
        return None;
    }
    let (r2, older) = &candidates[rng.below(candidates.len() as u64) as usize];
    let stale = if older.is_empty() {
        None
    } else {
        match &ops[older[rng.below(older.len() as u64) as usize]].op {
            Op::Write { value, .. } => Some(value.clone()),
            _ => unreachable!("filtered to writes"),
        }
    };
    let mut m = h.clone();
    m.ops[*r2].outcome = Outcome::Ok(stale);
    Some(m)
}

/// A register history moved to key `key` of the key-value model (reads
/// become gets, writes puts; clients renumbered from `first_client`), for
/// building multi-key histories.
pub fn on_key(h: &History, key: &str, first_client: u64) -> History {
    let ops = h
        .ops
        .iter()
        .map(|o| {
            let key = key.to_string();
            let op = match &o.op {
                Op::Read { .. } => Op::Get { key },
                Op::Write { value, .. } => Op::Put {
                    key,
                    value: value.clone(),
                },
                other => other.clone(),
            };
            Operation {
                client: first_client + o.client,
                op,
                ..o.clone()
            }
        })
        .collect();
    History { ops }
}

/// A key whose refutation takes time exponential in `n`: `n` concurrent
/// appends (clients `first_client..`), then a get of a string no order of
/// them produces (one piece twice), so every order must be tried.
pub fn hard_appends(key: &str, n: u64, first_client: u64) -> History {
    let mut ops: Vec<Operation> = (0..n)
        .map(|c| Operation {
            client: first_client + c,
            op: Op::Append {
                key: key.to_string(),
                value: format!("<{c}>"),
            },
            call: 0,
            ret: Some(100),
            outcome: Outcome::Ok(None),
        })
        .collect();
    let impossible: String = (0..n)
        .map(|c| format!("<{}>", c % (n - 1).max(1)))
        .collect();
    ops.push(Operation {
        client: first_client + n,
        op: Op::Get {
            key: key.to_string(),
        },
        call: 200,
        ret: Some(300),
        outcome: Outcome::Ok(Some(impossible)),
    });
    History { ops }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_stable() {
        let mut r = SplitMix64(0);
        // Reference values of SplitMix64 from seed 0.
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        let g = RegisterGen {
            ops: 50,
            ..Default::default()
        };
        assert_eq!(g.history(), g.history());
    }

    #[test]
    fn histories_have_the_requested_shape() {
        let g = RegisterGen {
            ops: 400,
            clients: 4,
            unknown_ratio: 0.1,
            ..Default::default()
        };
        let h = g.history();
        assert_eq!(h.ops.len(), 400);
        assert!(h.ops.iter().all(|o| o.client < 4));
        assert!(h.ops.iter().any(|o| o.outcome == Outcome::Unknown));
        assert!(h.ops.iter().all(|o| o.ret.is_none_or(|r| r >= o.call)));
        // A client never overlaps itself.
        for c in 0..4 {
            let mine: Vec<_> = h
                .ops
                .iter()
                .filter(|o| o.client == c && o.ret.is_some())
                .collect();
            assert!(mine.windows(2).all(|w| w[0].ret.unwrap() < w[1].call));
        }
    }
}
