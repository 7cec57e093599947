//! What a ring server keeps on disk and how a restart reads it back (module
//! doc, "Durability"). Records go through `Out::persist`: the driver makes
//! them durable before any later send or reply leaves (protocol contract,
//! rule 2), so persisting a register before the `Write` is forwarded, the
//! client gets `Done` or a read gets the value is all the ordering needed.

use super::bugs::InjectedBug;
use super::msg::{Entry, Msg, Timer};
use super::node::RingNode;
use super::register::Register;
use super::restart::DiskOp;
use crate::protocol::contract::{Out, Record};
use crate::types::{OpId, Tag};
use bytes::Bytes;

type O = Out<Msg, Timer>;

/// "This server ran here before": written at the first start, so that a
/// restart that applied nothing yet still knows it was dropped from every
/// view (and must rejoin, not serve from its first-boot view).
pub(super) const STARTED: &str = "ring/started";
/// Applied operation ids, one slot each: `ring/op/<seq % max_ops>`, value
/// `seq, client, op seq, ts, writer` (40 bytes, big-endian) then the key:
/// the write that applied it, so that a restart knows its old life's writes
/// (`written`: a copy of one taken over here is no second copy, `dedup.rs`).
/// As bounded as the table.
const OP_PREFIX: &str = "ring/op/";

/// The register record of an applied write.
pub(super) fn reg_record(e: &Entry) -> Record {
    Record::Register {
        key: e.key.clone(),
        tag: e.tag,
        value: e.value.clone(),
    }
}

fn op_record(seq: u64, op: OpId, (key, tag): (&Bytes, Tag), slot: u64) -> Record {
    let mut v = Vec::with_capacity(40 + key.len());
    for x in [seq, op.client, op.seq, tag.ts, tag.writer] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.extend_from_slice(key);
    Record::Meta {
        key: format!("{OP_PREFIX}{slot}"),
        value: Bytes::from(v),
    }
}

fn parse_op(value: &[u8]) -> Option<DiskOp> {
    let word = |i: usize| -> Option<u64> {
        let b: [u8; 8] = value.get(i * 8..i * 8 + 8)?.try_into().ok()?;
        Some(u64::from_be_bytes(b))
    };
    let op = OpId {
        client: word(1)?,
        seq: word(2)?,
    };
    let tag = Tag {
        ts: word(3)?,
        writer: word(4)?,
    };
    let key = Bytes::copy_from_slice(value.get(40..)?);
    Some((word(0)?, op, key, tag))
}

impl RingNode {
    /// Persist `e`'s register (it was just applied here), unless the
    /// injected bug sends and answers before the sync anyway.
    pub(super) fn persist_applied(&self, e: &Entry, out: &mut O) {
        if self.durable {
            out.persist(reg_record(e));
        }
    }

    /// A (non-void) write of `op` was applied here: remember it, on disk
    /// too (a retry after a restart of every server must not apply it
    /// twice, `dedup.rs`).
    /// `at`: the write that applied it (`Tag::ZERO` when only a snapshot
    /// says it was applied).
    pub(super) fn applied_op(&mut self, op: OpId, at: (&Bytes, Tag), out: &mut O) {
        let new = self.ops.on_write(op);
        // Once the write is known, on disk too: a restart that knows an
        // operation but not its tag voids a copy of that very write
        // (`void_here`; durable fuzz seed 6178 at N = 6).
        let learned = self.ops.learn_write(op, at.0, at.1);
        if !(new || learned) || !self.durable {
            return;
        }
        let seq = self.op_seq;
        // Checked: 2^64 applied writes do not happen; saturating keeps
        // the slot in range if they did.
        self.op_seq = self.op_seq.saturating_add(1);
        let slot = seq % self.cfg.max_ops.max(1) as u64;
        out.persist(op_record(seq, op, at, slot));
    }

    /// A snapshot's applied operations, with their writes where known.
    pub(super) fn applied_ops(
        &mut self,
        ops: Vec<OpId>,
        writes: Vec<(OpId, Bytes, Tag)>,
        out: &mut O,
    ) {
        let writes: std::collections::HashMap<OpId, (Bytes, Tag)> = (writes.into_iter())
            .map(|(op, k, t)| (op, (k, t)))
            .collect();
        let none = (Bytes::new(), Tag::ZERO);
        for op in ops {
            let (k, t) = writes.get(&op).unwrap_or(&none);
            self.applied_op(op, (k, *t), out);
        }
    }

