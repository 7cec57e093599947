//! quorumkv-node: the tokio runtime around the sans-IO cores — codecs, the
//! driver, the replica server, the client library and local clusters.

pub mod client;
pub mod codec;
pub mod config;
pub mod driver;
pub mod local;
pub mod net;
pub mod resp;
pub mod server;
pub mod storage;
