//! The simulator keeps to what a protocol declares in its `ProtocolDef`
//! (link model, crash bound, request deduplication) and drives sessions
//! and notifications, shown with a toy protocol defined here.
//!
//! The toy, "relay": node 1 holds the store; other nodes forward client
//! requests to it and relay the answer. Every node-to-node message carries
//! a per-link sequence number and nodes ping each other every 2 ms, so a
//! receiver sees any duplicate, reordering or silent gap; what it sees
//! goes to thread-local counters (`run_seed` runs on the test's thread).

use bytes::Bytes;
use quorumkv_core::protocol::{
    LinkEvent, LinkModel, NoBugs, NoOptions, NodeSpec, Out, Protocol, ProtocolDef, ServerOnly,
};
use quorumkv_core::{ClientRef, Event, NodeId, OpError, OpId, Peer, Request, Response, Time};
use quorumkv_sim::registry::register;
use quorumkv_sim::*;
use serde::{Deserialize, Serialize};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

thread_local! {
    /// Messages a node got out of order, twice, or after a gap with no `Down`.
    static FIFO_VIOLATIONS: Cell<u64> = const { Cell::new(0) };
    /// `(node, session, up)` for every client-session link event.
    static SESSION_EVENTS: RefCell<Vec<(NodeId, u64, bool)>> = const { RefCell::new(Vec::new()) };
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Msg {
    Fwd {
        seq: u64,
        cref: ClientRef,
        req: Request,
    },
    Ans {
        seq: u64,
        cref: ClientRef,
        resp: Response,
    },
    Ping {
        seq: u64,
    },
}

impl Msg {
    fn seq(&self) -> u64 {
        match self {
            Msg::Fwd { seq, .. } | Msg::Ans { seq, .. } | Msg::Ping { seq } => *seq,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Ping;

#[derive(Clone, Copy, Debug, Default)]
struct Flags {
    /// Apply each `OpId` at most once (answer a repeat from a table).
    dedup: bool,
    /// Notify the session of every put (and a session that does not exist).
    notify: bool,
    /// Panic on the first client request (a core with a bug that panics).
    panic: bool,
}

#[derive(Debug)]
struct Relay {
    id: NodeId,
    members: Vec<NodeId>,
    flags: Flags,
    store: BTreeMap<Bytes, Bytes>,
    answered: HashMap<OpId, Response>,
    /// Per peer id: last sequence number sent, next one expected (`None`
    /// at first and after a `Down`: a new connection, maybe a new life of
    /// the peer that counts from 1 again).
    sent: Vec<u64>,
    expect: Vec<Option<u64>>,
}

impl Relay {
    fn new(spec: &NodeSpec<'_>, flags: Flags) -> Relay {
        let n = spec.members.len() + 1;
        Relay {
            id: spec.id,
            members: spec.members.to_vec(),
            flags,
            store: BTreeMap::new(),
            answered: HashMap::new(),
            sent: vec![0; n],
            expect: vec![None; n],
        }
    }

    fn send(&mut self, to: NodeId, out: &mut Out<Msg, Ping>, msg: impl FnOnce(u64) -> Msg) {
        self.sent[to as usize] += 1;
        out.send(Peer::Node(to), msg(self.sent[to as usize]));
    }

    fn check_order(&mut self, from: NodeId, seq: u64) {
        let p = from as usize;
        if self.expect[p].is_some_and(|e| seq != e) {
            FIFO_VIOLATIONS.with(|v| v.set(v.get() + 1));
        }
        self.expect[p] = Some(seq + 1);
    }

    fn apply(&mut self, op: OpId, req: Request) -> Response {
        if self.flags.dedup {
            if let Some(r) = self.answered.get(&op) {
                return r.clone();
            }
        }
        let resp = match req {
            Request::Get { key } => Response::Value(self.store.get(&key).cloned()),
            Request::Put { key, value } => {
                self.store.insert(key, value);
                Response::Done
            }
            Request::Delete { key } => {
                self.store.remove(&key);
                Response::Done
            }
            _ => Response::Failed(OpError::refused("the relay knows get, put, delete")),
        };
        if self.flags.dedup {
            self.answered.insert(op, resp.clone());
        }
        resp
    }
}

impl Protocol for Relay {
    type Msg = Msg;
    type Timer = Ping;

    fn on_start(&mut self, _: Time, out: &mut Out<Msg, Ping>) {
        out.set_timer(Duration::from_millis(2), Ping);
    }
    fn on_client(&mut self, _: Time, cref: ClientRef, req: Request, out: &mut Out<Msg, Ping>) {
        if self.flags.panic {
            panic!("boom: node {} got {req:?}", self.id);
        }
        if let (true, Request::Put { key, value }) = (self.flags.notify, &req) {
            let event = Event {
                kind: "put".into(),
                key: key.clone(),
                value: Some(value.clone()),
            };
            out.notify(cref.session, event.clone());
            out.notify(cref.session + 1_000_000, event); // no such session
        }
        if self.id == 1 {
            let resp = self.apply(cref.op, req);
            out.reply(cref, resp);
        } else {
            self.send(1, out, |seq| Msg::Fwd { seq, cref, req });
        }
    }
    fn on_msg(&mut self, _: Time, from: Peer, msg: Msg, out: &mut Out<Msg, Ping>) {
        let Peer::Node(from) = from else { return };
        self.check_order(from, msg.seq());
        match msg {
            Msg::Fwd { cref, req, .. } => {
                let resp = self.apply(cref.op, req);
                self.send(from, out, |seq| Msg::Ans { seq, cref, resp });
            }
            Msg::Ans { cref, resp, .. } => out.reply(cref, resp),
            Msg::Ping { .. } => {}
        }
    }
    fn on_timer(&mut self, _: Time, _: Ping, out: &mut Out<Msg, Ping>) {
        for to in self.members.clone() {
            if to != self.id {
                self.send(to, out, |seq| Msg::Ping { seq });
            }
        }
        out.set_timer(Duration::from_millis(2), Ping);
    }
    fn on_link(&mut self, _: Time, ev: LinkEvent, _: &mut Out<Msg, Ping>) {
        match ev {
            LinkEvent::Down(Peer::Node(p)) => self.expect[p as usize] = None,
            LinkEvent::Up(Peer::Node(_)) => {}
            LinkEvent::Down(Peer::Conn(s)) | LinkEvent::Up(Peer::Conn(s)) => {
                let up = matches!(ev, LinkEvent::Up(_));
                SESSION_EVENTS.with(|e| e.borrow_mut().push((self.id, s, up)));
            }
        }
    }
}

/// A relay variant: name, link model, crash bound, dedup claim, behaviour.
macro_rules! relay {
    ($ty:ident, $link:expr, $max:expr, $claims_dedup:expr, $flags:expr) => {
        struct $ty;
        impl ServerOnly for $ty {
            const NAME: &'static str = stringify!($ty);
            const ABOUT: &'static str = "a toy for the simulator's tests";
            const LINK_MODEL: LinkModel = $link;
            const PROMISES_LIVENESS: bool = false;
            const DEDUPLICATES_REQUESTS: bool = $claims_dedup;
            type Msg = Msg;
            type Node = Relay;
            type Options = NoOptions;
            type Bug = NoBugs;
            fn max_crashed(n: usize) -> usize {
                let f: fn(usize) -> usize = $max;
                f(n)
            }
            fn node(spec: &NodeSpec<'_>, _: &NoOptions, _: Option<NoBugs>) -> Relay {
                Relay::new(spec, $flags)
            }
        }
    };
}

const PLAIN: Flags = Flags {
    dedup: false,
    notify: false,
    panic: false,
};
const DEDUP: Flags = Flags {
    dedup: true,
    notify: false,
    panic: false,
};
const NOTIFY: Flags = Flags {
    dedup: false,
    notify: true,
    panic: false,
};

relay!(FifoRelay, LinkModel::FifoReliable, |n| n - 1, false, PLAIN);
relay!(NeverCrash, LinkModel::Unreliable, |_| 0, false, PLAIN);
relay!(AllButOne, LinkModel::Unreliable, |n| n - 1, false, PLAIN);
relay!(HonestDedup, LinkModel::Unreliable, |_| 0, true, DEDUP);
relay!(ClaimsDedup, LinkModel::Unreliable, |_| 0, true, PLAIN);
relay!(Notifier, LinkModel::Unreliable, |_| 0, false, NOTIFY);

fn config(faults: &str) -> SimConfig {
    SimConfig {
        faults: faults.parse().unwrap(),
        ..SimConfig::default()
    }
}

/// Run `seeds` of `D` on this thread; the FIFO violations and the totals.
fn run<D: ProtocolDef>(cfg: &SimConfig, seeds: std::ops::Range<u64>) -> (u64, Vec<SeedReport>) {
    FIFO_VIOLATIONS.with(|v| v.set(0));
    let reports = seeds.map(|s| run_seed::<D>(cfg, s).unwrap()).collect();
    (FIFO_VIOLATIONS.with(|v| v.get()), reports)
}

fn total(reports: &[SeedReport], f: fn(&world::Stats) -> u64) -> u64 {
    reports.iter().map(|r| f(&r.stats)).sum()
}

/// (a) A FIFO-reliable protocol sees its peers' messages in order, at most
/// once, with gaps only after a `Down`, under every fault; loss becomes
/// connection resets, partitions hold messages. With --break-assumptions
/// the same seeds break it.
#[test]
fn fifo_links_keep_their_model_unless_told_to_break_it() {
    let kept = config("delay,loss,dup,reorder,partition,crash,pause");
    let (violations, reports) = run::<FifoRelay>(&kept, 0..30);
    assert_eq!(violations, 0);
    assert_eq!(total(&reports, |s| s.duplicated + s.lost), 0);
    assert!(total(&reports, |s| s.resets) > 0, "loss became resets");
    assert!(total(&reports, |s| s.held) > 0, "partitions held messages");
    assert!(total(&reports, |s| s.link_downs) > 0);
    assert!(reports
        .iter()
        .all(|r| !r.params.reorder && r.params.dup_p == 0.0));
    let broken = SimConfig {
        break_assumptions: true,
        ..kept
    };
    let (violations, reports) = run::<FifoRelay>(&broken, 0..30);
    assert!(violations > 0, "silent loss, dup and reorder show");
    assert!(total(&reports, |s| s.duplicated) > 0);
    // The CLI says so.
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: cli::Args,
    }
    let line = [
        "sim",
        "--seeds",
        "0..2",
        "--no-progress",
        "--break-assumptions",
    ];
    let a = <Cli as clap::Parser>::parse_from(line).args;
    let mut out = Vec::new();
    cli::run_to(&a, &register::<FifoRelay>(), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("WARNING: --break-assumptions"), "{text}");
}

/// (b) Where nodes forget (memory), the nemesis keeps to `max_crashed(N)`:
/// none for a protocol that tolerates no crash, more than ABD's f for one
/// that tolerates N − 1. Where they keep their records (fsync), it may
/// crash every node at once.
#[test]
fn the_nemesis_keeps_to_the_protocols_crash_bound() {
    let crash = SimConfig {
        durability: Some(Durability::Memory),
        ..config("crash,pause,partition")
    };
    let (_, none) = run::<NeverCrash>(&crash, 0..20);
    assert_eq!(total(&none, |s| s.crashes), 0);
    let five = SimConfig {
        replicas: Some(5),
        ..crash
    };
    let (_, many) = run::<AllButOne>(&five, 0..20);
    let peak = many.iter().map(|r| r.stats.peak_down).max().unwrap();
    assert!(peak > 2, "more than (N-1)/2 = 2 down at once: {peak}");
    let abd = registry::find("abd").unwrap();
    let s = sweep(&abd, &five, "0..40".parse().unwrap(), 2, 0, |_| {}).unwrap();
    assert!(
        s.totals.crashes > 0 && s.totals.peak_down <= 2,
        "{:?}",
        s.totals
    );
    let fsync = SimConfig {
        durability: Some(Durability::Fsync),
        ..five
    };
    let (_, all) = run::<NeverCrash>(&fsync, 0..20);
    assert!(total(&all, |s| s.cluster_crashes) > 0);
    let s = sweep(&abd, &fsync, "0..40".parse().unwrap(), 2, 0, |_| {}).unwrap();
    assert!(s.all_passed());
    assert_eq!(s.totals.peak_down, 5, "{:?}", s.totals);
}

/// (c) A proxy client that gives up reconnects: the servers that knew its
/// session see it go `Down` (after `Up`). A `Notify` reaches the client of
/// that session only; one for a session that does not exist is dropped.
#[test]
fn sessions_come_and_go_and_notifications_reach_their_client() {
    SESSION_EVENTS.with(|e| e.borrow_mut().clear());
    let cfg = SimConfig {
        trace: true,
        ..config("partition,pause")
    };
    let (_, reports) = run::<Notifier>(&cfg, 0..10);
    let events = SESSION_EVENTS.with(|e| e.take());
    let downs: Vec<_> = events.iter().filter(|e| !e.2).collect();
    assert!(!downs.is_empty() && total(&reports, |s| s.reconnects) > 0);
    for &&(node, s, _) in &downs {
        assert!(
            events.contains(&(node, s, true)),
            "Down before Up: n{node} s{s}"
        );
    }
    let (sent, dropped) = (
        total(&reports, |s| s.notifies),
        total(&reports, |s| s.notifies_dropped),
    );
    assert!(sent > 0 && dropped >= sent, "{sent} {dropped}");
    for line in reports.iter().flat_map(|r| r.trace.iter().flatten()) {
        let Some((who, _)) = line.split_whitespace().nth(1).zip(line.find(" NOTIFIED ")) else {
            continue;
        };
        assert!(line.contains(&format!("Some(b\"{who}.")), "{line}");
    }
}

/// (d) An operation keeps its `OpId` across a retry at another node and a
/// duplicated request: a protocol that deduplicates by it passes, one that
/// claims to but does not is caught by the checker — with duplicated
/// requests, and with the proxy client's retries alone (no `dup` fault).
#[test]
fn operation_ids_survive_retries_and_only_real_dedup_passes() {
    let (honest, liar) = (register::<HonestDedup>(), register::<ClaimsDedup>());
    for faults in ["delay,dup,reorder,pause", "delay,partition,pause"] {
        let cfg = config(faults);
        let s = sweep(&honest, &cfg, "0..60".parse().unwrap(), 2, 0, |_| {}).unwrap();
        for f in &s.failures {
            eprintln!("{faults} seed {}: {}", f.seed, f.verdict);
        }
        assert!(s.all_passed(), "{faults}");
        assert!(s.totals.retries > 0, "{faults}: {:?}", s.totals);
        let s = sweep(&liar, &cfg, "0..60".parse().unwrap(), 2, 1, |_| {}).unwrap();
        let f = s.failures.first().expect("a repeated put applies twice");
        assert!(matches!(f.verdict, Verdict::Unsafe { .. }), "{}", f.verdict);
    }
}

/// The seeds whose cores [`Bomb`] makes panic, by their drawn knobs (the
/// one per-seed value a protocol sees, through `vary`).
static BOMB_KNOBS: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

#[derive(Clone, Debug, Default, PartialEq)]
struct BombOptions {
    armed: bool,
}

impl quorumkv_core::protocol::ProtocolOptions for BombOptions {
    fn specs() -> &'static [quorumkv_core::protocol::options::OptSpec] {
        &[]
    }
    fn set(&mut self, key: &str, _: &str) -> Result<(), String> {
        Err(format!("unknown option '{key}'"))
    }
    fn get(&self, _: &str) -> String {
        String::new()
    }
}

/// The plain relay, whose nodes panic on their first request in the seeds
/// of `BOMB_KNOBS`.
struct Bomb;

impl ServerOnly for Bomb {
    const NAME: &'static str = "bomb";
    const ABOUT: &'static str = "a toy core that panics on chosen seeds";
    const LINK_MODEL: LinkModel = LinkModel::Unreliable;
    const PROMISES_LIVENESS: bool = false;
    type Msg = Msg;
    type Node = Relay;
    type Options = BombOptions;
    type Bug = NoBugs;
    fn max_crashed(_: usize) -> usize {
        0
    }
    fn node(spec: &NodeSpec<'_>, opts: &BombOptions, _: Option<NoBugs>) -> Relay {
        let flags = Flags {
            panic: opts.armed,
            ..PLAIN
        };
        Relay::new(spec, flags)
    }
    fn vary(opts: &mut BombOptions, knobs: u64) {
        opts.armed = BOMB_KNOBS.lock().unwrap().contains(&knobs);
    }
}

/// (e) A core that panics fails its seed, not the sweep: seeds 3 and 7 of
/// 0..20 panic, are reported with the panic and their replay command, and
/// the 18 others still run and pass.
#[test]
fn a_panicking_core_fails_its_seed_and_the_sweep_goes_on() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: cli::Args,
    }
    let argv = [
        "sim",
        "--protocol",
        "bomb",
        "--seeds",
        "0..20",
        "--faults",
        "none",
    ];
    let args = Cmd::parse_from(argv).args;
    let cfg = args.to_config();
    let has_coordinator = <Bomb as ProtocolDef>::HAS_CLIENT_COORDINATOR;
    let knobs = |s| SeedParams::draw(&cfg, s, has_coordinator).knobs;
    *BOMB_KNOBS.lock().unwrap() = vec![knobs(3), knobs(7)];
    let others: Vec<u64> = (0..20).filter(|&s| s != 3 && s != 7).map(knobs).collect();
    assert!(others.iter().all(|k| *k != knobs(3) && *k != knobs(7)));

    let mut out = Vec::new();
    let args = cli::Args {
        jobs: Some(2),
        no_progress: true,
        ..args
    };
    let summary = cli::run_to(&args, &register::<Bomb>(), &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    let failed: Vec<u64> = summary.failures.iter().map(|f| f.seed).collect();
    assert_eq!(failed, [3, 7], "{out}");
    assert_eq!((summary.seeds_run, summary.passed), (20, 18), "{out}");
    for f in &summary.failures {
        let Verdict::Panicked { details } = &f.verdict else {
            panic!("seed {}: {}", f.seed, f.verdict);
        };
        assert!(
            details.starts_with("a protocol core panicked: boom: node "),
            "{details}"
        );
        assert!(details.contains("toy.rs:"), "where it panicked: {details}");
        assert!(
            out.contains(&format!(
            "FAIL seed {}: PANIC\n  replay: quorumkv sim --protocol bomb --seeds {} --faults none ",
            f.seed, f.seed
        )),
            "{out}"
        );
    }
    assert_eq!(out.matches("FAIL seed").count(), 2, "{out}");
    assert!(
        out.contains("seeds: 20 run, 18 passed, 2 failed (0 not linearizable, 0 liveness, 0 undecided, 2 panicked)"),
        "{out}"
    );
}
