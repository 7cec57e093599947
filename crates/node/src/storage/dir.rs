//! The safety of a data directory: a `LOCK` file (an advisory `flock`,
//! holding the owner's pid) so that two servers never share it, and an
//! `IDENTITY` file naming the cluster, replica and protocol it belongs to,
//! so that a server started on another replica's data refuses to run.

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

/// `IDENTITY` as stored: the identity and how often the directory was opened.
#[derive(Serialize, Deserialize)]
struct IdentityFile {
    cluster_id: String,
    replica: NodeId,
    protocol: String,
    boots: u64,
}

/// Held while a server uses the directory; dropping it unlocks.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    /// How many times the directory has been opened, this time included.
    pub boots: u64,
}

/// Create `dir` if needed, lock it, and check (or, the first time, write)
/// its identity.
pub fn prepare(dir: &Path, identity: &Identity) -> anyhow::Result<DirLock> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    let file = lock(dir)?;
    let path = dir.join("IDENTITY");
    let boots = match std::fs::read_to_string(&path) {
        Ok(text) => {
            let stored: IdentityFile =
                toml::from_str(&text).with_context(|| format!("{} is damaged", path.display()))?;
            let stored_id = Identity {
                cluster_id: stored.cluster_id,
                replica: stored.replica,
                protocol: stored.protocol,
            };
            check(dir, &stored_id, identity)?;
            stored.boots + 1
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 1,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let text = toml::to_string(&IdentityFile {
        cluster_id: identity.cluster_id.clone(),
        replica: identity.replica,
        protocol: identity.protocol.clone(),
        boots,
    })?;
    write_synced(dir, "IDENTITY", text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(DirLock { _file: file, boots })
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
        let first = prepare(&d, &ident(1)).unwrap();
        assert_eq!(first.boots, 1);
        let err = prepare(&d, &ident(1)).unwrap_err().to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        assert_eq!(prepare(&d, &ident(1)).unwrap().boots, 2);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn another_replicas_or_clusters_directory_is_refused() {
        let d = tempdir("ident");
        drop(prepare(&d, &ident(1)).unwrap());
        let err = prepare(&d, &ident(2)).unwrap_err().to_string();
        assert!(err.contains("belongs to replica 1, not 2"), "{err}");
        let mut other = ident(1);
        other.cluster_id = "c2".into();
        assert!(prepare(&d, &other).is_err());
        other = ident(1);
        other.protocol = "zab".into();
        let err = prepare(&d, &other).unwrap_err().to_string();
        assert!(err.contains("holds abd data"), "{err}");
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
}
