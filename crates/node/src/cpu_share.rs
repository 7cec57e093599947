//! Holding each replica of a local cluster to a fixed share of one core, so
//! that a cluster of 8 fits a 2-core machine and the replicas, not the
//! machine, are the bottleneck (seed 004 §5 measures one machine per server).
//!
//! Linux cgroup v1 CPU bandwidth control: each replica gets its own group
//! `<our cpu cgroup>/quorumkv-<pid>-<n>/replica-<id>` with
//! `cpu.cfs_quota_us = share × cpu.cfs_period_us`, i.e. it runs at most
//! `share` of one core per period (10 ms when the share allows, see
//! [`bandwidth`]), however many threads it has. The
//! cluster's group has a large weight ([`CLUSTER_WEIGHT`]) so that
//! neighbours cannot push a replica below its quota. Groups are removed when the [`CpuShares`] is dropped (the replicas are moved
//! back to our own group first: a group with members cannot be removed),
//! and groups left behind by a bench that was killed are removed the next
//! time one is created.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use quorumkv_core::NodeId;

/// Where cgroup v1 mounts the cpu controller.
pub const CGROUP_V1_CPU: &str = "/sys/fs/cgroup/cpu";

/// Bounds of the scheduler period. A replica that used up its quota waits
/// for the next period (up to `period × (1 - share)`: 90 ms at 0.1 core and
/// the kernel's default 100 ms), which shows as tail latency; so the period
/// is the shortest in these bounds that leaves a quota of at least 1 ms.
const MIN_PERIOD_US: u64 = 10_000;
const MAX_PERIOD_US: u64 = 100_000;

/// The kernel refuses quotas below 1 ms.
const MIN_QUOTA_US: u64 = 1_000;

/// `cpu.shares` of a cluster's group: the weight of 32 ordinary busy
/// processes (1024 each). A quota is a ceiling, not a guarantee: on a
/// machine that others load, a group of default weight would get less
/// than its quota. The quotas still bound what the cluster takes.
pub const CLUSTER_WEIGHT: u64 = 32 * 1024;

/// Prefix of the groups we create, so stale ones can be found.
const GROUP_PREFIX: &str = "quorumkv-";

#[derive(Debug, thiserror::Error)]
pub enum CpuShareError {
    #[error("a CPU share must be a fraction of one core in (0, 64], not {0}")]
    BadShare(f64),
    #[error(
        "a share of {share} core leaves a quota of {quota_us} µs per {period_us} µs period, \
         below the kernel's 1 ms minimum"
    )]
    TooSmall {
        share: f64,
        quota_us: u64,
        period_us: u64,
    },
    #[error(
        "cannot hold replicas to a CPU share: no cgroup v1 cpu controller at {0} \
         (cpu.cfs_quota_us missing; cgroup v2 is not supported)"
    )]
    NoController(PathBuf),
    #[error(
        "cannot hold replicas to a CPU share: {path} is not writable ({source}); \
         creating cgroups needs root (or a delegated cpu cgroup)"
    )]
    NotWritable { path: PathBuf, source: io::Error },
    #[error("cannot put replica {id} (pid {pid}) into {path}: {source}")]
    Attach {
        id: NodeId,
        pid: u32,
        path: PathBuf,
        source: io::Error,
    },
}

/// `(period, quota)` in µs that give `share` of one core: the shortest
/// period within 10-100 ms whose quota is at least 1 ms.
pub fn bandwidth(share: f64) -> Result<(u64, u64), CpuShareError> {
    if !(share.is_finite() && share > 0.0) {
        return Err(CpuShareError::BadShare(share));
    }
    let period = ((MIN_QUOTA_US as f64 / share).ceil() as u64).clamp(MIN_PERIOD_US, MAX_PERIOD_US);
    Ok((period, quota_us(share, period)?))
}

/// The quota (µs per `period_us`) that gives `share` of one core.
pub fn quota_us(share: f64, period_us: u64) -> Result<u64, CpuShareError> {
    if !(share.is_finite() && share > 0.0 && share <= 64.0) {
        return Err(CpuShareError::BadShare(share));
    }
    let quota = (share * period_us as f64).round() as u64;
    if quota < MIN_QUOTA_US {
        return Err(CpuShareError::TooSmall {
            share,
            quota_us: quota,
            period_us,
        });
    }
    Ok(quota)
}

