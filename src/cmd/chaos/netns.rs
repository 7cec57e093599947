//! `--hosts netns`: every replica on a host of its own, a network namespace
//! with its own address, joined by a veth pair to one bridge; the clients
//! (this process, once it has entered it) on one more. The bridge lives in
//! a namespace of its own too, so nothing of the machine's network (its
//! firewall, Docker's bridges and rules) is touched or in the way.
//!
//! Network faults are applied from outside, with `ip netns exec NS
//! iptables|tc`: the replicas run unmodified and know nothing of them.
//! Every namespace is removed on drop (also after Ctrl-C); a run that was
//! killed leaves its namespaces behind, and the next run removes those whose
//! process is gone.

use super::schedule::Host;
use anyhow::{bail, Context};
use quorumkv_core::NodeId;
use quorumkv_node::local::ReplicaHost;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

/// Every namespace of a run is named `qkv<pid>-<role>`.
const PREFIX: &str = "qkv";
/// The hosts' network (it exists only inside the run's namespaces).
const NET: [u8; 3] = [10, 77, 0];
/// The client host's address (replicas are .1 to .63).
const CLIENT_OCTET: u8 = 100;

/// One directed cut: packets from `.0` to `.1` are dropped.
pub type Cut = (Host, Host);

pub struct Hosts {
    tag: String,
    replicas: usize,
    /// Namespaces created so far, removed on drop.
    created: Vec<String>,
    /// Whether the kernel has `sch_netem` (else latency is not injected and
    /// loss is dropped by iptables instead).
    pub netem: bool,
}

