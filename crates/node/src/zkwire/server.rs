//! The ZooKeeper client port of a replica: each TCP connection serves one
//! session of the coordination service (new, or resumed from a connection
//! to any replica: `connect`), served by this replica's driver
//! exactly as a native connection's requests are (`Input::Client` with the
//! session as the op's client id, the connection as the watch owner).
//!
//! A reader task decodes packets and hands each request's operations to
//! the driver in order; the driver answers them into the connection's
//! queue, where it also pushes the connection's watch events, so the
//! queue holds answers and events in the order the core produced them. A
//! writer task writes the replies in request order, each watch event
//! before the replies answered after it and after those answered before
//! it (the reply that set a watch precedes its event, as in ZooKeeper).

use super::four::{four_letter, is_word};
use super::jute::{frame, packet_len, Reader, Writer};
use super::login::{Admit, Gate};
use super::ops::{count_reply, error_reply, is_close, notification, plan, reply, Plan, Shape};
use super::proto::{err, ConnectRequest, ConnectResponse, Packet, ZkRequest};
use super::session::{new_session, password_checks, PASSWD_LEN};
use super::walk::{count_below, driver_read};
use crate::accept::{accept_conns, finish_writer, Refusals};
use crate::codec::Frame;
use crate::driver::{Input, ReplyTo};
use crate::link::Batcher;
use crate::net::{ConnLimits, FrameTx, InBuf, OutQueueRx};
use crate::options::ServerOptions;
use crate::peer_auth::ClusterSecret;
use crate::shutdown::ConnStop;
use crate::stream::{Conn, ConnRead, ConnWrite};
use crate::tls::TlsServer;
use bytes::Bytes;
use quorumkv_core::protocol::Protocol;
use quorumkv_core::znode::{ZkError, ZnodeOp, ZnodeReply};
use quorumkv_core::{OpId, Peer, Request, Response};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

/// ZooKeeper's default `tickTime`; sessions get 2 to 20 ticks, as there.
pub const TICK_MS: i32 = 2000;

/// Requests one connection may have in flight; past it the reader waits.
/// Their answers wait in memory until written, so this bounds what a
/// connection holds: 64 replies of at most a znode's 1 MiB each (as the
/// native port's 64 MiB of queued replies).
const MAX_OUTSTANDING: usize = 64;

/// How long a reply or event may take to be written when the client reads
/// nothing, before the connection is closed (`--idle-timeout`, or this
/// when there is none).
const WRITE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// Set in the connection id of every ZooKeeper-port connection (RESP
/// ones have bit 62, native ones neither).
const ZK_CONN: u64 = 1 << 61;

/// Counters for `srvr` and `mntr`.
pub(super) static CONNECTIONS: AtomicU64 = AtomicU64::new(0);
pub(super) static OPEN: AtomicU64 = AtomicU64::new(0);
pub(super) static RECEIVED: AtomicU64 = AtomicU64::new(0);
pub(super) static SENT: AtomicU64 = AtomicU64::new(0);

type Tx<M> = mpsc::Sender<Input<M>>;

pub(crate) async fn accept_zk<P: Protocol + Send + 'static>(
    listener: TcpListener,
    tx: Tx<P::Msg>,
    opts: Arc<ServerOptions>,
    limits: ConnLimits,
    stop: ConnStop,
    tls: Option<Arc<TlsServer>>,
) {
    let max = opts.max_connections;
    let serve = move |stream: Conn, remote, _| {
        let (tx, opts, limits) = (tx.clone(), opts.clone(), limits.clone());
        let stop = stop.clone();
        async move {
            OPEN.fetch_add(1, Ordering::Relaxed);
            let gate = Gate::new(opts.users.clone(), remote);
            serve_zk::<P>((stream, gate), tx, &opts, &limits, stop).await;
            OPEN.fetch_sub(1, Ordering::Relaxed);
        }
    };
    // ZooKeeper closes a connection it cannot serve without a word.
    let say = Refusals {
        too_many: Vec::new(),
        plain_on_tls: Vec::new(),
    };
    accept_conns(listener, max, tls, say, serve).await;
}

/// The first bytes of a connection: a four-letter word or a packet.
enum First {
    Word([u8; 4]),
    Packet(Bytes),
}

