//! quorumkv-node: the tokio runtime around the sans-IO cores — codecs, the
//! driver, the replica server, the client library and local clusters.

mod accept;
pub mod address_book;
pub mod auth;
pub mod budget;
pub mod client;
pub mod codec;
pub mod config;
pub mod cpu_share;
#[doc(hidden)]
pub mod decoder_check;
pub mod delay_proxy;
pub mod driver;
pub mod guard;
pub mod heartbeat;
pub mod link;
pub mod local;
pub mod member;
pub mod member_update;
mod metrics_http;
pub mod net;
mod node_status;
mod options;
pub mod peer_auth;
mod peer_dial;
pub mod resp;
mod resp_auth;
pub mod resp_commands;
mod resp_multi;
pub mod resp_render;
mod resp_server;
mod resp_watch;
pub mod server;
mod shutdown;
pub mod snapshot;
pub mod status;
pub mod storage;
pub mod stream;
pub mod tls;
pub mod trim;
pub mod version;
pub mod zk;
pub mod zk_recipes;
pub mod zkwire;
