//! Accepting a port's client connections (with a limit on how many are
//! served at once) and closing them down. Shared by the native, RESP and
//! metrics ports.

use crate::options::ServerOptions;
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
