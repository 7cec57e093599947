//! The floors a run is judged against, measured on this host beside it
//! (issue 36: a replica's sync against the disk's floor, a one-client GET
//! against the loopback round trip): small `O_DSYNC` appends, what no
//! replica's sync can beat, and a TCP ping-pong over 127.0.0.1, what no
//! network hop can. Measured before the first point and again after the
//! last; the lower figure of the two is the floor (noise only adds).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Bytes of one disk-floor append: a small replica batch, as the docs'
/// `dd bs=2k oflag=dsync` measured it by hand.
pub const DISK_WRITE: usize = 2048;
/// Appends per disk-floor measurement, unless [`BUDGET`] ends it first.
pub const DISK_WRITES: usize = 1000;
/// Bytes of one ping (and of its echo): about a small request's frame.
pub const PING: usize = 64;
/// Round trips per loopback measurement, unless [`BUDGET`] ends it first.
pub const PINGS: usize = 5000;
/// Longest one measurement runs: a busy disk takes milliseconds a sync.
pub const BUDGET: Duration = Duration::from_secs(2);
/// Round trips before the timed ones (connection and caches warm).
const WARM_PINGS: usize = 100;
/// A loopback echo that stalls this long is broken, not slow.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// One measurement: its samples' median and mean, in µs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub p50_us: f64,
    pub mean_us: f64,
    /// How many samples (writes or round trips).
    pub n: usize,
}

impl Sample {
    /// The median and mean of `us` (sorted here); `None` when empty.
    pub fn of(us: &mut [f64]) -> Option<Sample> {
        if us.is_empty() {
            return None;
        }
        us.sort_by(f64::total_cmp);
        let mid = us.len() / 2;
        let p50_us = match us.len() % 2 {
            1 => us[mid],
            _ => (us[mid - 1] + us[mid]) / 2.0,
        };
        Some(Sample {
            p50_us,
            mean_us: us.iter().sum::<f64>() / us.len() as f64,
            n: us.len(),
        })
    }
}

/// One floor: measured before the run and, when the run ended normally,
/// after it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Floor {
    pub before: Sample,
    #[serde(default)]
    pub after: Option<Sample>,
}

impl Floor {
    fn samples(&self) -> impl Iterator<Item = &Sample> {
        std::iter::once(&self.before).chain(&self.after)
    }

    /// The lower median of before and after.
    pub fn p50_us(&self) -> f64 {
        self.samples()
            .map(|s| s.p50_us)
            .fold(f64::INFINITY, f64::min)
    }

    /// The lower mean of before and after.
    pub fn mean_us(&self) -> f64 {
        self.samples()
            .map(|s| s.mean_us)
            .fold(f64::INFINITY, f64::min)
    }

    /// `190 us` or `190/230 us` (before/after) of `stat`.
    fn text(&self, stat: fn(&Sample) -> f64) -> String {
        let v: Vec<String> = self.samples().map(|s| us_text(stat(s))).collect();
        format!("{} us", v.join("/"))
    }
}

/// A figure in µs: whole above 10, one decimal below.
fn us_text(us: f64) -> String {
    if us >= 10.0 {
        format!("{us:.0}")
    } else {
        format!("{us:.1}")
    }
}

/// The disk's and the loopback's floors of a run; a floor that could not
/// be measured is `None` (and said on stderr).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Floors {
    /// [`DISK_WRITE`]-byte `O_DSYNC` appends to a fresh file in `disk_dir`.
    pub disk: Option<Floor>,
    /// Where the disk floor was measured: where local clusters keep their
    /// data (`LocalCluster` makes its directory in the temp dir).
    pub disk_dir: String,
    /// [`PING`]-byte TCP round trips over 127.0.0.1.
    pub rtt: Option<Floor>,
}

impl Floors {
    /// Both floors, measured now in `dir` and over loopback (blocking: up
    /// to twice [`BUDGET`]).
    pub fn measure(dir: &Path) -> Floors {
        Floors {
            disk: warn("disk", disk_appends(dir, DISK_WRITE, DISK_WRITES, BUDGET)).map(|before| {
                Floor {
                    before,
                    after: None,
                }
            }),
            disk_dir: dir.display().to_string(),
            rtt: warn("loopback", loopback_rtt(PING, PINGS, BUDGET)).map(|before| Floor {
                before,
                after: None,
            }),
        }
    }