/// Read until `buf` holds a whole packet (or, first, a four-letter word).
/// `None`: the connection ended, broke, timed out, sent an oversized
/// packet, or the server is stopping.
async fn next_packet(
    buf: &mut InBuf,
    rd: &mut ConnRead,
    stop: &mut ConnStop,
    max: usize,
    first: bool,
) -> Option<First> {
    loop {
        let data = buf.data();
        if first && data.len() >= 4 && is_word(&data[..4]) {
            let mut w = [0u8; 4];
            w.copy_from_slice(&data[..4]);
            return Some(First::Word(w));
        }
        match packet_len(data, max) {
            Ok(Some(n)) => {
                let p = data.split_to(4 + n).split_off(4).freeze();
                buf.took_requests();
                return Some(First::Packet(p));
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!("ZooKeeper port: {e}; closing");
                return None;
            }
        }
        let read = tokio::select! {
            biased;
            () = stop.stopped() => return None,
            r = buf.fill(rd, None) => r,
        };
        if !matches!(read, Ok(n) if n > 0) {
            return None;
        }
    }
}

/// One connection: the connect handshake (or a four-letter word), then
/// requests until either side closes.
async fn serve_zk<P: Protocol + Send + 'static>(
    (stream, mut gate): (Conn, Gate),
    tx: Tx<P::Msg>,
    opts: &ServerOptions,
    limits: &ConnLimits,
    mut stop: ConnStop,
) {
    let (mut rd, mut wr) = stream.split();
    let mut buf = limits.in_buf();
    let max = opts.zk_max_buffer;
    let body = match next_packet(&mut buf, &mut rd, &mut stop, max, true).await {
        Some(First::Word(w)) => {
            let text = four_letter::<P>(&w, &tx).await;
            let _ = wr.write_all(text.as_bytes()).await;
            let _ = wr.shutdown().await;
            return;
        }
        Some(First::Packet(p)) => p,
        None => return,
    };
    let Ok(req) = ConnectRequest::decode(&mut Reader::new(&body)) else {
        return;
    };
    let conn = ZK_CONN | CONNECTIONS.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    let secret = opts.secret.as_ref();
    let Some(session) = connect::<P>(&req, conn, (&tx, secret), &mut wr, limits).await else {
        return;
    };
    let (ftx, frx) = session.queue;
    let peer = Peer::Conn(conn);
    let (ptx, prx) = mpsc::channel(MAX_OUTSTANDING);
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let deadline = opts.idle_timeout.unwrap_or(WRITE_DEADLINE);
    let wr = TimedWrite::new(wr, deadline);
    let writer = tokio::spawn(write_replies(wr, prx, (frx, session.zxid), done_tx));
    let ids = (conn, session.id);
    serve_requests::<P>(
        (&mut buf, &mut rd),
        (ids, &mut gate),
        (&tx, &ftx),
        &ptx,
        (&mut stop, done_rx, max),
    )
    .await;
    let _ = tx
        .send(Input::LinkDown {
            peer,
            tx: Some(ftx),
        })
        .await;
    drop(ptx);
    finish_writer(writer, opts).await;
}

type FrameQueue<M> = (crate::net::OutQueue<Frame<M>>, OutQueueRx<Frame<M>>);

/// A connection's session, new or resumed.
struct Session<M> {
    id: u64,
    /// Where the reply headers' zxid starts: what the client has seen.
    zxid: u64,
    queue: FrameQueue<M>,
}

/// How a connect request is answered.
enum Connected {
    /// The session (new or resumed), its timeout and password.
    Session {
        session: u64,
        timeout_ms: i32,
        passwd: [u8; PASSWD_LEN],
    },
    /// Told the session expired (timeout 0), then closed, as ZooKeeper
    /// does: a wrong password, or a session no longer open.
    Expired,
    /// Closed without an answer, so that the client tries another server:
    /// no leader, or this replica is behind what the client has seen.
    Refused,
}

