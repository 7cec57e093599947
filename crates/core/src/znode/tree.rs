//! The znode tree and its sessions: every transaction applied in zxid
//! order, deterministic, so that every replica that applies the same log
//! holds the same tree (seed 001 §II.C "single system image").
//!
//! Rules taken from ZooKeeper, so a client of ours can be pointed at a real
//! ensemble and see the same answers:
//! * a node's parent must exist and must not be ephemeral; `/` always exists;
//! * a node with children cannot be deleted (`NotEmpty`);
//! * `version` counts data changes, `cversion` child creations and
//!   deletions; a conditional set or delete names the version it expects;
//! * an ephemeral node belongs to a session and dies with it: closing a
//!   session (asked by the client, or decided by the leader when it expired)
//!   is one transaction that deletes all its ephemerals at once.
//!
//! * a *container* (ZooKeeper 3.5's `CreateMode.CONTAINER`) is a
//!   persistent node marked by `ephemeral_owner` [`CONTAINER_OWNER`]; once it has had a child (`cversion > 0`) and has none left,
//!   the leader deletes it (`Txn::DeleteContainer`, proposed by
//!   `protocol::zab::sessions`), a transaction checked again when applied.
//! * a *TTL node* (ZooKeeper 3.5's `CreateMode.PERSISTENT_WITH_TTL`) is a
//!   persistent node whose `ephemeral_owner` is ZooKeeper's own encoding
//!   of its TTL ([`ttl_owner`], `EphemeralType.TTL`: top byte `0xff`, two
//!   zero bytes, the TTL in ms in the last five). Once it has no children
//!   and was not changed for its TTL, the leader deletes it
//!   (`Txn::DeleteTtl`, naming the `mzxid` it saw, so a change in between
//!   keeps it). Being in the stat, the TTL is in every snapshot and log
//!   without a new field; no session may have an id of that form.
//!
//! Where we depart: the sequential suffix is a per-parent counter that only
//! ever grows (ZooKeeper uses the parent's `cversion`, which deletes also
//! bump). The seed only asks for a "monotonically increasing identifier"
//! (§II.C); a counter of its own keeps suffixes dense and makes "a counter
//! reused" a precise bug to inject and check.

use super::acl::{self, Acl, Id};
use super::path;
use super::ZkError;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

mod multi;

/// What a tree snapshot starts with since ACLs (one without it is of the
/// format before, `legacy`).
const SNAPSHOT_MAGIC: &[u8] = b"\xffquorumkv-znodes-acl\x01";

/// Largest data a znode holds (ZooKeeper's default `jute.maxbuffer`).
pub const MAX_DATA: usize = 1 << 20;

/// The refusal of an operation that would take `what` of node `path`
/// past its largest value (never wrapped: issue 31).
fn exhausted(path: &str, what: &str) -> ZkError {
    ZkError::BadArguments(format!("{what} of {path} exhausted"))
}

/// The `ephemeral_owner` of a container: no session may have this id.
/// Not ZooKeeper's mark (`Long.MIN_VALUE`, `1 << 63`), which is a client
/// id here (the simulator's clients have the top bit set); ZooKeeper's
/// wire shows 0 for a container anyway.
pub const CONTAINER_OWNER: u64 = u64::MAX;

/// The largest TTL (ms) of a TTL node, ZooKeeper's
/// `EphemeralType.TTL.maxValue()` (five bytes, about 34 years).
pub const MAX_TTL_MS: u64 = 0xff_ffff_ffff;

/// The `ephemeral_owner` bits above the TTL that mark a TTL node.
const TTL_MARK: u64 = 0xff00_0000_0000_0000;

/// The `ephemeral_owner` of a TTL node of `ttl_ms`, as ZooKeeper encodes
/// it; `None` for a TTL ZooKeeper refuses (0, or above [`MAX_TTL_MS`]).
pub fn ttl_owner(ttl_ms: u64) -> Option<u64> {
    (1..=MAX_TTL_MS)
        .contains(&ttl_ms)
        .then_some(TTL_MARK | ttl_ms)
}

/// Set in the id of a client that works only inside its session (our
/// `ZkClient`, every session of the ZooKeeper port). Once such a session
/// is closed or expired its writes are refused with `SessionExpired`, as
/// ZooKeeper refuses every request of a session that is gone: a write the
/// client gave up on (a paused server held it) cannot apply after the
/// client moved on, e.g. a lock's release deleting the next holder's node.
/// A client without it (the CLI's one-shot commands) writes without a
/// session. Bit 62: bit 63 is every client's (`client_writer_id`); with
/// bit 61 clear an id is never an owner mark ([`reserved_owner`]).
pub const SESSION_BOUND: u64 = 1 << 62;

/// Whether `id` is a [`SESSION_BOUND`] client's.
pub fn session_bound(id: u64) -> bool {
    id & SESSION_BOUND != 0
}

/// Whether `id` is an owner mark (a container's or a TTL node's) that no
/// session may take.
pub fn reserved_owner(id: u64) -> bool {
    id == CONTAINER_OWNER || id & !MAX_TTL_MS == TTL_MARK
}

/// What kind of node a create makes (and who owns an ephemeral).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Persistent,
    Ephemeral(u64),
    Container,
    /// A TTL node of this TTL (ms).
    Ttl(u64),
}

impl Kind {
    fn new(ephemeral: bool, session: u64) -> Kind {
        match ephemeral {
            true => Kind::Ephemeral(session),
            false => Kind::Persistent,
        }
    }
}

/// A znode's metadata, ZooKeeper's `Stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    /// zxid of the transaction that created the node: the fencing token of
    /// the lock recipes.
    pub czxid: u64,
    /// zxid of the last data change (the create at first).
    pub mzxid: u64,
    /// zxid of the last change to the set of children.
    pub pzxid: u64,
    /// Leader time (ms) of the create and of the last data change.
    pub ctime: u64,
    pub mtime: u64,
    pub version: u32,
    pub cversion: u32,
    /// The owning session of an ephemeral node, 0 for a persistent one.
    pub ephemeral_owner: u64,
    pub data_length: u32,
    pub num_children: u32,
    /// ACL version: how many setACLs the node has had (checked, never
    /// wraps).
    pub aversion: u32,
}

impl Stat {
    /// Owned by a session (not persistent, not a container, not a TTL
    /// node).
    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral_owner != 0 && !reserved_owner(self.ephemeral_owner)
    }
    /// A TTL node's TTL (ms).
    pub fn ttl(&self) -> Option<u64> {
        let o = self.ephemeral_owner;
        (o & !MAX_TTL_MS == TTL_MARK).then_some(o & MAX_TTL_MS)
    }
    pub fn is_container(&self) -> bool {
        self.ephemeral_owner == CONTAINER_OWNER
    }
}

/// Where a transaction sits in the log: its zxid and the leader's clock
/// when it was proposed (so every replica stamps the same times).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub zxid: u64,
    pub time_ms: u64,
}

/// A state-changing operation, as logged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Txn {
    /// Open (or re-open, idempotent) a session with its timeout.
    OpenSession { session: u64, timeout_ms: u64 },
    /// Close a session and delete its ephemerals, in one transaction.
    CloseSession { session: u64 },
    Create {
        path: String,
        data: Bytes,
        ephemeral: bool,
        sequential: bool,
        /// The session asking: owner of an ephemeral node.
        session: u64,
        /// `None`: `world:anyone:cdrwa`; checked and completed by
        /// `acl::fixup` against the request's identities.
        acl: Option<Vec<Acl>>,
    },
    /// Delete if the version matches (`None`: any version).
    Delete { path: String, version: Option<u32> },
    SetData {
        path: String,
        data: Bytes,
        version: Option<u32>,
    },
    /// Replace the node's ACL if its ACL version matches.
    SetAcl {
        path: String,
        acl: Vec<Acl>,
        version: Option<u32>,
    },
    /// Create a container (never sequential, as in ZooKeeper).
    CreateContainer {
        path: String,
        data: Bytes,
        acl: Option<Vec<Acl>>,
    },
    /// The leader's deletion of a container that has had children and has
    /// none left; refused (nothing changes) if it is not so when applied.
    DeleteContainer { path: String },
    /// Create a TTL node (never ephemeral, as in ZooKeeper).
    CreateTtl {
        path: String,
        data: Bytes,
        sequential: bool,
        ttl_ms: u64,
        acl: Option<Vec<Acl>>,
    },
    /// The leader's deletion of an expired TTL node; refused (nothing
    /// changes) unless, when applied, `path` is a TTL node without
    /// children last changed at `mzxid`.
    DeleteTtl { path: String, mzxid: u64 },
}

