//! The metrics port: a minimal HTTP/1.0 endpoint serving the driver's and
//! the protocol's counters in Prometheus text format at `/metrics`.

use crate::accept::accept_limited;
use crate::driver::Input;
use quorumkv_core::protocol::Protocol;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// A minimal HTTP/1.0 endpoint: `GET /metrics` answers Prometheus text,
/// anything else 404. One request per connection.
pub(crate) async fn accept_metrics<P: Protocol + Send + 'static>(
    listener: TcpListener,
    tx: mpsc::Sender<Input<P::Msg>>,
) {
    let serve = move |stream: TcpStream, _| serve_metrics::<P>(stream, tx.clone());
    // Scrapers are few; more than this at once is a misbehaving client.
    accept_limited(listener, 64, serve, |_| async {}).await;
}

async fn serve_metrics<P: Protocol + Send + 'static>(
    mut stream: TcpStream,
    tx: mpsc::Sender<Input<P::Msg>>,
) {
    let mut req = Vec::with_capacity(512);
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0u8; 1024];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => req.extend_from_slice(&buf[..n]),
            }
        }
    });
    if read.await.is_err() {
        return;
    }
    let (status, body) = if req.starts_with(b"GET /metrics ") || req.starts_with(b"GET /metrics?") {
        let (otx, orx) = oneshot::channel();
        if tx.send(Input::Metrics { reply: otx }).await.is_err() {
            return;
        }
        ("200 OK", orx.await.unwrap_or_default())
    } else {
        (
            "404 Not Found",
            "quorumkv serves /metrics only\n".to_string(),
        )
    };
    let head = format!(
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}
