//! Cluster files: which protocol a cluster runs and where its replicas listen.
//!
//! ```toml
//! protocol = "abd"
//! cluster_id = "prod-eu"    # optional; stored in every data directory
//! durability = "fsync"       # optional: memory, buffered or fsync
//! storage_engine = "log"     # optional: log or fjall (durable modes)
//! data_dir = "/var/lib/qkv"  # optional: replica N uses data_dir/replica-N
//!
//! [[replica]]
//! id = 1
//! addr = "127.0.0.1:7001"   # native port: peers and quorumkv clients
//! resp = "127.0.0.1:7101"   # RESP port: redis-cli, redis-benchmark (optional)
//! metrics = "127.0.0.1:7201" # Prometheus text at /metrics (optional)
//!
//! [[replica]]                # on its own host (a container, a VM):
//! id = 2
//! addr = "0.0.0.0:7001"      # listen on every interface...
//! advertise = "qkv2:7001"    # ...and be dialled here (a name or an address;
//!                            # peers resolve it again at every redial)
//!
//! [options]                  # the protocol's options (optional;
//! fast-read = false          # `quorumkv server --help` lists them)
//!
//! [tls]                      # TLS 1.3 on every port but metrics (optional)
//! dir = "tls"                # ca.pem, replica-N.pem, replica-N.key
//!                            # (relative to this file; `quorumkv cert`)
//! client_cert_auth = false   # true: clients must present a certificate
//! ```

use anyhow::{bail, Context};
use quorumkv_core::protocol::ProtocolKind;
use quorumkv_core::NodeId;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// A `[[replica]]` entry. Unknown keys are errors (a misspelt setting
/// would otherwise be ignored without a word), as in every table here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaAddr {
    pub id: NodeId,
    /// Where the replica listens (its native port).
    pub addr: SocketAddr,
    /// Where peers and clients reach it, `HOST:PORT` with a host name or an
    /// address, when not `addr` (a replica listening on 0.0.0.0, behind a
    /// published port or a service name). Peers resolve a name again each
    /// time they redial, so a replica that comes back at another address
    /// (a recreated container) is found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertise: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resp: Option<SocketAddr>,
    /// ZooKeeper client port (optional; Zab only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zk: Option<SocketAddr>,
    /// HTTP address serving Prometheus metrics at /metrics (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<SocketAddr>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    pub protocol: ProtocolKind,
    /// Names the cluster in each replica's data directory, so that data of
    /// another cluster is refused; derived from the replicas when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// Every replica's durability (`--durability` overrides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<crate::storage::Durability>,
    /// Every replica's storage engine (`--storage-engine` overrides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_engine: Option<crate::storage::StorageEngine>,
    /// Replica N keeps its data in `data_dir/replica-N` (`--data-dir`
    /// overrides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<std::path::PathBuf>,
    #[serde(rename = "replica")]
    pub replicas: Vec<ReplicaAddr>,
    /// Client connection limits of every replica (optional; flags of
    /// `quorumkv server` override them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsFile>,
    /// The protocol's options (`--opt key=value` overrides them).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub options: std::collections::BTreeMap<String, toml::Value>,
    /// A file holding the cluster secret that replicas prove to each other
    /// on every link (`peer_auth`); relative to the cluster file's
    /// directory. `quorumkv secret` writes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<std::path::PathBuf>,
    /// The users file (relative to the cluster file): clients must
    /// authenticate (`quorumkv server --users` overrides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<std::path::PathBuf>,
    /// TLS for every replica and for the clients that read this file
    /// (optional; `quorumkv server --tls-*` flags override it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFile>,
}

/// The `[tls]` table of a cluster file. Each path is `dir`'s file of the
/// usual name unless given; relative paths are relative to the cluster
/// file; `{id}` in `cert` and `key` is the replica's id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    /// Holds `ca.pem`, `replica-N.pem` and `replica-N.key` (what
    /// `quorumkv cert` writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// The cluster CA certificate [default: dir/ca.pem].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// A replica's certificate chain [default: dir/replica-{id}.pem].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// A replica's private key [default: dir/replica-{id}.key].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// Clients reading this file present this certificate and key
    /// (needed with `client_cert_auth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<PathBuf>,
    /// Every connection must present a certificate signed by the CA.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub client_cert_auth: bool,
}

