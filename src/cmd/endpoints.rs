//! `quorumkv endpoints status | health`: ask each replica who it is and
//! whom it reaches, or only whether it serves.

use super::target::Endpoints;
use super::tls_args::TlsArgs;
use clap::{Args as ClapArgs, Subcommand};
use quorumkv_node::client::resolve_endpoint;
use quorumkv_node::config::parse_duration;
use quorumkv_node::status::{fetch_with, NodeStatus};
use quorumkv_node::tls::ClientTls;
use std::process::ExitCode;
use std::time::Duration;

/// Inspect the replicas behind the endpoints
#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    Status(StatusArgs),
    Health(HealthArgs),
}

/// One line per endpoint: healthy or not, and why (as `etcdctl endpoint health`)
///
/// Healthy: the replica answers, is not catching up from its peers
/// (`recovering`) or outside the view (`fenced`), and reaches a quorum of
/// its peers, so it serves. Exit 0 when every endpoint is healthy, 1 when
/// any is not. `quorumkv health --addr` checks one replica (the container's
/// HEALTHCHECK); this checks the cluster's endpoints, found as every client
/// command finds them.
///
///   quorumkv endpoints health --cluster cluster.toml
///   127.0.0.1:7001 is healthy: replica 1 (zab), role follower, 2 of 2 peers up, took 0.4ms
///   127.0.0.1:7002 is unhealthy: replica 2: role recovering
///   127.0.0.1:7003 is unhealthy: Connection refused (os error 111)
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment)]
pub struct HealthArgs {
    #[command(flatten)]
    reach: Reach,
}

/// Which endpoints, how to reach them, and how long to wait for each.
#[derive(ClapArgs, Debug)]
struct Reach {
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(flatten)]
    tls: TlsArgs,
    /// How long to wait for each endpoint.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    timeout: Duration,
}

/// One line per endpoint: replica id, protocol, role, version, peers up and
/// down, whether it reaches a quorum, uptime, wire version
///
/// VERSION is the release, WIRE its native wire version (`1.0`: a release
/// from before version fields). During a rolling upgrade the replicas show
/// two versions, and a note on stderr says so.
///
/// The role is the protocol's: `replica` where every replica is equal (any
/// serves reads and writes), `leader` / `follower` where one leads, and
/// `recovering` while a restarted replica catches up from its peers. Exit 0 when every endpoint answered, 2 when
/// any did not (it is listed on stderr).
///
/// With --json: one JSON array on stdout, an object per endpoint: either its
/// full status (id, protocol, role, version, members, peers_up, peers_down,
/// quorum_reachable, durability, uptime_secs, persist_records, persist_syncs,
/// counters as an object, wire: {major, minor, release} or null from a release
/// before version fields, persist_sync_us: microseconds spent writing and
/// syncing, or null from a release before it) or {"endpoint", "error"}.
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment)]
pub struct StatusArgs {
    #[command(flatten)]
    reach: Reach,
    /// Print JSON (an array, one object per endpoint) instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> ExitCode {
    match a.cmd {
        Cmd::Status(a) => status(a),
        Cmd::Health(a) => health(a),
    }
}

/// Every endpoint's status (asked all at once), with how long each took.
type Answer = (Result<NodeStatus, String>, Duration);

impl Reach {
    /// The endpoints' names and every one's answer, or the error to print.
    fn ask(&self) -> Result<(Vec<String>, Vec<Answer>), String> {
        let names = self.endpoints.names().map_err(|e| format!("{e:#}"))?.0;
        let file = self.endpoints.cluster_file();
        let tls = (self.tls.client_tls(file.as_deref())).map_err(|e| format!("{e:#}"))?;
        let answers = ask_all(&names, self.timeout, tls);
        Ok((names, answers))
    }
}

fn ask_all(names: &[String], timeout: Duration, tls: Option<ClientTls>) -> Vec<Answer> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let asks: Vec<_> = names
            .iter()
            .map(|n| {
                let (n, tls) = (n.clone(), tls.clone());
                tokio::spawn(async move {
                    let start = tokio::time::Instant::now();
                    let host = quorumkv_node::tls::host_of(&n).to_string();
                    let got = match resolve_endpoint(&n, start + timeout).await {
                        Ok(addr) => fetch_with(addr, &host, timeout, tls.as_ref()).await,
                        Err(e) => Err(e.to_string()),
                    };
                    (got, start.elapsed())
                })
            })
            .collect();
        let mut out = Vec::new();
        for ask in asks {
            let failed = |e: tokio::task::JoinError| (Err(e.to_string()), Duration::ZERO);
            out.push(ask.await.unwrap_or_else(failed));
        }
        out
    })
}