/// Answer a client's `ConnectRequest`: open a new session, or resume the
/// one it names (on any replica, if its password checks and the session
/// is still open in the replicated tree).
async fn connect<P: Protocol + Send + 'static>(
    req: &ConnectRequest,
    conn: u64,
    (tx, secret): (&Tx<P::Msg>, Option<&ClusterSecret>),
    wr: &mut ConnWrite,
    limits: &ConnLimits,
) -> Option<Session<P::Msg>> {
    let expired = ConnectResponse {
        timeout_ms: 0,
        session_id: 0,
        passwd: [0; PASSWD_LEN],
    };
    let resume = req.session_id != 0;
    if resume && !password_checks(secret, req.session_id as u64, &req.passwd) {
        tracing::debug!(
            "ZooKeeper port: a wrong password for session {:#x}",
            req.session_id
        );
        let _ = write_record(wr, |w| expired.encode(w)).await;
        return None;
    }
    let (ftx, frx) = limits.out_queue::<Frame<P::Msg>>();
    let up = Input::LinkUp {
        peer: Peer::Conn(conn),
        tx: Some(ftx.clone()),
    };
    tx.send(up).await.ok()?;
    let got = match resume {
        true => resume_session(req, conn, tx).await,
        false => open_session(req, conn, tx, secret).await,
    };
    let Connected::Session {
        session,
        timeout_ms,
        passwd,
    } = got
    else {
        let down = Input::LinkDown {
            peer: Peer::Conn(conn),
            tx: Some(ftx),
        };
        let _ = tx.send(down).await;
        if matches!(got, Connected::Expired) {
            let _ = write_record(wr, |w| expired.encode(w)).await;
        }
        return None;
    };
    let answer = ConnectResponse {
        timeout_ms,
        session_id: session as i64,
        passwd,
    };
    write_record(wr, |w| answer.encode(w)).await.ok()?;
    Some(Session {
        id: session,
        zxid: u64::try_from(req.last_zxid_seen).unwrap_or(0),
        queue: (ftx, frx),
    })
}

/// A new session, through the log.
async fn open_session<M>(
    req: &ConnectRequest,
    conn: u64,
    tx: &Tx<M>,
    secret: Option<&ClusterSecret>,
) -> Connected {
    let timeout_ms = req.timeout_ms.clamp(2 * TICK_MS, 20 * TICK_MS);
    let (session, passwd) = new_session(secret);
    let open = ZnodeOp::OpenSession {
        timeout_ms: timeout_ms as u64,
    };
    let Some(rx) = ask_op(tx, (conn, session), 0, open).await else {
        return Connected::Refused;
    };
    match rx.await {
        Ok(Response::Znode(ZnodeReply::Session { .. })) => Connected::Session {
            session,
            timeout_ms,
            passwd,
        },
        // No leader to open it: the client tries again (another server).
        _ => Connected::Refused,
    }
}

/// The session the client names, if it is still open. Served as a read,
/// so this replica has applied every zxid committed before it answers:
/// one the client saw is among them, and a replica that (reading its own
/// state, `read=local`) shows less is refused, as ZooKeeper refuses it.
async fn resume_session<M>(req: &ConnectRequest, conn: u64, tx: &Tx<M>) -> Connected {
    let session = req.session_id as u64;
    let Some(rx) = ask_op(tx, (conn, session), 0, ZnodeOp::ResumeSession).await else {
        return Connected::Refused;
    };
    match rx.await {
        Ok(Response::Znode(ZnodeReply::Resumed { zxid, timeout_ms })) => {
            let seen = u64::try_from(req.last_zxid_seen).unwrap_or(0);
            if zxid < seen {
                tracing::info!(
                    "ZooKeeper port: session {session:#x} has seen zxid {seen:#x}, this replica \
                     only {zxid:#x}: refused, the client tries another server"
                );
                return Connected::Refused;
            }
            let mut passwd = [0; PASSWD_LEN];
            passwd.copy_from_slice(&req.passwd);
            Connected::Session {
                session,
                timeout_ms: i32::try_from(timeout_ms).unwrap_or(i32::MAX),
                passwd,
            }
        }
        Ok(Response::Znode(ZnodeReply::Error(ZkError::SessionExpired))) => Connected::Expired,
        _ => Connected::Refused,
    }
}

async fn write_record(wr: &mut ConnWrite, f: impl FnOnce(&mut Writer)) -> std::io::Result<()> {
    let mut w = Writer::default();
    f(&mut w);
    wr.write_all(&frame(w)).await?;
    wr.flush().await
}

