//! The coordination service's data model (seed 001 §II.C, PROTOCOLS.md §7):
//! ZooKeeper's tree of znodes with sessions, one-shot and persistent watches, as a
//! deterministic state machine that Zab (or any log) drives.
//!
//! * [`tree`] — znodes, stats, sessions and ephemerals; every change is a
//!   [`Txn`] applied in zxid order, reads look at the current tree.
//! * [`watch`] — the watches one server holds for its sessions, fired by the
//!   [`Change`]s a transaction reports.
//! * [`path`] — path syntax, parents, sequential names.
//! * [`recipe`] — the lock recipes' decisions (seed 001 §II.D).
//!
//! Nothing here knows about the network or about time beyond the leader's
//! clock stamped on each transaction ([`Stamp`]).

pub mod acl;
pub mod op;
pub mod path;
pub mod recipe;
pub mod tree;
pub mod watch;

pub use acl::{Acl, Id};
pub use op::{MultiOk, MultiOp, MultiOutcome, NewNode, ZnodeOp, ZnodeReply};
pub use tree::{Change, Stamp, Stat, Tree, Txn, TxnOk};
pub use watch::{EventType, Fired, Rewatch, WatchKind, Watches};

use serde::{Deserialize, Serialize};

/// ZooKeeper's error codes for the operations we serve. Each is definite:
/// the operation had no effect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ZkError {
    #[error("no node")]
    NoNode,
    #[error("node exists")]
    NodeExists,
    #[error("bad version")]
    BadVersion,
    #[error("directory not empty")]
    NotEmpty,
    #[error("ephemerals cannot have children")]
    NoChildrenForEphemerals,
    #[error("session expired")]
    SessionExpired,
    #[error("bad arguments: {0}")]
    BadArguments(String),
    /// ZooKeeper's `NoAuth`: the node's ACL grants the request's
    /// identities no permission for it (`acl.rs`).
    #[error("not authenticated")]
    NoAuth,
    /// ZooKeeper's `InvalidACL`: an empty ACL, an unknown scheme, a bad id,
    /// or `auth` from a connection with no authenticated identity.
    #[error("invalid ACL")]
    InvalidAcl,
    /// ZooKeeper's `NoWatcher`: `removeWatches` or `checkWatches` found no
    /// such watch.
    #[error("no such watcher")]
    NoWatcher,
}
