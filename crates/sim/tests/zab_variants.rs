//! Seed 003's broadcast variants (`--opt broadcast=ac|aa|ct|ct-q|aa-q`,
//! `zab/broadcast.rs`): CI seeds for each under the faults its assumptions
//! admit, and the thesis' Fig. 3.1 scenario outside them, scripted.

use bytes::Bytes;
use quorumkv_core::op::{Op, Outcome};
use quorumkv_core::protocol::zab::{Config, Msg, Timer, Variant, Zab, ZabNode};
use quorumkv_core::protocol::{Command, LinkEvent, Out, Protocol, Record};
use quorumkv_core::types::{ClientRef, NodeId, Peer, Request, Response, Time};
use quorumkv_sim::history::OpRecord;
use quorumkv_sim::registry::register;
use quorumkv_sim::verify::{check, Safety};
use quorumkv_sim::*;
use std::collections::VecDeque;
use std::time::Duration;

fn variant_cfg(v: &str, durability: Durability, replicas: Option<u32>) -> SimConfig {
    SimConfig {
        protocol: "zab".into(),
        // The default faults, outages (a majority down at once) included:
        // every variant recovers from them (A1.1's successor rule,
        // `zab/broadcast.rs`). The nemesis's own crashes stay within a
        // minority for ac, aa and ct (A1.2, `Zab::bounds_durable_crashes`).
        faults: FaultSet::all(),
        durability: Some(durability),
        replicas,
        options: vec![("broadcast".into(), v.into())],
        ..SimConfig::default()
    }
}

/// Every variant passes its CI seeds, durable and in memory mode.
#[test]
fn ci_seeds_zab_variants() {
    let zab = register::<Zab>();
    for (v, replicas) in [
        ("ac", Some(3)),
        ("aa", None),
        ("ct", None),
        ("ct-q", None),
        ("aa-q", None),
    ] {
        for (durability, range) in [(Durability::Fsync, "0..60"), (Durability::Memory, "0..40")] {
            let c = variant_cfg(v, durability, replicas);
            let s = sweep(&zab, &c, range.parse().unwrap(), 2, 3, |_| {}).unwrap();
            for f in &s.failures {
                eprintln!("{v} seed {} ({}): {}", f.seed, f.params, f.verdict);
            }
            assert!(
                s.all_passed(),
                "{v} {durability}: {} failed",
                s.failures.len()
            );
            assert!(s.totals.crashes > 0, "{v}: {:?}", s.totals);
        }
    }
}

/// Seeds that stalled for good before an old leader kept out by A1.1
/// could rejoin on hearing that a newer epoch was established: a majority
/// outage left two old leaders out, each waiting for a newer leader that
/// only they could help elect (`quorumkv sim --protocol zab --opt
/// broadcast=V --replicas N --seeds S`, default faults). Each now passes.
#[test]
fn outage_seeds_that_stalled_the_restricted_variants_now_recover() {
    let zab = register::<Zab>();
    for (v, n, seeds) in [
        ("ac", 3, &[4, 7, 19, 27, 199][..]),
        ("aa", 3, &[4, 7, 14][..]),
        ("aa", 5, &[43, 190, 287, 378][..]),
        ("ct", 3, &[4, 7, 27][..]),
        ("ct", 5, &[115, 129, 333, 378][..]),
    ] {
        let c = SimConfig {
            protocol: "zab".into(),
            replicas: Some(n),
            options: vec![("broadcast".into(), v.into())],
            ..SimConfig::default()
        };
        assert_eq!(c.faults, FaultSet::all(), "the default faults");
        for &seed in seeds {
            let r = (zab.run_seed)(&c, seed).unwrap();
            assert!(r.stats.outages > 0, "{v} N={n} seed {seed}: no outage");
            assert!(r.verdict.passed(), "{v} N={n} seed {seed}: {}", r.verdict);
        }
    }
}

/// `ac` is ZabAc, N = 3 only: other sizes are refused with a clear error.
#[test]
fn ac_is_refused_unless_n_is_three() {
    let zab = register::<Zab>();
    let c = variant_cfg("ac", Durability::Fsync, Some(5));
    let e = (zab.run_seed)(&c, 0).unwrap_err();
    assert!(e.contains("N = 3") && e.contains("N = 5"), "{e}");
    let drawn = variant_cfg("ac", Durability::Fsync, None);
    let e = (0..20).find_map(|s| (zab.run_seed)(&drawn, s).err());
    assert!(e.is_some_and(|e| e.contains("--replicas")));
}

// ---- Fig. 3.1, scripted ----------------------------------------------------

type O = Out<Msg, Timer>;

/// Three servers, FIFO links that can be cut, disks that sync at once
/// unless told not to (then records, held sends and durability reports wait
/// for a sync that a crash never brings), and a history of client ops.
struct Script {
    opts: (Variant, bool),
    nodes: Vec<Option<ZabNode>>,
    disks: Vec<Vec<Record>>,
    lazy: Vec<bool>,
    held: Vec<Vec<Command<Msg, Timer>>>,
    cut: Vec<(NodeId, NodeId)>,
    queue: VecDeque<(NodeId, NodeId, Msg)>,
    replies: Vec<(ClientRef, Response)>,
    now: Time,
    lives: u64,
    clients: u64,
    history: Vec<OpRecord>,
    open: Vec<(ClientRef, usize)>,
}

