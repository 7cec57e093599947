//! Graceful shutdown of a replica's connections, in two phases: first the
//! clients' connections stop reading, let their replies go out and close;
//! then the links to other replicas (kept until then so that operations in
//! flight can still reach a quorum) stop too. From the first phase on, the
//! metrics port's `/readyz` says the replica is draining ([`Draining`]).

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Running,
    Clients,
    Links,
}

/// Whether the replica is draining: for what must keep answering while it
/// does (the metrics port), without holding a client's place in the drain.
#[derive(Clone)]
pub(crate) struct Draining(watch::Receiver<Phase>);

impl Draining {
    pub fn is_draining(&self) -> bool {
        *self.0.borrow() >= Phase::Clients
    }
}

/// The replica's side: moves the phases along.
pub(crate) struct Shutdown {
    phase: watch::Sender<Phase>,
    /// Ends (`None`) once every client connection's [`ConnStop`] is gone.
    clients: mpsc::Receiver<()>,
}

/// A connection's side: when to stop reading. Cloned for every connection
/// an accept loop serves.
#[derive(Clone)]
pub(crate) struct ConnStop {
    phase: watch::Receiver<Phase>,
    /// Held while this is a client's connection: the first phase waits for it.
    client: Option<mpsc::Sender<()>>,
}

impl Shutdown {
    /// The controller and the first connection's [`ConnStop`] (to clone).
    pub fn new() -> (Shutdown, ConnStop) {
        let (phase, rx) = watch::channel(Phase::Running);
        let (token, clients) = mpsc::channel(1);
        let stop = ConnStop {
            phase: rx,
            client: Some(token),
        };
        (Shutdown { phase, clients }, stop)
    }

    /// A watch on whether the drain has begun.
    pub fn draining(&self) -> Draining {
        Draining(self.phase.subscribe())
    }

    /// Tell client connections to stop reading, and wait (until `by`) for
    /// all of them to be gone: their pending replies sent, their sockets
    /// closed. True if they all went in time.
    pub async fn drain_clients(&mut self, by: Instant) -> bool {
        self.advance(Phase::Clients);
        tokio::time::timeout_at(by, self.clients.recv())
            .await
            .is_ok()
    }

    /// Tell the links to other replicas to stop reading.
    pub fn close_links(&self) {
        self.advance(Phase::Links);
    }

    /// Phases only move forward.
    fn advance(&self, to: Phase) {
        self.phase.send_if_modified(|p| {
            let later = to > *p;
            *p = (*p).max(to);
            later
        });
    }
}

impl ConnStop {
    /// Resolves when this connection should stop reading (or the replica
    /// is gone altogether).
    pub async fn stopped(&mut self) {
        let at = match self.client {
            Some(_) => Phase::Clients,
            None => Phase::Links,
        };
        let _ = self.phase.wait_for(|p| *p >= at).await;
    }

    /// This connection is a link to another replica: it stops last.
    pub fn become_link(&mut self) {
        self.client = None;
    }
}
