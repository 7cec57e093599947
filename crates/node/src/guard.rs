//! What a replica refuses from the network: handshakes (a hello it cannot
//! accept, a failed proof of the cluster secret) and frames a connection's
//! role does not allow (a client sending peer-only protocol messages), and
//! hellos of another major wire version (`version`).
//! Each refusal is counted for INFO and metrics and logged with the remote
//! address, at most [`LOGS_PER_SECOND`] lines a second, so a flood of bad
//! connections cannot flood the log.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Handshakes refused (INFO `handshakes_refused`).
pub static HANDSHAKES_REFUSED: AtomicU64 = AtomicU64::new(0);
/// Frames refused for the connection's role (INFO `frames_refused`).
pub static FRAMES_REFUSED: AtomicU64 = AtomicU64::new(0);
/// Hellos refused for another major wire version (INFO `versions_refused`).
pub static VERSIONS_REFUSED: AtomicU64 = AtomicU64::new(0);

/// Most refusal lines logged per second; the rest are counted and summed
/// up in the next second's first line.
pub const LOGS_PER_SECOND: u64 = 10;

/// What was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Handshake,
    Frame,
    /// A hello of another major wire version (`version`).
    Version,
}

static WINDOW: AtomicU64 = AtomicU64::new(0);
static LOGGED: AtomicU64 = AtomicU64::new(0);
static SUPPRESSED: AtomicU64 = AtomicU64::new(0);

/// Count a refusal and log it (rate-limited).
pub fn refused(what: Refusal, addr: Option<SocketAddr>, why: &str) {
    match what {
        Refusal::Handshake => HANDSHAKES_REFUSED.fetch_add(1, Ordering::Relaxed),
        Refusal::Frame => FRAMES_REFUSED.fetch_add(1, Ordering::Relaxed),
        Refusal::Version => VERSIONS_REFUSED.fetch_add(1, Ordering::Relaxed),
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if WINDOW.swap(now, Ordering::Relaxed) != now {
        LOGGED.store(0, Ordering::Relaxed);
        let missed = SUPPRESSED.swap(0, Ordering::Relaxed);
        if missed > 0 {
            tracing::warn!("{missed} more refusals were not logged");
        }
    }
    if LOGGED.fetch_add(1, Ordering::Relaxed) < LOGS_PER_SECOND {
        let from = addr.map_or_else(|| "?".to_string(), |a| a.to_string());
        let kind = match what {
            Refusal::Handshake => "handshake",
            Refusal::Frame => "frame",
            Refusal::Version => "version",
        };
        tracing::warn!(remote = %from, "refused {kind}: {why}");
    } else {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
    }
}
