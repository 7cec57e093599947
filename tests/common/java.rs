//! Java programs of the `--zk-port` tests (`tests/zk/*.java`), compiled
//! with `javac` against Debian's jars in `/usr/share/java`, and run with
//! `java`.

use super::zookeeper::require;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const JAVA_DIR: &str = "/usr/share/java";

fn has_javac() -> bool {
    Command::new("javac")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A compiled program: its class directory (removed when dropped) and
/// the classpath to run it with (that directory, then the jars).
pub struct Classes {
    dir: PathBuf,
    pub classpath: String,
}

impl Drop for Classes {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Compile `tests/zk/{program}.java` against `jars` into a fresh
/// directory named by `tag`. `None` when javac or a jar is missing
/// (skipped, or failed in CI).
pub fn compile(program: &str, tag: &str, jars: &[&str]) -> Option<Classes> {
    let missing: Vec<&str> = (jars.iter().copied())
        .filter(|j| !Path::new(JAVA_DIR).join(j).is_file())
        .collect();
    let what = format!("javac and the jars of {program} (missing: {missing:?})");
    if !require(&what, missing.is_empty() && has_javac()) {
        return None;
    }
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("qkv-{program}-{tag}-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut classpath = vec![dir.clone()];
    classpath.extend(jars.iter().map(|j| Path::new(JAVA_DIR).join(j)));
    let classpath = std::env::join_paths(classpath).unwrap();
    let source = format!("{}/tests/zk/{program}.java", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("javac")
        .arg("-d")
        .arg(&dir)
        .arg("-cp")
        .arg(&classpath)
        .arg(source)
        .output()
        .expect("javac runs");
    assert!(
        out.status.success(),
        "javac failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let classpath = classpath.into_string().unwrap();
    Some(Classes { dir, classpath })
}

/// Run `program` with `args` (the last the connect string) within
/// `limit`; assert that it printed `all ok` after `checks` lines `ok ...`.
/// Returns its output.
pub async fn run(
    classes: &Classes,
    program: &str,
    args: &[&str],
    checks: usize,
    limit: Duration,
) -> String {
    let hosts = args.last().unwrap();
    let run = tokio::process::Command::new("java")
        .args(["-cp", &classes.classpath, program])
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(limit, run)
        .await
        .unwrap_or_else(|_| panic!("{program} finishes in {limit:?}"))
        .expect("java runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("\nall ok\n"),
        "{program} against {hosts} failed:\n{stdout}\n{stderr}"
    );
    let oks: Vec<&str> = stdout.lines().filter(|l| l.starts_with("ok ")).collect();
    assert_eq!(oks.len(), checks, "{stdout}");
    stdout.into_owned()
}
