//! Sequential specifications.
//!
//! The built-in models (register, CAS register, key-value map) share one
//! state per key, `Option<String>`, interned to `u32` so that the search
//! compares and hashes integers. [`Spec`] is the seam for models with other
//! operations (the coordination service's znodes): implement it and call
//! [`check_spec`](crate::check_spec).
use std::collections::HashMap;
use std::hash::Hash;

use crate::history::{Op, Operation, Outcome};
use crate::search::{FxBuild, Stepper};

/// Which sequential object the history is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Model {
    /// `read` / `write` on registers (one per key; `""` for a single one).
    Register,
    /// `read` / `write` / `cas`; a failed cas is dropped (it had no effect).
    CasRegister,
    /// `get` / `put` / `append` / `delete`, each key on its own.
    Kv,
}

impl Model {
    pub fn name(self) -> &'static str {
        match self {
            Model::Register => "register",
            Model::CasRegister => "cas-register",
            Model::Kv => "kv",
        }
    }

    /// Whether `op` belongs to this model.
    pub fn allows(self, op: &Op) -> bool {
        match self {
            Model::Register => matches!(op, Op::Read { .. } | Op::Write { .. }),
            Model::CasRegister => matches!(op, Op::Read { .. } | Op::Write { .. } | Op::Cas { .. }),
            Model::Kv => matches!(
                op,
                Op::Get { .. } | Op::Put { .. } | Op::Append { .. } | Op::Delete { .. }
            ),
        }
    }

    /// The smallest model that has every operation of `ops`.
    pub fn detect<'a>(ops: impl IntoIterator<Item = &'a Op>) -> Model {
        let mut m = Model::Register;
        for op in ops {
            match op {
                Op::Get { .. } | Op::Put { .. } | Op::Append { .. } | Op::Delete { .. } => {
                    return Model::Kv
                }
                Op::Cas { .. } => m = Model::CasRegister,
                Op::Read { .. } | Op::Write { .. } => {}
            }
        }
        m
    }
}

/// A sequential specification for [`check_spec`](crate::check_spec).
pub trait Spec: Sync {
    /// An operation together with its observed result.
    type Op: Sync;
    type State: Clone + Eq + Hash + Send;
    fn init(&self) -> Self::State;
    /// The state after `op`, or `None` if its observed result is impossible
    /// in `state`. Operations with an unknown outcome are never forced, so
    /// `step` may treat them as it likes (usually: apply the effect).
    fn step(&self, state: &Self::State, op: &Self::Op) -> Option<Self::State>;
}

/// Interns the states of any [`Spec`] and caches its transitions.
pub(crate) struct SpecStepper<'a, S: Spec> {
    pub spec: &'a S,
    pub ops: Vec<&'a S::Op>,
    pub states: Vec<S::State>,
    pub ids: HashMap<S::State, u32>,
    pub cache: HashMap<(u32, u32), Option<u32>, FxBuild>,
}

impl<'a, S: Spec> SpecStepper<'a, S> {
    pub fn new(spec: &'a S, ops: Vec<&'a S::Op>) -> Self {
        let init = spec.init();
        let ids = HashMap::from([(init.clone(), 0)]);
        SpecStepper {
            spec,
            ops,
            states: vec![init],
            ids,
            cache: HashMap::default(),
        }
    }
}

impl<S: Spec> Stepper for SpecStepper<'_, S> {
    fn step(&mut self, s: u32, op: usize) -> Option<u32> {
        if let Some(r) = self.cache.get(&(s, op as u32)) {
            return *r;
        }
        let r = self
            .spec
            .step(&self.states[s as usize], self.ops[op])
            .map(|n| {
                let next_id = self.states.len() as u32;
                *self.ids.entry(n.clone()).or_insert_with(|| {
                    self.states.push(n);
                    next_id
                })
            });
        self.cache.insert((s, op as u32), r);
        r
    }
}

