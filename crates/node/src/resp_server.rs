//! The RESP port of a replica: Redis clients (`redis-cli`,
//! `redis-benchmark`) talk to the server's proxy coordinator. Commands are
//! pipelined; replies go back in request order.

use crate::driver::{Input, ReplyTo, RespKind, RespTx};
use crate::net::{write_and_trim, write_last_words, ConnLimits, OutQueueRx, WireSize};
use crate::resp::{parse_command, Reply};
use crate::server::{accept_limited, finish_writer, ServerOptions};
use bytes::{Bytes, BytesMut};
use quorumkv_core::protocol::Protocol;
use quorumkv_core::Request;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

pub(crate) async fn accept_resp<P: Protocol + Send + 'static>(
    listener: TcpListener,
    tx: mpsc::Sender<Input<P::Msg>>,
    opts: Arc<ServerOptions>,
    limits: ConnLimits,
) {
    let max = opts.max_connections;
    let serve = move |stream: TcpStream, _| {
        let (tx, opts, limits) = (tx.clone(), opts.clone(), limits.clone());
        async move { serve_resp::<P>(stream, tx, &opts, &limits).await }
    };
    let refuse = |mut stream: TcpStream| async move {
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
    };
    accept_limited(listener, max, serve, refuse).await;
}

/// Serve one RESP connection. Commands are pipelined: each gets a sequence
/// number, store operations run concurrently in the core, and the writer
/// puts the replies back in request order, as RESP requires.
async fn serve_resp<P: Protocol + Send + 'static>(
    stream: TcpStream,
    tx: mpsc::Sender<Input<P::Msg>>,
    opts: &ServerOptions,
    limits: &ConnLimits,
) {
    let (mut rd, wr) = stream.into_split();
    let (rtx, rrx) = limits.out_queue::<(u64, Reply)>();
    let writer = tokio::spawn(resp_writer(wr, rrx));
    let mut buf = limits.in_buf();
    let mut seq = 0u64;
    'conn: loop {
        let first = seq;
        loop {
            let args = match parse_command(buf.data()) {
                // Copies: a value kept in the store must not pin the whole
                // read buffer it arrived in.
                Ok(Some(args)) => args
                    .iter()
                    .map(|a| Bytes::copy_from_slice(a))
                    .collect::<Vec<_>>(),
                Ok(None) => break,
                Err(e) => {
                    let _ = rtx.send((seq, Reply::Error(format!("ERR {e}"))));
                    break 'conn;
                }
            };
            if args.is_empty() {
                continue; // an empty inline line
            }
            match resp_command(&args, opts) {
                RespAction::Reply(r) => drop(rtx.send((seq, r))),
                RespAction::Quit => {
                    let _ = rtx.send((seq, Reply::Simple("OK")));
                    break 'conn;
                }
                RespAction::Store(req, kind) => {
                    let reply = ReplyTo::Resp {
                        tx: rtx.clone(),
                        seq,
                        kind,
                    };
                    if tx.send(Input::Client { req, reply }).await.is_err() {
                        break 'conn;
                    }
                }
                RespAction::Info => {
                    let (otx, orx) = oneshot::channel();
                    if tx.send(Input::Info { reply: otx }).await.is_err() {
                        break 'conn;
                    }
                    spawn_info_reply(orx, rtx.clone(), seq);
                }
            }
            seq += 1;
            if rtx.is_closed() {
                break 'conn; // cut off for not reading its replies
            }
        }
        if seq != first {
            buf.took_requests();
        }
        match buf.fill(&mut rd, None).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                if let Some(m) = e.client_message() {
                    let _ = rtx.send((seq, Reply::Error(format!("ERR {m}"))));
                }
                break;
            }
        }
    }
    drop(rtx);
    finish_writer(writer, opts).await;
}

impl WireSize for (u64, Reply) {
    fn wire_size(&self) -> usize {
        reply_size(&self.1)
    }
}

/// Bytes `r.encode` writes (integers and lengths counted at their widest).
fn reply_size(r: &Reply) -> usize {
    const HEAD: usize = 1 + 20 + 2;
    match r {
        Reply::Simple(s) => 3 + s.len(),
        Reply::Error(s) => 3 + s.len(),
        Reply::Int(_) | Reply::Bulk(None) => HEAD,
        Reply::Bulk(Some(b)) => HEAD + b.len() + 2,
        Reply::Array(items) => HEAD + items.iter().map(reply_size).sum::<usize>(),
    }
}

