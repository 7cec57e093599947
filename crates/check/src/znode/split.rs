//! A znode history split by top-level subtree (P-compositionality), with
//! the operations that span subtrees handled so that both verdicts stay
//! sound.
//!
//! The model's state is a product of components: the nodes under each
//! top-level name `t` (with their data, versions and sequential counters),
//! the open/closed flag of each session, and the root's counter. An
//! operation on a path reads and writes the component of its top-level name
//! only (a node's parent is in the same subtree, or is the root, which
//! always exists and is never ephemeral); an ephemeral create also reads
//! its session's flag; `CloseSession(s)` clears the flag and deletes `s`'s
//! ephemerals, which exist only in subtrees where `s` creates ephemerals;
//! `getChildren /` reads whether each top-level node exists; a multi
//! touches the components of its steps'. The root's counter changes only
//! with a sequential create under the root: a history with one is not
//! split, nor one with a multi step on `/` itself.
//!
//! **Parts.** One part per top-level name (of any path, or any name a root
//! read returned). A part holds its subtree's operations; the operations of
//! every session that creates ephemerals in it or writes there bound
//! (open, close, resume; a session-bound write reads whether its session
//! is gone, `refused_as_gone`; a session doing neither has its operations
//! in the first part); its own
//! projection of each `getChildren /` (the names kept to its own, the
//! root's children as that part's model sees them); its projection of a
//! multi: the multi of its own steps, their results kept (answered), or
//! with the failing step (failed there), or, failed in another part, its
//! steps before the failing one followed by a check that always fails (they
//! must succeed, nothing changes), or nothing (no own step before it).
//! Operations on `/` itself are constant and go to the first part.
//!
//! **Refuting is sound.** A linearization of the history, restricted to a
//! part's operations (a projected one at the same point), is one of the
//! part: each operation sees the same component values, and its projection
//! asks no more of them than the whole did. So a part with no
//! linearization would refute the whole history; the checker still sends
//! such a history to the whole search (`mod.rs`, `by_parts`): a real
//! kazoo history was once refused by a part, unexamined.
//!
//! **Accepting is sound.** The parts' linearizations are merged: one order
//! that keeps real time and, for each part, the order of every two of its
//! operations on a component it models, one of them writing it
//! ([`Parts::edges`]; operations on other components commute). If one
//! exists, every component evolves in it as in a part that holds all its
//! readers and writers, so every operation sees what its part's search saw.
//! The merged order is then replayed through the whole model
//! ([`is_linearization`]), so a merge that is wrong for any reason (an
//! unknown outcome placed by one part and not another) is never accepted.
//! Where the replay fails, the parts that left out an unknown outcome
//! another part placed are searched again with it forced (`agree` in
//! `mod.rs`): a forced search may only prove, never refute; if it fails,
//! the whole search decides.

use super::{Step, StepOk, ZnodeOp};
use crate::SpecOp;
use quorumkv_core::znode::tree::session_bound;
use quorumkv_core::znode::ZkError;
use std::collections::{BTreeMap, BTreeSet};

/// The parts of a history: each part's operations (sorted by call) and,
/// for each, its index in the history.
pub(super) struct Parts {
    pub ops: Vec<Vec<SpecOp<ZnodeOp>>>,
    pub origin: Vec<Vec<usize>>,
    /// Each part's top-level names (one, unless parts were joined).
    names: Vec<Vec<String>>,
    /// The sessions whose operations each part holds.
    sessions: Vec<BTreeSet<u64>>,
    /// The parts where each session creates ephemerals.
    uses: BTreeMap<u64, BTreeSet<usize>>,
}

/// The session a write reads the open flag of, if any: a session-bound
/// one (a write of it is refused once it is gone) or one answered
/// `SessionExpired` (refused while it is not open; `refused_as_gone`).
fn flag_read(session: u64, expired: bool) -> Option<u64> {
    (session_bound(session) || expired).then_some(session)
}

fn expired<T>(result: &Option<Result<T, ZkError>>) -> bool {
    matches!(result, Some(Err(ZkError::SessionExpired)))
}

/// The top-level name of `path`, `None` for the root.
fn top(path: &str) -> Option<&str> {
    let rest = path.strip_prefix('/')?;
    let name = rest.split('/').next().unwrap_or("");
    (!name.is_empty()).then_some(name)
}

