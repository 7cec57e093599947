//! TLS 1.3 (rustls, `ring` provider) for every port that speaks to clients
//! or peers: the native port (clients and replica links share it), the RESP
//! port and the status request. The metrics HTTP port stays plain.
//!
//! One cluster CA signs everything. A replica's certificate names it with
//! the DNS SAN `replica-<id>.quorumkv` (plus the hosts clients dial) and
//! serves both ways: as the server certificate of its ports and as the
//! client certificate of the links it dials (mutual TLS). A connection that
//! says it is replica N must have presented a certificate naming replica N
//! ([`TlsIdentity`]). Client certificates are optional unless
//! `client_cert_auth` (as etcd's `--client-cert-auth`).
//!
//! A replica re-reads its files on SIGHUP ([`TlsServer::reload_on_sighup`]):
//! new connections use the new certificate; a bad file is logged and the
//! old configuration kept.

mod names;

pub use names::{cert_names, CertNames};

use crate::stream::Conn;
use anyhow::Context;
use quorumkv_core::NodeId;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpStream;

/// TLS handshakes this process refused or that failed (plain TCP on a TLS
/// port, an unknown CA, a missing client certificate, a timeout), for INFO
/// and metrics.
pub static TLS_HANDSHAKE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// A replica's TLS files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// The cluster CA (PEM): peers' and clients' certificates must chain to it.
    pub ca: PathBuf,
    /// This replica's certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Every connection must present a certificate signed by the CA.
    pub client_cert_auth: bool,
}

/// Who the other side of an accepted TLS connection proved to be.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsIdentity {
    /// The replica its certificate names (`replica-<n>.quorumkv`), if one.
    pub replica: Option<NodeId>,
    /// The common name of its client certificate, if it presented one.
    pub client: Option<String>,
}

/// The DNS name a replica's certificate carries and peers verify.
pub fn replica_name(id: NodeId) -> String {
    format!("replica-{id}.quorumkv")
}

/// The replica `name` is the DNS SAN of, if it is one.
pub fn replica_of_name(name: &str) -> Option<NodeId> {
    let n = name.strip_prefix("replica-")?.strip_suffix(".quorumkv")?;
    n.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| n.parse().ok())?
}

impl TlsIdentity {
    /// The identity a verified certificate gives (none without one). A
    /// certificate naming two replicas names none.
    pub fn of(cert: Option<&CertificateDer<'_>>) -> TlsIdentity {
        let Some(names) = cert.and_then(|c| cert_names(c)) else {
            return TlsIdentity::default();
        };
        let mut replicas = names.dns.iter().filter_map(|n| replica_of_name(n));
        let replica = match (replicas.next(), replicas.next()) {
            (Some(r), None) => Some(r),
            _ => None,
        };
        TlsIdentity {
            replica,
            client: names.common_name,
        }
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

const TLS13_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

fn load_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("cannot read certificates from {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("invalid PEM in {}", path.display()))?;
    if certs.is_empty() {
        anyhow::bail!("{}: no CERTIFICATE in it", path.display());
    }
    Ok(certs)
}

fn load_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path)
        .with_context(|| format!("cannot read a private key from {}", path.display()))
}

fn load_roots(ca: &Path) -> anyhow::Result<Arc<RootCertStore>> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(ca)? {
        roots
            .add(cert)
            .with_context(|| format!("{}: not a usable CA certificate", ca.display()))?;
    }
    Ok(Arc::new(roots))
}

/// A replica's server side: its certificate, and client certificates
/// verified against the CA (required only with `client_cert_auth`, so that
/// clients without one and peers with one share the native port).
pub fn server_config(s: &TlsSettings) -> anyhow::Result<ServerConfig> {
    let provider = provider();
    let verifier =
        WebPkiClientVerifier::builder_with_provider(load_roots(&s.ca)?, provider.clone());
    let verifier = match s.client_cert_auth {
        true => verifier.build(),
        false => verifier.allow_unauthenticated().build(),
    }
    .context("cannot build the client certificate verifier")?;
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(TLS13_ONLY)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(load_certs(&s.cert)?, load_key(&s.key)?)
        .with_context(|| {
            format!(
                "certificate {} and key {} do not go together",
                s.cert.display(),
                s.key.display()
            )
        })?;
    // Clients keep their connections: resumption would buy nothing.
    cfg.send_tls13_tickets = 0;
    Ok(cfg)
}

