//! Deliberate bugs, for the simulator's self-test.

use crate::protocol::contract::InjectedBugs;

/// Deliberate bugs (`quorumkv sim --inject-bug`): each a plausible mistake
/// the simulator and the checker must catch. Never enabled otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InjectedBug {
    /// A read answers at once even with a pending pre-write newer than the
    /// value held: read inversion (seed lines 197-201).
    ReadNoWait,
    /// Nobody ends a crashed origin's rounds: its pre-writes circulate
    /// forever and reads wait on them (the gap (a) of the seed).
    NoTakeover,
    /// Forward first, in arrival order; own writes only when nothing waits
    /// to be forwarded: under load a server's writes starve (line 207).
    FifoForwarding,
    /// A write is forwarded and acknowledged (`Done`) without waiting for
    /// its register to be on disk (`SendNow`/`ReplyNow`): a kill-all in
    /// the sync window loses an acknowledged write (`durable.rs`).
    WriteAckedBeforeSync,
    /// A server forwards a pre-write without holding it pending (pc 71,
    /// garbled in the seed's queue handler): its home applies the value
    /// while that server would still answer reads with the old one.
    ForwardNotPending,
    /// A new write's tag is one above the value held (pc 22-23 read
    /// without the pending set, nor the ts issued here before): two writes
    /// at one server before the first applies get one tag.
    TagFromHeld,
    /// A write message replaces the value held whatever its tag (`!=`
    /// where pc 32 says "higher"): a late copy of an older write takes a
    /// server's register back.
    ApplyAnyTag,
}

impl InjectedBugs for InjectedBug {
    fn all() -> &'static [Self] {
        &[
            InjectedBug::ReadNoWait,
            InjectedBug::NoTakeover,
            InjectedBug::FifoForwarding,
            InjectedBug::WriteAckedBeforeSync,
            InjectedBug::ForwardNotPending,
            InjectedBug::TagFromHeld,
            InjectedBug::ApplyAnyTag,
        ]
    }
    fn name(self) -> &'static str {
        match self {
            InjectedBug::ReadNoWait => "ring-read-no-wait",
            InjectedBug::NoTakeover => "ring-no-takeover",
            InjectedBug::FifoForwarding => "ring-fifo-forwarding",
            InjectedBug::WriteAckedBeforeSync => "ring-write-acked-before-sync",
            InjectedBug::ForwardNotPending => "ring-forward-not-pending",
            InjectedBug::TagFromHeld => "ring-tag-from-held",
            InjectedBug::ApplyAnyTag => "ring-apply-any-tag",
        }
    }
    fn about(self) -> &'static str {
        match self {
            InjectedBug::ReadNoWait => "a read does not wait for a pending pre-write (read inversion)",
            InjectedBug::NoTakeover => {
                "nobody ends a crashed server's pre-writes and writes (reads stall; needs crashes)"
            }
            InjectedBug::FifoForwarding => {
                "forwarding first in FIFO order instead of nb_msg (a server's writes starve under load)"
            }
            InjectedBug::WriteAckedBeforeSync => {
                "a write is forwarded and acknowledged before its register is on disk (needs fsync crashes)"
            }
            InjectedBug::ForwardNotPending => {
                "a forwarded pre-write is not held pending (read inversion when a read comes first)"
            }
            InjectedBug::TagFromHeld => {
                "a new write's tag is one above the value held, ignoring pending pre-writes (a tag names two values)"
            }
            InjectedBug::ApplyAnyTag => {
                "a write replaces the value held whatever its tag (a register goes back to an older write)"
            }
        }
    }
}
