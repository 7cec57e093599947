//! `quorumkv`: one binary for replicas, local clusters, the client, the
//! benchmark, the linearizability checker and the simulator.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// quorumkv — a replicated, linearizable key-value store where the
/// replication protocol is a choice, with the tools to measure and verify it.
///
/// Quick start:
///   quorumkv cluster --replicas 3          # local 3-replica cluster on ports 7001-7003
///   quorumkv put greeting hello            # in another terminal
///   quorumkv get greeting
///   redis-cli -p 7101 GET greeting         # the same data over RESP
///   quorumkv bench                         # measure protocols side by side
///   quorumkv protocols                     # what each protocol offers and assumes
#[derive(Parser, Debug)]
#[command(name = "quorumkv", version, about, long_about, verbatim_doc_comment)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    Server(Box<cmd::server::Args>),
    Cluster(cmd::cluster::Args),
    Cert(cmd::cert::Args),
    Chaos(cmd::chaos::Args),
    Get(cmd::kv::GetArgs),
    Put(cmd::kv::PutArgs),
    Del(cmd::kv::DelArgs),
    Zk(cmd::zk::Args),
    Endpoints(cmd::endpoints::Args),
    Health(cmd::health::Args),
    Protocols(cmd::protocols::Args),
    DelayProxy(cmd::delay_proxy::Args),
    Secret(cmd::secret::Args),
    User(cmd::user::Args),
    Snapshot(cmd::snapshot::Args),
    Member(cmd::member::Args),
    /// Measure protocols (and etcd / Redis) on the same workload.
    Bench(Box<quorumkv_bench::cli::Args>),
    /// Decide whether a recorded history is linearizable.
    Check(quorumkv_check::cli::Args),
    /// Run protocols under a deterministic simulator with injected faults.
    Sim(quorumkv_sim::cli::Args),
    Verify(cmd::verify::Args),
    /// Print the release, the native wire protocol version and the data
    /// directory's storage format version (`--version` says the same).
    /// Replicas and clients of the same major wire version interoperate;
    /// see the upgrades page of the docs.
    Version,
}

/// The command line, with `--version` naming the wire and storage versions.
fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let text = quorumkv_node::version::describe();
    let long: &'static str = Box::leak(text.trim_start_matches("quorumkv ").into());
    let matches = Cli::command().long_version(long).try_get_matches()?;
    Cli::from_arg_matches(&matches)
}

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => {
            // `quorumkv check` reserves exit 2 for "unknown / unreadable
            // input" and documents 3 for usage errors; elsewhere clap's 2 stands.
            let is_check = std::env::args().nth(1).as_deref() == Some("check");
            if is_check && e.use_stderr() {
                let _ = e.print();
                return ExitCode::from(3);
            }
            e.exit()
        }
    };
    match cli.cmd {
        Cmd::Server(a) => cmd::server::run(*a),
        Cmd::Cluster(a) => cmd::cluster::run(a),
        Cmd::Cert(a) => cmd::cert::run(a),
        Cmd::Chaos(a) => cmd::chaos::run(a),
        Cmd::Get(a) => cmd::kv::get(a),
        Cmd::Put(a) => cmd::kv::put(a),
        Cmd::Del(a) => cmd::kv::del(a),
        Cmd::Zk(a) => cmd::zk::run(a),
        Cmd::Endpoints(a) => cmd::endpoints::run(a),
        Cmd::Health(a) => cmd::health::run(a),
        Cmd::Protocols(a) => cmd::protocols::run(a),
        Cmd::DelayProxy(a) => cmd::delay_proxy::run(a),
        Cmd::Secret(a) => cmd::secret::run(a),
        Cmd::User(a) => cmd::user::run(a),
        Cmd::Snapshot(a) => cmd::snapshot::run(a),
        Cmd::Member(a) => cmd::member::run(a),
        Cmd::Bench(a) => quorumkv_bench::cli::run(*a),
        Cmd::Check(a) => quorumkv_check::cli::run(a),
        Cmd::Sim(a) => quorumkv_sim::cli::run(a),
        Cmd::Verify(a) => cmd::verify::run(a),
        Cmd::Version => {
            println!("{}", quorumkv_node::version::describe());
            ExitCode::SUCCESS
        }
    }
}
