//! RESP commands over several keys (`MGET`, `MSET`, `EXISTS`): one store
//! operation per key, all started at once, the reply assembled when the last
//! one answers. Each key's operation is linearizable on its own; the command
//! as a whole is NOT atomic — `MGET` is not a snapshot, and a failed `MSET`
//! can leave some keys written. Per-key registers offer nothing stronger.

use crate::driver::{Input, ReplyTo};
use crate::resp::Reply;
use crate::resp_render::{resp_reply, RespKind, RespTx};
use bytes::Bytes;
use quorumkv_core::{OpError, Request, Response};
use tokio::sync::{mpsc, oneshot};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Combine {
    Mget,
    Mset,
    Exists,
}

/// A multi-key command: its per-key requests and how to combine the answers.
pub(crate) struct Multi {
    reqs: Vec<Request>,
    combine: Combine,
}

impl Multi {
    pub(crate) fn mget(keys: &[Bytes]) -> Multi {
        Multi {
            reqs: keys
                .iter()
                .map(|k| Request::Get { key: k.clone() })
                .collect(),
            combine: Combine::Mget,
        }
    }

    /// `EXISTS` counts a key as often as it is named, as Redis does.
    pub(crate) fn exists(keys: &[Bytes]) -> Multi {
        Multi {
            combine: Combine::Exists,
            ..Multi::mget(keys)
        }
    }

    /// `None` when the words are not key/value pairs. A key named twice is
    /// written once, with its last value: the writes run concurrently, so
    /// two writes of one key would land in no defined order, while Redis
    /// applies them in order and keeps the last.
    pub(crate) fn mset(pairs: &[Bytes]) -> Option<Multi> {
        if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
            return None;
        }
        let mut reqs: Vec<Request> = Vec::with_capacity(pairs.len() / 2);
        for kv in pairs.chunks(2) {
            let (key, value) = (kv[0].clone(), kv[1].clone());
            reqs.retain(|r| r.key() != &key);
            reqs.push(Request::Put { key, value });
        }
        Some(Multi {
            reqs,
            combine: Combine::Mset,
        })
    }

    /// The per-key requests.
    #[cfg(test)]
    pub(crate) fn requests(&self) -> &[Request] {
        &self.reqs
    }

    /// Hand every request to the driver in one batch and reply at `seq` once
    /// all have answered. `Err` when the driver is gone.
    pub(crate) async fn start<M: Send + 'static>(
        self,
        tx: &mpsc::Sender<Input<M>>,
        rtx: RespTx,
        seq: u64,
        session: u64,
    ) -> Result<(), ()> {
        let mut waits = Vec::with_capacity(self.reqs.len());
        let mut inputs = Vec::with_capacity(self.reqs.len());
        for req in self.reqs {
            let (otx, orx) = oneshot::channel();
            waits.push(orx);
            let reply = ReplyTo::Local(otx);
            inputs.push(Input::Client {
                req,
                session,
                op: quorumkv_core::OpId::NONE,
                reply,
            });
        }
        tx.send(Input::Batch(inputs)).await.map_err(drop)?;
        let combine = self.combine;
        tokio::spawn(async move {
            let mut resps = Vec::with_capacity(waits.len());
            for w in waits {
                resps.push(w.await.unwrap_or_else(|_| {
                    Response::Failed(OpError::unknown("the server shut down before answering"))
                }));
            }
            let _ = rtx.send((seq, combine_replies(combine, resps)));
        });
        Ok(())
    }
}

/// The reply to a multi-key command from its per-key responses (in order).
fn combine_replies(combine: Combine, resps: Vec<Response>) -> Reply {
    let total = resps.len();
    let failed = resps.iter().position(|r| matches!(r, Response::Failed(_)));
    if let Some(i) = failed {
        let ok = total
            - resps
                .iter()
                .filter(|r| matches!(r, Response::Failed(_)))
                .count();
        let first = resps.into_iter().nth(i).expect("index found above");
        let Reply::Error(e) = resp_reply(RespKind::Get, first) else {
            unreachable!("a failed response renders as an error")
        };
        let what = match combine {
            Combine::Mset => format!(
                "MSET is not atomic: {ok} of {total} keys confirmed written, the others may or may not be"
            ),
            Combine::Mget | Combine::Exists => format!("{ok} of {total} keys read"),
        };
        return Reply::Error(format!("{e} ({what})"));
    }
    match combine {
        Combine::Mset => Reply::Simple("OK"),
        Combine::Mget => Reply::Array(
            resps
                .into_iter()
                .map(|r| resp_reply(RespKind::Get, r))
                .collect(),
        ),
        Combine::Exists => Reply::Int(
            resps
                .iter()
                .filter(|r| matches!(r, Response::Value(Some(_))))
                .count() as i64,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn mset_pairs_and_last_value_wins() {
        assert!(Multi::mset(&[b("a")]).is_none());
        let m = Multi::mset(&[b("a"), b("1"), b("b"), b("2"), b("a"), b("3")]).unwrap();
        assert_eq!(
            m.reqs,
            vec![
                Request::Put {
                    key: b("b"),
                    value: b("2")
                },
                Request::Put {
                    key: b("a"),
                    value: b("3")
                },
            ]
        );
    }

    #[test]
    fn combined_replies() {
        let v = |s: Option<&str>| Response::Value(s.map(b));
        assert_eq!(
            combine_replies(Combine::Mget, vec![v(Some("x")), v(None)]),
            Reply::Array(vec![Reply::Bulk(Some(b("x"))), Reply::Bulk(None)])
        );
        assert_eq!(
            combine_replies(Combine::Exists, vec![v(Some("x")), v(None), v(Some(""))]),
            Reply::Int(2)
        );
        assert_eq!(
            combine_replies(Combine::Mset, vec![Response::Done, Response::Done]),
            Reply::Simple("OK")
        );
        let timeout = Response::Failed(OpError::Timeout { got: 1, need: 2 });
        let Reply::Error(e) = combine_replies(Combine::Mset, vec![Response::Done, timeout]) else {
            panic!("error");
        };
        assert!(e.starts_with("TIMEOUT"), "{e}");
        assert!(e.contains("1 of 2 keys confirmed written"), "{e}");
    }
}
