//! The RESP port of a replica: Redis clients (`redis-cli`,
//! `redis-benchmark`) talk to the server's proxy coordinator. Commands are
//! pipelined; replies go back in request order.

use crate::accept::{accept_conns, finish_writer, Refusals};
use crate::auth;
use crate::driver::{Input, ReplyTo};
use crate::net::{write_and_trim, write_last_words, ConnLimits, InBuf, OutQueueRx, WireSize};
use crate::options::ServerOptions;
use crate::resp::{parse_command, Reply};
use crate::resp_auth::{Login, RespAuth, HELLO_NOAUTH, NO_USERS};
use crate::resp_commands;
use crate::resp_multi::Multi;
use crate::resp_render::{RespKind, RespTx};
use crate::resp_watch::{RespWatches, WatchCommand};
use crate::shutdown::ConnStop;
use crate::stream::{Conn, ConnWrite};
use crate::tls::TlsServer;
use bytes::{Bytes, BytesMut};
use quorumkv_core::protocol::Protocol;
use quorumkv_core::znode::ZnodeOp;
use quorumkv_core::Request;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

pub(crate) async fn accept_resp<P: Protocol + Send + 'static>(
    listener: TcpListener,
    tx: mpsc::Sender<Input<P::Msg>>,
    opts: Arc<ServerOptions>,
    limits: ConnLimits,
    stop: ConnStop,
    tls: Option<Arc<TlsServer>>,
) {
    let max = opts.max_connections;
    let serve = move |stream: Conn, remote, _| {
        let (tx, opts, limits) = (tx.clone(), opts.clone(), limits.clone());
        let stop = stop.clone();
        async move { serve_resp::<P>(stream, tx, &opts, &limits, stop, remote).await }
    };
    let say = Refusals {
        too_many: b"-ERR max number of clients reached\r\n".to_vec(),
        plain_on_tls: b"-ERR this port requires TLS (redis-cli: --tls --cacert CA.pem)\r\n"
            .to_vec(),
    };
    accept_conns(listener, max, tls, say, serve).await;
}

/// Serve one RESP connection. Commands are pipelined: each gets a sequence
/// number, store operations run concurrently in the core, and the writer
/// puts the replies back in request order, as RESP requires.
async fn serve_resp<P: Protocol + Send + 'static>(
    stream: Conn,
    tx: mpsc::Sender<Input<P::Msg>>,
    opts: &ServerOptions,
    limits: &ConnLimits,
    mut stop: ConnStop,
    remote: std::net::SocketAddr,
) {
    let (mut rd, wr) = stream.split();
    let (rtx, rrx) = limits.out_queue::<(u64, Reply)>();
    let writer = tokio::spawn(resp_writer(wr, rrx));
    let mut buf = limits.in_buf();
    let mut seq = 0u64;
    let conn = RESP_CONNECTIONS.fetch_add(1, Ordering::Relaxed) + 1;
    // The core's session for this connection: RESP ids are kept apart from
    // native connection ids by a high bit. Its pushed events answer the
    // connection's `ZK.WATCH` commands.
    let session = RESP_SESSION | conn;
    let peer = quorumkv_core::Peer::Conn(session);
    rtx.set_delay(opts.client_delay(session));
    let (ftx, watches) = RespWatches::start::<P::Msg>(limits);
    let up = Input::LinkUp {
        peer,
        tx: Some(ftx.clone()),
    };
    if tx.send(up).await.is_err() {
        return;
    }
    let mut auth = RespAuth::new(opts.users.clone(), Some(remote));
    loop {
        let first = seq;
        let ran = run_buffered::<P>(
            &mut buf,
            &mut seq,
            (conn, session),
            &mut auth,
            &tx,
            &rtx,
            (opts, &watches),
        )
        .await;
        if ran.is_err() {
            break;
        }
        if seq != first {
            buf.took_requests();
        }
        let read = tokio::select! {
            biased;
            () = stop.stopped() => break, // shutting down
            r = buf.fill(&mut rd, None) => r,
        };
        match read {
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
    let _ = tx
        .send(Input::LinkDown {
            peer,
            tx: Some(ftx),
        })
        .await;
    drop((rtx, tx));
    finish_writer(writer, opts).await;
}

/// Run every complete command in `buf`, numbering the replies from `seq`
/// on; `Err` ends the connection.
async fn run_buffered<P: Protocol + Send + 'static>(
    buf: &mut InBuf,
    seq: &mut u64,
    (conn, session): (u64, u64),
    auth: &mut RespAuth,
    tx: &mpsc::Sender<Input<P::Msg>>,
    rtx: &RespTx,
    ctx: (&ServerOptions, &RespWatches),
) -> Result<(), ()> {
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
                let _ = rtx.send((*seq, Reply::Error(format!("ERR {e}"))));
                return Err(());
            }
        };
        if args.is_empty() {
            continue; // an empty inline line
        }
        let action = match resp_command(&args, conn, auth) {
            // Checked here, before the next command is parsed: what
            // follows an AUTH in a pipeline runs as its user.
            RespAction::Auth(login) => match auth.login(login).await {
                (reply, false) => RespAction::Reply(reply),
                (reply, true) => RespAction::Close(reply),
            },
            action => action,
        };
        if run_action::<P>(action, (*seq, session), tx, rtx, ctx)
            .await
            .is_err()
        {
            return Err(());
        }
        *seq += 1;
        if rtx.is_closed() {
            return Err(()); // cut off for not reading its replies
        }
    }
    Ok(())
}

