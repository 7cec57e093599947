//! `quorumkv member list | add | remove | replace`, as `etcdctl member`.

use super::target::ReachArgs;
use clap::{Args as ClapArgs, Subcommand};
use quorumkv_core::NodeId;
use quorumkv_node::config::parse_duration;
use quorumkv_node::member::{self, Change};
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
/// keep their logs (`--durability fsync` or `buffered`). Other protocols
/// have a fixed set of servers and refuse changes. With users, a change
/// needs the admin role.
///
/// Examples:
///   quorumkv member list --cluster cluster.toml
///   quorumkv member add 4 --cluster cluster.toml
///   quorumkv member replace 1 4 --cluster cluster.toml --user admin
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
