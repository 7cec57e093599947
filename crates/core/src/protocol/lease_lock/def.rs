//! The registration: how drivers build lease-lock, its options and its
//! assumptions. (Registered by one line in `registry!`.)

use super::bugs::Bug;
use super::coordinator::{Coordinator, CoordinatorConfig, LockRetry};
use super::msg::{Msg, Timer};
use super::node::LeaseNode;
use crate::protocol::contract::{ClientSpec, LinkModel, NamedVariant, NodeSpec, ProtocolDef};
use crate::protocol::contract::{Out, Timing};
use crate::protocol::options::{format_duration, parse_bool, parse_duration};
use crate::protocol::options::{OptSpec, ProtocolOptions};
use crate::types::{NodeId, Time};
use std::time::Duration;

/// The lease-lock blocking quorum protocol as the registry knows it:
/// server = replica + proxy coordinator; clients may run a bare
/// coordinator (the seed's design, §4.1).
#[derive(Debug)]
pub struct LeaseLock;

/// Lease-lock's options (`--opt lease=500ms`, `[options]` in a cluster file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseOptions {
    /// How long a grant lasts (the seed's `LOCK_LEASE_SEC`); `None` = the
    /// op timeout of the node or client ([`LeaseOptions::lease_for`]).
    pub lease: Option<Duration>,
    pub lock_retry: LockRetry,
    /// A get writes back what it read before unlocking.
    pub write_back: bool,
    /// UNLOCK grants the coordinator will not use (else they expire).
    pub release_surplus: bool,
    /// The last `spares` servers of the cluster start outside the first
    /// configuration, for `quorumkv member add` (`reconfig.rs`).
    pub spares: usize,
}

/// The default lease: the op timeout (`Timing::op_timeout`, 2 s in the
/// server; the simulator's 100 ms). A coordinator gives up (and unlocks) at
/// its op timeout, and a lease starts at a grant, after the operation
/// began: so with lease ≥ op timeout a live coordinator never outlives its
/// lease, and only a crashed or partitioned one leaves a lock behind,
/// blocking its key for at most this long. Deriving it (rather than a fixed
/// 2 s) keeps that bound when the timing is shorter: with a 2 s lease and the
/// simulator's 100 ms ops, a crashed client's locks refuse every operation
/// on its keys for twenty op timeouts.
pub const DEFAULT_LEASE: &str = "op-timeout";

/// The defaults are the repairs: gets write back (linearizable under lease
/// expiry and coordinator crashes) and denied rounds retry with backoff.
/// The seed's exact behaviour is the `seed` variant.
impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            lease: None,
            lock_retry: LockRetry::Backoff,
            write_back: true,
            release_surplus: true,
            spares: 0,
        }
    }
}

impl ProtocolOptions for LeaseOptions {
    fn specs() -> &'static [OptSpec] {
        &[
            OptSpec {
                name: "lease",
                default: DEFAULT_LEASE,
                help: "how long a lock grant lasts (seed LOCK_LEASE_SEC): a duration, or op-timeout (keep it >= the op timeout)",
            },
            OptSpec {
                name: "lock-retry",
                default: "backoff",
                help: "after a denied lock round: none (fail, the seed) or backoff (jittered, until the op timeout)",
            },
            OptSpec {
                name: "write-back",
                default: "true",
                help: "a get writes the value it read back to its locked quorum before unlocking (false: the seed)",
            },
            OptSpec {
                name: "surplus-grants",
                default: "unlock",
                help: "grants a coordinator will not use: unlock at once, or expire (the seed)",
            },
            OptSpec {
                name: "spares",
                default: "0",
                help: "the last K servers start outside the configuration (quorumkv member add)",
            },
        ]
    }
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "lease" if value == DEFAULT_LEASE => self.lease = None,
            "lease" => {
                let lease = parse_duration(value)?;
                if lease.is_zero() {
                    return Err("a lease must be longer than 0".into());
                }
                self.lease = Some(lease);
            }
            "lock-retry" => {
                self.lock_retry = match value {
                    "none" => LockRetry::None,
                    "backoff" => LockRetry::Backoff,
                    _ => return Err(format!("'{value}' is not none or backoff")),
                }
            }
            "write-back" => self.write_back = parse_bool(value)?,
            "surplus-grants" => {
                self.release_surplus = match value {
                    "unlock" => true,
                    "expire" => false,
                    _ => return Err(format!("'{value}' is not unlock or expire")),
                }
            }
            "spares" => {
                self.spares = value
                    .parse()
                    .map_err(|_| format!("spares: '{value}' is not a count of servers"))?
            }
            _ => return Err(format!("unknown option '{key}'")),
        }
        Ok(())
    }
    fn check_size(&self, n: usize) -> Result<(), String> {
        if self.spares >= n {
            return Err(format!(
                "spares={} leaves no server in the configuration of {n}",
                self.spares
            ));
        }
        Ok(())
    }
    fn get(&self, key: &str) -> String {
        match key {
            "lease" => self.lease.map_or(DEFAULT_LEASE.into(), format_duration),
            "lock-retry" => match self.lock_retry {
                LockRetry::None => "none".into(),
                LockRetry::Backoff => "backoff".into(),
            },
            "write-back" => self.write_back.to_string(),
            "surplus-grants" => (if self.release_surplus {
                "unlock"
            } else {
                "expire"
            })
            .into(),
            "spares" => self.spares.to_string(),
            _ => String::new(),
        }
    }
}

