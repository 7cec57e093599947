//! The TLS flags of the client commands (`get`, `put`, `del`, `endpoints
//! status`): the cluster CA to trust and a client certificate to present,
//! else what the cluster file's `[tls]` says.

use clap::Args as ClapArgs;
use quorumkv_node::config::ClusterFile;
use quorumkv_node::tls::ClientTls;
use std::path::{Path, PathBuf};

#[derive(ClapArgs, Debug, Clone, Default)]
pub struct TlsArgs {
    /// Connect over TLS, trusting this cluster CA certificate (PEM; `quorumkv
    /// cert ca` made it). Default: $QUORUMKV_TLS_CA, else the cluster file's
    /// [tls] (with --cluster / $QUORUMKV_CLUSTER), else plain TCP.
    #[arg(long, value_name = "FILE", env = "QUORUMKV_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// Present this client certificate (PEM; needed where replicas run with
    /// client_cert_auth). Default: $QUORUMKV_CLIENT_CERT, else the cluster file's [tls] client_cert.
    #[arg(
        long = "cert",
        id = "client_cert",
        value_name = "FILE",
        env = "QUORUMKV_CLIENT_CERT",
        requires = "client_key"
    )]
    cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long = "key",
        id = "client_key",
        value_name = "FILE",
        env = "QUORUMKV_CLIENT_KEY",
        requires = "client_cert"
    )]
    key: Option<PathBuf>,
}

impl TlsArgs {
    /// The TLS to connect with; `cluster` is the cluster file the endpoints
    /// came from, if any.
    pub fn client_tls(&self, cluster: Option<&Path>) -> anyhow::Result<Option<ClientTls>> {
        let file = match cluster {
            Some(path) => ClusterFile::load(path)?.tls,
            None => None,
        };
        let ca = match (&self.tls_ca, &file) {
            (Some(ca), _) => ca.clone(),
            (None, Some(t)) => t.ca_path()?,
            (None, None) if self.cert.is_some() => {
                anyhow::bail!("--cert needs --tls-ca (the CA the replicas' certificates chain to)")
            }
            (None, None) => return Ok(None),
        };
        let cert_key = match (&self.cert, &self.key) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            _ => file.as_ref().and_then(|t| t.client_cert_key()),
        };
        let cert_key = cert_key.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        Ok(Some(ClientTls::from_files(&ca, cert_key)?))
    }
}