impl TlsFile {
    /// Make relative paths relative to `base` (the cluster file's directory).
    fn resolve_relative(&mut self, base: &Path) {
        let paths = [
            &mut self.dir,
            &mut self.ca,
            &mut self.cert,
            &mut self.key,
            &mut self.client_cert,
            &mut self.client_key,
        ];
        for p in paths.into_iter().flatten() {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }

    /// `given`, else `dir/default`.
    fn path(&self, given: &Option<PathBuf>, default: &str, what: &str) -> anyhow::Result<PathBuf> {
        match (given, &self.dir) {
            (Some(p), _) => Ok(p.clone()),
            (None, Some(dir)) => Ok(dir.join(default)),
            (None, None) => bail!("[tls] needs `dir` or `{what}`"),
        }
    }

    /// The cluster CA certificate.
    pub fn ca_path(&self) -> anyhow::Result<PathBuf> {
        self.path(&self.ca, "ca.pem", "ca")
    }

    /// Replica `id`'s files.
    pub fn replica(&self, id: NodeId) -> anyhow::Result<crate::tls::TlsSettings> {
        let with_id =
            |p: PathBuf| PathBuf::from(p.to_string_lossy().replace("{id}", &id.to_string()));
        Ok(crate::tls::TlsSettings {
            ca: self.ca_path()?,
            cert: with_id(self.path(&self.cert, &format!("replica-{id}.pem"), "cert")?),
            key: with_id(self.path(&self.key, &format!("replica-{id}.key"), "key")?),
            client_cert_auth: self.client_cert_auth,
        })
    }

    /// What a client of this cluster presents, if anything.
    pub fn client_cert_key(&self) -> Option<(PathBuf, PathBuf)> {
        Some((self.client_cert.clone()?, self.client_key.clone()?))
    }
}

/// The `[limits]` table of a cluster file, as written (`"64MiB"`, `"10s"`,
/// `"0"` = no timeout).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    pub max_buffer_bytes: Option<String>,
    pub max_queued_bytes: Option<String>,
    pub read_timeout: Option<String>,
    pub idle_timeout: Option<String>,
}

/// Client connection limits after parsing; `None` = not set here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub max_buffer_bytes: Option<usize>,
    pub max_queued_bytes: Option<usize>,
    pub read_timeout: Option<Option<std::time::Duration>>,
    pub idle_timeout: Option<Option<std::time::Duration>>,
}

impl ReplicaAddr {
    /// A replica listening and reached at `addr`.
    pub fn at(id: NodeId, addr: SocketAddr) -> ReplicaAddr {
        ReplicaAddr {
            id,
            addr,
            advertise: None,
            resp: None,
            zk: None,
            metrics: None,
        }
    }

    /// Where peers and clients dial it: `advertise`, else `addr`.
    pub fn dial(&self) -> String {
        self.advertise
            .clone()
            .unwrap_or_else(|| self.addr.to_string())
    }

    fn validate(&self) -> anyhow::Result<()> {
        match &self.advertise {
            Some(a) => check_host_port(a)
                .with_context(|| format!("replica {}: advertise = {a:?}", self.id)),
            None if self.addr.ip().is_unspecified() => bail!(
                "replica {} listens on {} (every interface): give `advertise = \"HOST:PORT\"`, \
                 where its peers and clients reach it",
                self.id,
                self.addr
            ),
            None => Ok(()),
        }
    }
}

