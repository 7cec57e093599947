//! `quorumkv snapshot save | restore | status`: a cluster's state in one
//! file, and new replicas' data directories seeded from it.
//!
//! A replica gives its whole state on a native connection (after its hello,
//! an admin request where it has users): `Frame::SnapshotRequest`, answered
//! by the postcard encoding of its [`Export`] in `Frame::SnapshotPart`s of
//! at most [`PART_BYTES`]. Where the cut is taken:
//! * register protocols (ABD, lease-lock): the registers of a majority of
//!   the replicas, merged by highest tag. Every write acknowledged before
//!   the save started was stored by a write quorum, which meets that
//!   majority, so it is in the merge (or a later write of its key is);
//! * Zab: a `sync` and then the state applied at that same replica, cut at
//!   one zxid: every write committed before the sync is in it.
//!
//! The file: [`MAGIC`], the format version (u32, big-endian), the header
//! (TOML, length-prefixed u32), the records (postcard, length-prefixed
//! u64), and the SHA-256 of everything before it.

use crate::client::{open_one, Credentials};
use crate::codec::{encode_to_bytes, Frame};
use crate::driver::Input;
use crate::net::FrameTx;
use crate::storage::StorageEngine;
use crate::tls::ClientTls;
use anyhow::{bail, Context};
use bytes::Bytes;
use quorumkv_core::protocol::{Export, Record};
use quorumkv_core::znode::op::{ZnodeOp, ZnodeReply};
use quorumkv_core::{NodeId, OpId, Request, Response, Tag};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::oneshot;

/// The first bytes of a snapshot file.
pub const MAGIC: &[u8; 8] = b"QKVSNAP\n";
/// The file format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// The largest piece of a streamed state (well under the frame limit).
pub const PART_BYTES: usize = 1 << 20;
/// The largest state a save takes from one replica.
pub const MAX_STATE_BYTES: usize = 1 << 34;
/// The largest header a file may announce.
const MAX_HEADER_BYTES: u32 = 1 << 20;

/// What a snapshot file says about itself (`quorumkv snapshot status`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The protocol whose state this is (a cluster restored from it must
    /// run the same one).
    pub protocol: String,
    /// The protocol's options as the cluster ran them.
    pub options: BTreeMap<String, String>,
    /// The quorumkv version that wrote the file.
    pub quorumkv_version: String,
    /// Seconds since the Unix epoch when the save finished.
    pub created_unix: u64,
    /// How the state was cut (see the module doc).
    pub cut: String,
    /// Zab: the zxid (log index) the state was cut at; 0 otherwise.
    pub zxid: u64,
    /// The replicas whose state was read.
    pub read_from: Vec<NodeId>,
    /// The cluster's replicas when it was saved.
    pub members: Vec<NodeId>,
    /// Keys (and znodes, the root included) in the state.
    pub entries: u64,
    /// Records each restored replica starts from.
    pub records: u64,
    /// How the file is checked: `sha256` of everything before it.
    pub checksum: String,
}

/// A snapshot: its header and the records each replica restores.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub header: Header,
    pub records: Vec<Record>,
}

/// The driver input for a `SnapshotRequest` on a native connection: the
/// state goes to `ftx` in parts once the driver has read it, each part
/// queued when the one before has been written (a large state never sits
/// in the connection's queue at once).
pub fn request_input<M: Serialize + Send + 'static>(ftx: &FrameTx<M>) -> Input<M> {
    let (otx, orx) = oneshot::channel();
    let ftx = ftx.clone();
    tokio::spawn(async move {
        let Ok(answer) = orx.await else { return };
        let data = match answer {
            Ok(export) => postcard::to_stdvec(&export).expect("an export always encodes"),
            Err(message) => {
                let _ = ftx.send(Frame::Error { message });
                return;
            }
        };
        // An export always encodes to a few bytes at least: one part or more.
        let mut parts = data.chunks(PART_BYTES).peekable();
        while let Some(part) = parts.next() {
            while !ftx.is_idle() && !ftx.is_closed() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let frame = Frame::SnapshotPart {
                data: Bytes::copy_from_slice(part),
                more: parts.peek().is_some(),
            };
            if ftx.send(frame).is_err() {
                return;
            }
        }
    });
    Input::Export { reply: otx }
}

/// How a save reaches the replicas.
#[derive(Clone, Debug, Default)]
pub struct Reach {
    pub endpoints: Vec<String>,
    pub tls: Option<ClientTls>,
    pub credentials: Option<Credentials>,
    /// For each replica: connecting, its sync and its whole state.
    pub timeout: Duration,
}

