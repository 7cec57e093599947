//! The history a seed records: one [`OpRecord`] per client operation, with
//! invocation and completion instants in nanoseconds of virtual time.
//!
//! Virtual time has microsecond resolution and many events share an instant,
//! so the recorder adds a sub-microsecond counter: events recorded at the
//! same µs get increasing ns, in the order the scheduler processed them. The
//! real-time order the checker sees is therefore exactly the causal order of
//! the simulation.

use bytes::Bytes;
use quorumkv_core::{OpError, Request, Response};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SimOp {
    Get { key: String },
    Put { key: String, value: String },
    Delete { key: String },
}

impl SimOp {
    pub fn key(&self) -> &str {
        match self {
            SimOp::Get { key } | SimOp::Put { key, .. } | SimOp::Delete { key } => key,
        }
    }
    pub fn to_request(&self) -> Request {
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        match self {
            SimOp::Get { key } => Request::Get { key: b(key) },
            SimOp::Put { key, value } => Request::Put {
                key: b(key),
                value: b(value),
            },
            SimOp::Delete { key } => Request::Delete { key: b(key) },
        }
    }
}

impl fmt::Display for SimOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimOp::Get { key } => write!(f, "get {key}"),
            SimOp::Put { key, value } => write!(f, "put {key}={value}"),
            SimOp::Delete { key } => write!(f, "delete {key}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SimOutcome {
    /// Completed; a get's value (`None` = absent), `None` for put/delete.
    Ok(Option<String>),
    /// Definitely had no effect.
    Fail,
    /// May or may not have taken effect (timeout).
    Unknown,
}

impl SimOutcome {
    /// How a protocol's answer maps to an outcome: a coordinator timeout is
    /// unknown (the store may still land), a rejection had no effect.
    pub fn from_response(resp: &Response) -> SimOutcome {
        match resp {
            Response::Value(v) => {
                SimOutcome::Ok(v.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()))
            }
            Response::Done => SimOutcome::Ok(None),
            Response::Failed(OpError::Timeout { .. }) => SimOutcome::Unknown,
            Response::Failed(OpError::Rejected(_)) => SimOutcome::Fail,
        }
    }
}

impl fmt::Display for SimOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimOutcome::Ok(Some(v)) => write!(f, "ok {v}"),
            SimOutcome::Ok(None) => write!(f, "ok"),
            SimOutcome::Fail => write!(f, "fail"),
            SimOutcome::Unknown => write!(f, "unknown"),
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
    pub op: SimOp,
    pub invoke_ns: u64,
    /// When the client learnt the outcome (or gave up, for unknown).
    pub complete_ns: u64,
    pub outcome: SimOutcome,
}

impl fmt::Display for OpRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "p{:<3} [{:>12.6}ms .. {:>12.6}ms] {} -> {}",
            self.process,
            self.invoke_ns as f64 / 1e6,
            self.complete_ns as f64 / 1e6,
            self.op,
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
    fn outcomes_map_per_the_contract() {
        assert_eq!(
            SimOutcome::from_response(&Response::Done),
            SimOutcome::Ok(None)
        );
        let v = Response::Value(Some(Bytes::from_static(b"x")));
        assert_eq!(
            SimOutcome::from_response(&v),
            SimOutcome::Ok(Some("x".into()))
        );
        let t = Response::Failed(OpError::Timeout { got: 1, need: 2 });
        assert_eq!(SimOutcome::from_response(&t), SimOutcome::Unknown);
        let r = Response::Failed(OpError::Rejected("no".into()));
        assert_eq!(SimOutcome::from_response(&r), SimOutcome::Fail);
    }
}