/// One operation for the driver, answered to `reply`.
fn op_input<M>(
    (conn, session): (u64, u64),
    (seq, op): (u64, ZnodeOp),
    reply: ReplyTo<M>,
) -> Input<M> {
    Input::Client {
        req: Request::Znode(op),
        session: conn,
        op: OpId {
            client: session,
            seq,
        },
        reply,
    }
}

/// Hand one operation to the driver; the receiver gets its answer.
async fn ask_op<M>(
    tx: &Tx<M>,
    ids: (u64, u64),
    seq: u64,
    op: ZnodeOp,
) -> Option<oneshot::Receiver<Response>> {
    let (otx, orx) = oneshot::channel();
    tx.send(op_input(ids, (seq, op), ReplyTo::Local(otx)))
        .await
        .ok()?;
    Some(orx)
}

/// What the writer answers, in request order.
enum Out {
    /// Operations handed to the driver, by their seq.
    Answers {
        xid: i32,
        shape: Shape,
        ops: Vec<u64>,
        close: bool,
    },
    Error {
        xid: i32,
        code: i32,
        close: bool,
    },
    /// `getAllChildrenNumber`, counted.
    Count {
        xid: i32,
        count: Result<i32, i32>,
    },
}

/// Read and hand on requests until the connection or the session ends.
async fn serve_requests<P: Protocol + Send + 'static>(
    (buf, rd): (&mut InBuf, &mut ConnRead),
    (ids, gate): ((u64, u64), &mut Gate),
    (tx, ftx): (&Tx<P::Msg>, &FrameTx<P::Msg>),
    ptx: &mpsc::Sender<Out>,
    (stop, mut done, max): (&mut ConnStop, oneshot::Receiver<()>, usize),
) {
    let mut seq = 0u64;
    // The requests of one read go to the driver in one send, so that a
    // pipelining client's writes are proposed, logged and synced together.
    let mut batch = Batcher::new(tx.clone());
    loop {
        if !matches!(packet_len(buf.data(), max), Ok(Some(_))) && batch.flush().await.is_err() {
            return;
        }
        let next = tokio::select! {
            biased;
            _ = &mut done => return, // the writer stopped: session gone
            p = next_packet(buf, rd, stop, max, false) => p,
        };
        RECEIVED.fetch_add(
            u64::from(matches!(next, Some(First::Packet(_)))),
            Ordering::Relaxed,
        );
        // A packet that does not decode ends the connection, as in
        // ZooKeeper (a marshalling error).
        let packet = match next {
            Some(First::Packet(p)) => Packet::decode(&p).ok(),
            _ => None,
        };
        let close = match packet {
            Some(packet) => hand_on(packet, (ids, gate), &mut seq, (&mut batch, ftx), ptx).await,
            None => None,
        };
        if close != Some(false) {
            // What was decoded before the end still reaches the driver.
            let _ = batch.flush().await;
            return;
        }
    }
}

/// Hand one request to the driver (through `batch`, flushed before
/// anything that waits) and its reply to the writer. `Some(true)` when
/// the connection closes after it; `None` when the driver or the writer
/// is gone.
async fn hand_on<M: Send + 'static>(
    packet: Packet,
    (ids, gate): ((u64, u64), &mut Gate),
    seq: &mut u64,
    (batch, ftx): (&mut Batcher<M>, &FrameTx<M>),
    ptx: &mpsc::Sender<Out>,
) -> Option<bool> {
    let Packet { xid, op, req } = packet;
    if matches!(req, ZkRequest::Auth { .. }) {
        batch.flush().await.ok()?; // the password check takes a while
    }
    match gate.admit(&req).await {
        Admit::Pass => {}
        Admit::LoggedIn(name) => batch.push(user_identity(ids.0, name)).await.ok()?,
        Admit::Refuse { code, close } => {
            to_writer(ptx, Out::Error { xid, code, close }, batch).await?;
            return Some(close);
        }
    }
    // An op code ZooKeeper does not know either: answered, then closed.
    let close = is_close(op) || matches!(req, ZkRequest::Unknown(_));
    let out = match plan(req) {
        Plan::Error(code) => Out::Error { xid, code, close },
        Plan::Ops(plan, _) if !gate.may(&plan) => Out::Error {
            xid,
            code: err::NO_AUTH,
            close,
        },
        Plan::CountBelow(path) => {
            batch.flush().await.ok()?; // the walk's reads come after
            let tx = batch.sender();
            Out::Count {
                xid,
                count: count_below(path, driver_read(tx, ids, seq)).await,
            }
        }
        Plan::Ops(plan, shape) => {
            let mut ops = Vec::with_capacity(plan.len());
            for o in plan {
                *seq += 1;
                // Answered into the connection's queue, among its events.
                let reply = ReplyTo::Native {
                    tx: ftx.clone(),
                    id: *seq,
                };
                batch.push(op_input(ids, (*seq, o), reply)).await.ok()?;
                ops.push(*seq);
            }
            Out::Answers {
                xid,
                shape,
                ops,
                close,
            }
        }
    };
    to_writer(ptx, out, batch).await?;
    Some(close)
}

