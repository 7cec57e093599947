//! The history a seed records: one [`OpRecord`] per client operation, with
//! invocation and completion instants in nanoseconds of virtual time.
//!
//! Virtual time has microsecond resolution and many events share an instant,
//! so the recorder adds a sub-microsecond counter: events recorded at the
//! same µs get increasing ns, in the order the scheduler processed them. The
//! real-time order the checker sees is therefore exactly the causal order of
//! the simulation.

use quorumkv_core::op::{Op, Outcome};
use std::fmt;

/// The sim's terse text of an operation in traces and history dumps
/// (`get k0`, `put k0=c1.4`, `delete k0`); the checker's own reports use
/// [`Op`]'s `Display`.
pub struct Brief<'a>(pub &'a Op);

impl fmt::Display for Brief<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Op::Get { key } => write!(f, "get {key}"),
            Op::Put { key, value } => write!(f, "put {key}={value}"),
            Op::Delete { key } => write!(f, "delete {key}"),
            other => write!(f, "{other}"), // the sim issues no other kind
        }
    }
}

/// One operation of the history.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OpRecord {
    /// History process id. A sim client whose operation ends unknown continues
    /// under a fresh process id (Jepsen's rule), so a process never has two
    /// operations open at once in the checker's eyes.
    pub process: u64,
    pub op: Op,
    pub invoke_ns: u64,
    /// When the client learnt the outcome (or gave up, for unknown).
    pub complete_ns: u64,
    pub outcome: Outcome,
}

impl fmt::Display for OpRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "p{:<3} [{:>12.6}ms .. {:>12.6}ms] {} -> {}",
            self.process,
            self.invoke_ns as f64 / 1e6,
            self.complete_ns as f64 / 1e6,
            Brief(&self.op),
            self.outcome
        )
    }
}

/// Turns µs instants into strictly increasing ns instants (see module docs).
#[derive(Debug, Default)]
pub struct Clock {
    last_ns: u64,
}

impl Clock {
    pub fn stamp(&mut self, now_us: u64) -> u64 {
        let ns = (now_us * 1000).max(self.last_ns + 1);
        self.last_ns = ns;
        ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_strictly_increasing() {
        let mut c = Clock::default();
        assert_eq!(c.stamp(5), 5000);
        assert_eq!(c.stamp(5), 5001);
        assert_eq!(c.stamp(6), 6000);
    }

    #[test]
    fn brief_is_the_trace_text() {
        let put = Op::Put {
            key: "k0".into(),
            value: "c4.0".into(),
        };
        assert_eq!(Brief(&put).to_string(), "put k0=c4.0");
        assert_eq!(Brief(&Op::Get { key: "k1".into() }).to_string(), "get k1");
        assert_eq!(
            Brief(&Op::Delete { key: "k2".into() }).to_string(),
            "delete k2"
        );
    }
}
