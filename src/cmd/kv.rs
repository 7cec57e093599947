//! `quorumkv get | put | del`: one operation against a cluster.

use clap::Args as ClapArgs;
use quorumkv_node::client::{Client, ClientConfig, ClientError, ClientMode};
use quorumkv_node::config::parse_duration;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

#[derive(ClapArgs, Debug)]
pub struct Target {
    /// Native endpoints of the replicas (host:port), comma separated (default: `quorumkv cluster`'s).
    #[arg(
        long,
        short = 'e',
        env = "QUORUMKV_ENDPOINTS",
        value_delimiter = ',',
        default_value = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"
    )]
    endpoints: Vec<String>,
    /// direct: this client coordinates the quorum itself; proxy: a server does.
    #[arg(long, default_value = "direct")]
    mode: ClientMode,
    /// Give up after this long, connecting included.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    timeout: Duration,
    /// ABD, direct mode: ask a quorum of replicas first instead of all.
    #[arg(long)]
    thrifty: bool,
}

/// Read a key.
///
/// Prints the value of KEY and exits 0; prints `(nil)` on stderr and exits 1
/// when the key has no value; exits 2 on errors (no quorum, unreachable).
#[derive(ClapArgs, Debug)]
pub struct GetArgs {
    key: String,
    #[command(flatten)]
    target: Target,
}

/// Write a key: set KEY to VALUE.
#[derive(ClapArgs, Debug)]
pub struct PutArgs {
    key: String,
    value: String,
    #[command(flatten)]
    target: Target,
}

/// Delete a key.
#[derive(ClapArgs, Debug)]
pub struct DelArgs {
    key: String,
    #[command(flatten)]
    target: Target,
}

fn with_client<F, Fut>(t: Target, f: F) -> ExitCode
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = Result<ExitCode, ClientError>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let cfg = ClientConfig {
            mode: t.mode,
            op_timeout: t.timeout,
            connect_timeout: t.timeout,
            thrifty: t.thrifty,
            ..Default::default()
        };
        // --timeout bounds the whole call: connecting (bounded by the
        // library, with an error naming every endpoint) and the operation.
        let deadline = tokio::time::Instant::now() + t.timeout;
        let result = match Client::connect(t.endpoints, cfg).await {
            Ok(client) => tokio::time::timeout_at(deadline, f(client)).await,
            Err(e) => Ok(Err(e)),
        };
        match result {
            Ok(Ok(code)) => code,
            Ok(Err(e)) => {
                eprintln!("quorumkv: {e}");
                ExitCode::from(2)
            }
            Err(_) => {
                eprintln!(
                    "quorumkv: no answer within {:?}; the operation may or may not have taken effect",
                    t.timeout
                );
                ExitCode::from(2)
            }
        }
    })
}

pub fn get(a: GetArgs) -> ExitCode {
    with_client(a.target, |c| async move {
        match c.get(a.key).await? {
            Some(v) => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&v);
                let _ = out.write_all(b"\n");
                Ok(ExitCode::SUCCESS)
            }
            None => {
                eprintln!("(nil)");
                Ok(ExitCode::FAILURE)
            }
        }
    })
}

pub fn put(a: PutArgs) -> ExitCode {
    with_client(a.target, |c| async move {
        c.put(a.key, a.value).await?;
        println!("OK");
        Ok(ExitCode::SUCCESS)
    })
}

pub fn del(a: DelArgs) -> ExitCode {
    with_client(a.target, |c| async move {
        c.delete(a.key).await?;
        println!("OK");
        Ok(ExitCode::SUCCESS)
    })
}