/// One replica's answer to a save.
struct Read {
    node: NodeId,
    protocol: String,
    members: Vec<NodeId>,
    options: Vec<(String, String)>,
    /// Zab: the zxid its `sync` reached, else what it answered (a
    /// protocol without znodes refuses it).
    synced: Result<u64, String>,
    export: Export,
}

/// Read one replica: hello, a `sync` (protocols with znodes), then its
/// state on the same connection, so that the state is read after the sync.
async fn read_one(endpoint: &str, reach: &Reach) -> Result<Read, String> {
    let fut = async {
        let (hello, mut reader, mut wr) = open_one(
            endpoint,
            reach.tls.clone(),
            reach.credentials.clone(),
            reach.timeout,
        )
        .await
        .map_err(|e| e.to_string())?;
        let sync = Frame::Request {
            id: 1,
            op: OpId::NONE,
            req: Request::Znode(ZnodeOp::Sync),
        };
        send(&mut wr, &sync)
            .await
            .map_err(|e| format!("{endpoint}: {e}"))?;
        let Frame::Response { resp, .. } = next(&mut reader, endpoint).await? else {
            return Err(format!("{endpoint}: unexpected answer to a sync"));
        };
        let synced = synced_at(resp);
        // Asked once the sync is answered: the state read includes it.
        send(&mut wr, &Frame::SnapshotRequest)
            .await
            .map_err(|e| format!("{endpoint}: {e}"))?;
        let mut data = Vec::new();
        loop {
            let Frame::SnapshotPart { data: part, more } = next(&mut reader, endpoint).await?
            else {
                return Err(format!(
                    "{endpoint}: unexpected answer to a snapshot request"
                ));
            };
            if data.len().saturating_add(part.len()) > MAX_STATE_BYTES {
                return Err(format!("{endpoint}: state over {MAX_STATE_BYTES} bytes"));
            }
            data.extend_from_slice(&part);
            if !more {
                break;
            }
        }
        let export: Export = postcard::from_bytes(&data)
            .map_err(|e| format!("{endpoint}: undecodable state: {e}"))?;
        Ok(Read {
            node: hello.node,
            protocol: hello.protocol.to_string(),
            members: hello.members,
            options: hello.options,
            synced,
            export,
        })
    };
    tokio::time::timeout(reach.timeout, fut)
        .await
        .unwrap_or_else(|_| Err(format!("{endpoint}: no state within {:?}", reach.timeout)))
}

/// Write one frame to a client connection and flush it.
pub(crate) async fn send(
    wr: &mut crate::stream::ConnWrite,
    frame: &Frame<()>,
) -> std::io::Result<()> {
    crate::stream::write_flush(wr, &encode_to_bytes(frame)).await
}

/// The next frame but events; an `Error` frame as its message.
pub(crate) async fn next(
    reader: &mut crate::net::FrameReader,
    endpoint: &str,
) -> Result<Frame<()>, String> {
    loop {
        match reader.next::<()>().await {
            Ok(Frame::Notify(_)) | Ok(Frame::Heartbeat) => {}
            Ok(Frame::Error { message }) => return Err(format!("{endpoint}: {message}")),
            Ok(f) => return Ok(f),
            Err(e) => return Err(format!("{endpoint}: {e}")),
        }
    }
}

/// The zxid a sync reached, else what it was answered (a protocol
/// without znodes refuses it).
fn synced_at(resp: Response) -> Result<u64, String> {
    match resp {
        Response::Znode(ZnodeReply::Synced { zxid }) => Ok(zxid),
        Response::Failed(e) => Err(e.to_string()),
        other => Err(format!("{other:?}")),
    }
}

