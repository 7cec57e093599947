//! `ZK.WATCH path [EXISTS|DATA|CHILDREN] [timeout]`: a ZooKeeper one-shot
//! watch over RESP, as a blocking command (like `BLPOP`). The command sends
//! the read that sets the watch (`exists`, `getData` or `getChildren` with
//! `watch`), and its reply is the event the watch fires, `[kind, path]`,
//! or nil once `timeout` seconds passed (0 or none: wait for ever). A read
//! that fails (`getData` of a missing node) sets no watch: its error is the
//! reply. Replies keep the pipeline's order, so commands sent after a
//! `ZK.WATCH` on the same connection are answered after its event.
//!
//! The connection's session receives the events the core pushes to it
//! (`Command::Notify`) on a frame queue like a native connection's; a task
//! hands each to the `ZK.WATCH` commands waiting on that path and watch
//! kind. The server fires one event per path and kind for a session however
//! many reads set the watch (seed 001 §II.C), so one event answers every
//! command waiting on it.

use crate::codec::Frame;
use crate::driver::{FrameTx, Input, ReplyTo};
use crate::net::ConnLimits;
use crate::resp::Reply;
use crate::resp_render::{resp_reply, RespKind, RespTx};
use bytes::Bytes;
use quorumkv_core::znode::{WatchKind, ZnodeOp, ZnodeReply};
use quorumkv_core::{Event, OpId, Request, Response};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// One `ZK.WATCH` command, parsed.
#[derive(Debug, PartialEq)]
pub(crate) struct WatchCommand {
    /// The read that sets the watch (its `watch` flag on).
    read: ZnodeOp,
    /// `None`: wait for ever.
    timeout: Option<Duration>,
}

impl WatchCommand {
    /// Parse the words after `ZK.WATCH`: a path, then an optional watch
    /// kind and an optional timeout in seconds, in either order.
    pub(crate) fn parse(args: &[Bytes]) -> Result<WatchCommand, String> {
        let path = std::str::from_utf8(&args[0])
            .map_err(|_| "ERR a znode path must be UTF-8 text".to_string())?
            .to_string();
        let (mut kind, mut timeout) = (None, None);
        for a in &args[1..] {
            let word = String::from_utf8_lossy(a).to_ascii_lowercase();
            match word.as_str() {
                "exists" | "data" | "children" if kind.is_none() => kind = Some(word),
                _ if timeout.is_none() => {
                    let secs: f64 = word.parse().ok().filter(|s: &f64| s.is_finite() && *s >= 0.0).ok_or_else(|| {
                        format!("ERR ZK.WATCH takes a path, then EXISTS, DATA or CHILDREN and a timeout in seconds; '{word}' is neither")
                    })?;
                    timeout = Some((secs > 0.0).then(|| Duration::from_secs_f64(secs)));
                }
                _ => {
                    return Err(
                        "ERR syntax error: ZK.WATCH path [EXISTS|DATA|CHILDREN] [timeout]".into(),
                    )
                }
            }
        }
        let watch = true;
        let read = match kind.as_deref() {
            Some("data") => ZnodeOp::GetData { path, watch },
            Some("children") => ZnodeOp::GetChildren { path, watch },
            _ => ZnodeOp::Exists { path, watch },
        };
        Ok(WatchCommand {
            read,
            timeout: timeout.flatten(),
        })
    }

    /// The read that sets the watch.
    #[cfg(test)]
    pub(crate) fn request(&self) -> Request {
        Request::Znode(self.read.clone())
    }

    fn target(&self) -> (String, WatchKind) {
        match &self.read {
            ZnodeOp::GetChildren { path, .. } => (path.clone(), WatchKind::Child),
            ZnodeOp::GetData { path, .. } | ZnodeOp::Exists { path, .. } => {
                (path.clone(), WatchKind::Data)
            }
            _ => unreachable!("parse builds reads only"),
        }
    }
}

struct Waiter {
    path: String,
    kind: WatchKind,
    tx: oneshot::Sender<Event>,
}

/// The `ZK.WATCH` commands of one RESP connection waiting for their event.
#[derive(Clone, Default)]
pub(crate) struct RespWatches {
    waiters: Arc<Mutex<Vec<Waiter>>>,
}