/// The environment variables `quorumkv server` takes its flags from (the
/// container image is configured by them). Local clusters remove them from
/// their replicas' environment: their flags say everything.
pub const SERVER_ENV: [&str; 21] = [
    "QUORUMKV_ID",
    "QUORUMKV_POD_INDEX",
    "QUORUMKV_CONFIG",
    "QUORUMKV_CLUSTER_ID",
    "QUORUMKV_PROTOCOL",
    "QUORUMKV_LISTEN",
    "QUORUMKV_ADVERTISE",
    "QUORUMKV_RESP",
    "QUORUMKV_ZK_PORT",
    "QUORUMKV_PEERS",
    "QUORUMKV_DURABILITY",
    "QUORUMKV_STORAGE_ENGINE",
    "QUORUMKV_DATA_DIR",
    "QUORUMKV_CLUSTER_SECRET_FILE",
    "QUORUMKV_INSECURE",
    "QUORUMKV_USERS",
    "QUORUMKV_TLS_CA",
    "QUORUMKV_TLS_CERT",
    "QUORUMKV_TLS_KEY",
    "QUORUMKV_CLIENT_CERT_AUTH",
    "QUORUMKV_DRAIN_TIMEOUT",
];

/// `HOST:PORT` (a name, an IPv4 address or a bracketed IPv6 one) with a
/// port that is not 0.
pub fn check_host_port(s: &str) -> anyhow::Result<()> {
    if s.parse::<SocketAddr>().is_ok_and(|a| a.port() != 0) {
        return Ok(());
    }
    let (host, port) = s.rsplit_once(':').context("expected HOST:PORT (no port)")?;
    let port: u16 = port.parse().context("expected HOST:PORT (invalid port)")?;
    let name_ok = !host.is_empty()
        && (host.chars()).all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_');
    if port == 0 || !name_ok {
        bail!("expected HOST:PORT with a host name or address and a port above 0");
    }
    Ok(())
}

impl LimitsFile {
    pub fn parse(&self) -> anyhow::Result<Limits> {
        fn field<T>(
            name: &str,
            v: &Option<String>,
            parse: fn(&str) -> Result<T, String>,
        ) -> anyhow::Result<Option<T>> {
            v.as_deref()
                .map(parse)
                .transpose()
                .map_err(|e| anyhow::anyhow!("[limits] {name}: {e}"))
        }
        Ok(Limits {
            max_buffer_bytes: field("max_buffer_bytes", &self.max_buffer_bytes, parse_bytes)?,
            max_queued_bytes: field("max_queued_bytes", &self.max_queued_bytes, parse_bytes)?,
            read_timeout: field("read_timeout", &self.read_timeout, parse_optional_duration)?,
            idle_timeout: field("idle_timeout", &self.idle_timeout, parse_optional_duration)?,
        })
    }
}

