//! The registration: how drivers build a server, its options, its
//! assumptions. (Registered by one line in `registry!`.)

use super::bugs::InjectedBug;
use super::msg::Msg;
use super::node::{Config, LamportNode, LockScope};
use crate::protocol::contract::Timing;
use crate::protocol::contract::{ClientSpec, LinkModel, NamedVariant, NodeSpec, ProtocolDef};
use crate::protocol::options::{format_duration, parse_bool, parse_duration};
use crate::protocol::options::{OptSpec, ProtocolOptions};
use std::time::Duration;

/// The Lamport-mutex store as the registry knows it: servers only.
#[derive(Debug)]
pub struct Lamport;

/// Lamport's options (`--opt lock-scope=key`, `[options]` in a cluster file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LamportOptions {
    pub lock_scope: LockScope,
    /// Zero: wait for a silent peer forever (the seed).
    pub lock_timeout: Duration,
    pub read_wait: bool,
}

/// The default is the repair: `read-wait` (the seed's local read during a
/// broadcast is not linearizable). The seed's rule is the `seed` variant.
impl Default for LamportOptions {
    fn default() -> Self {
        LamportOptions {
            lock_scope: LockScope::Global,
            lock_timeout: Duration::ZERO,
            read_wait: true,
        }
    }
}

impl ProtocolOptions for LamportOptions {
    fn specs() -> &'static [OptSpec] {
        &[
            OptSpec {
                name: "lock-scope",
                default: "global",
                help: "what a write locks: global (the seed) or key",
            },
            OptSpec {
                name: "lock-timeout",
                default: "0s",
                help: "evict a peer silent this long while awaited (0 = wait forever, the seed)",
            },
            OptSpec {
                name: "read-wait",
                default: "true",
                help: "stage writes everywhere, apply at release; reads of a staged key wait (false: the seed)",
            },
        ]
    }
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "lock-scope" => {
                self.lock_scope = match value {
                    "global" => LockScope::Global,
                    "key" => LockScope::Key,
                    _ => return Err(format!("'{value}' is not global or key")),
                }
            }
            "lock-timeout" => self.lock_timeout = parse_duration(value)?,
            "read-wait" => self.read_wait = parse_bool(value)?,
            _ => return Err(format!("unknown option '{key}'")),
        }
        Ok(())
    }
    fn get(&self, key: &str) -> String {
        match key {
            "lock-scope" => match self.lock_scope {
                LockScope::Global => "global".into(),
                LockScope::Key => "key".into(),
            },
            "lock-timeout" => format_duration(self.lock_timeout),
            "read-wait" => self.read_wait.to_string(),
            _ => String::new(),
        }
    }
}

impl LamportOptions {
    pub fn config(&self, t: &Timing) -> Config {
        Config {
            scope: self.lock_scope,
            lock_timeout: (!self.lock_timeout.is_zero()).then_some(self.lock_timeout),
            read_wait: self.read_wait,
            op_timeout: t.op_timeout,
        }
    }
}

