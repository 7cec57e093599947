//! `quorumkv secret`: a new cluster secret.

use clap::Args as ClapArgs;
use quorumkv_node::peer_auth::ClusterSecret;
use std::path::PathBuf;
use std::process::ExitCode;

/// Make a new cluster secret (256 random bits as 64 hex digits)
///
/// Replicas prove the secret to each other on every link (a
/// challenge-response: it never crosses the wire), so a stray connection
/// cannot pose as a replica. Give every replica the same file, in the
/// cluster file (`secret_file = "cluster.secret"`, relative to the cluster
/// file) or with `quorumkv server --cluster-secret-file FILE`.
///
///   quorumkv secret --out cluster.secret
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Write it to this file (created with mode 0600; an existing file is
    /// kept unless --force). Without it, print it.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Replace an existing --out file.
    #[arg(long, requires = "out")]
    force: bool,
}

pub fn run(a: Args) -> ExitCode {
    let secret = ClusterSecret::generate();
    let Some(path) = a.out else {
        println!("{secret}");
        return ExitCode::SUCCESS;
    };
    match quorumkv_node::peer_auth::write_secret(&path, &secret, a.force) {
        Ok(()) => {
            eprintln!("wrote a new cluster secret to {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => super::fail(format!("cannot write {}: {e}", path.display())),
    }
}
