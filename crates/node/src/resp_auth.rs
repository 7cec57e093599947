//! Who a RESP connection is: with a users file, every command but `AUTH`,
//! `HELLO` and `QUIT` answers `-NOAUTH` until the connection authenticates,
//! and then runs only if the user's role allows its class (read, write,
//! admin). Redis 7's error strings, so that clients recognise them.

use crate::auth::{self, AuthError, Role, UsersHandle, MAX_AUTH_FAILURES};
use crate::resp::Reply;
use crate::resp_commands::Spec;
use bytes::Bytes;
use std::net::SocketAddr;

pub(crate) const NOAUTH: &str = "NOAUTH Authentication required.";
pub(crate) const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
pub(crate) const HELLO_NOAUTH: &str = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time";
/// `AUTH` (or `HELLO ... AUTH`) on a replica without a users file.
pub(crate) const NO_USERS: &str = "ERR AUTH is not supported: this replica has no users file (start it with `quorumkv server --users FILE`); without one, protect the port with the network";

/// An `AUTH` to check; `hello` is the reply when it succeeds (`HELLO`'s
/// server description), else `+OK`.
pub(crate) struct Login {
    pub user: String,
    pub password: Bytes,
    pub hello: Option<Reply>,
}

struct Authed {
    name: String,
    role: Role,
    /// The users file's generation the role was read from.
    generation: u64,
}

/// One connection's authentication state.
pub(crate) struct RespAuth {
    users: Option<UsersHandle>,
    user: Option<Authed>,
    failures: u32,
    remote: Option<SocketAddr>,
}

impl RespAuth {
    pub(crate) fn new(users: Option<UsersHandle>, remote: Option<SocketAddr>) -> RespAuth {
        RespAuth {
            users,
            user: None,
            failures: 0,
            remote,
        }
    }

    /// Does this replica have users at all?
    pub(crate) fn required(&self) -> bool {
        self.users.is_some()
    }

    /// The connection's user and its role as the users file says now: a
    /// reload may have changed the role, or removed the user (the
    /// connection is then no longer authenticated).
    fn user(&mut self) -> Option<&Authed> {
        let users = self.users.as_ref()?;
        let generation = users.generation();
        if let Some(u) = &mut self.user {
            if u.generation != generation {
                match users.current().role(&u.name) {
                    Some(role) => {
                        u.role = role;
                        u.generation = generation;
                    }
                    None => self.user = None,
                }
            }
        }
        self.user.as_ref()
    }

    pub(crate) fn authenticated(&mut self) -> bool {
        !self.required() || self.user().is_some()
    }

    /// The error a command gets instead of running, if any.
    pub(crate) fn check(&mut self, spec: &Spec) -> Option<Reply> {
        if !self.required() || spec.no_auth() {
            return None;
        }
        let Some(user) = self.user() else {
            return Some(Reply::Error(NOAUTH.into()));
        };
        (!user.role.allows(spec.access())).then(|| {
            Reply::Error(format!(
                "NOPERM User {} has no permissions to run the '{}' command",
                user.name, spec.name
            ))
        })
    }

    /// `ACL WHOAMI`: `default` on a replica without users (as Redis).
    pub(crate) fn whoami(&mut self) -> Reply {
        let name = match self.user() {
            Some(u) => u.name.clone(),
            None => auth::DEFAULT_USER.into(),
        };
        Reply::Bulk(Some(Bytes::from(name)))
    }