fn spawn_info_reply(orx: oneshot::Receiver<String>, rtx: RespTx, seq: u64) {
    tokio::spawn(async move {
        let text = orx.await.unwrap_or_default();
        let _ = rtx.send((seq, Reply::Bulk(Some(Bytes::from(text)))));
    });
}

async fn resp_writer(mut wr: tokio::net::tcp::OwnedWriteHalf, mut rx: OutQueueRx<(u64, Reply)>) {
    let mut next = 0u64;
    let mut waiting: BTreeMap<u64, Reply> = BTreeMap::new();
    let mut out = BytesMut::new();
    while let Some((seq, reply)) = rx.recv().await {
        waiting.insert(seq, reply);
        while let Some((seq, reply)) = rx.try_recv() {
            waiting.insert(seq, reply);
        }
        while let Some(r) = waiting.remove(&next) {
            r.encode(&mut out);
            next += 1;
        }
        if !out.is_empty() && write_and_trim(&mut wr, &mut out, &mut rx).await.is_err() {
            return;
        }
    }
    match rx.overflow() {
        Some(why) => write_last_words(&mut wr, format!("-ERR {why}\r\n").as_bytes()).await,
        None => drop(wr.shutdown().await),
    }
}

/// `CONFIG GET name`: quorumkv has no Redis settings, but redis-benchmark
/// asks for `save` and `appendonly` to describe the server; answer those
/// truthfully (no snapshots, no append-only file) and nothing else.
fn config_get(name: &Bytes) -> Reply {
    let value = match &name.to_ascii_lowercase()[..] {
        b"save" => "",
        b"appendonly" => "no",
        _ => return Reply::Array(vec![]),
    };
    Reply::Array(vec![
        Reply::Bulk(Some(name.clone())),
        Reply::Bulk(Some(Bytes::from_static(value.as_bytes()))),
    ])
}

enum RespAction {
    Reply(Reply),
    Store(Request, RespKind),
    Info,
    Quit,
}

fn wrong_args(cmd: &str) -> RespAction {
    RespAction::Reply(Reply::Error(format!(
        "ERR wrong number of arguments for '{cmd}' command"
    )))
}

/// Decide what one RESP command does. Store commands go to the core; the
/// rest are answered here.
fn resp_command(args: &[Bytes], opts: &ServerOptions) -> RespAction {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let argc = args.len();
    match name.as_str() {
        "get" if argc == 2 => RespAction::Store(
            Request::Get {
                key: args[1].clone(),
            },
            RespKind::Get,
        ),
        "set" if argc == 3 => RespAction::Store(
            Request::Put {
                key: args[1].clone(),
                value: args[2].clone(),
            },
            RespKind::Set,
        ),
        "set" if argc > 3 => RespAction::Reply(Reply::Error(
            "ERR syntax error: quorumkv supports SET key value without options".into(),
        )),
        "del" if argc == 2 => RespAction::Store(
            Request::Delete {
                key: args[1].clone(),
            },
            RespKind::Del,
        ),
        "del" if argc > 2 => {
            RespAction::Reply(Reply::Error("ERR quorumkv deletes one key per DEL".into()))
        }
        "ping" if argc == 1 => RespAction::Reply(Reply::Simple("PONG")),
        "ping" if argc == 2 => RespAction::Reply(Reply::Bulk(Some(args[1].clone()))),
        "echo" if argc == 2 => RespAction::Reply(Reply::Bulk(Some(args[1].clone()))),
        "info" => RespAction::Info,
        "quit" => RespAction::Quit,
        "select" if argc == 2 && &args[1][..] == b"0" => RespAction::Reply(Reply::Simple("OK")),
        // Clients probe these on connect (redis-cli: COMMAND DOCS;
        // redis-benchmark: CONFIG GET save/appendonly).
        "command" => RespAction::Reply(Reply::Array(vec![])),
        "config" if argc == 3 && args[1].eq_ignore_ascii_case(b"get") => {
            RespAction::Reply(config_get(&args[2]))
        }
        "client" => RespAction::Reply(Reply::Simple("OK")),
        "hello" => RespAction::Reply(Reply::Error("NOPROTO quorumkv speaks RESP2 only".into())),
        "get" | "set" | "del" | "ping" | "echo" | "select" => wrong_args(&name),
        _ => {
            let _ = opts;
            let shown: String = String::from_utf8_lossy(&args[0]).chars().take(64).collect();
            RespAction::Reply(Reply::Error(format!(
                "ERR unknown command '{shown}' (quorumkv supports GET, SET, DEL, PING, ECHO, INFO, QUIT)"
            )))
        }
    }
}
