//! `quorumkv chaos --hosts netns`: three replicas on hosts of their own
//! (network namespaces), the network between them cut and healed while
//! clients record a history. Needs root and `ip netns`; skipped (with a
//! message saying so) where they are missing.

mod common;

use std::process::{Command, Output};

/// Run chaos; its output and its pid (which names its namespaces).
fn chaos(args: &[&str]) -> (Output, u32) {
    let child = Command::new(common::binary())
        .arg("chaos")
        .args(["--no-progress", "--check-timeout", "30s"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("quorumkv runs");
    let pid = child.id();
    (child.wait_with_output().expect("quorumkv ends"), pid)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Why network namespaces cannot be used here, if they cannot.
fn no_netns() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    if Command::new("iptables").arg("--version").output().is_err() {
        return Some("no `iptables`".into());
    }
    match Command::new("ip").args(["netns", "list"]).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`ip netns list` failed: {}",
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => Some(format!("no `ip`: {e}")),
    }
}

fn namespaces() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Seed 5's schedule cuts the network six times in 30 s (splits with the
/// client on one side or reaching all, a one-way cut, a bridge replica that
/// sees both sides, "the leader" isolated: ABD has none, so a replica): ABD
/// stays linearizable, every key is served again after each heal, and the
/// namespaces are gone after.
#[test]
fn partitions_across_three_hosts_stay_linearizable_and_heal() {
    if let Some(why) = no_netns() {
        eprintln!("SKIPPED partitions_across_three_hosts_stay_linearizable_and_heal: {why} (needs root, ip netns and iptables)");
        return;
    }
    let (out, pid) = chaos(&[
        "--hosts",
        "netns",
        "--protocol",
        "abd",
        "--faults",
        "partition",
        "--duration",
        "30s",
        "--seed",
        "5",
    ]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("verdict: LINEARIZABLE"), "{t}");
    assert!(t.contains("hosts: netns"), "{t}");
    let heals = t.matches("heal the network").count();
    assert!(heals >= 3, "{heals} heals\n{t}");
    assert_eq!(t.matches("every key served (").count(), heals, "{t}");
    assert!(
        t.contains("liveness: every key served again after each heal within"),
        "{t}"
    );
    assert!(t.contains("final read of 8 of 8 keys"), "{t}");
    assert!(!t.contains("0 partitions"), "{t}");
    // Its namespaces carry the chaos process's pid: none is left.
    let left = namespaces();
    assert!(
        !left.contains(&format!("qkv{pid}-")),
        "namespaces left behind: {left}"
    );
}

#[test]
fn network_faults_on_one_loopback_are_refused() {
    let (out, _) = chaos(&["--faults", "partition", "--duration", "1s"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("needs --hosts netns"), "{t}");
}
