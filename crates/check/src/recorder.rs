//! A history recorder cheap enough to leave on in benchmarks.
//!
//! Each logical client owns a [`ClientLog`] and appends to a plain `Vec`
//! with no lock and no atomic on the hot path: an invocation is one
//! `Instant::now()` and one push, a completion one `Instant::now()` and one
//! store. Logs are handed to the shared [`Recorder`] (one mutex acquisition)
//! only when the client finishes, i.e. when the `ClientLog` is dropped or
//! [`ClientLog::finish`]ed. Bench clients should therefore keep their log for
//! the whole run.
//!
//! Operations and outcomes are core's [`Op`] and [`Outcome`]; a client of the
//! store gets them from its wire request and response with `Op::from(&req)`
//! and [`Outcome::from_response`], the conversion the simulator uses too.
use std::sync::{Arc, Mutex};
use std::time::Instant;

use quorumkv_core::op::{Op, Outcome};

use crate::history::{History, Operation};

/// Collects the logs of many clients into one [`History`]. Clone it freely.
#[derive(Clone, Debug)]
pub struct Recorder {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    base: Instant,
    done: Mutex<Vec<Vec<Operation>>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// A recorder whose times are nanoseconds since now (monotonic).
    pub fn new() -> Recorder {
        Recorder {
            inner: Arc::new(Inner {
                base: Instant::now(),
                done: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A log for one logical client. A client issues one operation at a time.
    pub fn client(&self, client: u64) -> ClientLog {
        ClientLog {
            client,
            base: self.inner.base,
            ops: Vec::new(),
            sink: self.inner.clone(),
        }
    }

    /// All operations of the finished client logs, ordered by invocation.
    /// Logs still alive are not included.
    pub fn history(&self) -> History {
        let done = self.inner.done.lock().unwrap_or_else(|e| e.into_inner());
        let mut ops: Vec<Operation> = done.iter().flatten().cloned().collect();
        ops.sort_by_key(|o| (o.call, o.client));
        History { ops }
    }
}

/// Names an invoked operation of one [`ClientLog`]. Complete it at most once;
/// an operation never completed is recorded with an unknown outcome.
#[derive(Debug)]
#[must_use = "complete the operation, or drop the handle to leave its outcome unknown"]
pub struct OpHandle(usize);

/// The log of one logical client. `Send`, not shared: move it into the task
/// that plays the client.
#[derive(Debug)]
pub struct ClientLog {
    client: u64,
    base: Instant,
    ops: Vec<Operation>,
    sink: Arc<Inner>,
}

impl ClientLog {
    fn now(&self) -> u64 {
        // u64 nanoseconds last 584 years.
        self.base.elapsed().as_nanos() as u64
    }

    /// Records an invocation now.
    pub fn invoke(&mut self, op: Op) -> OpHandle {
        let t = self.now();
        self.invoke_at(t, op)
    }

    /// Records a completion now. `Outcome::Unknown` leaves the completion time
    /// open (the operation may take effect any time after its invocation).
    pub fn complete(&mut self, h: OpHandle, outcome: Outcome) {
        let t = self.now();
        self.complete_at(h, t, outcome)
    }

    /// Records an invocation at `t_ns` (virtual time, for the simulator).
    pub fn invoke_at(&mut self, t_ns: u64, op: Op) -> OpHandle {
        self.ops.push(Operation {
            client: self.client,
            op,
            call: t_ns,
            ret: None,
            outcome: Outcome::Unknown,
        });
        OpHandle(self.ops.len() - 1)
    }

    /// Records a completion at `t_ns` (virtual time, for the simulator).
    pub fn complete_at(&mut self, h: OpHandle, t_ns: u64, outcome: Outcome) {
        let o = &mut self.ops[h.0];
        o.ret = match outcome {
            Outcome::Unknown => None,
            _ => Some(t_ns.max(o.call)),
        };
        o.outcome = outcome;
    }

    /// Hands the log to the recorder now (dropping it does the same).
    pub fn finish(self) {}
}

impl Drop for ClientLog {
    fn drop(&mut self) {
        let ops = std::mem::take(&mut self.ops);
        if !ops.is_empty() {
            self.sink
                .done
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(ops);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(v: &str) -> Op {
        Op::Put {
            key: "k".into(),
            value: v.into(),
        }
    }

    #[test]
    fn logs_merge_on_drop_and_finish() {
        let rec = Recorder::new();
        let mut a = rec.client(1);
        let mut b = rec.client(2);
        let h = a.invoke_at(10, put("x"));
        a.complete_at(h, 20, Outcome::Ok(None));
        let h = b.invoke_at(5, Op::Get { key: "k".into() });
        b.complete_at(h, 30, Outcome::Ok(Some("x".into())));
        let _pending = b.invoke_at(40, put("y"));
        assert!(rec.history().ops.is_empty(), "live logs are not merged");
        a.finish();
        assert_eq!(rec.history().ops.len(), 1);
        drop(b);
        let h = rec.history();
        assert_eq!(
            h.ops.iter().map(|o| o.call).collect::<Vec<_>>(),
            vec![5, 10, 40]
        );
        assert_eq!(h.ops[2].outcome, Outcome::Unknown);
        assert_eq!(h.ops[2].ret, None);
    }

    #[test]
    fn wall_clock_times_are_ordered_and_unknown_has_no_ret() {
        let rec = Recorder::new();
        let mut c = rec.client(7);
        let h = c.invoke(put("x"));
        c.complete(h, Outcome::Ok(None));
        let h = c.invoke(put("y"));
        c.complete(h, Outcome::Unknown);
        let moved = std::thread::spawn(move || c.finish());
        moved.join().unwrap();
        let ops = rec.history().ops;
        assert!(ops[0].call <= ops[0].ret.unwrap());
        assert!(ops[0].ret.unwrap() <= ops[1].call);
        assert_eq!(ops[1].ret, None);
    }
}
