//! The safety of a data directory: a `LOCK` file (an advisory `flock`,
//! holding the owner's pid) so that two servers never share it, and an
//! `IDENTITY` file naming the cluster, replica and protocol it belongs to,
//! so that a server started on another replica's data refuses to run. The
//! `IDENTITY` file also records the storage format the directory was
//! written in (`format`, and the release that wrote it, `written_by`): a
//! build refuses a directory of a format it does not read, before touching it.
//! It names the storage engine (`engine`): a directory written by one
//! engine is refused by a server running the other.

use super::StorageEngine;
use crate::version::{OLDEST_STORAGE_FORMAT, RELEASE, STORAGE_FORMAT};
use anyhow::{bail, Context};
use quorumkv_core::NodeId;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;

/// Whose data a directory holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub cluster_id: String,
    pub replica: NodeId,
    pub protocol: String,
}

/// `IDENTITY` as stored: the identity, how often the directory was
/// opened, and the storage format (absent: written before the format was
/// recorded, which is format 1).
#[derive(Serialize, Deserialize)]
struct IdentityFile {
    cluster_id: String,
    replica: NodeId,
    protocol: String,
    boots: u64,
    #[serde(default)]
    format: Option<u32>,
    #[serde(default)]
    written_by: Option<String>,
    /// Absent: written before engines were recorded (found from the files).
    #[serde(default)]
    engine: Option<StorageEngine>,
}

/// The storage format a directory of `engine` is in: 1 is fjall's (the
/// only engine before 2), 2 adds the log engine (a release that reads only
/// format 1 refuses it instead of starting an empty fjall beside it).
pub fn format_of(engine: StorageEngine) -> u32 {
    match engine {
        StorageEngine::Fjall => 1,
        StorageEngine::Log => 2,
    }
}

/// The part of `IDENTITY` read first, whatever else a newer format keeps there.
#[derive(Deserialize)]
struct FormatMarker {
    #[serde(default)]
    format: Option<u32>,
    #[serde(default)]
    written_by: Option<String>,
}

/// Held while a server uses the directory; dropping it unlocks.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    /// How many times the directory has been opened, this time included.
    pub boots: u64,
}

