//! A full disk under the real engine: persisting stalls (the watermark
//! stops, the stall is reported), then resumes by itself once space
//! returns, with nothing lost. Needs a small tmpfs (root); skipped, saying
//! so, where `mount` is not allowed.

use bytes::Bytes;
use quorumkv_core::protocol::Record;
use quorumkv_core::Tag;
use quorumkv_node::storage::fjall_engine::FjallEngine;
use quorumkv_node::storage::log_engine::LogEngine;
use quorumkv_node::storage::pipeline::{Engine, Pipeline};
use quorumkv_node::storage::{Durability, Storage};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A 4 MiB tmpfs, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount() -> Option<Tmpfs> {
        let dir = std::env::temp_dir().join(format!("qkv-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::fs::remove_dir(&dir);
            eprintln!("SKIPPED: cannot mount a tmpfs here (not root?)");
            return None;
        }
        Some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn rec(i: u64) -> Record {
    Record::Register {
        key: Bytes::from(format!("key{i}")),
        tag: Tag { ts: i, writer: 1 },
        // Incompressible enough that the journal really grows.
        value: Some(Bytes::from(
            (0..32 * 1024)
                .map(|j| (i as u8).wrapping_mul(31) ^ (j as u8).wrapping_mul(17))
                .collect::<Vec<u8>>(),
        )),
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn fill(path: &Path, bytes: usize) {
    std::fs::write(path, vec![0u8; bytes]).unwrap();
}

#[test]
fn a_full_disk_stalls_persisting_until_space_returns() {
    let Some(fs) = Tmpfs::mount() else { return };
    stalls_until_space_returns(&fs, &fs.0.join("db"), |d| FjallEngine::open(d).unwrap());
    // The log engine, with segments small enough for the tmpfs (beside
    // 3.2 MB of records when it is opened again).
    let small = |d: &Path| LogEngine::open_with(d, 64 * 1024, 64 << 20).unwrap();
    stalls_until_space_returns(&fs, &fs.0.join("log"), small);
}

fn stalls_until_space_returns<E: Engine>(fs: &Tmpfs, dir: &Path, open: impl Fn(&Path) -> E) {
    let ballast = fs.0.join("ballast");
    fill(&ballast, 2 * 1024 * 1024);
    let mut p = Pipeline::start(open(dir), Durability::Fsync, None).unwrap();
    // About 2 MiB are left: 100 records of 32 KiB cannot all fit.
    let n = 100;
    for i in 1..=n {
        p.append(rec(i));
    }
    wait_until("the stall", || !p.report().stalled.is_empty());
    let stalled = p.report();
    assert!(p.durable() < n, "everything fit: the test proves nothing");
    assert!(stalled.pending > 0 && stalled.errors > 0, "{stalled:?}");
    std::fs::remove_file(&ballast).unwrap();
    wait_until("the resume", || p.durable() == n);
    assert_eq!(p.report().stalled, "");
    drop(p);
    let mut back = open(dir).load().unwrap();
    back.sort_by_key(|r| match r {
        Record::Register { tag, .. } => tag.ts,
        _ => 0,
    });
    assert_eq!(back.len() as u64, n);
    assert_eq!(back[n as usize - 1], rec(n));
    std::fs::remove_dir_all(dir).unwrap();
}