/// Give the writer `out`; if its queue is full, first hand the driver
/// what is batched (the writer may be waiting for those answers).
async fn to_writer<M>(ptx: &mpsc::Sender<Out>, out: Out, batch: &mut Batcher<M>) -> Option<()> {
    match ptx.try_send(out) {
        Ok(()) => Some(()),
        Err(mpsc::error::TrySendError::Full(out)) => {
            batch.flush().await.ok()?;
            ptx.send(out).await.ok()
        }
        Err(mpsc::error::TrySendError::Closed(_)) => None,
    }
}

/// The identity `user:NAME` of a connection logged in as NAME (the
/// native port's login gives the same), handed to the core before the
/// login's own `digest` identity. Answered nowhere: the login's reply is
/// the `addAuth`'s.
fn user_identity<M>(conn: u64, name: String) -> Input<M> {
    let (reply, _) = oneshot::channel();
    Input::Client {
        req: Request::Znode(ZnodeOp::AddAuth {
            scheme: "user".into(),
            auth: name,
        }),
        session: conn,
        op: OpId::NONE,
        reply: ReplyTo::Local(reply),
    }
}

/// The connection's write half: replies and events are queued and
/// written together when the writer has nothing more at hand (one write
/// for the replies of a pipelined client's requests, not one each), each
/// write bounded by `deadline` (a client that reads nothing is cut off).
struct TimedWrite {
    wr: ConnWrite,
    deadline: std::time::Duration,
    out: Vec<u8>,
}

/// Queued bytes past which they are written at once.
const OUT_MAX: usize = 256 * 1024;

impl TimedWrite {
    fn new(wr: ConnWrite, deadline: std::time::Duration) -> TimedWrite {
        TimedWrite {
            wr,
            deadline,
            out: Vec::new(),
        }
    }

    /// Queue `bytes`, written at the next [`TimedWrite::flush`] (at once
    /// past [`OUT_MAX`]).
    async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.extend_from_slice(bytes);
        if self.out.len() >= OUT_MAX {
            self.flush().await?;
        }
        Ok(())
    }

    /// Write what is queued.
    async fn flush(&mut self) -> std::io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let (wr, out) = (&mut self.wr, &self.out);
        let write = async move {
            wr.write_all(out).await?;
            wr.flush().await
        };
        let result = match tokio::time::timeout(self.deadline, write).await {
            Ok(r) => r,
            Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
        };
        self.out.clear();
        if self.out.capacity() > OUT_MAX {
            self.out.shrink_to(OUT_MAX);
        }
        result
    }
}

/// The connection's queue as the writer reads it: answers (by op seq)
/// and events, each numbered by its place in the queue.
struct Queue<M> {
    frx: OutQueueRx<Frame<M>>,
    /// False once every sender is gone: no answer comes any more.
    open: bool,
    taken: u64,
    answers: HashMap<u64, (u64, Response)>,
    events: VecDeque<(u64, Frame<M>)>,
}

impl<M> Queue<M> {
    fn take(&mut self, f: Option<Frame<M>>) {
        self.taken += 1;
        match f {
            Some(Frame::Response { id, resp }) => drop(self.answers.insert(id, (self.taken, resp))),
            Some(f) => self.events.push_back((self.taken, f)),
            None => self.open = false,
        }
    }

    /// Whether `out` can be answered now.
    fn ready(&self, out: &Out) -> bool {
        match out {
            Out::Answers { ops, .. } => {
                !self.open || ops.iter().all(|o| self.answers.contains_key(o))
            }
            _ => true,
        }
    }