/// What a successful transaction answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOk {
    /// The node's actual path (with its sequence suffix) and stat.
    Created {
        path: String,
        stat: Stat,
    },
    Deleted,
    Set(Stat),
    SessionOpened,
    /// The ephemerals the close deleted, in path order.
    SessionClosed {
        deleted: Vec<String>,
    },
}

/// What a transaction changed, for the watches (`super::watch`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    Created(String),
    Deleted(String),
    DataChanged(String),
    /// A child of this path was created or deleted.
    ChildrenChanged(String),
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Znode {
    data: Bytes,
    stat: Stat,
    children: BTreeSet<String>,
    /// Next sequential suffix for a child (never reused).
    next_seq: u64,
    acl: Vec<Acl>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Session {
    timeout_ms: u64,
    ephemerals: BTreeSet<String>,
}

/// The whole replicated state of the coordination service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tree {
    nodes: BTreeMap<String, Znode>,
    sessions: BTreeMap<u64, Session>,
    /// zxid of the last transaction applied (reads report it; a restored
    /// snapshot says where the log resumes).
    last_zxid: u64,
}

impl Default for Tree {
    fn default() -> Tree {
        let mut nodes = BTreeMap::new();
        let root = Znode {
            acl: acl::open_acl_unsafe(),
            ..Znode::default()
        };
        nodes.insert("/".to_string(), root);
        Tree {
            nodes,
            sessions: BTreeMap::new(),
            last_zxid: 0,
        }
    }
}

/// The path a create checks (a sequential create may name the parent
/// itself, "/q/", as in ZooKeeper: the suffix makes the final path valid),
/// once it and the data are valid.
fn create_probe(path: &str, data: &Bytes, sequential: bool) -> Result<String, ZkError> {
    let probe = if sequential {
        format!("{path}0")
    } else {
        path.to_string()
    };
    path::validate(&probe)?;
    if data.len() > MAX_DATA {
        return Err(ZkError::BadArguments(format!(
            "data of {} bytes exceeds {MAX_DATA}",
            data.len()
        )));
    }
    Ok(probe)
}

impl Tree {
    /// The sessions' invariant (checked by the simulator after every
    /// step): every ephemeral node belongs to an open session that lists
    /// it, so a closed or expired session owns none.
    pub fn check_ephemerals(&self) -> Result<(), String> {
        for (path, n) in &self.nodes {
            let owner = n.stat.ephemeral_owner;
            let listed = |s: &Session| s.ephemerals.contains(path);
            if n.stat.is_ephemeral() && !self.sessions.get(&owner).is_some_and(listed) {
                return Err(format!(
                    "{path} is an ephemeral of session {owner:#x}, which is closed or does not list it"
                ));
            }
        }
        Ok(())
    }

    /// The tree without its sessions and their ephemeral nodes, for a
    /// snapshot that a new cluster starts from (no session outlives its
    /// connection, so ZooKeeper would expire them all there): each parent
    /// loses the child from its list and count; its `cversion` and `pzxid`
    /// stay, as no transaction removed it.
    pub fn without_sessions(&self) -> Tree {
        let mut t = self.clone();
        let ephemerals: Vec<String> = (t.nodes.iter())
            .filter(|(_, n)| n.stat.is_ephemeral())
            .map(|(p, _)| p.clone())
            .collect();
        for p in ephemerals {
            t.nodes.remove(&p);
            if let Some(parent) = t.nodes.get_mut(path::parent(&p)) {
                if parent.children.remove(path::name(&p)) {
                    parent.stat.num_children = parent.stat.num_children.saturating_sub(1);
                }
            }
        }
        t.sessions.clear();
        t
    }

