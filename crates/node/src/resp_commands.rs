//! The RESP commands quorumkv answers, as data: one table drives the
//! `COMMAND`, `COMMAND INFO`, `COMMAND COUNT` and `COMMAND DOCS` replies
//! (which `redis-cli` uses for its hints) and the "unknown command" error, so
//! what the server says it supports is what it dispatches.

use crate::auth::Access;
use crate::resp::Reply;
use bytes::Bytes;

/// One argument of a command, as `COMMAND DOCS` describes it.
pub struct Arg {
    pub name: &'static str,
    /// `key`, `string`, `integer` or `pure-token`.
    pub kind: &'static str,
    pub optional: bool,
    pub multiple: bool,
}

/// One supported command.
pub struct Spec {
    pub name: &'static str,
    /// Redis convention: N = exactly N words with the name; -N = at least N.
    pub arity: i64,
    pub flags: &'static [&'static str],
    /// Position of the first and last key and the step between keys (0 = none, -1 = last word).
    pub keys: (i64, i64, i64),
    pub group: &'static str,
    pub summary: &'static str,
    pub args: &'static [Arg],
}

const fn arg(name: &'static str, kind: &'static str) -> Arg {
    Arg {
        name,
        kind,
        optional: false,
        multiple: false,
    }
}
const fn opt(name: &'static str, kind: &'static str) -> Arg {
    Arg {
        optional: true,
        ..arg(name, kind)
    }
}
const fn many(name: &'static str, kind: &'static str) -> Arg {
    Arg {
        multiple: true,
        ..arg(name, kind)
    }
}

const KEY: Arg = arg("key", "key");
const NO_KEYS: (i64, i64, i64) = (0, 0, 0);