/// A sequential create under the root, or a step on the root: the history
/// is not split.
fn unsplittable(op: &ZnodeOp) -> bool {
    let root_seq = |path: &str, seq: bool| seq && !path[1.min(path.len())..].contains('/');
    match op {
        ZnodeOp::Create {
            path, sequential, ..
        } => root_seq(path, *sequential),
        ZnodeOp::Multi { steps, .. } => steps.iter().any(|s| {
            let p = step_path(s);
            let seq = matches!(
                s,
                Step::Create {
                    sequential: true,
                    ..
                }
            );
            top(p).is_none() || root_seq(p, seq)
        }),
        _ => false,
    }
}

fn step_path(s: &Step) -> &str {
    match s {
        Step::Check { path, .. }
        | Step::Create { path, .. }
        | Step::Delete { path, .. }
        | Step::SetData { path, .. } => path,
    }
}

/// The session whose operations `op` is, if it is one.
fn session_op(op: &ZnodeOp) -> Option<u64> {
    match op {
        ZnodeOp::OpenSession { session }
        | ZnodeOp::CloseSession { session }
        | ZnodeOp::Resume { session, .. } => Some(*session),
        _ => None,
    }
}

/// Every top-level name the history mentions.
fn names(ops: &[SpecOp<ZnodeOp>]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for o in ops {
        match &o.op {
            ZnodeOp::Create { path, .. }
            | ZnodeOp::Delete { path, .. }
            | ZnodeOp::SetData { path, .. }
            | ZnodeOp::GetData { path, .. }
            | ZnodeOp::Exists { path, .. } => out.extend(top(path).map(str::to_string)),
            ZnodeOp::Children { path, result } => {
                out.extend(top(path).map(str::to_string));
                if let (None, Ok(kids)) = (top(path), result) {
                    out.extend(kids.iter().cloned());
                }
            }
            ZnodeOp::Multi { steps, .. } => out.extend(
                steps
                    .iter()
                    .filter_map(|s| top(step_path(s)).map(str::to_string)),
            ),
            _ => {}
        }
    }
    out
}

/// The history's parts, or `None` if it has fewer than two or may not be
/// split (see the module comment).
pub(super) fn split(ops: &[SpecOp<ZnodeOp>]) -> Option<Parts> {
    split_joining(ops, &[])
}

/// [`split`] with the names at each pair of indices in `joined` (into the
/// history's top-level names, sorted) in one part: a coarser split, for
/// parts whose orders do not merge.
pub(super) fn split_joining(ops: &[SpecOp<ZnodeOp>], joined: &[(usize, usize)]) -> Option<Parts> {
    if ops.iter().any(|o| unsplittable(&o.op)) {
        return None;
    }
    let all: Vec<String> = names(ops).into_iter().collect();
    let (group, parts) = groups(all.len(), joined);
    let names: Vec<Vec<String>> = (0..parts)
        .map(|p| {
            (all.iter().zip(&group).filter(|(_, &g)| g == p))
                .map(|(n, _)| n.clone())
                .collect()
        })
        .collect();
    if names.len() < 2 {
        return None;
    }
    let part_of: BTreeMap<&str, usize> = (all.iter().zip(&group))
        .map(|(n, &g)| (n.as_str(), g))
        .collect();
    let part = |p: &str| top(p).map_or(0, |t| part_of[t]);
    let uses = ephemeral_parts(ops, &part);
    let mut routes = uses.clone();
    for (s, p) in ops.iter().flat_map(|o| flag_reads(&o.op, &part)) {
        routes.entry(s).or_default().insert(p);
    }
    let mut out = Parts {
        ops: vec![Vec::new(); names.len()],
        origin: vec![Vec::new(); names.len()],
        names: names.clone(),
        sessions: vec![BTreeSet::new(); names.len()],
        uses: uses.clone(),
    };
    let put = |out: &mut Parts, p: usize, i: usize, op: ZnodeOp| {
        out.ops[p].push(SpecOp {
            call: ops[i].call,
            ret: ops[i].ret,
            op,
        });
        out.origin[p].push(i);
    };
    for (i, o) in ops.iter().enumerate() {
        if let Some(s) = session_op(&o.op) {
            let first = BTreeSet::from([0]);
            for &p in routes.get(&s).unwrap_or(&first) {
                put(&mut out, p, i, o.op.clone());
                out.sessions[p].insert(s);
            }
            continue;
        }
        match &o.op {
            ZnodeOp::Children {
                path,
                result: Ok(kids),
            } if top(path).is_none() => {
                for (p, group) in names.iter().enumerate() {
                    let own = kids.iter().filter(|k| group.contains(k)).cloned().collect();
                    let op = ZnodeOp::Children {
                        path: path.clone(),
                        result: Ok(own),
                    };
                    put(&mut out, p, i, op);
                }
            }
            ZnodeOp::Multi { .. } => {
                for (p, op) in project_multi(&o.op, |s| part(step_path(s))) {
                    put(&mut out, p, i, op);
                }
            }
            op => put(&mut out, path_of(op).map_or(0, part), i, op.clone()),
        }
    }
    for (ops, origin) in out.ops.iter_mut().zip(&mut out.origin) {
        let mut both: Vec<_> = ops.drain(..).zip(origin.drain(..)).collect();
        both.sort_by_key(|(o, _)| o.call);
        (*ops, *origin) = both.into_iter().unzip();
    }
    Some(out)
}

