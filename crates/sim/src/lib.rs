//! quorumkv-sim (placeholder until its issue lands).
pub mod cli;
