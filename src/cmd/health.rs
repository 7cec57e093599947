//! `quorumkv health`: is the replica at an address up? The container
//! image's HEALTHCHECK runs it against its own replica (the image has no
//! shell and no tools: the binary asks itself).

use clap::Args as ClapArgs;
use quorumkv_node::client::resolve_endpoint;
use quorumkv_node::config::parse_duration;
use quorumkv_node::status::fetch_with;
use quorumkv_node::tls::ClientTls;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Check one replica's health (exit 0 healthy, 1 not)
///
/// Asks the replica at --addr for its status over the native port.
/// Healthy: it answers and is not catching up (`recovering`) or outside
/// the view (`fenced`); with --quorum, it must also reach a quorum of its
/// peers (serving, not only alive). Prints one line either way.
///
/// Over TLS with --tls-ca (and --cert/--key); in a replica's container,
/// whatever its cluster file's [tls] says, presenting its own certificate.
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The replica's native address (HOST:PORT).
    #[arg(long, env = "QUORUMKV_HEALTH_ADDR", default_value = "127.0.0.1:7001")]
    addr: String,
    /// Also require that it reaches a quorum of its peers.
    #[arg(long)]
    quorum: bool,
    /// How long to wait for the answer.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    timeout: Duration,
    /// Ask over TLS, trusting this CA (in a replica's container: the
    /// replica's own --tls-ca, from its environment).
    #[arg(long, env = "QUORUMKV_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Over TLS, present this certificate (replicas with client_cert_auth
    /// require one; in a container: the replica's own).
    #[arg(
        long = "cert",
        env = "QUORUMKV_TLS_CERT",
        value_name = "FILE",
        requires = "key"
    )]
    cert: Option<PathBuf>,
    /// The certificate's private key.
    #[arg(long, env = "QUORUMKV_TLS_KEY", value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
}

/// How to reach the replica: --tls-ca (and --cert/--key), else, in a
/// replica's container, its cluster file's [tls] with its own certificate
/// ($QUORUMKV_CONFIG and $QUORUMKV_ID or $QUORUMKV_POD_INDEX), else plain TCP.
fn health_tls(a: &Args) -> anyhow::Result<Option<ClientTls>> {
    if let Some(ca) = &a.tls_ca {
        let cert_key = a.cert.as_deref().zip(a.key.as_deref());
        return Ok(Some(ClientTls::from_files(ca, cert_key)?));
    }
    let Some(config) = std::env::var_os("QUORUMKV_CONFIG") else {
        return Ok(None);
    };
    let Some(tls) = quorumkv_node::config::ClusterFile::load(config.as_ref())?.tls else {
        return Ok(None);
    };
    let env_num = |name| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    let id = env_num("QUORUMKV_ID").or(env_num("QUORUMKV_POD_INDEX").map(|i| i + 1));
    let Some(id) = id else {
        return Ok(Some(ClientTls::from_files(&tls.ca_path()?, None)?));
    };
    let own = tls.replica(id)?;
    Ok(Some(ClientTls::from_files(
        &own.ca,
        Some((&own.cert, &own.key)),
    )?))
}

pub fn run(a: Args) -> ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tls = match health_tls(&a) {
        Ok(t) => t,
        Err(e) => {
            println!("unhealthy: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let answer = rt.block_on(async {
        let deadline = tokio::time::Instant::now() + a.timeout;
        let addr = resolve_endpoint(&a.addr, deadline)
            .await
            .map_err(|e| e.to_string())?;
        let host = quorumkv_node::tls::host_of(&a.addr);
        fetch_with(addr, host, a.timeout, tls.as_ref()).await
    });
    match answer {
        Ok(s) => match s.unready(a.quorum) {
            None => {
                println!(
                    "healthy: replica {} ({}), role {}, {} of {} peers up",
                    s.id,
                    s.protocol,
                    s.role,
                    s.peers_up.len(),
                    s.members.len().saturating_sub(1)
                );
                ExitCode::SUCCESS
            }
            Some(why) => {
                println!("unhealthy: replica {} at {}: {why}", s.id, a.addr);
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            println!("unhealthy: {}: {e}", a.addr);
            ExitCode::FAILURE
        }
    }
}
