//! Accepting a port's client connections (with a limit on how many are
//! served at once), over TLS where the replica has it, and closing them
//! down. Shared by the native, RESP and metrics ports (the metrics port
//! stays plain).

use crate::options::ServerOptions;
use crate::stream::Conn;
use crate::tls::{AcceptError, TlsIdentity, TlsServer};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// Accept connections forever, serving at most `max` at once: each accepted
/// stream is served by the future `serve` makes (holding a permit until it
/// ends); past the limit, `refuse` answers it instead. Accept errors (e.g.
/// out of file descriptors) are logged and retried after a pause.
pub(crate) async fn accept_limited<S, SF, R, RF>(
    listener: TcpListener,
    max: usize,
    mut serve: S,
    mut refuse: R,
) where
    S: FnMut(TcpStream, SocketAddr) -> SF,
    SF: Future<Output = ()> + Send + 'static,
    R: FnMut(TcpStream) -> RF,
    RF: Future<Output = ()> + Send + 'static,
{
    let limit = Arc::new(Semaphore::new(max));
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        match limit.clone().try_acquire_owned() {
            Ok(permit) => {
                let fut = serve(stream, addr);
                tokio::spawn(async move {
                    fut.await;
                    drop(permit);
                    crate::trim::note_freed(crate::trim::CONNECTION_BYTES);
                });
            }
            Err(_) => drop(tokio::spawn(refuse(stream))),
        }
    }
}

/// What a port says, in its own protocol, to a connection it refuses.
#[derive(Clone, Debug)]
pub(crate) struct Refusals {
    /// Past the connection limit.
    pub too_many: Vec<u8>,
    /// A plain-TCP client on a TLS port (sent in plain text).
    pub plain_on_tls: Vec<u8>,
}

/// How long a new connection may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// [`accept_limited`] for a port that clients and peers speak to: with
/// `tls`, every connection completes a TLS handshake (inside its own task,
/// holding its permit) before `serve` gets it with the identity its
/// certificate proved; a plain-TCP client is told `plain_on_tls` and closed.
pub(crate) async fn accept_conns<S, SF>(
    listener: TcpListener,
    max: usize,
    tls: Option<Arc<TlsServer>>,
    say: Refusals,
    serve: S,
) where
    S: Fn(Conn, SocketAddr, Option<TlsIdentity>) -> SF + Send + Sync + 'static,
    SF: Future<Output = ()> + Send + 'static,
{
    let serve = Arc::new(serve);
    let tls2 = tls.clone();
    let too_many = say.too_many.clone();
    let secured = move |stream: TcpStream, addr: SocketAddr| {
        let (tls, serve, plain) = (tls.clone(), serve.clone(), say.plain_on_tls.clone());
        // `serve` (and what it holds, e.g. a client's place in a drain)
        // is let go once it made the connection's future: a link to a
        // replica, served until the very end, must not keep it.
        async move {
            let Some(tls) = tls else {
                let conn = serve(Conn::Plain(stream), addr, None);
                drop(serve);
                return conn.await;
            };
            match tls.accept(stream, addr, HANDSHAKE_TIMEOUT).await {
                Ok((conn, identity)) => {
                    let conn = serve(conn, addr, Some(identity));
                    drop(serve);
                    conn.await
                }
                Err(AcceptError::NotTls(stream)) => {
                    say_and_close(Conn::Plain(stream), &plain).await
                }
                Err(AcceptError::Failed(_)) => {} // counted and logged
            }
        }
    };
    let refuse = move |stream: TcpStream| {
        let (tls, words) = (tls2.clone(), too_many.clone());
        async move {
            let conn = match (tls, stream.peer_addr()) {
                (None, _) => Conn::Plain(stream),
                (Some(tls), Ok(addr)) => {
                    match tls.accept(stream, addr, Duration::from_secs(1)).await {
                        Ok((conn, _)) => conn,
                        Err(_) => return,
                    }
                }
                (Some(_), Err(_)) => return,
            };
            say_and_close(conn, &words).await;
        }
    };
    accept_limited(listener, max, secured, refuse).await;
}

/// Tell a refused connection why, then close it; what it sent meanwhile is
/// read and dropped for a moment, so the close is not a reset that could
/// discard our words before the client reads them.
pub(crate) async fn say_and_close(conn: Conn, words: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut rd, mut wr) = conn.split();
    let said = async {
        crate::stream::write_flush(&mut wr, words).await?;
        wr.shutdown().await
    };
    if tokio::time::timeout(Duration::from_secs(1), said)
        .await
        .is_err()
    {
        return;
    }
    let mut sink = [0u8; 4096];
    let drain = async { while matches!(rd.read(&mut sink).await, Ok(1..)) {} };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

/// After a connection's reader stopped: the driver may still hold clones of
/// its queue for pending replies (answered within the op timeout); let the
/// writer send them and any error, then stop it, so the socket is closed
/// even when the client never reads (a writer left running keeps it open).
pub(crate) async fn finish_writer(writer: JoinHandle<()>, opts: &ServerOptions) {
    let abort = writer.abort_handle();
    let grace = opts.op_timeout + Duration::from_secs(1);
    if tokio::time::timeout(grace, writer).await.is_err() {
        abort.abort();
    }
}
