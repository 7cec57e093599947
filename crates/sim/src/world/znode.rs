//! The znode workload (`SimConfig::znode`, `quorumkv sim --znode`): the
//! clients drive the coordination service instead of the KV store, and
//! what they saw is checked against `quorumkv_check::znode::ZnodeSpec`.
//!
//! Each client's session is its client id (`OpId::client`, the same on
//! every connection): it opens it first, and now and then closes and
//! reopens it. Sessions time out after an hour of virtual time (longer than
//! any run), except an abandoned one: now and then a client reopens its
//! session with a timeout of [`ABANDON_TIMEOUT_MS`], makes
//! [`ABANDON_AFTER`] more requests and falls silent, so the leader expires
//! the session and deletes its ephemerals. The model sees the expiry as a
//! `CloseSession` of unknown outcome asked when the session was opened (it
//! may happen at any time after). The operations are
//! `quorumkv_check::znode::workload_op`'s (shared with `quorumkv chaos
//! --workload znode`): few paths, so that operations collide.

use super::World;
use quorumkv_check::znode::ZnodeOp as Seen;
use quorumkv_check::SpecOp;
use quorumkv_core::protocol::registry::client_writer_id;
use quorumkv_core::protocol::ProtocolDef;
use quorumkv_core::znode::{ZnodeOp, ZnodeReply};
use quorumkv_core::{Request, Response};

/// A session's timeout: longer than any seed's run.
const TIMEOUT_MS: u64 = 3_600_000;
/// An abandoned session's timeout (virtual ms), before `--link-delay`'s
/// stretch.
const ABANDON_TIMEOUT_MS: u64 = 30;
/// Requests a client makes on a session it will abandon.
const ABANDON_AFTER: u32 = 3;
/// The TTL (virtual ms) of the workload's TTL nodes, before
/// `--link-delay`'s stretch: the leader looks every 20 ms in the simulator
/// (`ttl-check`), so some go within a run.
const TTL_MS: u64 = 30;

/// A session a client opened and then fell silent on: `session` may expire
/// at any time after `asked_ns` (when its opening was asked).
#[derive(Clone, Copy, Debug)]
pub struct Abandoned {
    pub session: u64,
    pub asked_ns: u64,
    /// The client that abandoned it.
    pub client: usize,
    /// Its timeout, µs.
    pub timeout_us: u64,
    /// When its client fell silent (its last request ended), µs.
    pub silent_us: Option<u64>,
    /// A server expired it (applied the expiry: its `expired` event).
    pub expired: bool,
}

/// A watch event as a znode client received it: when (the history's
/// clock), from which server (`None`: the client's own coordinator), by
/// which client's session, for which path, of which kind.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    pub at_ns: u64,
    pub server: Option<usize>,
    pub client: usize,
    pub path: String,
    pub kind: String,
}

/// One znode request of the history: its record, who asked, its answer
/// and the server that gave it.
#[derive(Clone, Debug)]
pub struct Asked {
    pub record: usize,
    /// The client's request id (`ClientRef::id`).
    pub id: u64,
    pub session: u64,
    pub op: ZnodeOp,
    pub reply: Option<Response>,
    pub server: Option<usize>,
    /// The request reached a server (or the client's own coordinator):
    /// one that never did cannot have taken effect, whatever its client
    /// concluded (`znode_history`).
    pub delivered: bool,
    /// A message carrying the request as a log entry reached a server
    /// (`ProtocolDef::znode_entries`; always true where the protocol does
    /// not say). A request no such message carried was committed nowhere:
    /// a commit needs a second server to hold the entry.
    pub carried: bool,
}

