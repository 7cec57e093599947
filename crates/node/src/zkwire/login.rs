//! Logins on the ZooKeeper port.
//!
//! Without a users file the port is ZooKeeper's default: anyone may ask
//! anything the znodes' ACLs allow, and `addAuth digest user:password`
//! adds a `digest` identity without a check (ZooKeeper's
//! `DigestAuthenticationProvider` accepts any pair).
//!
//! With a users file (the same one the native and RESP ports check) the
//! port behaves as ZooKeeper 3.7+ with `enforce.auth.enabled=true` and
//! `enforce.auth.schemes=digest`, with the digest pair checked against
//! the users file:
//!
//! * a connection first logs in with `addAuth("digest", "NAME:PASSWORD")`
//!   for a user of the file (zkCli's `addauth digest`, kazoo's
//!   `auth_data`, Curator's `authorization`): the connection then holds
//!   `user:NAME` (quorumkv's scheme, as a native login gives) and the
//!   ZooKeeper `digest` id of the pair, so both kinds of ACL name it;
//! * a wrong pair is answered `AuthFailed` and the connection closed, as
//!   ZooKeeper answers a provider's refusal;
//! * any other request before a login, except `ping` and `closeSession`,
//!   is answered `NoAuth` (−102) and the connection stays open, so that a
//!   zkCli user can still type `addauth`. ZooKeeper's enforcement answers
//!   `SessionClosedRequireAuth` (−124) and closes; kazoo 2.8 knows no
//!   −124 and its connection thread dies on it, so the code every client
//!   knows is used instead;
//! * after a login each request is checked against the user's role, as
//!   on the native port: a `read` user's writes are answered `NoAuth`.
//!   The role is read again after a reload of the users file; a user the
//!   reload removed is treated as never logged in.
//!
//! Only `digest` is a scheme a client may name: `user` is the server's
//! own (set by a login), and any other is answered `AuthFailed` and the
//! connection closed, with or without a users file.
//!
//! The session itself is opened at connect, before any login (ZooKeeper
//! opens it there too): an unauthenticated connection holds a session
//! and can do nothing with it but log in, ping and close it.

use super::proto::{err, ZkRequest};
use crate::auth::{authenticate, log_failure, znode_access, Role, UsersHandle};
use quorumkv_core::znode::ZnodeOp;
use std::net::SocketAddr;

/// The one scheme a client may name in `addAuth`.
const DIGEST: &str = "digest";

/// What becomes of a request before it is planned.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Admit {
    /// Serve it as it is.
    Pass,
    /// A login that checked: give the connection the identity `user:NAME`,
    /// then serve the request (its `digest` identity).
    LoggedIn(String),
    /// Answer this error code instead; close the connection after it when
    /// `close`.
    Refuse { code: i32, close: bool },
}

/// One connection's login state.
pub(super) struct Gate {
    users: Option<UsersHandle>,
    remote: SocketAddr,
    login: Option<Login>,
}

struct Login {
    name: String,
    role: Role,
    /// The users file's generation `role` was read at.
    generation: u64,
}

impl Gate {
    pub(super) fn new(users: Option<UsersHandle>, remote: SocketAddr) -> Gate {
        Gate {
            users,
            remote,
            login: None,
        }
    }

    /// Decide on `req` before it is planned: logins are checked here
    /// (argon2, on the blocking pool), and a connection that has not
    /// logged in may only ping and close.
    pub(super) async fn admit(&mut self, req: &ZkRequest) -> Admit {
        let failed = Admit::Refuse {
            code: err::AUTH_FAILED,
            close: true,
        };
        if let ZkRequest::Auth { scheme, auth } = req {
            if scheme != DIGEST {
                return failed;
            }
            let Some(users) = &self.users else {
                return Admit::Pass;
            };
            let text = String::from_utf8_lossy(auth);
            let (name, password) = text.split_once(':').unwrap_or((&text, ""));
            return match authenticate(users, name, password).await {
                Ok(role) => {
                    self.login = Some(Login {
                        name: name.to_string(),
                        role,
                        generation: users.generation(),
                    });
                    Admit::LoggedIn(name.to_string())
                }
                Err(e) => {
                    log_failure(self.remote, "ZooKeeper port", name, &e);
                    failed
                }
            };
        }
        if self.users.is_none() || matches!(req, ZkRequest::Ping | ZkRequest::CloseSession) {
            return Admit::Pass;
        }
        match self.role() {
            Some(_) => Admit::Pass,
            None => Admit::Refuse {
                code: err::NO_AUTH,
                close: false,
            },
        }
    }

    /// May the logged-in user have `ops` served? Always, without a users
    /// file. Pinging and closing one's session need no login.
    pub(super) fn may(&mut self, ops: &[ZnodeOp]) -> bool {
        let own = |op: &ZnodeOp| matches!(op, ZnodeOp::CloseSession | ZnodeOp::Ping);
        if self.users.is_none() || ops.iter().all(own) {
            return true;
        }
        let Some(role) = self.role() else {
            return false;
        };
        ops.iter()
            .all(|op| own(op) || role.allows(znode_access(op)))
    }

