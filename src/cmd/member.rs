//! `quorumkv member list | add | remove | replace | update`, as `etcdctl member`.

use super::target::ReachArgs;
use clap::{Args as ClapArgs, Subcommand};
use quorumkv_core::NodeId;
use quorumkv_node::config::parse_duration;
use quorumkv_node::config::ClusterFile;
use quorumkv_node::member::{self, Change};
use quorumkv_node::{address_book, member_update};
use std::process::ExitCode;
use std::time::Duration;

/// Show who votes, or change it online (as `etcdctl member list / add /
/// remove` and ZooKeeper's `reconfig`)
///
/// Zab changes its voting servers through its log: the leader proposes the
/// new set, a quorum of the old and one of the new commit it, and it is in
/// effect from then on. A server added must already be known to the
/// cluster (in its cluster file; start it as a spare with `--opt
/// spares=K`, the last K servers, which follow the leader as learners
/// until a change names them). A removed server becomes a learner; stop it
/// once the change is committed. One change at a time; the replicas must
/// keep their logs (`--durability fsync` or `buffered`). ABD changes its
/// replicas online too. Other protocols have a fixed set of servers and
/// refuse changes; for every protocol, `member update` moves a lost
/// server's id to a new machine. With users, a change needs the admin
/// role.
///
/// Examples:
///   quorumkv member list --cluster cluster.toml
///   quorumkv member add 4 --cluster cluster.toml
///   quorumkv member replace 1 4 --cluster cluster.toml --user admin
///   quorumkv member update 2 10.0.0.9:7001 --cluster cluster.toml
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(subcommand)]
    cmd: MemberCmd,
}

#[derive(Subcommand, Debug)]
enum MemberCmd {
    /// The voting servers, the learners, the leader and any change in flight
    List {
        #[command(flatten)]
        how: How,
    },
    /// Make server ID a voter
    Add {
        id: NodeId,
        #[command(flatten)]
        how: How,
    },
    /// Stop server ID from voting (it stays a learner until stopped)
    Remove {
        id: NodeId,
        #[command(flatten)]
        how: How,
    },
    /// Swap voter OLD for server NEW in one change
    Replace {
        old: NodeId,
        new: NodeId,
        #[command(flatten)]
        how: How,
    },
    /// Tell every replica that server ID now lives at HOST:PORT (its
    /// machine was replaced), as `etcdctl member update`
    ///
    /// For every protocol. Stop the old server first: a replica refuses to
    /// move a server it is linked to, and nothing changes while server ID
    /// still answers. Each live replica dials ID at the new address from
    /// now on and rewrites its own cluster file (pinning `cluster_id`,
    /// which is otherwise derived from the addresses); with --cluster FILE
    /// that file is rewritten too, to copy to the new machine. Then start
    /// the new server there with an empty data directory and --recover:
    /// it catches up from its peers before it serves. Exit 1 when a
    /// replica other than ID was not updated: once back, it learns the
    /// move from its peers' address books (or run this again then).
    ///
    /// Example (server 2's machine is gone; its replacement is 10.0.0.9):
    ///   quorumkv member update 2 10.0.0.9:7001 --cluster cluster.toml
    ///   quorumkv server --config cluster.toml --id 2 --recover   # on 10.0.0.9
    ///   quorumkv endpoints health --cluster cluster.toml
    #[command(verbatim_doc_comment)]
    Update {
        /// The server whose machine was replaced (its id stays)
        id: NodeId,
        /// Where peers and clients dial it now: HOST:PORT, a name or an address
        addr: String,
        #[command(flatten)]
        how: How,
    },
}

/// Where to connect and how long to wait.
#[derive(ClapArgs, Debug)]
struct How {
    #[command(flatten)]
    reach: ReachArgs,
    /// Give up on a replica after this long; a change waits up to 6 times
    /// this for its commit.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    timeout: Duration,
}

pub fn run(a: Args) -> ExitCode {
    let (change, how) = match a.cmd {
        MemberCmd::Update { id, addr, how } => return update(id, &addr, &how),
        MemberCmd::List { how } => (None, how),
        MemberCmd::Add { id, how } => (Some(Change::Add(id)), how),
        MemberCmd::Remove { id, how } => (Some(Change::Remove(id)), how),
        MemberCmd::Replace { old, new, how } => (Some(Change::Replace { old, new }), how),
    };
    let r = match how.reach.reach() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let reach = r.timed(how.timeout);
    let done = match &change {
        None => super::target::block_on(member::list(&reach)).map(|(m, _)| m),
        Some(c) => {
            super::target::block_on(member::change(&reach, c, how.timeout.saturating_mul(6)))
        }
    };
    match done {
        Ok(m) => {
            print!("{}", member::describe(&m));
            ExitCode::SUCCESS
        }
        Err(e) => super::fail(format!("member ({}): {e}", r.from)),
    }
}

/// `member update`: every replica but `id` dials it at `addr`, and the
/// local cluster file says so too.
fn update(id: NodeId, addr: &str, how: &How) -> ExitCode {
    let r = match how.reach.reach() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let reach = r.timed(how.timeout);
    let answers = match super::target::block_on(member_update::update(&reach, id, addr)) {
        Ok(a) => a,
        Err(e) => return super::fail(format!("member update ({}): {e}", r.from)),
    };
    print!("{}", member_update::describe(&answers));
    let mut ok = answers.iter().all(|a| a.outcome.is_ok());
    if let Some(file) = how.reach.cluster_file() {
        match rewrite_local(&file, id, addr) {
            Ok(()) => println!("{}: server {id} at {addr}", file.display()),
            Err(e) => {
                eprintln!("quorumkv: {e}");
                ok = false;
            }
        }
    }
    if !ok {
        eprintln!(
            "quorumkv: member update: some replicas were not updated; once back they learn \
             the move from their peers (or run this again then: it changes nothing twice)"
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// Rewrite the cluster file this command read, as the replicas rewrite theirs.
fn rewrite_local(file: &std::path::Path, id: NodeId, addr: &str) -> Result<(), String> {
    let cluster = ClusterFile::load(file).map_err(|e| format!("{e:#}"))?;
    if cluster.replica(id).is_some_and(|r| r.dial() == addr) {
        return Ok(());
    }
    address_book::rewrite(file, id, addr, &cluster.id())
}
