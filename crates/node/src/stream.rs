//! A connection that is plain TCP or TLS, and its two halves.
//!
//! The plain read half keeps the measured hot path of [`crate::net`]:
//! `readable()` then `try_read_buf` on the socket, no lock and no extra
//! copy. A TLS connection is split with [`tokio::io::split`] (rustls needs
//! both directions of one session) and read with `read_buf`.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

type Tls = tokio_rustls::TlsStream<TcpStream>;

/// One connection of a native, RESP or status port, either side.
pub enum Conn {
    Plain(TcpStream),
    /// Boxed: a TLS session is a few kilobytes, a TCP stream a pointer.
    Tls(Box<Tls>),
}

/// What [`Conn::split`] reads from.
pub enum ConnRead {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<Tls>),
}

/// What [`Conn::split`] writes to. Callers flush after each batch: a TLS
/// record may wait in rustls until flushed (a no-op on plain TCP).
pub enum ConnWrite {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<Tls>),
}

impl Conn {
    pub fn split(self) -> (ConnRead, ConnWrite) {
        match self {
            Conn::Plain(s) => {
                let (r, w) = s.into_split();
                (ConnRead::Plain(r), ConnWrite::Plain(w))
            }
            Conn::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (ConnRead::Tls(r), ConnWrite::Tls(w))
            }
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Conn::Tls(_))
    }

    /// The other side's certificate (DER), on a TLS connection that has one.
    pub fn peer_certificate(&self) -> Option<Vec<u8>> {
        let Conn::Tls(tls) = self else { return None };
        let certs = tls.get_ref().1.peer_certificates()?;
        certs.first().map(|c| c.to_vec())
    }
}

impl From<TcpStream> for Conn {
    fn from(s: TcpStream) -> Conn {
        Conn::Plain(s)
    }
}

impl AsyncRead for ConnRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnRead::Plain(r) => Pin::new(r).poll_read(cx, buf),
            ConnRead::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ConnWrite {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ConnWrite::Plain(w) => Pin::new(w).poll_write(cx, buf),
            ConnWrite::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnWrite::Plain(w) => Pin::new(w).poll_flush(cx),
            ConnWrite::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnWrite::Plain(w) => Pin::new(w).poll_shutdown(cx),
            ConnWrite::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ConnWrite::Plain(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            ConnWrite::Tls(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            ConnWrite::Plain(w) => w.is_write_vectored(),
            ConnWrite::Tls(w) => w.is_write_vectored(),
        }
    }
}

/// Write all of `bytes` and flush (so a TLS record leaves at once).
pub async fn write_flush(wr: &mut ConnWrite, bytes: &[u8]) -> io::Result<()> {
    use tokio::io::AsyncWriteExt;
    wr.write_all(bytes).await?;
    wr.flush().await
}
