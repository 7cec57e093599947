//! ZooKeeper's clients and ZooKeeper itself, for the tests of the
//! `--zk-port`: the skip-or-fail rule for Debian-packaged clients, and a
//! throwaway ZooKeeper 3.8 ensemble to run the same client programs against.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A client from a Debian package: in CI it must be there (deps.sh
/// installs it); elsewhere the test says it is skipped.
pub fn require(what: &str, found: bool) -> bool {
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{what} is required in CI (scripts/deps.sh installs it)"
        );
        eprintln!("SKIPPED: {what} not installed");
    }
    found
}

/// Debian's ZooKeeper server (package `zookeeper`), which `peers.sh` runs.
pub fn zookeeper_installed() -> bool {
    Path::new("/usr/share/java/zookeeper.jar").is_file()
}

/// Debian's zkCli.sh (package `zookeeper`).
pub const ZKCLI: &str = "/usr/share/zookeeper/bin/zkCli.sh";

/// Run zkCli.sh with `script` on its standard input; its output (it says
/// what it created and its errors on stderr, what it read on stdout).
pub fn zkcli(server: &str, script: &str) -> String {
    let mut child = Command::new(ZKCLI)
        .args(["-server", server])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("zkCli.sh runs");
    use std::io::Write;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(script.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let (o, e) = (&out.stdout, &out.stderr);
    String::from_utf8_lossy(o).to_string() + &String::from_utf8_lossy(e)
}

/// The Python interpreter that has kazoo (Debian's, not a pyenv one).
pub fn python_with_kazoo() -> Option<&'static str> {
    ["/usr/bin/python3", "python3"].into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import kazoo"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Run `tests/zk/SCRIPT` with `py` and `args` (3 minutes at most); it
/// must exit 0 and print `all ok`. Returns how many `ok NAME` lines it
/// printed (one per check).
pub async fn run_kazoo_script(py: &str, script: &str, args: &[String]) -> usize {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/zk")
        .join(script);
    // Killed if it outlives the timeout: a hung client must not stay behind.
    let out = tokio::process::Command::new(py)
        .arg(&path)
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(180), out)
        .await
        .unwrap_or_else(|_| panic!("{script} finishes"))
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("all ok"),
        "{script} failed:\n{stdout}\n{stderr}"
    );
    stdout.lines().filter(|l| l.starts_with("ok ")).count()
}

/// A throwaway ZooKeeper 3.8 ensemble run by `scripts/peers.sh` in its own
/// state directory; stopped (data removed) when dropped.
pub struct ZooKeeper {
    /// The connect string, `host:port,...`.
    pub hosts: String,
    state: PathBuf,
}

impl ZooKeeper {
    fn peers(state: &Path) -> Command {
        let mut c = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/peers.sh"));
        c.env("QKV_PEERS_DIR", state).stdin(Stdio::null());
        c
    }

    /// Start a three-server ensemble; `tag` names its state directory
    /// (with the process id), so tests in one process do not share it.
    pub fn start(tag: &str) -> ZooKeeper {
        Self::start_with(tag, "")
    }

    /// [`ZooKeeper::start`] with extra JVM flags for every server (system
    /// properties such as `-Dzookeeper.extendedTypesEnabled=true`).
    pub fn start_with(tag: &str, jvm_flags: &str) -> ZooKeeper {
        let pid = std::process::id();
        let state = std::env::temp_dir().join(format!("qkv-zk-{tag}-{pid}"));
        std::fs::create_dir_all(&state).unwrap();
        let mut last = String::new();
        for attempt in 0..4u32 {
            // Below the ephemeral range and the bench test's bases (21000+).
            let base = 12000 + ((pid + attempt * 97) % 900) * 10;
            let out = Self::peers(&state)
                .env("QKV_ZK_JVMFLAGS", jvm_flags)
                .args(["start", "zookeeper", "--port-base", &base.to_string()])
                .output()
                .expect("run scripts/peers.sh");
            if out.status.success() {
                let target = String::from_utf8(out.stdout).unwrap();
                let hosts = target.trim().trim_start_matches("zk://").to_string();
                return ZooKeeper { hosts, state };
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
        }
        panic!("peers.sh start zookeeper failed: {last}");
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        let _ = Self::peers(&self.state)
            .args(["stop", "zookeeper"])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}
