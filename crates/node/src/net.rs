//! Connection plumbing shared by servers and clients: a reader that yields
//! frames and a writer task that coalesces every queued frame into one write.

use crate::codec::{encode, CodecError, Frame, FrameBuf};
use bytes::BytesMut;
use serde::{de::DeserializeOwned, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

/// Flush at least this often while a burst is being coalesced.
const MAX_BATCH_BYTES: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("connection closed")]
    Closed,
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Codec(#[from] CodecError),
}

pub struct FrameReader {
    rd: OwnedReadHalf,
    buf: FrameBuf,
}

impl FrameReader {
    pub fn new(rd: OwnedReadHalf, max_frame: usize) -> Self {
        FrameReader {
            rd,
            buf: FrameBuf::new(max_frame),
        }
    }

    pub async fn next<M: DeserializeOwned>(&mut self) -> Result<Frame<M>, ReadError> {
        loop {
            if let Some(f) = self.buf.next_frame()? {
                return Ok(f);
            }
            let n = self.rd.read_buf(self.buf.buf_mut()).await?;
            if n == 0 {
                return Err(if self.buf.buf_mut().is_empty() {
                    ReadError::Closed
                } else {
                    ReadError::Truncated
                });
            }
        }
    }
}

/// Spawn the writer of a connection. Frames sent to the returned channel are
/// encoded and written in batches: whatever is queued when the task wakes
/// goes out in a single `write_all`. The task ends (and shuts the socket's
/// write side) when every sender is dropped or the peer stops reading.
pub fn spawn_writer<M: Serialize + Send + 'static>(
    mut wr: OwnedWriteHalf,
) -> (mpsc::UnboundedSender<Frame<M>>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Frame<M>>();
    let task = tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        while let Some(f) = rx.recv().await {
            encode(&f, &mut buf);
            while buf.len() < MAX_BATCH_BYTES {
                match rx.try_recv() {
                    Ok(f) => encode(&f, &mut buf),
                    Err(_) => break,
                }
            }
            if wr.write_all(&buf).await.is_err() {
                return;
            }
            buf.clear();
        }
        let _ = wr.shutdown().await;
    });
    (tx, task)
}
