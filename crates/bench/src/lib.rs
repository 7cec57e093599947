//! quorumkv-bench: `quorumkv bench`, the seeds' experiments (docs/src/experiments/index.md)
//! run against our protocols and against real etcd and Redis, with one
//! workload generator, one [`config::BenchConfig`], tables, CSV/JSON and PNGs.
//!
//! Layout, from the bottom up (imports point down only): [`config`] (flags →
//! matrix, every workload's settings), [`failure`] (how an operation
//! failed), [`workload`] (PRNG, Zipf, values), [`target`] (what we talk to;
//! [`etcd`] is our etcd gRPC client, `zk` our ZooKeeper client with the
//! `zookeeper` feature; [`durability`] its sync counters), [`floors`] (the
//! host's disk and loopback floors), [`stats`],
//! [`report`], [`verify`] (`--check`), [`runner`] (one point), [`chart`]
//! and [`plot`] (PNGs), [`sweep`] (the matrix), [`lock`] and [`znode_ops`]
//! (the coordination workloads), [`cli`].

pub mod chart;
pub mod cli;
pub mod config;
pub mod durability;
pub mod etcd;
pub mod failure;
pub mod floors;
pub mod lock;
pub mod plot;
pub mod plot_scaling;
pub mod report;
pub mod runner;
pub mod stats;
pub mod sweep;
pub mod target;
pub mod verify;
pub mod workload;
#[cfg(feature = "zookeeper")]
pub mod zk;
pub mod znode_ops;

pub use config::BenchConfig;