impl<D: ProtocolDef> World<'_, D> {
    /// The next znode request of client `c`.
    pub(super) fn znode_op(&mut self, c: usize) -> Request {
        if let Some(path) = self.znode_reread.remove(&c) {
            return Request::Znode(ZnodeOp::GetData { path, watch: true });
        }
        let n = self.clients[c].issued;
        if n > 1 && self.creates_ttl(c, n) {
            // Drawn apart, and in place of the workload's draw: its stream
            // goes on as it was.
            return Request::Znode(ZnodeOp::CreateTtl {
                path: format!("{}{c}", quorumkv_check::znode::TTL_PATH_PREFIX),
                data: bytes::Bytes::from(format!("c{c}.{n}")),
                sequential: false,
                ttl_ms: TTL_MS * self.cfg.timing.link_scale(),
                acl: None,
            });
        }
        let mut op = quorumkv_check::znode::workload_op(&mut self.work_rng, c, n, TIMEOUT_MS);
        if matches!(op, ZnodeOp::OpenSession { .. }) && n > 0 && self.abandons(c, n) {
            // This session will be abandoned: a short timeout, a few more
            // requests, then silence (the client's quota ends).
            let timeout_ms = ABANDON_TIMEOUT_MS * self.cfg.timing.link_scale();
            op = ZnodeOp::OpenSession { timeout_ms };
            let slot = &mut self.clients[c];
            slot.quota = slot.quota.min(n + 1 + ABANDON_AFTER);
            self.stats.sessions_abandoned += 1;
            self.abandoned.push(Abandoned {
                session: client_writer_id(c as u64),
                asked_ns: self.clock.stamp(self.now),
                client: c,
                timeout_us: timeout_ms.saturating_mul(1000),
                silent_us: None,
                expired: false,
            });
        }
        Request::Znode(op)
    }

    /// Whether client `c`'s request `n` creates its TTL node (outside the
    /// model: `quorumkv_check::znode::TTL_PATH_PREFIX`): one in eight,
    /// drawn apart from the workload's stream.
    fn creates_ttl(&self, c: usize, n: u32) -> bool {
        let mut r = quorumkv_core::rng::SplitMix64(
            self.p.knobs.rotate_left(17) ^ ((c as u64) << 32 | u64::from(n)),
        );
        r.below(8) == 0
    }

    /// Whether client `c`'s reopening at request `n` abandons the session:
    /// one in four, drawn apart from the workload's stream (which stays as
    /// it was before expiries).
    fn abandons(&self, c: usize, n: u32) -> bool {
        let mut r =
            quorumkv_core::rng::SplitMix64(self.p.knobs ^ ((c as u64) << 32 | u64::from(n)));
        r.below(4) == 0
    }

    /// Client `c` is done: the session it abandoned is silent from now,
    /// and must expire, if its opening succeeded and none of its last
    /// requests closed it or opened it again (with the long timeout).
    pub(super) fn znode_client_done(&mut self, c: usize) {
        let session = client_writer_id(c as u64);
        let last = (self.znode.iter().rev())
            .filter(|a| a.session == session)
            .find(|a| matches!(a.op, ZnodeOp::OpenSession { .. } | ZnodeOp::CloseSession));
        let open = match last {
            Some(Asked {
                op: ZnodeOp::OpenSession { timeout_ms },
                reply: Some(Response::Znode(ZnodeReply::Session { .. })),
                ..
            }) => Some(timeout_ms.saturating_mul(1000)),
            _ => None,
        };
        let now = self.now;
        for a in self.abandoned.iter_mut().filter(|a| a.client == c) {
            if open == Some(a.timeout_us) {
                a.silent_us.get_or_insert(now);
            }
        }
    }

    /// Server `i` says a session expired (its `expired` event, whether or
    /// not a connection is left to take it).
    pub(super) fn znode_expiry_seen(&mut self, event: &quorumkv_core::Event) {
        if event.kind != "expired" {
            return;
        }
        let Some(session) = std::str::from_utf8(&event.key)
            .ok()
            .and_then(|k| k.parse::<u64>().ok())
        else {
            return;
        };
        for a in self.abandoned.iter_mut().filter(|a| a.session == session) {
            a.expired = true;
        }
    }

    /// The liveness promise of sessions: once the faults healed, a
    /// session whose client fell silent expires within its timeout plus
    /// the liveness bound (and its ephemerals with it: the invariant "an
    /// expired session owns no ephemeral"). `Ok(None)`: none is waited
    /// for; `Ok(Some(at))`: the run goes on to `at`; `Err`: one is late.
    pub(super) fn sessions_due(&self) -> Result<Option<u64>, String> {
        if !self.healed {
            return Ok(None);
        }
        let bound = self.cfg.timing.liveness_bound.as_micros() as u64;
        let mut due = None::<u64>;
        for a in self.abandoned.iter().filter(|a| !a.expired) {
            if a.silent_us.is_some() && self.closed_at_a_quorum(a.session) {
                continue;
            }
            if self.renewed(a.session, a.timeout_us) {
                continue;
            }
            let Some(silent) = a.silent_us else {
                continue;
            };
            let from = silent.max(self.liveness_from_us);
            let at = from.saturating_add(a.timeout_us).saturating_add(bound);
            if self.now > at {
                return Err(format!(
                    "znode session {:#x} of client c{} never expired: silent since {:.3}ms, \
                     timeout {}ms, healed from {:.3}ms, not expired by {:.3}ms (timeout + \
                     liveness bound {}ms)",
                    a.session,
                    a.client,
                    silent as f64 / 1000.0,
                    a.timeout_us / 1000,
                    self.liveness_from_us as f64 / 1000.0,
                    at as f64 / 1000.0,
                    bound / 1000
                ));
            }
            due = Some(due.map_or(at, |d| d.min(at)));
        }
        Ok(due)
    }

    /// Whether a quorum of the servers hold `session` closed in the state
    /// they applied, counting only those up and available (a server that
    /// lost its state and is still recovering holds nothing). Servers
    /// whose events reached no connection (all restarted since the
    /// session's requests) expire sessions too.
    fn closed_at_a_quorum(&self, session: u64) -> bool {
        let closed = (self.nodes.iter())
            .filter_map(|s| s.core.as_ref())
            .filter(|n| D::available(n))
            .filter(|n| D::znode_session_open(n, session) == Some(false))
            .count();
        closed > self.nodes.len() / 2
    }

    /// Whether a server applied an opening of `session` with a timeout
    /// other than `timeout_us`: an earlier opening whose answer was lost,
    /// committed after the one the promise counts from, renews the session
    /// with its own timeout (a second opening sets it, `Tree::apply`; seed
    /// 7230). The promise then no longer holds.
    fn renewed(&self, session: u64, timeout_us: u64) -> bool {
        (self.nodes.iter())
            .filter_map(|s| s.core.as_ref())
            .filter(|n| D::available(n))
            .filter_map(|n| D::znode_session_timeout_ms(n, session))
            .any(|ms| ms.saturating_mul(1000) != timeout_us)
    }

    /// Note a znode request `id` as it is issued (its record is the last).
    pub(super) fn znode_asked(&mut self, c: usize, id: u64, req: &Request) {
        if let Request::Znode(op) = req {
            self.znode.push(Asked {
                record: self.history.len() - 1,
                id,
                session: client_writer_id(c as u64),
                op: op.clone(),
                reply: None,
                server: None,
                delivered: false,
                carried: false,
            });
        }
    }

    /// Request `id` reached a server (the first copy to arrive, or a late
    /// one after its client gave up: either may take effect).
    pub(super) fn znode_delivered(&mut self, id: u64) {
        if !self.cfg.znode {
            return;
        }
        // Almost always the last request, else one of the last few.
        if let Some(a) = self.znode.iter_mut().rev().find(|a| a.id == id) {
            a.delivered = true;
        }
    }

    /// `msg` reaches a server: the znode requests it carries as log
    /// entries (matched by session and operation, so a request asked
    /// twice alike counts as carried whichever copy went) may take effect.
    pub(super) fn znode_carried(&mut self, msg: &D::Msg) {
        if !self.cfg.znode {
            return;
        }
        let Some(entries) = D::znode_entries(msg) else {
            return;
        };
        self.entries_told = true;
        for (session, op) in entries {
            (self.znode.iter_mut())
                .filter(|a| a.session == session && a.op == op)
                .for_each(|a| a.carried = true);
        }
    }

    /// At the run's end: where the protocol never said which messages
    /// carry entries, or one server alone forms a quorum, every request
    /// counts as carried.
    pub(super) fn znode_settle_carried(&mut self) {
        if !self.entries_told || self.nodes.len() < 2 {
            self.znode.iter_mut().for_each(|a| a.carried = true);
        }
        self.stats.znode_uncarried = (self.znode.iter())
            .filter(|a| a.delivered && !a.carried && !answered(&a.reply) && !a.op.is_read())
            .count() as u64;
    }

    /// Note a watch event client `c` received.
    pub(super) fn znode_notified(
        &mut self,
        server: Option<usize>,
        c: usize,
        event: &quorumkv_core::Event,
    ) {
        if !self.cfg.znode {
            return;
        }
        let path = String::from_utf8_lossy(&event.key).into_owned();
        self.stats.expired_events += u64::from(event.kind == "expired");
        if event.kind == "changed" || event.kind == "created" {
            self.znode_reread.insert(c, path.clone());
        }
        self.watch_events.push(WatchEvent {
            at_ns: self.clock.stamp(self.now),
            server,
            client: c,
            path,
            kind: event.kind.clone(),
        });
    }

    /// Note server `server`'s answer to client `c`'s pending znode request.
    pub(super) fn znode_answered(&mut self, server: usize, c: usize, resp: &Response) {
        let Some(p) = &self.clients[c].pending else {
            return;
        };
        let record = p.record;
        if let Some(a) = self.znode.iter_mut().rev().find(|a| a.record == record) {
            a.reply = Some(resp.clone());
            a.server = Some(server);
        }
    }
}

