//! A sequential specification of the znode service (seed 001 §II.C) for
//! [`check_spec`](crate::check_spec), and a mutual-exclusion check for the
//! lock recipes.
//!
//! The model is written apart from the service's tree
//! (`quorumkv_core::znode::Tree`) on purpose: a checker that ran the same
//! code would accept its bugs. It keeps what the observed results can
//! show: data, data version, ephemeral owner, each parent's sequential
//! counter, open sessions. Children are found by prefix, slowly and simply.

#[cfg(test)]
mod brute;
pub mod jsonl;
mod multi;
mod split;
mod stepper;

pub use multi::{MultiResult, Step, StepOk};

use crate::model::Spec;
use quorumkv_core::znode::tree::session_bound;
use quorumkv_core::znode::ZkError;
use std::collections::{BTreeMap, BTreeSet};

/// One operation with what its client saw. `None` as a result means the
/// outcome is unknown: the effect may have happened, or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZnodeOp {
    OpenSession {
        session: u64,
    },
    CloseSession {
        session: u64,
    },
    /// `result`: the created path (with its suffix when sequential).
    Create {
        path: String,
        data: String,
        ephemeral: bool,
        sequential: bool,
        session: u64,
        result: Option<Result<String, ZkError>>,
    },
    /// `session`: the writer's (0: not recorded).
    Delete {
        path: String,
        version: Option<u32>,
        session: u64,
        result: Option<Result<(), ZkError>>,
    },
    /// `result`: the new data version.
    SetData {
        path: String,
        data: String,
        version: Option<u32>,
        session: u64,
        result: Option<Result<u32, ZkError>>,
    },
    /// `result`: data and version.
    GetData {
        path: String,
        result: Result<(String, u32), ZkError>,
    },
    /// `result`: the version, or `None` when absent.
    Exists {
        path: String,
        result: Option<u32>,
    },
    /// `result`: the children's names, sorted.
    Children {
        path: String,
        result: Result<Vec<String>, ZkError>,
    },
    /// A session taken up on a new connection (`ResumeSession`): `open`
    /// if it was answered resumed, not if answered expired. Changes
    /// nothing.
    Resume {
        session: u64,
        open: bool,
    },
    /// ZooKeeper's `multi`: `steps` in order, all or none.
    Multi {
        session: u64,
        steps: Vec<Step>,
        result: Option<MultiResult>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Node {
    data: String,
    version: u32,
    /// Owning session of an ephemeral, 0 for persistent.
    owner: u64,
    next_seq: u64,
}

/// The model's state: every znode but the root (which always exists, has
/// no data and may have children), the root's counter, open sessions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ZnodeState {
    nodes: BTreeMap<String, Node>,
    root_seq: u64,
    sessions: BTreeSet<u64>,
    /// Session-bound sessions closed and not opened again: their writes
    /// take no effect (`refused_as_gone`).
    gone: BTreeSet<u64>,
}

fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

impl ZnodeState {
    fn exists(&self, path: &str) -> bool {
        path == "/" || self.nodes.contains_key(path)
    }

    fn children(&self, path: &str) -> Vec<String> {
        let prefix = if path == "/" {
            "/".to_string()
        } else {
            format!("{path}/")
        };
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .filter(|(p, _)| !p[prefix.len()..].contains('/'))
            .map(|(p, _)| p[prefix.len()..].to_string())
            .collect()
    }

    /// What a create would do: its path, or the error.
    fn create(
        &mut self,
        path: &str,
        data: &str,
        eph: bool,
        seq: bool,
        session: u64,
    ) -> Result<String, ZkError> {
        let parent = parent_of(path).to_string();
        if !self.exists(&parent) {
            return Err(ZkError::NoNode);
        }
        if self.nodes.get(&parent).is_some_and(|p| p.owner != 0) {
            return Err(ZkError::NoChildrenForEphemerals);
        }
        if eph && !self.sessions.contains(&session) {
            return Err(ZkError::SessionExpired);
        }
        let seq_no = match self.nodes.get(&parent) {
            Some(p) => p.next_seq,
            None => self.root_seq,
        };
        let full = if seq {
            format!("{path}{seq_no:010}")
        } else {
            path.to_string()
        };
        if full == "/" || self.nodes.contains_key(&full) {
            return Err(ZkError::NodeExists);
        }
        if seq {
            match self.nodes.get_mut(&parent) {
                Some(p) => p.next_seq += 1,
                None => self.root_seq += 1,
            }
        }
        self.nodes.insert(
            full.clone(),
            Node {
                data: data.to_string(),
                version: 0,
                owner: if eph { session } else { 0 },
                next_seq: 0,
            },
        );
        Ok(full)
    }

    fn delete(&mut self, path: &str, version: Option<u32>) -> Result<(), ZkError> {
        let n = self.nodes.get(path).ok_or(ZkError::NoNode)?;
        if version.is_some_and(|v| v != n.version) {
            return Err(ZkError::BadVersion);
        }
        if !self.children(path).is_empty() {
            return Err(ZkError::NotEmpty);
        }
        self.nodes.remove(path);
        Ok(())
    }

    fn set(&mut self, path: &str, data: &str, version: Option<u32>) -> Result<u32, ZkError> {
        let n = self.nodes.get_mut(path).ok_or(ZkError::NoNode)?;
        if version.is_some_and(|v| v != n.version) {
            return Err(ZkError::BadVersion);
        }
        n.data = data.to_string();
        n.version += 1;
        Ok(n.version)
    }

    fn get(&self, path: &str) -> Result<(String, u32), ZkError> {
        match self.nodes.get(path) {
            Some(n) => Ok((n.data.clone(), n.version)),
            None if path == "/" => Ok((String::new(), 0)),
            None => Err(ZkError::NoNode),
        }
    }
}

/// Run `effect` on a copy of `s`; keep it if its result is the one seen
/// (or the outcome is unknown), else the observation is impossible here.
fn expect<T: PartialEq, E: PartialEq>(
    s: &ZnodeState,
    seen: &Option<Result<T, E>>,
    effect: impl FnOnce(&mut ZnodeState) -> Result<T, E>,
) -> Option<ZnodeState> {
    let mut next = s.clone();
    let got = effect(&mut next);
    match seen {
        None => Some(next),
        Some(r) if *r == got => Some(next),
        Some(_) => None,
    }
}

/// A write of a session that is gone (`znode::tree::SESSION_BOUND`):
/// answered `SessionExpired`, it changed nothing and its session is not
/// open; a write of a session-bound session closed in this history (and
/// not opened again) changes nothing whatever its answer, which must then
/// be that refusal (ZooKeeper's rule: a late write cannot apply after its
/// session is gone). `None`: neither, the model's usual step.
fn refused_as_gone(s: &ZnodeState, op: &ZnodeOp) -> Option<Option<ZnodeState>> {
    let (session, refused, answered) = match op {
        ZnodeOp::Create {
            session, result, ..
        } => (
            *session,
            result.as_ref().map(|r| r.as_ref().err()),
            result.is_some(),
        ),
        ZnodeOp::Delete {
            session, result, ..
        } => (
            *session,
            result.as_ref().map(|r| r.as_ref().err()),
            result.is_some(),
        ),
        ZnodeOp::SetData {
            session, result, ..
        } => (
            *session,
            result.as_ref().map(|r| r.as_ref().err()),
            result.is_some(),
        ),
        ZnodeOp::Multi {
            session, result, ..
        } => (
            *session,
            result.as_ref().map(|r| r.as_ref().err().map(|e| &e.1)),
            result.is_some(),
        ),
        _ => return None,
    };
    let expired = refused == Some(Some(&ZkError::SessionExpired));
    if s.gone.contains(&session) {
        return Some((!answered || expired).then(|| s.clone()));
    }
    expired.then(|| (!s.sessions.contains(&session)).then(|| s.clone()))
}