impl RespWatches {
    /// A frame queue for the connection's session (give it to the driver
    /// with `LinkUp`) and the watches its events answer. The queue is
    /// charged to the client budget like any connection's.
    pub(crate) fn start<M: Send + 'static>(limits: &ConnLimits) -> (FrameTx<M>, RespWatches) {
        let (ftx, mut frx) = limits.out_queue::<Frame<M>>();
        let watches = RespWatches::default();
        let w = watches.clone();
        tokio::spawn(async move {
            while let Some(frame) = frx.recv().await {
                frx.written();
                if let Frame::Notify(event) = frame {
                    w.fire(&event);
                }
            }
        });
        (ftx, watches)
    }

    /// Hand `event` to every command waiting on its path and kind: a data
    /// watch fires on creation, change and deletion, a child watch on a
    /// child created or deleted and on the node's own deletion.
    fn fire(&self, event: &Event) {
        let path = String::from_utf8_lossy(&event.key);
        let fires = |kind: WatchKind| match event.kind.as_str() {
            "created" | "changed" => kind == WatchKind::Data,
            "children" => kind == WatchKind::Child,
            "deleted" => true,
            _ => false,
        };
        let mut waiters = self.waiters.lock().expect("not poisoned");
        for w in std::mem::take(&mut *waiters) {
            if w.path == path && fires(w.kind) {
                let _ = w.tx.send(event.clone());
            } else if !w.tx.is_closed() {
                waiters.push(w);
            }
        }
    }

    fn wait(&self, path: String, kind: WatchKind) -> oneshot::Receiver<Event> {
        let (tx, rx) = oneshot::channel();
        let mut waiters = self.waiters.lock().expect("not poisoned");
        waiters.retain(|w| !w.tx.is_closed());
        waiters.push(Waiter { path, kind, tx });
        rx
    }

    /// Run `cmd` as request `seq` of the connection `session`: the waiter
    /// is in place before the read leaves, so no event can slip past it.
    pub(crate) async fn run<M: Send + 'static>(
        &self,
        cmd: WatchCommand,
        (seq, session): (u64, u64),
        tx: &mpsc::Sender<Input<M>>,
        rtx: RespTx,
    ) -> Result<(), ()> {
        let (path, kind) = cmd.target();
        let fired = self.wait(path, kind);
        let (otx, orx) = oneshot::channel();
        let input = Input::Client {
            req: Request::Znode(cmd.read),
            session,
            op: OpId::NONE,
            reply: ReplyTo::Local(otx),
        };
        tokio::spawn(async move {
            let Ok(resp) = orx.await else { return };
            let failed = matches!(
                resp,
                Response::Failed(_) | Response::Znode(ZnodeReply::Error(_))
            );
            if failed {
                let _ = rtx.send((seq, resp_reply(RespKind::Znode, resp)));
                return;
            }
            let event = match cmd.timeout {
                Some(t) => tokio::time::timeout(t, fired).await.ok(),
                None => Some(fired.await),
            };
            let reply = match event {
                Some(Ok(e)) => Reply::Array(vec![
                    Reply::Bulk(Some(Bytes::from(e.kind))),
                    Reply::Bulk(Some(e.key)),
                ]),
                Some(Err(_)) => return, // the connection is gone
                None => Reply::Bulk(None),
            };
            let _ = rtx.send((seq, reply));
        });
        tx.send(input).await.map_err(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Result<WatchCommand, String> {
        let args: Vec<Bytes> = words.iter().map(|w| Bytes::from(w.to_string())).collect();
        WatchCommand::parse(&args)
    }

    #[test]
    fn kind_and_timeout_in_either_order() {
        let c = parse(&["/a", "2.5", "children"]).unwrap();
        assert_eq!(c.target(), ("/a".into(), WatchKind::Child));
        assert_eq!(c.timeout, Some(Duration::from_millis(2500)));
        let c = parse(&["/a"]).unwrap();
        assert!(matches!(c.read, ZnodeOp::Exists { watch: true, .. }));
        assert_eq!(c.timeout, None);
        assert_eq!(parse(&["/a", "DATA", "0"]).unwrap().timeout, None);
        assert!(parse(&["/a", "soon"]).unwrap_err().contains("'soon'"));
        assert!(parse(&["/a", "1", "2"]).unwrap_err().contains("syntax"));
        assert!(parse(&["/a", "-1"]).is_err());
    }

    #[test]
    fn an_event_answers_the_waiters_of_its_path_and_kind() {
        let w = RespWatches::default();
        let mut data = w.wait("/a".into(), WatchKind::Data);
        let mut child = w.wait("/a".into(), WatchKind::Child);
        let mut other = w.wait("/b".into(), WatchKind::Data);
        let event = |kind: &str, key: &str| Event {
            kind: kind.into(),
            key: Bytes::from(key.to_string()),
            value: None,
        };
        w.fire(&event("children", "/a"));
        assert!(data.try_recv().is_err() && other.try_recv().is_err());
        assert_eq!(child.try_recv().unwrap().kind, "children");
        w.fire(&event("deleted", "/a"));
        assert_eq!(data.try_recv().unwrap().kind, "deleted");
        assert!(other.try_recv().is_err(), "another path's waiter stays");
        assert_eq!(w.waiters.lock().unwrap().len(), 1);
    }
}
