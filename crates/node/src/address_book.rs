//! Where each replica is dialled, changeable while the cluster runs
//! (`quorumkv member update ID HOST:PORT`, as `etcdctl member update`).
//!
//! The cluster file names every replica's address. When a replica's
//! machine is gone for good, its replacement may live elsewhere: every
//! live replica learns the new address from an admin's `AddressUpdate`,
//! dials it from then on, and rewrites its own cluster file (when it was
//! started from one) so that a restart keeps it. The replacement then
//! starts at the new address with an empty data directory and `--recover`
//! and catches up from its peers (`docs/src/operations/membership.md`).
//!
//! Who may move a replica: an admin on a client connection after its
//! hello (never a replica link). What stops a move from splitting a live
//! replica's identity: a replica refuses to move a peer it is linked to
//! (stop the old server first), and never moves itself.
//!
//! A replica that was down during a move learns it from the others: the
//! two ends of a replica link exchange their books once (`PeerBook`,
//! wire 1.5). What a peer says of its own address moves it, when the
//! link proved the cluster secret or a replica certificate (the peer is
//! who it claims, and it is where it says its peers dial it). What it
//! says of the others is only a *hint*: tried when the book's address does
//! not answer, and taken into the book (and the file) once a replica link
//! to it comes up.

use crate::codec::Frame;
use crate::config::{check_host_port, ClusterFile};
use crate::driver::Input;
use crate::net::FrameTx;
use quorumkv_core::NodeId;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use tokio::sync::oneshot;

/// Longest `HOST:PORT` taken (a DNS name is at most 253 bytes).
const MAX_ADDR: usize = 260;

/// Most entries of a peer's book looked at (a cluster has far fewer).
const MAX_HEARD: usize = 1024;

/// Every replica's dial address (`HOST:PORT`), and the cluster file that
/// records them.
#[derive(Debug)]
pub struct AddressBook {
    dial: RwLock<BTreeMap<NodeId, String>>,
    /// The file to rewrite after a move (`None`: started from flags).
    file: Option<PathBuf>,
    /// The cluster id the data directories hold: pinned in the file on the
    /// first rewrite, because the id derived from the addresses changes with
    /// them.
    cluster_id: String,
    /// Addresses peers gave for a replica that differ from the book's, not
    /// yet dialled (the latest per replica).
    hints: RwLock<BTreeMap<NodeId, String>>,
}

impl AddressBook {
    pub fn new(cluster: &ClusterFile, file: Option<PathBuf>) -> Self {
        AddressBook {
            dial: RwLock::new(cluster.replicas.iter().map(|r| (r.id, r.dial())).collect()),
            file,
            cluster_id: cluster.id(),
            hints: RwLock::default(),
        }
    }

    /// Take the book replica `from` sent on a link to replica `me`: what
    /// it says of others becomes a hint; what it says of itself is
    /// returned (to move it, with [`Self::set`]) when it differs from ours
    /// and the link is `authenticated`. Its word about `me`, unknown ids
    /// and bad addresses are ignored.
    pub fn hear(
        &self,
        (me, from): (NodeId, NodeId),
        addrs: &[(NodeId, String)],
        authenticated: bool,
    ) -> Option<String> {
        let book = self.read();
        let mut hints = self.hints.write().unwrap_or_else(|e| e.into_inner());
        let mut own = None;
        for (id, addr) in addrs.iter().take(MAX_HEARD) {
            let ours = book.get(id);
            if *id == me || ours.is_none_or(|a| a == addr) || check_addr(addr).is_err() {
                continue;
            }
            if *id != from {
                hints.insert(*id, addr.clone());
            } else if authenticated {
                own = Some(addr.clone());
            }
        }
        own
    }

    /// An address a peer gave for replica `id` that the book does not
    /// dial (yet).
    pub fn hint(&self, id: NodeId) -> Option<String> {
        let ours = self.dial(id);
        let hints = self.hints.read().unwrap_or_else(|e| e.into_inner());
        (hints.get(&id))
            .filter(|h| ours.as_ref() != Some(*h))
            .cloned()
    }