/// Our own group in the cpu hierarchy, from `/proc/self/cgroup` text:
/// the path of the line whose controllers include `cpu` (v1 lines look
/// like `4:cpu,cpuacct:/user.slice`). `/` when none names it.
pub fn own_cpu_group(proc_self_cgroup: &str) -> String {
    for line in proc_self_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if ctrls.split(',').any(|c| c == "cpu") {
            return path.to_string();
        }
    }
    "/".to_string()
}

/// `mount` joined with a cgroup path (`/a/b` → `mount/a/b`).
fn under(mount: &Path, group: &str) -> PathBuf {
    let rel = group.trim_start_matches('/');
    if rel.is_empty() {
        mount.to_path_buf()
    } else {
        mount.join(rel)
    }
}

/// The pid of the bench that made a group named `quorumkv-<pid>-<n>`.
pub fn group_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(GROUP_PREFIX)?;
    let (pid, n) = rest.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// One cluster's groups: a parent group and one child group per replica.
#[derive(Debug)]
pub struct CpuShares {
    /// Our own group, where replicas go back before their groups are removed.
    home: PathBuf,
    /// The cluster's group (parent of the replicas' groups).
    dir: PathBuf,
    share: f64,
    period_us: u64,
    quota_us: u64,
}

impl CpuShares {
    /// Groups under the cpu controller mounted at `mount` (usually
    /// [`CGROUP_V1_CPU`]) holding each replica to `share` of one core.
    /// Fails with a clear message when the hierarchy is missing or not
    /// writable.
    pub fn create(mount: &Path, share: f64) -> Result<CpuShares, CpuShareError> {
        let (period_us, quota_us) = bandwidth(share)?;
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let home = under(mount, &own_cpu_group(&own));
        if !home.join("cpu.cfs_quota_us").exists() {
            return Err(CpuShareError::NoController(home));
        }
        remove_stale(&home);
        let unique = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let dir = home.join(format!("{GROUP_PREFIX}{}-{unique}", std::process::id()));
        let not_writable =
            |path: PathBuf| move |source| CpuShareError::NotWritable { path, source };
        std::fs::create_dir(&dir).map_err(not_writable(dir.clone()))?;
        let shares = CpuShares {
            home,
            dir,
            share,
            period_us,
            quota_us,
        };
        let weight = shares.dir.join("cpu.shares");
        std::fs::write(&weight, CLUSTER_WEIGHT.to_string()).map_err(not_writable(weight))?;
        Ok(shares)
    }

    /// The fraction of one core each replica gets.
    pub fn share(&self) -> f64 {
        self.share
    }

    /// The group of replica `id`.
    pub fn group(&self, id: NodeId) -> PathBuf {
        self.dir.join(format!("replica-{id}"))
    }

    /// Moves process `pid` (all its threads) into replica `id`'s group,
    /// creating the group with its quota on first use (a restarted
    /// replica reuses it).
    pub fn attach(&self, id: NodeId, pid: u32) -> Result<(), CpuShareError> {
        let group = self.group(id);
        let fail = |path: PathBuf| {
            move |source| CpuShareError::Attach {
                id,
                pid,
                path,
                source,
            }
        };
        if !group.exists() {
            std::fs::create_dir(&group).map_err(fail(group.clone()))?;
        }
        // Period first: a quota is checked against the period in place.
        let writes = [
            ("cpu.cfs_period_us", self.period_us.to_string()),
            ("cpu.cfs_quota_us", self.quota_us.to_string()),
            ("cgroup.procs", pid.to_string()),
        ];
        for (file, value) in writes {
            let path = group.join(file);
            std::fs::write(&path, value).map_err(fail(path))?;
        }
        Ok(())
    }
}

impl Drop for CpuShares {
    fn drop(&mut self) {
        remove_group(&self.dir, &self.home);
    }
}

