//! What a target promises about an acknowledged write, and how often it
//! syncs to get there. The bench reads each replica's counters before and
//! after a point: syncs per second against records per second shows group
//! commit at work (many writes per fsync).

use quorumkv_core::protocol::registry::{Over, PointRatio};
use quorumkv_node::tls::ClientTls;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// Counters summed over every replica / member.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SyncCounters {
    /// fsyncs (or flushes, in `buffered`).
    pub syncs: u64,
    /// Records made durable; `None` where the target does not count them.
    pub records: Option<u64>,
    /// Microseconds spent syncing (quorumkv: writing and syncing each
    /// batch); `None` where the target does not say.
    pub sync_us: Option<u64>,
    /// quorumkv only: each replica's protocol counters, for the protocol's
    /// per-point ratios ([`point_ratios`]).
    pub replicas: Vec<Vec<(String, u64)>>,
}

impl SyncCounters {
    /// What happened between `self` and a later reading, per second.
    pub fn rates_since(&self, before: &SyncCounters, secs: f64) -> (f64, Option<f64>) {
        let per_s = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs.max(1e-9);
        (
            per_s(self.syncs, before.syncs),
            self.records.zip(before.records).map(|(a, b)| per_s(a, b)),
        )
    }

    /// The mean time of one sync between `before` and `self`, in µs; `None`
    /// when nothing synced or the target does not time its syncs.
    pub fn mean_sync_us_since(&self, before: &SyncCounters) -> Option<f64> {
        let syncs = self.syncs.checked_sub(before.syncs).filter(|&n| n > 0)?;
        let us = self.sync_us?.checked_sub(before.sync_us?)?;
        Some(us as f64 / syncs as f64)
    }
}

/// The protocol's per-point ratios (`ProtocolDef::POINT_RATIOS`) between
/// two readings of the same replicas: `(label, value)`, a ratio left out
/// when its denominator did not grow.
pub fn point_ratios(
    ratios: &[PointRatio],
    before: &SyncCounters,
    after: &SyncCounters,
) -> Vec<(String, f64)> {
    if before.replicas.len() != after.replicas.len() {
        return Vec::new();
    }
    let get = |r: &[(String, u64)], name: &str| (r.iter().find(|c| c.0 == name)).map_or(0, |c| c.1);
    // Each replica's growth of counter `name` over the point.
    let delta = |name: &str| -> Vec<u64> {
        (before.replicas.iter().zip(&after.replicas))
            .map(|(b, a)| get(a, name).saturating_sub(get(b, name)))
            .collect()
    };
    let mut out = Vec::new();
    for r in ratios {
        let den = delta(r.den.0);
        let Some(busiest) = (0..den.len()).max_by_key(|&i| den[i]) else {
            continue;
        };
        let pick = |d: &[u64], over: Over| match over {
            Over::Busiest => d[busiest],
            Over::All => d.iter().sum(),
        };
        let (n, m) = (pick(&delta(r.num.0), r.num.1), pick(&den, r.den.1));
        if m > 0 {
            out.push((r.label.to_string(), n as f64 / m as f64 * r.scale));
        }
    }
    out
}

/// quorumkv replicas: from each one's status (`persist_syncs`, `persist_records`).
pub async fn quorumkv_counters(
    native: &[SocketAddr],
    tls: Option<&ClientTls>,
) -> Option<SyncCounters> {
    let mut c = SyncCounters {
        syncs: 0,
        records: Some(0),
        sync_us: Some(0),
        replicas: Vec::new(),
    };
    for &addr in native {
        let s = status(addr, tls).await.ok()?;
        // Counters another process reports: a sum that would wrap is no
        // figure, not a panic or a wrong one.
        c.syncs = c.syncs.checked_add(s.persist_syncs)?;
        c.records = c.records.and_then(|r| r.checked_add(s.persist_records));
        // A replica of a release before `persist_sync_us`: no mean at all.
        c.sync_us = (c.sync_us.zip(s.persist_sync_us)).and_then(|(a, b)| a.checked_add(b));
        c.replicas.push(s.counters);
    }
    Some(c)
}

/// The durability a quorumkv replica reports (the first that answers).
pub async fn quorumkv_mode(native: &[SocketAddr], tls: Option<&ClientTls>) -> Option<String> {
    for &addr in native {
        if let Ok(s) = status(addr, tls).await {
            return Some(s.durability);
        }
    }
    None
}

