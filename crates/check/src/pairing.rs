//! Invocations and completions written on separate lines (Jepsen logs and
//! histories, Porcupine's EDN), paired into operations.
use std::collections::HashMap;

use crate::history::{HistoryError, Op, Operation, Outcome};

/// Pairs invocations with completions per process. `complete` returns the
/// outcome; unmatched invocations end with an unknown outcome. Times are
/// the line numbers unless given (`invoke_at`, `complete_at`).
#[derive(Default)]
pub(crate) struct Pairing {
    open: HashMap<u64, usize>,
    pub(crate) ops: Vec<Operation>,
}

impl Pairing {
    pub(crate) fn invoke(&mut self, line: usize, process: u64, op: Op) -> Result<(), HistoryError> {
        self.invoke_at(line, line as u64, process, op)
    }

    pub(crate) fn invoke_at(
        &mut self,
        line: usize,
        t: u64,
        process: u64,
        op: Op,
    ) -> Result<(), HistoryError> {
        if self.open.contains_key(&process) {
            return Err(HistoryError::at(
                line,
                format!("process {process} invoked twice"),
            ));
        }
        self.open.insert(process, self.ops.len());
        self.ops.push(Operation {
            client: process,
            op,
            call: t,
            ret: None,
            outcome: Outcome::Unknown,
        });
        Ok(())
    }

    /// Completes the open operation of `process`; returns it for checks.
    pub(crate) fn complete(
        &mut self,
        line: usize,
        process: u64,
        outcome: Outcome,
    ) -> Result<&mut Operation, HistoryError> {
        self.complete_at(line, line as u64, process, outcome)
    }

    pub(crate) fn complete_at(
        &mut self,
        line: usize,
        t: u64,
        process: u64,
        outcome: Outcome,
    ) -> Result<&mut Operation, HistoryError> {
        let i = self.open.remove(&process).ok_or_else(|| {
            HistoryError::at(
                line,
                format!("process {process} completes without an invocation"),
            )
        })?;
        let o = &mut self.ops[i];
        if t < o.call {
            return Err(HistoryError::at(
                line,
                format!("field :time: {t} is before the invocation's {}", o.call),
            ));
        }
        o.ret = (outcome != Outcome::Unknown).then_some(t);
        o.outcome = outcome;
        Ok(o)
    }
}
