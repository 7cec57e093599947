//! The znode model compiled for the search (`crate::search`): states
//! interned, transitions cached, and three facts about znode operations
//! that the generic [`SpecStepper`](crate::model::SpecStepper) cannot know.
//!
//! * Reads (`getData`, `exists`, `getChildren`) never change the state, so
//!   the search may place a legal read at once and never revisit that
//!   choice ([`Stepper::is_read_only`]; the argument is at its use in
//!   `search.rs`: the read's call precedes the first remaining return, so
//!   everything that must precede it is placed, and since it changes no
//!   state, any valid order of the rest stays valid with the read first).
//! * Data that no read returns is abstracted to one value ([`UNREAD`]):
//!   data is observed only by `getData` comparing it with its result, and
//!   `d == r` for every returned `r` is unchanged by mapping each
//!   never-returned `d` to a value no read returns. Every step then gives
//!   the same verdict, so the history's verdict is unchanged, while states
//!   that differ only in unread data become one (the memo merges them).
//! * Unknown-outcome operations that are equal after that abstraction have
//!   the same effect in every state ([`Stepper::effect_class`]).

use super::{Step, ZnodeOp, ZnodeSpec, ZnodeState};
use crate::model::Spec;
use crate::search::{FxBuild, Stepper};
use quorumkv_core::znode::tree::session_bound;
use std::collections::{HashMap, HashSet};

/// The data of every write whose data no read returns. A read can return
/// it only if a client wrote it, which the workload never does; the
/// constructor checks, and keeps the data as it is if one did.
const UNREAD: &str = "\u{0}unread";

/// Interns the states of [`ZnodeSpec`] over one history's operations.
pub(crate) struct ZnodeStepper {
    ops: Vec<ZnodeOp>,
    /// Unknown-outcome operations numbered by their effect.
    class: Vec<Option<u64>>,
    /// Multis that may be placed only where they succeed.
    succeed: Vec<bool>,
    states: Vec<ZnodeState>,
    ids: HashMap<ZnodeState, u32>,
    cache: HashMap<(u32, u32), Option<u32>, FxBuild>,
}

impl ZnodeStepper {
    /// `ops` sorted by call; `unknown[i]`: operation `i`'s outcome is unknown.
    pub fn new(ops: Vec<ZnodeOp>, unknown: &[bool]) -> ZnodeStepper {
        let ops = abstract_unread_data(ops);
        let mut names: HashMap<String, u64> = HashMap::new();
        let class = (ops.iter().zip(unknown))
            .map(|(op, &u)| {
                let n = names.len() as u64;
                u.then(|| *names.entry(format!("{op:?}")).or_insert(n))
            })
            .collect();
        let init = ZnodeSpec.init();
        ZnodeStepper {
            succeed: vec![false; ops.len()],
            ops,
            class,
            ids: HashMap::from([(init.clone(), 0)]),
            states: vec![init],
            cache: HashMap::default(),
        }
    }
}

impl ZnodeStepper {
    /// The same, where a multi `i` with `succeed[i]` is legal only where
    /// all its steps succeed.
    pub fn succeeding(mut self, succeed: Vec<bool>) -> ZnodeStepper {
        debug_assert_eq!(succeed.len(), self.ops.len());
        self.succeed = succeed;
        self
    }
}

/// Replaces the data of creates and sets that no successful `getData`
/// returns with [`UNREAD`] (see the module comment), and the session of a
/// persistent create, a delete or a set (unused unless session-bound)
/// with 0.
fn abstract_unread_data(mut ops: Vec<ZnodeOp>) -> Vec<ZnodeOp> {
    let read: HashSet<String> = (ops.iter())
        .filter_map(|o| match o {
            ZnodeOp::GetData {
                result: Ok((d, _)), ..
            } => Some(d.clone()),
            _ => None,
        })
        .collect();
    if read.contains(UNREAD) {
        return ops;
    }
    for o in &mut ops {
        let abstract_data = |data: &mut String| {
            if !read.contains(data.as_str()) {
                *data = UNREAD.to_string();
            }
        };
        if let ZnodeOp::Create { data, .. } | ZnodeOp::SetData { data, .. } = o {
            abstract_data(data);
        }
        if let ZnodeOp::Multi { steps, .. } = o {
            for s in steps {
                if let Step::Create { data, .. } | Step::SetData { data, .. } = s {
                    abstract_data(data);
                }
            }
        }
        // A persistent create, a delete or a set does not look at its
        // session unless the session is bound (`refused_as_gone`).
        if let ZnodeOp::Create {
            ephemeral: false,
            session,
            ..
        }
        | ZnodeOp::Delete { session, .. }
        | ZnodeOp::SetData { session, .. } = o
        {
            if !session_bound(*session) {
                *session = 0;
            }
        }
    }
    ops
}

impl Stepper for ZnodeStepper {
    fn step(&mut self, s: u32, op: usize) -> Option<u32> {
        if let Some(r) = self.cache.get(&(s, op as u32)) {
            return *r;
        }
        let before = &self.states[s as usize];
        if let (true, ZnodeOp::Multi { session, steps, .. }) = (self.succeed[op], &self.ops[op]) {
            if before.clone().multi(*session, steps).is_err() {
                self.cache.insert((s, op as u32), None);
                return None;
            }
        }
        let r = ZnodeSpec
            .step(before, &self.ops[op])
            // An unknown-outcome operation that would change nothing here
            // is never placed here: placing it leads to (set + op, s),
            // and every order that completes from there completes from
            // (set, s) too, with op left out (nothing forces an unknown
            // outcome, and it has no return entry to order others by).
            .filter(|n| self.class[op].is_none() || n != before)
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

    fn is_read_only(&self, op: usize) -> bool {
        matches!(
            self.ops[op],
            ZnodeOp::GetData { .. }
                | ZnodeOp::Exists { .. }
                | ZnodeOp::Children { .. }
                | ZnodeOp::Resume { .. }
        )
    }

    fn effect_class(&self, op: usize) -> Option<u64> {
        self.class[op]
    }
}