/// The znode service as a sequential object.
pub struct ZnodeSpec;

impl Spec for ZnodeSpec {
    type Op = ZnodeOp;
    type State = ZnodeState;

    fn init(&self) -> ZnodeState {
        ZnodeState::default()
    }

    fn step(&self, s: &ZnodeState, op: &ZnodeOp) -> Option<ZnodeState> {
        if let Some(next) = refused_as_gone(s, op) {
            return next;
        }
        match op {
            ZnodeOp::OpenSession { session } => {
                let mut n = s.clone();
                n.sessions.insert(*session);
                n.gone.remove(session);
                Some(n)
            }
            ZnodeOp::CloseSession { session } => {
                let mut n = s.clone();
                n.sessions.remove(session);
                if session_bound(*session) {
                    n.gone.insert(*session);
                }
                n.nodes.retain(|_, node| node.owner != *session);
                Some(n)
            }
            ZnodeOp::Create {
                path,
                data,
                ephemeral,
                sequential,
                session,
                result,
            } => expect(s, result, |n| {
                n.create(path, data, *ephemeral, *sequential, *session)
            }),
            ZnodeOp::Delete {
                path,
                version,
                result,
                ..
            } => expect(s, result, |n| n.delete(path, *version)),
            ZnodeOp::SetData {
                path,
                data,
                version,
                result,
                ..
            } => expect(s, result, |n| n.set(path, data, *version)),
            ZnodeOp::GetData { path, result } => (s.get(path) == *result).then(|| s.clone()),
            ZnodeOp::Exists { path, result } => {
                let v = s
                    .exists(path)
                    .then(|| s.get(path).map(|g| g.1).unwrap_or(0));
                (v == *result).then(|| s.clone())
            }
            ZnodeOp::Children { path, result } => {
                let got = if s.exists(path) {
                    Ok(s.children(path))
                } else {
                    Err(ZkError::NoNode)
                };
                (got == *result).then(|| s.clone())
            }
            ZnodeOp::Resume { session, open } => {
                (s.sessions.contains(session) == *open).then(|| s.clone())
            }
            ZnodeOp::Multi {
                session,
                steps,
                result,
            } => expect(s, result, |n| n.multi(*session, steps)),
        }
    }
}

/// One lock holding as a recipe saw it: the fencing token (the lock node's
/// czxid) and the real-time interval from acquire's return to release's
/// call (`None`: never released, e.g. the holder crashed or paused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holding {
    pub client: u64,
    pub token: u64,
    pub acquired: u64,
    pub released: Option<u64>,
}

/// How two holdings broke mutual exclusion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockViolation {
    /// Two holdings share a fencing token.
    SameToken(Holding, Holding),
    /// A later acquisition (the second) carries a smaller token than an
    /// earlier one (the first: the largest before it): a resource that
    /// remembers the largest token it has seen refuses the newer holder.
    TokenOrder(Holding, Holding),
    /// Two holders at once by real time (their intervals overlap).
    Overlap(Holding, Holding),
}

impl std::fmt::Display for LockViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = |h: &Holding| {
            let until = h
                .released
                .map_or("never released".into(), |r| format!("{r} µs"));
            format!(
                "token {} (client {}, {} µs .. {until})",
                h.token, h.client, h.acquired
            )
        };
        match self {
            LockViolation::SameToken(a, b) => {
                write!(f, "two holds share a token: {} and {}", held(a), held(b))
            }
            LockViolation::TokenOrder(a, b) => write!(
                f,
                "{} was acquired after {} with a smaller token",
                held(b),
                held(a)
            ),
            LockViolation::Overlap(a, b) => {
                write!(f, "two holders at once: {} and {}", held(a), held(b))
            }
        }
    }
}

/// Check a lock's holdings: by fencing token (distinct, and each larger
/// than every token acquired before it) and by real time (no overlap). A
/// session-based lock promises the first only; a holder paused past its
/// session timeout breaks the second (the README explains). Returns every
/// violation found (one `TokenOrder` per hold whose token is too small).
pub fn check_lock(holdings: &[Holding], by_real_time: bool) -> Vec<LockViolation> {
    let mut h = holdings.to_vec();
    h.sort_by_key(|x| (x.acquired, x.token));
    let mut out = Vec::new();
    let mut largest: Option<Holding> = None;
    for (i, a) in h.iter().enumerate() {
        match largest {
            Some(m) if a.token < m.token => out.push(LockViolation::TokenOrder(m, *a)),
            Some(m) if a.token == m.token => {}
            _ => largest = Some(*a),
        }
        for b in &h[i + 1..] {
            if a.token == b.token {
                out.push(LockViolation::SameToken(*a, *b));
            }
            if by_real_time && a.released.is_none_or(|r| r > b.acquired) {
                out.push(LockViolation::Overlap(*a, *b));
            }
        }
    }
    out
}

/// A sequential name handed out twice: in any order of the operations a
/// parent's counter only grows, so two successful sequential creates can
/// never return the same path. A check in linear time that needs no
/// search: the full model finds the same violation, but proving that no
/// order fits can take it exponential time. The first such path, if any.
///
/// For the same reason a sequential create refused with `NodeExists` is
/// impossible unless a plain create named a node under its prefix.
pub fn reused_sequential_name(ops: &[crate::SpecOp<ZnodeOp>]) -> Option<String> {
    let mut seen = BTreeSet::new();
    let mut plain: Vec<&str> = (ops.iter())
        .filter_map(|o| match &o.op {
            ZnodeOp::Create {
                sequential: false,
                path,
                ..
            } => Some(path.as_str()),
            _ => None,
        })
        .collect();
    // A multi's creates: its plain ones explain a refusal as above, its
    // sequential ones hand out names.
    for o in ops {
        let (made, named) = multi::creates(&o.op);
        plain.extend(named);
        for (_, path) in made {
            if !seen.insert(path) {
                return Some(path.to_string());
            }
        }
    }
    for o in ops {
        let ZnodeOp::Create {
            sequential: true,
            path: prefix,
            result: Some(result),
            ..
        } = &o.op
        else {
            continue;
        };
        match result {
            Ok(path) if !seen.insert(path.as_str()) => return Some(path.clone()),
            Err(ZkError::NodeExists) if !plain.iter().any(|p| p.starts_with(prefix.as_str())) => {
                return Some(format!("{prefix} (refused: NodeExists)"));
            }
            _ => {}
        }
    }
    None
}

/// Paths of the znode workload: few, so that operations collide.
pub const WORKLOAD_PATHS: [&str; 3] = ["/a", "/b", "/a/c"];

/// Where the simulator's workload creates TTL nodes (`/ttl-<client>`),
/// which the model does not hold (their deletion is the leader's, at a
/// time no client sees; invariant 9 of Zab's checks it instead): their
/// creates are not judged and a child list of `/` is judged without them.
pub const TTL_PATH_PREFIX: &str = "/ttl-";