/// Every command the RESP port answers, in the order `COMMAND` lists them.
pub const COMMANDS: &[Spec] = &[
    Spec {
        name: "get",
        arity: 2,
        flags: &["readonly", "fast"],
        keys: (1, 1, 1),
        group: "string",
        summary: "Linearizable read of a key (the protocol's read: a quorum round, or more).",
        args: &[KEY],
    },
    Spec {
        name: "set",
        arity: 3,
        flags: &["write"],
        keys: (1, 1, 1),
        group: "string",
        summary: "Linearizable write of a key. No options (NX, XX, EX, GET ... are refused).",
        args: &[KEY, arg("value", "string")],
    },
    Spec {
        name: "del",
        arity: 2,
        flags: &["write"],
        keys: (1, 1, 1),
        group: "generic",
        summary: "Delete one key (a tombstone write). Always replies 1: a quorum write does not learn whether the key existed.",
        args: &[KEY],
    },
    Spec {
        name: "exists",
        arity: -2,
        flags: &["readonly", "fast"],
        keys: (1, -1, 1),
        group: "generic",
        summary: "Count the given keys that have a value; one linearizable read per key, not a snapshot across keys.",
        args: &[many("key", "key")],
    },
    Spec {
        name: "mget",
        arity: -2,
        flags: &["readonly", "fast"],
        keys: (1, -1, 1),
        group: "string",
        summary: "Read several keys; one linearizable read per key, not a snapshot across keys.",
        args: &[many("key", "key")],
    },
    Spec {
        name: "mset",
        arity: -3,
        flags: &["write"],
        keys: (1, -1, 2),
        group: "string",
        summary: "Write several keys; one linearizable write per key, NOT atomic across keys (a failure can leave some written).",
        args: &[many("key", "key"), many("value", "string")],
    },
    Spec {
        name: "ping",
        arity: -1,
        flags: &["fast"],
        keys: NO_KEYS,
        group: "connection",
        summary: "PONG, or the message given.",
        args: &[opt("message", "string")],
    },
    Spec {
        name: "echo",
        arity: 2,
        flags: &["fast"],
        keys: NO_KEYS,
        group: "connection",
        summary: "Return the message.",
        args: &[arg("message", "string")],
    },
    Spec {
        name: "info",
        arity: -1,
        flags: &["loading", "stale"],
        keys: NO_KEYS,
        group: "server",
        summary: "Replica id, protocol, peers up/down, counters; sections server, replication, stats (several may be named).",
        args: &[Arg {
            multiple: true,
            ..opt("section", "string")
        }],
    },
    Spec {
        name: "hello",
        arity: -1,
        flags: &["fast", "noscript", "no_auth"],
        keys: NO_KEYS,
        group: "connection",
        summary: "Handshake, and authentication with AUTH username password when the replica has a users file. Only protocol version 2 (RESP2) is spoken; HELLO 3 is refused.",
        args: &[
            opt("protover", "integer"),
            opt("username", "string"),
            opt("password", "string"),
        ],
    },
    Spec {
        name: "auth",
        arity: -2,
        flags: &["fast", "noscript", "no_auth"],
        keys: NO_KEYS,
        group: "connection",
        summary: "Authenticate the connection as a user of the replica's users file (`quorumkv user`); the password alone means the user `default`.",
        args: &[opt("username", "string"), arg("password", "string")],
    },
    Spec {
        name: "acl",
        arity: -2,
        flags: &["noscript", "loading", "stale"],
        keys: NO_KEYS,
        group: "server",
        summary: "ACL WHOAMI only: the connection's user. Users are managed in the users file with `quorumkv user`.",
        args: &[arg("subcommand", "string")],
    },
    Spec {
        name: "command",
        arity: -1,
        flags: &["loading", "stale"],
        keys: NO_KEYS,
        group: "server",
        summary: "Describe the supported commands (COMMAND, COUNT, INFO, DOCS).",
        args: &[opt("subcommand", "string")],
    },
    Spec {
        name: "config",
        arity: -2,
        flags: &["admin", "loading", "stale"],
        keys: NO_KEYS,
        group: "server",
        summary: "CONFIG GET save | appendonly only (quorumkv has no Redis settings).",
        args: &[arg("subcommand", "string"), arg("parameter", "string")],
    },
    Spec {
        name: "client",
        arity: -2,
        flags: &["loading", "stale"],
        keys: NO_KEYS,
        group: "connection",
        summary: "CLIENT SETNAME / SETINFO (accepted, ignored) and GETNAME (nil) only.",
        args: &[arg("subcommand", "string")],
    },
    Spec {
        name: "select",
        arity: 2,
        flags: &["fast"],
        keys: NO_KEYS,
        group: "connection",
        summary: "SELECT 0 only: there is one keyspace.",
        args: &[arg("index", "integer")],
    },
    Spec {
        name: "zk.create",
        arity: -3,
        flags: &["write"],
        keys: (1, 1, 1),
        group: "znode",
        summary: "Create a persistent znode (protocols that serve znodes); SEQUENTIAL appends the parent's counter. Replies the path created. Ephemerals need a session: use `quorumkv zk`.",
        args: &[arg("path", "key"), arg("data", "string"), opt("sequential", "pure-token")],
    },
    Spec {
        name: "zk.get",
        arity: 2,
        flags: &["readonly"],
        keys: (1, 1, 1),
        group: "znode",
        summary: "A znode's data (linearizable: the leader confirms its leadership with a quorum before the server answers).",
        args: &[arg("path", "key")],
    },
    Spec {
        name: "zk.set",
        arity: -3,
        flags: &["write"],
        keys: (1, 1, 1),
        group: "znode",
        summary: "Set a znode's data, if its version is VERSION when given. Replies the new version.",
        args: &[arg("path", "key"), arg("data", "string"), opt("version", "integer")],
    },
    Spec {
        name: "zk.del",
        arity: -2,
        flags: &["write"],
        keys: (1, 1, 1),
        group: "znode",
        summary: "Delete a znode without children, if its version is VERSION when given.",
        args: &[arg("path", "key"), opt("version", "integer")],
    },
    Spec {
        name: "zk.ls",
        arity: 2,
        flags: &["readonly"],
        keys: (1, 1, 1),
        group: "znode",
        summary: "A znode's children, sorted.",
        args: &[arg("path", "key")],
    },
    Spec {
        name: "zk.stat",
        arity: 2,
        flags: &["readonly"],
        keys: (1, 1, 1),
        group: "znode",
        summary: "A znode's stat as field/value pairs (czxid, mzxid, pzxid, ctime, mtime, version, cversion, ephemeralOwner, dataLength, numChildren); nil when there is no such node.",
        args: &[arg("path", "key")],
    },
    Spec {
        name: "zk.watch",
        arity: -2,
        flags: &["readonly", "blocking"],
        keys: (1, 1, 1),
        group: "znode",
        summary: "Set a one-shot watch (EXISTS: the default, fires on create/change/delete; DATA: the node must exist; CHILDREN) and block until it fires: replies [event, path] (event: created, deleted, changed, children), or nil after TIMEOUT seconds (0: never). Later commands on the connection wait for it.",
        args: &[arg("path", "key"), opt("kind", "string"), opt("timeout", "integer")],
    },
    Spec {
        name: "zk.sync",
        arity: 1,
        flags: &["readonly"],
        keys: NO_KEYS,
        group: "znode",
        summary: "Wait until this server has applied everything committed before the call (linearizable); replies that zxid.",
        args: &[],
    },
    Spec {
        name: "quit",
        arity: -1,
        flags: &["fast", "no_auth"],
        keys: NO_KEYS,
        group: "connection",
        summary: "Close the connection.",
        args: &[],
    },
];