impl Script {
    fn new(v: Variant, stay_out: bool) -> Script {
        let mut s = Script {
            opts: (v, stay_out),
            nodes: vec![None, None, None],
            disks: vec![Vec::new(); 3],
            lazy: vec![false; 3],
            held: vec![Vec::new(), Vec::new(), Vec::new()],
            cut: Vec::new(),
            queue: VecDeque::new(),
            replies: Vec::new(),
            now: Time::ZERO,
            lives: 0,
            clients: 0,
            history: Vec::new(),
            open: Vec::new(),
        };
        for id in 1..=3 {
            s.boot(id);
        }
        s
    }
    fn boot(&mut self, id: NodeId) {
        self.lives += 1;
        let (v, stay_out) = self.opts;
        let writer = u64::from(id) | self.lives << 32;
        let mut n = ZabNode::new(id, &[1, 2, 3], writer, Config::default())
            .with_broadcast(v, 0.5, self.lives)
            .with_stay_out(stay_out);
        for r in self.disks[id as usize - 1].clone() {
            n.restore(r);
        }
        self.nodes[id as usize - 1] = Some(n);
        self.call(id, |n, now, out| n.on_start(now, out));
    }
    fn node(&self, id: NodeId) -> &ZabNode {
        self.nodes[id as usize - 1].as_ref().expect("up")
    }
    fn call(&mut self, id: NodeId, f: impl FnOnce(&mut ZabNode, Time, &mut O)) {
        let i = id as usize - 1;
        let Some(n) = self.nodes[i].as_mut() else {
            return;
        };
        let mut out = O::new();
        f(n, self.now, &mut out);
        for c in out.drain() {
            match c {
                Command::Persist(r) if self.lazy[i] => self.held[i].push(Command::Persist(r)),
                Command::Persist(r) => self.disks[i].push(r),
                c @ (Command::Send { .. } | Command::Reply { .. } | Command::WhenDurable(_))
                    if self.lazy[i] =>
                {
                    self.held[i].push(c)
                }
                c => self.emit(id, c),
            }
        }
    }
    /// Executes `c`, which nothing is held before (never held, or released).
    fn emit(&mut self, id: NodeId, c: Command<Msg, Timer>) {
        match c.plain() {
            Command::Send {
                to: Peer::Node(to),
                msg,
            } if !self.cut.contains(&(id, to)) => self.queue.push_back((id, to, msg)),
            Command::WhenDurable(msg) => self.queue.push_back((id, id, msg)),
            Command::Reply { client, resp } => self.replies.push((client, resp)),
            _ => {}
        }
    }
    fn run(&mut self) {
        while let Some((from, to, msg)) = self.queue.pop_front() {
            self.call(to, |n, now, out| n.on_msg(now, Peer::Node(from), msg, out));
        }
        self.complete();
    }
    fn tick(&mut self) {
        self.now = self.now.saturating_add(Duration::from_millis(10));
        for id in 1..=3 {
            self.call(id, |n, now, out| n.on_timer(now, Timer::Finalize, out));
            self.call(id, |n, now, out| n.on_timer(now, Timer::Tick, out));
        }
        self.run();
    }
    fn settle(&mut self) -> NodeId {
        for _ in 0..300 {
            self.tick();
            let up: Vec<&ZabNode> = self.nodes.iter().flatten().collect();
            let ls: Vec<NodeId> = up.iter().filter_map(|n| n.leader()).collect();
            if ls.len() == up.len() && ls.iter().all(|&l| l == ls[0]) {
                return ls[0];
            }
        }
        panic!("no leader");
    }
    fn crash(&mut self, id: NodeId) {
        let i = id as usize - 1;
        self.nodes[i] = None;
        self.held[i].clear(); // never synced: lost
        self.lazy[i] = false;
        self.queue.retain(|&(f, t, _)| f != id && t != id);
        for other in (1..=3).filter(|&o| o != id) {
            let ev = LinkEvent::Down(Peer::Node(id));
            self.call(other, |n, now, out| n.on_link(now, ev, out));
        }
        // Its clients never hear back: their outcome stays unknown.
    }
    fn stamp(&mut self) -> u64 {
        self.now = Time::from_micros(self.now.as_micros() + 1);
        self.now.as_micros() * 1000
    }
    fn invoke(&mut self, at: NodeId, op: Op) -> ClientRef {
        self.clients += 1;
        let client = ClientRef::local(self.clients);
        let req = match &op {
            Op::Put { key, value } => Request::Put {
                key: Bytes::from(key.clone()),
                value: Bytes::from(value.clone()),
            },
            Op::Get { key } => Request::Get {
                key: Bytes::from(key.clone()),
            },
            _ => unreachable!(),
        };
        let invoke_ns = self.stamp();
        self.history.push(OpRecord {
            process: self.clients,
            op,
            invoke_ns,
            complete_ns: u64::MAX,
            outcome: Outcome::Unknown,
        });
        self.open.push((client, self.history.len() - 1));
        self.call(at, |n, now, out| n.on_client(now, client, req, out));
        client
    }
    /// Record the answers that came.
    fn complete(&mut self) {
        for (client, resp) in std::mem::take(&mut self.replies) {
            let Some(k) = self.open.iter().position(|(c, _)| *c == client) else {
                continue;
            };
            let (_, i) = self.open.remove(k);
            let ns = self.stamp();
            let r = &mut self.history[i];
            r.complete_ns = ns;
            r.outcome = match resp {
                Response::Done => Outcome::Ok(None),
                Response::Value(v) => {
                    Outcome::Ok(v.map(|b| String::from_utf8_lossy(&b).into_owned()))
                }
                _ => Outcome::Unknown,
            };
        }
    }
    fn answered(&self, client: ClientRef) -> Option<&Outcome> {
        let i = self.open.iter().all(|(c, _)| *c != client);
        i.then(|| {
            let k = client.id as usize - 1;
            &self.history[k].outcome
        })
    }
    fn verdict(&mut self) -> Safety {
        let end = self.stamp();
        for r in &mut self.history {
            if r.complete_ns == u64::MAX {
                r.complete_ns = end;
            }
        }
        check(&self.history, Duration::from_secs(10))
    }
}

