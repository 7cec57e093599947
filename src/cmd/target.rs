//! Which cluster a client command talks to: `--endpoints`, `--cluster FILE`,
//! `$QUORUMKV_ENDPOINTS`, `$QUORUMKV_CLUSTER`, or the default local cluster,
//! in that order. Endpoints may be host names (`localhost:7001`).

use super::auth_args::AuthArgs;
use super::tls_args::TlsArgs;
use clap::Args as ClapArgs;
use quorumkv_node::client::Credentials;
use quorumkv_node::config::ClusterFile;
use quorumkv_node::tls::ClientTls;
use std::path::{Path, PathBuf};

/// `quorumkv cluster`'s endpoints with the default --port-base.
pub const DEFAULT_ENDPOINTS: &str = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003";

#[derive(ClapArgs, Debug, Clone)]
pub struct Endpoints {
    /// Native endpoints of the replicas, comma separated, as HOST:PORT
    /// (host names allowed). Default: $QUORUMKV_ENDPOINTS, else the replicas
    /// of --cluster / $QUORUMKV_CLUSTER, else `quorumkv cluster`'s default
    /// ports 127.0.0.1:7001-7003.
    #[arg(long, short = 'e', value_delimiter = ',', value_name = "HOST:PORT,...")]
    endpoints: Vec<String>,
    /// Cluster file (TOML, as `quorumkv server --config` takes and
    /// `quorumkv cluster` prints): talk to its replicas. Default: $QUORUMKV_CLUSTER.
    #[arg(long, value_name = "FILE", conflicts_with = "endpoints")]
    cluster: Option<PathBuf>,
}

impl Endpoints {
    /// The endpoints as given (before name resolution), and where they came from.
    pub fn names(&self) -> anyhow::Result<(Vec<String>, String)> {
        if !self.endpoints.is_empty() {
            return Ok((self.endpoints.clone(), "--endpoints".into()));
        }
        if let Some(file) = &self.cluster {
            return Ok((from_file(file)?, format!("--cluster {}", file.display())));
        }
        if let Some(list) = env_nonempty("QUORUMKV_ENDPOINTS") {
            return Ok((split(&list), "$QUORUMKV_ENDPOINTS".into()));
        }
        if let Some(file) = env_nonempty("QUORUMKV_CLUSTER") {
            let list = from_file(Path::new(&file))?;
            return Ok((list, format!("$QUORUMKV_CLUSTER ({file})")));
        }
        Ok((split(DEFAULT_ENDPOINTS), "default".into()))
    }
}

impl Endpoints {
    /// The cluster file the endpoints come from, if they come from one
    /// (its `[tls]` table then says how to connect).
    pub fn cluster_file(&self) -> Option<PathBuf> {
        if !self.endpoints.is_empty() {
            return None;
        }
        if let Some(file) = &self.cluster {
            return Some(file.clone());
        }
        if env_nonempty("QUORUMKV_ENDPOINTS").is_some() {
            return None;
        }
        env_nonempty("QUORUMKV_CLUSTER").map(PathBuf::from)
    }
}

/// Where and how a client command connects.
pub struct Reach {
    pub endpoints: Vec<String>,
    /// Where the endpoints came from (said when none answers).
    pub from: String,
    pub tls: Option<ClientTls>,
    pub credentials: Option<Credentials>,
}

impl Reach {
    /// The same, each replica given up on after `timeout` (the admin
    /// commands' form: snapshot, member).
    pub fn timed(&self, timeout: std::time::Duration) -> quorumkv_node::snapshot::Reach {
        quorumkv_node::snapshot::Reach {
            endpoints: self.endpoints.clone(),
            tls: self.tls.clone(),
            credentials: self.credentials.clone(),
            timeout,
        }
    }
}

/// Run `f` to its end on a runtime of this thread (the client commands).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// The client commands' flags of where and how to connect.
#[derive(ClapArgs, Debug, Clone)]
pub struct ReachArgs {
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    auth: AuthArgs,
}

impl ReachArgs {
    /// The cluster file the endpoints come from, if they come from one.
    pub fn cluster_file(&self) -> Option<PathBuf> {
        self.endpoints.cluster_file()
    }

    /// Where and how to connect; an error is said on stderr, as the client
    /// commands' exit code 2.
    pub fn reach(&self) -> Result<Reach, std::process::ExitCode> {
        let reach = || -> anyhow::Result<Reach> {
            let (names, from) = self.endpoints.names()?;
            Ok(Reach {
                endpoints: names,
                from,
                tls: (self.tls).client_tls(self.endpoints.cluster_file().as_deref())?,
                credentials: self.auth.credentials()?,
            })
        };
        reach().map_err(|e| {
            eprintln!("quorumkv: {e:#}");
            std::process::ExitCode::from(2)
        })
    }
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn split(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn from_file(path: &Path) -> anyhow::Result<Vec<String>> {
    let file = ClusterFile::load(path)?;
    Ok(file.replicas.iter().map(|r| r.dial()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_beats_cluster_file() {
        let e = Endpoints {
            endpoints: vec!["h:1".into()],
            cluster: Some("x".into()),
        };
        assert_eq!(e.names().unwrap().0, vec!["h:1"]);
        let e = Endpoints {
            endpoints: vec![],
            cluster: Some("/nonexistent/c.toml".into()),
        };
        assert!(e.names().is_err());
    }
}
