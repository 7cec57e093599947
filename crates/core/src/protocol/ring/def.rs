//! The ring's registration: how drivers build it, its options and its
//! assumptions.

use super::bugs::InjectedBug;
use super::msg::Msg;
use super::node::{RingConfig, RingNode};
use super::queue::Fairness;
use crate::protocol::contract::{ClientSpec, LinkModel, NamedVariant, NodeSpec, ProtocolDef};
use crate::protocol::options::{OptSpec, ProtocolOptions};

/// The ring as the registry knows it: every server a replica and a proxy.
#[derive(Debug)]
pub struct Ring;

/// The ring's options (`--opt fairness=fifo`, `[options]` in a cluster file).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RingOptions {
    pub cfg: RingConfig,
}

fn parse_count(v: &str) -> Result<u64, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("'{v}' is not a whole number"))
}

impl ProtocolOptions for RingOptions {
    fn specs() -> &'static [OptSpec] {
        &[
            OptSpec {
                name: "fairness",
                default: "nb-msg",
                help: "what the successor gets next: nb-msg (the seed's fairness) or fifo",
            },
            OptSpec {
                name: "window",
                default: "16",
                help: "ring messages in flight to the successor (0 = unlimited: no queueing)",
            },
            OptSpec {
                name: "rejoin",
                default: "on",
                help: "let a restarted server back in (Join, state transfer, new view; default); off: fenced for ever",
            },
            OptSpec {
                name: "max-queued-writes",
                default: "10000",
                help: "client writes queued per server before refusing more",
            },
        ]
    }
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "fairness" => {
                self.cfg.fairness = match value {
                    "nb-msg" => Fairness::NbMsg,
                    "fifo" => Fairness::Fifo,
                    _ => return Err(format!("'{value}' is not nb-msg or fifo")),
                }
            }
            "window" => self.cfg.window = parse_count(value)?,
            "rejoin" => self.cfg.rejoin = crate::protocol::options::parse_bool(value)?,
            "max-queued-writes" => self.cfg.max_queued_writes = parse_count(value)? as usize,
            _ => return Err(format!("unknown option '{key}'")),
        }
        Ok(())
    }
    fn get(&self, key: &str) -> String {
        match key {
            "fairness" => match self.cfg.fairness {
                Fairness::Fifo => "fifo",
                _ => "nb-msg",
            }
            .to_string(),
            "window" => self.cfg.window.to_string(),
            "rejoin" => if self.cfg.rejoin { "on" } else { "off" }.to_string(),
            "max-queued-writes" => self.cfg.max_queued_writes.to_string(),
            _ => String::new(),
        }
    }
}