/// The part of each of `n` names, with the pairs in `joined` in one part,
/// numbered from 0 in order of their first name; and how many parts.
fn groups(n: usize, joined: &[(usize, usize)]) -> (Vec<usize>, usize) {
    let mut group: Vec<usize> = (0..n).collect();
    for &(x, y) in joined.iter().filter(|&&(x, y)| x.max(y) < n) {
        let (gx, gy) = (group[x], group[y]);
        group.iter_mut().filter(|g| **g == gy).for_each(|g| *g = gx);
    }
    let mut dense: BTreeMap<usize, usize> = BTreeMap::new();
    for g in &mut group {
        let next = dense.len();
        *g = *dense.entry(*g).or_insert(next);
    }
    (group, dense.len())
}

/// The parts where each session creates ephemerals.
fn ephemeral_parts(
    ops: &[SpecOp<ZnodeOp>],
    part: &impl Fn(&str) -> usize,
) -> BTreeMap<u64, BTreeSet<usize>> {
    let mut uses: BTreeMap<u64, BTreeSet<usize>> = BTreeMap::new();
    for o in ops {
        match &o.op {
            ZnodeOp::Create {
                path,
                ephemeral: true,
                session,
                ..
            } => {
                uses.entry(*session).or_default().insert(part(path));
            }
            ZnodeOp::Multi { session, steps, .. } => {
                for s in steps {
                    if let Step::Create {
                        path,
                        ephemeral: true,
                        ..
                    } = s
                    {
                        uses.entry(*session).or_default().insert(part(path));
                    }
                }
            }
            _ => {}
        }
    }
    uses
}

/// The (session, part) pairs of `op`'s writes that read a session's open
/// flag (`flag_read`).
fn flag_reads(op: &ZnodeOp, part: &impl Fn(&str) -> usize) -> Vec<(u64, usize)> {
    let (path, session, gone) = match op {
        ZnodeOp::Create {
            path,
            session,
            result,
            ..
        } => (path, *session, expired(result)),
        ZnodeOp::Delete {
            path,
            session,
            result,
            ..
        } => (path, *session, expired(result)),
        ZnodeOp::SetData {
            path,
            session,
            result,
            ..
        } => (path, *session, expired(result)),
        ZnodeOp::Multi {
            session,
            steps,
            result,
        } => {
            let gone = matches!(result, Some(Err((_, ZkError::SessionExpired))));
            let Some(s) = flag_read(*session, gone) else {
                return Vec::new();
            };
            return steps.iter().map(|st| (s, part(step_path(st)))).collect();
        }
        _ => return Vec::new(),
    };
    flag_read(session, gone)
        .map(|s| (s, part(path)))
        .into_iter()
        .collect()
}

fn path_of(op: &ZnodeOp) -> Option<&str> {
    match op {
        ZnodeOp::Create { path, .. }
        | ZnodeOp::Delete { path, .. }
        | ZnodeOp::SetData { path, .. }
        | ZnodeOp::GetData { path, .. }
        | ZnodeOp::Exists { path, .. }
        | ZnodeOp::Children { path, .. } => Some(path),
        _ => None,
    }
}

