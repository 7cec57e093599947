//! The metrics port: a minimal HTTP/1.0 endpoint serving the driver's and
//! the protocol's counters in Prometheus text format at `/metrics`, and the
//! probes orchestrators poll: `/healthz` (the replica's driver answers) and
//! `/readyz` (it serves operations and reaches a quorum of its peers, and
//! is not draining: from the first moment of a graceful shutdown it answers
//! 503 `draining`, so that a load balancer stops sending it clients).

use crate::accept::accept_limited;
use crate::driver::Input;
use crate::shutdown::Draining;
use quorumkv_core::protocol::Protocol;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// How long a probe waits for the driver: a driver that does not answer
/// its status within this is reported unhealthy, not waited for.
const PROBE_WAIT: Duration = Duration::from_secs(2);

/// A minimal HTTP/1.0 endpoint: `GET /metrics`, `/healthz`, `/readyz`;
/// anything else 404. One request per connection.
pub(crate) async fn accept_metrics<P: Protocol + Send + 'static>(
    listener: TcpListener,
    tx: mpsc::Sender<Input<P::Msg>>,
    draining: Draining,
) {
    let serve =
        move |stream: TcpStream, _| serve_metrics::<P>(stream, tx.clone(), draining.clone());
    // Scrapers are few; more than this at once is a misbehaving client.
    accept_limited(listener, 64, serve, |_| async {}).await;
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    Healthz,
    Readyz,
    NotFound,
    /// Not GET or HEAD.
    BadMethod,
}

/// The route of a request's first line (`METHOD SP PATH[?QUERY] SP ...`),
/// and whether the body is wanted (not for HEAD).
fn route(req: &[u8]) -> (Route, bool) {
    let line = req
        .split(|b| *b == b'\r' || *b == b'\n')
        .next()
        .unwrap_or(&[]);
    let mut parts = line.split(|b| *b == b' ');
    let method = parts.next().unwrap_or(&[]);
    let target = parts.next().unwrap_or(&[]);
    let path = target.split(|b| *b == b'?').next().unwrap_or(&[]);
    let body = match method {
        b"GET" => true,
        b"HEAD" => false,
        _ => return (Route::BadMethod, true),
    };
    let r = match path {
        b"/metrics" => Route::Metrics,
        b"/healthz" | b"/livez" => Route::Healthz,
        b"/readyz" => Route::Readyz,
        _ => Route::NotFound,
    };
    (r, body)
}

async fn serve_metrics<P: Protocol + Send + 'static>(
    mut stream: TcpStream,
    tx: mpsc::Sender<Input<P::Msg>>,
    draining: Draining,
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
    let (route, with_body) = route(&req);
    let kind = if route == Route::Metrics {
        "text/plain; version=0.0.4"
    } else {
        "text/plain; charset=utf-8"
    };
    let (status, body) = match route {
        Route::Metrics => {
            let (otx, orx) = oneshot::channel();
            if tx.send(Input::Metrics { reply: otx }).await.is_err() {
                return;
            }
            ("200 OK", orx.await.unwrap_or_default())
        }
        // Alive while draining (a liveness probe must not kill it), but
        // no longer ready, without asking the driver.
        Route::Readyz if draining.is_draining() => (
            "503 Service Unavailable",
            "draining: the replica is shutting down\n".to_string(),
        ),
        Route::Healthz | Route::Readyz => probe::<P>(&tx, route == Route::Readyz).await,
        Route::NotFound => (
            "404 Not Found",
            "quorumkv serves /metrics, /healthz and /readyz\n".to_string(),
        ),
        Route::BadMethod => ("405 Method Not Allowed", "only GET and HEAD\n".to_string()),
    };
    let head = format!(
        "HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    if with_body {
        let _ = stream.write_all(body.as_bytes()).await;
    }
    let _ = stream.shutdown().await;
}

