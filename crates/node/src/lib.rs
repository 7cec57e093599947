//! quorumkv-node: the tokio runtime around the sans-IO cores — codecs, the
//! driver, the replica server, the client library and local clusters.

pub mod budget;
pub mod client;
pub mod codec;
pub mod config;
pub mod driver;
pub mod local;
mod metrics_http;
pub mod net;
pub mod resp;
mod resp_server;
pub mod server;
pub mod storage;
pub mod trim;
