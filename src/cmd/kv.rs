//! `quorumkv get | put | del`: one operation against a cluster.

use super::target::ReachArgs;
use clap::Args as ClapArgs;
use quorumkv_node::client::{Client, ClientConfig, ClientError, ClientMode};
use quorumkv_node::codec::DEFAULT_MAX_FRAME;
use quorumkv_node::config::parse_duration;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(ClapArgs, Debug)]
pub struct Target {
    #[command(flatten)]
    reach: ReachArgs,
    /// direct: this client coordinates the quorum itself; proxy: a server
    /// does [default: direct, or proxy for a protocol without a client-side
    /// coordinator; asking for direct then is an error]
    #[arg(long)]
    mode: Option<ClientMode>,
    /// Give up after this long, connecting included.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    timeout: Duration,
    /// A protocol option for this client's coordinator (direct mode), over
    /// the servers' (repeat; `quorumkv server --help` lists them). An error
    /// where no client-side coordinator runs (proxy mode).
    #[arg(long = "opt", value_name = "KEY=VALUE", value_parser = quorumkv_core::protocol::options::parse_pair)]
    opt: Vec<(String, String)>,
}

/// Read a key.
///
/// Prints the value of KEY and a newline and exits 0; prints `(nil)` on
/// stderr and exits 1 when the key has no value; exits 2 on errors (no
/// quorum, unreachable).
#[derive(ClapArgs, Debug)]
pub struct GetArgs {
    /// The key (any bytes).
    key: OsString,
    /// Print the value's bytes exactly, without the newline (binary values).
    #[arg(long)]
    raw: bool,
    #[command(flatten)]
    target: Target,
}

/// Write a key: set KEY to VALUE.
///
/// VALUE is taken as given (any bytes), `-` reads it from standard input,
/// and `--file FILE` from a file; both keep binary data exactly. (To store
/// a lone `-`, pipe it: `printf %s - | quorumkv put KEY -`.)
#[derive(ClapArgs, Debug)]
pub struct PutArgs {
    /// The key (any bytes).
    key: OsString,
    /// The value, or `-` for standard input.
    #[arg(required_unless_present = "file")]
    value: Option<OsString>,
    /// Read the value from FILE.
    #[arg(long, short = 'f', value_name = "FILE", conflicts_with = "value")]
    file: Option<PathBuf>,
    #[command(flatten)]
    target: Target,
}

/// Delete a key (succeeds whether or not the key had a value).
#[derive(ClapArgs, Debug)]
pub struct DelArgs {
    /// The key (any bytes).
    key: OsString,
    #[command(flatten)]
    target: Target,
}