    /// Whether ring writes and `Done` skip the wait for the sync
    /// (`InjectedBug::WriteAckedBeforeSync`).
    pub(super) fn acks_before_sync(&self) -> bool {
        self.bug == Some(InjectedBug::WriteAckedBeforeSync)
    }

    /// One durable record after a restart (`Protocol::restore`), in any
    /// order: registers keep the highest tag, operations their order.
    pub(super) fn restore_record(&mut self, rec: Record) {
        match rec {
            Record::Register { key, tag, value } => {
                self.restored = true;
                let e = Entry {
                    key,
                    tag,
                    value,
                    // Re-sent as a write (pc 88), it ends here.
                    origin: self.id,
                    home: self.id,
                    op: OpId::NONE,
                    void: false,
                };
                // Not into `written`: that drops copies of pre-writes as
                // done, and the rejoin snapshot says which are (an old
                // life's round may still need this life to pass it on).
                self.reg(&e.key).apply(&e);
            }
            Record::Meta { key, .. } if key == STARTED => self.restored = true,
            Record::Meta { key, value } if key.starts_with(OP_PREFIX) => {
                self.restored = true;
                if let Some(op) = parse_op(&value) {
                    self.restored_ops.push(op);
                }
            }
            _ => {}
        }
    }

    /// `on_start`: the operations restored, oldest first; a server that
    /// ran here before starts outside (the others took its crash for good,
    /// §2), one that did not marks the disk.
    pub(super) fn start_durable(&mut self, out: &mut O) {
        let mut ops = std::mem::take(&mut self.restored_ops);
        ops.sort_unstable();
        for (seq, op, key, tag) in ops {
            self.ops.on_write(op);
            self.ops.learn_write(op, &key, tag);
            if tag > Tag::ZERO {
                self.written.insert(&key, tag);
                self.live_writes.insert(&key, tag); // an applied operation's
                                                    // The register record holds no op id; without it the value
                                                    // re-sent as a write (pc 88) would be applied round the ring
                                                    // with its operation unknown there, and a retry of it at
                                                    // another server applied again above a later write (seed
                                                    // 353 at N = 5).
                if let Some(r) = self.regs.get_mut(&key).filter(|r| r.tag == tag) {
                    r.op = op;
                }
            }
            self.op_seq = self.op_seq.max(seq.saturating_add(1));
        }
        if self.restored {
            self.outside = true;
        } else if self.durable {
            out.persist(Record::Meta {
                key: STARTED.to_string(),
                value: Bytes::new(),
            });
        }
    }

    /// A register of a `Welcome` snapshot over this server's own (restored
    /// from disk): the higher tag wins, and a value newer than the one on
    /// disk is persisted before this server serves it.
    pub(super) fn install_register(&mut self, held: Entry, pending: Vec<Entry>, out: &mut O) {
        let own = self.regs.remove(&held.key);
        let mut reg = Register::from_snapshot(&held, pending);
        let own_tag = own.as_ref().map_or(Tag::default(), |r| r.tag);
        if let Some(own) = own.filter(|r| r.tag > held.tag) {
            reg.apply(&own.as_write(&held.key));
        } else {
            if held.tag > own_tag && self.durable {
                out.persist(reg_record(&held));
            }
            // Its operation with the write that applied it, so that a
            // restart can name the value's operation again (`start_durable`).
            self.applied_op(held.op, (&held.key, held.tag), out);
        }
        self.regs.insert(held.key, reg);
    }

