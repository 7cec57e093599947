//! quorumkv-bench (placeholder until its issue lands).
pub mod cli;