/// `/healthz`: 200 when the driver answers its status within
/// [`PROBE_WAIT`] (a replica without peers is alive). `/readyz`: 200 when,
/// besides, it serves operations and reaches a quorum
/// (`NodeStatus::unready`, the rule of `quorumkv health --quorum`); 503
/// with the reason otherwise.
async fn probe<P: Protocol + Send + 'static>(
    tx: &mpsc::Sender<Input<P::Msg>>,
    ready: bool,
) -> (&'static str, String) {
    let (otx, orx) = oneshot::channel();
    let asked = async {
        tx.send(Input::Status { reply: otx }).await.ok()?;
        orx.await.ok()
    };
    let Ok(Some(s)) = tokio::time::timeout(PROBE_WAIT, asked).await else {
        let why = format!("the replica did not answer within {PROBE_WAIT:?}");
        return ("503 Service Unavailable", format!("unhealthy: {why}\n"));
    };
    let what = format!("replica {} ({}), role {}", s.id, s.protocol, s.role);
    match (ready, s.unready(true)) {
        (false, _) => ("200 OK", format!("ok: {what}\n")),
        (true, None) => ("200 OK", format!("ready: {what}\n")),
        (true, Some(why)) => (
            "503 Service Unavailable",
            format!("not ready: {what}: {why}\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_status::NodeStatus;
    use quorumkv_core::protocol::abd::AbdNode;

    /// `GET path` on `addr`: the whole answer.
    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    fn status() -> NodeStatus {
        NodeStatus {
            id: 1,
            protocol: "abd".into(),
            role: "replica".into(),
            version: "0".into(),
            members: vec![1],
            peers_up: vec![],
            durability: "memory".into(),
            uptime_secs: 1,
            persist_records: 0,
            persist_syncs: 0,
            counters: vec![],
            wire: None,
            persist_sync_us: None,
        }
    }

    #[tokio::test]
    async fn readyz_says_draining_at_once_and_healthz_stays_up() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, mut rx) = mpsc::channel(8);
        let (mut stopper, _stop) = crate::shutdown::Shutdown::new();
        tokio::spawn(accept_metrics::<AbdNode>(listener, tx, stopper.draining()));
        // The driver: answers every status request.
        tokio::spawn(async move {
            while let Some(input) = rx.recv().await {
                if let Input::Status { reply } = input {
                    let _ = reply.send(status());
                }
            }
        });
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.0 200"));
        // The drain begins (`_stop`, a client's place, keeps it waiting).
        let by = tokio::time::Instant::now() + Duration::from_millis(10);
        assert!(!stopper.drain_clients(by).await);
        let ready = get(addr, "/readyz").await;
        assert!(ready.starts_with("HTTP/1.0 503"), "{ready}");
        assert!(
            ready.ends_with("draining: the replica is shutting down\n"),
            "{ready}"
        );
        let alive = get(addr, "/healthz").await;
        assert!(alive.starts_with("HTTP/1.0 200"), "{alive}");
    }

    #[test]
    fn routes() {
        let r = |s: &str| route(s.as_bytes());
        assert_eq!(r("GET /metrics HTTP/1.1\r\n\r\n"), (Route::Metrics, true));
        assert_eq!(r("GET /metrics?x=1 HTTP/1.0\r\n"), (Route::Metrics, true));
        assert_eq!(r("GET /healthz HTTP/1.1\r\n"), (Route::Healthz, true));
        assert_eq!(r("HEAD /readyz HTTP/1.1\r\n"), (Route::Readyz, false));
        assert_eq!(r("GET /metricsx HTTP/1.1\r\n"), (Route::NotFound, true));
        assert_eq!(r("GET / HTTP/1.1\r\n"), (Route::NotFound, true));
        assert_eq!(r("POST /readyz HTTP/1.1\r\n"), (Route::BadMethod, true));
        assert_eq!(r(""), (Route::BadMethod, true));
    }
}