fn put(k: &str, v: &str) -> Op {
    Op::Put {
        key: k.into(),
        value: v.into(),
    }
}

/// Fig. 3.1 (lines 1000-1010), N = 3, outside A1.1 and A1.2: follower F1
/// delivers and answers a write it logged alone (its own ACK is f = 1
/// follower), the leader L had not synced it, then L and F1 crash and L
/// comes back at once. L and F2 form a quorum without the write, and a
/// read there misses it. Returns the write's outcome and the verdict.
fn fig_3_1(v: Variant, stay_out: bool) -> (Outcome, Safety) {
    let mut s = Script::new(v, stay_out);
    let l = s.settle();
    let (f1, f2) = match l {
        1 => (2, 3),
        2 => (1, 3),
        _ => (1, 2),
    };
    let c1 = s.invoke(f1, put("k", "v1"));
    for _ in 0..10 {
        s.run();
        if s.answered(c1).is_some() {
            break;
        }
        s.tick();
    }
    assert_eq!(s.answered(c1), Some(&Outcome::Ok(None)), "{}", v.name());
    // F2 hears nothing of the next write; L's disk does not sync.
    s.cut = vec![(l, f2), (f1, f2)];
    s.lazy[l as usize - 1] = true;
    let c2 = s.invoke(f1, put("k", "v2"));
    s.run();
    let outcome = s.answered(c2).cloned().unwrap_or(Outcome::Unknown);
    s.crash(l);
    s.crash(f1);
    s.cut.clear();
    s.boot(l);
    // L and F2 elect a leader, unless A1.1 keeps L out.
    let mut read = None;
    for _ in 0..30 {
        s.tick();
        if s.node(f2).leader().is_some() && s.node(l).leader().is_some() {
            read = Some(s.invoke(f2, Op::Get { key: "k".into() }));
            break;
        }
    }
    if let Some(r) = read {
        for _ in 0..20 {
            s.tick();
            if s.answered(r).is_some() {
                break;
            }
        }
    }
    s.boot(f1);
    s.settle();
    (outcome, s.verdict())
}

/// The thesis' prediction: ac, aa and ct lose a delivered write when the
/// old leader is back early (A1.1 broken) with a follower down (A1.2
/// broken); zab and ct-q never answered it (no quorum logged it), so their
/// histories stay linearizable. With A1.1 kept (`stay-out`, the default)
/// the old leader stays out and no one serves until F1 is back.
#[test]
fn fig_3_1_ac_aa_ct_lose_a_delivered_write_zab_and_ct_q_do_not() {
    for v in [Variant::Ac, Variant::Aa, Variant::Ct] {
        let (w, safety) = fig_3_1(v, false);
        assert_eq!(
            w,
            Outcome::Ok(None),
            "{}: F1 answers on its own ACK",
            v.name()
        );
        assert!(
            matches!(safety, Safety::Violation(_)),
            "{}: {safety:?}",
            v.name()
        );
        let (w, safety) = fig_3_1(v, true);
        assert_eq!(w, Outcome::Ok(None));
        assert_eq!(safety, Safety::Linearizable, "{} with A1.1", v.name());
    }
    for v in [Variant::Zab, Variant::CtQ, Variant::AaQ] {
        let (w, safety) = fig_3_1(v, false);
        assert_eq!(
            w,
            Outcome::Unknown,
            "{}: answered without a quorum",
            v.name()
        );
        assert_eq!(safety, Safety::Linearizable, "{}", v.name());
    }
}
