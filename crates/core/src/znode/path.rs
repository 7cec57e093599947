//! Znode paths: absolute, `/`-separated, no empty, `.` or `..` component,
//! no trailing slash except the root. ZooKeeper's rules, so that a path
//! accepted here is accepted by a real ensemble too.

use super::ZkError;

/// Check `path` and return it unchanged, or say what is wrong with it.
pub fn validate(path: &str) -> Result<&str, ZkError> {
    let bad = |why: &str| Err(ZkError::BadArguments(format!("path {path:?}: {why}")));
    if !path.starts_with('/') {
        return bad("must start with '/'");
    }
    if path == "/" {
        return Ok(path);
    }
    if path.ends_with('/') {
        return bad("must not end with '/'");
    }
    for part in path[1..].split('/') {
        match part {
            "" => return bad("empty component"),
            "." | ".." => return bad("relative component"),
            p if p.chars().any(|c| c == '\0' || c.is_control()) => return bad("control character"),
            _ => {}
        }
    }
    Ok(path)
}

/// The parent of a valid path other than the root.
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(i) => &path[..i],
        None => "/",
    }
}

/// The last component of a valid path (empty for the root).
pub fn name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or("")
}

/// `parent` joined with a child's `name`.
pub fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// The name a sequential create gets: ZooKeeper's ten-digit, zero-padded
/// suffix, so that names sort in creation order.
pub fn sequential(path: &str, seq: u64) -> String {
    format!("{path}{seq:010}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked_like_zookeeper() {
        for ok in ["/", "/a", "/a/b", "/lock/name-"] {
            assert_eq!(validate(ok), Ok(ok));
        }
        for bad in ["", "a", "/a/", "//a", "/a//b", "/a/./b", "/..", "/a\0"] {
            assert!(validate(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn parents_names_and_sequence_suffixes() {
        assert_eq!(parent("/a"), "/");
        assert_eq!(parent("/a/b/c"), "/a/b");
        assert_eq!(name("/a/b"), "b");
        assert_eq!(name("/"), "");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
        assert_eq!(sequential("/lock/n-", 7), "/lock/n-0000000007");
        assert!(sequential("/q/", 9) < sequential("/q/", 10));
    }
}
