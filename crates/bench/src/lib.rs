//! quorumkv-bench: `quorumkv bench`, the seeds' experiments (docs/src/experiments/index.md)
//! run against our protocols and against real etcd and Redis, with one
//! workload generator, one [`config::BenchConfig`], tables, CSV/JSON and PNGs.
//!
//! Layout: [`config`] (flags → matrix), [`workload`] (PRNG, Zipf, values),
//! [`target`] (what we talk to; [`etcd`] is our etcd gRPC client, `zk` our
//! ZooKeeper client with the `zookeeper` feature;
//! [`durability`] its sync counters), [`runner`]
//! (one point), [`sweep`] (the matrix), [`stats`], [`report`], [`plot`],
//! [`verify`] (`--check`).

pub mod cli;
pub mod config;
pub mod durability;
pub mod etcd;
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
