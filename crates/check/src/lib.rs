//! quorumkv-check (placeholder until its issue lands).
pub mod cli;