    /// The user's role as the users file now says (`None`: not logged in,
    /// or removed by a reload).
    fn role(&mut self) -> Option<Role> {
        let users = self.users.as_ref()?;
        let login = self.login.as_mut()?;
        let now = users.generation();
        if login.generation != now {
            match users.current().role(&login.name) {
                Some(role) => login.role = role,
                None => {
                    self.login = None;
                    return None;
                }
            }
            login.generation = now;
        }
        Some(login.role)
    }
}

/// Whether `op` only reads (what a `read` user may ask), as the native
/// port decides it.
#[cfg(test)]
fn reads_only(op: &ZnodeOp) -> bool {
    crate::auth::access_of(&quorumkv_core::Request::Znode(op.clone())) == crate::auth::Access::Read
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{hash_password, Users};
    use bytes::Bytes;

    fn users() -> UsersHandle {
        let mut u = Users::default();
        u.set("alice", Role::ReadWrite, hash_password("secret").unwrap())
            .unwrap();
        u.set("rita", Role::Read, hash_password("pw").unwrap())
            .unwrap();
        UsersHandle::from_users(u)
    }

    fn auth(scheme: &str, pair: &str) -> ZkRequest {
        ZkRequest::Auth {
            scheme: scheme.into(),
            auth: Bytes::from(pair.to_string()),
        }
    }

    fn remote() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    fn get(path: &str) -> ZkRequest {
        ZkRequest::GetData {
            path: path.into(),
            watch: false,
        }
    }

    fn set() -> ZnodeOp {
        ZnodeOp::SetData {
            path: "/a".into(),
            data: Bytes::new(),
            version: None,
        }
    }

    const REQUIRE: Admit = Admit::Refuse {
        code: err::NO_AUTH,
        close: false,
    };
    const FAILED: Admit = Admit::Refuse {
        code: err::AUTH_FAILED,
        close: true,
    };

    #[tokio::test]
    async fn without_users_everything_passes_but_schemes_other_than_digest() {
        let mut g = Gate::new(None, remote());
        assert_eq!(g.admit(&get("/a")).await, Admit::Pass);
        assert_eq!(g.admit(&auth("digest", "x:y")).await, Admit::Pass);
        assert_eq!(g.admit(&auth("user", "bob")).await, FAILED);
        assert_eq!(g.admit(&auth("ip", "127.0.0.1")).await, FAILED);
        assert!(g.may(&[set()]));
    }

    #[tokio::test]
    async fn with_users_a_connection_logs_in_before_anything_but_ping_and_close() {
        let mut g = Gate::new(Some(users()), remote());
        assert_eq!(g.admit(&get("/a")).await, REQUIRE);
        assert_eq!(g.admit(&ZkRequest::Ping).await, Admit::Pass);
        assert_eq!(g.admit(&ZkRequest::CloseSession).await, Admit::Pass);
        assert!(g.may(&[ZnodeOp::Ping]) && g.may(&[ZnodeOp::CloseSession]));
        assert!(!g.may(&[set()]));
        assert_eq!(g.admit(&auth("digest", "alice:wrong")).await, FAILED);
        assert_eq!(g.admit(&auth("digest", "nobody:secret")).await, FAILED);
        assert_eq!(g.admit(&auth("digest", "alice")).await, FAILED);
        assert_eq!(g.admit(&get("/a")).await, REQUIRE);
        let ok = g.admit(&auth("digest", "alice:secret")).await;
        assert_eq!(ok, Admit::LoggedIn("alice".into()));
        assert_eq!(g.admit(&get("/a")).await, Admit::Pass);
        assert!(g.may(&[set()]));
    }

    #[tokio::test]
    async fn a_read_user_reads_and_closes_but_does_not_write() {
        let mut g = Gate::new(Some(users()), remote());
        let ok = g.admit(&auth("digest", "rita:pw")).await;
        assert_eq!(ok, Admit::LoggedIn("rita".into()));
        assert_eq!(g.admit(&get("/a")).await, Admit::Pass);
        let read = ZnodeOp::GetData {
            path: "/a".into(),
            watch: false,
        };
        assert!(reads_only(&read) && g.may(std::slice::from_ref(&read)));
        assert!(g.may(&[ZnodeOp::CloseSession]));
        assert!(!g.may(&[read, set()]), "a multi with one write is refused");
    }

    #[tokio::test]
    async fn a_reload_changes_the_role_or_ends_the_login() {
        let handle = users();
        let mut g = Gate::new(Some(handle.clone()), remote());
        g.admit(&auth("digest", "alice:secret")).await;
        assert!(g.may(&[set()]));
        let mut u = (*handle.current()).clone();
        u.set("alice", Role::Read, hash_password("secret").unwrap())
            .unwrap();
        handle.replace(u.clone());
        assert!(!g.may(&[set()]), "alice is a reader now");
        assert!(u.remove("alice"));
        handle.replace(u);
        assert_eq!(g.admit(&get("/a")).await, REQUIRE);
    }
}
