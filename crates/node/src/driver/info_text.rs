//! The driver's INFO text, in the RESP `INFO` command's format.

use super::Driver;
use quorumkv_core::protocol::Protocol;
use quorumkv_core::Peer;
use std::fmt::Display;
use std::sync::atomic::{AtomicU64, Ordering};

/// Append the `key:value` lines of one INFO section under its heading.
fn section(s: &mut String, heading: &str, lines: &[(&str, &dyn Display)]) {
    s.push_str(&format!("# {heading}\r\n"));
    for (key, value) in lines {
        s.push_str(&format!("{key}:{value}\r\n"));
    }
}

fn load(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

impl<P: Protocol + Send + 'static> Driver<P> {
    pub(super) fn info_text(&self) -> String {
        let mut s = String::new();
        let wire_version = format!(
            "{}.{}",
            crate::version::WIRE_MAJOR,
            crate::version::WIRE_MINOR
        );
        section(
            &mut s,
            "Server",
            &[
                ("quorumkv_version", &env!("CARGO_PKG_VERSION")),
                ("wire_version", &wire_version),
                ("storage_format", &crate::version::STORAGE_FORMAT),
                ("protocol", &self.info.protocol),
                ("replica_id", &self.info.id),
                ("uptime_in_seconds", &self.start.elapsed().as_secs()),
            ],
        );
        self.info_replication(&mut s);
        self.info_persistence(&mut s);
        self.info_stats(&mut s);
        self.info_security(&mut s);
        s.push_str(&format!("core:{}\r\n", self.core.status()));
        s
    }

    fn info_replication(&self, s: &mut String) {
        section(s, "Replication", &[("replicas", &self.info.members.len())]);
        let mut up = 1; // ourselves
        for &m in &self.info.members {
            if m == self.info.id {
                continue;
            }
            let state = if self.links.contains_key(&Peer::Node(m)) {
                up += 1;
                "up"
            } else {
                "down"
            };
            s.push_str(&format!("peer_{m}:{state}\r\n"));
        }
        s.push_str(&format!("replicas_reachable:{up}\r\n"));
        let quorum = if up > self.info.members.len() / 2 {
            "yes"
        } else {
            "no"
        };
        s.push_str(&format!("quorum_reachable:{quorum}\r\n"));
    }

    fn info_persistence(&self, s: &mut String) {
        let p = self.storage.report();
        let avg = p.sync_us_sum.checked_div(p.syncs).unwrap_or(0);
        section(
            s,
            "Persistence",
            &[
                ("durability", &self.storage.mode()),
                ("persist_records", &p.records),
                ("persist_syncs", &p.syncs),
                ("persist_sync_us_avg", &avg),
                ("persist_sync_us_max", &p.sync_us_max),
                ("persist_pending", &p.pending),
                ("persist_errors", &p.errors),
                ("persist_stalled", &p.stalled),
            ],
        );
    }

    fn info_stats(&self, s: &mut String) {
        let st = &self.stats;
        section(
            s,
            "Stats",
            &[
                ("client_requests", &st.client_requests),
                ("messages_sent", &st.sent),
                ("messages_dropped_no_link", &st.dropped_no_link),
                ("messages_held_until_up", &st.held_until_up),
                ("events_notified", &st.notified),
                ("events_dropped", &st.notify_dropped),
                (
                    "connections_cut_off",
                    &load(&crate::net::CONNECTIONS_CUT_OFF),
                ),
                (
                    "connections_timed_out",
                    &load(&crate::net::CONNECTIONS_TIMED_OUT),
                ),
            ],
        );
    }

    fn info_security(&self, s: &mut String) {
        section(
            s,
            "Security",
            &[
                (
                    "handshakes_refused",
                    &load(&crate::guard::HANDSHAKES_REFUSED),
                ),
                ("frames_refused", &load(&crate::guard::FRAMES_REFUSED)),
                ("versions_refused", &load(&crate::guard::VERSIONS_REFUSED)),
                ("duplicate_hellos", &self.stats.duplicate_hellos),
                ("links_replaced", &self.stats.links_replaced),
                ("auth_failures", &load(&crate::auth::AUTH_FAILURES)),
                (
                    "tls_handshake_failures",
                    &load(&crate::tls::TLS_HANDSHAKE_FAILURES),
                ),
            ],
        );
        for (port, b) in &self.info.budgets {
            s.push_str(&format!("{port}_buffer_bytes:{}\r\n", b.used()));
            s.push_str(&format!("{port}_buffer_limit:{}\r\n", b.limit()));
            s.push_str(&format!("{port}_budget_refusals:{}\r\n", b.refusals()));
        }
    }
}