/// Read the cluster at `reach` and cut its state (see the module doc).
pub async fn save(reach: &Reach) -> anyhow::Result<Snapshot> {
    if reach.endpoints.is_empty() {
        bail!("no endpoints given");
    }
    let mut set = tokio::task::JoinSet::new();
    for e in reach.endpoints.clone() {
        let r = reach.clone();
        set.spawn(async move { read_one(&e, &r).await });
    }
    let (mut reads, mut failures) = (Vec::new(), Vec::new());
    while let Some(done) = set.join_next().await {
        match done {
            Ok(Ok(read)) => reads.push(read),
            Ok(Err(e)) => failures.push(e),
            Err(e) => failures.push(e.to_string()),
        }
    }
    let failed = || failures.join("; ");
    reads.sort_by_key(|r| r.node);
    reads.dedup_by_key(|r| r.node);
    let Some(first) = reads.first() else {
        bail!("no replica gave its state: {}", failed());
    };
    let (protocol, members) = (first.protocol.clone(), first.members.clone());
    if let Some(other) = reads
        .iter()
        .find(|r| r.protocol != protocol || r.members != members)
    {
        bail!(
            "the endpoints are not one cluster: replica {} runs {} of {:?}, replica {} runs {} of {:?}",
            first.node,
            protocol,
            members,
            other.node,
            other.protocol,
            other.members
        );
    }
    let (records, entries, zxid, read_from, cut) = if first.export.merge_majority {
        majority_cut(&reads, &protocol, members.len(), &failed())?
    } else {
        let best = committed_cut(&reads)?;
        let cut = format!(
            "state applied at replica {} at zxid {}, read after a sync: every write committed \
             before the save started",
            best.node, best.export.cut
        );
        let e = &best.export;
        (e.records.clone(), e.entries, e.cut, vec![best.node], cut)
    };
    let header = Header {
        protocol,
        options: first.options.iter().cloned().collect(),
        quorumkv_version: env!("CARGO_PKG_VERSION").to_string(),
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        cut,
        zxid,
        read_from,
        members,
        entries,
        records: records.len() as u64,
        checksum: "sha256".into(),
    };
    Ok(Snapshot { header, records })
}

/// What [`save`] puts in a file: records, entries, zxid, the replicas
/// read, and how the state was cut.
type Cut = (Vec<Record>, u64, u64, Vec<NodeId>, String);

/// The registers of a majority of `members` replicas, merged.
fn majority_cut(
    reads: &[Read],
    protocol: &str,
    members: usize,
    failed: &str,
) -> anyhow::Result<Cut> {
    let need = quorumkv_core::quorum::majority(members);
    if reads.len() < need {
        let why = match failed.is_empty() {
            true => String::new(),
            false => format!(" ({failed})"),
        };
        bail!(
            "{} of {members} replicas gave their state; a snapshot of {protocol} merges a \
             majority ({need}): give every replica's endpoint{why}",
            reads.len(),
        );
    }
    let (records, entries) = merge_registers(reads.iter().map(|r| &r.export.records));
    let from: Vec<NodeId> = reads.iter().map(|r| r.node).collect();
    let cut = format!(
        "registers of replicas {from:?} (a majority) merged by highest tag: every write \
         acknowledged before the save started"
    );
    Ok((records, entries, 0, from, cut))
}

/// Of replicas that give their committed state (Zab), the one cut
/// furthest; each must have answered its sync, and its state must be cut
/// at or after the zxid the sync reached.
fn committed_cut(reads: &[Read]) -> anyhow::Result<&Read> {
    let mut best: Option<&Read> = None;
    let mut why = Vec::new();
    for r in reads {
        match &r.synced {
            Ok(z) if r.export.cut >= *z => {}
            Ok(z) => bail!(
                "replica {} gave a state cut at {} before its sync reached {z}",
                r.node,
                r.export.cut
            ),
            Err(e) => {
                why.push(format!("replica {}: {e}", r.node));
                continue;
            }
        }
        if best.is_none_or(|b| r.export.cut > b.export.cut) {
            best = Some(r);
        }
    }
    best.ok_or_else(|| {
        anyhow::anyhow!(
            "no replica answered its sync (no leader?); try again once one leads ({})",
            why.join("; ")
        )
    })
}

/// The registers of several replicas merged: each key at its highest tag.
/// Returns the records (sorted by key) and how many keys hold a value.
fn merge_registers<'a>(stores: impl Iterator<Item = &'a Vec<Record>>) -> (Vec<Record>, u64) {
    let mut merged: HashMap<Bytes, (Tag, Option<Bytes>)> = HashMap::new();
    for rec in stores.flatten() {
        let Record::Register { key, tag, value } = rec else {
            continue;
        };
        let newer = merged.get(key).is_none_or(|(t, _)| tag > t);
        if newer {
            merged.insert(key.clone(), (*tag, value.clone()));
        }
    }
    let mut keys: Vec<_> = merged.into_iter().collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    let live = keys.iter().filter(|(_, (_, v))| v.is_some()).count() as u64;
    let records = (keys.into_iter())
        .map(|(key, (tag, value))| Record::Register { key, tag, value })
        .collect();
    (records, live)
}