/// Set in the session id of every RESP connection (native ones never have it).
const RESP_SESSION: u64 = 1 << 62;

/// Carry out one command; `Err` ends the connection: QUIT or too many
/// failed AUTHs (answered), or the driver is gone (shutting down).
async fn run_action<P: Protocol + Send + 'static>(
    action: RespAction,
    (seq, session): (u64, u64),
    tx: &mpsc::Sender<Input<P::Msg>>,
    rtx: &RespTx,
    (opts, watches): (&ServerOptions, &RespWatches),
) -> Result<(), ()> {
    match action {
        RespAction::Watch(cmd) => watches.run(cmd, (seq, session), tx, rtx.clone()).await,
        RespAction::Reply(r) => {
            let _ = rtx.send((seq, r));
            Ok(())
        }
        RespAction::Close(r) => {
            let _ = rtx.send((seq, r));
            Err(())
        }
        RespAction::Auth(_) => unreachable!("serve_resp checks logins"),
        RespAction::Store(req, kind) => {
            let reply = ReplyTo::Resp {
                tx: rtx.clone(),
                seq,
                kind,
            };
            let op = quorumkv_core::OpId::NONE;
            let input = Input::Client {
                req,
                session,
                op,
                reply,
            };
            tx.send(input).await.map_err(drop)
        }
        RespAction::Multi(m) => m.start(tx, rtx.clone(), seq, session).await,
        RespAction::Info(sections) => {
            let (otx, orx) = oneshot::channel();
            let sent = tx.send(Input::Info { reply: otx }).await.map_err(drop);
            spawn_info_reply(orx, rtx.clone(), seq, sections, opts);
            sent
        }
    }
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

fn spawn_info_reply(
    orx: oneshot::Receiver<String>,
    rtx: RespTx,
    seq: u64,
    sections: Vec<String>,
    opts: &ServerOptions,
) {
    let fields = redis_server_fields(opts);
    tokio::spawn(async move {
        let text = orx.await.unwrap_or_default();
        let text = compose_info(&text, &fields, &sections);
        let _ = rtx.send((seq, Reply::Bulk(Some(Bytes::from(text)))));
    });
}

async fn resp_writer(mut wr: ConnWrite, mut rx: OutQueueRx<(u64, Reply)>) {
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

/// The Redis version whose RESP2 commands we follow for the subset we
/// support, reported as `redis_version` so tools that gate features on it
/// (redis-cli's hints, client libraries) treat us as a Redis 7 server.
pub const REDIS_COMPAT_VERSION: &str = "7.0.0";

/// RESP connections accepted since start (the `id` HELLO reports).
static RESP_CONNECTIONS: AtomicU64 = AtomicU64::new(0);

enum RespAction {
    Reply(Reply),
    Store(Request, RespKind),
    Multi(Multi),
    Info(Vec<String>),
    Watch(WatchCommand),
    /// Check a login (`AUTH`, `HELLO ... AUTH`), then reply.
    Auth(Login),
    /// Reply, then close the connection.
    Close(Reply),
}

fn wrong_args(cmd: &str) -> RespAction {
    RespAction::Reply(Reply::Error(format!(
        "ERR wrong number of arguments for '{cmd}' command"
    )))
}

fn error(msg: impl Into<String>) -> RespAction {
    RespAction::Reply(Reply::Error(msg.into()))
}

/// Decide what one RESP command does. Store commands go to the core; the
/// rest are answered here. Commands the connection's user may not run
/// (not authenticated, or not its role's class) are refused here, the one
/// place every command passes.
fn resp_command(args: &[Bytes], conn: u64, auth: &mut RespAuth) -> RespAction {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let Some(spec) = resp_commands::find(&name) else {
        let shown: String = String::from_utf8_lossy(&args[0]).chars().take(64).collect();
        return RespAction::Reply(resp_commands::unknown(&shown));
    };
    let argc = args.len() as i64;
    let arity_ok = if spec.arity >= 0 {
        argc == spec.arity
    } else {
        argc >= -spec.arity
    };
    match name.as_str() {
        "set" if argc > 3 => {
            error("ERR syntax error: quorumkv supports SET key value without options")
        }
        "del" if argc > 2 => {
            error("ERR quorumkv deletes one key per DEL (its reply could not say how many existed)")
        }
        _ if !arity_ok => wrong_args(&name),
        _ => match auth.check(spec) {
            Some(refused) => RespAction::Reply(refused),
            None => known_command(&name, args, conn, auth),
        },
    }
}

/// A supported command with the right number of arguments.
fn known_command(name: &str, args: &[Bytes], conn: u64, auth: &mut RespAuth) -> RespAction {
    let key = || args[1].clone();
    match name {
        "get" => RespAction::Store(Request::Get { key: key() }, RespKind::Get),
        "set" => RespAction::Store(
            Request::Put {
                key: key(),
                value: args[2].clone(),
            },
            RespKind::Set,
        ),
        "del" => RespAction::Store(Request::Delete { key: key() }, RespKind::Del),
        "exists" => RespAction::Multi(Multi::exists(&args[1..])),
        "mget" => RespAction::Multi(Multi::mget(&args[1..])),
        "mset" => match Multi::mset(&args[1..]) {
            Some(m) => RespAction::Multi(m),
            None => wrong_args("mset"),
        },
        "ping" if args.len() == 1 => RespAction::Reply(Reply::Simple("PONG")),
        "ping" | "echo" => RespAction::Reply(Reply::Bulk(Some(args[1].clone()))),
        "info" => RespAction::Info(
            (args[1..].iter())
                .map(|s| String::from_utf8_lossy(s).to_lowercase())
                .collect(),
        ),
        "quit" => RespAction::Close(Reply::Simple("OK")),
        "select" if &args[1][..] == b"0" => RespAction::Reply(Reply::Simple("OK")),
        "select" => error("ERR DB index is out of range (quorumkv has one keyspace, 0)"),
        "command" => RespAction::Reply(resp_commands::command_reply(&args[1..])),
        "config" if args.len() == 3 && args[1].eq_ignore_ascii_case(b"get") => {
            RespAction::Reply(config_get(&args[2]))
        }
        "config" => error("ERR quorumkv supports CONFIG GET save|appendonly only"),
        "client" => client_command(&args[1..]),
        "hello" => hello(&args[1..], conn, auth),
        "auth" => auth_command(&args[1..], auth),
        "acl" if args[1].eq_ignore_ascii_case(b"whoami") && args.len() == 2 => {
            RespAction::Reply(auth.whoami())
        }
        "acl" => error(
            "ERR quorumkv supports ACL WHOAMI only: users live in the users file (`quorumkv user`), read again on SIGHUP",
        ),
        zk if zk.starts_with("zk.") => znode_command(zk, &args[1..]),
        _ => unreachable!("every command in resp_commands::COMMANDS is dispatched"),
    }
}

/// A `ZK.*` command (arity checked): a znode request for the core. RESP
/// has no session, so ephemerals are left to the native client (`quorumkv
/// zk`); a watch is a blocking command (`resp_watch`).
fn znode_command(name: &str, args: &[Bytes]) -> RespAction {
    if name == "zk.watch" {
        return match WatchCommand::parse(args) {
            Ok(cmd) => RespAction::Watch(cmd),
            Err(e) => error(e),
        };
    }
    // A path is text: a byte string that is not UTF-8 is refused, not
    // silently altered into another path.
    let Ok(path) = std::str::from_utf8(args.first().map_or(&[][..], |a| &a[..])) else {
        return error("ERR a znode path must be UTF-8 text");
    };
    let path = || path.to_string();
    let version = |i: usize| -> Result<Option<u32>, RespAction> {
        match args.get(i) {
            None => Ok(None),
            Some(v) => (std::str::from_utf8(v).ok())
                .and_then(|v| v.parse().ok())
                .map(Some)
                .ok_or_else(|| error("ERR version is not a non-negative integer")),
        }
    };
    let op = match name {
        "zk.create" => {
            let flags: Vec<String> = (args[2..].iter())
                .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
                .collect();
            if flags.iter().any(|f| f == "ephemeral") {
                return error(
                    "ERR ephemeral znodes need a session, which RESP has not: use `quorumkv zk create --ephemeral`",
                );
            }
            if let Some(f) = flags.iter().find(|f| *f != "sequential") {
                return error(format!(
                    "ERR unknown ZK.CREATE flag '{f}' (SEQUENTIAL only)"
                ));
            }
            ZnodeOp::Create {
                path: path(),
                data: args[1].clone(),
                ephemeral: false,
                sequential: !flags.is_empty(),
            }
        }
        "zk.get" => ZnodeOp::GetData {
            path: path(),
            watch: false,
        },
        "zk.set" if args.len() > 3 => return wrong_args(name),
        "zk.set" => match version(2) {
            Ok(version) => ZnodeOp::SetData {
                path: path(),
                data: args[1].clone(),
                version,
            },
            Err(e) => return e,
        },
        "zk.del" if args.len() > 2 => return wrong_args(name),
        "zk.del" => match version(1) {
            Ok(version) => ZnodeOp::Delete {
                path: path(),
                version,
            },
            Err(e) => return e,
        },
        "zk.ls" => ZnodeOp::GetChildren {
            path: path(),
            watch: false,
        },
        "zk.stat" => ZnodeOp::Exists {
            path: path(),
            watch: false,
        },
        _ => ZnodeOp::Sync,
    };
    RespAction::Store(Request::Znode(op), RespKind::Znode)
}

fn client_command(args: &[Bytes]) -> RespAction {
    match &args[0].to_ascii_lowercase()[..] {
        b"setname" | b"setinfo" => RespAction::Reply(Reply::Simple("OK")),
        b"getname" => RespAction::Reply(Reply::Bulk(None)),
        _ => error("ERR quorumkv supports CLIENT SETNAME, SETINFO and GETNAME only"),
    }
}

/// `AUTH [username] password`; the password alone is the user `default`'s.
fn auth_command(args: &[Bytes], auth: &RespAuth) -> RespAction {
    if !auth.required() {
        return error(NO_USERS);
    }
    let (user, password) = match args {
        [password] => (auth::DEFAULT_USER.to_string(), password.clone()),
        [user, password] => (String::from_utf8_lossy(user).into_owned(), password.clone()),
        _ => return error("ERR syntax error"),
    };
    RespAction::Auth(Login {
        user,
        password,
        hello: None,
    })
}

/// `HELLO [protover [AUTH username password] [SETNAME name]]`: we speak
/// RESP2 only, so version 2 (or none) gets the RESP2 server description
/// and anything else NOPROTO. With AUTH, the description once the login
/// succeeded.
fn hello(args: &[Bytes], conn: u64, auth: &mut RespAuth) -> RespAction {
    if let Some(v) = args.first() {
        if &v[..] != b"2" {
            let shown = String::from_utf8_lossy(v);
            return error(format!(
                "NOPROTO unsupported protocol version {shown}: quorumkv speaks RESP2 only (HELLO 2)"
            ));
        }
    }
    let mut login = None;
    let mut opts = args.get(1..).unwrap_or(&[]);
    loop {
        match opts {
            [] => break,
            [opt, _, rest @ ..] if opt.eq_ignore_ascii_case(b"setname") => opts = rest,
            [opt, user, password, rest @ ..] if opt.eq_ignore_ascii_case(b"auth") => {
                login = Some((String::from_utf8_lossy(user).into_owned(), password.clone()));
                opts = rest;
            }
            _ => {
                return error("ERR syntax error: HELLO [2 [AUTH username password] [SETNAME name]]")
            }
        }
    }
    let description = hello_reply(conn);
    match login {
        Some(_) if !auth.required() => error(NO_USERS),
        Some((user, password)) => RespAction::Auth(Login {
            user,
            password,
            hello: Some(description),
        }),
        None if !auth.authenticated() => error(HELLO_NOAUTH),
        None => RespAction::Reply(description),
    }
}

/// HELLO's RESP2 server description.
fn hello_reply(conn: u64) -> Reply {
    let bulk = |s: &str| Reply::Bulk(Some(Bytes::copy_from_slice(s.as_bytes())));
    Reply::Array(vec![
        bulk("server"),
        bulk("redis"),
        bulk("version"),
        bulk(REDIS_COMPAT_VERSION),
        bulk("proto"),
        Reply::Int(2),
        bulk("id"),
        Reply::Int(conn as i64),
        bulk("mode"),
        bulk("standalone"),
        bulk("role"),
        bulk("master"),
        bulk("modules"),
        Reply::Array(vec![]),
    ])
}

/// The fields of INFO's server section that Redis tools parse, for this
/// replica's RESP port.
fn redis_server_fields(opts: &ServerOptions) -> String {
    let port = opts
        .cluster
        .replica(opts.id)
        .and_then(|r| r.resp)
        .map_or(0, |a| a.port());
    format!(
        "redis_version:{REDIS_COMPAT_VERSION}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:{}\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{port}\r\n",
        std::env::consts::OS,
        std::env::consts::ARCH,
        usize::BITS,
        std::process::id(),
        run_id(),
    )
}

/// 40 hex characters, fixed for the life of the process (like Redis's run_id).
fn run_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        (0..5)
            .map(|_| format!("{:08x}", rand::random::<u32>()))
            .collect()
    })
}