/// Seed 001 §II.C: a watch event announces a change that happened. A data
/// watch set by a read that saw the node with last change `mzxid` fires on
/// a later change (or the node's deletion), so a read of that path that
/// begins after the event arrived and still returns that `mzxid` saw the
/// tree before the change the event announced (or the event was false).
/// The read that set the watch is the client's last watching data read of
/// the path answered, before the event, by the server that sent the event:
/// a watch lives at the server that served its read, and that server's
/// events and answers on one connection arrive in order, so a read it
/// answered before the event was applied there before the change. (A read
/// answered by another server says nothing of this watch: that server may
/// have applied the change earlier, and the client may see the new zxid
/// there before this server's event.) Events from closed connections never
/// reach a client.
pub fn event_before_change(
    asked: &[Asked],
    events: &[WatchEvent],
    records: &[crate::history::OpRecord],
) -> Option<String> {
    // The node's last change as a data read saw it (None: no node or no answer).
    let seen = |a: &Asked| -> Option<(String, u64)> {
        let path = match &a.op {
            ZnodeOp::GetData { path, .. } | ZnodeOp::Exists { path, .. } => path,
            _ => return None,
        };
        let stat = match &a.reply {
            Some(Response::Znode(ZnodeReply::Data { stat, .. })) => stat,
            Some(Response::Znode(ZnodeReply::Exists(Some(stat)))) => stat,
            _ => return None,
        };
        Some((path.clone(), stat.mzxid))
    };
    let watching = |a: &Asked| match &a.op {
        ZnodeOp::GetData { watch, .. } | ZnodeOp::Exists { watch, .. } => *watch,
        _ => false,
    };
    for e in events
        .iter()
        .filter(|e| e.kind == "changed" || e.kind == "deleted")
    {
        let session = client_writer_id(e.client as u64);
        let set = (asked.iter())
            .filter(|a| a.session == session && watching(a) && a.server == e.server)
            .filter(|a| records[a.record].complete_ns <= e.at_ns)
            .filter_map(|a| seen(a).filter(|(p, _)| *p == e.path))
            .last();
        let Some((path, before)) = set else {
            continue;
        };
        let stale = (asked.iter())
            .filter(|a| records[a.record].invoke_ns > e.at_ns)
            .find(|a| seen(a) == Some((path.clone(), before)));
        if let Some(a) = stale {
            let r = &records[a.record];
            return Some(format!(
                "watch event `{}` {path} reached client c{} at {} ns, but a read of {path} begun after it \
                 (process p{}, {}..{} ns) still saw its last change at zxid {before}: the event came before its change",
                e.kind, e.client, e.at_ns, r.process, r.invoke_ns, r.complete_ns
            ));
        }
    }
    None
}

