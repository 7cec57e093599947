//! ZooKeeper's `multi` in the znode model: the operations in order on a
//! copy of the state, kept only if every one succeeded (the model's own
//! reading of "all or none", apart from the tree's undo log).

use super::{ZnodeOp, ZnodeState};
use quorumkv_core::znode::ZkError;

/// One operation of a multi as the model sees it (ACLs are outside the
/// model, as for single operations).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    Check {
        path: String,
        version: Option<u32>,
    },
    Create {
        path: String,
        data: String,
        ephemeral: bool,
        sequential: bool,
    },
    Delete {
        path: String,
        version: Option<u32>,
    },
    SetData {
        path: String,
        data: String,
        version: Option<u32>,
    },
}

/// What one operation of a successful multi answered: the created path,
/// the new data version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum StepOk {
    Checked,
    Created(String),
    Deleted,
    Set(u32),
}

/// A multi's result: each operation's answer, or the index and error of
/// the one that failed it.
pub type MultiResult = Result<Vec<StepOk>, (u32, ZkError)>;

impl ZnodeState {
    /// A multi of `session`: every step in order, or the state unchanged
    /// and the first failure.
    pub(super) fn multi(&mut self, session: u64, steps: &[Step]) -> MultiResult {
        let mut next = self.clone();
        let mut done = Vec::with_capacity(steps.len());
        for (i, s) in steps.iter().enumerate() {
            let r = match s {
                Step::Check { path, version } => match next.get(path) {
                    Err(e) => Err(e),
                    Ok((_, v)) if version.is_some_and(|want| want != v) => Err(ZkError::BadVersion),
                    Ok(_) => Ok(StepOk::Checked),
                },
                Step::Create {
                    path,
                    data,
                    ephemeral,
                    sequential,
                } => {
                    (next.create(path, data, *ephemeral, *sequential, session)).map(StepOk::Created)
                }
                Step::Delete { path, version } => {
                    next.delete(path, *version).map(|()| StepOk::Deleted)
                }
                Step::SetData {
                    path,
                    data,
                    version,
                } => next.set(path, data, *version).map(StepOk::Set),
            };
            match r {
                Ok(ok) => done.push(ok),
                Err(e) => return Err((u32::try_from(i).unwrap_or(u32::MAX), e)),
            }
        }
        *self = next;
        Ok(done)
    }
}

/// An operation of a multi the model does not hold (a container's or TTL
/// node's create; the workload asks for none).
pub(super) fn outside_model(op: &quorumkv_core::znode::MultiOp) -> bool {
    use quorumkv_core::znode::MultiOp;
    matches!(
        op,
        MultiOp::CreateContainer { .. } | MultiOp::CreateTtl { .. }
    )
}

/// The model's multi for a request `ops` of `session` and its answer
/// (`None`: unknown outcome). An answer of the wrong kind (or with the
/// wrong number of results) reads as a failure the model never gives.
pub(super) fn observed(
    session: u64,
    ops: &[quorumkv_core::znode::MultiOp],
    reply: Option<&quorumkv_core::znode::ZnodeReply>,
) -> ZnodeOp {
    use quorumkv_core::op::text;
    use quorumkv_core::znode::{MultiOk, MultiOp, ZnodeReply as R};
    let steps: Vec<Step> = (ops.iter())
        .map(|o| match o {
            MultiOp::Check { path, version } => Step::Check {
                path: path.clone(),
                version: *version,
            },
            MultiOp::Create {
                path,
                data,
                ephemeral,
                sequential,
                ..
            } => Step::Create {
                path: path.clone(),
                data: text(data),
                ephemeral: *ephemeral,
                sequential: *sequential,
            },
            MultiOp::Delete { path, version } => Step::Delete {
                path: path.clone(),
                version: *version,
            },
            MultiOp::SetData {
                path,
                data,
                version,
            } => Step::SetData {
                path: path.clone(),
                data: text(data),
                version: *version,
            },
            // `outside_model`: never asked here; a failure the model
            // never gives.
            MultiOp::CreateContainer { path, .. } | MultiOp::CreateTtl { path, .. } => {
                Step::Check {
                    path: path.clone(),
                    version: Some(u32::MAX),
                }
            }
        })
        .collect();
    let wrong = |r: &R| (u32::MAX, super::answer_error(r));
    let result = reply.map(|r| match r {
        R::Multi(done) if done.len() == steps.len() => Ok(done
            .iter()
            .map(|d| match d {
                MultiOk::Checked => StepOk::Checked,
                MultiOk::Created { path, .. } => StepOk::Created(path.clone()),
                MultiOk::Deleted => StepOk::Deleted,
                MultiOk::Set(stat) => StepOk::Set(stat.version),
            })
            .collect()),
        R::MultiFailed { index, error } => Err((*index, error.clone())),
        other => Err(wrong(other)),
    });
    ZnodeOp::Multi {
        session,
        steps,
        result,
    }
}