/// A client side trusting the CA `ca`, presenting `cert_key` if given.
pub fn client_config(ca: &Path, cert_key: Option<(&Path, &Path)>) -> anyhow::Result<ClientConfig> {
    let provider = provider();
    let verifier = WebPkiServerVerifier::builder_with_provider(load_roots(ca)?, provider.clone())
        .build()
        .context("cannot build the server certificate verifier")?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(TLS13_ONLY)?
        .with_webpki_verifier(verifier);
    Ok(match cert_key {
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
            .with_context(|| {
                format!(
                    "certificate {} and key {} do not go together",
                    cert.display(),
                    key.display()
                )
            })?,
        None => builder.with_no_client_auth(),
    })
}

/// Why an accepted connection got no TLS session.
#[derive(Debug)]
pub enum AcceptError {
    /// Its first byte is not a TLS handshake: a plain-TCP client. The port
    /// may still tell it so, in plain text and its own protocol.
    NotTls(TcpStream),
    /// The handshake failed (already counted and logged).
    Failed(String),
}

/// What a port tells a plain-TCP client before closing.
pub const PLAIN_ON_TLS_PORT: &str =
    "this port requires TLS (quorumkv clients: --tls-ca FILE, or a cluster file with [tls])";

/// A replica's TLS: the server side of its ports and the client side of the
/// links it dials, both re-read from the files on SIGHUP.
pub struct TlsServer {
    settings: TlsSettings,
    server: RwLock<Arc<ServerConfig>>,
    peer: RwLock<Arc<ClientConfig>>,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl TlsServer {
    pub fn load(settings: TlsSettings) -> anyhow::Result<Arc<TlsServer>> {
        let (server, peer) = Self::configs(&settings)?;
        Ok(Arc::new(TlsServer {
            settings,
            server: RwLock::new(server),
            peer: RwLock::new(peer),
        }))
    }

    fn configs(s: &TlsSettings) -> anyhow::Result<(Arc<ServerConfig>, Arc<ClientConfig>)> {
        let server = server_config(s)?;
        let peer = client_config(&s.ca, Some((&s.cert, &s.key)))?;
        Ok((Arc::new(server), Arc::new(peer)))
    }

    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// Read the files again; on any error keep what is in use.
    pub fn reload(&self) -> anyhow::Result<()> {
        let (server, peer) = Self::configs(&self.settings)?;
        *self.server.write().expect("no poisoning") = server;
        *self.peer.write().expect("no poisoning") = peer;
        Ok(())
    }

    /// Reload on every SIGHUP, until the task is aborted.
    pub fn reload_on_sighup(self: &Arc<Self>) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
        let me = self.clone();
        Ok(tokio::spawn(async move {
            while hup.recv().await.is_some() {
                match me.reload() {
                    Ok(()) => tracing::info!(
                        cert = %me.settings.cert.display(),
                        "SIGHUP: TLS certificates reloaded; new connections use them"
                    ),
                    Err(e) => tracing::warn!(
                        "SIGHUP: TLS certificates not reloaded, the old ones stay in use: {e:#}"
                    ),
                }
            }
        }))
    }

    /// The server side of a TLS handshake on an accepted connection,
    /// within `timeout`; failures are counted and logged (rate-limited).
    pub async fn accept(
        &self,
        stream: TcpStream,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<(Conn, TlsIdentity), AcceptError> {
        let mut first = [0u8; 1];
        let peeked = tokio::time::timeout(timeout, stream.peek(&mut first)).await;
        let failed = |why: String| {
            note_failure(addr, &why);
            Err(AcceptError::Failed(why))
        };
        match peeked {
            // 0x16: a TLS handshake record (the ClientHello).
            Ok(Ok(1..)) if first[0] == 0x16 => {}
            Ok(Ok(1..)) => {
                note_failure(addr, "plain TCP on a TLS port");
                return Err(AcceptError::NotTls(stream));
            }
            // A bare TCP connect (a port check): no handshake was tried.
            Ok(Ok(0)) => return Err(AcceptError::Failed("closed before the handshake".into())),
            Ok(Err(e)) => return failed(e.to_string()),
            Err(_) => return failed(format!("no handshake within {timeout:?}")),
        }
        let config = self.server.read().expect("no poisoning").clone();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let tls = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => return failed(e.to_string()),
            Err(_) => return failed(format!("handshake not finished within {timeout:?}")),
        };
        let certs = tls.get_ref().1.peer_certificates();
        let identity = TlsIdentity::of(certs.and_then(|c| c.first()));
        Ok((Conn::Tls(Box::new(tls.into())), identity))
    }

    /// The client side of a link to replica `peer`: its certificate must
    /// name it, and ours is presented.
    pub async fn dial_peer(&self, stream: TcpStream, peer: NodeId) -> std::io::Result<Conn> {
        let config = self.peer.read().expect("no poisoning").clone();
        connect_tls(config, stream, &replica_name(peer)).await
    }
}