impl ClusterFile {
    pub fn load(path: &Path) -> anyhow::Result<ClusterFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read cluster file {}", path.display()))?;
        let mut file: ClusterFile = toml::from_str(&text)
            .with_context(|| format!("invalid cluster file {}", path.display()))?;
        if let (Some(secret), Some(dir)) = (&file.secret_file, path.parent()) {
            file.secret_file = Some(dir.join(secret));
        }
        if let Some(tls) = &mut file.tls {
            tls.resolve_relative(path.parent().unwrap_or(Path::new(".")));
        }
        file.validate()
            .with_context(|| format!("invalid cluster file {}", path.display()))?;
        Ok(file)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if self.replicas.is_empty() {
            bail!("no [[replica]] entries");
        }
        let mut ids: Vec<_> = self.replicas.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            bail!("replica ids must be unique");
        }
        if ids.iter().any(|&i| i == 0 || i >= 64) {
            bail!("replica ids must be between 1 and 63");
        }
        for r in &self.replicas {
            r.validate()?;
        }
        if let Some(l) = &self.limits {
            l.parse()?;
        }
        if let Some(t) = &self.tls {
            t.ca_path()?;
            if t.client_cert.is_some() != t.client_key.is_some() {
                bail!("[tls] client_cert and client_key go together");
            }
        }
        if self.replicas.iter().any(|r| r.zk.is_some())
            && self.protocol.name() != quorumkv_core::znode::op::SERVED_BY
        {
            bail!(
                "a ZooKeeper port (`zk`, --zk-port) serves znodes, and {}",
                quorumkv_core::znode::op::NEEDS_ZAB
            );
        }
        let info = self.protocol.info();
        info.check_options(&self.option_pairs())
            .map_err(|e| anyhow::anyhow!("[options] {e}"))?;
        Ok(())
    }

    /// The `[options]` table as `key = value` text pairs.
    pub fn option_pairs(&self) -> Vec<(String, String)> {
        (self.options.iter())
            .map(|(k, v)| {
                let v = match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect()
    }

    pub fn members(&self) -> Vec<NodeId> {
        let mut ids: Vec<_> = self.replicas.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        ids
    }

    pub fn replica(&self, id: NodeId) -> Option<&ReplicaAddr> {
        self.replicas.iter().find(|r| r.id == id)
    }

    /// A local cluster: replica i (1-based) on native port `base + i` and
    /// RESP port `base + 100 + i`.
    pub fn local(protocol: ProtocolKind, replicas: usize, base: u16) -> ClusterFile {
        let ip = std::net::Ipv4Addr::LOCALHOST;
        let replicas = (1..=replicas as u16)
            .map(|i| ReplicaAddr {
                resp: Some(SocketAddr::from((ip, base + 100 + i))),
                ..ReplicaAddr::at(i as NodeId, SocketAddr::from((ip, base + i)))
            })
            .collect();
        ClusterFile::new(protocol, replicas)
    }

    /// A cluster of `replicas`, every other setting at its default.
    pub fn new(protocol: ProtocolKind, replicas: Vec<ReplicaAddr>) -> ClusterFile {
        ClusterFile {
            protocol,
            cluster_id: None,
            durability: None,
            storage_engine: None,
            data_dir: None,
            replicas,
            limits: None,
            options: Default::default(),
            tls: None,
            secret_file: None,
            users: None,
        }
    }

    /// The cluster id stored in data directories: `cluster_id`, else one
    /// derived from the replicas' ids and the addresses they are dialled at
    /// (so three replicas on 0.0.0.0 with distinct names differ from others).
    pub fn id(&self) -> String {
        self.cluster_id.clone().unwrap_or_else(|| {
            let replicas: Vec<_> = (self.replicas.iter()).map(|r| (r.id, r.dial())).collect();
            crate::storage::dir::derived_cluster_id(&replicas)
        })
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("cluster files serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_roundtrips_through_toml() {
        let c = ClusterFile::local(ProtocolKind::default_protocol(), 3, 7000);
        assert_eq!(c.replica(2).unwrap().addr.port(), 7002);
        assert_eq!(c.replica(2).unwrap().resp.unwrap().port(), 7102);
        let back: ClusterFile = toml::from_str(&c.to_toml()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn rejects_duplicates_and_unknown_protocols() {
        let dup = "protocol = \"abd\"\n[[replica]]\nid = 1\naddr = \"127.0.0.1:1\"\n[[replica]]\nid = 1\naddr = \"127.0.0.1:2\"\n";
        let f: ClusterFile = toml::from_str(dup).unwrap();
        assert!(f.validate().is_err());
        let bad = "protocol = \"paxos\"\n[[replica]]\nid = 1\naddr = \"127.0.0.1:1\"\n";
        assert!(toml::from_str::<ClusterFile>(bad).is_err());
    }

    #[test]
    fn options_table_is_the_protocols_and_checked() {
        let base = "protocol = \"abd\"\n[[replica]]\nid = 1\naddr = \"127.0.0.1:1\"\n";
        // Booleans may be written as TOML booleans or strings.
        let ok = format!("{base}[options]\nfast-read = false\nthrifty = \"true\"\n");
        let f: ClusterFile = toml::from_str(&ok).unwrap();
        f.validate().unwrap();
        let mut pairs = f.option_pairs();
        pairs.sort();
        let want = [("fast-read", "false"), ("thrifty", "true")];
        assert_eq!(pairs, want.map(|(k, v)| (k.to_string(), v.to_string())));
        let unknown: ClusterFile =
            toml::from_str(&format!("{base}[options]\nlease = \"1s\"\n")).unwrap();
        let e = format!("{:#}", unknown.validate().unwrap_err());
        assert!(
            e.contains("[options]") && e.contains("lease") && e.contains("known:"),
            "{e}"
        );
        let bad: ClusterFile = toml::from_str(&format!("{base}[options]\nthrifty = 3\n")).unwrap();
        assert!(format!("{:#}", bad.validate().unwrap_err()).contains("thrifty"));
    }

    #[test]
    fn replicas_listen_on_every_interface_and_advertise_a_name() {
        let text = "protocol = \"abd\"\n\
            [[replica]]\nid = 1\naddr = \"0.0.0.0:7001\"\nadvertise = \"qkv1:7001\"\n\
            [[replica]]\nid = 2\naddr = \"0.0.0.0:7001\"\nadvertise = \"10.0.0.2:7001\"\n\
            [[replica]]\nid = 3\naddr = \"127.0.0.1:7003\"\n";
        let f: ClusterFile = toml::from_str(text).unwrap();
        f.validate().unwrap();
        assert_eq!(f.replica(1).unwrap().dial(), "qkv1:7001");
        assert_eq!(f.replica(2).unwrap().dial(), "10.0.0.2:7001");
        assert_eq!(f.replica(3).unwrap().dial(), "127.0.0.1:7003");
        assert_eq!(f.replica(1).unwrap().addr.port(), 7001);
        let back: ClusterFile = toml::from_str(&f.to_toml()).unwrap();
        assert_eq!(back, f);
        // Names, not listen addresses, tell two such clusters apart.
        let other: ClusterFile = toml::from_str(&text.replace("qkv1", "other1")).unwrap();
        assert_ne!(f.id(), other.id());
    }

    #[test]
    fn every_interface_needs_an_advertised_address_and_it_must_parse() {
        let one = |extra: &str| {
            let text = format!(
                "protocol = \"abd\"\n[[replica]]\nid = 1\naddr = \"0.0.0.0:7001\"\n{extra}"
            );
            toml::from_str::<ClusterFile>(&text).unwrap().validate()
        };
        let e = format!("{:#}", one("").unwrap_err());
        assert!(e.contains("advertise"), "{e}");
        for bad in ["qkv1", "qkv1:0", "qkv1:http", ":7001", "a b:1"] {
            let e = one(&format!("advertise = \"{bad}\"\n"));
            assert!(e.is_err(), "{bad} accepted");
        }
        for good in ["qkv-1.svc.local:7001", "[::1]:7001", "10.1.2.3:1"] {
            one(&format!("advertise = \"{good}\"\n")).unwrap();
        }
    }

    #[test]
    fn tls_table_names_each_replicas_files_relative_to_the_cluster_file() {
        let dir = std::env::temp_dir().join(format!("qkv-tls-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cluster.toml");
        let text = "protocol = \"abd\"\n[[replica]]\nid = 1\naddr = \"127.0.0.1:1\"\n\
            [tls]\ndir = \"tls\"\nkey = \"/secret/r{id}.key\"\nclient_cert_auth = true\n";
        std::fs::write(&path, text).unwrap();
        let f = ClusterFile::load(&path).unwrap();
        let t = f.tls.as_ref().unwrap();
        let r = t.replica(2).unwrap();
        assert_eq!(r.ca, dir.join("tls/ca.pem"));
        assert_eq!(r.cert, dir.join("tls/replica-2.pem"));
        assert_eq!(r.key, PathBuf::from("/secret/r2.key"));
        assert!(r.client_cert_auth);
        assert_eq!(t.client_cert_key(), None);
        let back: ClusterFile = toml::from_str(&f.to_toml()).unwrap();
        assert_eq!(back, f);
        std::fs::remove_dir_all(&dir).unwrap();
        let bad = "protocol = \"abd\"\n[[replica]]\nid = 1\naddr = \"127.0.0.1:1\"\n[tls]\n";
        let f: ClusterFile = toml::from_str(bad).unwrap();
        let e = format!("{:#}", f.validate().unwrap_err());
        assert!(e.contains("[tls] needs `dir`"), "{e}");
        assert!(toml::from_str::<ClusterFile>(&format!("{bad}dri = \"x\"\n")).is_err());
    }

    #[test]
    fn limits_table_parses_and_rejects_nonsense() {
        let base = "protocol = \"abd\"\n[[replica]]\nid = 1\naddr = \"127.0.0.1:1\"\n";
        let ok = format!("{base}[limits]\nmax_buffer_bytes = \"64MiB\"\nidle_timeout = \"0\"\n");
        let f: ClusterFile = toml::from_str(&ok).unwrap();
        f.validate().unwrap();
        let l = f.limits.unwrap().parse().unwrap();
        assert_eq!(l.max_buffer_bytes, Some(64 << 20));
        assert_eq!(l.idle_timeout, Some(None));
        assert_eq!(l.read_timeout, None);
        let bad: ClusterFile =
            toml::from_str(&format!("{base}[limits]\nread_timeout = \"soon\"\n")).unwrap();
        let e = format!("{:#}", bad.validate().unwrap_err());
        assert!(e.contains("read_timeout"), "{e}");
        assert!(
            toml::from_str::<ClusterFile>(&format!("{base}[limits]\nmax_conns = 1\n")).is_err()
        );
    }

    /// A misspelt key anywhere is an error naming it, not a setting
    /// silently left at its default.
    #[test]
    fn unknown_keys_are_errors_at_the_top_and_in_replicas() {
        let base = "protocol = \"abd\"\n[[replica]]\nid = 1\naddr = \"127.0.0.1:1\"\n";
        toml::from_str::<ClusterFile>(base).unwrap();
        let top = format!("durabilty = \"fsync\"\n{base}");
        let e = toml::from_str::<ClusterFile>(&top).unwrap_err().to_string();
        assert!(e.contains("durabilty"), "{e}");
        let e = toml::from_str::<ClusterFile>(&format!("{base}advertize = \"h:1\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("advertize"), "{e}");
    }
}

/// The one duration parser (`250ms`, `2s`, `1.5s`, `3m`, plain seconds).
pub use quorumkv_core::protocol::options::parse_duration;

/// Parse a byte size: `65536`, `64KiB`, `16MiB`, `1GiB` (`K`, `M`, `G`,
/// `KB`, `MB`, `GB` mean the same powers of 1024).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (num, unit) = (&s[..split], s[split..].to_ascii_lowercase());
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("invalid size '{s}' (try 65536, 64KiB, 16MiB, 1GiB)"))?;
    let shift = match unit.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(format!("invalid size unit in '{s}' (use KiB, MiB or GiB)")),
    };
    n.checked_mul(1 << shift)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("size '{s}' is too large"))
}

/// A duration where `0` means "never" (timeouts that can be turned off).
pub fn parse_optional_duration(s: &str) -> Result<Option<std::time::Duration>, String> {
    let d = parse_duration(s)?;
    Ok((!d.is_zero()).then_some(d))
}

#[cfg(test)]
mod size_tests {
    use super::*;

    #[test]
    fn sizes_and_optional_durations() {
        assert_eq!(parse_bytes("65536").unwrap(), 65536);
        assert_eq!(parse_bytes("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_bytes("16MiB").unwrap(), 16 << 20);
        assert_eq!(parse_bytes("1g").unwrap(), 1 << 30);
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("3parsecs").is_err());
        assert_eq!(parse_optional_duration("0").unwrap(), None);
        assert_eq!(
            parse_optional_duration("10s").unwrap(),
            Some(std::time::Duration::from_secs(10))
        );
    }
}