impl Snapshot {
    /// The file's bytes (see the module doc).
    pub fn to_bytes(&self) -> anyhow::Result<Vec<u8>> {
        let header = toml::to_string(&self.header)?;
        let body = postcard::to_stdvec(&self.records)?;
        let mut v = Vec::with_capacity(body.len() + header.len() + 64);
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&FORMAT_VERSION.to_be_bytes());
        let hlen = u32::try_from(header.len()).context("header too large")?;
        v.extend_from_slice(&hlen.to_be_bytes());
        v.extend_from_slice(header.as_bytes());
        v.extend_from_slice(&(body.len() as u64).to_be_bytes());
        v.extend_from_slice(&body);
        let sum = Sha256::digest(&v);
        v.extend_from_slice(&sum);
        Ok(v)
    }

    /// Read a file's bytes: magic, version and checksum checked first.
    pub fn from_bytes(b: &[u8]) -> anyhow::Result<Snapshot> {
        let (header, body) = split(b)?;
        let records: Vec<Record> = postcard::from_bytes(body)
            .map_err(|e| anyhow::anyhow!("the records do not decode: {e}"))?;
        if records.len() as u64 != header.records {
            bail!(
                "the header says {} records, the file holds {}",
                header.records,
                records.len()
            );
        }
        Ok(Snapshot { header, records })
    }

    /// Write the file whole or not at all (a temporary file renamed).
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let bytes = self.to_bytes()?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".part");
        let tmp = PathBuf::from(tmp);
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().with_context(|| format!("cannot write {}", path.display()))
    }

    pub fn read(path: &Path) -> anyhow::Result<Snapshot> {
        let b = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        Snapshot::from_bytes(&b)
            .with_context(|| format!("{} is not a usable snapshot", path.display()))
    }
}

/// The header and the records' bytes of a file, once its magic, format
/// version and checksum are right.
fn split(b: &[u8]) -> anyhow::Result<(Header, &[u8])> {
    if b.len() < MAGIC.len() || &b[..MAGIC.len()] != MAGIC {
        bail!("not a quorumkv snapshot (no QKVSNAP magic)");
    }
    let word = |at: usize| -> anyhow::Result<u32> {
        let w = b.get(at..at + 4).context("truncated file")?;
        Ok(u32::from_be_bytes(w.try_into().expect("4 bytes")))
    };
    let version = word(8)?;
    if version != FORMAT_VERSION {
        bail!(
            "snapshot format version {version}; this quorumkv reads version {FORMAT_VERSION} only"
        );
    }
    if b.len() < 16 + 8 + 32 {
        bail!("truncated file ({} bytes)", b.len());
    }
    let (content, sum) = b.split_at(b.len() - 32);
    if Sha256::digest(content).as_slice() != sum {
        bail!("checksum mismatch: the file is damaged or truncated (SHA-256 differs)");
    }
    let hlen = word(12)?;
    if hlen > MAX_HEADER_BYTES {
        bail!("header of {hlen} bytes announced");
    }
    let hend = 16 + hlen as usize;
    let text = content.get(16..hend).context("truncated header")?;
    let text = std::str::from_utf8(text).context("the header is not UTF-8")?;
    let header: Header = toml::from_str(text).context("the header does not parse")?;
    let blen = content.get(hend..hend + 8).context("truncated file")?;
    let blen = u64::from_be_bytes(blen.try_into().expect("8 bytes"));
    let body = &content[hend + 8..];
    if body.len() as u64 != blen {
        bail!(
            "the records take {} bytes, the header says {blen}",
            body.len()
        );
    }
    Ok((header, body))
}

/// Where replica `id`'s data goes under `root` (the layout of a cluster
/// file's `data_dir` and `quorumkv cluster --data-dir`).
pub fn replica_dir(root: &Path, id: NodeId) -> PathBuf {
    root.join(format!("replica-{id}"))
}

/// Seed the data directory of each of `replicas` under `root` with the
/// snapshot's records. Every directory must be absent or empty; none is
/// written unless all are.
pub fn restore(
    snap: &Snapshot,
    root: &Path,
    replicas: &[NodeId],
    engine: StorageEngine,
) -> anyhow::Result<Vec<PathBuf>> {
    if replicas.is_empty() {
        bail!("no replicas to restore");
    }
    let dirs: Vec<PathBuf> = replicas.iter().map(|&id| replica_dir(root, id)).collect();
    for d in &dirs {
        match std::fs::read_dir(d).map(|mut entries| entries.next().is_none()) {
            Ok(false) => bail!(
                "data directory {} is not empty: restore only seeds new replicas (move it away first)",
                d.display()
            ),
            Ok(true) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", d.display())),
        }
    }
    for d in &dirs {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
        crate::storage::seed(engine, d, &snap.records)
            .with_context(|| format!("cannot write the data in {}", d.display()))?;
    }
    Ok(dirs)
}