    /// Measures both again (after the last point), kept beside the first.
    pub fn measure_again(&mut self) {
        let dir = PathBuf::from(&self.disk_dir);
        if let Some(f) = &mut self.disk {
            f.after = warn("disk", disk_appends(&dir, DISK_WRITE, DISK_WRITES, BUDGET));
        }
        if let Some(f) = &mut self.rtt {
            f.after = warn("loopback", loopback_rtt(PING, PINGS, BUDGET));
        }
    }

    /// The line under the table: each floor's median and mean, before/after.
    pub fn line(&self) -> String {
        let disk = match &self.disk {
            Some(f) => format!(
                "disk {} KB O_DSYNC append in {} p50 {}, mean {}",
                DISK_WRITE / 1024,
                self.disk_dir,
                f.text(|s| s.p50_us),
                f.text(|s| s.mean_us)
            ),
            None => "disk not measured".into(),
        };
        let rtt = match &self.rtt {
            Some(f) => format!(
                "loopback TCP round trip p50 {}, mean {}",
                f.text(|s| s.p50_us),
                f.text(|s| s.mean_us)
            ),
            None => "loopback not measured".into(),
        };
        let when = match self.disk.iter().chain(&self.rtt).any(|f| f.after.is_some()) {
            true => "before/after the run",
            false => "before the run",
        };
        format!("floors of this host ({when}): {disk}; {rtt}")
    }
}

/// The measurement, or `None` with a line on stderr saying why.
fn warn(what: &str, r: io::Result<Sample>) -> Option<Sample> {
    r.map_err(|e| eprintln!("quorumkv bench: the {what} floor was not measured: {e}"))
        .ok()
}

/// Up to `writes` appends of `size` bytes, each synced (`O_DSYNC`, as `dd
/// oflag=dsync`), to a fresh file in `dir` (removed after), or as many as
/// `budget` allows (at least one): each append's time.
pub fn disk_appends(
    dir: &Path,
    size: usize,
    writes: usize,
    budget: Duration,
) -> io::Result<Sample> {
    let path = dir.join(format!(
        "quorumkv-floor-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
    ));
    let file = OpenOptions::new()
        .append(true)
        .create_new(true)
        .custom_flags(libc::O_DSYNC)
        .open(&path)?;
    let times = timed_appends(file, size, writes, budget);
    let _ = std::fs::remove_file(&path);
    Sample::of(&mut times?).ok_or_else(|| io::Error::other("no write"))
}

fn timed_appends(
    mut file: File,
    size: usize,
    writes: usize,
    budget: Duration,
) -> io::Result<Vec<f64>> {
    let block = vec![0x5au8; size];
    let start = Instant::now();
    let mut us = Vec::with_capacity(writes);
    while us.len() < writes && (us.is_empty() || start.elapsed() < budget) {
        let t = Instant::now();
        file.write_all(&block)?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(us)
}

/// Up to `rounds` round trips of `size`-byte messages (at least 8) between
/// this thread and an echo thread over 127.0.0.1 (`TCP_NODELAY`, as the
/// replicas' links), or as many as `budget` allows: each round trip's
/// time. Every echo must carry back the bytes sent, or it is an error.
pub fn loopback_rtt(size: usize, rounds: usize, budget: Duration) -> io::Result<Sample> {
    let size = size.max(8);
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> io::Result<u64> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        let mut buf = vec![0u8; size];
        let mut echoed = 0;
        loop {
            match s.read_exact(&mut buf) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(echoed),
                Err(e) => return Err(e),
            }
            s.write_all(&buf)?;
            echoed += 1;
        }
    });
    let pinged = ping(addr, size, rounds, budget);
    // `ping` dropped its end: the echo thread sees the end and returns.
    let echoed = echo
        .join()
        .map_err(|_| io::Error::other("the echo thread panicked"))??;
    let mut us = pinged?;
    if echoed != (WARM_PINGS + us.len()) as u64 {
        return Err(io::Error::other(format!(
            "{echoed} echoes for {} pings",
            WARM_PINGS + us.len()
        )));
    }
    Sample::of(&mut us).ok_or_else(|| io::Error::other("no round trip"))
}