    /// A replica link to `id` at hinted address `addr` came up: dial it
    /// there from now on, in the book and the file.
    pub fn confirm(&self, id: NodeId, addr: &str) -> Result<String, String> {
        let mut hints = self.hints.write().unwrap_or_else(|e| e.into_inner());
        if hints.get(&id).is_some_and(|h| h == addr) {
            hints.remove(&id);
        }
        drop(hints);
        self.set(id, addr)
    }

    /// Where replica `id` is dialled now.
    pub fn dial(&self, id: NodeId) -> Option<String> {
        self.read().get(&id).cloned()
    }

    /// Every replica's dial address, by id.
    pub fn all(&self) -> Vec<(NodeId, String)> {
        self.read().iter().map(|(id, a)| (*id, a.clone())).collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<NodeId, String>> {
        self.dial.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Dial replica `id` at `addr` from now on, and record it in the
    /// cluster file. The answer says where it was recorded; an error leaves
    /// the book as it was.
    pub fn set(&self, id: NodeId, addr: &str) -> Result<String, String> {
        check_addr(addr)?;
        let mut book = self.dial.write().unwrap_or_else(|e| e.into_inner());
        let Some(now) = book.get(&id) else {
            return Err(format!("server {id} is not in this cluster"));
        };
        if now == addr {
            return Ok(format!("server {id} is at {addr} already"));
        }
        if let Some((other, _)) = book.iter().find(|(n, a)| **n != id && *a == addr) {
            return Err(format!("server {other} is dialled at {addr}"));
        }
        let recorded = match &self.file {
            Some(path) => {
                rewrite(path, id, addr, &self.cluster_id)?;
                format!("recorded in {}", path.display())
            }
            None => format!(
                "not recorded: this replica was started without --config; restart it with \
                 --peer {id}={addr} --cluster-id {} (the id its data directory holds)",
                self.cluster_id
            ),
        };
        book.insert(id, addr.to_string());
        Ok(format!("server {id} now at {addr}, {recorded}"))
    }
}

/// `HOST:PORT` as the cluster file takes it ([`check_host_port`]), of a
/// sane length; or why not.
pub fn check_addr(addr: &str) -> Result<(), String> {
    if addr.len() > MAX_ADDR {
        return Err(format!(
            "bad address '{}…': longer than {MAX_ADDR} bytes",
            shown(addr)
        ));
    }
    check_host_port(addr).map_err(|e| format!("bad address '{addr}': {e:#}"))
}

/// At most 80 characters of `s`, for a message.
fn shown(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Set replica `id`'s address in the cluster file at `path`, keeping the
/// rest of the file (comments too), and pin `cluster_id` there if the file
/// has none. Written to a temporary file, synced, then renamed over.
pub fn rewrite(path: &Path, id: NodeId, addr: &str, cluster_id: &str) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("cannot rewrite {}: {e}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| fail(&e))?;
    let new = with_address(&text, id, addr, cluster_id).map_err(|e| fail(&e))?;
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(new.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(&e)
    })
}

/// The cluster file `text` with replica `id` dialled at `addr`: a socket
/// address becomes its `addr` (an `advertise` goes), a name its
/// `advertise`. The new text must still parse as a cluster file.
pub fn with_address(
    text: &str,
    id: NodeId,
    addr: &str,
    cluster_id: &str,
) -> Result<String, String> {
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("{e}"))?;
    if !doc.contains_key("cluster_id") {
        // Before the replica tables: a key after them would belong to the last.
        doc.insert("cluster_id", toml_edit::value(cluster_id));
        if let Some(mut key) = doc.key_mut("cluster_id") {
            key.leaf_decor_mut().set_prefix(
                "# pinned by `quorumkv member update`: the id the data directories hold\n",
            );
        }
    }
    let tables = (doc.get_mut("replica"))
        .and_then(|r| r.as_array_of_tables_mut())
        .ok_or("no [[replica]] tables")?;
    let entry = (tables.iter_mut())
        .find(|t| t.get("id").and_then(|v| v.as_integer()) == Some(i64::from(id)))
        .ok_or_else(|| format!("no [[replica]] with id = {id}"))?;
    if addr.parse::<std::net::SocketAddr>().is_ok() {
        entry.insert("addr", toml_edit::value(addr));
        entry.remove("advertise");
    } else {
        entry.insert("advertise", toml_edit::value(addr));
    }
    let new = doc.to_string();
    let parsed: ClusterFile = toml::from_str(&new).map_err(|e| format!("{e}"))?;
    parsed.validate().map_err(|e| format!("{e:#}"))?;
    let same = |r: &&crate::config::ReplicaAddr| r.id != id && r.dial() == addr;
    if let Some(other) = parsed.replicas.iter().find(same) {
        return Err(format!("server {} is dialled at {addr}", other.id));
    }
    Ok(new)
}

/// The driver input for an admin's `AddressUpdate` on a native connection
/// of replica `me`: refused at once when it names this replica or a bad
/// address; otherwise the driver's status says whether the peer is linked
/// (then refused) before the book changes. The answer goes to `ftx` as
/// `Frame::AddressUpdated`.
pub fn request_input<M: serde::Serialize + Send + 'static>(
    ftx: &FrameTx<M>,
    book: &std::sync::Arc<AddressBook>,
    me: NodeId,
    id: NodeId,
    addr: String,
) -> Input<M> {
    let early = if id == me {
        Err(format!(
            "server {id} is the replica asked: run it at its new address instead of moving it"
        ))
    } else {
        check_addr(&addr)
    };
    if let Err(why) = early {
        let _ = ftx.send(Frame::AddressUpdated { answer: Err(why) });
        return Input::Batch(Vec::new());
    }
    let (otx, orx) = oneshot::channel();
    let (ftx, book) = (ftx.clone(), book.clone());
    tokio::spawn(async move {
        let Ok(status) = orx.await else { return };
        let status: crate::node_status::NodeStatus = status;
        let answer = if status.peers_up.contains(&id) && book.dial(id).as_deref() != Some(&addr) {
            Err(format!(
                "server {id} is linked to replica {me} now: stop it before you move it \
                 (two servers must never run as server {id})"
            ))
        } else {
            // The file is written and synced: off the runtime's workers.
            let (book, addr) = (book.clone(), addr.clone());
            (tokio::task::spawn_blocking(move || book.set(id, &addr)).await)
                .unwrap_or_else(|e| Err(format!("the update failed: {e}")))
        };
        match &answer {
            Ok(done) => tracing::warn!(peer = id, "address update: {done}"),
            Err(why) => tracing::warn!(peer = id, "address update refused: {why}"),
        }
        let _ = ftx.send(Frame::AddressUpdated { answer });
    });
    Input::Status { reply: otx }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"protocol = "ring"
durability = "fsync"

# the first replica
[[replica]]
id = 1
addr = "127.0.0.1:7001"

[[replica]]
id = 2
addr = "0.0.0.0:7001"
advertise = "qkv2:7001" # a name

[[replica]]
id = 3
addr = "127.0.0.1:7003"
"#;

    fn cluster(text: &str) -> ClusterFile {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn an_update_keeps_the_rest_of_the_file_and_pins_the_cluster_id() {
        let id = cluster(FILE).id();
        let new = with_address(FILE, 3, "127.0.0.1:7203", &id).unwrap();
        assert!(new.contains("# the first replica"), "{new}");
        assert!(new.contains("addr = \"127.0.0.1:7203\""), "{new}");
        let c = cluster(&new);
        assert_eq!(c.replica(3).unwrap().dial(), "127.0.0.1:7203");
        assert_eq!(c.replica(1).unwrap().dial(), "127.0.0.1:7001");
        assert_eq!(c.id(), id, "the data directories' id is kept");
        assert_ne!(
            cluster(&new.replace(&format!("cluster_id = \"{id}\""), "")).id(),
            id
        );
        // A second update keeps the id pinned by the first.
        let again = with_address(&new, 1, "127.0.0.1:9001", "other").unwrap();
        assert_eq!(cluster(&again).id(), id);
    }

    #[test]
    fn a_name_becomes_the_advertised_address_and_a_socket_address_replaces_it() {
        let id = cluster(FILE).id();
        let named = with_address(FILE, 1, "qkv1b:7001", &id).unwrap();
        let c = cluster(&named);
        assert_eq!(c.replica(1).unwrap().dial(), "qkv1b:7001");
        assert_eq!(c.replica(1).unwrap().addr.to_string(), "127.0.0.1:7001");
        let plain = with_address(FILE, 2, "10.0.0.9:7001", &id).unwrap();
        let r = cluster(&plain).replica(2).unwrap().clone();
        assert_eq!(
            (r.advertise, r.addr.to_string()),
            (None, "10.0.0.9:7001".into())
        );
    }

    #[test]
    fn an_unknown_replica_or_a_bad_address_is_refused() {
        assert!(with_address(FILE, 9, "127.0.0.1:1", "x")
            .unwrap_err()
            .contains("id = 9"));
        for bad in [
            "",
            "host",
            ":7001",
            "h:0",
            "h:70000",
            "h :1",
            "a\n:1",
            &"h".repeat(300),
        ] {
            assert!(check_addr(bad).is_err(), "{bad:?}");
        }
        for good in ["h:1", "10.0.0.1:7001", "[::1]:7001", "qkv-2.svc:65535"] {
            assert_eq!(check_addr(good), Ok(()), "{good}");
        }
        // The length bound: 260 bytes pass, 261 do not, and the message
        // shows the address's start.
        let at_most = format!("{}:1", "h".repeat(MAX_ADDR - 2));
        assert_eq!(check_addr(&at_most), Ok(()));
        let over = format!("{}:1", "h".repeat(MAX_ADDR - 1));
        let why = check_addr(&over).unwrap_err();
        assert!(
            why.contains("longer than 260 bytes") && why.contains("'hhhh"),
            "{why}"
        );
        // Two replicas are never dialled at one address.
        let twice = with_address(FILE, 3, "127.0.0.1:7001", "x").unwrap_err();
        assert!(twice.contains("server 1 is dialled at"), "{twice}");
        let book = AddressBook::new(&cluster(FILE), None);
        assert!(book.set(3, "qkv2:7001").unwrap_err().contains("server 2"));
    }

    /// What replica `me` answers an update of `id` to `addr`, given the
    /// peers its driver reports up.
    async fn answer(me: NodeId, id: NodeId, addr: &str, up: Vec<NodeId>) -> Result<String, String> {
        let (tx, mut rx) = crate::net::link_queue::<Frame<()>>();
        let book = std::sync::Arc::new(AddressBook::new(&cluster(FILE), None));
        match request_input(&tx, &book, me, id, addr.to_string()) {
            Input::Status { reply } => {
                let status = crate::node_status::NodeStatus {
                    id: me,
                    protocol: "ring".into(),
                    role: "replica".into(),
                    version: "0".into(),
                    members: vec![1, 2, 3],
                    peers_up: up,
                    durability: "fsync".into(),
                    uptime_secs: 1,
                    persist_records: 0,
                    persist_syncs: 0,
                    counters: Vec::new(),
                    wire: None,
                    persist_sync_us: None,
                };
                reply.send(status).unwrap();
            }
            Input::Batch(b) => assert!(b.is_empty()),
            _ => panic!("unexpected input"),
        }
        match rx.recv().await {
            Some(Frame::AddressUpdated { answer }) => answer,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_replica_moves_neither_itself_nor_a_peer_it_is_linked_to() {
        let me = answer(1, 1, "127.0.0.1:9", vec![]).await.unwrap_err();
        assert!(me.contains("is the replica asked"), "{me}");
        let bad = answer(1, 3, "nowhere", vec![]).await.unwrap_err();
        assert!(bad.contains("bad address"), "{bad}");
        let linked = answer(1, 3, "127.0.0.1:9", vec![2, 3]).await.unwrap_err();
        assert!(
            linked.contains("server 3 is linked to replica 1"),
            "{linked}"
        );
        // Where it already is, a linked peer is no refusal (a run again).
        let again = answer(1, 3, "127.0.0.1:7003", vec![3]).await.unwrap();
        assert!(again.contains("already"), "{again}");
        let moved = answer(1, 3, "127.0.0.1:9", vec![2]).await.unwrap();
        assert!(moved.contains("server 3 now at 127.0.0.1:9"), "{moved}");
    }

    #[test]
    fn a_peers_book_gives_hints_and_its_own_address_only_when_proved() {
        let b = AddressBook::new(&cluster(FILE), None);
        let a = |s: &str| s.to_string();
        let theirs = vec![
            (1, a("127.0.0.1:9999")), // about us: ignored
            (2, a("127.0.0.1:9002")),
            (3, a("127.0.0.1:9003")), // the sender's own
            (9, a("127.0.0.1:9009")), // not in the cluster
            (2, a("not an address")),
        ];
        assert_eq!(b.hear((1, 3), &theirs, false), None, "unproved");
        assert_eq!(b.hint(2).as_deref(), Some("127.0.0.1:9002"));
        assert_eq!((b.hint(1), b.hint(3), b.hint(9)), (None, None, None));
        assert_eq!(
            b.dial(2).as_deref(),
            Some("qkv2:7001"),
            "a hint moves nothing"
        );
        let own = b.hear((1, 3), &theirs, true);
        assert_eq!(own.as_deref(), Some("127.0.0.1:9003"), "proved");
        // The same as ours: neither a hint nor a move.
        let same = [(2, a("qkv2:7001")), (3, a("127.0.0.1:7003"))];
        assert_eq!(b.hear((1, 3), &same, true), None);
        // A link came up there: the book dials it, the hint is spent.
        b.confirm(2, "127.0.0.1:9002").unwrap();
        assert_eq!(b.dial(2).as_deref(), Some("127.0.0.1:9002"));
        assert_eq!(b.hint(2), None);
        // A hint naming another server's address is refused when confirmed.
        b.hear((1, 3), &[(2, a("127.0.0.1:7003"))], false);
        assert!(b.confirm(2, "127.0.0.1:7003").is_err());
        assert_eq!(b.dial(2).as_deref(), Some("127.0.0.1:9002"));
        // A newer hint than the address confirmed stays a hint.
        b.hear((1, 3), &[(2, a("127.0.0.1:9102"))], false);
        b.hear((1, 3), &[(2, a("127.0.0.1:9202"))], false);
        b.confirm(2, "127.0.0.1:9102").unwrap();
        assert_eq!(b.hint(2).as_deref(), Some("127.0.0.1:9202"));
    }

    #[test]
    fn the_book_moves_a_replica_and_rewrites_its_file() {
        let dir = std::env::temp_dir().join(format!("qkv-book-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cluster.toml");
        std::fs::write(&path, FILE).unwrap();
        let book = AddressBook::new(&cluster(FILE), Some(path.clone()));
        let said = book.set(3, "127.0.0.1:7303").unwrap();
        assert!(said.contains("recorded in"), "{said}");
        assert_eq!(book.dial(3).as_deref(), Some("127.0.0.1:7303"));
        let all = book.all();
        assert_eq!(all.len(), 3);
        assert!(all.contains(&(3, "127.0.0.1:7303".into())), "{all:?}");
        assert!(all.contains(&(2, "qkv2:7001".into())), "{all:?}");
        let on_disk = ClusterFile::load(&path).unwrap();
        assert_eq!(on_disk.replica(3).unwrap().dial(), "127.0.0.1:7303");
        assert!(book.set(3, "127.0.0.1:7303").unwrap().contains("already"));
        assert!(book
            .set(7, "127.0.0.1:7")
            .unwrap_err()
            .contains("not in this cluster"));
        // A file that cannot be rewritten leaves the book as it was.
        std::fs::remove_file(&path).unwrap();
        assert!(book
            .set(3, "127.0.0.1:7403")
            .unwrap_err()
            .contains("cannot rewrite"));
        assert_eq!(book.dial(3).as_deref(), Some("127.0.0.1:7303"));
        let flags = AddressBook::new(&cluster(FILE), None);
        assert!(flags.set(1, "127.0.0.1:9").unwrap().contains("--peer"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