/// One operation of the built-in models. State 0 is "absent"; strings are
/// indices into `ValueStepper::pieces`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Cop {
    /// Completed read that returned "absent".
    ReadAbsent,
    /// Completed read that returned this string.
    Read(u32),
    /// Write / put / delete, completed or not (always allowed): the state.
    Write(u32),
    /// Append this string.
    Append(u32),
    /// Completed, successful cas.
    Cas { from: u32, to: u32 },
    /// Cas with unknown outcome: swaps only if the state matches.
    MaybeCas { from: u32, to: u32 },
}

const NO_PARENT: u32 = u32::MAX;
const B: u64 = 0x100_0000_01b3; // FNV prime: odd, so multiplication is invertible

/// A state other than "absent": `parent`'s string followed by `piece`
/// (`parent == NO_PARENT`: just `piece`), with its length and polynomial
/// hash so that comparing with a string is O(1) unless they are equal.
#[derive(Clone, Copy, Debug)]
struct StateInfo {
    parent: u32,
    piece: u32,
    len: usize,
    hash: u64,
}

/// The built-in models. States are chains of appended pieces, never
/// materialised: appending is O(1) and a read compares (length, hash) and
/// only then the bytes. Two states with equal strings may have different
/// ids (e.g. `put "ab"` and `append "a"; append "b"`); the memo then merges
/// a little less, which costs time, never correctness.
pub(crate) struct ValueStepper {
    ops: Vec<Cop>,
    pieces: Vec<Box<str>>,
    /// (hash, B^len) of each piece.
    piece_hash: Vec<(u64, u64)>,
    piece_ids: HashMap<Box<str>, u32, FxBuild>,
    /// `states[0]` is "absent" (its info unused).
    states: Vec<StateInfo>,
    /// The base state holding exactly piece `i`.
    base: HashMap<u32, u32, FxBuild>,
    appends: HashMap<(u32, u32), u32, FxBuild>,
    /// Overwrites whose value no read returns, on a key with no append or
    /// cas (see [`Stepper::is_blind`]).
    blind: Vec<bool>,
}

impl ValueStepper {
    /// Compiles the operations of one key. Failed operations and reads with
    /// unknown outcome must already be gone.
    pub fn new(ops: &[Operation]) -> ValueStepper {
        let absent = StateInfo {
            parent: NO_PARENT,
            piece: 0,
            len: 0,
            hash: 0,
        };
        let mut v = ValueStepper {
            ops: Vec::with_capacity(ops.len()),
            pieces: Vec::new(),
            piece_hash: Vec::new(),
            piece_ids: HashMap::default(),
            states: vec![absent],
            base: HashMap::default(),
            appends: HashMap::default(),
            blind: Vec::new(),
        };
        for o in ops {
            let unknown = o.outcome == Outcome::Unknown;
            let c = match (&o.op, &o.outcome) {
                (Op::Get { .. } | Op::Read { .. }, Outcome::Ok(None)) => Cop::ReadAbsent,
                (Op::Get { .. } | Op::Read { .. }, Outcome::Ok(Some(r))) => Cop::Read(v.piece(r)),
                (Op::Get { .. } | Op::Read { .. }, _) => {
                    unreachable!("reads without a result are dropped before compiling")
                }
                (Op::Put { value, .. } | Op::Write { value, .. }, _) => {
                    let p = v.piece(value);
                    Cop::Write(v.base_state(p))
                }
                (Op::Delete { .. }, _) => Cop::Write(0),
                (Op::Append { value, .. }, _) => Cop::Append(v.piece(value)),
                (Op::Cas { from, to, .. }, _) => {
                    let from = v.piece(from);
                    let to = v.piece(to);
                    let to = v.base_state(to);
                    if unknown {
                        Cop::MaybeCas { from, to }
                    } else {
                        Cop::Cas { from, to }
                    }
                }
            };
            v.ops.push(c);
        }
        v.blind = v.blind_writes();
        v
    }