/// Whether `name`, a child of `parent`, is one of the workload's TTL
/// nodes ([`TTL_PATH_PREFIX`]).
fn ttl_child(parent: &str, name: &str) -> bool {
    parent == "/"
        && TTL_PATH_PREFIX
            .strip_prefix('/')
            .is_some_and(|p| name.starts_with(p))
}

/// Operation `n` of client `c` in the znode workload of `quorumkv sim
/// --znode` and `quorumkv chaos --workload znode`: a session opened first
/// and now and then reopened or closed; creates (persistent or ephemeral)
/// of `/a`, `/b`, `/a/c`, sequential children of `/q` (created by every
/// client's second operation); deletes and sets, conditional or not; reads
/// with and without watches; small multis of those writes and checks.
pub fn workload_op(
    rng: &mut impl quorumkv_core::rng::Draw,
    c: usize,
    n: u32,
    session_timeout_ms: u64,
) -> quorumkv_core::znode::ZnodeOp {
    use quorumkv_core::znode::ZnodeOp as Op;
    let r = rng;
    let path = WORKLOAD_PATHS[r.below(WORKLOAD_PATHS.len() as u64) as usize].to_string();
    let version = match r.below(3) {
        0 => Some(r.below(3) as u32),
        _ => None,
    };
    let data = bytes::Bytes::from(format!("c{c}.{n}"));
    // Every other read sets a watch (not drawn: the random stream stays as
    // it was before watches).
    let watch = n % 2 == 1;
    match (n, r.below(100)) {
        (0, _) | (_, 0..=2) => Op::OpenSession {
            timeout_ms: session_timeout_ms,
        },
        (1, _) => Op::Create {
            path: "/q".into(),
            data,
            ephemeral: false,
            sequential: false,
        },
        (_, 3..=4) => Op::CloseSession,
        (_, 5..=24) => Op::Create {
            path,
            data,
            ephemeral: r.chance(0.5),
            sequential: false,
        },
        (_, 25..=34) => Op::Create {
            path: "/q/n-".into(),
            data,
            ephemeral: r.chance(0.5),
            sequential: true,
        },
        (_, 35..=44) => Op::Delete { path, version },
        (_, 45..=59) => Op::SetData {
            path,
            data,
            version,
        },
        (_, 60..=74) => Op::GetData {
            path,
            watch: r.chance(0.5),
        },
        (_, 75..=84) => Op::Exists {
            path,
            watch: r.chance(0.5),
        },
        (_, 85..=94) => Op::GetChildren {
            path: if r.chance(0.5) { "/q" } else { "/" }.into(),
            watch,
        },
        _ => multi::workload_multi(r, c, n),
    }
}

/// The model's operation for a znode request of `session` and the server's
/// answer (`None`: unknown outcome); `None` for a request the model does
/// not constrain (a read with no answer, ping, sync, SetWatches, a
/// multiRead: the workload asks for none). An
/// answer of the wrong kind is refused by the model (a server bug).
pub fn observed(
    session: u64,
    op: &quorumkv_core::znode::ZnodeOp,
    reply: Option<&quorumkv_core::znode::ZnodeReply>,
) -> Option<ZnodeOp> {
    use quorumkv_core::op::text;
    use quorumkv_core::znode::{ZnodeOp as Asked, ZnodeReply as R};
    let err = answer_error;
    if unconstrained(op) {
        return None;
    }
    Some(match op {
        Asked::OpenSession { .. } => ZnodeOp::OpenSession { session },
        Asked::CloseSession => ZnodeOp::CloseSession { session },
        Asked::Create {
            path,
            data,
            ephemeral,
            sequential,
        } => ZnodeOp::Create {
            path: path.clone(),
            data: text(data),
            ephemeral: *ephemeral,
            sequential: *sequential,
            session,
            result: reply.map(|r| match r {
                R::Created { path, .. } => Ok(path.clone()),
                other => Err(err(other)),
            }),
        },
        Asked::Delete { path, version } => ZnodeOp::Delete {
            path: path.clone(),
            version: *version,
            session,
            result: reply.map(|r| match r {
                R::Deleted => Ok(()),
                other => Err(err(other)),
            }),
        },
        Asked::SetData {
            path,
            data,
            version,
        } => ZnodeOp::SetData {
            path: path.clone(),
            data: text(data),
            version: *version,
            session,
            result: reply.map(|r| match r {
                R::Set(stat) => Ok(stat.version),
                other => Err(err(other)),
            }),
        },
        Asked::GetData { .. }
        | Asked::Exists { .. }
        | Asked::GetChildren { .. }
        | Asked::ResumeSession => return observed_read(session, op, reply?),
        // ACLs are outside the model (every node open to all; the workload
        // asks for no ACL, identity or getACL): a create with an ACL is
        // checked as a create; setACL, getACL, addAuth constrain nothing.
        Asked::CreateWithAcl {
            path,
            data,
            ephemeral,
            sequential,
            ..
        } => {
            let plain = Asked::Create {
                path: path.clone(),
                data: data.clone(),
                ephemeral: *ephemeral,
                sequential: *sequential,
            };
            return observed(session, &plain, reply);
        }
        Asked::Multi { ops } if ops.iter().any(multi::outside_model) => return None,
        Asked::Multi { ops } => multi::observed(session, ops, reply),
        _ => return None, // `unconstrained`
    })
}

/// The requests the model does not constrain: they change nothing it
/// holds, or (containers, TTL nodes) the workload asks for none (the
/// model they would need: the docs' checker section).
fn unconstrained(op: &quorumkv_core::znode::ZnodeOp) -> bool {
    use quorumkv_core::znode::ZnodeOp as Asked;
    matches!(
        op,
        Asked::MultiRead { .. }
            | Asked::Ping
            | Asked::Sync
            | Asked::SetWatches { .. }
            | Asked::AddAuth { .. }
            | Asked::GetAcl { .. }
            | Asked::SetAcl { .. }
            | Asked::AddWatch { .. }
            | Asked::RemoveWatches { .. }
            | Asked::CreateContainer { .. }
            | Asked::DeleteContainer { .. }
            | Asked::CreateTtl { .. }
            | Asked::DeleteTtl { .. }
            | Asked::GetEphemerals { .. }
            | Asked::WhoAmI
    )
}

/// The error a znode answer reports; an answer of the wrong kind reads as
/// `BadArguments`, which the model never gives (a server bug).
fn answer_error(r: &quorumkv_core::znode::ZnodeReply) -> ZkError {
    match r {
        quorumkv_core::znode::ZnodeReply::Error(e) => e.clone(),
        other => ZkError::BadArguments(format!("unexpected answer {other:?}")),
    }
}