/// Turn the driver's INFO text into the reply: the Redis server fields added
/// to its `# Server` section, and only the sections asked for
/// (`all`, `everything`, `default` or none = every section).
fn compose_info(driver_text: &str, redis_fields: &str, sections: &[String]) -> String {
    let every = sections.is_empty()
        || (sections.iter()).any(|s| matches!(s.as_str(), "all" | "everything" | "default"));
    let mut out = String::new();
    let mut keep = true;
    for line in driver_text.split_inclusive("\r\n") {
        if let Some(title) = line.strip_prefix("# ") {
            let title = title.trim_end().to_ascii_lowercase();
            keep = every || sections.contains(&title);
            if keep {
                out.push_str(line);
                if title == "server" {
                    out.push_str(redis_fields);
                }
            }
        } else if keep {
            out.push_str(line);
            if let Some(secs) = line.strip_prefix("uptime_in_seconds:") {
                let days = secs.trim_end().parse::<u64>().unwrap_or(0) / 86400;
                out.push_str(&format!("uptime_in_days:{days}\r\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterFile;
    use quorumkv_core::protocol::ProtocolKind;

    fn run(words: &[&str]) -> RespAction {
        let args: Vec<Bytes> = words
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect();
        resp_command(&args, 7, &mut RespAuth::new(None, None))
    }

    fn reply(words: &[&str]) -> Reply {
        match run(words) {
            RespAction::Reply(r) => r,
            _ => panic!("{words:?} should be answered locally"),
        }
    }

    fn is_err(r: Reply, prefix: &str) -> bool {
        matches!(r, Reply::Error(e) if e.starts_with(prefix))
    }

    #[test]
    fn hello_2_answers_and_3_is_refused() {
        let Reply::Array(items) = reply(&["HELLO", "2"]) else {
            panic!("array");
        };
        assert_eq!(items[5], Reply::Int(2), "proto 2");
        assert_eq!(items[7], Reply::Int(7), "connection id");
        assert!(matches!(reply(&["hello"]), Reply::Array(_)));
        assert!(matches!(
            reply(&["hello", "2", "SETNAME", "x"]),
            Reply::Array(_)
        ));
        assert!(is_err(reply(&["HELLO", "3"]), "NOPROTO"));
        assert!(is_err(reply(&["HELLO", "2", "AUTH", "u", "p"]), "ERR"));
    }

    #[test]
    fn arity_and_refusals() {
        assert!(is_err(reply(&["GET"]), "ERR wrong number"));
        assert!(is_err(reply(&["MSET", "a", "1", "b"]), "ERR wrong number"));
        assert!(is_err(reply(&["MGET"]), "ERR wrong number"));
        assert!(is_err(
            reply(&["DEL", "a", "b"]),
            "ERR quorumkv deletes one key"
        ));
        assert!(is_err(reply(&["SET", "a", "1", "NX"]), "ERR syntax error"));
        assert!(is_err(reply(&["DBSIZE"]), "ERR DBSIZE is not supported"));
        assert!(is_err(reply(&["SELECT", "1"]), "ERR DB index"));
        assert_eq!(reply(&["CLIENT", "GETNAME"]), Reply::Bulk(None));
        assert!(matches!(
            run(&["MSET", "a", "1", "b", "2"]),
            RespAction::Multi(_)
        ));
        assert!(matches!(run(&["EXISTS", "a", "a"]), RespAction::Multi(_)));
        assert!(matches!(run(&["info", "Server"]), RespAction::Info(s) if s == ["server"]));
    }

    #[test]
    fn a_znode_path_that_is_not_utf8_is_refused() {
        let args = [Bytes::from_static(b"zk.get"), Bytes::from_static(b"/a\xff")];
        match resp_command(&args, 1, &mut RespAuth::new(None, None)) {
            RespAction::Reply(Reply::Error(e)) => assert!(e.contains("UTF-8"), "{e}"),
            _ => panic!("not refused"),
        }
    }

    fn words(w: &[&str]) -> Vec<Bytes> {
        w.iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    /// A replica with users; the connection authenticated as `user` when given.
    fn with_users(user: Option<(&str, auth::Role)>) -> RespAuth {
        use argon2::password_hash::PasswordHasher;
        let params = argon2::Params::new(64, 1, 1, None).unwrap();
        let hash = (argon2::Argon2::from(params).hash_password(b"pw"))
            .unwrap()
            .to_string();
        let mut users = auth::Users::default();
        let (name, role) = user.unwrap_or(("someone", auth::Role::Read));
        users.set(name, role, hash).unwrap();
        let mut a = RespAuth::new(Some(auth::UsersHandle::from_users(users)), None);
        if user.is_some() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let login = Login {
                user: name.into(),
                password: Bytes::from_static(b"pw"),
                hello: None,
            };
            assert_eq!(rt.block_on(a.login(login)).0, Reply::Simple("OK"));
        }
        a
    }

    #[test]
    fn with_users_only_auth_hello_and_quit_run_before_authentication() {
        let mut a = with_users(None);
        let mut run = |w: &[&str]| resp_command(&words(w), 1, &mut a);
        for w in [&["PING"][..], &["GET", "k"], &["ACL", "WHOAMI"], &["INFO"]] {
            assert!(
                matches!(run(w), RespAction::Reply(Reply::Error(e)) if e == crate::resp_auth::NOAUTH)
            );
        }
        assert!(
            matches!(run(&["HELLO", "2"]), RespAction::Reply(Reply::Error(e)) if e == HELLO_NOAUTH)
        );
        assert!(
            matches!(run(&["HELLO", "3", "AUTH", "u", "p"]), RespAction::Reply(Reply::Error(e)) if e.starts_with("NOPROTO"))
        );
        assert!(
            matches!(run(&["AUTH", "p"]), RespAction::Auth(l) if l.user == "default" && l.hello.is_none())
        );
        assert!(matches!(run(&["AUTH", "u", "p"]), RespAction::Auth(l) if l.user == "u"));
        assert!(
            matches!(run(&["AUTH", "u", "p", "x"]), RespAction::Reply(Reply::Error(e)) if e == "ERR syntax error")
        );
        let hello = run(&["HELLO", "2", "SETNAME", "n", "AUTH", "u", "p"]);
        assert!(
            matches!(hello, RespAction::Auth(l) if l.user == "u" && matches!(l.hello, Some(Reply::Array(_))))
        );
        assert!(
            matches!(run(&["HELLO", "2", "AUTH", "u"]), RespAction::Reply(Reply::Error(e)) if e.starts_with("ERR syntax"))
        );
        assert!(matches!(run(&["QUIT"]), RespAction::Close(_)));
        // Unknown commands and wrong arities are answered first, as Redis does.
        assert!(
            matches!(run(&["LPUSH", "l", "x"]), RespAction::Reply(Reply::Error(e)) if e.starts_with("ERR unknown"))
        );
    }

    #[test]
    fn a_read_user_reads_and_is_refused_writes_and_admin_commands() {
        let mut a = with_users(Some(("bob", auth::Role::Read)));
        let mut run = |w: &[&str]| resp_command(&words(w), 1, &mut a);
        assert!(matches!(run(&["GET", "k"]), RespAction::Store(..)));
        assert!(matches!(run(&["MGET", "k", "j"]), RespAction::Multi(..)));
        assert!(matches!(
            run(&["HELLO", "2"]),
            RespAction::Reply(Reply::Array(_))
        ));
        assert_eq!(
            reply_of(run(&["ACL", "WHOAMI"])),
            Reply::Bulk(Some(Bytes::from("bob")))
        );
        for (w, name) in [
            (&["SET", "k", "v"][..], "set"),
            (&["MSET", "k", "v"], "mset"),
            (&["DEL", "k"], "del"),
            (&["ZK.CREATE", "/a", "x"], "zk.create"),
            (&["CONFIG", "GET", "save"], "config"),
        ] {
            let want = format!("NOPERM User bob has no permissions to run the '{name}' command");
            assert_eq!(reply_of(run(w)), Reply::Error(want));
        }
    }

    fn reply_of(a: RespAction) -> Reply {
        match a {
            RespAction::Reply(r) => r,
            _ => panic!("not answered locally"),
        }
    }

    /// The class each command is checked against covers every request it
    /// sends the core: no command lets a role past `Role::may`.
    #[test]
    fn command_classes_cover_their_requests() {
        for c in resp_commands::COMMANDS {
            let n = c.arity.unsigned_abs() as usize;
            let mut w = vec![c.name];
            w.extend(std::iter::repeat_n("0", n.max(3) - 1));
            if c.arity > 0 {
                w.truncate(n);
            }
            let mut a = RespAuth::new(None, None);
            let reqs = match resp_command(&words(&w), 1, &mut a) {
                RespAction::Store(req, _) => vec![req],
                RespAction::Multi(m) => m.requests().to_vec(),
                RespAction::Watch(cmd) => vec![cmd.request()],
                _ => vec![],
            };
            for r in reqs {
                assert!(
                    auth::access_of(&r) <= c.access(),
                    "{} is checked as {:?} but sends {r:?}",
                    c.name,
                    c.access()
                );
            }
        }
    }

    #[test]
    fn every_listed_command_is_dispatched() {
        for c in resp_commands::COMMANDS {
            // The minimum number of words the arity allows.
            let n = c.arity.unsigned_abs() as usize;
            let mut words = vec![c.name];
            words.extend(std::iter::repeat_n("0", n - 1));
            let _ = run(&words); // must not reach the unreachable!()
        }
    }

    #[test]
    fn info_sections_and_redis_fields() {
        let opts = ServerOptions::new(
            2,
            ClusterFile::local(ProtocolKind::default_protocol(), 3, 7000),
        );
        let fields = redis_server_fields(&opts);
        assert!(fields.contains("redis_version:7.0.0\r\n"), "{fields}");
        assert!(fields.contains("tcp_port:7102\r\n"), "{fields}");
        let up = compose_info("# Server\r\nuptime_in_seconds:90000\r\n", "", &[]);
        assert!(
            up.ends_with("uptime_in_seconds:90000\r\nuptime_in_days:1\r\n"),
            "{up}"
        );
        let text = "# Server\r\nprotocol:abd\r\n# Replication\r\npeer_1:up\r\n# Stats\r\nx:1\r\n";
        let all = compose_info(text, "redis_version:7\r\n", &[]);
        assert_eq!(
            all,
            "# Server\r\nredis_version:7\r\nprotocol:abd\r\n# Replication\r\npeer_1:up\r\n# Stats\r\nx:1\r\n"
        );
        let repl = compose_info(text, "redis_version:7\r\n", &["replication".into()]);
        assert_eq!(repl, "# Replication\r\npeer_1:up\r\n");
        let two = compose_info(text, "", &["stats".into(), "replication".into()]);
        assert_eq!(two, "# Replication\r\npeer_1:up\r\n# Stats\r\nx:1\r\n");
        assert_eq!(compose_info(text, "", &["keyspace".into()]), "");
    }
}