/// Create `dir` if needed, lock it, and check (or, the first time, write)
/// its identity and engine.
pub fn prepare(dir: &Path, identity: &Identity, engine: StorageEngine) -> anyhow::Result<DirLock> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    let file = lock(dir)?;
    let path = dir.join("IDENTITY");
    let boots = match std::fs::read_to_string(&path) {
        Ok(text) => {
            check_format(dir, &text)?;
            let stored: IdentityFile =
                toml::from_str(&text).with_context(|| format!("{} is damaged", path.display()))?;
            let stored_id = Identity {
                cluster_id: stored.cluster_id,
                replica: stored.replica,
                protocol: stored.protocol,
            };
            check(dir, &stored_id, identity)?;
            check_engine(dir, stored.engine, engine)?;
            stored.boots + 1
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            check_engine(dir, None, engine)?;
            1
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let text = toml::to_string(&IdentityFile {
        cluster_id: identity.cluster_id.clone(),
        replica: identity.replica,
        protocol: identity.protocol.clone(),
        boots,
        format: Some(format_of(engine)),
        written_by: Some(RELEASE.to_string()),
        engine: Some(engine),
    })?;
    write_synced(dir, "IDENTITY", text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(DirLock { _file: file, boots })
}

/// Refuse a directory whose storage format this build does not read,
/// naming the format, the release that wrote it, and what to do.
fn check_format(dir: &Path, identity_text: &str) -> anyhow::Result<()> {
    let d = dir.display();
    let marker: FormatMarker = toml::from_str(identity_text)
        .with_context(|| format!("{d}/IDENTITY is damaged (no readable format marker)"))?;
    let format = marker.format.unwrap_or(1);
    let by = marker.written_by.map_or_else(
        || "a release before format markers".to_string(),
        |r| format!("quorumkv {r}"),
    );
    if format > STORAGE_FORMAT {
        bail!(
            "data directory {d} is in storage format {format} (written by {by}); this build \
             (quorumkv {RELEASE}) reads formats {OLDEST_STORAGE_FORMAT} to {STORAGE_FORMAT}: run a \
             release that reads format {format}, or start this replica on an empty --data-dir \
             and let it recover from its peers"
        );
    }
    if format < OLDEST_STORAGE_FORMAT {
        bail!(
            "data directory {d} is in storage format {format} (written by {by}), older than \
             this build (quorumkv {RELEASE}) reads ({OLDEST_STORAGE_FORMAT} to {STORAGE_FORMAT}): \
             open it once with a release that reads both, or start on an empty --data-dir"
        );
    }
    Ok(())
}

/// The engine data directory `dir` already holds: the one its `IDENTITY`
/// names or, when it names none, the one whose files are there; `None` for
/// a new directory. A server not told which engine to run follows it, so a
/// directory written before the default changed opens as it was.
pub fn engine_in(dir: &Path) -> Option<StorageEngine> {
    let stored = std::fs::read_to_string(dir.join("IDENTITY")).ok();
    let stored = stored.and_then(|t| toml::from_str::<EngineMarker>(&t).ok());
    stored.and_then(|m| m.engine).or_else(|| {
        [StorageEngine::Log, StorageEngine::Fjall]
            .into_iter()
            .find(|e| dir.join(e.subdir()).exists())
    })
}

/// The engine line of `IDENTITY`, read alone.
#[derive(Deserialize)]
struct EngineMarker {
    #[serde(default)]
    engine: Option<StorageEngine>,
}

/// Refuse a directory written by another engine than `ours`: the one
/// `IDENTITY` names or, when it names none, the one whose files are there.
fn check_engine(
    dir: &Path,
    stored: Option<StorageEngine>,
    ours: StorageEngine,
) -> anyhow::Result<()> {
    let found = [StorageEngine::Log, StorageEngine::Fjall]
        .into_iter()
        .find(|e| dir.join(e.subdir()).exists());
    let Some(theirs) = stored.or(found).filter(|&e| e != ours) else {
        return Ok(());
    };
    bail!(
        "data directory {} was written by the {theirs} storage engine; this server runs the \
         {ours} engine: start it with --storage-engine {theirs} (or storage_engine = \"{theirs}\" \
         in the cluster file), or start this replica on an empty --data-dir and let it recover \
         from its peers",
        dir.display()
    )
}

fn check(dir: &Path, stored: &Identity, ours: &Identity) -> anyhow::Result<()> {
    let d = dir.display();
    if stored.cluster_id != ours.cluster_id {
        bail!(
            "data directory {d} belongs to cluster '{}', not '{}'; give this replica its own --data-dir",
            stored.cluster_id,
            ours.cluster_id
        );
    }
    if stored.replica != ours.replica {
        bail!(
            "data directory {d} belongs to replica {}, not {}; give each replica its own --data-dir",
            stored.replica,
            ours.replica
        );
    }
    if stored.protocol != ours.protocol {
        bail!(
            "data directory {d} holds {} data; this cluster runs {}",
            stored.protocol,
            ours.protocol
        );
    }
    Ok(())
}

fn lock(dir: &Path) -> anyhow::Result<File> {
    let path = dir.join("LOCK");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    if file.try_lock().is_err() {
        let mut owner = String::new();
        let _ = file.read_to_string(&mut owner);
        let owner = owner.trim();
        let who = if owner.is_empty() {
            "another process".to_string()
        } else {
            format!("another quorumkv server (pid {owner})")
        };
        bail!("data directory {} is in use by {who}", dir.display());
    }
    file.set_len(0)?;
    write!(file, "{}", std::process::id())?;
    Ok(file)
}

/// Write `name` in `dir` whole or not at all (a temporary file renamed),
/// synced with its directory entry.
fn write_synced(dir: &Path, name: &str, data: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

/// A cluster id for a cluster file without `cluster_id`: a hash of its
/// replicas' ids and addresses (the same file gives the same id).
pub fn derived_cluster_id(replicas: &[(NodeId, String)]) -> String {
    // FNV-1a: stable across builds and platforms, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut sorted = replicas.to_vec();
    sorted.sort();
    for (id, addr) in sorted {
        for b in format!("{id}={addr};").bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ident(replica: NodeId) -> Identity {
        Identity {
            cluster_id: "c1".into(),
            replica,
            protocol: "abd".into(),
        }
    }

    fn tempdir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("qkv-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_second_server_is_refused_with_the_owners_pid() {
        let d = tempdir("lock");
        let first = prepare(&d, &ident(1), StorageEngine::default()).unwrap();
        assert_eq!(first.boots, 1);
        let err = prepare(&d, &ident(1), StorageEngine::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        assert_eq!(
            prepare(&d, &ident(1), StorageEngine::default())
                .unwrap()
                .boots,
            2
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn another_replicas_or_clusters_directory_is_refused() {
        let d = tempdir("ident");
        drop(prepare(&d, &ident(1), StorageEngine::default()).unwrap());
        let err = prepare(&d, &ident(2), StorageEngine::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("belongs to replica 1, not 2"), "{err}");
        let mut other = ident(1);
        other.cluster_id = "c2".into();
        assert!(prepare(&d, &other, StorageEngine::default()).is_err());
        other = ident(1);
        other.protocol = "zab".into();
        let err = prepare(&d, &other, StorageEngine::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("holds abd data"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Rewrite `IDENTITY`'s format marker: `Some(n)` sets it, `None`
    /// removes it (as a release before markers wrote it).
    fn set_format(d: &Path, format: Option<u32>) {
        let path = d.join("IDENTITY");
        let text = std::fs::read_to_string(&path).unwrap();
        let mut kept: Vec<String> = (text.lines())
            .filter(|l| !l.starts_with("format") && !l.starts_with("written_by"))
            .map(String::from)
            .collect();
        if let Some(n) = format {
            kept.push(format!("format = {n}\nwritten_by = \"9.9.9\""));
        }
        std::fs::write(&path, kept.join("\n")).unwrap();
    }

    #[test]
    fn the_format_is_recorded_and_other_formats_are_refused_untouched() {
        let d = tempdir("format");
        drop(prepare(&d, &ident(1), StorageEngine::default()).unwrap());
        let text = std::fs::read_to_string(d.join("IDENTITY")).unwrap();
        assert!(
            text.contains(&format!("format = {STORAGE_FORMAT}")),
            "{text}"
        );
        assert!(
            text.contains(&format!("written_by = \"{RELEASE}\"")),
            "{text}"
        );
        // Written by a newer release: refused, and the marker left as it was.
        set_format(&d, Some(STORAGE_FORMAT + 1));
        let err = prepare(&d, &ident(1), StorageEngine::default())
            .unwrap_err()
            .to_string();
        let want = format!(
            "storage format {} (written by quorumkv 9.9.9)",
            STORAGE_FORMAT + 1
        );
        assert!(
            err.contains(&want) && err.contains("run a release that reads"),
            "{err}"
        );
        let text = std::fs::read_to_string(d.join("IDENTITY")).unwrap();
        assert!(
            text.contains(&format!("format = {}", STORAGE_FORMAT + 1)),
            "{text}"
        );
        // Older than this build reads.
        set_format(&d, Some(OLDEST_STORAGE_FORMAT - 1));
        let err = prepare(&d, &ident(1), StorageEngine::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("older than this build"), "{err}");
        // No marker (a release before markers): format 1, read and marked.
        set_format(&d, None);
        let lock = prepare(&d, &ident(1), StorageEngine::default()).unwrap();
        assert_eq!(lock.boots, 2);
        let text = std::fs::read_to_string(d.join("IDENTITY")).unwrap();
        assert!(
            text.contains(&format!("format = {STORAGE_FORMAT}")),
            "{text}"
        );
        drop(lock);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_directory_of_the_other_engine_is_refused_naming_both() {
        let d = tempdir("engine");
        drop(prepare(&d, &ident(1), StorageEngine::Fjall).unwrap());
        let path = d.join("IDENTITY");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("engine = \"fjall\"") && text.contains("format = 1"),
            "{text}"
        );
        let want = "written by the fjall storage engine; this server runs the log engine";
        let err = prepare(&d, &ident(1), StorageEngine::Log)
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{err}");
        // Written before engines were recorded: found from its files.
        let unmarked: String = (text.lines())
            .filter(|l| !l.starts_with("engine"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&path, &unmarked).unwrap();
        std::fs::create_dir(d.join("db")).unwrap();
        let err = prepare(&d, &ident(1), StorageEngine::Log)
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{err}");
        let lock = prepare(&d, &ident(1), StorageEngine::Fjall).unwrap();
        drop(lock);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("engine = \"fjall\""), "{text}");
        // The log engine's directory, the other way round.
        std::fs::remove_dir_all(&d).unwrap();
        drop(prepare(&d, &ident(1), StorageEngine::Log).unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("format = 2"), "{text}");
        let err = prepare(&d, &ident(1), StorageEngine::Fjall)
            .unwrap_err()
            .to_string();
        assert!(err.contains("written by the log storage engine"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn derived_ids_depend_on_the_members_only() {
        let a = derived_cluster_id(&[(1, "a:1".into()), (2, "a:2".into())]);
        let b = derived_cluster_id(&[(2, "a:2".into()), (1, "a:1".into())]);
        let c = derived_cluster_id(&[(1, "a:1".into()), (2, "a:3".into())]);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn an_unasked_engine_follows_what_the_directory_holds() {
        let d = tempdir("engine-in");
        assert_eq!(engine_in(&d), None, "a new directory holds none");
        drop(prepare(&d, &ident(1), StorageEngine::Fjall).unwrap());
        assert_eq!(engine_in(&d), Some(StorageEngine::Fjall));
        std::fs::remove_file(d.join("IDENTITY")).unwrap();
        std::fs::create_dir_all(d.join(StorageEngine::Fjall.subdir())).unwrap();
        assert_eq!(
            engine_in(&d),
            Some(StorageEngine::Fjall),
            "found from its files"
        );
    }
}