    /// The containers the leader may delete: had children, have none.
    pub fn empty_containers(&self) -> impl Iterator<Item = &str> + '_ {
        let empty =
            |n: &Znode| n.stat.is_container() && n.stat.cversion > 0 && n.children.is_empty();
        (self.nodes.iter())
            .filter(move |(_, n)| empty(n))
            .map(|(p, _)| p.as_str())
    }

    /// The TTL nodes: path, stat (its `mzxid` the last change, its
    /// [`Stat::ttl`]) and whether it has no children, for the leader to
    /// delete the expired ones.
    pub fn ttl_nodes(&self) -> impl Iterator<Item = (&str, &Stat, bool)> + '_ {
        (self.nodes.iter())
            .filter(|(_, n)| n.stat.ttl().is_some())
            .map(|(p, n)| (p.as_str(), &n.stat, n.children.is_empty()))
    }

    /// `getEphemerals`: the paths of `session`'s ephemerals that start
    /// with `prefix` (a string prefix, as ZooKeeper matches it), in path
    /// order; none for a closed session.
    pub fn ephemerals_of(&self, session: u64, prefix: &str) -> Vec<String> {
        let Some(s) = self.sessions.get(&session) else {
            return Vec::new();
        };
        (s.ephemerals.iter())
            .filter(|p| p.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Each node's path, creation zxid and next sequential suffix, for the
    /// invariant that a suffix is never given twice.
    pub fn seq_counters(&self) -> impl Iterator<Item = (&str, u64, u64)> + '_ {
        (self.nodes.iter()).map(|(p, n)| (p.as_str(), n.stat.czxid, n.next_seq))
    }

    /// Injected bug `zab-znode-seq-reuse` only: start every parent's
    /// sequential counter again at its number of children, as if the
    /// counter were not part of the replicated state.
    pub fn restart_seq_counters(&mut self) {
        for n in self.nodes.values_mut() {
            n.next_seq = n.children.len() as u64;
        }
    }

    /// Injected bug `zab-znode-orphan-ephemerals` only: `session` forgets
    /// its ephemerals, so its close leaves them in the tree.
    #[doc(hidden)]
    pub fn disown_ephemerals(&mut self, session: u64) {
        if let Some(s) = self.sessions.get_mut(&session) {
            s.ephemerals.clear();
        }
    }

    /// Apply one transaction with no identities (`world:anyone` only).
    pub fn apply(&mut self, at: Stamp, txn: &Txn) -> (Result<TxnOk, ZkError>, Vec<Change>) {
        self.apply_as(at, txn, &[])
    }

    /// Apply one transaction asked by a connection with identities `ids`
    /// (checked against ACLs as ZooKeeper does: CREATE on the parent for a
    /// create, DELETE on the parent for a delete, WRITE for setData, ADMIN
    /// for setACL; `NoAuth` otherwise). A failed one changes nothing
    /// (atomicity, seed 001 §II.C) but still advances `last_zxid`: it was
    /// delivered.
    pub fn apply_as(
        &mut self,
        at: Stamp,
        txn: &Txn,
        ids: &[Id],
    ) -> (Result<TxnOk, ZkError>, Vec<Change>) {
        debug_assert!(
            at.zxid > self.last_zxid,
            "transactions applied out of order"
        );
        self.last_zxid = at.zxid;
        let mut changes = Vec::new();
        let result = match txn {
            Txn::OpenSession { session, .. } if reserved_owner(*session) => Err(
                ZkError::BadArguments("session id reserved for containers and TTL nodes".into()),
            ),
            Txn::OpenSession {
                session,
                timeout_ms,
            } => {
                let s = self.sessions.entry(*session).or_insert(Session {
                    timeout_ms: *timeout_ms,
                    ephemerals: BTreeSet::new(),
                });
                s.timeout_ms = *timeout_ms;
                Ok(TxnOk::SessionOpened)
            }
            Txn::CloseSession { session } => {
                let deleted: Vec<String> = match self.sessions.remove(session) {
                    Some(s) => s.ephemerals.into_iter().collect(),
                    None => Vec::new(),
                };
                // Ephemerals have no children, so any order works; path
                // order makes the change list deterministic.
                for p in &deleted {
                    self.remove(at, p, &mut changes);
                }
                Ok(TxnOk::SessionClosed { deleted })
            }
            Txn::Create { .. } | Txn::CreateContainer { .. } | Txn::CreateTtl { .. } => {
                self.create_txn(at, txn, ids, &mut changes)
            }
            Txn::DeleteContainer { path } => self.delete_container(at, path, &mut changes),
            Txn::DeleteTtl { path, mzxid } => self.delete_ttl(at, path, *mzxid, &mut changes),
            Txn::Delete { path, version } => self.delete(at, path, *version, ids, &mut changes),
            Txn::SetData {
                path,
                data,
                version,
            } => self.set_data(at, path, data, *version, ids, &mut changes),
            Txn::SetAcl { path, acl, version } => self.set_acl(path, acl, *version, ids),
        };
        (result, changes)
    }

    /// A create of any kind (`Create`, `CreateContainer`, `CreateTtl`).
    fn create_txn(
        &mut self,
        at: Stamp,
        txn: &Txn,
        ids: &[Id],
        changes: &mut Vec<Change>,
    ) -> Result<TxnOk, ZkError> {
        let (path, data, how, acl) = match txn {
            Txn::Create {
                path,
                data,
                ephemeral,
                sequential,
                session,
                acl,
            } => (
                path,
                data,
                (Kind::new(*ephemeral, *session), *sequential),
                acl,
            ),
            Txn::CreateContainer { path, data, acl } => (path, data, (Kind::Container, false), acl),
            Txn::CreateTtl {
                path,
                data,
                sequential,
                ttl_ms,
                acl,
            } => (path, data, (Kind::Ttl(*ttl_ms), *sequential), acl),
            other => unreachable!("{other:?} is not a create"),
        };
        self.create(at, path, data, how, (acl.as_deref(), ids), changes)
    }

    fn create(
        &mut self,
        at: Stamp,
        path: &str,
        data: &Bytes,
        (kind, sequential): (Kind, bool),
        (acl, ids): (Option<&[Acl]>, &[Id]),
        changes: &mut Vec<Change>,
    ) -> Result<TxnOk, ZkError> {
        let probe = create_probe(path, data, sequential)?;
        // ZooKeeper's order: InvalidACL, NoNode, NoAuth, NodeExists.
        let acl = match acl {
            None => acl::open_acl_unsafe(),
            Some(a) => acl::fixup(a, ids)?,
        };
        if probe == "/" {
            return Err(ZkError::NodeExists);
        }
        let parent = path::parent(&probe).to_string();
        let parent_node = self.nodes.get(&parent).ok_or(ZkError::NoNode)?;
        acl::check(&parent_node.acl, acl::CREATE, ids)?;
        if parent_node.stat.is_ephemeral() {
            return Err(ZkError::NoChildrenForEphemerals);
        }
        let owner = self.owner(kind)?;
        let full = if sequential {
            path::sequential(path, parent_node.next_seq)
        } else {
            path.to_string()
        };
        if self.nodes.contains_key(&full) {
            return Err(ZkError::NodeExists);
        }
        let stat = Stat {
            czxid: at.zxid,
            mzxid: at.zxid,
            pzxid: at.zxid,
            ctime: at.time_ms,
            mtime: at.time_ms,
            ephemeral_owner: owner,
            data_length: data.len() as u32,
            ..Stat::default()
        };
        // Checked (issue 31): a counter that cannot grow refuses the
        // create, before anything changed.
        let (Some(cversion), Some(next_seq)) = (
            parent_node.stat.cversion.checked_add(1),
            parent_node.next_seq.checked_add(u64::from(sequential)),
        ) else {
            return Err(exhausted(&parent, "cversion or sequence counter"));
        };
        let parent_node = self.nodes.get_mut(&parent).expect("checked above");
        parent_node.next_seq = next_seq;
        parent_node.children.insert(path::name(&full).to_string());
        parent_node.stat.cversion = cversion;
        parent_node.stat.pzxid = at.zxid;
        parent_node.stat.num_children = parent_node.children.len() as u32;
        self.nodes.insert(
            full.clone(),
            Znode {
                data: data.clone(),
                stat,
                acl,
                ..Znode::default()
            },
        );
        if let Kind::Ephemeral(session) = kind {
            let s = self.sessions.get_mut(&session).expect("checked above");
            s.ephemerals.insert(full.clone());
        }
        changes.push(Change::Created(full.clone()));
        changes.push(Change::ChildrenChanged(parent));
        Ok(TxnOk::Created { path: full, stat })
    }

    fn delete(
        &mut self,
        at: Stamp,
        path: &str,
        version: Option<u32>,
        ids: &[Id],
        changes: &mut Vec<Change>,
    ) -> Result<TxnOk, ZkError> {
        path::validate(path)?;
        if path == "/" {
            return Err(ZkError::BadArguments("the root cannot be deleted".into()));
        }
        let node = self.nodes.get(path).ok_or(ZkError::NoNode)?;
        if let Some(p) = self.nodes.get(path::parent(path)) {
            acl::check(&p.acl, acl::DELETE, ids)?;
        }
        if version.is_some_and(|v| v != node.stat.version) {
            return Err(ZkError::BadVersion);
        }
        if !node.children.is_empty() {
            return Err(ZkError::NotEmpty);
        }
        let parent = path::parent(path);
        if self
            .nodes
            .get(parent)
            .is_some_and(|p| p.stat.cversion == u32::MAX)
        {
            return Err(exhausted(parent, "cversion"));
        }
        self.remove(at, path, changes);
        Ok(TxnOk::Deleted)
    }

    /// The `ephemeral_owner` of a new node of `kind`; an ephemeral needs
    /// an open session.
    fn owner(&self, kind: Kind) -> Result<u64, ZkError> {
        match kind {
            Kind::Ephemeral(s) if !self.sessions.contains_key(&s) => Err(ZkError::SessionExpired),
            Kind::Ephemeral(s) => Ok(s),
            Kind::Persistent => Ok(0),
            Kind::Container => Ok(CONTAINER_OWNER),
            Kind::Ttl(ttl) => ttl_owner(ttl).ok_or_else(|| {
                ZkError::BadArguments(format!("TTL {ttl} ms not in 1..={MAX_TTL_MS}"))
            }),
        }
    }

    /// The leader's deletion of an expired TTL node: no ACL or version is
    /// checked, but the node must still be a TTL node, unchanged since
    /// the leader looked (`mzxid`), without children. Whether its TTL
    /// passed is the leader's to judge (`protocol::zab::sessions`): the
    /// times in stats come from the clocks of successive leaders.
    fn delete_ttl(
        &mut self,
        at: Stamp,
        path: &str,
        mzxid: u64,
        changes: &mut Vec<Change>,
    ) -> Result<TxnOk, ZkError> {
        path::validate(path)?;
        let node = self.nodes.get(path).ok_or(ZkError::NoNode)?;
        if node.stat.ttl().is_none() {
            return Err(ZkError::BadArguments(format!("{path} is not a TTL node")));
        }
        if node.stat.mzxid != mzxid {
            return Err(ZkError::BadVersion);
        }
        if !node.children.is_empty() {
            return Err(ZkError::NotEmpty);
        }
        self.remove(at, path, changes);
        Ok(TxnOk::Deleted)
    }

    /// The leader's deletion of an empty container (ZooKeeper's
    /// `deleteContainer`): no ACL or version is checked, but the node must
    /// still be a container that has had children and has none.
    fn delete_container(
        &mut self,
        at: Stamp,
        path: &str,
        changes: &mut Vec<Change>,
    ) -> Result<TxnOk, ZkError> {
        path::validate(path)?;
        let node = self.nodes.get(path).ok_or(ZkError::NoNode)?;
        if !node.stat.is_container() || node.stat.cversion == 0 {
            return Err(ZkError::BadArguments(format!(
                "{path} is not a container that has had children"
            )));
        }
        if !node.children.is_empty() {
            return Err(ZkError::NotEmpty);
        }
        self.remove(at, path, changes);
        Ok(TxnOk::Deleted)
    }

    /// Remove a childless node and unlink it from its parent and session.
    fn remove(&mut self, at: Stamp, path: &str, changes: &mut Vec<Change>) {
        let Some(node) = self.nodes.remove(path) else {
            return;
        };
        let owner = node.stat.ephemeral_owner;
        if let Some(s) = self.sessions.get_mut(&owner) {
            s.ephemerals.remove(path);
        }
        let parent = path::parent(path).to_string();
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.children.remove(path::name(path));
            // Saturating, not refused: a session's close removes its
            // ephemerals whatever their parent's count (a client's own
            // delete was refused at `u32::MAX` above).
            p.stat.cversion = p.stat.cversion.saturating_add(1);
            p.stat.pzxid = at.zxid;
            p.stat.num_children = p.children.len() as u32;
        }
        changes.push(Change::Deleted(path.to_string()));
        changes.push(Change::ChildrenChanged(parent));
    }

    fn set_data(
        &mut self,
        at: Stamp,
        path: &str,
        data: &Bytes,
        version: Option<u32>,
        ids: &[Id],
        changes: &mut Vec<Change>,
    ) -> Result<TxnOk, ZkError> {
        path::validate(path)?;
        if data.len() > MAX_DATA {
            return Err(ZkError::BadArguments(format!(
                "data of {} bytes exceeds {MAX_DATA}",
                data.len()
            )));
        }
        let node = self.nodes.get_mut(path).ok_or(ZkError::NoNode)?;
        acl::check(&node.acl, acl::WRITE, ids)?;
        if version.is_some_and(|v| v != node.stat.version) {
            return Err(ZkError::BadVersion);
        }
        // Checked (issue 31): a wrapped version would pass a conditional
        // set that names an old version again.
        let Some(next) = node.stat.version.checked_add(1) else {
            return Err(exhausted(path, "version"));
        };
        node.data = data.clone();
        node.stat.version = next;
        node.stat.mzxid = at.zxid;
        node.stat.mtime = at.time_ms;
        node.stat.data_length = data.len() as u32;
        changes.push(Change::DataChanged(path.to_string()));
        Ok(TxnOk::Set(node.stat))
    }

    /// `setACL`: ZooKeeper's order is InvalidACL, NoNode, NoAuth (ADMIN),
    /// BadVersion (against `aversion`). No watch fires (as in ZooKeeper).
    fn set_acl(
        &mut self,
        path: &str,
        acl: &[Acl],
        version: Option<u32>,
        ids: &[Id],
    ) -> Result<TxnOk, ZkError> {
        path::validate(path)?;
        let acl = acl::fixup(acl, ids)?;
        let node = self.nodes.get_mut(path).ok_or(ZkError::NoNode)?;
        acl::check(&node.acl, acl::ADMIN, ids)?;
        if version.is_some_and(|v| v != node.stat.aversion) {
            return Err(ZkError::BadVersion);
        }
        let Some(next) = node.stat.aversion.checked_add(1) else {
            return Err(exhausted(path, "aversion"));
        };
        node.acl = acl;
        node.stat.aversion = next;
        Ok(TxnOk::Set(node.stat))
    }

    /// `getData` for a connection with identities `ids`: needs READ.
    pub fn get_data_as(&self, path: &str, ids: &[Id]) -> Result<(Bytes, Stat), ZkError> {
        path::validate(path)?;
        let n = self.nodes.get(path).ok_or(ZkError::NoNode)?;
        acl::check(&n.acl, acl::READ, ids)?;
        Ok((n.data.clone(), n.stat))
    }

    /// `getChildren` for a connection with identities `ids`: needs READ
    /// on the node.
    pub fn children_as(&self, path: &str, ids: &[Id]) -> Result<Vec<String>, ZkError> {
        path::validate(path)?;
        let n = self.nodes.get(path).ok_or(ZkError::NoNode)?;
        acl::check(&n.acl, acl::READ, ids)?;
        Ok(n.children.iter().cloned().collect())
    }

    /// `getACL` as ZooKeeper 3.7+ answers it (ZOOKEEPER-1392): needs READ
    /// or ADMIN; without ADMIN, digest ids show `user:x`.
    pub fn get_acl_as(&self, path: &str, ids: &[Id]) -> Result<(Vec<Acl>, Stat), ZkError> {
        path::validate(path)?;
        let n = self.nodes.get(path).ok_or(ZkError::NoNode)?;
        acl::check(&n.acl, acl::READ | acl::ADMIN, ids)?;
        let shown = match acl::allows(&n.acl, acl::ADMIN, ids) {
            true => n.acl.clone(),
            false => acl::redacted(&n.acl),
        };
        Ok((shown, n.stat))
    }

    /// `getData`: the node's data and stat.
    pub fn get_data(&self, path: &str) -> Result<(Bytes, Stat), ZkError> {
        path::validate(path)?;
        let n = self.nodes.get(path).ok_or(ZkError::NoNode)?;
        Ok((n.data.clone(), n.stat))
    }

    /// `exists`: the stat, or `None` when there is no such node.
    pub fn exists(&self, path: &str) -> Result<Option<Stat>, ZkError> {
        path::validate(path)?;
        Ok(self.nodes.get(path).map(|n| n.stat))
    }

    /// `getChildren`: the children's names, sorted (so sequential
    /// children come in creation order).
    pub fn children(&self, path: &str) -> Result<Vec<String>, ZkError> {
        path::validate(path)?;
        let n = self.nodes.get(path).ok_or(ZkError::NoNode)?;
        Ok(n.children.iter().cloned().collect())
    }

    /// The open sessions and their timeouts (the leader expires them).
    pub fn sessions(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.sessions.iter().map(|(&s, i)| (s, i.timeout_ms))
    }

    pub fn has_session(&self, session: u64) -> bool {
        self.sessions.contains_key(&session)
    }

    /// The timeout of an open session.
    pub fn session_timeout(&self, session: u64) -> Option<u64> {
        self.sessions.get(&session).map(|s| s.timeout_ms)
    }

    pub fn last_zxid(&self) -> u64 {
        self.last_zxid
    }

    /// Number of znodes, the root included.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when only the root exists.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() == 1
    }

    /// [`SNAPSHOT_MAGIC`], then the tree.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut v = SNAPSHOT_MAGIC.to_vec();
        v.extend(postcard::to_allocvec(self).expect("a tree always serialises"));
        v
    }

    /// A snapshot of this version, or of the version before ACLs (every
    /// node then gets `world:anyone:cdrwa` and ACL version 0, what it had
    /// in effect).
    pub fn restore(data: &[u8]) -> Result<Tree, String> {
        // Each format must be read to its last byte: postcard is not
        // self-describing.
        fn whole<'a, T: Deserialize<'a>>(data: &'a [u8]) -> Result<T, String> {
            match postcard::take_from_bytes(data) {
                Ok((t, [])) => Ok(t),
                Ok(_) => Err("trailing bytes".into()),
                Err(e) => Err(e.to_string()),
            }
        }
        let t: Tree = match data.strip_prefix(SNAPSHOT_MAGIC) {
            Some(rest) => whole(rest),
            None => whole::<legacy::Tree>(data).map(Tree::from),
        }
        .map_err(|e| format!("corrupt znode snapshot: {e}"))?;
        if !t.nodes.contains_key("/") {
            return Err("corrupt znode snapshot: no root".into());
        }
        Ok(t)
    }
}