/// A multi's projection on each part it touches (see the module comment).
fn project_multi(op: &ZnodeOp, part: impl Fn(&Step) -> usize) -> Vec<(usize, ZnodeOp)> {
    let ZnodeOp::Multi {
        session,
        steps,
        result,
    } = op
    else {
        return Vec::new();
    };
    let touched: BTreeSet<usize> = steps.iter().map(&part).collect();
    // One part, or an answer the model never gives (refused as a whole).
    let odd = match result {
        Some(Ok(done)) => done.len() != steps.len(),
        Some(Err((k, _))) => *k as usize >= steps.len(),
        None => false,
    };
    if touched.len() < 2 || odd {
        return vec![(touched.first().copied().unwrap_or(0), op.clone())];
    }
    let multi = |steps, result| ZnodeOp::Multi {
        session: *session,
        steps,
        result,
    };
    let own = |p: usize, upto: usize| -> Vec<usize> {
        (0..upto.min(steps.len()))
            .filter(|&k| part(&steps[k]) == p)
            .collect()
    };
    let pick = |ks: &[usize]| ks.iter().map(|&k| steps[k].clone()).collect::<Vec<_>>();
    (touched.into_iter())
        .filter_map(|p| match result {
            None => Some((p, multi(pick(&own(p, steps.len())), None))),
            Some(Ok(done)) => {
                let ks = own(p, steps.len());
                let r: Vec<StepOk> = ks.iter().map(|&k| done[k].clone()).collect();
                Some((p, multi(pick(&ks), Some(Ok(r)))))
            }
            Some(Err((k, e))) => {
                let k = *k as usize;
                let mut ks = own(p, k);
                let fails_here = part(&steps[k]) == p;
                if fails_here {
                    ks.push(k);
                } else if ks.is_empty() {
                    return None;
                }
                let mut s = pick(&ks);
                if !fails_here {
                    s.push(never());
                }
                let at = u32::try_from(s.len() - 1).unwrap_or(u32::MAX);
                let err = if fails_here {
                    e.clone()
                } else {
                    quorumkv_core::znode::ZkError::BadVersion
                };
                Some((p, multi(s, Some(Err((at, err))))))
            }
        })
        .collect()
}

/// A step that fails in every state, changing nothing: the root exists
/// with version 0.
fn never() -> Step {
    Step::Check {
        path: "/".into(),
        version: Some(u32::MAX),
    }
}

/// A component of the model's state (see the module comment): the nodes
/// under a part's top-level name, or a session's open flag.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Comp {
    Top(usize),
    Flag(u64),
}

impl Parts {
    fn part(&self, path: &str) -> Option<usize> {
        let t = top(path)?;
        self.names.iter().position(|g| g.iter().any(|n| n == t))
    }

    /// The components `op` reads or writes (`true`: may write). An
    /// operation answered with an error changed nothing: a read.
    fn footprint(&self, op: &ZnodeOp) -> Vec<(Comp, bool)> {
        let mut out: Vec<(Comp, bool)> = (flag_reads(op, &|_| 0).into_iter())
            .map(|(s, _)| (Comp::Flag(s), false))
            .collect();
        let on = |path: &str, write: bool| self.part(path).map(|p| (Comp::Top(p), write));
        let failed = |r: Option<bool>| r == Some(false);
        match op {
            ZnodeOp::Create {
                path,
                ephemeral,
                session,
                result,
                ..
            } => {
                out.extend(on(path, !failed(result.as_ref().map(|r| r.is_ok()))));
                if *ephemeral {
                    out.push((Comp::Flag(*session), false));
                }
            }
            ZnodeOp::Delete { path, result, .. } => {
                out.extend(on(path, !failed(result.as_ref().map(|r| r.is_ok()))))
            }
            ZnodeOp::SetData { path, result, .. } => {
                out.extend(on(path, !failed(result.as_ref().map(|r| r.is_ok()))))
            }
            ZnodeOp::GetData { path, .. } | ZnodeOp::Exists { path, .. } => {
                out.extend(on(path, false))
            }
            ZnodeOp::Children { path, .. } if top(path).is_some() => out.extend(on(path, false)),
            ZnodeOp::Children { .. } => {
                out.extend((0..self.names.len()).map(|p| (Comp::Top(p), false)))
            }
            ZnodeOp::Multi {
                session,
                steps,
                result,
            } => {
                let write = !failed(result.as_ref().map(|r| r.is_ok()));
                for st in steps {
                    out.extend(on(step_path(st), write));
                    if let Step::Create {
                        ephemeral: true, ..
                    } = st
                    {
                        out.push((Comp::Flag(*session), false));
                    }
                }
            }
            ZnodeOp::OpenSession { session } => out.push((Comp::Flag(*session), true)),
            ZnodeOp::Resume { session, .. } => out.push((Comp::Flag(*session), false)),
            ZnodeOp::CloseSession { session } => {
                out.push((Comp::Flag(*session), true));
                for &p in self.uses.get(session).into_iter().flatten() {
                    out.push((Comp::Top(p), true));
                }
            }
        }
        out
    }

