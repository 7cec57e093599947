//! quorumkv-node: the tokio runtime around the sans-IO cores — codecs, the
//! driver, the replica server, the client library and local clusters.

pub mod budget;
pub mod client;
pub mod codec;
pub mod config;
#[doc(hidden)]
pub mod decoder_check;
pub mod driver;
pub mod local;
mod metrics_http;
pub mod net;
pub mod resp;
pub mod resp_commands;
mod resp_multi;
mod resp_server;
pub mod server;
pub mod status;
pub mod storage;
pub mod trim;