fn health(a: HealthArgs) -> ExitCode {
    let (names, answers) = match a.reach.ask() {
        Ok(r) => r,
        Err(e) => return super::fail(e),
    };
    let mut sick = false;
    for (name, (answer, took)) in names.iter().zip(answers) {
        let (healthy, line) = health_line(name, &answer, took);
        sick |= !healthy;
        println!("{line}");
    }
    if sick {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Whether one endpoint is healthy, and its line of `endpoints health`.
fn health_line(name: &str, answer: &Result<NodeStatus, String>, took: Duration) -> (bool, String) {
    match answer {
        Ok(s) => match s.unready(true) {
            None => (
                true,
                format!(
                    "{name} is healthy: replica {} ({}), role {}, {} of {} peers up, took {:.1}ms",
                    s.id,
                    s.protocol,
                    s.role,
                    s.peers_up.len(),
                    s.members.len().saturating_sub(1),
                    took.as_secs_f64() * 1000.0
                ),
            ),
            Some(why) => (
                false,
                format!("{name} is unhealthy: replica {}: {why}", s.id),
            ),
        },
        Err(e) => (false, format!("{name} is unhealthy: {e}")),
    }
}

fn status(a: StatusArgs) -> ExitCode {
    let (names, answers) = match a.reach.ask() {
        Ok(r) => r,
        Err(e) => return super::fail(e),
    };
    let answers: Vec<_> = answers.into_iter().map(|(answer, _)| answer).collect();
    if a.json {
        println!("{}", json(&names, &answers));
    } else {
        print_table(&names, &answers);
    }
    if let Some(note) = mixed_versions(&answers) {
        eprintln!("quorumkv: {note}");
    }
    let mut failed = false;
    for (name, answer) in names.iter().zip(&answers) {
        if let Err(e) = answer {
            eprintln!("quorumkv: {name}: {e}");
            failed = true;
        }
    }
    if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// The answers as a JSON array: each status with the endpoint's name and
/// the derived `peers_down` / `quorum_reachable`, or the endpoint's error.
fn json(names: &[String], answers: &[Result<NodeStatus, String>]) -> serde_json::Value {
    let one = |name: &String, answer: &Result<NodeStatus, String>| match answer {
        Ok(s) => {
            let mut v = serde_json::to_value(s).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.insert("endpoint".into(), name.as_str().into());
                o.insert("peers_down".into(), s.peers_down().into());
                o.insert("quorum_reachable".into(), s.quorum_reachable().into());
                let counters: serde_json::Map<_, _> = s
                    .counters
                    .iter()
                    .map(|(k, v)| (k.clone(), (*v).into()))
                    .collect();
                o.insert("counters".into(), counters.into());
            }
            v
        }
        Err(e) => serde_json::json!({ "endpoint": name, "error": e }),
    };
    names.iter().zip(answers).map(|(n, a)| one(n, a)).collect()
}

/// A note when the replicas that answered run more than one version.
fn mixed_versions(answers: &[Result<NodeStatus, String>]) -> Option<String> {
    let mut by_version: Vec<(String, Vec<u32>)> = Vec::new();
    for s in answers.iter().flatten() {
        let v = s.version_text();
        match by_version.iter_mut().find(|(seen, _)| *seen == v) {
            Some((_, ids)) => ids.push(s.id),
            None => by_version.push((v, vec![s.id])),
        }
    }
    if by_version.len() < 2 {
        return None;
    }
    let parts: Vec<String> = (by_version.iter())
        .map(|(v, on)| format!("{v} on {}", ids(on)))
        .collect();
    Some(format!(
        "replicas run {} versions ({}): a rolling upgrade in progress?",
        by_version.len(),
        parts.join("; ")
    ))
}

fn ids(list: &[u32]) -> String {
    if list.is_empty() {
        return "-".into();
    }
    list.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn row(name: &str, s: &NodeStatus) -> [String; 10] {
    let wire = quorumkv_node::version::Version::of(s.wire.as_ref());
    [
        name.to_string(),
        s.id.to_string(),
        s.protocol.clone(),
        s.role.clone(),
        s.version.clone(),
        ids(&s.peers_up),
        ids(&s.peers_down()),
        if s.quorum_reachable() { "yes" } else { "no" }.into(),
        format!("{}s", s.uptime_secs),
        format!("{}.{}", wire.major, wire.minor),
    ]
}

/// A table of the endpoints that answered, columns aligned.
fn print_table(names: &[String], answers: &[Result<NodeStatus, String>]) {
    let header = [
        "ENDPOINT",
        "ID",
        "PROTOCOL",
        "ROLE",
        "VERSION",
        "PEERS UP",
        "PEERS DOWN",
        "QUORUM",
        "UPTIME",
        "WIRE",
    ]
    .map(String::from);
    let mut rows = vec![header];
    for (name, answer) in names.iter().zip(answers) {
        if let Ok(s) = answer {
            rows.push(row(name, s));
        }
    }
    let widths: Vec<usize> = (0..10)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", cells.join("  ").trim_end());
    }
}
