//! How one operation against a target failed: what every client (ours,
//! etcd's, Redis's, ZooKeeper's) reports and the history records.

/// Why an operation failed, and whether it may still take effect.
#[derive(Clone, Debug, PartialEq)]
pub struct OpFailure {
    /// Short, stable reason for the failure table ("timeout", "rejected", …).
    pub reason: String,
    /// True when the operation certainly had no effect. False = outcome
    /// unknown; histories record it as such.
    pub definite: bool,
}

impl OpFailure {
    pub fn unknown(reason: impl Into<String>) -> OpFailure {
        OpFailure {
            reason: reason.into(),
            definite: false,
        }
    }
    pub fn definite(reason: impl Into<String>) -> OpFailure {
        OpFailure {
            reason: reason.into(),
            definite: true,
        }
    }
}