    /// A census answer's register over this server's own: the higher tag
    /// wins, persisted (with its operation) if it is not this server's.
    pub(super) fn merge_register(&mut self, held: &Entry, out: &mut O) {
        let durable = self.durable;
        let reg = self.reg(&held.key);
        if reg.apply(held) && held.tag > Tag::default() {
            if durable {
                out.persist(reg_record(held));
            }
            self.applied_op(held.op, (&held.key, held.tag), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::{Command, Protocol};
    use crate::protocol::ring::node::RingConfig;
    use crate::protocol::ring::testing::{entry, get, key, put, value, Net, O, T0};
    use crate::types::{ClientRef, Peer, Response};

    fn node(id: u32) -> RingNode {
        RingNode::new(id, vec![1, 2, 3], RingConfig::default()).with_durable(true)
    }
    /// Index of the first command matching `f`.
    fn first(out: &O, f: impl Fn(&Command<Msg, Timer>) -> bool) -> usize {
        out.commands().iter().position(f).expect("present")
    }
    fn persists_nothing(out: &O) -> bool {
        !out.commands()
            .iter()
            .any(|c| matches!(c, Command::Persist(_)))
    }
    fn is_reg(c: &Command<Msg, Timer>) -> bool {
        matches!(c, Command::Persist(Record::Register { .. }))
    }

    /// The op records written, as (slot key, op, tag).
    fn op_records(out: &O) -> Vec<(String, OpId, Tag)> {
        (out.commands().iter())
            .filter_map(|c| match c {
                Command::Persist(Record::Meta { key, value }) if key.starts_with(OP_PREFIX) => {
                    let (_, op, _, tag) = parse_op(value).expect("an op record");
                    Some((key.clone(), op, tag))
                }
                _ => None,
            })
            .collect()
    }

    /// Applied operations take slots `seq % max_ops` (bounded, oldest
    /// overwritten); one known without its write is on disk at once, and
    /// again once its write is learnt (a restart must know the tag: seed
    /// 6178 of the durable harness).
    #[test]
    fn applied_operations_take_bounded_slots_and_their_write_once_learnt() {
        let cfg = RingConfig {
            max_ops: 3,
            ..RingConfig::default()
        };
        let mut n = RingNode::new(1, vec![1, 2, 3], cfg).with_durable(true);
        let mut out = O::new();
        let op = |seq| OpId { client: 9, seq };
        let k = key();
        for s in 1..=4 {
            n.applied_op(op(s), (&k, Tag::ZERO), &mut out);
        }
        let slots: Vec<String> = op_records(&out).into_iter().map(|r| r.0).collect();
        let slot = |i: u32| format!("{OP_PREFIX}{i}");
        assert_eq!(slots, vec![slot(0), slot(1), slot(2), slot(0)]);
        let mut out = O::new();
        let t = Tag { ts: 3, writer: 2 };
        n.applied_op(op(4), (&k, t), &mut out);
        assert_eq!(op_records(&out), vec![(slot(1), op(4), t)], "learnt");
        let mut out = O::new();
        n.applied_op(op(4), (&k, t), &mut out);
        assert!(persists_nothing(&out), "known already");
    }

    /// A `Welcome` register newer than the disk's is persisted before the
    /// joiner serves it (a value read is on the disk where it was read);
    /// an older or equal one is not.
    #[test]
    fn a_newer_snapshot_register_is_persisted_and_an_older_one_is_not() {
        let mut n = node(2);
        n.reg(&key()).apply(&entry(2, 1, "disk"));
        let mut out = O::new();
        n.install_register(entry(2, 1, "disk"), Vec::new(), &mut out);
        assert!(!out.commands().iter().any(is_reg), "the same tag");
        n.install_register(entry(1, 3, "old"), Vec::new(), &mut out);
        assert!(!out.commands().iter().any(is_reg), "older");
        let held = n.register(&key()).map(|r| (r.tag, r.value.clone()));
        assert_eq!(
            held,
            Some((Tag { ts: 2, writer: 1 }, Some(Bytes::from("disk"))))
        );
        n.install_register(entry(3, 1, "new"), Vec::new(), &mut out);
        let newer = Command::Persist(reg_record(&entry(3, 1, "new")));
        assert!(out.commands().contains(&newer), "{:?}", out.commands());
        assert_eq!(
            n.register(&key()).map(|r| r.tag),
            Some(Tag { ts: 3, writer: 1 })
        );
    }

    #[test]
    fn a_first_start_marks_the_disk_and_a_memory_node_persists_nothing() {
        let mut out = O::new();
        node(1).on_start(T0, &mut out);
        let mark = Record::Meta {
            key: STARTED.to_string(),
            value: Bytes::new(),
        };
        assert_eq!(out.commands(), &[Command::Persist(mark)]);
        let mut n = RingNode::new(2, vec![1, 2, 3], RingConfig::default());
        let mut out = O::new();
        n.on_start(T0, &mut out);
        let w = Entry {
            op: OpId { client: 5, seq: 1 },
            ..entry(1, 1, "v")
        };
        n.on_msg(T0, Peer::Node(1), Msg::Write(w), &mut out);
        assert!(persists_nothing(&out), "{:?}", out.commands());
    }

    #[test]
    fn an_applied_write_is_persisted_before_it_is_forwarded() {
        // pc 42-48 at a server on the way.
        let mut n = node(2);
        let mut out = O::new();
        let w = Entry {
            op: OpId { client: 5, seq: 1 },
            ..entry(1, 1, "v")
        };
        n.on_msg(T0, Peer::Node(1), Msg::Write(w.clone()), &mut out);
        let reg = first(&out, is_reg);
        let op = first(&out, |c| matches!(c, Command::Persist(Record::Meta { .. })));
        let fwd = first(&out, |c| {
            matches!(
                c,
                Command::Send {
                    msg: Msg::Write(_),
                    ..
                }
            )
        });
        assert!(reg < fwd && op < fwd, "{:?}", out.commands());
        assert_eq!(out.commands()[reg], Command::Persist(reg_record(&w)));
        // A copy again: nothing new to persist.
        let mut out = O::new();
        n.on_msg(T0, Peer::Node(1), Msg::Write(w), &mut out);
        assert!(persists_nothing(&out), "{:?}", out.commands());
    }

    #[test]
    fn home_persists_before_its_write_goes_round_and_before_done() {
        // pc 32-37 and 49-50 at the origin.
        let mut n = node(1);
        let mut out = O::new();
        let c = ClientRef::local(1);
        n.on_client(T0, c, put("v"), &mut out);
        let Some(Command::Send { msg: pw, .. }) = out.commands().last().cloned() else {
            panic!("{:?}", out.commands())
        };
        let mut out = O::new();
        n.on_msg(T0, Peer::Node(3), pw, &mut out);
        let reg = first(&out, is_reg);
        let w = first(&out, |c| {
            matches!(
                c,
                Command::Send {
                    msg: Msg::Write(_),
                    ..
                }
            )
        });
        assert!(reg < w);
        let Command::Send { msg: write, .. } = out.commands()[w].clone() else {
            panic!()
        };
        let mut out = O::new();
        n.on_msg(T0, Peer::Node(3), write, &mut out);
        assert!(out.commands().contains(&Command::Reply {
            client: c,
            resp: Response::Done
        }));
    }

    #[test]
    fn the_bug_forwards_and_acknowledges_without_waiting_for_the_disk() {
        let mut n = node(2).with_bug(Some(InjectedBug::WriteAckedBeforeSync));
        let mut out = O::new();
        n.on_msg(T0, Peer::Node(1), Msg::Write(entry(1, 1, "v")), &mut out);
        assert!(out.commands().iter().any(is_reg));
        assert!(out.commands().iter().any(|c| matches!(
            c,
            Command::SendNow {
                msg: Msg::Write(_),
                ..
            }
        )));
    }

    #[test]
    fn a_restart_reads_its_registers_and_operations_back_and_starts_outside() {
        let op = OpId { client: 5, seq: 1 };
        let mut n = node(2);
        for rec in [
            reg_record(&entry(2, 1, "new")),
            op_record(0, op, (&key(), entry(2, 1, "").tag), 0),
            reg_record(&entry(1, 1, "old")), // any order: the highest wins
            Record::Meta {
                key: STARTED.to_string(),
                value: Bytes::new(),
            },
        ] {
            n.restore(rec);
        }
        let mut out = O::new();
        n.on_start(T0, &mut out);
        assert!(n.is_outside(), "dropped from every view: it rejoins");
        assert!(!n.lost, "but with its registers");
        let r = n.register(b"k").unwrap();
        assert_eq!(
            (r.tag, r.value.as_deref()),
            (entry(2, 1, "").tag, Some(&b"new"[..]))
        );
        assert!(n.ops.applied(op) && n.op_seq == 1);
        assert!(persists_nothing(&out), "{:?}", out.commands());
        // Its marked disk alone is enough to start outside.
        let mut m = node(3);
        m.restore(Record::Meta {
            key: STARTED.to_string(),
            value: Bytes::new(),
        });
        m.on_start(T0, &mut O::new());
        assert!(m.is_outside());
    }

    #[test]
    fn a_durable_restart_rejoins_with_its_registers_over_the_snapshot() {
        let mut net = Net::new(3, RingConfig::default(), None).durable();
        let c = net.ask(1, put("a"), OpId { client: 9, seq: 1 });
        net.settle();
        assert_eq!(net.answer(c), Some(Response::Done));
        net.crash(2);
        let c = net.ask(1, put("b"), OpId { client: 9, seq: 2 });
        net.settle();
        assert_eq!(net.answer(c), Some(Response::Done));
        net.restart(2);
        assert!(net.node(2).is_outside());
        assert_eq!(
            net.node(2).register(b"k").unwrap().value,
            Some(value_of("a"))
        );
        net.settle();
        assert_eq!(net.serving(), vec![1, 2, 3]);
        let r = net.ask(2, get(), OpId::NONE);
        assert_eq!(net.answer(r), Some(value("b")));
        // The snapshot's newer value went to 2's disk.
        let disk = &net.disks.as_ref().unwrap()[&2];
        let b = disk.iter().any(|r| {
            matches!(r, Record::Register { key: k, value: Some(v), .. }
            if *k == key() && v == "b")
        });
        assert!(b, "{disk:?}");
    }

    /// Seed 353 at N = 5: a server applied a write of `op` (its `Write`
    /// died in a crash), restarted and re-sent its value as a write (pc 88).
    /// The register record holds no op id: re-sent without it, the value
    /// was applied round the ring with `op` unknown there, and a retry of
    /// `op` at another server was applied again, above a later write.
    #[test]
    fn a_restarted_register_re_sends_its_value_with_its_operation() {
        let op = OpId { client: 5, seq: 1 };
        let w = Entry {
            op,
            ..entry(2, 1, "v")
        };
        let mut out = O::new();
        node(2).on_msg(T0, Peer::Node(1), Msg::Write(w), &mut out);
        let mut n = node(2);
        for c in out.drain() {
            if let Command::Persist(rec) = c {
                n.restore(rec);
            }
        }
        n.on_start(T0, &mut O::new());
        assert!(n.is_outside());
        let resent = n.register(b"k").unwrap().as_write(&key());
        assert_eq!(resent.op, op, "the re-sent value names its operation");
        // A server that applies the re-sent value answers a retry at once.
        let mut m = node(3);
        let mut out = O::new();
        m.on_msg(T0, Peer::Node(2), Msg::Write(resent), &mut out);
        let retry = ClientRef {
            id: 9,
            session: 1,
            op,
        };
        let mut out = O::new();
        m.on_client(T0, retry, put("v"), &mut out);
        assert_eq!(
            out.commands(),
            &[Command::Reply {
                client: retry,
                resp: Response::Done
            }]
        );
    }

    /// The same write re-sent without its op id (a register whose op record
    /// was lost) takes it from its pre-write pending here, and passes it on.
    #[test]
    fn a_write_without_its_op_id_takes_it_from_its_pre_write() {
        let op = OpId { client: 5, seq: 1 };
        let pre = Entry {
            op,
            ..entry(2, 1, "v")
        };
        let mut n = node(2);
        n.on_start(T0, &mut O::new());
        n.on_msg(T0, Peer::Node(1), Msg::PreWrite(pre), &mut O::new());
        let mut out = O::new();
        n.on_msg(T0, Peer::Node(1), Msg::Write(entry(2, 1, "v")), &mut out);
        assert!(n.ops.applied(op));
        let fwd = out.commands().iter().find_map(|c| match c {
            Command::Send {
                msg: Msg::Write(e), ..
            } => Some(e.op),
            _ => None,
        });
        assert_eq!(fwd, Some(op));
    }

    fn value_of(v: &str) -> Bytes {
        Bytes::copy_from_slice(v.as_bytes())
    }

    #[test]
    fn an_op_record_reads_back_and_a_torn_one_is_ignored() {
        let op = OpId { client: 7, seq: 9 };
        let t = Tag { ts: 4, writer: 2 };
        let Record::Meta { key: name, value } = op_record(3, op, (&key(), t), 3) else {
            panic!()
        };
        assert_eq!(name, "ring/op/3");
        assert_eq!(parse_op(&value), Some((3, op, key(), t)));
        assert_eq!(parse_op(&value[..39]), None);
    }
}
