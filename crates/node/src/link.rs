//! Handing what a connection's reader decodes to the driver: [`Batcher`]
//! (one channel send per read) and [`pump_link`] (a replica link's reader).

use crate::codec::Frame;
use crate::driver::Input;
use crate::net::FrameReader;
use quorumkv_core::{NodeId, Peer};
use tokio::sync::mpsc;

/// Collects the inputs a connection's reader decoded from one read and hands
/// them to the driver in one channel send — one wake-up and one queue slot
/// instead of one per frame.
pub struct Batcher<M> {
    tx: mpsc::Sender<Input<M>>,
    buf: Vec<Input<M>>,
}

/// The driver is gone.
#[derive(Debug)]
pub struct DriverGone;

impl<M> Batcher<M> {
    const MAX: usize = 256;

    pub fn new(tx: mpsc::Sender<Input<M>>) -> Self {
        Batcher {
            tx,
            buf: Vec::new(),
        }
    }
    /// The driver's channel, for inputs that must not wait in a batch
    /// (flush first to keep their order).
    pub fn sender(&self) -> &mpsc::Sender<Input<M>> {
        &self.tx
    }
    /// Queue an input; hands the batch over when it is full.
    pub async fn push(&mut self, input: Input<M>) -> Result<(), DriverGone> {
        self.buf.push(input);
        if self.buf.len() >= Self::MAX {
            self.flush().await?;
        }
        Ok(())
    }
    pub async fn flush(&mut self) -> Result<(), DriverGone> {
        let input = match self.buf.len() {
            0 => return Ok(()),
            1 => self.buf.pop().expect("one input"),
            _ => Input::Batch(std::mem::take(&mut self.buf)),
        };
        self.tx.send(input).await.map_err(|_| DriverGone)
    }
}

/// Why [`pump_link`] stopped.
#[derive(Debug)]
pub enum LinkEnd {
    /// The driver is gone: the process is shutting down.
    DriverGone,
    /// The link failed or the peer said something it should not have.
    Closed(String),
    /// The peer refused our hello (it said why): a misconfiguration to
    /// report once, not a failure to redial quickly.
    Refused(String),
}

/// What a replica link does with a peer's address book (`Frame::PeerBook`).
pub type HearBook<'a> = &'a (dyn Fn(Vec<(NodeId, String)>) + Send + Sync);

/// Forward the protocol messages arriving on a link from `peer` to the
/// driver — everything one read delivers in one batch — until it fails.
/// `book`: a replica link's handler of the peer's address book.
pub async fn pump_link<M: serde::de::DeserializeOwned>(
    reader: &mut FrameReader,
    peer: Peer,
    tx: &mpsc::Sender<Input<M>>,
    book: Option<HearBook<'_>>,
) -> LinkEnd {
    let mut batch = Batcher::new(tx.clone());
    let why = loop {
        let frame = match reader.try_next::<M>() {
            Ok(Some(f)) => Ok(f),
            Ok(None) => match batch.flush().await {
                Ok(()) => reader.next::<M>().await,
                Err(DriverGone) => return LinkEnd::DriverGone,
            },
            Err(e) => Err(e),
        };
        let input = match frame {
            Ok(Frame::Proto(msg)) => Input::Msg { from: peer, msg },
            // A server's event for this process's clients (client library).
            Ok(Frame::Notify(event)) => Input::Notified { event },
            Ok(Frame::Heartbeat) => continue, // it did its job by arriving
            // A replica's address book (`address_book`), on a replica link.
            Ok(Frame::PeerBook { addrs }) if book.is_some() => {
                book.expect("checked")(addrs);
                continue;
            }
            Ok(Frame::Error { message }) => break format!("peer refused us: {message}"),
            Ok(_) => break "unexpected frame from peer".to_string(),
            Err(e) => break e.to_string(),
        };
        if batch.push(input).await.is_err() {
            return LinkEnd::DriverGone;
        }
    };
    // Deliver what arrived before the failure.
    match batch.flush().await {
        Ok(()) => LinkEnd::Closed(why),
        Err(DriverGone) => LinkEnd::DriverGone,
    }
}
