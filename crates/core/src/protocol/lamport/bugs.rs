//! Deliberate bugs, a testing aid for the simulator and the checker.

use crate::protocol::contract::InjectedBugs;

/// Deliberate bugs for the simulator's self-test (`quorumkv sim
/// --inject-bug`). Never enabled otherwise. Caught within 100 seeds
/// (`--opt read-wait=true`): seed-deferral under `none` (32 stalls),
/// enter-without-later-message under `delay` (2, not linearizable),
/// apply-on-arrival and no-resync-on-up under `loss,delay` (45; 61).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InjectedBug {
    /// The seed's REPLY_LOCK rule (§3.2.2 item 3): a server waiting for
    /// replies to its own request defers its reply to others, and enters
    /// only with an explicit reply from every peer. Two servers requesting
    /// at once wait for each other forever (a stall, easily at N = 2).
    SeedDeferral,
    /// Enter the critical section at the queue's head without waiting for
    /// a later message from every peer: a request still in flight from a
    /// peer with a lower clock is overlooked, two servers hold the lock.
    EnterWithoutLaterMessage,
    /// Apply a SERVER_WRITE when it arrives instead of when its request
    /// heads the queue (with `read-wait`: instead of at RELEASE).
    ApplyOnArrival,
    /// Resend nothing when a link comes back, and never poll a stalled
    /// peer: a RELEASE_LOCK or SERVER_WRITE lost with the connection
    /// blocks the lock for good.
    NoResyncOnUp,
    /// The former crash rule: a restarted holder's writes left staged
    /// (`read-wait`) are applied by each peer when the holder's new life
    /// syncs, though a peer the SERVER_WRITE never reached keeps the old
    /// value until the `Repair`: reads there go back in time.
    ApplyOrphans,
    /// Count a peer's ack across a reset of its connection: the peer may
    /// have restarted since and lost the write, so a write answered Done
    /// is missing there, and a restarted holder that hears of its request
    /// queued there without the write aborts it.
    AckAcrossResets,
    /// Apply a write at its turn in the queue over a newer version of its
    /// key that a merge brought first (the former rule: unconditional).
    ApplyOverNewer,
    /// Durable servers: acknowledge a SERVER_WRITE (or `Commit`) at once
    /// (`SendNow`), before the staged write is on disk. A power cut then
    /// loses a write its holder counted as held here and answered Done.
    AckBeforeSync,
    /// Durable servers: persist a staged write's end (its release) before
    /// the value it applies, which goes to disk only with the server's
    /// next handler call. A crash in between loses the write here, and the
    /// restarted server serves the old value. (Both in one call would not
    /// show: a call's records reach the disk together.)
    ReleasePersistedBeforeWrite,
    /// The former entry rule after a restart or a link coming back `Up`:
    /// count a peer's messages at once, before its `Outstanding`. What it
    /// sent before the gap may be lost (its REQUEST_LOCK), so a later
    /// REPLY_LOCK of a peer that did not see the reset lets us in ahead of
    /// its earlier request: two holders.
    EnterBeforeResync,
}

impl InjectedBug {
    pub const ALL: &'static [InjectedBug] = &[
        InjectedBug::SeedDeferral,
        InjectedBug::EnterWithoutLaterMessage,
        InjectedBug::ApplyOnArrival,
        InjectedBug::NoResyncOnUp,
        InjectedBug::ApplyOrphans,
        InjectedBug::AckAcrossResets,
        InjectedBug::ApplyOverNewer,
        InjectedBug::AckBeforeSync,
        InjectedBug::ReleasePersistedBeforeWrite,
        InjectedBug::EnterBeforeResync,
    ];
}

impl InjectedBugs for InjectedBug {
    fn all() -> &'static [Self] {
        InjectedBug::ALL
    }
    fn name(self) -> &'static str {
        match self {
            InjectedBug::SeedDeferral => "lamport-seed-deferral",
            InjectedBug::EnterWithoutLaterMessage => "lamport-enter-without-later-message",
            InjectedBug::ApplyOnArrival => "lamport-apply-on-arrival",
            InjectedBug::NoResyncOnUp => "lamport-no-resync-on-up",
            InjectedBug::ApplyOrphans => "lamport-apply-orphans",
            InjectedBug::AckAcrossResets => "lamport-ack-across-resets",
            InjectedBug::ApplyOverNewer => "lamport-apply-over-newer",
            InjectedBug::AckBeforeSync => "lamport-ack-before-sync",
            InjectedBug::ReleasePersistedBeforeWrite => "lamport-release-persisted-before-write",
            InjectedBug::EnterBeforeResync => "lamport-enter-before-resync",
        }
    }
    fn about(self) -> &'static str {
        match self {
            InjectedBug::SeedDeferral => {
                "the seed's REPLY_LOCK deferral: concurrent requests deadlock (shows as a stall)"
            }
            InjectedBug::EnterWithoutLaterMessage => {
                "enter at the queue's head without a later message from every peer (two holders)"
            }
            InjectedBug::ApplyOnArrival => {
                "apply a SERVER_WRITE on arrival, not from the queue's head (shows with read-wait)"
            }
            InjectedBug::NoResyncOnUp => {
                "resend nothing after a link reset (a lost RELEASE_LOCK blocks the lock)"
            }
            InjectedBug::ApplyOrphans => {
                "apply a restarted holder's staged writes when it syncs (read-wait; stale reads)"
            }
            InjectedBug::AckAcrossResets => {
                "count a peer's write ack across a reset of its connection (it may have restarted)"
            }
            InjectedBug::ApplyOverNewer => {
                "apply a queued write over a newer version that a merge brought first"
            }
            InjectedBug::AckBeforeSync => {
                "acknowledge a staged write before it is durable (a power cut loses a Done write)"
            }
            InjectedBug::ReleasePersistedBeforeWrite => {
                "persist a staged write's release before its value (the value one call later)"
            }
            InjectedBug::EnterBeforeResync => {
                "count a peer's messages for entry before its Outstanding after a gap (two holders)"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::test_harness::check_injected_bugs;

    #[test]
    fn injected_bugs_have_distinct_prefixed_names_and_descriptions() {
        check_injected_bugs::<InjectedBug>("lamport-");
        assert_eq!(
            InjectedBug::find("lamport-apply-on-arrival"),
            Some(InjectedBug::ApplyOnArrival)
        );
    }
}