/// Commands refused on purpose, with the reason the error names.
pub const REFUSED: &[(&str, &str)] = &[
    (
        "dbsize",
        "replicas keep no key count a quorum agrees on: each replica's count includes tombstones and differs while writes are in flight, so no honest DBSIZE exists",
    ),
    (
        "keys",
        "listing keys would need a snapshot across replicas that the store does not provide",
    ),
    (
        "scan",
        "listing keys would need a snapshot across replicas that the store does not provide",
    ),
    (
        "flushall",
        "there is no cluster-wide delete; delete keys one by one",
    ),
    (
        "flushdb",
        "there is no cluster-wide delete; delete keys one by one",
    ),
    (
        "multi",
        "per-key registers cannot run transactions (no atomic read-modify-write)",
    ),
    (
        "incr",
        "per-key registers cannot do read-modify-write atomically",
    ),
];

impl Spec {
    /// What running the command needs from the connection's user: its
    /// `write` or `admin` flag, else a read (reads, and commands about the
    /// connection or the server that every user may run).
    pub fn access(&self) -> Access {
        if self.flags.contains(&"admin") {
            Access::Admin
        } else if self.flags.contains(&"write") {
            Access::Write
        } else {
            Access::Read
        }
    }

    /// Runs before the connection authenticates (`AUTH`, `HELLO`, `QUIT`).
    pub fn no_auth(&self) -> bool {
        self.flags.contains(&"no_auth")
    }
}

/// The spec of a supported command, by lower-case name.
pub fn find(name: &str) -> Option<&'static Spec> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// The error for a command we do not run: why, when it is refused on
/// purpose, or the list of what is supported.
pub fn unknown(shown: &str) -> Reply {
    let lower = shown.to_ascii_lowercase();
    if let Some((_, why)) = REFUSED.iter().find(|(n, _)| *n == lower) {
        return Reply::Error(format!(
            "ERR {} is not supported: {why}",
            lower.to_uppercase()
        ));
    }
    let names: Vec<String> = COMMANDS.iter().map(|c| c.name.to_uppercase()).collect();
    Reply::Error(format!(
        "ERR unknown command '{shown}' (quorumkv supports {})",
        names.join(", ")
    ))
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(Some(Bytes::copy_from_slice(s.as_bytes())))
}

fn bulks(items: &[&str]) -> Reply {
    Reply::Array(items.iter().map(|s| bulk(s)).collect())
}

/// `COMMAND` / `COMMAND INFO` entry, the ten-field RESP2 form of Redis 7.
fn info_entry(c: &Spec) -> Reply {
    let category = format!("@{}", c.group);
    Reply::Array(vec![
        bulk(c.name),
        Reply::Int(c.arity),
        Reply::Array(c.flags.iter().map(|f| Reply::Simple(f)).collect()),
        Reply::Int(c.keys.0),
        Reply::Int(c.keys.1),
        Reply::Int(c.keys.2),
        bulks(&[&category]),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
    ])
}