/// The creates a multi made (prefix, whether sequential, the path it
/// got) and the paths of its plain creates, for
/// [`super::reused_sequential_name`].
pub(super) fn creates(op: &ZnodeOp) -> (Vec<(&str, &str)>, Vec<&str>) {
    let ZnodeOp::Multi { steps, result, .. } = op else {
        return (Vec::new(), Vec::new());
    };
    let plain = (steps.iter())
        .filter_map(|s| match s {
            Step::Create {
                path,
                sequential: false,
                ..
            } => Some(path.as_str()),
            _ => None,
        })
        .collect();
    let Some(Ok(done)) = result else {
        return (Vec::new(), plain);
    };
    let made = (steps.iter().zip(done))
        .filter_map(|(s, d)| match (s, d) {
            (
                Step::Create {
                    path: prefix,
                    sequential: true,
                    ..
                },
                StepOk::Created(path),
            ) => Some((prefix.as_str(), path.as_str())),
            _ => None,
        })
        .collect();
    (made, plain)
}

/// A small multi for the workload: one to three operations on the
/// workload's paths, `/q`'s sequential children among them; data
/// `c{c}.{n}.{k}`, written by no other operation.
pub(super) fn workload_multi(
    r: &mut impl quorumkv_core::rng::Draw,
    c: usize,
    n: u32,
) -> quorumkv_core::znode::ZnodeOp {
    use quorumkv_core::znode::{MultiOp, ZnodeOp as Op};
    let paths = super::WORKLOAD_PATHS;
    let ops = (0..1 + r.below(3))
        .map(|k| {
            let path = paths[r.below(paths.len() as u64) as usize].to_string();
            let version = (r.below(2) == 0).then(|| r.below(3) as u32);
            let data = bytes::Bytes::from(format!("c{c}.{n}.{k}"));
            match r.below(5) {
                0 => MultiOp::Check { path, version },
                1 => MultiOp::Delete { path, version },
                2 => MultiOp::SetData {
                    path,
                    data,
                    version,
                },
                kind => MultiOp::Create {
                    path: if kind == 3 { path } else { "/q/n-".into() },
                    data,
                    ephemeral: r.chance(0.3),
                    sequential: kind == 4,
                    acl: None,
                },
            }
        })
        .collect();
    Op::Multi { ops }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Spec;
    use crate::znode::ZnodeSpec;

    fn create(path: &str, sequential: bool) -> Step {
        Step::Create {
            path: path.into(),
            data: "d".into(),
            ephemeral: false,
            sequential,
        }
    }

    fn multi(steps: Vec<Step>, result: Option<MultiResult>) -> ZnodeOp {
        ZnodeOp::Multi {
            session: 1,
            steps,
            result,
        }
    }

    /// The model applies a multi whole or not at all, and accepts only
    /// the answer it would give.
    #[test]
    fn the_model_applies_a_multi_whole_or_not_at_all() {
        let s = ZnodeSpec.init();
        let steps = vec![
            create("/a", false),
            create("/a/n-", true),
            Step::Check {
                path: "/a".into(),
                version: Some(0),
            },
        ];
        let ok = Ok(vec![
            StepOk::Created("/a".into()),
            StepOk::Created("/a/n-0000000000".into()),
            StepOk::Checked,
        ]);
        let ok_again = ok.clone();
        let after = ZnodeSpec.step(&s, &multi(steps.clone(), Some(ok))).unwrap();
        assert!(after.exists("/a/n-0000000000"));
        // Answered as failed at 2 where it succeeds: impossible.
        let failed = Err((2, ZkError::BadVersion));
        assert_eq!(
            ZnodeSpec.step(&s, &multi(steps.clone(), Some(failed))),
            None
        );
        // A failing check at the end: nothing of the rest happened.
        let mut bad = steps.clone();
        bad[2] = Step::Check {
            path: "/a".into(),
            version: Some(3),
        };
        let failed = Err((2, ZkError::BadVersion));
        let same = ZnodeSpec
            .step(&s, &multi(bad.clone(), Some(failed)))
            .unwrap();
        assert_eq!(same, s);
        // Unknown outcome: either state.
        let maybe = ZnodeSpec.step(&s, &multi(bad, None)).unwrap();
        assert_eq!(maybe, s);
        // A sequential name from a multi counts as handed out.
        let named = crate::SpecOp {
            call: 0,
            ret: Some(1),
            op: multi(steps, Some(ok_again)),
        };
        let single = crate::SpecOp {
            call: 2,
            ret: Some(3),
            op: ZnodeOp::Create {
                path: "/a/n-".into(),
                data: "d".into(),
                ephemeral: false,
                sequential: true,
                session: 1,
                result: Some(Ok("/a/n-0000000000".into())),
            },
        };
        let found = super::super::reused_sequential_name(&[named, single]);
        assert_eq!(found.as_deref(), Some("/a/n-0000000000"));
    }
}