/// The snapshot format before ACLs (no `acl` per node, no `aversion`).
mod legacy {
    use super::{acl, BTreeMap, BTreeSet, Bytes, Deserialize, Session};

    #[derive(Deserialize)]
    struct Stat {
        czxid: u64,
        mzxid: u64,
        pzxid: u64,
        ctime: u64,
        mtime: u64,
        version: u32,
        cversion: u32,
        ephemeral_owner: u64,
        data_length: u32,
        num_children: u32,
    }

    #[derive(Deserialize)]
    struct Znode {
        data: Bytes,
        stat: Stat,
        children: BTreeSet<String>,
        next_seq: u64,
    }

    #[derive(Deserialize)]
    pub(super) struct Tree {
        nodes: BTreeMap<String, Znode>,
        sessions: BTreeMap<u64, Session>,
        last_zxid: u64,
    }

    impl From<Tree> for super::Tree {
        fn from(t: Tree) -> super::Tree {
            let nodes = (t.nodes.into_iter())
                .map(|(path, n)| {
                    let s = n.stat;
                    let stat = super::Stat {
                        czxid: s.czxid,
                        mzxid: s.mzxid,
                        pzxid: s.pzxid,
                        ctime: s.ctime,
                        mtime: s.mtime,
                        version: s.version,
                        cversion: s.cversion,
                        ephemeral_owner: s.ephemeral_owner,
                        data_length: s.data_length,
                        num_children: s.num_children,
                        aversion: 0,
                    };
                    let node = super::Znode {
                        data: n.data,
                        stat,
                        children: n.children,
                        next_seq: n.next_seq,
                        acl: acl::open_acl_unsafe(),
                    };
                    (path, node)
                })
                .collect();
            super::Tree {
                nodes,
                sessions: t.sessions,
                last_zxid: t.last_zxid,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    struct T {
        tree: Tree,
        zxid: u64,
    }

    impl T {
        fn new() -> T {
            T {
                tree: Tree::default(),
                zxid: 0,
            }
        }
        fn run(&mut self, txn: Txn) -> (Result<TxnOk, ZkError>, Vec<Change>) {
            self.zxid += 1;
            let at = Stamp {
                zxid: self.zxid,
                time_ms: 1000 + self.zxid,
            };
            self.tree.apply(at, &txn)
        }
        fn create(
            &mut self,
            path: &str,
            eph: bool,
            seq: bool,
            session: u64,
        ) -> Result<String, ZkError> {
            match self
                .run(Txn::Create {
                    path: path.into(),
                    data: b("d"),
                    ephemeral: eph,
                    sequential: seq,
                    session,
                    acl: None,
                })
                .0?
            {
                TxnOk::Created { path, .. } => Ok(path),
                other => panic!("create answered {other:?}"),
            }
        }
    }

    /// The invariant the simulator checks after every step: an ephemeral
    /// belongs to an open session that lists it; the suffix counters are
    /// what the invariant on sequential names reads.
    #[test]
    fn ephemerals_belong_to_open_sessions_and_counters_are_reported() {
        let mut t = T::new();
        let open = Txn::OpenSession {
            session: 7,
            timeout_ms: 1000,
        };
        t.run(open).0.unwrap();
        t.create("/q", false, false, 0).unwrap();
        t.create("/q/e-", true, true, 7).unwrap();
        assert_eq!(t.tree.check_ephemerals(), Ok(()));
        let q = t.tree.seq_counters().find(|c| c.0 == "/q").unwrap();
        assert_eq!(q.2, 1, "one suffix given under /q");
        let mut broken = t.tree.clone();
        broken.sessions.remove(&7);
        let err = broken.check_ephemerals().unwrap_err();
        assert!(
            err.contains("/q/e-0000000000") && err.contains("0x7"),
            "{err}"
        );
        t.run(Txn::CloseSession { session: 7 }).0.unwrap();
        assert_eq!(t.tree.check_ephemerals(), Ok(()), "closing removes them");
    }

    #[test]
    fn create_needs_a_parent_and_a_free_name() {
        let mut t = T::new();
        assert_eq!(t.create("/a/b", false, false, 0), Err(ZkError::NoNode));
        assert_eq!(t.create("/a", false, false, 0), Ok("/a".into()));
        assert_eq!(t.create("/a", false, false, 0), Err(ZkError::NodeExists));
        assert_eq!(t.create("/", false, false, 0), Err(ZkError::NodeExists));
        assert_eq!(t.create("/a/b", false, false, 0), Ok("/a/b".into()));
        assert!(matches!(
            t.create("a", false, false, 0),
            Err(ZkError::BadArguments(_))
        ));
        assert_eq!(t.tree.children("/a"), Ok(vec!["b".to_string()]));
        let (_, root) = t.tree.get_data("/").unwrap();
        assert_eq!((root.num_children, root.cversion), (1, 1));
    }

    #[test]
    fn stats_track_zxids_and_versions() {
        let mut t = T::new();
        t.create("/a", false, false, 0).unwrap();
        let (data, st) = t.tree.get_data("/a").unwrap();
        assert_eq!((data, st.czxid, st.mzxid, st.version), (b("d"), 1, 1, 0));
        let set = |v| Txn::SetData {
            path: "/a".into(),
            data: b("xy"),
            version: v,
        };
        assert_eq!(t.run(set(Some(3))).0, Err(ZkError::BadVersion));
        let (r, ch) = t.run(set(Some(0)));
        let TxnOk::Set(st) = r.unwrap() else { panic!() };
        assert_eq!(
            (st.czxid, st.mzxid, st.version, st.data_length),
            (1, 3, 1, 2)
        );
        assert_eq!(st.mtime, 1003);
        assert_eq!(ch, vec![Change::DataChanged("/a".into())]);
        assert!(t.run(set(None)).0.is_ok());
        assert_eq!(t.tree.get_data("/a").unwrap().1.version, 2);
        // A failed transaction still moves last_zxid: it was delivered.
        assert_eq!(t.tree.last_zxid(), 4);
    }

    #[test]
    fn delete_checks_version_and_children() {
        let mut t = T::new();
        t.create("/a", false, false, 0).unwrap();
        t.create("/a/b", false, false, 0).unwrap();
        let del = |p: &str, v| Txn::Delete {
            path: p.into(),
            version: v,
        };
        assert_eq!(t.run(del("/a", None)).0, Err(ZkError::NotEmpty));
        assert_eq!(t.run(del("/a/b", Some(1))).0, Err(ZkError::BadVersion));
        let (r, ch) = t.run(del("/a/b", Some(0)));
        assert_eq!(r, Ok(TxnOk::Deleted));
        assert_eq!(
            ch,
            vec![
                Change::Deleted("/a/b".into()),
                Change::ChildrenChanged("/a".into())
            ]
        );
        let (_, a) = t.tree.get_data("/a").unwrap();
        assert_eq!((a.cversion, a.pzxid, a.num_children), (2, 5, 0));
        assert_eq!(t.run(del("/a/b", None)).0, Err(ZkError::NoNode));
        assert!(matches!(
            t.run(del("/", None)).0,
            Err(ZkError::BadArguments(_))
        ));
    }

    /// Issue 31: a version, cversion or sequence counter at its largest
    /// value refuses the operation that would grow it, and the tree stays
    /// as it was; nothing wraps to 0.
    #[test]
    fn counters_at_their_edge_refuse_instead_of_wrapping() {
        let mut t = T::new();
        t.create("/q", false, false, 0).unwrap();
        t.create("/q/a", false, false, 0).unwrap();
        let set = |v| Txn::SetData {
            path: "/q/a".into(),
            data: b("x"),
            version: v,
        };
        t.tree.nodes.get_mut("/q/a").unwrap().stat.version = u32::MAX;
        let before = t.tree.clone();
        for v in [None, Some(u32::MAX)] {
            let err = t.run(set(v)).0.unwrap_err();
            assert_eq!(err, exhausted("/q/a", "version"));
            assert_eq!(t.tree.nodes, before.nodes, "unchanged");
        }
        t.tree.nodes.get_mut("/q").unwrap().stat.cversion = u32::MAX;
        let before = t.tree.clone();
        let err = t.create("/q/b", false, false, 0).unwrap_err();
        assert_eq!(err, exhausted("/q", "cversion or sequence counter"));
        let del = Txn::Delete {
            path: "/q/a".into(),
            version: None,
        };
        assert_eq!(t.run(del).0.unwrap_err(), exhausted("/q", "cversion"));
        assert_eq!(t.tree.nodes, before.nodes, "unchanged");
        t.tree.nodes.get_mut("/q").unwrap().stat.cversion = 0;
        t.tree.nodes.get_mut("/q").unwrap().next_seq = u64::MAX;
        let before = t.tree.clone();
        let err = t.create("/q/n-", false, true, 0).unwrap_err();
        assert_eq!(err, exhausted("/q", "cversion or sequence counter"));
        assert_eq!(t.tree.nodes, before.nodes, "unchanged");
        t.create("/q/plain", false, false, 0).unwrap();
        // A session's close still removes its ephemerals at the edge.
        t.run(Txn::OpenSession {
            session: 5,
            timeout_ms: 1000,
        })
        .0
        .unwrap();
        t.create("/q/e", true, false, 5).unwrap();
        t.tree.nodes.get_mut("/q").unwrap().stat.cversion = u32::MAX;
        t.run(Txn::CloseSession { session: 5 }).0.unwrap();
        assert!(!t.tree.nodes.contains_key("/q/e"));
        assert_eq!(t.tree.nodes["/q"].stat.cversion, u32::MAX, "saturated");
    }

    #[test]
    fn without_sessions_drops_the_ephemerals_and_keeps_the_rest() {
        let mut t = T::new();
        let open = Txn::OpenSession {
            session: 7,
            timeout_ms: 1000,
        };
        t.run(open).0.unwrap();
        t.create("/q", false, false, 0).unwrap();
        t.create("/q/keep", false, false, 0).unwrap();
        let eph = t.create("/q/e-", true, true, 7).unwrap();
        let cut = t.tree.without_sessions();
        assert_eq!(cut.check_ephemerals(), Ok(()));
        assert!(!cut.has_session(7) && t.tree.has_session(7));
        assert!(cut.exists(&eph).unwrap().is_none());
        assert_eq!(cut.children("/q").unwrap(), vec!["keep".to_string()]);
        let (q, was) = (cut.nodes["/q"].stat, t.tree.nodes["/q"].stat);
        assert_eq!(q.num_children, 1);
        assert_eq!((q.cversion, q.pzxid), (was.cversion, was.pzxid));
        assert_eq!(cut.nodes["/q"].next_seq, 1, "the suffix counter stays");
        assert_eq!(cut.last_zxid(), t.tree.last_zxid());
    }

    #[test]
    fn sequential_suffixes_grow_and_are_never_reused() {
        let mut t = T::new();
        t.create("/q", false, false, 0).unwrap();
        let a = t.create("/q/n-", false, true, 0).unwrap();
        let b_ = t.create("/q/n-", false, true, 0).unwrap();
        assert_eq!(
            (a.as_str(), b_.as_str()),
            ("/q/n-0000000000", "/q/n-0000000001")
        );
        t.run(Txn::Delete {
            path: b_.clone(),
            version: None,
        })
        .0
        .unwrap();
        // Deleting the newest does not give its number back.
        assert_eq!(
            t.create("/q/n-", false, true, 0).unwrap(),
            "/q/n-0000000002"
        );
        // Restored from a snapshot, the counter goes on where it was.
        let mut r = T {
            tree: Tree::restore(&t.tree.snapshot()).unwrap(),
            zxid: t.zxid,
        };
        assert_eq!(r.tree, t.tree);
        assert_eq!(r.create("/q/x", false, true, 0).unwrap(), "/q/x0000000003");
        assert!(Tree::restore(&[1, 2, 3]).is_err());
    }

    #[test]
    fn ephemerals_need_a_session_and_die_with_it() {
        let mut t = T::new();
        assert_eq!(t.create("/e", true, false, 9), Err(ZkError::SessionExpired));
        t.run(Txn::OpenSession {
            session: 9,
            timeout_ms: 4000,
        })
        .0
        .unwrap();
        t.create("/l", false, false, 0).unwrap();
        let e1 = t.create("/l/n-", true, true, 9).unwrap();
        let e2 = t.create("/e", true, false, 9).unwrap();
        assert_eq!(
            t.create("/e/c", false, false, 0),
            Err(ZkError::NoChildrenForEphemerals)
        );
        assert_eq!(t.tree.get_data(&e2).unwrap().1.ephemeral_owner, 9);
        assert_eq!(t.tree.sessions().collect::<Vec<_>>(), vec![(9, 4000)]);
        let (r, ch) = t.run(Txn::CloseSession { session: 9 });
        assert_eq!(
            r,
            Ok(TxnOk::SessionClosed {
                deleted: vec![e2.clone(), e1.clone()]
            })
        );
        assert!(ch.contains(&Change::Deleted(e1.clone())));
        assert!(ch.contains(&Change::ChildrenChanged("/l".into())));
        assert_eq!(t.tree.exists(&e1), Ok(None));
        assert_eq!(t.tree.exists(&e2), Ok(None));
        assert!(!t.tree.has_session(9));
        // Closing again is harmless; an explicit delete unlinks the owner.
        assert_eq!(
            t.run(Txn::CloseSession { session: 9 }).0,
            Ok(TxnOk::SessionClosed { deleted: vec![] })
        );
        t.run(Txn::OpenSession {
            session: 4,
            timeout_ms: 1,
        })
        .0
        .unwrap();
        let e3 = t.create("/e3", true, false, 4).unwrap();
        t.run(Txn::Delete {
            path: e3,
            version: None,
        })
        .0
        .unwrap();
        assert_eq!(
            t.run(Txn::CloseSession { session: 4 }).0,
            Ok(TxnOk::SessionClosed { deleted: vec![] })
        );
    }

    #[test]
    fn oversized_data_is_refused() {
        let mut t = T::new();
        let big = Bytes::from(vec![0u8; MAX_DATA + 1]);
        let (r, _) = t.run(Txn::Create {
            path: "/big".into(),
            data: big.clone(),
            ephemeral: false,
            sequential: false,
            session: 0,
            acl: None,
        });
        assert!(matches!(r, Err(ZkError::BadArguments(_))));
        t.create("/s", false, false, 0).unwrap();
        let (r, _) = t.run(Txn::SetData {
            path: "/s".into(),
            data: big,
            version: None,
        });
        assert!(matches!(r, Err(ZkError::BadArguments(_))));
        assert_eq!(t.tree.len(), 2);
    }

    fn acl_of(perms: u32, scheme: &str, id: &str) -> Vec<Acl> {
        vec![Acl::new(perms, scheme, id)]
    }

    /// Each permission bit guards what ZooKeeper makes it guard, for the
    /// identity the ACL names and no other; a refused request (`NoAuth`)
    /// changes nothing.
    #[test]
    fn acls_guard_each_operation_with_its_bit() {
        use crate::znode::acl::{ADMIN, ALL, CREATE, DELETE, READ, WRITE};
        let alice = Id::new("digest", &acl::digest("alice:pw").unwrap());
        let bob = Id::new("user", "bob");
        let mut t = T::new();
        let run_as = |t: &mut T, txn: Txn, ids: &[Id]| {
            t.zxid += 1;
            let at = Stamp {
                zxid: t.zxid,
                time_ms: t.zxid,
            };
            t.tree.apply_as(at, &txn, ids).0
        };
        let create = |path: &str, acl: Option<Vec<Acl>>| Txn::Create {
            path: path.into(),
            data: b("d"),
            ephemeral: false,
            sequential: false,
            session: 0,
            acl,
        };
        // Created without an ACL: world:anyone:cdrwa, aversion 0.
        run_as(&mut t, create("/open", None), &[]).unwrap();
        let (acl, st) = t.tree.get_acl_as("/open", &[]).unwrap();
        assert_eq!((acl, st.aversion), (acl::open_acl_unsafe(), 0));
        assert_eq!(
            t.tree.get_acl_as("/", &[]).unwrap().0,
            acl::open_acl_unsafe()
        );
        for (bit, name) in [
            (READ, "r"),
            (WRITE, "w"),
            (CREATE, "c"),
            (DELETE, "d"),
            (ADMIN, "a"),
        ] {
            let p = format!("/{name}");
            let acl = Some(acl_of(bit, "digest", &alice.id));
            run_as(&mut t, create(&p, acl), &[]).unwrap();
            let child = format!("{p}/kid");
            for (who, ids) in [
                ("anonymous", &[][..]),
                ("bob", std::slice::from_ref(&bob)),
                ("alice", std::slice::from_ref(&alice)),
            ] {
                let allowed = who == "alice";
                if bit == DELETE && !t.tree.nodes.contains_key(&child) {
                    // A child made by someone allowed to create, for the
                    // delete check.
                    t.tree.nodes.get_mut(&p).unwrap().acl = acl_of(ALL, "world", "anyone");
                    run_as(&mut t, create(&child, None), &[]).unwrap();
                    t.tree.nodes.get_mut(&p).unwrap().acl = acl_of(DELETE, "digest", &alice.id);
                }
                let before = t.tree.clone();
                let ok = |r: Result<(), ZkError>, needs: u32| {
                    let want = if allowed && bit & needs != 0 {
                        Ok(())
                    } else {
                        Err(ZkError::NoAuth)
                    };
                    assert_eq!(r, want, "{who} on {p} needing {needs}");
                };
                ok(t.tree.get_data_as(&p, ids).map(drop), READ);
                ok(t.tree.children_as(&p, ids).map(drop), READ);
                ok(t.tree.get_acl_as(&p, ids).map(drop), READ | ADMIN);
                // exists needs nothing.
                assert!(t.tree.exists(&p).unwrap().is_some());
                let set = Txn::SetData {
                    path: p.clone(),
                    data: b("x"),
                    version: None,
                };
                let r = run_as(&mut t, set, ids).map(drop);
                ok(r, WRITE);
                let r = run_as(&mut t, create(&child, None), ids).map(drop);
                ok(r, CREATE);
                if t.tree.nodes.contains_key(&child) {
                    let del = Txn::Delete {
                        path: child.clone(),
                        version: None,
                    };
                    ok(run_as(&mut t, del, ids).map(drop), DELETE);
                }
                let set_acl = Txn::SetAcl {
                    path: p.clone(),
                    acl: acl_of(bit, "digest", &alice.id),
                    version: None,
                };
                ok(run_as(&mut t, set_acl, ids).map(drop), ADMIN);
                if !allowed {
                    assert_eq!(t.tree.nodes, before.nodes, "{who}: NoAuth changed nothing");
                }
            }
        }
        // A logged-in user is its own scheme: user:bob:rw names bob only.
        run_as(
            &mut t,
            create("/u", Some(acl_of(READ | WRITE, "user", "bob"))),
            &[],
        )
        .unwrap();
        assert!(t.tree.get_data_as("/u", std::slice::from_ref(&bob)).is_ok());
        assert_eq!(
            t.tree.get_data_as("/u", &[Id::new("user", "alice")]),
            Err(ZkError::NoAuth)
        );
        assert_eq!(
            t.tree.get_data_as("/u", std::slice::from_ref(&alice)),
            Err(ZkError::NoAuth)
        );
    }

    #[test]
    fn set_acl_counts_versions_and_refuses_invalid_acls() {
        let alice = Id::new("digest", &acl::digest("alice:pw").unwrap());
        let mut t = T::new();
        t.create("/n", false, false, 0).unwrap();
        let set = |acl: Vec<Acl>, v| Txn::SetAcl {
            path: "/n".into(),
            acl,
            version: v,
        };
        let mine = vec![Acl::new(acl::ALL, "auth", "")];
        // `auth` with no identity, an empty ACL, a bad scheme: InvalidACL.
        assert_eq!(t.run(set(mine.clone(), None)).0, Err(ZkError::InvalidAcl));
        assert_eq!(t.run(set(vec![], None)).0, Err(ZkError::InvalidAcl));
        assert_eq!(
            t.run(set(acl_of(1, "ip", "1.2.3.4"), None)).0,
            Err(ZkError::InvalidAcl)
        );
        assert_eq!(
            t.run(set(acl_of(1, "world", "anyone"), Some(1))).0,
            Err(ZkError::BadVersion)
        );
        assert_eq!(t.tree.get_acl_as("/n", &[]).unwrap().1.aversion, 0);
        // `auth` expands to the connection's identities.
        t.zxid += 1;
        let at = Stamp {
            zxid: t.zxid,
            time_ms: 0,
        };
        let (r, changes) = t
            .tree
            .apply_as(at, &set(mine, Some(0)), std::slice::from_ref(&alice));
        let TxnOk::Set(st) = r.unwrap() else { panic!() };
        assert_eq!((st.aversion, st.version), (1, 0));
        assert!(changes.is_empty(), "setACL fires no watch");
        let (acl, _) = t
            .tree
            .get_acl_as("/n", std::slice::from_ref(&alice))
            .unwrap();
        assert_eq!(
            acl,
            vec![Acl {
                perms: acl::ALL,
                id: alice.clone()
            }]
        );
        assert_eq!(t.tree.get_acl_as("/n", &[]), Err(ZkError::NoAuth));
        // Without ADMIN, getACL hides the hash (ZooKeeper 3.7+).
        t.tree
            .nodes
            .get_mut("/n")
            .unwrap()
            .acl
            .push(Acl::new(acl::READ, "world", "anyone"));
        let (shown, _) = t.tree.get_acl_as("/n", &[]).unwrap();
        assert_eq!(shown[0].id.id, "alice:x");
        // aversion is checked: at its edge setACL is refused.
        t.tree.nodes.get_mut("/n").unwrap().stat.aversion = u32::MAX;
        let again = set(acl_of(acl::ALL, "world", "anyone"), None);
        t.zxid += 1;
        let at = Stamp {
            zxid: t.zxid,
            time_ms: 0,
        };
        let r = t.tree.apply_as(at, &again, std::slice::from_ref(&alice)).0;
        assert_eq!(r, Err(exhausted("/n", "aversion")));
        // Create: InvalidACL before NoNode, as ZooKeeper checks.
        let bad = Txn::Create {
            path: "/none/x".into(),
            data: b(""),
            ephemeral: false,
            sequential: false,
            session: 0,
            acl: Some(vec![]),
        };
        assert_eq!(t.run(bad).0, Err(ZkError::InvalidAcl));
        // ACLs survive a snapshot.
        let r = Tree::restore(&t.tree.snapshot()).unwrap();
        assert_eq!(r, t.tree);
    }

    /// A snapshot written before ACLs restores, every node open to all.
    #[test]
    fn a_snapshot_from_before_acls_restores_open() {
        #[derive(Serialize)]
        struct OldStat([u64; 5], u32, u32, u64, u32, u32);
        #[derive(Serialize)]
        struct OldZnode(Bytes, OldStat, BTreeSet<String>, u64);
        #[derive(Serialize)]
        struct OldTree(BTreeMap<String, OldZnode>, BTreeMap<u64, Session>, u64);
        let mut nodes = BTreeMap::new();
        let kids: BTreeSet<String> = ["a".to_string()].into();
        nodes.insert(
            "/".into(),
            OldZnode(b(""), OldStat([0; 5], 0, 1, 0, 0, 1), kids, 0),
        );
        let st = OldStat([1, 2, 1, 10, 20], 3, 0, 0, 1, 0);
        nodes.insert("/a".into(), OldZnode(b("x"), st, BTreeSet::new(), 0));
        let old = postcard::to_allocvec(&OldTree(nodes, BTreeMap::new(), 2)).unwrap();
        let t = Tree::restore(&old).unwrap();
        let (data, stat) = t.get_data_as("/a", &[]).unwrap();
        assert_eq!(
            (data, stat.version, stat.mzxid, stat.aversion),
            (b("x"), 3, 2, 0)
        );
        assert_eq!(t.get_acl_as("/a", &[]).unwrap().0, acl::open_acl_unsafe());
        assert_eq!(t.last_zxid(), 2);
    }

    /// A container is a node like another (children allowed, no session)
    /// marked by its owner; the leader's `DeleteContainer` deletes it only
    /// once it has had children and has none, and fires as a delete.
    #[test]
    fn containers_are_deleted_only_when_emptied() {
        let mut t = T::new();
        let container = |path: &str| Txn::CreateContainer {
            path: path.into(),
            data: b("c"),
            acl: None,
        };
        let reap = |path: &str| Txn::DeleteContainer { path: path.into() };
        let Ok(TxnOk::Created { stat, .. }) = t.run(container("/c")).0 else {
            panic!("a container is created")
        };
        assert!(stat.is_container() && !stat.is_ephemeral());
        assert_eq!(stat.ephemeral_owner, CONTAINER_OWNER);
        assert!(t.run(container("/never")).0.is_ok());
        assert_eq!(t.create("/p", false, false, 0), Ok("/p".into()));
        // Never had children: neither is taken; a plain node is not either.
        assert_eq!(t.tree.empty_containers().count(), 0);
        for p in ["/c", "/p"] {
            assert!(matches!(t.run(reap(p)).0, Err(ZkError::BadArguments(_))));
        }
        assert_eq!(t.run(reap("/none")).0, Err(ZkError::NoNode));
        let open = Txn::OpenSession {
            session: 7,
            timeout_ms: 1,
        };
        assert!(t.run(open).0.is_ok());
        assert_eq!(t.create("/c/e", true, false, 7), Ok("/c/e".into()));
        assert_eq!(t.run(reap("/c")).0, Err(ZkError::NotEmpty));
        assert!(t.tree.check_ephemerals().is_ok());
        assert!(t.run(Txn::CloseSession { session: 7 }).0.is_ok());
        assert_eq!(t.tree.empty_containers().collect::<Vec<_>>(), vec!["/c"]);
        let (r, changes) = t.run(reap("/c"));
        assert_eq!(r, Ok(TxnOk::Deleted));
        assert_eq!(
            changes,
            vec![
                Change::Deleted("/c".into()),
                Change::ChildrenChanged("/".into())
            ]
        );
        assert_eq!(
            t.tree.exists("/never").unwrap().map(|s| s.cversion),
            Some(0)
        );
        // No session may take the containers' mark.
        let (r, _) = t.run(Txn::OpenSession {
            session: CONTAINER_OWNER,
            timeout_ms: 1,
        });
        assert!(matches!(r, Err(ZkError::BadArguments(_))));
        assert!(!t.tree.has_session(CONTAINER_OWNER));
    }

    /// A TTL node: persistent, its TTL in `ephemeral_owner` as ZooKeeper
    /// encodes it (in snapshots with the rest); the leader's `DeleteTtl`
    /// takes it only childless and unchanged since the `mzxid` it names;
    /// a TTL out of 1..=max is refused; no session takes the mark.
    #[test]
    fn ttl_nodes_carry_their_ttl_and_go_only_unchanged_and_childless() {
        let mut t = T::new();
        let ttl = |path: &str, ttl_ms, sequential| Txn::CreateTtl {
            path: path.into(),
            data: b("t"),
            sequential,
            ttl_ms,
            acl: None,
        };
        let Ok(TxnOk::Created { stat, .. }) = t.run(ttl("/t", 500, false)).0 else {
            panic!("a TTL node is created")
        };
        assert_eq!(stat.ephemeral_owner, 0xff00_0000_0000_01f4);
        assert_eq!(stat.ttl(), Some(500));
        assert!(!stat.is_ephemeral() && !stat.is_container());
        assert_eq!(t.tree.exists("/").unwrap().unwrap().ttl(), None);
        for bad in [0, MAX_TTL_MS + 1, u64::MAX] {
            let r = t.run(ttl("/bad", bad, false)).0;
            assert!(matches!(r, Err(ZkError::BadArguments(_))), "{bad}: {r:?}");
        }
        assert_eq!(t.tree.exists("/bad"), Ok(None));
        let Ok(TxnOk::Created { path, stat: max }) = t.run(ttl("/s-", MAX_TTL_MS, true)).0 else {
            panic!("the largest TTL is taken")
        };
        assert_eq!(
            (path.as_str(), max.ttl()),
            ("/s-0000000000", Some(MAX_TTL_MS))
        );
        // Children are allowed, and keep it.
        t.create("/t/kid", false, false, 0).unwrap();
        let del = |path: &str, mzxid| Txn::DeleteTtl {
            path: path.into(),
            mzxid,
        };
        assert_eq!(t.run(del("/t", stat.mzxid)).0, Err(ZkError::NotEmpty));
        t.run(Txn::Delete {
            path: "/t/kid".into(),
            version: None,
        })
        .0
        .unwrap();
        let set = Txn::SetData {
            path: "/t".into(),
            data: b("x"),
            version: None,
        };
        let Ok(TxnOk::Set(now)) = t.run(set).0 else {
            panic!()
        };
        assert_eq!(now.ttl(), Some(500), "a set keeps the TTL");
        assert_eq!(
            t.run(del("/t", stat.mzxid)).0,
            Err(ZkError::BadVersion),
            "changed since the leader looked"
        );
        t.create("/p", false, false, 0).unwrap();
        let p = t.tree.exists("/p").unwrap().unwrap();
        assert!(matches!(
            t.run(del("/p", p.mzxid)).0,
            Err(ZkError::BadArguments(_))
        ));
        assert_eq!(t.run(del("/none", 1)).0, Err(ZkError::NoNode));
        let listed: Vec<_> = (t.tree.ttl_nodes())
            .map(|(p, st, childless)| (p.to_string(), st.mzxid, childless))
            .collect();
        assert_eq!(
            listed,
            vec![
                ("/s-0000000000".to_string(), max.mzxid, true),
                ("/t".to_string(), now.mzxid, true)
            ]
        );
        let back = Tree::restore(&t.tree.snapshot()).unwrap();
        assert_eq!(back.exists("/t").unwrap().unwrap().ttl(), Some(500));
        let (r, changes) = t.run(del("/t", now.mzxid));
        assert_eq!(r, Ok(TxnOk::Deleted));
        assert_eq!(
            changes,
            vec![
                Change::Deleted("/t".into()),
                Change::ChildrenChanged("/".into())
            ]
        );
        // A TTL node's mark is no session's.
        for (id, refused) in [
            (0xff00_0000_0000_01f4, true),
            (0xff00_0000_0000_0000, true),
            (0xff01_0000_0000_0000, false),
            (0xfe00_0000_0000_01f4, false),
        ] {
            let open = Txn::OpenSession {
                session: id,
                timeout_ms: 1,
            };
            let r = t.run(open).0;
            assert_eq!(r.is_err(), refused, "{id:#x}: {r:?}");
            assert_eq!(reserved_owner(id), refused);
        }
    }

    /// `getEphemerals`: a session's ephemerals whose paths start with the
    /// prefix (as strings, not path components), none for another.
    #[test]
    fn a_sessions_ephemerals_by_prefix() {
        let mut t = T::new();
        for s in [7, 8] {
            t.run(Txn::OpenSession {
                session: s,
                timeout_ms: 1000,
            })
            .0
            .unwrap();
        }
        t.create("/d", false, false, 0).unwrap();
        let e = t.create("/d/e-", true, true, 7).unwrap();
        t.create("/dx", true, false, 7).unwrap();
        t.create("/d/o", true, false, 8).unwrap();
        assert_eq!(t.tree.ephemerals_of(7, ""), vec![e.clone(), "/dx".into()]);
        assert_eq!(t.tree.ephemerals_of(7, "/d"), vec![e.clone(), "/dx".into()]);
        assert_eq!(t.tree.ephemerals_of(7, "/d/"), vec![e]);
        assert_eq!(t.tree.ephemerals_of(8, "/"), vec!["/d/o".to_string()]);
        assert!(t.tree.ephemerals_of(9, "").is_empty());
    }
}