/// `COMMAND DOCS` entry: a RESP2 flat map of summary, group and arguments.
fn docs_entry(c: &Spec) -> Reply {
    let args = c
        .args
        .iter()
        .map(|a| {
            let mut fields = vec![
                bulk("name"),
                bulk(a.name),
                bulk("type"),
                bulk(a.kind),
                bulk("display_text"),
                bulk(a.name),
            ];
            let flags: Vec<&str> = [(a.optional, "optional"), (a.multiple, "multiple")]
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, f)| *f)
                .collect();
            if !flags.is_empty() {
                fields.push(bulk("flags"));
                fields.push(Reply::Array(
                    flags.iter().map(|f| Reply::Simple(f)).collect(),
                ));
            }
            Reply::Array(fields)
        })
        .collect();
    Reply::Array(vec![
        bulk("summary"),
        bulk(c.summary),
        bulk("since"),
        bulk("1.0.0"),
        bulk("group"),
        bulk(c.group),
        bulk("arguments"),
        Reply::Array(args),
    ])
}

/// The specs named in `names` (lower-cased), or all when `names` is empty.
fn selected(names: &[Bytes]) -> Vec<Option<&'static Spec>> {
    if names.is_empty() {
        return COMMANDS.iter().map(Some).collect();
    }
    names
        .iter()
        .map(|n| find(&String::from_utf8_lossy(n).to_ascii_lowercase()))
        .collect()
}

/// Answer `COMMAND [COUNT | INFO name… | DOCS name… | LIST]`; `args` are the
/// words after `COMMAND`.
pub fn command_reply(args: &[Bytes]) -> Reply {
    let sub = args
        .first()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase());
    let rest = args.get(1..).unwrap_or(&[]);
    match sub.as_deref() {
        None => Reply::Array(COMMANDS.iter().map(info_entry).collect()),
        Some("count") if rest.is_empty() => Reply::Int(COMMANDS.len() as i64),
        Some("list") if rest.is_empty() => {
            Reply::Array(COMMANDS.iter().map(|c| bulk(c.name)).collect())
        }
        Some("info") => Reply::Array(
            selected(rest)
                .into_iter()
                .map(|s| s.map(info_entry).unwrap_or(Reply::Bulk(None)))
                .collect(),
        ),
        // Unknown names are left out of DOCS, as Redis does.
        Some("docs") => Reply::Array(
            selected(rest)
                .into_iter()
                .flatten()
                .flat_map(|c| [bulk(c.name), docs_entry(c)])
                .collect(),
        ),
        Some(other) => Reply::Error(format!(
            "ERR unknown subcommand '{other}' of COMMAND (COUNT, LIST, INFO, DOCS)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn encoded(r: &Reply) -> String {
        let mut out = BytesMut::new();
        r.encode(&mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn count_matches_the_table_and_info_names_unknowns_nil() {
        assert_eq!(
            command_reply(&["COUNT".into()]),
            Reply::Int(COMMANDS.len() as i64)
        );
        let Reply::Array(items) = command_reply(&["info".into(), "get".into(), "nope".into()])
        else {
            panic!("array");
        };
        assert_eq!(items.len(), 2);
        assert!(encoded(&items[0]).starts_with("*10\r\n$3\r\nget\r\n:2\r\n"));
        assert_eq!(items[1], Reply::Bulk(None));
    }

    #[test]
    fn docs_is_a_flat_map_with_arguments() {
        let Reply::Array(items) = command_reply(&["DOCS".into(), "mset".into()]) else {
            panic!("array");
        };
        assert_eq!(items.len(), 2, "name and docs");
        let text = encoded(&items[1]);
        assert!(text.contains("NOT atomic"), "{text}");
        assert!(text.contains("multiple"), "{text}");
    }

    #[test]
    fn refused_commands_say_why() {
        let Reply::Error(e) = unknown("DBSIZE") else {
            panic!("error");
        };
        assert!(
            e.contains("not supported") && e.contains("tombstones"),
            "{e}"
        );
        let Reply::Error(e) = unknown("LPUSH") else {
            panic!("error");
        };
        assert!(
            e.contains("unknown command 'LPUSH'") && e.contains("MGET"),
            "{e}"
        );
    }
}