/// `quorumkv snapshot status`: the header, one `field: value` a line.
pub fn describe(h: &Header, file_bytes: u64) -> String {
    let opts: Vec<String> = h.options.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let list = |v: &[NodeId]| {
        v.iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "format: {FORMAT_VERSION}\nprotocol: {}\noptions: {}\nquorumkv: {}\ncreated_unix: {}\n\
         cut: {}\nzxid: {}\nread_from: {}\nmembers: {}\nentries: {}\nrecords: {}\n\
         checksum: {} (ok)\nbytes: {file_bytes}\n",
        h.protocol,
        opts.join(" "),
        h.quorumkv_version,
        h.created_unix,
        h.cut,
        h.zxid,
        list(&h.read_from),
        list(&h.members),
        h.entries,
        h.records,
        h.checksum,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(k: &str, ts: u64, v: Option<&str>) -> Record {
        Record::Register {
            key: Bytes::copy_from_slice(k.as_bytes()),
            tag: Tag { ts, writer: 1 },
            value: v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
        }
    }

    fn snap() -> Snapshot {
        let records = vec![reg("a", 1, Some("x")), reg("b", 2, None)];
        Snapshot {
            header: Header {
                protocol: "abd".into(),
                options: BTreeMap::from([("n".to_string(), "3".to_string())]),
                quorumkv_version: "0.1.0".into(),
                created_unix: 1,
                cut: "test".into(),
                zxid: 0,
                read_from: vec![1, 2],
                members: vec![1, 2, 3],
                entries: 1,
                records: 2,
                checksum: "sha256".into(),
            },
            records,
        }
    }

    #[test]
    fn a_file_round_trips_and_any_flipped_byte_is_refused() {
        let s = snap();
        let b = s.to_bytes().unwrap();
        assert_eq!(Snapshot::from_bytes(&b).unwrap(), s);
        for i in [9, 20, b.len() / 2, b.len() - 40, b.len() - 1] {
            let mut bad = b.clone();
            bad[i] ^= 0x20;
            let err = format!("{:#}", Snapshot::from_bytes(&bad).unwrap_err());
            assert!(
                err.contains("checksum mismatch") || err.contains("format version"),
                "byte {i}: {err}"
            );
        }
        let err = Snapshot::from_bytes(&b[..b.len() - 1])
            .unwrap_err()
            .to_string();
        assert!(err.contains("checksum mismatch"), "{err}");
    }

    #[test]
    fn another_format_version_is_refused_by_name() {
        let mut b = snap().to_bytes().unwrap();
        b[8..12].copy_from_slice(&2u32.to_be_bytes());
        let err = Snapshot::from_bytes(&b).unwrap_err().to_string();
        assert!(err.contains("format version 2"), "{err}");
        let err = Snapshot::from_bytes(b"hello world")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a quorumkv snapshot"), "{err}");
    }

    #[test]
    fn the_merge_keeps_each_keys_highest_tag_and_invents_nothing() {
        let r1 = vec![reg("a", 2, Some("new")), reg("b", 1, Some("b1"))];
        let r2 = vec![reg("a", 1, Some("old")), reg("c", 3, None)];
        let (merged, live) = merge_registers([r1, r2].iter());
        assert_eq!(
            merged,
            vec![
                reg("a", 2, Some("new")),
                reg("b", 1, Some("b1")),
                reg("c", 3, None)
            ]
        );
        assert_eq!(live, 2);
    }

    #[test]
    fn restore_refuses_a_non_empty_directory_and_writes_none() {
        let root = std::env::temp_dir().join(format!("qkv-snap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(replica_dir(&root, 2)).unwrap();
        std::fs::write(replica_dir(&root, 2).join("x"), "x").unwrap();
        let err = (restore(&snap(), &root, &[1, 2], StorageEngine::default()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not empty"), "{err}");
        assert!(!replica_dir(&root, 1).exists());
        std::fs::remove_dir_all(replica_dir(&root, 2)).unwrap();
        for engine in [StorageEngine::Log, StorageEngine::Fjall] {
            let _ = std::fs::remove_dir_all(&root);
            restore(&snap(), &root, &[1, 2], engine).unwrap();
            let back = crate::storage::read_back(engine, &replica_dir(&root, 1)).unwrap();
            assert_eq!(back, snap().records, "{engine}");
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
}