fn with_client<F, Fut>(t: Target, f: F) -> ExitCode
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = Result<ExitCode, ClientError>>,
{
    let reach = match t.reach.reach() {
        Ok(r) => r,
        Err(code) => return code,
    };
    if t.mode == Some(ClientMode::Proxy) && !t.opt.is_empty() {
        eprintln!(
            "quorumkv: --opt sets options of this client's own coordinator (direct mode); \
             with --mode proxy the servers coordinate, with their options"
        );
        return ExitCode::from(2);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (mode, has_opts, timeout) = (t.mode, !t.opt.is_empty(), t.timeout);
    let cfg = ClientConfig {
        mode: mode.unwrap_or_default(),
        op_timeout: timeout,
        connect_timeout: timeout,
        options: t.opt,
        tls: reach.tls,
        credentials: reach.credentials,
        ..Default::default()
    };
    rt.block_on(async move {
        // --timeout bounds the whole call: connecting (bounded by the
        // library, with an error naming every endpoint) and the operation.
        let deadline = tokio::time::Instant::now() + timeout;
        let result = match Client::connect(reach.endpoints, cfg).await {
            Ok(client) => {
                if let Some(why) = not_direct(mode, has_opts, &client) {
                    client.close().await;
                    eprintln!("quorumkv: {why}");
                    return ExitCode::from(2);
                }
                if let Some(note) = client.connect_note() {
                    eprintln!("quorumkv: {note}");
                }
                let result = tokio::time::timeout_at(deadline, f(client.clone())).await;
                // Let the last unlocks reach the replicas before we exit,
                // or the next command would find the key locked.
                client.close().await;
                result
            }
            Err(e) => Ok(Err(e)),
        };
        exit_code(result, &reach.from, timeout)
    })
}

/// The exit code of a client command's `result`, said on stderr unless 0.
fn exit_code(
    result: Result<Result<ExitCode, ClientError>, tokio::time::error::Elapsed>,
    from: &str,
    timeout: Duration,
) -> ExitCode {
    match result {
        Ok(Ok(code)) => code,
        Ok(Err(e @ ClientError::Connect(_))) => {
            eprintln!("quorumkv: {e} (endpoints from {from})");
            ExitCode::from(2)
        }
        Ok(Err(e)) => {
            eprintln!("quorumkv: {e}");
            ExitCode::from(2)
        }
        Err(_) => {
            eprintln!(
                "quorumkv: no answer within {timeout:?}; the operation may or may not have taken effect"
            );
            ExitCode::from(2)
        }
    }
}

/// Why a flag that needs a client-side coordinator (`--mode direct`,
/// `--opt`) cannot be honoured by `client`, which goes through a server.
fn not_direct(mode: Option<ClientMode>, opts: bool, client: &Client) -> Option<String> {
    let flag = match (mode, opts) {
        _ if client.is_direct() => return None,
        (_, true) => "--opt",
        (Some(ClientMode::Direct), false) => "--mode direct",
        _ => return None,
    };
    let protocol = client.protocol();
    let why = match client.connect_note() {
        Some(note) => note.to_string(),
        None if protocol.has_client_coordinator() => {
            "this user may only read, so a server coordinates".to_string()
        }
        None => format!(
            "protocol {protocol} has no client-side coordinator (it supports --mode proxy only)"
        ),
    };
    Some(format!(
        "{flag} needs a client-side coordinator (direct mode), but {why}"
    ))
}

pub fn get(a: GetArgs) -> ExitCode {
    let raw = a.raw;
    with_client(a.target, |c| async move {
        match c.get(a.key.into_vec()).await? {
            Some(v) => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&v);
                if !raw {
                    let _ = out.write_all(b"\n");
                }
                let _ = out.flush();
                Ok(ExitCode::SUCCESS)
            }
            None => {
                eprintln!("(nil)");
                Ok(ExitCode::FAILURE)
            }
        }
    })
}

/// The value of a put: the argument, standard input (`-`) or a file.
fn read_value(value: Option<OsString>, file: Option<PathBuf>) -> Result<Vec<u8>, String> {
    let bytes = match (value, file) {
        (_, Some(path)) => std::fs::read(&path)
            .map_err(|e| format!("cannot read value file {}: {e}", path.display()))?,
        (Some(v), None) if v == "-" => {
            let mut buf = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut buf)
                .map_err(|e| format!("cannot read the value from standard input: {e}"))?;
            buf
        }
        (Some(v), None) => v.into_vec(),
        (None, None) => return Err("give VALUE, - (standard input) or --file FILE".into()),
    };
    // Leave room for the key and the frame's other fields.
    let max = DEFAULT_MAX_FRAME - 64 * 1024;
    if bytes.len() > max {
        return Err(format!(
            "value of {} bytes exceeds the limit of {max} bytes (frames are at most {DEFAULT_MAX_FRAME})",
            bytes.len()
        ));
    }
    Ok(bytes)
}

pub fn put(a: PutArgs) -> ExitCode {
    let value = match read_value(a.value, a.file) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("quorumkv: {e}");
            return ExitCode::from(2);
        }
    };
    with_client(a.target, |c| async move {
        c.put(a.key.into_vec(), value).await?;
        println!("OK");
        Ok(ExitCode::SUCCESS)
    })
}

pub fn del(a: DelArgs) -> ExitCode {
    with_client(a.target, |c| async move {
        c.delete(a.key.into_vec()).await?;
        println!("OK");
        Ok(ExitCode::SUCCESS)
    })
}