    /// Whether `a` and `b` touch a component in common, one of them
    /// writing it: their order matters.
    pub(super) fn conflict(&self, a: &ZnodeOp, b: &ZnodeOp) -> bool {
        let fb = self.footprint(b);
        (self.footprint(a).iter()).any(|(c, w)| fb.iter().any(|(d, v)| c == d && (*w || *v)))
    }

    /// The orders a part's linearization (`order`: history indices) fixes:
    /// between operations on a component the part models, at least one
    /// writing it. Any order keeping them gives every operation of the part
    /// the same answer and leaves the part in the same state.
    fn edges(&self, ops: &[SpecOp<ZnodeOp>], p: usize, order: &[usize]) -> Vec<(usize, usize)> {
        let owned = |c: &Comp| match c {
            Comp::Top(t) => *t == p,
            Comp::Flag(s) => self.sessions[p].contains(s),
        };
        let mut last: BTreeMap<Comp, usize> = BTreeMap::new();
        let mut readers: BTreeMap<Comp, Vec<usize>> = BTreeMap::new();
        let mut out = Vec::new();
        for &y in order {
            for (c, write) in self.footprint(&ops[y].op) {
                if !owned(&c) {
                    continue;
                }
                out.extend(last.get(&c).map(|&x| (x, y)));
                let rs = readers.entry(c).or_default();
                if write {
                    out.extend(rs.drain(..).map(|r| (r, y)));
                    last.insert(c, y);
                } else {
                    rs.push(y);
                }
            }
        }
        out
    }
}

/// One order of the operations that keeps what each part's linearization
/// fixes (`orders[p]`: part `p`'s, history indices; [`Parts::edges`]) and
/// real time, or `None` if there is none.
pub(super) fn merge(
    ops: &[SpecOp<ZnodeOp>],
    parts: &Parts,
    orders: &[Vec<usize>],
) -> Option<Vec<usize>> {
    let n = ops.len();
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut indeg = vec![0usize; n];
    let mut member = vec![false; n];
    for (p, order) in orders.iter().enumerate() {
        for (x, y) in parts.edges(ops, p, order) {
            if x != y {
                succ[x].push(y);
                indeg[y] += 1;
            }
        }
        for &i in order {
            member[i] = true;
        }
    }
    let ret = |i: usize| ops[i].ret.map(|r| r.max(ops[i].call));
    // Known operations by return: one is ready by real time when every
    // operation that returned before its call is out.
    let mut by_ret: Vec<usize> = (0..n).filter(|&i| ret(i).is_some()).collect();
    if by_ret.iter().any(|&i| !member[i]) {
        return None;
    }
    by_ret.sort_by_key(|&i| ret(i));
    let mut ready: BTreeSet<(u64, usize)> = (0..n)
        .filter(|&i| member[i] && indeg[i] == 0)
        .map(|i| (ops[i].call, i))
        .collect();
    let (mut out, mut done, mut front) = (Vec::new(), vec![false; n], 0);
    while let Some(&(call, i)) = ready.first() {
        while front < by_ret.len() && done[by_ret[front]] {
            front += 1;
        }
        if by_ret.get(front).is_some_and(|&f| ret(f) < Some(call)) {
            return None;
        }
        ready.pop_first();
        done[i] = true;
        out.push(i);
        for &j in &succ[i] {
            indeg[j] -= 1;
            if indeg[j] == 0 {
                ready.insert((ops[j].call, j));
            }
        }
    }
    let placed = member.iter().filter(|&&m| m).count();
    (out.len() == placed).then_some(out)
}