    /// The place of the earliest answer taken and not yet written.
    fn first_unwritten(&self) -> u64 {
        (self.answers.values().map(|(at, _)| *at).min()).unwrap_or(u64::MAX)
    }

    /// `out`'s reply (it is `ready`), the place of its first answer, and
    /// whether the connection closes after it.
    fn reply(&mut self, out: Out, zxid: &mut u64) -> (Bytes, u64, bool) {
        let (xid, shape, ops, close) = match out {
            Out::Error { xid, code, close } => return (error_reply(xid, *zxid, code), 0, close),
            Out::Count { xid, count } => return (count_reply(xid, *zxid, count), 0, false),
            Out::Answers {
                xid,
                shape,
                ops,
                close,
            } => (xid, shape, ops, close),
        };
        let mut answers = Vec::with_capacity(ops.len());
        let mut first = u64::MAX;
        for o in ops {
            // No answer and none to come: the driver is stopping.
            let Some((at, a)) = self.answers.remove(&o) else {
                return (error_reply(xid, *zxid, err::CONNECTION_LOSS), 0, true);
            };
            first = first.min(at);
            answers.push(a);
        }
        (reply(xid, &shape, &answers, zxid), first, close)
    }

    /// Write the events taken before place `before`; `Ok(true)` when one
    /// says the session is gone.
    async fn write_events(
        &mut self,
        wr: &mut TimedWrite,
        before: u64,
        closing: bool,
    ) -> std::io::Result<bool> {
        let mut gone = false;
        while self.events.front().is_some_and(|(at, _)| *at < before) {
            let (_, f) = self.events.pop_front().expect("checked above");
            gone |= write_event(wr, f, closing).await?;
        }
        Ok(gone)
    }
}

/// Write the replies in request order and the pushed events, until the
/// reader is done, the session closes or expires, or the client is gone.
async fn write_replies<M>(
    mut wr: TimedWrite,
    mut prx: mpsc::Receiver<Out>,
    (frx, mut zxid): (OutQueueRx<Frame<M>>, u64),
    done: oneshot::Sender<()>,
) {
    let mut q = Queue {
        frx,
        open: true,
        taken: 0,
        answers: HashMap::new(),
        events: VecDeque::new(),
    };
    let mut due: VecDeque<Out> = VecDeque::new();
    let mut reading = true;
    'conn: while reading || !due.is_empty() {
        while due.front().is_some_and(|o| q.ready(o)) {
            let out = due.pop_front().expect("checked above");
            let (bytes, first, close) = q.reply(out, &mut zxid);
            // Events pushed before the answer go first; those pushed
            // between the answers of a request of two operations
            // (`getChildren2`) after it: the watch its first one set may
            // have fired, and the client registers that watch only when
            // it reads the reply. The session the client closed itself is
            // not reported expired to it.
            let gone = !matches!(q.write_events(&mut wr, first, close).await, Ok(false));
            SENT.fetch_add(1, Ordering::Relaxed);
            if gone || wr.send(&bytes).await.is_err() || close {
                break 'conn;
            }
        }
        // Events after every answer still unwritten can go now.
        if !matches!(
            q.write_events(&mut wr, q.first_unwritten(), false).await,
            Ok(false)
        ) {
            break;
        }
        // Take what is already there before writing anything out.
        if let Some(f) = q.frx.try_recv() {
            q.take(Some(f));
            continue;
        }
        match prx.try_recv() {
            Ok(p) if reading => {
                due.push_back(p);
                continue;
            }
            Err(mpsc::error::TryRecvError::Disconnected) if reading => {
                reading = false;
                continue;
            }
            _ => {}
        }
        if wr.flush().await.is_err() {
            break;
        }
        // What was taken is written (nothing held back): its bytes go back.
        if q.events.is_empty() && q.answers.is_empty() {
            q.frx.written();
        }
        tokio::select! {
            biased;
            f = q.frx.recv(), if q.open => q.take(f),
            p = prx.recv(), if reading => match p {
                Some(p) => due.push_back(p),
                None => reading = false,
            },
            // Nothing more comes: what is due is answered above.
            else => {}
        }
    }
    let _ = wr.flush().await;
    let _ = wr.wr.shutdown().await;
    drop(done);
}

