//! Dialling a peer by name: a replica's advertised `HOST:PORT` is resolved
//! afresh at every dial, so a peer that comes back at another address (a
//! recreated container, a rescheduled pod: the name stays, the address
//! changes) is found on the next redial instead of dialled at its old
//! address forever.

use crate::stream::Conn;
use crate::tls::TlsServer;
use quorumkv_core::NodeId;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpStream;

/// How long one resolution and one connection attempt may take each.
const DIAL_TIMEOUT: Duration = Duration::from_secs(3);

/// Resolve `name` now (the client library's resolver: an address as is, a
/// name to its first IPv4 address).
pub async fn resolve_now(name: String) -> Result<SocketAddr, String> {
    let deadline = tokio::time::Instant::now() + DIAL_TIMEOUT;
    crate::client::resolve_endpoint(&name, deadline)
        .await
        .map_err(|e| e.to_string())
}

/// Dials one peer, resolving its name each time.
pub struct PeerDialer<R> {
    name: String,
    resolve: R,
    /// The address of the last resolution, to log a change.
    last: Option<SocketAddr>,
}

impl<R, F> PeerDialer<R>
where
    R: Fn(String) -> F,
    F: Future<Output = Result<SocketAddr, String>>,
{
    pub fn new(name: String, resolve: R) -> Self {
        PeerDialer {
            name,
            resolve,
            last: None,
        }
    }

    /// Dial `name` from the next dial on (an address book update); said
    /// once in the log.
    pub fn rename(&mut self, name: String) {
        if name != self.name {
            tracing::warn!("peer {} is dialled at {name} from now on", self.name);
            self.name = name;
        }
    }

    /// The address `connect` dialled last.
    #[cfg(test)]
    pub fn last(&self) -> Option<SocketAddr> {
        self.last
    }

    /// [`Self::connect`], then (with `tls`) a TLS session in which peer
    /// `id`'s certificate must name it and ours is presented.
    pub async fn connect_to_peer(
        &mut self,
        id: NodeId,
        tls: Option<&TlsServer>,
    ) -> Result<Conn, String> {
        let stream = self.connect().await?;
        let _ = stream.set_nodelay(true);
        let Some(tls) = tls else {
            return Ok(Conn::Plain(stream));
        };
        match tokio::time::timeout(DIAL_TIMEOUT, tls.dial_peer(stream, id)).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(format!("TLS with {} failed: {e}", self.name)),
            Err(_) => Err(format!(
                "TLS with {}: no handshake in {DIAL_TIMEOUT:?}",
                self.name
            )),
        }
    }

    /// Resolve the name again and connect to what it names now.
    pub async fn connect(&mut self) -> Result<TcpStream, String> {
        let addr = (self.resolve)(self.name.clone()).await?;
        if self.last.is_some_and(|old| old != addr) {
            tracing::info!(
                "peer {} moved from {} to {addr}",
                self.name,
                self.last.expect("checked")
            );
        }
        self.last = Some(addr);
        match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(format!("dial {} ({addr}) failed: {e}", self.name)),
            Err(_) => Err(format!(
                "dial {} ({addr}): no answer in {DIAL_TIMEOUT:?}",
                self.name
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn a_name_is_resolved_again_at_every_dial() {
        let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let b = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        // What the "DNS" says the name is, changed between dials.
        let now = Arc::new(Mutex::new(aa));
        let dns = now.clone();
        let mut d = PeerDialer::new("qkv2:7001".into(), move |name: String| {
            let at = *dns.lock().unwrap();
            async move {
                assert_eq!(name, "qkv2:7001");
                Ok(at)
            }
        });
        let s = d.connect().await.unwrap();
        assert_eq!(s.peer_addr().unwrap(), aa);
        a.accept().await.unwrap();
        *now.lock().unwrap() = ba;
        drop(a); // the old address is gone
        let s = d.connect().await.unwrap();
        assert_eq!(s.peer_addr().unwrap(), ba);
        assert_eq!(d.last(), Some(ba));
        b.accept().await.unwrap();
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_is_an_error_not_a_panic() {
        let mut d = PeerDialer::new("qkv9:7001".into(), |_| async {
            Err::<SocketAddr, _>("qkv9:7001: cannot resolve".to_string())
        });
        assert!(d.connect().await.unwrap_err().contains("cannot resolve"));
        let mut real = PeerDialer::new("localhost:1".into(), resolve_now);
        // localhost resolves; port 1 refuses.
        let e = real.connect().await.unwrap_err();
        assert!(e.contains("localhost:1 (127.0.0.1:1)"), "{e}");
    }
}