/// [`observed`] for a read (or a resume) that was answered; `None` for a
/// request that is not one, or an `exists` or a resume with an answer of
/// the wrong kind.
fn observed_read(
    session: u64,
    op: &quorumkv_core::znode::ZnodeOp,
    reply: &quorumkv_core::znode::ZnodeReply,
) -> Option<ZnodeOp> {
    use quorumkv_core::op::text;
    use quorumkv_core::znode::{ZnodeOp as Asked, ZnodeReply as R};
    let err = answer_error;
    Some(match op {
        Asked::GetData { path, .. } => ZnodeOp::GetData {
            path: path.clone(),
            result: match reply {
                R::Data { data, stat } => Ok((text(data), stat.version)),
                other => Err(err(other)),
            },
        },
        Asked::Exists { path, .. } => ZnodeOp::Exists {
            path: path.clone(),
            result: match reply {
                R::Exists(stat) => stat.as_ref().map(|s| s.version),
                _ => return None,
            },
        },
        Asked::GetChildren { path, .. } => ZnodeOp::Children {
            path: path.clone(),
            result: match reply {
                R::Children(names) => Ok((names.iter())
                    .filter(|n| !ttl_child(path, n))
                    .cloned()
                    .collect()),
                other => Err(err(other)),
            },
        },
        Asked::ResumeSession => ZnodeOp::Resume {
            session,
            open: match reply {
                R::Resumed { .. } => true,
                R::Error(ZkError::SessionExpired) => false,
                _ => return None,
            },
        },
        _ => return None,
    })
}

/// The verdict on a znode history, the whole tree as one object: a
/// sequential name handed out twice is found first, without search
/// ([`reused_sequential_name`]); then the model's search, within `timeout`.
pub fn check_history(
    ops: Vec<crate::SpecOp<ZnodeOp>>,
    timeout: std::time::Duration,
) -> (crate::Verdict, String) {
    use crate::Verdict;
    let n = ops.len();
    if let Some(path) = reused_sequential_name(&ops) {
        return (
            Verdict::NotLinearizable,
            format!("znode history of {n} operations: sequential name handed out again: {path}"),
        );
    }
    let verdict = search(ops, timeout);
    let why = match verdict {
        Verdict::Linearizable => format!("znode history of {n} operations: linearizable"),
        Verdict::Unknown => format!(
            "the znode checker gave up on {n} operations (budget: {STEP_BUDGET} steps, {timeout:?})"
        ),
        _ => format!("znode history of {n} operations: no order agrees with the znode model"),
    };
    (verdict, why)
}

/// An unknown-outcome create or set whose data, written by no other
/// operation, a `getData` returned took effect before that read's
/// linearization point, so before its return: such a write gets the
/// earliest such return as its own. It must then be placed (it did take
/// effect) and before that time, which prunes the search and changes no
/// verdict: every valid order already places it so.
fn bound_observed_unknown_writes(ops: &mut [crate::SpecOp<ZnodeOp>]) {
    let data_of = |op: &ZnodeOp| match op {
        ZnodeOp::Create { data, .. } | ZnodeOp::SetData { data, .. } => Some(data.clone()),
        _ => None,
    };
    let mut writers: BTreeMap<String, usize> = BTreeMap::new();
    for d in ops.iter().filter_map(|o| data_of(&o.op)) {
        *writers.entry(d).or_default() += 1;
    }
    // A multi's writes count as writers (its own outcome is not bound).
    for o in ops.iter() {
        if let ZnodeOp::Multi { steps, .. } = &o.op {
            for s in steps {
                if let Step::Create { data, .. } | Step::SetData { data, .. } = s {
                    *writers.entry(data.clone()).or_default() += 1;
                }
            }
        }
    }
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for o in ops.iter() {
        if let (
            ZnodeOp::GetData {
                result: Ok((d, _)), ..
            },
            Some(r),
        ) = (&o.op, o.ret)
        {
            let e = seen.entry(d.clone()).or_insert(r);
            *e = (*e).min(r);
        }
    }
    for o in ops.iter_mut().filter(|o| o.ret.is_none()) {
        let Some(d) = data_of(&o.op) else { continue };
        if writers.get(&d) == Some(&1) {
            if let Some(&r) = seen.get(&d) {
                o.ret = Some(r.max(o.call));
            }
        }
    }
}

/// The spans (sorted by call) and the stepper the search runs on;
/// `succeed[i]`: operation `i`, a multi of unknown outcome, may be placed
/// only where it succeeds.
fn compile(
    mut ops: Vec<crate::SpecOp<ZnodeOp>>,
    succeed: Vec<bool>,
) -> (Vec<crate::search::Span>, stepper::ZnodeStepper) {
    bound_observed_unknown_writes(&mut ops);
    let mut ops: Vec<_> = ops.into_iter().zip(succeed).collect();
    ops.sort_by_key(|(o, _)| o.call);
    let spans = (ops.iter())
        .map(|(o, _)| crate::search::Span {
            call: o.call,
            ret: o.ret,
        })
        .collect();
    let unknown: Vec<bool> = ops.iter().map(|(o, _)| o.ret.is_none()).collect();
    let (ops, succeed): (Vec<_>, Vec<_>) = ops.into_iter().map(|(o, s)| (o.op, s)).unzip();
    let stepper = stepper::ZnodeStepper::new(ops, &unknown).succeeding(succeed);
    (spans, stepper)
}

/// Search steps a znode history gets at most (one per candidate tried or
/// backtrack), across both phases of [`search`]: the budget that decides
/// "unknown", so that the verdict does not move with the machine's load.
/// The caller's wall-clock timeout still caps it.
pub const STEP_BUDGET: u64 = 2_000_000;

/// Steps of the lazy first phase at most (see [`search`]).
const LAZY_STEPS: u64 = STEP_BUDGET / 4;

/// The verdict of the search: by parts first when the history splits
/// ([`split`]: the parts' linearizations merged and replayed through the
/// whole model prove it; a part with none sends it to the whole search),
/// with at most three quarters of the budget; else, or if that decides nothing, the
/// whole history with the steps left.
fn search(ops: Vec<crate::SpecOp<ZnodeOp>>, timeout: std::time::Duration) -> crate::Verdict {
    let deadline = crate::search::Deadline {
        at: std::time::Instant::now().checked_add(timeout),
        cancel: None,
    };
    let mut left = STEP_BUDGET;
    if let Some(parts) = split::split(&ops) {
        if let Some(v) = by_parts(&ops, parts, deadline, &mut left) {
            return v;
        }
    }
    search_within(ops, deadline, left).0
}