    fn blind_writes(&self) -> Vec<bool> {
        let only_overwrites = self
            .ops
            .iter()
            .all(|c| matches!(c, Cop::Read(_) | Cop::ReadAbsent | Cop::Write(_)));
        if !only_overwrites {
            return vec![false; self.ops.len()];
        }
        let mut seen = std::collections::HashSet::new();
        let mut absent_seen = false;
        for c in &self.ops {
            match *c {
                Cop::Read(p) => {
                    seen.insert(p);
                }
                Cop::ReadAbsent => absent_seen = true,
                _ => {}
            }
        }
        self.ops
            .iter()
            .map(|c| match *c {
                Cop::Write(0) => !absent_seen,
                Cop::Write(s) => !seen.contains(&self.states[s as usize].piece),
                _ => false,
            })
            .collect()
    }

    fn piece(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.piece_ids.get(s) {
            return i;
        }
        let i = self.pieces.len() as u32;
        let (mut h, mut pow) = (0u64, 1u64);
        for &b in s.as_bytes() {
            h = h.wrapping_mul(B).wrapping_add(b as u64 + 1);
            pow = pow.wrapping_mul(B);
        }
        self.pieces.push(s.into());
        self.piece_hash.push((h, pow));
        self.piece_ids.insert(s.into(), i);
        i
    }

    fn base_state(&mut self, piece: u32) -> u32 {
        let next = self.states.len() as u32;
        let id = *self.base.entry(piece).or_insert(next);
        if id == next {
            let (hash, _) = self.piece_hash[piece as usize];
            let len = self.pieces[piece as usize].len();
            self.states.push(StateInfo {
                parent: NO_PARENT,
                piece,
                len,
                hash,
            });
        }
        id
    }

    /// Whether state `s` (not absent) holds exactly piece `p`.
    fn holds(&self, s: u32, p: u32) -> bool {
        let want = self.pieces[p as usize].as_bytes();
        let st = self.states[s as usize];
        if st.len != want.len() || st.hash != self.piece_hash[p as usize].0 {
            return false;
        }
        let mut end = want.len();
        let mut t = s;
        while t != NO_PARENT && t != 0 {
            let info = self.states[t as usize];
            let piece = self.pieces[info.piece as usize].as_bytes();
            if want[end - piece.len()..end] != *piece {
                return false;
            }
            end -= piece.len();
            t = info.parent;
        }
        end == 0
    }

    fn append(&mut self, s: u32, p: u32) -> u32 {
        if let Some(&n) = self.appends.get(&(s, p)) {
            return n;
        }
        let (ph, pow) = self.piece_hash[p as usize];
        let plen = self.pieces[p as usize].len();
        let (parent, len, hash) = if s == 0 {
            (0, plen, ph)
        } else {
            let st = self.states[s as usize];
            (s, st.len + plen, st.hash.wrapping_mul(pow).wrapping_add(ph))
        };
        let n = self.states.len() as u32;
        self.states.push(StateInfo {
            parent,
            piece: p,
            len,
            hash,
        });
        self.appends.insert((s, p), n);
        n
    }
}

impl Stepper for ValueStepper {
    fn is_read_only(&self, op: usize) -> bool {
        matches!(self.ops[op], Cop::Read(_) | Cop::ReadAbsent)
    }

    fn is_blind(&self, op: usize) -> bool {
        self.blind[op]
    }

    fn effect_class(&self, op: usize) -> Option<u64> {
        let code = match self.ops[op] {
            Cop::Write(v) => v as u64,
            Cop::Append(x) => 1 << 32 | x as u64,
            _ => return None,
        };
        Some(code)
    }