/// Count a failed handshake and log it, at most once a second.
fn note_failure(addr: SocketAddr, why: &str) {
    static LAST_LOGGED: AtomicU64 = AtomicU64::new(0);
    let failures = TLS_HANDSHAKE_FAILURES.fetch_add(1, Ordering::Relaxed) + 1;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if LAST_LOGGED.swap(now, Ordering::Relaxed) != now {
        tracing::debug!(%addr, failures, "TLS handshake refused: {why}");
    }
}

/// TLS for the client library, the CLI and status requests.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls").finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Trust the cluster CA `ca`; present `cert`/`key` when given (needed
    /// where the replicas run with `client_cert_auth`).
    pub fn from_files(ca: &Path, cert_key: Option<(&Path, &Path)>) -> anyhow::Result<ClientTls> {
        Ok(ClientTls {
            config: Arc::new(client_config(ca, cert_key)?),
        })
    }

    /// A TLS session over `stream` with the server that `host` (a name or
    /// an address, as dialled) names.
    pub async fn connect(&self, stream: TcpStream, host: &str) -> std::io::Result<Conn> {
        connect_tls(self.config.clone(), stream, host).await
    }
}

/// Connect to `addr` (dialled as `host`), with TLS when `tls` is given.
/// Errors say what failed, for the caller to prefix with the endpoint.
pub async fn dial(addr: SocketAddr, host: &str, tls: Option<&ClientTls>) -> Result<Conn, String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(Conn::Plain(stream));
    };
    tls.connect(stream, host).await.map_err(|e| {
        let hint = match e.to_string() {
            m if m.contains("InvalidContentType") || m.contains("corrupt message") => {
                " (does this server run without TLS?)"
            }
            m if m.contains("NotValidForName") || m.contains("not valid for name") => {
                " (the server's certificate does not name the host dialled)"
            }
            m if m.contains("UnknownIssuer") || m.contains("BadSignature") => {
                " (the server's certificate is not signed by the CA given)"
            }
            _ => "",
        };
        format!("TLS handshake failed: {e}{hint}")
    })
}

async fn connect_tls(
    config: Arc<ClientConfig>,
    stream: TcpStream,
    host: &str,
) -> std::io::Result<Conn> {
    let name = ServerName::try_from(host.to_string()).map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{host}: {e}"))
    })?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await?;
    Ok(Conn::Tls(Box::new(tls.into())))
}

/// The host part of `HOST:PORT` (`[::1]:7001` gives `::1`), as TLS verifies it.
pub fn host_of(endpoint: &str) -> &str {
    let host = endpoint.rsplit_once(':').map_or(endpoint, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_names_round_trip_and_nothing_else_is_one() {
        assert_eq!(replica_name(3), "replica-3.quorumkv");
        assert_eq!(replica_of_name("replica-3.quorumkv"), Some(3));
        assert_eq!(replica_of_name("replica-12.quorumkv"), Some(12));
        for not in [
            "replica-.quorumkv",
            "replica-3.quorumkv.evil",
            "xreplica-3.quorumkv",
            "replica-+3.quorumkv",
            "replica-3",
        ] {
            assert_eq!(replica_of_name(not), None, "{not}");
        }
    }

    fn cert(cn: &str, sans: &[&str]) -> CertificateDer<'static> {
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn identities_come_from_the_certificates_names() {
        let r2 = cert(
            "quorumkv replica 2",
            &["replica-2.quorumkv", "127.0.0.1", "localhost"],
        );
        let id = TlsIdentity::of(Some(&r2));
        assert_eq!(id.replica, Some(2));
        assert_eq!(id.client.as_deref(), Some("quorumkv replica 2"));
        let names = cert_names(&r2).unwrap();
        assert_eq!(
            names.dns,
            ["replica-2.quorumkv", "localhost"],
            "IP SANs are not DNS names"
        );
        let alice = TlsIdentity::of(Some(&cert("alice", &[])));
        assert_eq!(
            (alice.replica, alice.client.as_deref()),
            (None, Some("alice"))
        );
        // A certificate naming two replicas names none.
        let both = cert("x", &["replica-2.quorumkv", "replica-3.quorumkv"]);
        assert_eq!(TlsIdentity::of(Some(&both)).replica, None);
        assert_eq!(TlsIdentity::of(None), TlsIdentity::default());
    }

    #[test]
    fn hosts_of_endpoints() {
        assert_eq!(host_of("127.0.0.1:7001"), "127.0.0.1");
        assert_eq!(host_of("qkv1:7001"), "qkv1");
        assert_eq!(host_of("[::1]:7001"), "::1");
    }
}