/// The pinging side of [`loopback_rtt`]: each timed round trip in µs.
fn ping(
    addr: std::net::SocketAddr,
    size: usize,
    rounds: usize,
    budget: Duration,
) -> io::Result<Vec<f64>> {
    let mut s = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    let (mut out, mut back) = (vec![0u8; size], vec![0u8; size]);
    let mut us = Vec::with_capacity(rounds);
    let mut start = Instant::now();
    for i in 0..(WARM_PINGS + rounds) as u64 {
        if i == WARM_PINGS as u64 {
            start = Instant::now();
        } else if i > WARM_PINGS as u64 && start.elapsed() >= budget {
            break;
        }
        // Each ping differs, so an echo of a stale one is caught.
        out[..8].copy_from_slice(&i.to_le_bytes());
        let t = Instant::now();
        s.write_all(&out)?;
        s.read_exact(&mut back)?;
        let took = t.elapsed();
        if back != out {
            return Err(io::Error::other(format!(
                "round trip {i}: the echo differs"
            )));
        }
        if i >= WARM_PINGS as u64 {
            us.push(took.as_secs_f64() * 1e6);
        }
    }
    Ok(us)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plausible(s: &Sample) {
        assert!(s.n > 0, "{s:?}");
        for v in [s.p50_us, s.mean_us] {
            assert!(v.is_finite() && v > 0.0, "{s:?}");
        }
    }

    #[test]
    fn median_and_mean_of_samples() {
        let s = Sample::of(&mut [5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.p50_us, s.mean_us, s.n), (3.0, 3.0, 3));
        let s = Sample::of(&mut [4.0, 1.0, 10.0, 2.0]).unwrap();
        assert_eq!((s.p50_us, s.mean_us), (3.0, 4.25));
        assert_eq!(Sample::of(&mut []), None);
    }

    #[test]
    fn synced_appends_take_positive_time_and_leave_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let s = disk_appends(dir.path(), DISK_WRITE, 20, BUDGET).unwrap();
        plausible(&s);
        assert_eq!(s.n, 20);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // Even a spent budget makes one write.
        let one = disk_appends(dir.path(), 16, 50, Duration::ZERO).unwrap();
        assert_eq!(one.n, 1);
        assert!(disk_appends(&dir.path().join("absent"), 16, 5, BUDGET).is_err());
    }

    #[test]
    fn the_pinger_round_trips_bytes_through_the_echo() {
        let s = loopback_rtt(PING, 300, BUDGET).unwrap();
        plausible(&s);
        assert_eq!(s.n, 300);
        // Smaller than a ping's counter: rounded up, still echoed intact.
        plausible(&loopback_rtt(1, 10, BUDGET).unwrap());
    }

    #[test]
    fn an_echo_that_changes_bytes_is_an_error() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let liar = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 16];
            while s.read_exact(&mut buf).is_ok() {
                buf[0] ^= 1;
                if s.write_all(&buf).is_err() {
                    break;
                }
            }
        });
        let e = ping(addr, 16, 5, BUDGET).unwrap_err();
        assert!(e.to_string().contains("echo differs"), "{e}");
        liar.join().unwrap();
    }

    #[test]
    fn the_floor_is_the_lower_of_before_and_after() {
        let s = |p50_us, mean_us| Sample {
            p50_us,
            mean_us,
            n: 10,
        };
        let mut f = Floor {
            before: s(190.0, 260.0),
            after: None,
        };
        assert_eq!((f.p50_us(), f.mean_us()), (190.0, 260.0));
        f.after = Some(s(230.0, 240.0));
        assert_eq!((f.p50_us(), f.mean_us()), (190.0, 240.0));
        let floors = Floors {
            disk: Some(f),
            disk_dir: "/tmp".into(),
            rtt: Some(Floor {
                before: s(18.4, 9.5),
                after: None,
            }),
        };
        assert_eq!(
            floors.line(),
            "floors of this host (before/after the run): disk 2 KB O_DSYNC append in /tmp \
             p50 190/230 us, mean 260/240 us; loopback TCP round trip p50 18 us, mean 9.5 us"
        );
    }
}