/// The verdict from the parts of a history, if they give one; `left`
/// loses the steps spent.
fn by_parts(
    ops: &[crate::SpecOp<ZnodeOp>],
    parts: split::Parts,
    deadline: crate::search::Deadline<'_>,
    left: &mut u64,
) -> Option<crate::Verdict> {
    use crate::Verdict;
    let budget = *left * 3 / 4;
    let (mut spent, mut orders, mut open) = (0, Vec::new(), false);
    for (part, origin) in parts.ops.iter().zip(&parts.origin) {
        let (v, order, steps) = search_within(part.clone(), deadline, budget.saturating_sub(spent));
        spent += steps;
        match v {
            Verdict::Linearizable => orders.push(order.iter().map(|&k| origin[k]).collect()),
            // A part with no order is left to the whole search: a proof
            // by parts is replayed through the whole model (sound by
            // construction), a refutation by one would rest on the split
            // alone (a kazoo history under kills was refused by a part).
            _ => {
                open = true;
                break;
            }
        }
    }
    let found = match open {
        true => None,
        false => {
            // The unknown outcomes the parts placed, before `agree` forces
            // more (`forced`: after).
            let placed: BTreeSet<usize> = (orders.iter().flatten())
                .copied()
                .filter(|&i: &usize| ops[i].ret.is_none())
                .collect();
            let mut forced = placed.clone();
            let first = orders.clone();
            agree(
                ops,
                &parts,
                orders,
                deadline,
                budget,
                &mut spent,
                &mut forced,
            )
            .or_else(|| {
                // Multis as the parts saw them, then only where they succeed.
                [false, true].into_iter().find_map(|strict| {
                    pin_shared(ops, &parts, &first, strict, deadline, budget, &mut spent)
                })
            })
            .or_else(|| {
                // Then the unknown outcomes of more than one part.
                let mut shared = forced.clone();
                let mut parts_of = vec![0u32; ops.len()];
                for &i in parts.origin.iter().flatten() {
                    parts_of[i] += 1;
                }
                shared.extend((0..ops.len()).filter(|&i| ops[i].ret.is_none() && parts_of[i] > 1));
                let mut tried: Vec<BTreeSet<usize>> = Vec::new();
                for keep in [placed, forced, shared] {
                    if tried.contains(&keep) {
                        continue;
                    }
                    let cap = budget.saturating_sub(spent).min(WITH_ONLY_STEPS);
                    if let Some(v) = with_only(ops, &keep, deadline, cap, &mut spent) {
                        return Some(v);
                    }
                    tried.push(keep);
                }
                None
            })
            .or_else(|| joined(ops, parts.ops.len(), deadline, budget, &mut spent))
        }
    };
    *left = left.saturating_sub(spent);
    found
}

/// Where the parts' orders do not agree however searched, the history
/// split again with two of its parts joined into one (each pair in turn,
/// while there are more than two parts): the joined part orders what the
/// two share itself (a session's open or expiry, a multi over both), and
/// the third part rarely shares as much. Each try gets a share of what is
/// left of `budget`; a proof still needs the merged replay.
fn joined(
    ops: &[crate::SpecOp<ZnodeOp>],
    parts: usize,
    deadline: crate::search::Deadline<'_>,
    budget: u64,
    spent: &mut u64,
) -> Option<crate::Verdict> {
    if parts < 3 {
        return None;
    }
    let pairs: Vec<(usize, usize)> = (0..parts)
        .flat_map(|x| (x + 1..parts).map(move |y| (x, y)))
        .take(3)
        .collect();
    let share = budget.saturating_sub(*spent) / pairs.len() as u64;
    pairs.into_iter().find_map(|pair| {
        let coarser = split::split_joining(ops, &[pair])?;
        // `by_parts` spends at most three quarters of what it is given.
        let given = share.saturating_mul(4) / 3;
        let mut left = given;
        let v = by_parts(ops, coarser, deadline, &mut left);
        *spent += given - left;
        v
    })
}

/// The parts searched again with every unknown outcome they share pinned
/// to the real-time window the parts' first orders (`orders`) gave it:
/// after every operation placed before it in an order that placed it (its
/// call moved to the latest of their calls), before every one placed after
/// it (given the earliest of their returns), in every part; one that no
/// part placed is left out of all. The parts then agree on what happened
/// and roughly when, which the merge needs: each part otherwise places a
/// shared session's open or expiry wherever suits it alone. Only a merged
/// order replayed through the whole model counts (moving a call later and
/// forcing an outcome only narrow the search), so this may prove a
/// history, never refute one. `strict`: a multi they share must succeed
/// in each (else one part may place it failed and another succeeded).
fn pin_shared(
    ops: &[crate::SpecOp<ZnodeOp>],
    parts: &split::Parts,
    orders: &[Vec<usize>],
    strict: bool,
    deadline: crate::search::Deadline<'_>,
    budget: u64,
    spent: &mut u64,
) -> Option<crate::Verdict> {
    use crate::Verdict;
    let mut shares = vec![0u32; ops.len()];
    for &i in parts.origin.iter().flatten() {
        shares[i] += 1;
    }
    let shared = |i: usize| shares[i] > 1 && ops[i].ret.is_none();
    let window = windows(ops, parts, orders, &shared);
    if window.values().any(|&(lo, hi)| lo > hi) {
        return None;
    }
    let mut pinned = Vec::with_capacity(orders.len());
    for (p, order) in orders.iter().enumerate() {
        if !parts.origin[p].iter().any(|&i| shared(i)) {
            pinned.push(order.clone());
            continue;
        }
        let mut items: Vec<(crate::SpecOp<ZnodeOp>, usize)> = (parts.origin[p].iter())
            .zip(&parts.ops[p])
            .filter_map(|(&i, op)| {
                let mut op = op.clone();
                if shared(i) {
                    let &(lo, hi) = window.get(&i)?;
                    (op.call, op.ret) = (lo, Some(hi));
                }
                Some((op, i))
            })
            .collect();
        items.sort_by_key(|(o, _)| o.call);
        let (part, origin): (Vec<_>, Vec<usize>) = items.into_iter().unzip();
        // `strict`: a shared multi happened in every part or in none; each
        // part sees only its own steps, so each must see them succeed.
        let succeed = origin.iter().map(|&i| strict && shared(i)).collect();
        let left = budget.saturating_sub(*spent);
        let (v, found, steps) = search_succeeding(part, succeed, deadline, left);
        *spent += steps;
        if v != Verdict::Linearizable {
            return None;
        }
        pinned.push(found.iter().map(|&k| origin[k]).collect());
    }
    let merged = split::merge(ops, parts, &pinned)?;
    split::is_linearization(ops, &merged).then_some(Verdict::Linearizable)
}

/// The real-time window of each shared unknown outcome the `orders`
/// placed ([`pin_shared`]): after the operations placed before it that it
/// conflicts with, before those placed after it; intersected over the
/// orders that placed it.
fn windows(
    ops: &[crate::SpecOp<ZnodeOp>],
    parts: &split::Parts,
    orders: &[Vec<usize>],
    shared: &impl Fn(usize) -> bool,
) -> BTreeMap<usize, (u64, u64)> {
    let end = u64::MAX - 1;
    let mut window: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
    for order in orders {
        for (k, &i) in order.iter().enumerate().filter(|&(_, &i)| shared(i)) {
            let tied = |j: &&usize| parts.conflict(&ops[i].op, &ops[**j].op);
            let lo = (order[..k].iter().filter(tied))
                .map(|&j| ops[j].call)
                .fold(ops[i].call, u64::max);
            let hi = (order[k + 1..].iter().filter(tied))
                .filter_map(|&j| ops[j].ret.map(|r| r.max(ops[j].call)))
                .fold(end, u64::min);
            let w = window.entry(i).or_insert((0, end));
            *w = (w.0.max(lo), w.1.min(hi));
        }
    }
    window
}

/// Steps of one [`with_only`] search at most.
const WITH_ONLY_STEPS: u64 = STEP_BUDGET / 8;