/// Whether a reply settles what its request did: an answer, or a failure
/// that says the request took no effect.
fn answered(reply: &Option<Response>) -> bool {
    match reply {
        Some(Response::Failed(e)) => e.is_definite(),
        Some(_) => true,
        None => false,
    }
}

/// The history as the znode model sees it: one operation per request whose
/// effect is known or may have happened; definite failures and reads with
/// no answer are left out (they constrain nothing). `call` and `ret` are
/// the records' invoke and completion instants.
pub fn znode_history(
    asked: &[Asked],
    abandoned: &[Abandoned],
    records: &[crate::history::OpRecord],
) -> Vec<SpecOp<Seen>> {
    let expiries = abandoned.iter().map(|a| SpecOp {
        call: a.asked_ns,
        ret: None,
        op: Seen::CloseSession { session: a.session },
    });
    asked
        .iter()
        .filter_map(|a| {
            let rec = &records[a.record];
            let reply = match &a.reply {
                Some(Response::Znode(r)) => Some(r.clone()),
                Some(Response::Failed(e)) if e.is_definite() => return None,
                // Unanswered and never delivered, or never handed to a
                // second server as a log entry: it was committed nowhere,
                // so it took no effect (the simulator knows what a client
                // could not).
                None if !a.delivered => return None,
                _ if !a.carried => return None,
                _ => None,
            };
            let op = quorumkv_check::znode::observed(a.session, &a.op, reply.as_ref())?;
            Some(SpecOp {
                call: rec.invoke_ns,
                ret: reply.map(|_| rec.complete_ns),
                op,
            })
        })
        .chain(expiries)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::OpRecord;
    use quorumkv_core::op::{Op, Outcome};

    /// An unanswered request that reached a server may have taken effect;
    /// one the network lost before any server saw it did not, nor one that
    /// no message handed to a second server as a log entry: both are left
    /// out of the znode history.
    #[test]
    fn a_request_no_server_received_is_left_out() {
        let set = |data: &str| ZnodeOp::SetData {
            path: "/a".into(),
            data: bytes::Bytes::from(data.to_string()),
            version: None,
        };
        let record = |at: u64| OpRecord {
            process: 0,
            op: Op::Get { key: "z".into() },
            invoke_ns: at,
            complete_ns: at + 5,
            outcome: Outcome::Unknown,
        };
        let asked = |record, op, delivered, carried| Asked {
            record,
            id: record as u64,
            session: 1,
            op,
            reply: None,
            server: None,
            delivered,
            carried,
        };
        let records = [record(10), record(20), record(30), record(40)];
        let ops = [
            asked(0, set("lost"), false, true),
            asked(1, set("seen"), true, true),
            // Reached a server, but no message handed it on as a log
            // entry: committed nowhere.
            asked(2, set("stuck"), true, false),
            Asked {
                reply: Some(Response::Failed(quorumkv_core::OpError::Unknown {
                    reason: "timed out".into(),
                })),
                ..asked(3, set("late"), true, false)
            },
        ];
        let history = znode_history(&ops, &[], &records);
        assert_eq!(history.len(), 1, "{history:?}");
        assert_eq!(history[0].call, 20);
        assert_eq!(history[0].ret, None, "delivered, unanswered: unknown");
        // An answer is kept whatever was carried.
        let answered = Asked {
            reply: Some(Response::Znode(ZnodeReply::Set(Default::default()))),
            ..asked(2, set("stuck"), true, false)
        };
        let history = znode_history(&[answered], &[], &records);
        assert_eq!(history.len(), 1, "{history:?}");
        assert_eq!(history[0].ret, Some(35));
    }
}
