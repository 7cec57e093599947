//! The decisions of seed 001's lock recipes (§II.D, Fig. 2), apart from
//! the calls that feed them, so that the synchronous and asynchronous
//! variants (and the simulator) share one rule each.
//!
//! * Queue lock: after creating `"/lock/name-"` as an ephemeral sequential
//!   node, the holder is the child with the smallest sequence number; any
//!   other waiter watches the child just before its own (not the holder:
//!   no herd effect when the lock is released).
//! * Asynchronous queue lock (lines 97-99): `getChildren` is polled while
//!   the create is in flight; a list is *consistent* once it contains the
//!   name the create returned, and only a consistent list decides.
//! * Test-and-set lock: a create of one fixed name; `NodeExists` means
//!   somebody else holds it.
//!
//! Every acquisition carries a fencing token: the lock node's `czxid`,
//! which grows with every acquisition because each is a later transaction.

use super::path;

/// What a queue-lock waiter does next, given the lock directory's children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueStep {
    /// Our node is the smallest: the lock is ours.
    Acquired,
    /// Watch (with `exists`) this full path, the one just before ours.
    Watch(String),
    /// Our node is not in the list: the list predates our create (poll
    /// again) or our session expired and the node is gone (start over).
    Missing,
}

/// The sequence number of a sequential node's name (`name-0000000042` →
/// 42), or `None` when the name carries none.
pub fn sequence(name: &str) -> Option<u64> {
    let digits = name.len().checked_sub(10)?;
    let tail = name.get(digits..)?;
    if !tail.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    tail.parse().ok()
}

/// The queue-lock rule (Fig. 2 lines 2-5) for the node `mine` (a full
/// path) among the children `names` of its directory. Children without a
/// sequence suffix are ignored (they are not waiters).
pub fn queue_step(mine: &str, names: &[String]) -> QueueStep {
    let dir = path::parent(mine);
    let Some(my_seq) = sequence(path::name(mine)) else {
        return QueueStep::Missing;
    };
    if !names.iter().any(|n| n == path::name(mine)) {
        return QueueStep::Missing;
    }
    let before = names
        .iter()
        .filter_map(|n| sequence(n).map(|s| (s, n)))
        .filter(|&(s, _)| s < my_seq)
        .max_by_key(|&(s, _)| s);
    match before {
        None => QueueStep::Acquired,
        Some((_, n)) => QueueStep::Watch(path::join(dir, n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sequence_numbers_are_the_ten_digit_suffix() {
        assert_eq!(sequence("n-0000000042"), Some(42));
        assert_eq!(sequence("0000000000"), Some(0));
        assert_eq!(sequence("n-42"), None);
        assert_eq!(sequence("n-00000000x2"), None);
    }

    #[test]
    fn the_smallest_holds_and_each_waiter_watches_its_predecessor() {
        let kids = names(&["n-0000000003", "n-0000000001", "n-0000000007", "other"]);
        assert_eq!(queue_step("/lock/n-0000000001", &kids), QueueStep::Acquired);
        assert_eq!(
            queue_step("/lock/n-0000000007", &kids),
            QueueStep::Watch("/lock/n-0000000003".into())
        );
        assert_eq!(
            queue_step("/lock/n-0000000003", &kids),
            QueueStep::Watch("/lock/n-0000000001".into())
        );
        // Not (yet) in the list: a list from before our create.
        assert_eq!(queue_step("/lock/n-0000000009", &kids), QueueStep::Missing);
        assert_eq!(queue_step("/lock/plain", &kids), QueueStep::Missing);
        // At the root too.
        assert_eq!(
            queue_step("/n-0000000002", &names(&["n-0000000001", "n-0000000002"])),
            QueueStep::Watch("/n-0000000001".into())
        );
    }
}