/// Write a pushed event; `Ok(true)` when the session is gone (expired).
/// `closing`: the client closed the session, its expiry is not news.
async fn write_event<M>(wr: &mut TimedWrite, f: Frame<M>, closing: bool) -> std::io::Result<bool> {
    let Frame::Notify(event) = f else {
        return Ok(false);
    };
    match notification(&event) {
        Some((_, true)) if closing => Ok(false),
        Some((bytes, gone)) => {
            wr.send(&bytes).await?;
            Ok(gone)
        }
        None => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumkv_core::znode::Stat;
    use quorumkv_core::Event;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpStream;

    fn children_changed(path: &str) -> Frame<()> {
        Frame::Notify(Event {
            kind: "children".into(),
            key: Bytes::from(path.to_string()),
            value: None,
        })
    }

    /// A client socket, and the writer of the server's side of it.
    async fn connected_writer() -> (TcpStream, TimedWrite) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (_, wr) = l.accept().await.unwrap().0.into_split();
        (
            client,
            TimedWrite::new(ConnWrite::Plain(wr), WRITE_DEADLINE),
        )
    }

    /// Read one packet: its xid (−1 for an event).
    async fn xid(s: &mut TcpStream) -> i32 {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).await.unwrap();
        let mut body = vec![0; i32::from_be_bytes(len) as usize];
        s.read_exact(&mut body).await.unwrap();
        i32::from_be_bytes(body[0..4].try_into().unwrap())
    }

    /// An event the core pushed before a request's first answer goes
    /// before its reply; one pushed between `getChildren2`'s two answers
    /// (the watch the first set may have fired) goes after it.
    #[tokio::test]
    async fn events_are_written_in_the_cores_order_around_a_reply() {
        let (mut client, wr) = connected_writer().await;
        let (ftx, frx) = crate::net::link_queue::<Frame<()>>();
        let children = Response::Znode(ZnodeReply::Children(vec![]));
        let stat = Response::Znode(ZnodeReply::Exists(Some(Stat::default())));
        ftx.send(children_changed("/a")).unwrap();
        ftx.send(Frame::Response {
            id: 1,
            resp: children,
        })
        .unwrap();
        ftx.send(children_changed("/q")).unwrap();
        ftx.send(Frame::Response { id: 2, resp: stat }).unwrap();
        drop(ftx);
        let (ptx, prx) = mpsc::channel(4);
        let out = Out::Answers {
            xid: 7,
            shape: Shape::Children { with_stat: true },
            ops: vec![1, 2],
            close: false,
        };
        ptx.send(out).await.unwrap();
        drop(ptx);
        let (done, _) = oneshot::channel();
        write_replies(wr, prx, (frx, 0), done).await;
        let order = [
            xid(&mut client).await,
            xid(&mut client).await,
            xid(&mut client).await,
        ];
        assert_eq!(order, [-1, 7, -1]);
    }

    /// An event pushed between two requests' answers goes between their
    /// replies, though both answers were taken before either reply was
    /// written: a client that set a watch sees the event before the reply
    /// showing the change (its own `setData`), as ZooKeeper orders them.
    #[tokio::test]
    async fn an_event_between_two_answers_goes_between_their_replies() {
        let (mut client, wr) = connected_writer().await;
        let (ftx, frx) = crate::net::link_queue::<Frame<()>>();
        let stat = || Response::Znode(ZnodeReply::Exists(Some(Stat::default())));
        ftx.send(Frame::Response {
            id: 1,
            resp: stat(),
        })
        .unwrap();
        ftx.send(children_changed("/w")).unwrap();
        ftx.send(Frame::Response {
            id: 2,
            resp: stat(),
        })
        .unwrap();
        drop(ftx);
        let (ptx, prx) = mpsc::channel(4);
        for (xid, op) in [(7, 1), (8, 2)] {
            let shape = Shape::Children { with_stat: false };
            let (ops, close) = (vec![op], false);
            ptx.send(Out::Answers {
                xid,
                shape,
                ops,
                close,
            })
            .await
            .unwrap();
        }
        drop(ptx);
        let (done, _) = oneshot::channel();
        write_replies(wr, prx, (frx, 0), done).await;
        let mut order = Vec::new();
        for _ in 0..3 {
            order.push(xid(&mut client).await);
        }
        assert_eq!(order, [7, -1, 8]);
    }
}