    /// Check a login (off the runtime: argon2 is slow on purpose). The
    /// reply, and whether to close the connection: after
    /// `MAX_AUTH_FAILURES` failures, so that one connection cannot make
    /// the replica hash passwords for ever.
    pub(crate) async fn login(&mut self, login: Login) -> (Reply, bool) {
        let Some(users) = self.users.clone() else {
            return (Reply::Error(NO_USERS.into()), false);
        };
        let generation = users.generation();
        match auth::authenticate(&users, &login.user, &login.password).await {
            Ok(role) => {
                self.user = Some(Authed {
                    name: login.user,
                    role,
                    generation,
                });
                (login.hello.unwrap_or(Reply::Simple("OK")), false)
            }
            Err(e) => {
                // A failed AUTH leaves the connection as it was (Redis:
                // still authenticated as before, if it was). A success
                // does not reset the count: knowing one password must not
                // buy unlimited guesses at another.
                self.failures += 1;
                let remote = self.remote.map_or("?".into(), |a| a.to_string());
                auth::log_failure(remote, "RESP", &login.user, &e);
                let close = self.failures >= MAX_AUTH_FAILURES;
                let text = match e {
                    AuthError::WrongPass if close => format!(
                        "{WRONGPASS} Closing the connection after {MAX_AUTH_FAILURES} failed attempts."
                    ),
                    AuthError::WrongPass => WRONGPASS.into(),
                    AuthError::Internal(e) => format!("ERR the password check failed: {e}"),
                };
                (Reply::Error(text), close)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Users;
    use crate::resp_commands::find;

    fn quick_hash(p: &str) -> String {
        use argon2::password_hash::PasswordHasher;
        let params = argon2::Params::new(64, 1, 1, None).unwrap();
        (argon2::Argon2::from(params).hash_password(p.as_bytes()))
            .unwrap()
            .to_string()
    }

    fn users(list: &[(&str, Role, &str)]) -> UsersHandle {
        let mut u = Users::default();
        for (n, r, p) in list {
            u.set(n, *r, quick_hash(p)).unwrap();
        }
        UsersHandle::from_users(u)
    }

    fn login(user: &str, password: &str) -> Login {
        Login {
            user: user.into(),
            password: Bytes::copy_from_slice(password.as_bytes()),
            hello: None,
        }
    }

    fn err(r: Option<Reply>) -> String {
        match r {
            Some(Reply::Error(e)) => e,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn noauth_then_roles_then_reload() {
        let handle = users(&[("reader", Role::Read, "r"), ("admin", Role::Admin, "a")]);
        let mut a = RespAuth::new(Some(handle.clone()), None);
        let (get, set, config) = (
            find("get").unwrap(),
            find("set").unwrap(),
            find("config").unwrap(),
        );
        assert_eq!(err(a.check(get)), NOAUTH);
        assert_eq!(err(a.check(find("ping").unwrap())), NOAUTH);
        assert!(a.check(find("auth").unwrap()).is_none());
        assert!(a.check(find("quit").unwrap()).is_none());
        assert_eq!(
            a.login(login("reader", "x")).await,
            (Reply::Error(WRONGPASS.into()), false)
        );
        assert_eq!(
            a.login(login("reader", "r")).await,
            (Reply::Simple("OK"), false)
        );
        assert!(a.check(get).is_none());
        assert_eq!(
            err(a.check(set)),
            "NOPERM User reader has no permissions to run the 'set' command"
        );
        assert_eq!(a.whoami(), Reply::Bulk(Some(Bytes::from("reader"))));
        // A wrong password later keeps the connection's user.
        assert!(a.login(login("admin", "nope")).await.0 != Reply::Simple("OK"));
        assert!(a.check(get).is_none());
        // A reload that makes the reader a readwrite user applies at once...
        let mut more = (*handle.current()).clone();
        more.set("reader", Role::ReadWrite, quick_hash("r"))
            .unwrap();
        handle.replace(more.clone());
        assert!(a.check(set).is_none());
        assert!(err(a.check(config)).starts_with("NOPERM"));
        // ... and one that removes it leaves the connection unauthenticated.
        more.remove("reader");
        handle.replace(more);
        assert_eq!(err(a.check(get)), NOAUTH);
    }

    #[tokio::test]
    async fn the_tenth_failure_closes_the_connection() {
        let mut a = RespAuth::new(Some(users(&[("u", Role::Read, "p")])), None);
        for _ in 1..MAX_AUTH_FAILURES {
            assert!(!a.login(login("u", "bad")).await.1);
        }
        let (reply, close) = a.login(login("u", "bad")).await;
        assert!(close);
        let Reply::Error(e) = reply else { panic!() };
        assert!(e.starts_with(WRONGPASS) && e.contains("Closing"), "{e}");
    }

    #[tokio::test]
    async fn without_users_everything_runs_and_auth_is_refused() {
        let mut a = RespAuth::new(None, None);
        assert!(a.check(find("config").unwrap()).is_none());
        assert!(a.authenticated());
        assert_eq!(a.whoami(), Reply::Bulk(Some(Bytes::from("default"))));
        assert_eq!(
            a.login(login("u", "p")).await.0,
            Reply::Error(NO_USERS.into())
        );
    }
}
