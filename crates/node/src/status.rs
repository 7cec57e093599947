//! A replica's status over the native port (`quorumkv endpoints status`):
//! the client sends `Frame::StatusRequest` on a fresh connection, the
//! replica's driver fills in a [`NodeStatus`] and the connection's writer
//! sends it back as `Frame::Status`.

use crate::codec::{encode_to_bytes, Frame, DEFAULT_MAX_FRAME};
use crate::driver::Input;
use crate::net::{FrameReader, FrameTx};
use quorumkv_core::protocol::abd;
use quorumkv_core::NodeId;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// What a replica says about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub id: NodeId,
    pub protocol: String,
    /// The replica's part in its protocol: for ABD every replica is an equal
    /// `replica` (no leader), or `recovering` until it has caught up.
    pub role: String,
    pub version: String,
    pub members: Vec<NodeId>,
    /// Peers with a live link right now.
    pub peers_up: Vec<NodeId>,
    pub durability: String,
    pub uptime_secs: u64,
}

impl NodeStatus {
    /// Peers without a live link.
    pub fn peers_down(&self) -> Vec<NodeId> {
        self.members
            .iter()
            .copied()
            .filter(|m| *m != self.id && !self.peers_up.contains(m))
            .collect()
    }
    /// Whether this replica plus the peers it reaches form a majority.
    pub fn quorum_reachable(&self) -> bool {
        (self.peers_up.len() + 1) * 2 > self.members.len()
    }
}

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
    let ask = async {
        let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let (rd, mut wr) = stream.into_split();
        let req = encode_to_bytes::<abd::Msg>(&Frame::StatusRequest);
        wr.write_all(&req).await.map_err(|e| e.to_string())?;
        let mut reader = FrameReader::new(rd, DEFAULT_MAX_FRAME);
        match reader.next::<abd::Msg>().await {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_down_and_quorum() {
        let s = NodeStatus {
            id: 2,
            protocol: "abd".into(),
            role: "replica".into(),
            version: "0".into(),
            members: vec![1, 2, 3, 4, 5],
            peers_up: vec![1, 4],
            durability: "memory".into(),
            uptime_secs: 1,
        };
        assert_eq!(s.peers_down(), vec![3, 5]);
        assert!(s.quorum_reachable());
        let alone = NodeStatus {
            peers_up: vec![1],
            ..s
        };
        assert!(!alone.quorum_reachable(), "2 of 5");
    }
}
