//! A replica's status over the native port (`quorumkv endpoints status`):
//! the client sends `Frame::StatusRequest` on a fresh connection, the
//! replica's driver fills in a [`NodeStatus`] and the connection's writer
//! sends it back as `Frame::Status`.

use crate::codec::{encode_to_bytes, Frame, DEFAULT_MAX_FRAME};
use crate::driver::Input;
use crate::net::{FrameReader, FrameTx};
pub use crate::node_status::NodeStatus;
use crate::tls::ClientTls;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::oneshot;

/// The driver input for a `StatusRequest` on a native connection: the
/// answer goes to `ftx` as a `Frame::Status` once the driver has filled it.
pub fn request_input<M: serde::Serialize + Send + 'static>(ftx: &FrameTx<M>) -> Input<M> {
    let (otx, orx) = oneshot::channel();
    let ftx = ftx.clone();
    tokio::spawn(async move {
        if let Ok(status) = orx.await {
            let _ = ftx.send(Frame::Status(status));
        }
    });
    Input::Status { reply: otx }
}

/// Ask the replica at `addr` for its status.
pub async fn fetch(addr: SocketAddr, timeout: Duration) -> Result<NodeStatus, String> {
    fetch_with(addr, &addr.ip().to_string(), timeout, None).await
}

/// [`fetch`] from `addr` dialled as `host`, over TLS when `tls` is given.
pub async fn fetch_with(
    addr: SocketAddr,
    host: &str,
    timeout: Duration,
    tls: Option<&ClientTls>,
) -> Result<NodeStatus, String> {
    let ask = async {
        let stream = crate::tls::dial(addr, host, tls).await?;
        let (rd, mut wr) = stream.split();
        let req = encode_to_bytes::<()>(&Frame::StatusRequest);
        crate::stream::write_flush(&mut wr, &req)
            .await
            .map_err(|e| e.to_string())?;
        let mut reader = FrameReader::new(rd, DEFAULT_MAX_FRAME);
        match reader.next::<()>().await {
            Ok(Frame::Status(s)) => Ok(s),
            Ok(Frame::Error { message }) => Err(format!("refused: {message}")),
            Ok(_) => Err("unexpected answer (not a quorumkv server?)".into()),
            Err(e) => Err(format!(
                "{e} (an older quorumkv, or not a quorumkv server?)"
            )),
        }
    };
    tokio::time::timeout(timeout, ask)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")))
}
