//! A TCP relay that delays what it forwards: seed 001's client and server
//! round trips for a service that cannot add them itself (ZooKeeper), on a
//! machine whose kernel has no `netem`. Each accepted connection is joined
//! to a new connection to the target; bytes going to the target wait
//! `toward`, bytes coming back wait `back` (each chunk as read, in order:
//! the node runtime's [`LinkDelay`] on an [`OutQueue`]). `quorumkv
//! delay-proxy` runs it from the command line.

use crate::net::{link_queue, LinkDelay, WireSize};
use bytes::{Bytes, BytesMut};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// A chunk of a byte stream, as read.
struct Chunk(Bytes);

impl WireSize for Chunk {
    fn wire_size(&self) -> usize {
        self.0.len()
    }
}

/// Copy `rd` to `wr`, each chunk `delay` after it was read; the write side
/// is shut when `rd` ends.
async fn pump(mut rd: OwnedReadHalf, mut wr: OwnedWriteHalf, delay: LinkDelay) {
    let (tx, mut rx) = link_queue::<Chunk>();
    tx.set_delay(delay);
    let writer = async move {
        while let Some(Chunk(b)) = rx.recv().await {
            if wr.write_all(&b).await.is_err() {
                return;
            }
            rx.written();
        }
        let _ = wr.shutdown().await;
    };
    let reader = async move {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        loop {
            buf.reserve(64 * 1024);
            match rd.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if tx.send(Chunk(buf.split().freeze())).is_err() {
                        return;
                    }
                }
            }
        }
        // `tx` drops here: the writer ends once the queue is empty.
    };
    tokio::join!(reader, writer);
}

/// Relay every connection accepted on `listener` to `to`, delaying each
/// direction; runs until the task is dropped or aborted.
pub async fn relay(listener: TcpListener, to: SocketAddr, toward: LinkDelay, back: LinkDelay) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(e) => {
                // Out of file descriptors, say: wait rather than spin.
                tracing::warn!("delay-proxy: accept failed ({e}); retrying in 100 ms");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            let server = match TcpStream::connect(to).await {
                Ok(s) => s,
                Err(e) => {
                    // The client sees its connection close.
                    tracing::warn!(
                        "delay-proxy: cannot reach {to} ({e}); closing the client's connection"
                    );
                    return;
                }
            };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            let (crd, cwr) = client.into_split();
            let (srd, swr) = server.into_split();
            tokio::join!(pump(crd, swr, toward), pump(srd, cwr, back));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::Instant;

    /// An echo server behind the relay: a round trip takes the two delays
    /// (and not much more), and the bytes come back intact and in order.
    #[tokio::test]
    async fn a_round_trip_takes_both_delays() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                s.write_all(&buf[..n]).await.unwrap();
            }
        });
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = front.local_addr().unwrap();
        let d = |ms| LinkDelay {
            delay: Duration::from_millis(ms),
            ..LinkDelay::default()
        };
        tokio::spawn(relay(front, target, d(30), d(50)));
        let mut c = TcpStream::connect(addr).await.unwrap();
        for round in 0..3u8 {
            let t = Instant::now();
            let msg = [round; 100];
            c.write_all(&msg).await.unwrap();
            let mut got = [0u8; 100];
            c.read_exact(&mut got).await.unwrap();
            let rtt = t.elapsed();
            assert_eq!(got, msg);
            assert!(rtt >= Duration::from_millis(80), "{rtt:?}");
            assert!(rtt < Duration::from_millis(400), "{rtt:?}");
        }
    }
}
