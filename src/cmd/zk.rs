//! `quorumkv zk create | get | set | ls | stat | rm | watch | sync |
//! getacl | setacl`: the
//! coordination service (ZooKeeper's znodes) of a cluster running
//! `--protocol zab`.

use super::target::ReachArgs;
use clap::{Args as ClapArgs, Subcommand};
use quorumkv_core::znode::{acl, Acl, Stat, ZkError};
use quorumkv_node::client::{ClientConfig, ClientError};
use quorumkv_node::config::parse_duration;
use quorumkv_node::zk::{CreateMode, WatchEvent, ZkClient, ZkClientError};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// ZooKeeper-style znodes on a Zab cluster.
///
/// Exit status: 0 done; 1 ZooKeeper said no (no node, node exists, bad
/// version, not empty, …: nothing changed); 2 any other error (cluster
/// unreachable, not running zab, no answer in time: a write may or may not
/// have taken effect).
///
/// Example:
///   quorumkv cluster --protocol zab        # in another terminal
///   quorumkv zk create /app config-v1
///   quorumkv zk watch /app &               # waits for the next change
///   quorumkv zk set /app config-v2         # the watch prints `changed /app`
///   quorumkv zk create /app/lock- --ephemeral --sequential --hold
///   quorumkv zk --auth digest:alice:secret create /private x --acl auth::cdrwa
///   quorumkv zk getacl /private           # NoAuth (exit 1) without --auth
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// ZooKeeper's addauth for this command's connection before it runs:
    /// `digest:USER:PASSWORD` (repeatable; before or after the
    /// subcommand). A --user login is the identity `user:NAME` without this.
    #[arg(long = "auth", value_name = "SCHEME:AUTH", value_parser = parse_auth, global = true)]
    zk_auth: Vec<(String, String)>,
    #[command(subcommand)]
    cmd: ZkCmd,
}

#[derive(ClapArgs, Debug)]
struct Target {
    #[command(flatten)]
    reach: ReachArgs,
    /// Give up after this long, connecting included (`watch` waits for its
    /// event without limit unless --wait says otherwise).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    timeout: Duration,
}

#[derive(Subcommand, Debug)]
enum ZkCmd {
    /// Create a node; prints its path (with the sequence suffix).
    ///
    /// An ephemeral node belongs to this command's session and is deleted
    /// when the session times out (--session-timeout after the command
    /// exits), or at once when --hold is ended by Ctrl-C or end of input.
    Create {
        /// Absolute path (`/a/b`); with --sequential a suffix is appended.
        path: String,
        /// The node's data (default: empty).
        #[arg(default_value = "")]
        data: String,
        /// Delete the node when this command's session ends.
        #[arg(long)]
        ephemeral: bool,
        /// Append a 10-digit number that grows with every sequential create
        /// under the same parent (never reused).
        #[arg(long)]
        sequential: bool,
        /// The session's timeout (ephemerals outlive the command this long).
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        session_timeout: Duration,
        /// Keep the session open (heartbeating) until Ctrl-C or end of
        /// standard input, then close it.
        #[arg(long, requires = "ephemeral")]
        hold: bool,
        /// The node's ACL in zkCli's form, e.g.
        /// `world:anyone:r,digest:alice:HASH=:cdrwa,user:bob:rw`, or
        /// `auth::cdrwa` for this connection's identities (default
        /// `world:anyone:cdrwa`).
        #[arg(long, value_parser = parse_acl)]
        acl: Option<AclArg>,
        #[command(flatten)]
        target: Target,
    },
    /// Print a node's data (and with --stat its stat).
    Get {
        path: String,
        #[arg(long)]
        stat: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Set a node's data; prints the new version.
    Set {
        path: String,
        data: String,
        /// Only if the node's version is this one.
        #[arg(long)]
        version: Option<u32>,
        #[command(flatten)]
        target: Target,
    },
    /// List a node's children, one per line, sorted.
    Ls {
        path: String,
        #[command(flatten)]
        target: Target,
    },
    /// Print a node's stat; exit 1 when it does not exist.
    Stat {
        path: String,
        #[command(flatten)]
        target: Target,
    },
    /// Delete a node (it must have no children).
    Rm {
        path: String,
        /// Only if the node's version is this one.
        #[arg(long)]
        version: Option<u32>,
        #[command(flatten)]
        target: Target,
    },
    /// Set one watch and print the event when it fires (`created /a`,
    /// `deleted /a`, `changed /a`, `children /a`).
    Watch {
        path: String,
        /// Watch the children (getChildren) instead of the node (exists).
        #[arg(long)]
        children: bool,
        /// Give up (exit 2) when nothing fired within this long.
        #[arg(long, value_parser = parse_duration)]
        wait: Option<Duration>,
        #[command(flatten)]
        target: Target,
    },
    /// Wait until the server applied every committed change (linearizable);
    /// prints the zxid reached.
    Sync {
        #[command(flatten)]
        target: Target,
    },
    /// Print a node's ACL, one `scheme:id:perms` entry per line, and its
    /// ACL version (needs READ or ADMIN on it; without ADMIN digest
    /// hashes show as `x`).
    Getacl {
        path: String,
        #[command(flatten)]
        target: Target,
    },
    /// Replace a node's ACL (needs ADMIN on it); prints the new ACL
    /// version. ACL in zkCli's form: `world:anyone:cdrwa,digest:alice:HASH=:r`.
    Setacl {
        path: String,
        #[arg(value_parser = parse_acl)]
        acl: AclArg,
        /// Only if the node's ACL version (aversion) is this one.
        #[arg(long)]
        version: Option<u32>,
        #[command(flatten)]
        target: Target,
    },
}

/// `--auth digest:alice:secret` → ("digest", "alice:secret").
fn parse_auth(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((scheme, auth)) if !scheme.is_empty() => Ok((scheme.into(), auth.into())),
        _ => Err("expected SCHEME:AUTH, e.g. digest:alice:secret".into()),
    }
}

