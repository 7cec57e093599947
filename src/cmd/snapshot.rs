//! `quorumkv snapshot save | restore | status`, as `etcdctl snapshot`.

use super::target::ReachArgs;
use clap::{Args as ClapArgs, Subcommand};
use quorumkv_core::NodeId;
use quorumkv_node::config::parse_duration;
use quorumkv_node::snapshot::{self, Snapshot};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Save a cluster's state to a file, seed new replicas from one, or show a
/// file's header (as `etcdctl snapshot save / restore / status`)
///
/// save reads the replicas of a live cluster: ABD and lease-lock merge the
/// registers of a majority by highest tag; Zab takes one replica's state
/// after a sync, cut at one zxid, its sessions and ephemeral znodes
/// dropped. Either way the file holds every write acknowledged before the
/// save started. Ring and Lamport are not supported. With users, the
/// login must have the admin role.
///
/// restore writes DIR/replica-ID for each replica of the new cluster (the
/// layout of a cluster file's `data_dir` and `quorumkv cluster
/// --data-dir`); each must be absent or empty. Start the new cluster with
/// the same protocol and a durable mode (buffered or fsync).
///
/// Examples:
///   quorumkv snapshot save backup.qkv --cluster cluster.toml --user admin
///   quorumkv snapshot status backup.qkv
///   quorumkv snapshot restore backup.qkv --data-dir /var/lib/quorumkv --replicas 1,2,3
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(subcommand)]
    cmd: SnapshotCmd,
}

#[derive(Subcommand, Debug)]
enum SnapshotCmd {
    /// Read a live cluster's state into FILE (written whole or not at all)
    Save {
        file: PathBuf,
        #[command(flatten)]
        reach: ReachArgs,
        /// Give up on a replica after this long (connecting, its sync and
        /// its whole state).
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Seed the data directories of a new cluster's replicas from FILE
    Restore {
        file: PathBuf,
        /// The root of the new replicas' data: DIR/replica-ID for each.
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
        /// The ids of the new cluster's replicas.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "1,2,3",
            value_name = "ID,..."
        )]
        replicas: Vec<NodeId>,
        /// The storage engine the new replicas will run (their
        /// `--storage-engine`)
        #[arg(long, value_enum, default_value_t, value_name = "ENGINE")]
        storage_engine: quorumkv_node::storage::StorageEngine,
    },
    /// Check FILE (magic, format version, checksum) and print its header
    Status { file: PathBuf },
}

pub fn run(a: Args) -> ExitCode {
    match a.cmd {
        SnapshotCmd::Save {
            file,
            reach,
            timeout,
        } => save(file, &reach, timeout),
        SnapshotCmd::Restore {
            file,
            data_dir,
            replicas,
            storage_engine,
        } => {
            let done = Snapshot::read(&file).and_then(|s| {
                snapshot::restore(&s, &data_dir, &replicas, storage_engine).map(|d| (s, d))
            });
            match done {
                Ok((s, dirs)) => {
                    for d in dirs {
                        println!(
                            "restored {} ({} entries) into {}",
                            s.header.protocol,
                            s.header.entries,
                            d.display()
                        );
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => super::fail(format!("{e:#}")),
            }
        }
        SnapshotCmd::Status { file } => match Snapshot::read(&file) {
            Ok(s) => {
                let bytes = std::fs::metadata(&file).map_or(0, |m| m.len());
                print!("{}", snapshot::describe(&s.header, bytes));
                ExitCode::SUCCESS
            }
            Err(e) => super::fail(format!("{e:#}")),
        },
    }
}

fn save(file: PathBuf, args: &ReachArgs, timeout: Duration) -> ExitCode {
    let r = match args.reach() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let reach = r.timed(timeout);
    let saved =
        super::target::block_on(snapshot::save(&reach)).and_then(|s| s.write(&file).map(|()| s));
    match saved {
        Ok(s) => {
            let h = &s.header;
            println!(
                "saved {} ({} entries, {} records) to {}: {}",
                h.protocol,
                h.entries,
                h.records,
                file.display(),
                h.cut
            );
            ExitCode::SUCCESS
        }
        Err(e) => super::fail(format!("snapshot save ({}): {e:#}", r.from)),
    }
}
