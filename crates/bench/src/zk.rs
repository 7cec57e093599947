//! The ZooKeeper target's client (cargo feature `zookeeper`): one ZooKeeper
//! session per connection-level client, through the `zookeeper-client` crate.
//!
//! Keys are znodes under [`ROOT`]: GET is `getData` (or `sync` then
//! `getData`, see [`ZkRead`]), PUT is `setData`, or `create` when the znode
//! does not exist yet, DELETE is `delete`.

use std::time::Duration;

use bytes::Bytes;
use zookeeper_client as zk;

use quorumkv_core::znode::ZkError;
use quorumkv_node::zk::ZkClientError;
use quorumkv_node::zk_recipes::LockClient;

use crate::config::{ZkRead, ZnodeOpKind};
use crate::failure::OpFailure;

/// The parent znode of every key.
pub const ROOT: &str = "/quorumkv";

/// One ZooKeeper session. Cloning shares it (and its one TCP connection).
#[derive(Clone)]
pub struct ZkClient {
    client: zk::Client,
    read: ZkRead,
}

/// Our znodes: persistent, readable and writable by anyone.
fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

impl ZkClient {
    /// A session with `hosts` (`host:port`, tried in a random order as
    /// ZooKeeper's clients do); `[ROOT]` is created if missing.
    pub async fn connect(
        hosts: &[String],
        read: ZkRead,
        timeout: Duration,
    ) -> anyhow::Result<ZkClient> {
        anyhow::ensure!(!hosts.is_empty(), "no zookeeper servers");
        let cluster = hosts.join(",");
        let connect = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(6))
            .with_fail_eagerly()
            .connect(&cluster);
        let client = tokio::time::timeout(timeout.max(Duration::from_secs(3)), connect)
            .await
            .map_err(|_| anyhow::anyhow!("zookeeper at {cluster} does not answer"))?
            .map_err(|e| anyhow::anyhow!("zookeeper at {cluster} is unreachable: {e}"))?;
        match client.create(ROOT, &[], &persistent()).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => anyhow::bail!("zookeeper at {cluster}: cannot create {ROOT}: {e}"),
        }
        Ok(ZkClient { client, read })
    }

    /// The value of `key`: a read of the server this session is connected
    /// to (ZooKeeper's local read), after a `sync` with [`ZkRead::Sync`].
    pub async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, zk::Error> {
        let path = znode(key);
        let got = match self.read {
            ZkRead::Local => self.client.get_data(&path).await,
            ZkRead::Sync => {
                // Requests leave in call order and a session's requests are
                // answered in order: the read is sent at once, without
                // waiting for the sync, and still runs after it.
                let sync = self.client.sync(&path);
                let get = self.client.get_data(&path);
                let (s, g) = tokio::join!(sync, get);
                s.and(g)
            }
        };
        match got {
            Ok((data, _)) => Ok(Some(Bytes::from(data))),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets `key` to `value`, creating its znode if it does not exist.
    pub async fn put(&self, key: &[u8], value: &[u8]) -> Result<(), zk::Error> {
        let path = znode(key);
        loop {
            match self.client.set_data(&path, value, None).await {
                Err(zk::Error::NoNode) => {}
                r => return r.map(drop),
            }
            match self.client.create(&path, value, &persistent()).await {
                // Created by someone else in between: set it.
                Err(zk::Error::NodeExists) => continue,
                r => return r.map(drop),
            }
        }
    }

    /// Deletes `key`; false if it did not exist.
    pub async fn delete(&self, key: &[u8]) -> Result<bool, zk::Error> {
        match self.client.delete(&znode(key), None).await {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// How many voting servers the ensemble has (`/zookeeper/config`);
    /// `None` when it does not say (standalone, or an old server).
    pub async fn ensemble_size(&self) -> Option<usize> {
        let (cfg, _) = self.client.get_config().await.ok()?;
        let n = String::from_utf8_lossy(&cfg)
            .lines()
            .filter(|l| l.starts_with("server."))
            .count();
        (n > 0).then_some(n)
    }
}

/// A ZooKeeper session for the lock workload: seed 001's recipes
/// (`quorumkv_node::zk_recipes`) run on it unchanged, so ours and
/// ZooKeeper's locks are the same code over two clients.
#[derive(Clone)]
pub struct ZkLockSession {
    client: zk::Client,
}

impl ZkLockSession {
    /// A session with the one server `host` (the bench pins sessions).
    pub async fn connect(host: &str, session_timeout: Duration) -> anyhow::Result<ZkLockSession> {
        let connect = zk::Client::connector()
            .with_session_timeout(session_timeout)
            .with_fail_eagerly()
            .connect(host);
        let client = tokio::time::timeout(Duration::from_secs(5), connect)
            .await
            .map_err(|_| anyhow::anyhow!("zookeeper at {host} does not answer"))?
            .map_err(|e| anyhow::anyhow!("zookeeper at {host} is unreachable: {e}"))?;
        Ok(ZkLockSession { client })
    }
}

impl ZkLockSession {
    /// One basic znode operation on 100 bytes of data (`--workload znode`).
    pub async fn znode_call(&self, op: ZnodeOpKind, path: &str) -> Result<(), String> {
        use ZnodeOpKind as K;
        let data = [b'x'; 100];
        let c = &self.client;
        let r = match op {
            K::Create => c.create(path, &data, &persistent()).await.map(drop),
            K::Set => c.set_data(path, &data, None).await.map(drop),
            K::Get => c.get_data(path).await.map(drop),
            K::Exists => c.check_stat(path).await.map(drop),
            K::Children => c.list_children(path).await.map(drop),
            K::Delete => c.delete(path, None).await,
        };
        r.map_err(|e| format!("zookeeper {e}"))
    }
}

/// ZooKeeper's errors in the recipes' terms: an expired session is the
/// recipes' `SessionExpired`; anything else is reported as it is.
fn lock_error(e: zk::Error) -> ZkClientError {
    match e {
        zk::Error::SessionExpired => ZkClientError::Zk(ZkError::SessionExpired),
        e => ZkClientError::Unexpected(format!("zookeeper {e}")),
    }
}

impl LockClient for ZkLockSession {
    type Events = ();

    async fn create_ephemeral(
        &self,
        path: &str,
        sequential: bool,
    ) -> Result<Option<(String, u64)>, ZkClientError> {
        let mode = match sequential {
            true => zk::CreateMode::EphemeralSequential,
            false => zk::CreateMode::Ephemeral,
        };
        let options = mode.with_acls(zk::Acls::anyone_all());
        match self.client.create(path, &[], &options).await {
            Ok((stat, seq)) if sequential => Ok(Some((format!("{path}{seq}"), stat.czxid as u64))),
            Ok((stat, _)) => Ok(Some((path.to_string(), stat.czxid as u64))),
            Err(zk::Error::NodeExists) => Ok(None),
            Err(e) => Err(lock_error(e)),
        }
    }

    async fn delete(&self, path: &str) -> Result<(), ZkClientError> {
        match self.client.delete(path, None).await {
            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
            Err(e) => Err(lock_error(e)),
        }
    }

    async fn children(&self, dir: &str) -> Result<Vec<String>, ZkClientError> {
        self.client.list_children(dir).await.map_err(lock_error)
    }

    async fn wait_while_exists(&self, path: &str, _: &mut ()) -> Result<(), ZkClientError> {
        let (stat, watcher) = (self.client.check_and_watch_stat(path).await).map_err(lock_error)?;
        if stat.is_some() {
            let event = watcher.changed().await;
            if event.event_type == zk::EventType::Session {
                return Err(ZkClientError::Zk(ZkError::SessionExpired));
            }
        }
        Ok(())
    }

    async fn ensure_dir(&self, path: &str) -> Result<(), ZkClientError> {
        match self.client.create(path, &[], &persistent()).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(lock_error(e)),
        }
    }

    async fn close(self) {
        // The session closes when its last client is dropped.
        drop(self);
    }

    /// ZooKeeper's watches answer one by one: nothing is left over.
    fn drop_stale(_: &mut ()) {}
}

/// The znode of a key: `ROOT/key` when the key is a plain name, else
/// `ROOT/~` and the key in hex (a znode name may not hold '/', NUL, …).
pub fn znode(key: &[u8]) -> String {
    let plain = !key.is_empty()
        && key != b"."
        && key != b".."
        && !key.starts_with(b"~")
        && (key.iter()).all(|b| b.is_ascii_alphanumeric() || b"-_.~".contains(b));
    if plain {
        format!("{ROOT}/{}", String::from_utf8_lossy(key))
    } else {
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        format!("{ROOT}/~{hex}")
    }
}

/// What a failed call means for the history: refusals of the server that
/// change nothing are definite; a lost connection, an expired or moved
/// session and timeouts leave the outcome unknown.
pub fn failure(e: &zk::Error) -> OpFailure {
    use zk::Error as E;
    match e {
        E::Timeout => OpFailure::unknown("timeout"),
        E::NoNode
        | E::NoAuth
        | E::BadVersion
        | E::NoChildrenForEphemerals
        | E::NodeExists
        | E::NotEmpty
        | E::InvalidAcl
        | E::AuthFailed
        | E::BadArguments(_)
        | E::NotReadOnly
        | E::QuotaExceeded
        | E::Throttled
        | E::Unimplemented => OpFailure::definite(format!("zookeeper {}", short(e))),
        _ => OpFailure::unknown(format!("zookeeper {}", short(e))),
    }
}

/// The variant's name of an error ("ConnectionLoss"), for the failure table.
fn short(e: &zk::Error) -> String {
    let d = format!("{e:?}");
    let end = d.find(['(', ' ', '{']).unwrap_or(d.len());
    d[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_znodes_under_the_root() {
        assert_eq!(znode(b"b3-k7"), "/quorumkv/b3-k7");
        assert_eq!(znode(b"a/b"), "/quorumkv/~612f62");
        assert_eq!(znode(b".."), "/quorumkv/~2e2e");
        assert_eq!(znode(b""), "/quorumkv/~");
        // The escape cannot collide with a plain key.
        assert_ne!(znode(b"~612f62"), znode(b"a/b"));
    }

    #[test]
    fn refusals_are_definite_and_the_rest_unknown() {
        assert_eq!(
            failure(&zk::Error::BadVersion),
            OpFailure::definite("zookeeper BadVersion")
        );
        assert_eq!(
            failure(&zk::Error::ConnectionLoss),
            OpFailure::unknown("zookeeper ConnectionLoss")
        );
        assert_eq!(failure(&zk::Error::Timeout), OpFailure::unknown("timeout"));
        assert!(!failure(&zk::Error::SessionExpired).definite);
        assert!(failure(&zk::Error::BadArguments(&"x")).definite);
    }
}