/// One ACL argument (a whole list: clap must not take it for many values).
#[derive(Clone, Debug)]
struct AclArg(Vec<Acl>);

fn parse_acl(s: &str) -> Result<AclArg, String> {
    acl::parse(s).map(AclArg)
}

impl ZkCmd {
    fn target(&self) -> &Target {
        match self {
            ZkCmd::Create { target, .. }
            | ZkCmd::Get { target, .. }
            | ZkCmd::Set { target, .. }
            | ZkCmd::Ls { target, .. }
            | ZkCmd::Stat { target, .. }
            | ZkCmd::Rm { target, .. }
            | ZkCmd::Watch { target, .. }
            | ZkCmd::Getacl { target, .. }
            | ZkCmd::Setacl { target, .. }
            | ZkCmd::Sync { target } => target,
        }
    }
}

pub fn run(a: Args) -> ExitCode {
    let target = a.cmd.target();
    let reach = match target.reach.reach() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let (endpoints, from) = (reach.endpoints, reach.from);
    let timeout = target.timeout;
    let cfg = ClientConfig {
        op_timeout: timeout,
        connect_timeout: timeout,
        tls: reach.tls,
        credentials: reach.credentials,
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let auths = a.zk_auth.clone();
    match rt.block_on(one(a.cmd, endpoints, cfg, auths)) {
        Ok(code) => code,
        Err(ZkClientError::Zk(e)) => {
            eprintln!("quorumkv: {}", zk_message(&e));
            ExitCode::FAILURE
        }
        Err(ZkClientError::Client(e @ ClientError::Connect(_))) => {
            eprintln!("quorumkv: {e} (endpoints from {from})");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("quorumkv: {e}");
            ExitCode::from(2)
        }
    }
}

fn zk_message(e: &ZkError) -> String {
    let hint = match e {
        ZkError::NoNode => " (the node, or for create its parent, does not exist)",
        ZkError::NotEmpty => " (delete its children first)",
        ZkError::BadVersion => " (`quorumkv zk stat` shows the current version)",
        ZkError::NoAuth => " (the node's ACL does not let this connection's identities do it: --auth digest:USER:PASSWORD, --user)",
        ZkError::InvalidAcl => " (an empty ACL, an unknown scheme, or auth:: without --auth / --user)",
        _ => "",
    };
    format!("{e}{hint}")
}

async fn one(
    cmd: ZkCmd,
    endpoints: Vec<String>,
    cfg: ClientConfig,
    auths: Vec<(String, String)>,
) -> Result<ExitCode, ZkClientError> {
    if let ZkCmd::Create {
        ephemeral: true,
        session_timeout,
        ..
    } = &cmd
    {
        let zk = ZkClient::connect(endpoints, cfg, *session_timeout).await?;
        for (scheme, auth) in &auths {
            zk.add_auth(scheme, auth).await?;
        }
        return create(zk, cmd).await;
    }
    let zk = ZkClient::connect_without_session(endpoints, cfg).await?;
    for (scheme, auth) in &auths {
        zk.add_auth(scheme, auth).await?;
    }
    let mut out = std::io::stdout().lock();
    match cmd {
        ZkCmd::Create { .. } => return create(zk, cmd).await,
        ZkCmd::Get { path, stat, .. } => {
            let (data, st) = zk.get_data(&path, false).await?;
            let _ = out.write_all(&data);
            let _ = writeln!(out);
            if stat {
                let _ = write!(out, "{}", show_stat(&st));
            }
        }
        ZkCmd::Set {
            path,
            data,
            version,
            ..
        } => {
            let st = zk.set_data(&path, data, version).await?;
            let _ = writeln!(out, "version {}", st.version);
        }
        ZkCmd::Ls { path, .. } => {
            for name in zk.children(&path, false).await? {
                let _ = writeln!(out, "{name}");
            }
        }
        ZkCmd::Stat { path, .. } => match zk.exists(&path, false).await? {
            Some(st) => {
                let _ = write!(out, "{}", show_stat(&st));
            }
            None => return Err(ZkError::NoNode.into()),
        },
        ZkCmd::Rm { path, version, .. } => zk.delete(&path, version).await?,
        ZkCmd::Watch {
            path,
            children,
            wait,
            ..
        } => return watch(zk, &path, children, wait).await,
        ZkCmd::Sync { .. } => {
            let zxid = zk.sync().await?;
            let _ = writeln!(out, "zxid {zxid}");
        }
        ZkCmd::Getacl { path, .. } => {
            let (acl, st) = zk.get_acl(&path).await?;
            for a in &acl {
                let _ = writeln!(out, "{}", acl::format(std::slice::from_ref(a)));
            }
            let _ = writeln!(out, "aversion {}", st.aversion);
        }
        ZkCmd::Setacl {
            path, acl, version, ..
        } => {
            let st = zk.set_acl(&path, acl.0, version).await?;
            let _ = writeln!(out, "aversion {}", st.aversion);
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn create(zk: ZkClient, cmd: ZkCmd) -> Result<ExitCode, ZkClientError> {
    let ZkCmd::Create {
        path,
        data,
        ephemeral,
        sequential,
        session_timeout,
        hold,
        acl,
        ..
    } = cmd
    else {
        unreachable!("called for create only");
    };
    let mode = CreateMode {
        ephemeral,
        sequential,
    };
    let (made, _) = match acl {
        Some(acl) => zk.create_with_acl(&path, data, mode, acl.0).await?,
        None => zk.create(&path, data, mode).await?,
    };
    println!("{made}");
    let _ = std::io::stdout().flush();
    if !ephemeral {
        return Ok(ExitCode::SUCCESS);
    }
    if !hold {
        eprintln!(
            "ephemeral: deleted when session {:x} times out ({session_timeout:?} from now)",
            zk.session()
        );
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("holding the session; Ctrl-C or end of input closes it");
    let stdin_closed = tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    });
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = stdin_closed => {}
    }
    zk.close().await?;
    Ok(ExitCode::SUCCESS)
}

async fn watch(
    zk: ZkClient,
    path: &str,
    children: bool,
    wait: Option<Duration>,
) -> Result<ExitCode, ZkClientError> {
    let mut events = zk.watches().expect("first taker");
    if children {
        zk.children(path, true).await?;
    } else {
        zk.exists(path, true).await?;
    }
    let next = async {
        while let Some(e) = events.recv().await {
            if let WatchEvent::Node { event, path } = e {
                return Some((event, path));
            }
        }
        None
    };
    let got = match wait {
        Some(w) => tokio::time::timeout(w, next).await.ok().flatten(),
        None => next.await,
    };
    match got {
        Some((event, p)) => {
            println!("{} {p}", event.as_str());
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!("quorumkv: no event (connection lost or --wait elapsed)");
            Ok(ExitCode::from(2))
        }
    }
}

fn show_stat(s: &Stat) -> String {
    format!(
        "czxid {}\nmzxid {}\npzxid {}\nctime {}\nmtime {}\nversion {}\ncversion {}\nephemeral_owner {:x}\ndata_length {}\nnum_children {}\naversion {}\n",
        s.czxid,
        s.mzxid,
        s.pzxid,
        s.ctime,
        s.mtime,
        s.version,
        s.cversion,
        s.ephemeral_owner,
        s.data_length,
        s.num_children,
        s.aversion
    )
}