/// The whole history searched with only the unknown outcomes in `placed`
/// (those the parts placed), the others taken never to have happened,
/// within `budget` steps: a linearization found, replayed
/// through the whole model, proves the history (an unknown outcome may
/// never take effect); a failure proves nothing. The parts' merged
/// orders fail when they place a shared operation (a session's open or
/// expiry, a multi) at points that cannot agree; the whole search then
/// orders everything at once, but without the branching of the unknown
/// outcomes nobody needed.
fn with_only(
    ops: &[crate::SpecOp<ZnodeOp>],
    placed: &BTreeSet<usize>,
    deadline: crate::search::Deadline<'_>,
    budget: u64,
    spent: &mut u64,
) -> Option<crate::Verdict> {
    use crate::Verdict;
    let mut keep: Vec<usize> = (0..ops.len())
        .filter(|&i| ops[i].ret.is_some() || placed.contains(&i))
        .collect();
    // Sorted by call, so that the order found is in these indices.
    keep.sort_by_key(|&i| ops[i].call);
    let sub = keep.iter().map(|&i| ops[i].clone()).collect();
    let (v, order, steps) = search_within(sub, deadline, budget);
    *spent += steps;
    let order: Vec<usize> = order.iter().map(|&k| keep[k]).collect();
    (v == Verdict::Linearizable && split::is_linearization(ops, &order))
        .then_some(Verdict::Linearizable)
}

/// Rounds of merging the parts' linearizations (`orders`) and replaying
/// the merged order through the whole model. When that fails, every part
/// that left out an unknown outcome another part placed is searched again
/// with it forced (given a return at the very end): such a search can
/// only prove, never refute, so a part it fails sends the history to the
/// whole search. `seen` gains the unknown outcomes the forced searches
/// placed.
fn agree(
    ops: &[crate::SpecOp<ZnodeOp>],
    parts: &split::Parts,
    mut orders: Vec<Vec<usize>>,
    deadline: crate::search::Deadline<'_>,
    budget: u64,
    spent: &mut u64,
    seen: &mut BTreeSet<usize>,
) -> Option<crate::Verdict> {
    use crate::Verdict;
    for _round in 0..4 {
        let merged = split::merge(ops, parts, &orders);
        if merged.is_some_and(|m| split::is_linearization(ops, &m)) {
            return Some(Verdict::Linearizable);
        }
        let placed: BTreeSet<usize> = (orders.iter().flatten())
            .filter(|&&i| ops[i].ret.is_none())
            .copied()
            .collect();
        let mut changed = false;
        for (p, order) in orders.iter_mut().enumerate() {
            let mut part = parts.ops[p].clone();
            let mut forced = false;
            for (k, i) in parts.origin[p].iter().enumerate() {
                if placed.contains(i) && !order.contains(i) {
                    part[k].ret = Some(u64::MAX - 1);
                    forced = true;
                }
            }
            if !forced {
                continue;
            }
            let (v, found, steps) = search_within(part, deadline, budget.saturating_sub(*spent));
            *spent += steps;
            if v != Verdict::Linearizable {
                return None;
            }
            *order = found.iter().map(|&k| parts.origin[p][k]).collect();
            seen.extend(order.iter().filter(|&&i| ops[i].ret.is_none()));
            changed = true;
        }
        if !changed {
            return None;
        }
    }
    None
}

/// The model's search over `ops` (sorted by call, or the order returned
/// is by call), with [`stepper::ZnodeStepper`], in two phases, within
/// `budget` steps: the verdict, a linearization (operation indices) if
/// one was found, the steps spent. The first phase
/// ([`Search::lazy`](crate::search::Search::lazy)) places an unknown
/// outcome only where the operation of the first remaining return is
/// illegal: it explores part of the tree, so only a linearization it finds
/// counts. Otherwise the full search decides, with the steps left.
fn search_within(
    ops: Vec<crate::SpecOp<ZnodeOp>>,
    deadline: crate::search::Deadline<'_>,
    budget: u64,
) -> (crate::Verdict, Vec<usize>, u64) {
    let succeed = vec![false; ops.len()];
    search_succeeding(ops, succeed, deadline, budget)
}