impl LeaseOptions {
    /// The lease under timing `t`: the option, else the op timeout.
    pub fn lease_for(&self, t: &Timing) -> Duration {
        self.lease.unwrap_or(t.op_timeout)
    }
    pub fn coordinator(&self, t: &Timing) -> CoordinatorConfig {
        CoordinatorConfig {
            op_timeout: t.op_timeout,
            retry_interval: t.retry_interval,
            lock_retry: self.lock_retry,
            write_back: self.write_back,
            release_surplus: self.release_surplus,
        }
    }
}

impl ProtocolDef for LeaseLock {
    const NAME: &'static str = "lease-lock";
    const ABOUT: &'static str =
        "blocking quorum protocol: lock a majority with leases, read, write, unlock (seed 000)";
    // Every message names its lock round and replicas check it, so loss,
    // duplication and reordering never confuse rounds; lost messages are
    // re-sent (a lost UNLOCK costs one lease). The seed's TCP is not needed.
    const LINK_MODEL: LinkModel = LinkModel::Unreliable;
    const HAS_CLIENT_COORDINATOR: bool = true;
    // Every operation is answered by its op timeout, and every lock ends
    // with its lease, so progress resumes once faults heal.
    const PROMISES_LIVENESS: bool = true;
    const DEDUPLICATES_REQUESTS: bool = false;
    const VARIANTS: &'static [NamedVariant] = &[
        NamedVariant {
            name: "seed",
            about: "the seed exactly: no write-back, a denied round fails, surplus grants expire",
            options: &[
                ("write-back", "false"),
                ("lock-retry", "none"),
                ("surplus-grants", "expire"),
            ],
        },
        NamedVariant {
            name: "no-retry",
            about: "the default, but a denied lock round fails at once (the seed's retry rule)",
            options: &[("lock-retry", "none")],
        },
    ];
    type Msg = Msg;
    type Node = LeaseNode;
    type Client = Coordinator;
    type Options = LeaseOptions;
    type Bug = Bug;
    type Invariants = super::invariants::LeaseInvariants;

    // `max_crashed`: the default, a majority must stay up to grant Q locks.
    fn node(spec: &NodeSpec<'_>, opts: &LeaseOptions, bug: Option<Bug>) -> LeaseNode {
        let cfg = opts.coordinator(&spec.timing);
        let node = LeaseNode::new(
            spec.id,
            spec.members.to_vec(),
            opts.lease_for(&spec.timing),
            spec.durable,
            cfg,
        )
        .with_spares(opts.spares)
        .with_bug(bug)
        .with_writer(spec.writer_id())
        .with_seed(spec.seed);
        // A replica that lost its data catches up from its peers first.
        if spec.lost_state {
            node.recovering()
        } else {
            node
        }
    }
    fn client(spec: &ClientSpec<'_>, opts: &LeaseOptions, bug: Option<Bug>) -> Coordinator {
        let cfg = opts.coordinator(&spec.timing);
        // Epoch 0's members; a replica's `Moved` teaches it later ones.
        let keep = spec.members.len().saturating_sub(opts.spares).max(1);
        Coordinator::new(spec.writer_id, spec.members[..keep].to_vec(), cfg)
            .with_bug(bug)
            .with_seed(spec.seed)
    }
    fn available(node: &LeaseNode) -> bool {
        !node.is_recovering()
    }
    /// Knob bit 0: no retries (the seed's); bit 1: surplus grants expire.
    /// Write-back is left to `--opt`: it decides whether the run is
    /// linearizable.
    fn vary(opts: &mut LeaseOptions, knobs: u64) {
        if knobs & 1 == 1 {
            opts.lock_retry = LockRetry::None;
        }
        opts.release_surplus = knobs & 2 == 0;
    }
    /// What a client-side [`Coordinator`] sends: the four requests
    /// ([`Msg::is_request`]), never a reply nor the recovery exchange.
    fn client_may_send(msg: &Msg) -> bool {
        msg.is_request()
    }
    /// Membership change (`protocol::reconfig`): the server offered the
    /// draw runs it, unless a change is in flight where it can see.
    fn reconfigure(
        node: &mut LeaseNode,
        now: Time,
        all: &[NodeId],
        draw: u64,
        out: &mut Out<Msg, Timer>,
    ) -> Option<String> {
        let new = node.draw_config(all, draw)?;
        let epoch = node.propose(now, &new, out).ok()?;
        Some(format!("reconfig to {new:?} as epoch {epoch}"))
    }
    /// Surplus grants left to expire block their replica for a lease.
    fn linger(opts: &LeaseOptions, timing: &Timing) -> Duration {
        if opts.release_surplus {
            Duration::ZERO
        } else {
            opts.lease_for(timing)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message the client-side coordinators send through contended
    /// operations (grants, a denied round and its UNLOCKs, surplus grants,
    /// reads, writes, write-backs) passes `client_may_send`; every reply
    /// and peer-only message is refused.
    #[test]
    fn a_client_may_send_exactly_what_its_coordinator_sends() {
        use crate::protocol::lease_lock::testing::{get, key, put, Net};
        use crate::protocol::lease_lock::LockId;
        use crate::types::{Peer, Request, Tag, Time};
        use bytes::Bytes;
        let seed_like = LeaseOptions {
            lock_retry: LockRetry::None,
            write_back: false,
            ..Default::default()
        };
        for opts in [LeaseOptions::default(), seed_like] {
            let mut net = Net::new(3, opts);
            net.add_client(1);
            net.add_client(2);
            let mut id = 0;
            for req in [put(b"a"), get(), Request::Delete { key: key() }, put(b"b")] {
                for c in [1, 2] {
                    id += 1;
                    net.request(Peer::Conn(c), id, req.clone());
                }
                net.advance_to(Time(net.now.0 + 3_000_000));
            }
            let from_clients: Vec<_> = (net.delivered.iter())
                .filter(|e| matches!(e.from, Peer::Conn(_)))
                .map(|e| &e.msg)
                .collect();
            for kind in ["LockReq", "Unlock", "Read", "Write"] {
                let seen = from_clients
                    .iter()
                    .any(|m| format!("{m:?}").starts_with(kind));
                assert!(seen, "no {kind} sent");
            }
            for m in from_clients {
                assert!(LeaseLock::client_may_send(m), "{m:?}");
            }
        }
        let lock = LockId { owner: 1, round: 1 };
        let peer_only = [
            Msg::LockGranted { lock, key: key() },
            Msg::LockDenied { lock },
            Msg::ReadReply {
                lock,
                tag: Tag::ZERO,
                value: None,
            },
            Msg::Ack { lock },
            Msg::WriteDenied { lock },
            Msg::SyncRequest,
            Msg::SyncReply {
                at: Time(0),
                entries: vec![(Bytes::from_static(b"k"), Tag::ZERO, None)],
            },
        ];
        for m in &peer_only {
            assert!(!LeaseLock::client_may_send(m), "{m:?}");
        }
    }
    use crate::protocol::contract::client_writer_id;
    use crate::protocol::contract::Protocol;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Only grants left to expire outlive an operation (for a lease).
    #[test]
    fn linger_is_a_lease_only_when_surplus_grants_expire() {
        let t = Timing::default();
        let mut o = LeaseOptions::default();
        assert_eq!(LeaseLock::linger(&o, &t), Duration::ZERO);
        o.release_surplus = false;
        assert_eq!(LeaseLock::linger(&o, &t), t.op_timeout);
        o.lease = Some(Duration::from_millis(700));
        assert_eq!(LeaseLock::linger(&o, &t), Duration::from_millis(700));
    }

    #[test]
    fn options_round_trip_and_reject_bad_values() {
        let o = LeaseOptions::from_pairs(&pairs(&[
            ("lease", "250ms"),
            ("lock-retry", "backoff"),
            ("write-back", "on"),
            ("surplus-grants", "expire"),
        ]))
        .unwrap();
        assert_eq!(o.lease, Some(Duration::from_millis(250)));
        assert_eq!(o.lock_retry, LockRetry::Backoff);
        assert!(o.write_back && !o.release_surplus);
        assert_eq!(LeaseOptions::from_pairs(&o.pairs()).unwrap(), o);
        let d = LeaseOptions::default();
        assert_eq!(LeaseOptions::from_pairs(&d.pairs()).unwrap(), d);
        for spec in LeaseOptions::specs() {
            assert_eq!(d.get(spec.name), spec.default, "{}", spec.name);
        }
        for (k, v) in [
            ("lease", "0s"),
            ("lock-retry", "often"),
            ("surplus-grants", "keep"),
            ("write-back", "maybe"),
        ] {
            let err = LeaseOptions::from_pairs(&pairs(&[(k, v)])).unwrap_err();
            assert!(err.contains(k), "{err}");
        }
        assert!(LeaseOptions::from_pairs(&pairs(&[("fast-read", "true")])).is_err());
    }

    #[test]
    fn the_registry_builds_nodes_and_clients_with_their_options() {
        let members = [1, 2, 3, 4, 5];
        let opts = LeaseOptions::from_pairs(&pairs(&[
            ("lease", "300ms"),
            ("lock-retry", "backoff"),
            ("write-back", "true"),
        ]))
        .unwrap();
        let spec = NodeSpec {
            id: 2,
            members: &members,
            incarnation: 3,
            durable: true,
            lost_state: false,
            timing: Timing::default(),
            seed: 7,
        };
        let node = <LeaseLock as ProtocolDef>::node(&spec, &opts, None);
        assert_eq!(node.id, 2);
        assert_eq!(node.replica.lease(), Duration::from_millis(300));
        assert_eq!(
            node.coord.id,
            spec.writer_id(),
            "a fresh writer id per life"
        );
        assert_eq!(node.coord.quorum(), 3);
        let cfg = node.coord.config();
        assert!(cfg.write_back && cfg.release_surplus);
        assert_eq!(cfg.lock_retry, LockRetry::Backoff);
        assert_eq!(cfg.op_timeout, Timing::default().op_timeout);
        assert!(
            node.status().contains("replica keys=0"),
            "{}",
            node.status()
        );
        assert!(LeaseLock::available(&node));
        let lost = NodeSpec {
            lost_state: true,
            ..spec.clone()
        };
        let node = <LeaseLock as ProtocolDef>::node(&lost, &opts, None);
        assert!(node.is_recovering() && !LeaseLock::available(&node));

        let cspec = ClientSpec {
            writer_id: client_writer_id(9),
            members: &members,
            timing: Timing::default(),
            seed: 1,
        };
        let bug = Some(Bug::MinorityQuorum);
        let client = <LeaseLock as ProtocolDef>::client(&cspec, &opts, bug);
        assert_eq!(client.id, client_writer_id(9));
        assert_eq!(client.quorum(), 2, "the injected bug reaches the client");
        assert_eq!(LeaseLock::max_crashed(3), 1);
        assert_eq!(LeaseLock::max_crashed(5), 2);
    }

    /// The default runs the repairs; the `seed` variant is the seed.
    #[test]
    fn defaults_are_the_repairs_and_the_seed_variant_is_the_seed() {
        let d = LeaseOptions::default();
        assert!(d.write_back && d.release_surplus);
        assert_eq!(d.lock_retry, LockRetry::Backoff);
        let seed = LeaseLock::VARIANTS
            .iter()
            .find(|v| v.name == "seed")
            .unwrap();
        let s = LeaseOptions::from_pairs(&pairs(seed.options)).unwrap();
        assert!(!s.write_back && !s.release_surplus);
        assert_eq!(s.lock_retry, LockRetry::None);
    }

    #[test]
    fn vary_covers_both_retry_modes_and_keeps_write_back() {
        let mut seen = std::collections::HashSet::new();
        for knobs in 0..4 {
            let mut o = LeaseOptions::default();
            LeaseLock::vary(&mut o, knobs);
            assert!(o.write_back);
            seen.insert((o.lock_retry, o.release_surplus));
        }
        assert_eq!(seen.len(), 4);
    }
}