/// Whether `order` is a linearization of `ops`: every known operation
/// once, an unknown one at most once, none before an operation that
/// returned before its call, each accepted by the model in turn.
pub(super) fn is_linearization(ops: &[SpecOp<ZnodeOp>], order: &[usize]) -> bool {
    use crate::model::Spec;
    let mut seen = vec![false; ops.len()];
    let mut state = super::ZnodeSpec.init();
    let mut latest_call = 0;
    for &i in order {
        let Some(o) = ops.get(i) else { return false };
        if std::mem::replace(&mut seen[i], true) {
            return false;
        }
        if o.ret.is_some_and(|r| r.max(o.call) < latest_call) {
            return false;
        }
        latest_call = latest_call.max(o.call);
        match super::ZnodeSpec.step(&state, &o.op) {
            Some(next) => state = next,
            None => return false,
        }
    }
    (ops.iter().zip(&seen)).all(|(o, &s)| s || o.ret.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumkv_core::znode::ZkError;

    fn at(call: u64, ret: Option<u64>, op: ZnodeOp) -> SpecOp<ZnodeOp> {
        SpecOp { call, ret, op }
    }

    fn create(path: &str, eph: bool, session: u64) -> ZnodeOp {
        ZnodeOp::Create {
            path: path.into(),
            data: "d".into(),
            ephemeral: eph,
            sequential: false,
            session,
            result: Some(Ok(path.into())),
        }
    }

    fn root(names: &[&str]) -> ZnodeOp {
        ZnodeOp::Children {
            path: "/".into(),
            result: Ok(names.iter().map(|n| n.to_string()).collect()),
        }
    }

    /// Each part sees its own name of a root read, its own subtree, and
    /// the operations of the sessions with ephemerals in it.
    #[test]
    fn parts_are_subtrees_with_their_sessions() {
        let ops = vec![
            at(0, Some(1), ZnodeOp::OpenSession { session: 7 }),
            at(2, Some(3), create("/a", true, 7)),
            at(2, Some(3), create("/b", false, 0)),
            at(4, Some(5), create("/a/c", false, 0)),
            at(6, Some(7), root(&["a", "b", "z"])),
        ];
        let parts = split(&ops).expect("three names");
        assert_eq!(parts.origin, vec![vec![0, 1, 3, 4], vec![2, 4], vec![4]]);
        assert_eq!(parts.ops[1][1].op, root(&["b"]));
        // "z" is never created: its part alone refutes the read.
        assert_eq!(parts.ops[2][0].op, root(&["z"]));
        // A sequential create under the root ties every name: no split.
        let mut seq = ops.clone();
        seq.push(at(
            8,
            Some(9),
            ZnodeOp::Create {
                path: "/n-".into(),
                data: "d".into(),
                ephemeral: false,
                sequential: true,
                session: 0,
                result: Some(Ok("/n-0000000000".into())),
            },
        ));
        assert!(split(&seq).is_none());
        assert!(split(&ops[..1]).is_none());
    }

    /// A session-bound session's writes read whether it is gone, so its
    /// open and close go to every part it writes in, not only where it
    /// creates ephemerals; an unbound one's go there only when a write of
    /// it was refused as expired.
    #[test]
    fn a_bound_sessions_open_and_close_go_where_it_writes() {
        use quorumkv_core::znode::tree::SESSION_BOUND;
        let (bound, unbound) = (1 << 63 | SESSION_BOUND | 7, 1 << 63 | 8);
        let delete = |path: &str, session, result| ZnodeOp::Delete {
            path: path.into(),
            version: None,
            session,
            result: Some(result),
        };
        let ops = vec![
            at(0, Some(1), ZnodeOp::OpenSession { session: bound }),
            at(0, Some(1), ZnodeOp::OpenSession { session: unbound }),
            at(2, Some(3), create("/a", true, bound)),
            at(2, Some(3), create("/b", false, 0)),
            at(2, Some(3), create("/c", false, 0)),
            at(4, Some(5), ZnodeOp::CloseSession { session: bound }),
            at(4, Some(5), ZnodeOp::CloseSession { session: unbound }),
            at(
                6,
                Some(7),
                delete("/b", bound, Err(ZkError::SessionExpired)),
            ),
            at(
                6,
                Some(7),
                delete("/c", unbound, Err(ZkError::SessionExpired)),
            ),
        ];
        let parts = split(&ops).expect("three names");
        assert_eq!(parts.names, [["a"], ["b"], ["c"]]);
        let joined = split_joining(&ops, &[(2, 0)]).expect("two parts");
        assert_eq!(joined.names, [vec!["a", "c"], vec!["b"]]);
        assert!(split_joining(&ops, &[(0, 1), (1, 2)]).is_none(), "one part");
        assert_eq!(parts.origin[0], vec![0, 2, 5]);
        assert_eq!(parts.origin[1], vec![0, 3, 5, 7], "the bound session's");
        assert_eq!(parts.origin[2], vec![1, 4, 6, 8], "refused as expired");
        let mut ok = ops.clone();
        ok[8] = at(6, Some(7), delete("/c", unbound, Err(ZkError::NoNode)));
        let parts = split(&ok).expect("three names");
        assert_eq!(parts.origin[0], vec![0, 1, 2, 5, 6], "unbound: the first");
        assert_eq!(parts.origin[2], vec![4, 8]);
    }

    /// A multi failed by a step of one part asks the steps of another part
    /// before it to succeed, and changes nothing there.
    #[test]
    fn a_failed_multi_is_projected_on_every_part_before_the_failure() {
        let steps = vec![
            Step::SetData {
                path: "/b".into(),
                data: "x".into(),
                version: None,
            },
            Step::Delete {
                path: "/a".into(),
                version: Some(3),
            },
            Step::Check {
                path: "/q".into(),
                version: None,
            },
        ];
        let op = ZnodeOp::Multi {
            session: 1,
            steps: steps.clone(),
            result: Some(Err((1, ZkError::BadVersion))),
        };
        let part = |s: &Step| match step_path(s) {
            "/a" => 0,
            "/b" => 1,
            _ => 2,
        };
        let got = project_multi(&op, part);
        let multi = |steps: Vec<Step>, at| ZnodeOp::Multi {
            session: 1,
            steps,
            result: Some(Err((at, ZkError::BadVersion))),
        };
        assert_eq!(
            got,
            vec![
                (0, multi(vec![steps[1].clone()], 0)),
                (1, multi(vec![steps[0].clone(), never()], 1)),
            ]
        );
        // The added check fails in any state and changes nothing.
        use crate::model::Spec;
        let s = super::super::ZnodeSpec.init();
        assert_eq!(
            super::super::ZnodeSpec.step(&s, &multi(vec![never()], 0)),
            Some(s)
        );
    }

    /// Orders that disagree on a shared operation, or break real time, do
    /// not merge; a merged order is checked against the whole model.
    #[test]
    fn merging_respects_every_part_and_real_time() {
        let ops = vec![
            at(0, Some(10), create("/a", false, 0)),
            at(0, Some(10), create("/b", false, 0)),
            at(0, Some(10), root(&["a"])),
        ];
        let parts = split(&ops).expect("two names");
        let order = merge(&ops, &parts, &[vec![0, 2], vec![2, 1]]).expect("compatible");
        assert_eq!(order, vec![0, 2, 1]);
        assert!(is_linearization(&ops, &order));
        // A part's order against real time: no order.
        let mut early = ops.clone();
        (early[0].call, early[2].ret) = (5, Some(2));
        assert_eq!(merge(&early, &parts, &[vec![0, 2], vec![1, 2]]), None);
        assert!(!is_linearization(&ops, &[0, 1, 2]));
        assert!(!is_linearization(&ops, &[0, 2]), "a known op left out");
        let late = vec![
            at(0, Some(1), create("/a", false, 0)),
            at(2, Some(3), root(&[])),
            at(2, Some(3), create("/b", false, 0)),
        ];
        let parts = split(&late).expect("two names");
        assert_eq!(merge(&late, &parts, &[vec![1, 0], vec![1, 2]]), None);
        assert!(!is_linearization(&late, &[1, 0]));
    }
}