    fn step(&mut self, s: u32, op: usize) -> Option<u32> {
        match self.ops[op] {
            Cop::ReadAbsent => (s == 0).then_some(s),
            Cop::Read(v) => (s != 0 && self.holds(s, v)).then_some(s),
            Cop::Write(v) => Some(v),
            Cop::Cas { from, to } => (s != 0 && self.holds(s, from)).then_some(to),
            Cop::MaybeCas { from, to } => Some(if s != 0 && self.holds(s, from) { to } else { s }),
            Cop::Append(x) => Some(self.append(s, x)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(op: Op, outcome: Outcome) -> Operation {
        Operation {
            client: 0,
            op,
            call: 0,
            ret: Some(1),
            outcome,
        }
    }

    #[test]
    fn kv_semantics() {
        let k = || "k".to_string();
        let ops = [
            op(
                Op::Append {
                    key: k(),
                    value: "ab".into(),
                },
                Outcome::Ok(None),
            ),
            op(
                Op::Append {
                    key: k(),
                    value: "c".into(),
                },
                Outcome::Ok(None),
            ),
            op(Op::Get { key: k() }, Outcome::Ok(Some("abc".into()))),
            op(Op::Delete { key: k() }, Outcome::Ok(None)),
            op(Op::Get { key: k() }, Outcome::Ok(None)),
            op(Op::Get { key: k() }, Outcome::Ok(Some("".into()))),
        ];
        let mut m = ValueStepper::new(&ops);
        let s = m.step(0, 0).unwrap();
        let s = m.step(s, 1).unwrap();
        assert_eq!(m.step(s, 2), Some(s), "append concatenates");
        assert_eq!(m.step(s, 4), None, "present key is not absent");
        let abc = Op::Put {
            key: k(),
            value: "abc".into(),
        };
        let mut m2 =
            ValueStepper::new(&[op(abc, Outcome::Ok(None)), ops[2].clone(), ops[4].clone()]);
        let put = m2.step(0, 0).unwrap();
        assert_eq!(
            m2.step(put, 1),
            Some(put),
            "put and appends give equal strings"
        );
        assert_eq!(m2.step(put, 2), None);
        let s = m.step(s, 3).unwrap();
        assert_eq!(s, 0);
        assert_eq!(m.step(s, 4), Some(0), "deleted key reads as absent");
        assert_eq!(m.step(s, 5), None, "absent is not the empty string");
        assert_eq!(m.step(0, 0), m.step(0, 0), "append results are interned");
        // "ab"+"c" and "a"+"bc" are equal strings along different chains.
        let parts = ["a", "bc", "ab", "c"].map(|v| {
            op(
                Op::Append {
                    key: k(),
                    value: v.into(),
                },
                Outcome::Ok(None),
            )
        });
        let mut all = parts.to_vec();
        all.push(op(Op::Get { key: k() }, Outcome::Ok(Some("abc".into()))));
        all.push(op(Op::Get { key: k() }, Outcome::Ok(Some("abd".into()))));
        let mut m = ValueStepper::new(&all);
        let x = m.step(0, 0).and_then(|s| m.step(s, 1)).unwrap();
        let y = m.step(0, 2).and_then(|s| m.step(s, 3)).unwrap();
        assert_eq!(m.step(x, 4), Some(x));
        assert_eq!(m.step(y, 4), Some(y));
        assert_eq!(m.step(x, 5), None);
    }

    #[test]
    fn cas_semantics() {
        let cas = |o| {
            op(
                Op::Cas {
                    key: "".into(),
                    from: "1".into(),
                    to: "2".into(),
                },
                o,
            )
        };
        let ops = [
            op(
                Op::Write {
                    key: "".into(),
                    value: "1".into(),
                },
                Outcome::Ok(None),
            ),
            cas(Outcome::Ok(None)),
            cas(Outcome::Unknown),
        ];
        let mut m = ValueStepper::new(&ops);
        let one = m.step(0, 0).unwrap();
        let two = m.step(one, 1).unwrap();
        assert_ne!(one, two);
        assert_eq!(m.step(0, 1), None, "cas from a value not held fails");
        assert_eq!(
            m.step(one, 2),
            Some(two),
            "unknown cas swaps when it matches"
        );
        assert_eq!(m.step(0, 2), Some(0), "unknown cas is a no-op otherwise");
    }

    #[test]
    fn detect_picks_the_smallest_model() {
        let r = Op::Read { key: "".into() };
        let c = Op::Cas {
            key: "".into(),
            from: "a".into(),
            to: "b".into(),
        };
        let g = Op::Get { key: "".into() };
        assert_eq!(Model::detect([&r]), Model::Register);
        assert_eq!(Model::detect([&r, &c]), Model::CasRegister);
        assert_eq!(Model::detect([&g, &r]), Model::Kv);
        assert!(!Model::Register.allows(&c));
        assert!(Model::CasRegister.allows(&c));
    }
}
