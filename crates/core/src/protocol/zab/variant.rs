//! The broadcast variants (`--opt broadcast=`) and a server's broadcast
//! state; what each variant does is `broadcast.rs`.

use super::measure::Adaptive;
use crate::quorum::majority;
use crate::rng::SplitMix64;
use crate::types::{NodeId, Time};
use std::collections::{BTreeMap, BTreeSet};

/// A1.1's record: the last epoch this server led (established).
pub const META_LED: &str = "zab.led-epoch";

/// Which broadcast phase the cluster runs (`--opt broadcast=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Variant {
    /// Zab's: ACK to the leader, COMMIT from it.
    #[default]
    Zab,
    /// ZabAc (§3.6.1): ACK to the leader and to itself, deliver on it; N = 3.
    Ac,
    /// ZabAa (§3.6.1): ACKs to all, deliver on f followers' ACKs.
    Aa,
    /// ZabCt (§3.6.2): coin p, on Head ACK to all; deliver on f.
    Ct,
    /// ZabCT (§3.6.3): as ZabCt, deliver on f + 1.
    CtQ,
    /// ZabAA (§3.6.4): ZabCT with p = 1.
    AaQ,
}

impl Variant {
    pub const ALL: [Variant; 6] = [
        Variant::Zab,
        Variant::Ac,
        Variant::Aa,
        Variant::Ct,
        Variant::CtQ,
        Variant::AaQ,
    ];
    /// The option's value (never differing only by case, as ZabCt / ZabCT).
    pub fn name(self) -> &'static str {
        match self {
            Variant::Zab => "zab",
            Variant::Ac => "ac",
            Variant::Aa => "aa",
            Variant::Ct => "ct",
            Variant::CtQ => "ct-q",
            Variant::AaQ => "aa-q",
        }
    }
    pub fn parse(s: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == s)
    }
    /// Followers decide delivery from ACKs (no COMMIT in broadcast).
    pub fn followers_decide(self) -> bool {
        self != Variant::Zab
    }
    /// Runs under the thesis' restricted assumptions A1.1 and A1.2 (§3.3).
    pub fn restricted(self) -> bool {
        matches!(self, Variant::Ac | Variant::Aa | Variant::Ct)
    }
    /// How many followers (itself included) a follower must know to have
    /// logged an entry before it delivers it: f = ⌈(N−1)/2⌉ (a quorum less
    /// the leader, §3.4) or f + 1 (a quorum).
    pub fn follower_quorum(self, n: usize) -> usize {
        match self {
            Variant::CtQ | Variant::AaQ => majority(n),
            _ => majority(n) - 1,
        }
    }
    /// Whether it switches to Zab's broadcast on suspected followers
    /// (§3.6.2, §4.3.3, §4.4.2): ct, ct-q and aa-q (A3).
    pub fn switches(self) -> bool {
        matches!(self, Variant::Ct | Variant::CtQ | Variant::AaQ)
    }
    /// Suspected followers tolerated before voting for Zab: none for ct
    /// and ct-q, f − 1 for aa-q (§4.4.2).
    pub(super) fn tolerated(self, n: usize) -> usize {
        match self {
            Variant::AaQ => majority(n).saturating_sub(2),
            _ => 0,
        }
    }
    /// Whether a follower tosses a coin before sending its ACK.
    pub(super) fn tosses(self) -> bool {
        matches!(self, Variant::Ct | Variant::CtQ)
    }
    /// Whether a follower's ACK goes to the other followers as well.
    pub(super) fn acks_to_followers(self) -> bool {
        !matches!(self, Variant::Zab | Variant::Ac)
    }
    /// The cluster sizes the variant is defined for.
    pub fn check_size(self, n: usize) -> Result<(), String> {
        if self == Variant::Ac && n != 3 {
            return Err(format!(
                "broadcast=ac (ZabAc) is defined for N = 3 only (seed 003 §3.6.1), not N = {n}; use aa for other sizes"
            ));
        }
        Ok(())
    }
}

/// A server's broadcast-variant state.
#[derive(Clone, Debug)]
pub struct Bcast {
    pub variant: Variant,
    /// A1.1 kept (`stay-out`, on by default).
    pub stay_out: bool,
    /// Durable (`META_LED`): the last epoch we led, under ac, aa, ct.
    pub(super) led: u64,
    /// Restarted as the leader of this epoch: staying out (A1.1) until a
    /// newer leader synchronised us or we hear a newer one was installed.
    pub(super) out_for: Option<u64>,
    /// Proposals from this index on wait for `META_LED` to be durable.
    pub(super) unmarked_from: Option<u64>,
    /// Switched to Zab's broadcast (§3.6.2, §4.3.3): the leader's decision,
    /// as this server knows it.
    pub(super) zab_mode: bool,
    /// As a follower (A3): other followers whose link is down, or silent
    /// for `sync-limit` (`adaptive.rs`: beats).
    pub(super) suspected: BTreeSet<NodeId>,
    /// As a follower (A3): when each other follower was last heard, in
    /// the leadership of epoch `beats_epoch`.
    pub(super) heard: BTreeMap<NodeId, Time>,
    pub(super) beats_epoch: u64,
    /// The adaptive coin (ct-q with `p=upper|mid|low|p-star`).
    pub(super) adapt: Option<Adaptive>,
    /// As a follower: the vote last sent, and in which epoch.
    pub(super) voted: Option<(u64, bool)>,
    /// As the leader: followers whose last vote was for Zab, in `votes_epoch`.
    pub(super) zab_votes: BTreeSet<NodeId>,
    pub(super) votes_epoch: u64,
    /// The coin's probability of Head (ct, ct-q).
    pub p: f64,
    pub(super) rng: SplitMix64,
    /// As a follower: the epoch `peer_acks` belong to.
    pub(super) peer_epoch: u64,
    /// As a follower: the highest index each other follower ACKed to us.
    pub(super) peer_acks: BTreeMap<NodeId, u64>,
    /// As a follower: our log was tossed for (or acked) up to here, in
    /// log generation `gen` (a synchronisation starts a new one).
    pub(super) tossed: u64,
    pub(super) gen: u64,
    /// As a follower: the highest index we sent an ACK for (generation
    /// `gen`): timer D re-tosses only above it.
    pub(super) sent_upto: u64,
}

impl Default for Bcast {
    fn default() -> Self {
        Bcast::new(Variant::Zab, 0.5, 0)
    }
}

impl Bcast {
    /// `p` counts for ct and ct-q only; the others ACK always (p = 1).
    pub fn new(variant: Variant, p: f64, seed: u64) -> Bcast {
        Bcast {
            variant,
            stay_out: true,
            led: 0,
            out_for: None,
            unmarked_from: None,
            zab_mode: false,
            suspected: BTreeSet::new(),
            heard: BTreeMap::new(),
            beats_epoch: 0,
            adapt: None,
            voted: None,
            zab_votes: BTreeSet::new(),
            votes_epoch: 0,
            p: if variant.tosses() { p } else { 1.0 },
            rng: SplitMix64(seed),
            peer_epoch: 0,
            peer_acks: BTreeMap::new(),
            tossed: 0,
            gen: 0,
            sent_upto: 0,
        }
    }
}