/// A replica's status, over TLS when the deployment runs it.
async fn status(
    addr: SocketAddr,
    tls: Option<&ClientTls>,
) -> Result<quorumkv_node::status::NodeStatus, String> {
    let host = addr.ip().to_string();
    quorumkv_node::status::fetch_with(addr, &host, ASK_TIMEOUT, tls).await
}

/// etcd members: WAL fsyncs and committed proposals from `/metrics`.
pub async fn etcd_counters(endpoints: &[String]) -> Option<SyncCounters> {
    let mut c = SyncCounters {
        syncs: 0,
        records: Some(0),
        sync_us: Some(0),
        replicas: Vec::new(),
    };
    for ep in endpoints {
        let text = http_get(ep, "/metrics").await?;
        let count = metric(&text, "etcd_disk_wal_fsync_duration_seconds_count")? as u64;
        c.syncs = c.syncs.checked_add(count)?;
        c.sync_us = (c.sync_us)
            .zip(metric(&text, "etcd_disk_wal_fsync_duration_seconds_sum"))
            .and_then(|(a, s)| a.checked_add((s * 1e6) as u64));
        // Every member applies every committed proposal; like quorumkv's
        // records, this counts each write once per replica.
        c.records = c
            .records
            .zip(metric(&text, "etcd_server_proposals_committed_total"))
            .map(|(r, p)| r + p as u64);
    }
    Some(c)
}

/// Redis' durability from `CONFIG GET appendonly/appendfsync`:
/// `aof-always`, `aof-everysec`, `aof-no` or `none`.
pub async fn redis_mode(conn: &mut redis::aio::MultiplexedConnection) -> Option<String> {
    async fn get(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(key)
            .query_async(conn)
            .await
            .ok()?;
        pair.get(1).cloned()
    }
    Some(redis_mode_name(
        &get(conn, "appendonly").await?,
        &get(conn, "appendfsync").await?,
    ))
}

pub fn redis_mode_name(appendonly: &str, appendfsync: &str) -> String {
    if appendonly == "yes" {
        format!("aof-{appendfsync}")
    } else {
        "none".into()
    }
}

/// The value of an unlabelled Prometheus metric in `text`.
/// ZooKeeper's fsyncs of its transaction log, summed over the servers
/// (`mntr`'s `zk_cnt_fsynctime`: one sample per fsync, none with
/// `forceSync=no`). Needs the `mntr` four-letter word whitelisted.
pub async fn zookeeper_counters(endpoints: &[String]) -> Option<SyncCounters> {
    // `zk_sum_fsynctime` is in whole milliseconds: too coarse for a mean
    // sync time near a disk's floor, so none is reported.
    let mut c = SyncCounters {
        syncs: 0,
        records: None,
        sync_us: None,
        replicas: Vec::new(),
    };
    for ep in endpoints {
        let text = four_letter_word(ep, "mntr").await?;
        c.syncs += zk_stat(&text, "zk_cnt_fsynctime")? as u64;
    }
    Some(c)
}

/// Whether a ZooKeeper server keeps its log on tmpfs (`conf`'s dataLogDir
/// under /dev/shm), as `scripts/peers.sh start zookeeper --memory` runs it.
pub async fn zookeeper_on_tmpfs(endpoints: &[String]) -> bool {
    let Some(ep) = endpoints.first() else {
        return false;
    };
    let Some(conf) = four_letter_word(ep, "conf").await else {
        return false;
    };
    conf.lines().any(|l| {
        l.strip_prefix("dataLogDir=")
            .is_some_and(|d| d.starts_with("/dev/shm/"))
    })
}

/// The durability column of a ZooKeeper ensemble: `fsync` when a write
/// moved the fsync counters, else `memory` on tmpfs or `buffered` on disk.
pub fn zookeeper_mode_name(fsyncs: bool, tmpfs: bool) -> String {
    match (fsyncs, tmpfs) {
        (true, false) => "fsync".into(),
        (true, true) => "fsync (tmpfs)".into(),
        (false, true) => "memory".into(),
        (false, false) => "buffered".into(),
    }
}

/// A value of `mntr`'s tab-separated `name value` lines.
pub fn zk_stat(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('\t')?;
        (k.trim() == name).then(|| v.trim().parse().ok())?
    })
}

/// The answer of a ZooKeeper four-letter word (`mntr`, `conf`, `srvr`).
async fn four_letter_word(hostport: &str, word: &str) -> Option<String> {
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(hostport).await.ok()?;
        s.write_all(word.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        // A word that is not whitelisted is answered by this sentence.
        (!text.contains("is not executed because it is not in the whitelist")).then_some(text)
    };
    tokio::time::timeout(ASK_TIMEOUT, ask).await.ok()?
}

pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let v = rest.strip_prefix(' ')?;
        v.trim().parse().ok()
    })
}

/// A plain HTTP/1.0 GET of `path` on `host:port`; the body, if 200.
async fn http_get(hostport: &str, path: &str) -> Option<String> {
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(hostport).await.ok()?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.")
            .then_some(())
            .filter(|_| head.split_whitespace().nth(1) == Some("200"))?;
        Some(body.to_string())
    };
    tokio::time::timeout(ASK_TIMEOUT, ask).await.ok()?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_zookeeper_mntr_lines() {
        let text = "zk_version\t3.8.0\nzk_avg_fsynctime\t0.5\nzk_cnt_fsynctime\t17\n";
        assert_eq!(zk_stat(text, "zk_cnt_fsynctime"), Some(17.0));
        assert_eq!(zk_stat(text, "zk_fsynctime"), None);
        assert_eq!(zk_stat(text, "zk_version"), None, "not a number");
        assert_eq!(zookeeper_mode_name(true, false), "fsync");
        assert_eq!(zookeeper_mode_name(false, true), "memory");
    }

    #[test]
    fn reads_unlabelled_metrics_only() {
        let text = "# HELP x\n\
            etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.001\"} 3\n\
            etcd_disk_wal_fsync_duration_seconds_count 42\n\
            etcd_server_proposals_committed_total 1.5e+06\n";
        assert_eq!(
            metric(text, "etcd_disk_wal_fsync_duration_seconds_count"),
            Some(42.0)
        );
        assert_eq!(
            metric(text, "etcd_server_proposals_committed_total"),
            Some(1.5e6)
        );
        assert_eq!(metric(text, "etcd_disk_wal_fsync_duration_seconds"), None);
    }

    #[test]
    fn ratios_divide_growth_at_the_busiest_replica_or_over_all() {
        let reading = |v: [[u64; 2]; 3]| SyncCounters {
            replicas: (v.iter())
                .map(|r| vec![("acks".to_string(), r[0]), ("commits".to_string(), r[1])])
                .collect(),
            ..SyncCounters::default()
        };
        let before = reading([[10, 5], [100, 50], [0, 0]]);
        let after = reading([[20, 5], [160, 80], [3, 0]]);
        let ratio = |num: Over, den: Over| PointRatio {
            label: "r",
            help: "",
            num: ("acks", num),
            den: ("commits", den),
            scale: 2.0,
        };
        // Replica 2's commits grew most (30): its acks grew 60.
        let got = point_ratios(&[ratio(Over::Busiest, Over::Busiest)], &before, &after);
        assert_eq!(got, vec![("r".to_string(), 60.0 / 30.0 * 2.0)]);
        // Acks over all replicas: 10 + 60 + 3.
        let got = point_ratios(&[ratio(Over::All, Over::Busiest)], &before, &after);
        assert_eq!(got, vec![("r".to_string(), 73.0 / 30.0 * 2.0)]);
        // Nothing committed: no ratio; replicas of another reading: none.
        assert!(point_ratios(&[ratio(Over::All, Over::All)], &after, &after).is_empty());
        assert!(point_ratios(
            &[ratio(Over::All, Over::All)],
            &SyncCounters::default(),
            &after
        )
        .is_empty());
    }

    #[test]
    fn rates_between_two_readings() {
        let a = SyncCounters {
            syncs: 100,
            records: Some(1000),
            sync_us: Some(20_000),
            replicas: Vec::new(),
        };
        let b = SyncCounters {
            syncs: 300,
            records: Some(3600),
            sync_us: Some(70_000),
            replicas: Vec::new(),
        };
        assert_eq!(b.rates_since(&a, 2.0), (100.0, Some(1300.0)));
        assert_eq!(b.mean_sync_us_since(&a), Some(250.0));
        assert_eq!(a.mean_sync_us_since(&a), None, "no sync in between");
        let none = SyncCounters {
            syncs: 300,
            records: None,
            sync_us: None,
            replicas: Vec::new(),
        };
        assert_eq!(none.rates_since(&a, 2.0), (100.0, None));
        assert_eq!(none.mean_sync_us_since(&a), None, "untimed");
        // A restarted replica's counters went back: no mean, no underflow.
        assert_eq!(a.mean_sync_us_since(&b), None);
    }

    #[test]
    fn redis_modes() {
        assert_eq!(redis_mode_name("yes", "always"), "aof-always");
        assert_eq!(redis_mode_name("no", "always"), "none");
    }
}
