//! What one exhaustive run explores: the small scope (replicas, clients,
//! operations) and the fault budgets that bound it besides the depth.

use crate::config::Durability;
use bytes::Bytes;
use quorumkv_core::Request;
use std::time::Duration;

/// The scope of `quorumkv verify`.
#[derive(Clone, Debug)]
pub struct ExploreConfig {
    pub protocol: String,
    /// Events per path at most (the BFS stops expanding there).
    pub depth: u32,
    pub replicas: u32,
    pub clients: u32,
    /// Operations per client (see [`workload_op`]).
    pub ops: u32,
    /// Node crashes per path (each may be followed by a restart).
    pub crashes: u32,
    /// Whether a crash may also fall between two commands of one handler
    /// call (the later ones never happen), as in the simulator.
    pub crash_inside: bool,
    /// `fsync`: a persisted record survives a crash; `memory`: nothing does.
    pub durability: Durability,
    /// Message losses per path: silent drops on unreliable links, a
    /// connection reset (Down, Up, gap) on FIFO-reliable ones; none on
    /// `Reliable` links.
    pub losses: u32,
    /// Message duplications per path (unreliable links only).
    pub dups: u32,
    /// Timer firings per path.
    pub timers: u32,
    pub bug: Option<String>,
    /// Start from the state a fault-free fair schedule settles in (a
    /// leader elected), instead of from boot.
    pub warmup: bool,
    /// `--variant` name (a protocol's named option set) and `--opt` pairs.
    pub variant: Option<String>,
    pub opts: Vec<(String, String)>,
    /// Stop after this many transitions (0 = no limit): the run then
    /// reports itself cut, not exhausted.
    pub max_states: u64,
    /// The linearizability checker's budget per history.
    pub check_timeout: Duration,
    /// Partial-order reduction by sleep sets (`--no-reduction` turns it
    /// off; the states reached are the same, see `sleep.rs`).
    pub reduce: bool,
}

impl Default for ExploreConfig {
    fn default() -> Self {
        ExploreConfig {
            protocol: String::new(),
            depth: 12,
            replicas: 3,
            clients: 2,
            ops: 1,
            crashes: 1,
            crash_inside: true,
            durability: Durability::Fsync,
            losses: 1,
            dups: 1,
            timers: 2,
            bug: None,
            warmup: false,
            variant: None,
            opts: Vec::new(),
            max_states: 0,
            check_timeout: Duration::from_secs(2),
            reduce: true,
        }
    }
}

impl ExploreConfig {
    /// The flags that reproduce this scope (for the replay command).
    pub fn flags(&self) -> String {
        let mut s = format!(
            "--protocol {} --depth {} --replicas {} --clients {} --ops {} --crashes {} \
             --losses {} --dups {} --timers {} --durability {}",
            self.protocol,
            self.depth,
            self.replicas,
            self.clients,
            self.ops,
            self.crashes,
            self.losses,
            self.dups,
            self.timers,
            self.durability
        );
        if !self.crash_inside {
            s += " --no-crash-inside";
        }
        if self.warmup {
            s += " --warmup";
        }
        if !self.reduce {
            s += " --no-reduction";
        }
        if let Some(b) = &self.bug {
            s += &format!(" --bug {b}");
        }
        if let Some(v) = &self.variant {
            s += &format!(" --variant {v}");
        }
        for (k, v) in &self.opts {
            s += &format!(" --opt {k}={v}");
        }
        s
    }
}

/// The one key every operation touches.
pub const KEY: &str = "k0";

/// Client `c`'s operation number `j`: puts and gets alternate, starting
/// with a put for even clients and a get for odd ones, so that one
/// operation each already pairs a write with a read; every put writes a
/// value no other put writes (`c{c}.{j}`).
pub fn workload_op(c: usize, j: u32) -> Request {
    let key = Bytes::from_static(KEY.as_bytes());
    if (c + j as usize).is_multiple_of(2) {
        Request::Put {
            key,
            value: Bytes::from(format!("c{c}.{j}")),
        }
    } else {
        Request::Get { key }
    }
}