/// Removes `dir` and its replica groups, moving any process still in them
/// to `home`. A process being killed may linger for a moment: retried for
/// up to a second.
fn remove_group(dir: &Path, home: &Path) {
    let subs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    for g in subs.iter().map(PathBuf::as_path).chain([dir]) {
        for _ in 0..100 {
            evacuate(g, home);
            if std::fs::remove_dir(g).is_ok() || !g.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Moves every process of group `g` to `home` (errors ignored: a process
/// may exit meanwhile).
fn evacuate(g: &Path, home: &Path) {
    let procs = std::fs::read_to_string(g.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.split_whitespace() {
        let _ = std::fs::write(home.join("cgroup.procs"), pid);
    }
}

/// Removes groups of benches that no longer run (killed before cleanup).
fn remove_stale(home: &Path) {
    let Ok(rd) = std::fs::read_dir(home) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(group_owner) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            remove_group(&e.path(), home);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_is_the_share_of_the_period() {
        assert_eq!(quota_us(0.2, 100_000).unwrap(), 20_000);
        assert_eq!(quota_us(1.0, 100_000).unwrap(), 100_000);
        assert_eq!(quota_us(1.5, 100_000).unwrap(), 150_000);
        assert_eq!(quota_us(0.125, 100_000).unwrap(), 12_500);
    }

    #[test]
    fn the_period_is_the_shortest_that_leaves_a_1_ms_quota() {
        assert_eq!(bandwidth(0.1).unwrap(), (10_000, 1_000));
        assert_eq!(bandwidth(0.25).unwrap(), (10_000, 2_500));
        assert_eq!(bandwidth(2.0).unwrap(), (10_000, 20_000));
        assert_eq!(bandwidth(0.05).unwrap(), (20_000, 1_000));
        assert_eq!(bandwidth(0.03).unwrap(), (33_334, 1_000));
        assert_eq!(bandwidth(0.01).unwrap(), (100_000, 1_000));
        assert!(matches!(
            bandwidth(0.005),
            Err(CpuShareError::TooSmall { quota_us: 500, .. })
        ));
        assert!(matches!(bandwidth(0.0), Err(CpuShareError::BadShare(_))));
    }

    #[test]
    fn shares_out_of_range_are_refused() {
        for bad in [0.0, -0.5, f64::NAN, f64::INFINITY, 65.0] {
            assert!(
                matches!(quota_us(bad, 100_000), Err(CpuShareError::BadShare(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            quota_us(0.005, 100_000),
            Err(CpuShareError::TooSmall { quota_us: 500, .. })
        ));
    }

    #[test]
    fn own_group_is_the_cpu_line() {
        let text = "12:pids:/x\n4:cpu,cpuacct:/user.slice/a\n3:cpuset:/\n0::/v2\n";
        assert_eq!(own_cpu_group(text), "/user.slice/a");
        assert_eq!(own_cpu_group("2:cpuacct:/a\n1:cpu:/\n"), "/");
        // cpuacct alone or cpuset is not cpu; v2 only: the root.
        assert_eq!(own_cpu_group("2:cpuacct:/a\n3:cpuset:/b\n0::/c\n"), "/");
    }

    #[test]
    fn groups_nest_under_the_mount() {
        let m = Path::new("/sys/fs/cgroup/cpu");
        assert_eq!(under(m, "/"), m);
        assert_eq!(under(m, "/a/b"), m.join("a").join("b"));
    }

    #[test]
    fn stale_groups_are_recognised_by_name() {
        assert_eq!(group_owner("quorumkv-123-456789"), Some(123));
        assert_eq!(group_owner("quorumkv-123"), None);
        assert_eq!(group_owner("quorumkv-x-1"), None);
        assert_eq!(group_owner("docker"), None);
        assert_eq!(group_owner("quorumkv-1-2x"), None);
    }

    #[test]
    fn a_mount_without_the_controller_is_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("qkv-cpu-share-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = CpuShares::create(&dir, 0.2).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(e, CpuShareError::NoController(_)), "{e}");
        assert!(e.to_string().contains("cgroup v1 cpu controller"), "{e}");
    }

    /// On a machine where cgroups are writable (root, cgroup v1): a real
    /// group gets the quota and the process, and is gone after drop.
    /// Elsewhere there is nothing to test; it says so and returns.
    #[test]
    fn real_groups_hold_a_process_and_are_removed() {
        let shares = match CpuShares::create(Path::new(CGROUP_V1_CPU), 0.25) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        shares.attach(3, child.id()).unwrap();
        let g = shares.group(3);
        let quota = std::fs::read_to_string(g.join("cpu.cfs_quota_us")).unwrap();
        let period = std::fs::read_to_string(g.join("cpu.cfs_period_us")).unwrap();
        let procs = std::fs::read_to_string(g.join("cgroup.procs")).unwrap();
        let dir = shares.dir.clone();
        let weight = std::fs::read_to_string(dir.join("cpu.shares")).unwrap();
        // Removed with the process still in it (moved back home first).
        drop(shares);
        let gone = !dir.exists();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!((period.trim(), quota.trim()), ("10000", "2500"));
        assert_eq!(weight.trim(), CLUSTER_WEIGHT.to_string());
        assert_eq!(procs.trim(), child.id().to_string());
        assert!(gone, "{} left behind", dir.display());
    }
}