impl ProtocolDef for Lamport {
    const NAME: &'static str = "lamport";
    const ABOUT: &'static str =
        "server-side Lamport mutex: writes under a distributed lock, broadcast; local reads";
    // Lamport's entry rule needs FIFO: "a later message from p" must mean
    // every earlier request of p has arrived. Losses are resets + Up.
    const LINK_MODEL: LinkModel = LinkModel::FifoReliable;
    // Clients talk to one server (seed 002 §3.2): no client coordinator.
    const HAS_CLIENT_COORDINATOR: bool = false;
    // Once faults heal, Outstanding + resends on Up, and the tick's polls
    // and SyncRequest retries (an Up seen on one side only), unblock every
    // queue: 0 liveness failures in 2000 seeds per fault set, N = 3, 5.
    const PROMISES_LIVENESS: bool = true;
    const DEDUPLICATES_REQUESTS: bool = false;
    // Durable servers keep their store, staged writes, clock mark and life
    // (`durable.rs`); a memory-mode restart is `lost_state` and recovers.
    const PERSISTS_STATE: bool = true;
    const VARIANTS: &'static [NamedVariant] = &[
        NamedVariant {
            name: "per-key",
            about: "one lock per key instead of one for the store",
            options: &[("lock-scope", "key")],
        },
        NamedVariant {
            name: "seed",
            about: "the seed: writes applied on arrival from the queue's head, reads local at once",
            options: &[("read-wait", "false")],
        },
    ];
    type Msg = Msg;
    type Node = LamportNode;
    type Client = LamportNode;
    type Options = LamportOptions;
    type Bug = InjectedBug;
    type Invariants = super::invariants::LamportInvariants;

    /// N − 1: every write needs every peer, so while any server is down
    /// writes stall (reads go on); nothing is lost as long as one server
    /// survives, and a server that returns copies the store from all its
    /// peers before serving, after which writes resume. All N down loses
    /// the data (nothing is persisted). Stalling is not unsafety, so the
    /// bound is about the data; see the module doc.
    fn max_crashed(n: usize) -> usize {
        n.saturating_sub(1)
    }

    /// A node that lost its state recovers: every restart (nothing is
    /// persisted, `PERSISTS_STATE` is false, so drivers say so), and a
    /// first boot with `server --recover` (the seed's `r`).
    fn node(spec: &NodeSpec<'_>, opts: &LamportOptions, bug: Option<InjectedBug>) -> LamportNode {
        let node = LamportNode::new(spec.id, spec.members, opts.config(&spec.timing))
            .with_bug(bug)
            .with_life(spec.incarnation)
            .durable(spec.durable);
        if spec.lost_state {
            node.recovering()
        } else {
            node
        }
    }
    /// Never called: `HAS_CLIENT_COORDINATOR` is false, so the client
    /// library and the simulator send every request through a server.
    fn client(_: &ClientSpec<'_>, _: &LamportOptions, _: Option<InjectedBug>) -> LamportNode {
        unreachable!("lamport has no client-side coordinator (HAS_CLIENT_COORDINATOR = false)")
    }
    fn available(node: &LamportNode) -> bool {
        !node.is_recovering()
    }
    /// Knob bit 0: per-key locks, half the seeds. `read-wait` changes what
    /// the protocol promises (local reads are not linearizable), so it is
    /// never drawn: ask for it with `--opt read-wait=true`.
    fn vary(opts: &mut LamportOptions, knobs: u64) {
        if knobs & 1 == 1 {
            opts.lock_scope = LockScope::Key;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::InjectedBugs;
    use crate::protocol::contract::Protocol;

    #[test]
    fn options_round_trip_and_reach_the_node() {
        let pairs = [
            ("lock-scope".to_string(), "key".to_string()),
            ("lock-timeout".to_string(), "250ms".to_string()),
            ("read-wait".to_string(), "on".to_string()),
        ];
        let o = LamportOptions::from_pairs(&pairs).unwrap();
        assert_eq!(LamportOptions::from_pairs(&o.pairs()).unwrap(), o);
        assert_eq!(o.get("lock-timeout"), "250ms");
        let members = [1, 2];
        let n = Lamport::node(&spec(&members, 0, false), &o, None);
        let c = n.config();
        assert_eq!(c.scope, LockScope::Key);
        assert_eq!(c.lock_timeout, Some(Duration::from_millis(250)));
        assert!(c.read_wait);
        let d = LamportOptions::default().config(&Timing::default());
        assert_eq!(
            (d.scope, d.lock_timeout, d.read_wait),
            (LockScope::Global, None, true)
        );
        for spec in LamportOptions::specs() {
            let d = LamportOptions::default();
            assert_eq!(d.get(spec.name), spec.default, "{}", spec.name);
        }
        for (k, v) in [
            ("lock-scope", "row"),
            ("read-wait", "maybe"),
            ("lock-timeout", "soon"),
        ] {
            let bad = [(k.to_string(), v.to_string())];
            assert!(LamportOptions::from_pairs(&bad).unwrap_err().contains(k));
        }
        let mut varied = LamportOptions::default();
        Lamport::vary(&mut varied, 1);
        assert_eq!(varied.lock_scope, LockScope::Key);
        for v in Lamport::VARIANTS {
            let p: Vec<_> = v
                .options
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert!(LamportOptions::from_pairs(&p).is_ok(), "{}", v.name);
        }
    }

    #[test]
    fn the_seed_variant_reads_locally() {
        let seed = Lamport::VARIANTS.iter().find(|v| v.name == "seed").unwrap();
        let p: Vec<_> = (seed.options.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let o = LamportOptions::from_pairs(&p).unwrap();
        assert!(!o.read_wait && LamportOptions::default().read_wait);
    }

    fn spec(members: &[u32], incarnation: u64, lost_state: bool) -> NodeSpec<'_> {
        NodeSpec {
            id: 2,
            members,
            incarnation,
            durable: false,
            lost_state,
            timing: Timing::default(),
            seed: 7,
        }
    }

    #[test]
    fn a_node_built_from_a_spec_recovers_after_a_restart_or_when_asked() {
        let members = [1, 2, 3];
        let o = LamportOptions::default();
        let fresh = Lamport::node(&spec(&members, 0, false), &o, None);
        assert_eq!((fresh.id, fresh.is_recovering()), (2, false));
        assert_eq!(fresh.role(), "replica");
        assert!(Lamport::available(&fresh));
        for (inc, lost) in [(1, true), (0, true)] {
            let n = Lamport::node(
                &spec(&members, inc, lost),
                &o,
                Some(InjectedBug::NoResyncOnUp),
            );
            assert!(n.is_recovering() && !Lamport::available(&n), "{inc} {lost}");
        }
        assert_eq!(Lamport::max_crashed(3), 2);
        assert_eq!(Lamport::max_crashed(1), 0);
        const { assert!(!Lamport::HAS_CLIENT_COORDINATOR) };
        assert_eq!(Lamport::LINK_MODEL, LinkModel::FifoReliable);
        assert!(InjectedBug::all()
            .iter()
            .all(|b| b.name().starts_with(Lamport::NAME)));
    }
}