impl ProtocolDef for Ring {
    const NAME: &'static str = "ring";
    const ABOUT: &'static str =
        "Guerraoui-Kostic-Levy-Quema ring storage: local reads, pre-write then write around a ring";
    // The seed does not need FIFO (§2, footnote 2: tags order everything)
    // but it does need links that lose nothing while both ends live: a
    // lost pre-write stays pending forever (no retransmission), and a link
    // that breaks is taken for a crash (the perfect failure detector, §2).
    // Nor can it take a reset between live servers, or a slow one suspected,
    // for a crash: that is `Reliable` (a perfect failure detector).
    const LINK_MODEL: LinkModel = LinkModel::Reliable;
    const HAS_CLIENT_COORDINATOR: bool = false;
    const PROMISES_LIVENESS: bool = true;
    // A table of operation ids; retried writes apply once (module doc).
    const DEDUPLICATES_REQUESTS: bool = true;
    // Registers, applied operation ids and a "ran here" mark (`durable.rs`;
    // the seed keeps nothing, §2 has no restarts).
    const PERSISTS_STATE: bool = true;
    // §3 lines 205-209 and §4.2: nb_msg lets each server complete its
    // fair share of writes under load.
    const PROMISES_FAIRNESS: bool = true;
    const VARIANTS: &'static [NamedVariant] = &[NamedVariant {
        name: "fifo",
        about: "arrival order instead of the nb_msg fairness rule",
        options: &[("fairness", "fifo")],
    }];
    type Msg = Msg;
    type Node = RingNode;
    type Client = RingNode;
    type Options = RingOptions;
    type Bug = InjectedBug;
    type Invariants = super::invariants::RingInvariants;

    /// Write-all-available with a perfect failure detector: one server left
    /// still holds every completed write (§1, §3).
    fn max_crashed(n: usize) -> usize {
        n.saturating_sub(1)
    }

    fn node(spec: &NodeSpec<'_>, opts: &RingOptions, bug: Option<InjectedBug>) -> RingNode {
        let cfg = RingConfig {
            join_retry: spec.timing.retry_interval,
            ..opts.cfg.clone()
        };
        let node = RingNode::new(spec.id, spec.members.to_vec(), cfg)
            .with_writer(spec.writer_id())
            .with_bug(bug)
            .with_durable(spec.durable);
        // The others took its crash for good (perfect failure detector): a
        // restarted server starts outside, fenced, and comes back by `Join`
        // (rejoin on, the default) or stays out (`rejoin=off`). One that
        // lost its state is told so here; one with its disk finds out from
        // `restore` (`durable.rs`). Not `incarnation > 0`: the node runtime
        // draws it at random at boot.
        if spec.lost_state {
            node.restarted()
        } else {
            node
        }
    }
    /// A fenced (restarted) server serves nobody: the nemesis counts it down.
    fn available(node: &RingNode) -> bool {
        !node.is_outside()
    }
    fn client(_: &ClientSpec<'_>, _: &RingOptions, _: Option<InjectedBug>) -> RingNode {
        unreachable!("the ring has no client-side coordinator (HAS_CLIENT_COORDINATOR = false)")
    }
    /// Knob bit 0: FIFO fairness on half the seeds; bits 1-2: the window
    /// (16, 1, 2 or unlimited): a small one fills the queues, so the
    /// fairness rule and the flow control get exercised.
    fn vary(opts: &mut RingOptions, knobs: u64) {
        if knobs & 1 == 1 {
            opts.cfg.fairness = Fairness::Fifo;
        }
        // Not windows 1 or 2: they throttle the ring below the sim's load,
        // and the backlog a fault phase leaves takes longer than the
        // liveness bound to drain (no safety failure; ring2-report.md).
        opts.cfg.window = [16, 0][(knobs >> 1 & 1) as usize];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::contract::InjectedBugs;
    use crate::protocol::contract::{Protocol, Timing};

    #[test]
    fn options_round_trip_and_reach_the_node() {
        let pairs = [
            ("fairness".to_string(), "fifo".to_string()),
            ("window".to_string(), "0".to_string()),
            ("rejoin".to_string(), "off".to_string()),
        ];
        let o = RingOptions::from_pairs(&pairs).unwrap();
        assert_eq!(o.cfg.fairness, Fairness::Fifo);
        assert!(!o.cfg.rejoin);
        assert!(RingOptions::default().cfg.rejoin, "rejoin is the default");
        assert_eq!(RingOptions::from_pairs(&o.pairs()).unwrap(), o);
        for spec in RingOptions::specs() {
            let d = RingOptions::default();
            assert_eq!(d.get(spec.name), spec.default, "{}", spec.name);
        }
        let bad = [("fairness".to_string(), "lottery".to_string())];
        assert!(RingOptions::from_pairs(&bad)
            .unwrap_err()
            .contains("fairness"));
        let members = [1, 2, 3];
        let spec = NodeSpec {
            id: 2,
            members: &members,
            incarnation: 1,
            durable: false,
            lost_state: false,
            timing: Timing::default(),
            seed: 7,
        };
        // Incarnation 1 alone is no restart: the runtime draws it at boot.
        assert!(Ring::available(&Ring::node(&spec, &o, None)));
        let lost = NodeSpec {
            lost_state: true,
            ..spec.clone()
        };
        assert!(!Ring::available(&Ring::node(&lost, &o, None)));
        assert_eq!(Ring::node(&lost, &o, None).role(), "fenced");
        let n = Ring::node(&spec, &o, Some(InjectedBug::NoTakeover));
        assert_eq!((n.id, n.successor_id()), (2, 3));
        assert_eq!(n.writer, spec.writer_id());
        assert_eq!(n.cfg.window, o.cfg.window);
        assert_eq!(n.bug, Some(InjectedBug::NoTakeover));
        assert_eq!(Ring::max_crashed(3), 2);
        assert_eq!(Ring::max_crashed(1), 0);
        let fifo = Ring::node(
            &spec,
            &RingOptions::default(),
            Some(InjectedBug::FifoForwarding),
        );
        assert_eq!(fifo.cfg.fairness, Fairness::ForwardFirst);
    }

    #[test]
    fn bugs_have_distinct_prefixed_names_and_vary_covers_the_options() {
        let names: std::collections::BTreeSet<_> = InjectedBug::all()
            .iter()
            .map(|b| InjectedBugs::name(*b))
            .collect();
        assert_eq!(names.len(), InjectedBug::all().len());
        assert!(names.iter().all(|n| n.starts_with("ring-")));
        assert_eq!(
            InjectedBug::find("ring-no-takeover"),
            Some(InjectedBug::NoTakeover)
        );
        let mut o = RingOptions::default();
        Ring::vary(&mut o, 2);
        assert_eq!((o.cfg.fairness, o.cfg.window), (Fairness::NbMsg, 0));
        Ring::vary(&mut o, 7);
        assert_eq!((o.cfg.fairness, o.cfg.window), (Fairness::Fifo, 0));
    }
}