/// Run `ip`/`iptables`/`tc`; the error says which command failed and why.
fn run(cmd: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {cmd} (is it installed?)"))?;
    if !out.status.success() {
        bail!(
            "`{cmd} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Hosts {
    /// Why `--hosts netns` cannot run here, if it cannot.
    pub fn unavailable() -> Option<String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Some("--hosts netns needs root (network namespaces, iptables)".into());
        }
        for tool in ["ip", "iptables", "tc"] {
            let found = Command::new(tool).arg("-V").output().is_ok();
            if !found {
                return Some(format!("--hosts netns needs `{tool}`"));
            }
        }
        None
    }

    /// Create the bridge, one host per replica and the client host.
    pub fn create(replicas: usize) -> anyhow::Result<Hosts> {
        if let Some(why) = Hosts::unavailable() {
            bail!(why);
        }
        remove_stale();
        let mut h = Hosts {
            tag: format!("{PREFIX}{}", std::process::id()),
            replicas,
            created: Vec::new(),
            netem: false,
        };
        let sw = h.ns("sw");
        h.add_ns(&sw)?;
        run("ip", &["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        run("ip", &["-n", &sw, "link", "set", "br0", "up"])?;
        let mut all: Vec<(String, Ipv4Addr)> = (1..=replicas as NodeId)
            .map(|id| (h.replica_ns(id), h.replica_ip(id)))
            .collect();
        all.push((h.client_ns(), client_ip()));
        for (i, (ns, ip)) in all.iter().enumerate() {
            h.add_ns(ns)?;
            let port = format!("p{i}");
            let link = ["-n", &sw, "link", "add", &port, "type", "veth"];
            run(
                "ip",
                &[&link[..], &["peer", "name", "eth0", "netns", ns]].concat(),
            )?;
            run(
                "ip",
                &["-n", &sw, "link", "set", &port, "master", "br0", "up"],
            )?;
            run(
                "ip",
                &["-n", ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"],
            )?;
            run("ip", &["-n", ns, "link", "set", "eth0", "up"])?;
            run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        }
        let c = h.client_ns();
        h.netem = run(
            "ip",
            &[
                "netns", "exec", &c, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay",
                "1ms",
            ],
        )
        .is_ok();
        Ok(h)
    }

    fn add_ns(&mut self, ns: &str) -> anyhow::Result<()> {
        run("ip", &["netns", "add", ns])?;
        self.created.push(ns.to_string());
        Ok(())
    }

    fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.tag)
    }
    pub fn replica_ns(&self, id: NodeId) -> String {
        self.ns(&format!("r{id}"))
    }
    pub fn client_ns(&self) -> String {
        self.ns("c")
    }
    pub fn replica_ip(&self, id: NodeId) -> Ipv4Addr {
        Ipv4Addr::new(NET[0], NET[1], NET[2], id as u8)
    }

    /// The cluster's hosts, for `LocalClusterConfig::hosts`.
    pub fn replica_hosts(&self) -> Vec<ReplicaHost> {
        (1..=self.replicas as NodeId)
            .map(|id| ReplicaHost {
                netns: self.replica_ns(id),
                ip: IpAddr::V4(self.replica_ip(id)),
            })
            .collect()
    }

    /// Move this process into the client host. Call it before any thread
    /// starts: threads (the runtime's) and children inherit it.
    pub fn enter_client(&self) -> anyhow::Result<()> {
        let path = format!("/var/run/netns/{}", self.client_ns());
        let f = std::fs::File::open(&path).with_context(|| format!("cannot open {path}"))?;
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a namespace file we hold open; it changes only
        // this (still single) thread's network namespace.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error()).context("setns into the client host");
        }
        Ok(())
    }

    fn ip_of(&self, h: Host) -> Ipv4Addr {
        match h {
            Host::Replica(id) => self.replica_ip(id),
            Host::Client => client_ip(),
        }
    }

    /// Drop the packets of every cut. A cut into a replica is dropped by
    /// that replica's INPUT chain; a cut into the client host by the
    /// sending replica's OUTPUT chain (the client host is never changed).
    pub fn cut(&self, cuts: &[Cut]) -> anyhow::Result<()> {
        for &(from, to) in cuts {
            let (ns, rule) = match (from, to) {
                (_, Host::Replica(id)) => (self.replica_ns(id), ["INPUT", "-s"]),
                (Host::Replica(id), Host::Client) => (self.replica_ns(id), ["OUTPUT", "-d"]),
                (Host::Client, Host::Client) => continue,
            };
            let ip = self
                .ip_of(if rule[0] == "INPUT" { from } else { to })
                .to_string();
            run(
                "ip",
                &[
                    "netns", "exec", &ns, "iptables", "-A", rule[0], rule[1], &ip, "-j", "DROP",
                ],
            )?;
        }
        Ok(())
    }

    /// Slow and lossy links out of `ids`: netem delay and loss when the
    /// kernel has it, else loss only (iptables `statistic`).
    pub fn degrade(&self, ids: &[NodeId], delay_ms: u64, loss_pct: u64) -> anyhow::Result<()> {
        for &id in ids {
            let ns = self.replica_ns(id);
            if self.netem {
                let (d, j, l) = (
                    format!("{delay_ms}ms"),
                    format!("{}ms", delay_ms / 4),
                    format!("{loss_pct}%"),
                );
                run(
                    "ip",
                    &[
                        "netns", "exec", &ns, "tc", "qdisc", "add", "dev", "eth0", "root", "netem",
                        "delay", &d, &j, "loss", &l,
                    ],
                )?;
            } else {
                let p = format!("{:.3}", loss_pct as f64 / 100.0);
                run(
                    "ip",
                    &[
                        "netns",
                        "exec",
                        &ns,
                        "iptables",
                        "-A",
                        "OUTPUT",
                        "-o",
                        "eth0",
                        "-m",
                        "statistic",
                        "--mode",
                        "random",
                        "--probability",
                        &p,
                        "-j",
                        "DROP",
                    ],
                )?;
            }
        }
        Ok(())
    }

    /// Heal every network fault: flush every replica's rules, remove netem.
    pub fn heal(&self) -> anyhow::Result<()> {
        for id in 1..=self.replicas as NodeId {
            let ns = self.replica_ns(id);
            run("ip", &["netns", "exec", &ns, "iptables", "-F"])?;
            if self.netem {
                // Fails when there is none: nothing to remove.
                let _ = run(
                    "ip",
                    &[
                        "netns", "exec", &ns, "tc", "qdisc", "del", "dev", "eth0", "root",
                    ],
                );
            }
        }
        Ok(())
    }
}

fn client_ip() -> Ipv4Addr {
    Ipv4Addr::new(NET[0], NET[1], NET[2], CLIENT_OCTET)
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in self.created.iter().rev() {
            let _ = run("ip", &["netns", "del", ns]);
        }
    }
}

/// The pid in a namespace name of ours (`qkv1234-r1`).
fn owner(name: &str) -> Option<u32> {
    name.strip_prefix(PREFIX)?.split_once('-')?.0.parse().ok()
}

/// Remove the namespaces of earlier runs whose process is gone (killed
/// before it could clean up).
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if let Some(pid) = owner(name) {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = run("ip", &["netns", "del", name]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_say_whose_they_are() {
        assert_eq!(owner("qkv1234-r1"), Some(1234));
        assert_eq!(owner("qkv77-sw"), Some(77));
        assert_eq!(owner("other-r1"), None);
        assert_eq!(owner("qkvx-r1"), None);
    }
}
