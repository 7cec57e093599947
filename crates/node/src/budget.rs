//! Byte budgets: how much memory the connections of one port may hold in
//! read buffers and queued replies, all together and each on its own.
//!
//! A [`Budget`] is shared by every client connection of a port; a
//! connection's [`Charge`] holds part of it (and is capped on its own) and
//! gives it back when dropped. What a connection would need beyond either
//! bound is refused with an [`OverBudget`] error, which the connection
//! reports to its client before closing.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes shared by all client connections of one port. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Budget {
    inner: Arc<BudgetInner>,
}

#[derive(Debug)]
struct BudgetInner {
    used: AtomicUsize,
    limit: usize,
    refused: AtomicU64,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OverBudget {
    #[error("this connection would hold {want} bytes, over its limit of {cap} bytes")]
    Connection { want: usize, cap: usize },
    #[error(
        "server memory budget exhausted ({used} of {limit} bytes held by all connections of this port); try again later"
    )]
    Server { used: usize, limit: usize },
}

impl Budget {
    pub fn new(limit: usize) -> Self {
        Budget {
            inner: Arc::new(BudgetInner {
                used: AtomicUsize::new(0),
                limit,
                refused: AtomicU64::new(0),
            }),
        }
    }
    /// A budget that never refuses (peer links, the client library).
    pub fn unlimited() -> Self {
        Budget::new(usize::MAX)
    }
    /// Bytes held right now.
    pub fn used(&self) -> usize {
        self.inner.used.load(Ordering::Relaxed)
    }
    pub fn limit(&self) -> usize {
        self.inner.limit
    }
    /// How many times a connection was refused for want of budget.
    pub fn refusals(&self) -> u64 {
        self.inner.refused.load(Ordering::Relaxed)
    }

    /// Take `n` bytes, or refuse without taking anything.
    pub fn take(&self, n: usize) -> Result<(), OverBudget> {
        let limit = self.inner.limit;
        let r = self
            .inner
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(n).filter(|&total| total <= limit)
            });
        r.map(drop).map_err(|used| {
            self.inner.refused.fetch_add(1, Ordering::Relaxed);
            OverBudget::Server { used, limit }
        })
    }

    pub fn give(&self, n: usize) {
        self.inner.used.fetch_sub(n, Ordering::Relaxed);
    }
}

/// The bytes one connection holds against a [`Budget`], at most `cap`.
/// Returned to the budget when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Budget,
    held: usize,
    cap: usize,
}

impl Charge {
    pub fn new(budget: Budget, cap: usize) -> Self {
        Charge {
            budget,
            held: 0,
            cap,
        }
    }
    /// A charge against nothing, capped at `cap`.
    pub fn unlimited(cap: usize) -> Self {
        Charge::new(Budget::unlimited(), cap)
    }
    pub fn held(&self) -> usize {
        self.held
    }
    pub fn cap(&self) -> usize {
        self.cap
    }
    /// Hold `total` bytes from now on (more or fewer than before).
    pub fn set(&mut self, total: usize) -> Result<(), OverBudget> {
        if total > self.cap {
            return Err(OverBudget::Connection {
                want: total,
                cap: self.cap,
            });
        }
        if total > self.held {
            self.budget.take(total - self.held)?;
        } else {
            self.budget.give(self.held - total);
        }
        self.held = total;
        Ok(())
    }
    /// Move what is held to another budget (a connection that turned out
    /// to be a replica link leaves the client budget).
    pub fn move_to(&mut self, budget: Budget, cap: usize) {
        self.budget.give(self.held);
        self.budget = budget;
        self.cap = cap;
        let held = std::mem::take(&mut self.held);
        // An exempt budget never refuses; a smaller one may, and then the
        // connection simply starts again from nothing.
        let _ = self.set(held);
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.give(self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_share_the_budget_and_give_back_on_drop() {
        let b = Budget::new(100);
        let mut a = Charge::new(b.clone(), 80);
        let mut c = Charge::new(b.clone(), 80);
        a.set(60).unwrap();
        assert_eq!(
            c.set(50),
            Err(OverBudget::Server {
                used: 60,
                limit: 100
            })
        );
        assert_eq!(b.refusals(), 1);
        c.set(40).unwrap();
        assert_eq!(b.used(), 100);
        assert!(matches!(a.set(81), Err(OverBudget::Connection { .. })));
        a.set(10).unwrap();
        assert_eq!(b.used(), 50);
        drop(c);
        assert_eq!(b.used(), 10);
        a.move_to(Budget::unlimited(), usize::MAX);
        assert_eq!(b.used(), 0);
        assert_eq!(a.held(), 10);
    }
}