/// [`search_within`] where a multi `i` with `succeed[i]` may only succeed.
fn search_succeeding(
    ops: Vec<crate::SpecOp<ZnodeOp>>,
    succeed: Vec<bool>,
    deadline: crate::search::Deadline<'_>,
    budget: u64,
) -> (crate::Verdict, Vec<usize>, u64) {
    use crate::search::{Found, Search, Slice, MEMO_CAP};
    use crate::Verdict;
    let (spans, mut stepper) = compile(ops, succeed);
    let slice = |steps| Slice {
        steps,
        memo_cap: MEMO_CAP,
    };
    let mut lazy = Search::lazy(&spans, 0);
    let spent = match lazy.run(&mut stepper, deadline, slice(budget.min(LAZY_STEPS))) {
        Found::Linearizable => {
            return (Verdict::Linearizable, lazy.placed(), lazy.progress().steps)
        }
        Found::Timeout => return (Verdict::Unknown, Vec::new(), lazy.progress().steps),
        Found::Illegal | Found::Paused => lazy.progress().steps,
    };
    drop(lazy);
    let mut full = Search::new(&spans, 0);
    let found = full.run(&mut stepper, deadline, slice(budget.saturating_sub(spent)));
    let steps = spent + full.progress().steps;
    match found {
        Found::Linearizable => (Verdict::Linearizable, full.placed(), steps),
        Found::Illegal => (Verdict::NotLinearizable, Vec::new(), steps),
        Found::Timeout | Found::Paused => (Verdict::Unknown, Vec::new(), steps),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{check_spec, SpecOp, Verdict};

    #[test]
    fn a_sequential_name_returned_twice_is_found_without_search() {
        let twice = vec![
            at(0, 1, create("/q/n-", true, false, 1, Ok("/q/n-0000000000"))),
            at(2, 3, create("/q/n-", true, false, 2, Ok("/q/n-0000000001"))),
            at(4, 5, create("/q/n-", true, false, 1, Ok("/q/n-0000000000"))),
        ];
        assert_eq!(
            reused_sequential_name(&twice).as_deref(),
            Some("/q/n-0000000000")
        );
        assert_ne!(verdict(twice.clone()), Verdict::Linearizable);
        // The same name by two plain creates is the model's business.
        let plain = vec![
            at(0, 1, create("/q/a", false, false, 1, Ok("/q/a"))),
            at(2, 3, create("/q/a", false, false, 1, Ok("/q/a"))),
        ];
        assert_eq!(reused_sequential_name(&plain), None);
        assert_eq!(reused_sequential_name(&twice[..2]), None);
        // Refused as existing: only a plain create under the prefix explains it.
        let refused = at(
            6,
            7,
            create("/q/n-", true, false, 1, Err(ZkError::NodeExists)),
        );
        let found = reused_sequential_name(&[twice[0].clone(), refused.clone()]);
        assert_eq!(found.as_deref(), Some("/q/n- (refused: NodeExists)"));
        let named = at(
            0,
            1,
            create("/q/n-0000000000", false, false, 1, Ok("/q/n-0000000000")),
        );
        assert_eq!(reused_sequential_name(&[named, refused]), None);
    }

    fn at<O>(call: u64, ret: u64, op: O) -> SpecOp<O> {
        SpecOp {
            call,
            ret: Some(ret),
            op,
        }
    }

    fn create(path: &str, seq: bool, eph: bool, session: u64, r: Result<&str, ZkError>) -> ZnodeOp {
        ZnodeOp::Create {
            path: path.into(),
            data: "d".into(),
            ephemeral: eph,
            sequential: seq,
            session,
            result: Some(r.map(str::to_string)),
        }
    }

    fn children(path: &str, names: &[&str]) -> ZnodeOp {
        ZnodeOp::Children {
            path: path.into(),
            result: Ok(names.iter().map(|s| s.to_string()).collect()),
        }
    }

    fn verdict(ops: Vec<SpecOp<ZnodeOp>>) -> Verdict {
        check_spec(&ZnodeSpec, &[ops], None).remove(0)
    }

    /// An unknown outcome that must be placed while the first operation
    /// to return is legal: the lazy phase misses the order, the full
    /// search finds it.
    #[test]
    fn the_lazy_phase_is_not_the_verdict() {
        use crate::search::{Deadline, Found, Search, Slice, MEMO_CAP};
        let s = 7;
        let ops = vec![
            SpecOp {
                call: 0,
                ret: None,
                op: ZnodeOp::OpenSession { session: s },
            },
            // Needs the session open, returns after the close below...
            at(1, 10, create("/e", false, true, s, Ok("/e"))),
            at(2, 5, ZnodeOp::CloseSession { session: s }),
            // ...which took the ephemeral with it: open, create, close.
            at(
                11,
                12,
                ZnodeOp::Exists {
                    path: "/e".into(),
                    result: None,
                },
            ),
        ];
        let (spans, mut stepper) = compile(ops.clone(), vec![false; ops.len()]);
        let slice = Slice {
            steps: 1000,
            memo_cap: MEMO_CAP,
        };
        let lazy = Search::lazy(&spans, 0).run(&mut stepper, Deadline::default(), slice);
        assert_eq!(lazy, Found::Illegal);
        let full = Search::new(&spans, 0).run(&mut stepper, Deadline::default(), slice);
        assert_eq!(full, Found::Linearizable);
        assert_eq!(
            check_history(ops, std::time::Duration::from_secs(10)).0,
            Verdict::Linearizable
        );
    }

    /// The whole search over the parts' unknown outcomes only: it proves
    /// with those an order needs, never without them, and never a history
    /// no order fits.
    #[test]
    fn a_search_over_some_unknown_outcomes_only_proves() {
        use crate::search::Deadline;
        let unknown = |call, op| SpecOp {
            call,
            ret: None,
            op,
        };
        let read = |r: Result<(String, u32), ZkError>| ZnodeOp::GetData {
            path: "/a".into(),
            result: r,
        };
        let mut made = create("/a", false, false, 1, Ok("/a"));
        if let ZnodeOp::Create { result, .. } = &mut made {
            *result = None;
        }
        let ops = vec![
            unknown(0, made),
            unknown(1, ZnodeOp::OpenSession { session: 4 }),
            at(5, 6, read(Ok(("d".into(), 0)))),
        ];
        let run = |ops: &[SpecOp<ZnodeOp>], keep: &[usize]| {
            let keep: BTreeSet<usize> = keep.iter().copied().collect();
            let mut spent = 0;
            let v = with_only(ops, &keep, Deadline::default(), 1000, &mut spent);
            assert!(spent > 0);
            v
        };
        assert_eq!(run(&ops, &[0]), Some(Verdict::Linearizable));
        assert_eq!(run(&ops, &[0, 1]), Some(Verdict::Linearizable));
        assert_eq!(run(&ops, &[1]), None, "the read needs the create");
        let mut stale = ops.clone();
        stale[2].op = read(Ok(("d".into(), 1)));
        assert_eq!(run(&stale, &[0, 1]), None);
    }

    /// A resume answered open needs its session open at a point of its
    /// interval; one answered expired, closed (or never opened).
    #[test]
    fn a_write_of_a_session_that_is_gone_changes_nothing() {
        use quorumkv_core::znode::tree::SESSION_BOUND;
        let (bound, unbound) = (1 << 63 | SESSION_BOUND | 7, 1 << 63 | 7);
        fn gone<T>() -> Option<Result<T, ZkError>> {
            Some(Err(ZkError::SessionExpired))
        }
        let delete = |session, result| ZnodeOp::Delete {
            path: "/a".into(),
            version: None,
            session,
            result,
        };
        let set = |session, result| ZnodeOp::SetData {
            path: "/a".into(),
            data: "x".into(),
            version: None,
            session,
            result,
        };
        // The session opens and closes; another client then creates /a,
        // and a read at the end sees what is left of it.
        let h = |session, late: ZnodeOp, read: Result<(String, u32), ZkError>| {
            let mut ops = vec![
                at(0, 1, ZnodeOp::OpenSession { session }),
                at(4, 5, ZnodeOp::CloseSession { session }),
                at(6, 7, create("/a", false, false, 9, Ok("/a"))),
                at(
                    10,
                    11,
                    ZnodeOp::GetData {
                        path: "/a".into(),
                        result: read,
                    },
                ),
            ];
            ops.push(SpecOp {
                call: 2,
                ret: None,
                op: late,
            });
            verdict(ops)
        };
        let intact = || Ok(("d".to_string(), 0));
        for who in [bound, unbound] {
            // Refused: nothing changed.
            assert_eq!(h(who, delete(who, gone()), intact()), Verdict::Linearizable);
            assert_eq!(h(who, set(who, gone()), intact()), Verdict::Linearizable);
            let late_create = create("/b", false, false, who, Err(ZkError::SessionExpired));
            assert_eq!(h(who, late_create, intact()), Verdict::Linearizable);
            // Unknown, and nothing changed: fine either way.
            assert_eq!(h(who, delete(who, None), intact()), Verdict::Linearizable);
        }
        // An unknown late delete that took the other client's node: a
        // sessionless write may, a session-bound one may not.
        let taken = Err(ZkError::NoNode);
        assert_eq!(
            h(unbound, delete(unbound, None), taken.clone()),
            Verdict::Linearizable
        );
        assert_ne!(h(bound, delete(bound, None), taken), Verdict::Linearizable);
        let changed = Ok(("x".to_string(), 1));
        assert_eq!(
            h(unbound, set(unbound, None), changed.clone()),
            Verdict::Linearizable
        );
        assert_ne!(h(bound, set(bound, None), changed), Verdict::Linearizable);
        // Answered after the close: refused, or no answer, and nothing changed.
        let after_close = |late: ZnodeOp| {
            verdict(vec![
                at(0, 1, ZnodeOp::OpenSession { session: bound }),
                at(2, 3, ZnodeOp::CloseSession { session: bound }),
                at(4, 5, create("/a", false, false, 9, Ok("/a"))),
                at(6, 7, late),
                at(
                    8,
                    9,
                    ZnodeOp::GetData {
                        path: "/a".into(),
                        result: intact(),
                    },
                ),
            ])
        };
        let refused_create = create("/b", false, false, bound, Err(ZkError::SessionExpired));
        assert_eq!(after_close(refused_create), Verdict::Linearizable);
        let refused_multi = ZnodeOp::Multi {
            session: bound,
            steps: vec![Step::Delete {
                path: "/a".into(),
                version: None,
            }],
            result: Some(Err((0, ZkError::SessionExpired))),
        };
        assert_eq!(after_close(refused_multi), Verdict::Linearizable);
        assert_eq!(after_close(delete(bound, None)), Verdict::Linearizable);
        assert_ne!(
            after_close(delete(bound, Some(Ok(())))),
            Verdict::Linearizable
        );
        // While the session is open, `SessionExpired` is no answer.
        let early = at(
            2,
            3,
            create("/b", false, false, bound, Err(ZkError::SessionExpired)),
        );
        let open = at(0, 1, ZnodeOp::OpenSession { session: bound });
        assert_ne!(verdict(vec![open, early]), Verdict::Linearizable);
    }

    #[test]
    fn a_resume_sees_its_session_open_or_closed() {
        use quorumkv_core::znode::{ZnodeOp as Asked, ZnodeReply as R};
        let resume = |open| ZnodeOp::Resume { session: 7, open };
        let open = at(0, 1, ZnodeOp::OpenSession { session: 7 });
        let close = at(4, 5, ZnodeOp::CloseSession { session: 7 });
        let v = |r: SpecOp<ZnodeOp>| verdict(vec![open.clone(), r, close.clone()]);
        assert_eq!(v(at(2, 3, resume(true))), Verdict::Linearizable);
        assert_ne!(v(at(2, 3, resume(false))), Verdict::Linearizable);
        assert_eq!(v(at(6, 7, resume(false))), Verdict::Linearizable);
        assert_ne!(v(at(6, 7, resume(true))), Verdict::Linearizable);
        // Overlapping the close: either answer.
        assert_eq!(v(at(3, 6, resume(true))), Verdict::Linearizable);
        assert_eq!(v(at(3, 6, resume(false))), Verdict::Linearizable);
        // From the service's answers.
        let resumed = R::Resumed {
            zxid: 3,
            timeout_ms: 4000,
        };
        let expired = R::Error(ZkError::SessionExpired);
        assert_eq!(
            observed(7, &Asked::ResumeSession, Some(&resumed)),
            Some(resume(true))
        );
        assert_eq!(
            observed(7, &Asked::ResumeSession, Some(&expired)),
            Some(resume(false))
        );
        assert_eq!(observed(7, &Asked::ResumeSession, None), None);
    }

    #[test]
    fn concurrent_creates_of_one_name_one_wins() {
        let ok = vec![
            at(0, 10, create("/l", false, false, 0, Ok("/l"))),
            at(
                1,
                9,
                create("/l", false, false, 0, Err(ZkError::NodeExists)),
            ),
            at(11, 12, children("/", &["l"])),
        ];
        assert_eq!(verdict(ok), Verdict::Linearizable);
        let both_win = vec![
            at(0, 10, create("/l", false, false, 0, Ok("/l"))),
            at(1, 9, create("/l", false, false, 0, Ok("/l"))),
        ];
        assert_eq!(verdict(both_win), Verdict::NotLinearizable);
    }

    #[test]
    fn sequential_names_follow_the_order_of_creation() {
        let seq = |r| create("/q/n-", true, false, 0, Ok(r));
        let mut h = vec![at(0, 1, create("/q", false, false, 0, Ok("/q")))];
        h.push(at(2, 10, seq("/q/n-0000000001")));
        h.push(at(3, 9, seq("/q/n-0000000000")));
        h.push(at(
            11,
            12,
            children("/q", &["n-0000000000", "n-0000000001"]),
        ));
        assert_eq!(verdict(h.clone()), Verdict::Linearizable);
        // A number handed out twice (the "counter reused" bug).
        let mut reused = h[..2].to_vec();
        reused.push(at(3, 9, seq("/q/n-0000000000")));
        reused.push(at(
            11,
            12,
            ZnodeOp::Delete {
                path: "/q/n-0000000000".into(),
                version: None,
                session: 0,
                result: Some(Ok(())),
            },
        ));
        reused.push(at(13, 14, seq("/q/n-0000000000")));
        assert_eq!(verdict(reused), Verdict::NotLinearizable);
    }

    #[test]
    fn versions_and_unknown_outcomes() {
        let set = |v, r: Option<Result<u32, ZkError>>| ZnodeOp::SetData {
            path: "/a".into(),
            data: "x".into(),
            version: v,
            session: 0,
            result: r,
        };
        let h = vec![
            at(0, 1, create("/a", false, false, 0, Ok("/a"))),
            // An unknown set may or may not have happened...
            SpecOp {
                call: 2,
                ret: None,
                op: set(None, None),
            },
            // ...so a conditional set on version 0 may succeed,
            at(5, 6, set(Some(0), Some(Ok(1)))),
            at(
                7,
                8,
                ZnodeOp::GetData {
                    path: "/a".into(),
                    result: Ok(("x".into(), 2)),
                },
            ),
        ];
        assert_eq!(verdict(h.clone()), Verdict::Linearizable);
        // but a read may not see version 3.
        let mut bad = h;
        bad[3] = at(
            7,
            8,
            ZnodeOp::Exists {
                path: "/a".into(),
                result: Some(3),
            },
        );
        assert_eq!(verdict(bad), Verdict::NotLinearizable);
    }

    #[test]
    fn ephemerals_go_with_their_session() {
        let h = vec![
            at(0, 1, ZnodeOp::OpenSession { session: 7 }),
            at(2, 3, create("/e", false, true, 7, Ok("/e"))),
            at(4, 5, ZnodeOp::CloseSession { session: 7 }),
            at(
                6,
                7,
                ZnodeOp::Exists {
                    path: "/e".into(),
                    result: Some(0),
                },
            ),
        ];
        assert_eq!(verdict(h), Verdict::NotLinearizable);
        let no_session = vec![at(0, 1, create("/e", false, true, 8, Ok("/e")))];
        assert_eq!(verdict(no_session), Verdict::NotLinearizable);
        let refused = vec![at(
            0,
            1,
            create("/e", false, true, 8, Err(ZkError::SessionExpired)),
        )];
        assert_eq!(verdict(refused), Verdict::Linearizable);
    }

    #[test]
    fn lock_holdings_by_token_and_by_time() {
        let h = |client, token, acquired, released| Holding {
            client,
            token,
            acquired,
            released,
        };
        let clean = [
            h(1, 5, 0, Some(10)),
            h(2, 9, 11, Some(20)),
            h(3, 12, 21, None),
        ];
        assert_eq!(check_lock(&clean, true), vec![]);
        let shared = [h(1, 5, 0, Some(10)), h(2, 5, 11, Some(20))];
        assert!(matches!(
            check_lock(&shared, false)[..],
            [LockViolation::SameToken(..)]
        ));
        // A paused holder whose session expired: a newer token while it
        // still believes it holds the lock. Fencing orders them; real time
        // does not.
        let paused = [h(1, 5, 0, Some(100)), h(2, 9, 50, Some(60))];
        assert_eq!(check_lock(&paused, false), vec![]);
        assert!(matches!(
            check_lock(&paused, true)[..],
            [LockViolation::Overlap(..)]
        ));
        let backwards = [h(1, 9, 0, None), h(2, 5, 50, Some(60))];
        assert!(matches!(
            check_lock(&backwards, false)[..],
            [LockViolation::TokenOrder(..)]
        ));
        // Tokens that restart after a clean release (a service that lost
        // its history): a fenced resource would refuse every later holder.
        let restarted = [
            h(1, 9, 0, Some(10)),
            h(2, 12, 20, Some(30)),
            h(3, 2, 40, Some(50)),
            h(1, 3, 60, Some(70)),
        ];
        let v = check_lock(&restarted, true);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v
            .iter()
            .all(|x| matches!(x, LockViolation::TokenOrder(m, _) if m.token == 12)));
        assert!(v[0]
            .to_string()
            .contains("token 2 (client 3, 40 µs .. 50 µs) was acquired after token 12"));
    }
}
