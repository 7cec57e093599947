//! The driver's INFO text, in the RESP `INFO` command's format.

use super::Driver;
use quorumkv_core::protocol::Protocol;
use quorumkv_core::Peer;

impl<P: Protocol + Send + 'static> Driver<P> {
    pub(super) fn info_text(&self) -> String {
        let mut s = String::new();
        s.push_str("# Server\r\n");
        s.push_str(&format!(
            "quorumkv_version:{}\r\n",
            env!("CARGO_PKG_VERSION")
        ));
        s.push_str(&format!("protocol:{}\r\n", self.info.protocol));
        s.push_str(&format!("replica_id:{}\r\n", self.info.id));
        s.push_str(&format!(
            "uptime_in_seconds:{}\r\n",
            self.start.elapsed().as_secs()
        ));
        s.push_str("# Replication\r\n");
        s.push_str(&format!("replicas:{}\r\n", self.info.members.len()));
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
        s.push_str(&format!(
            "quorum_reachable:{}\r\n",
            if up > self.info.members.len() / 2 {
                "yes"
            } else {
                "no"
            }
        ));
        let p = self.storage.report();
        s.push_str("# Persistence\r\n");
        s.push_str(&format!("durability:{}\r\n", self.storage.mode()));
        s.push_str(&format!("persist_records:{}\r\n", p.records));
        s.push_str(&format!("persist_syncs:{}\r\n", p.syncs));
        let avg = p.sync_us_sum.checked_div(p.syncs).unwrap_or(0);
        s.push_str(&format!("persist_sync_us_avg:{avg}\r\n"));
        s.push_str(&format!("persist_sync_us_max:{}\r\n", p.sync_us_max));
        s.push_str(&format!("persist_pending:{}\r\n", p.pending));
        s.push_str(&format!("persist_errors:{}\r\n", p.errors));
        s.push_str(&format!("persist_stalled:{}\r\n", p.stalled));
        s.push_str("# Stats\r\n");
        s.push_str(&format!(
            "client_requests:{}\r\n",
            self.stats.client_requests
        ));
        s.push_str(&format!("messages_sent:{}\r\n", self.stats.sent));
        s.push_str(&format!(
            "messages_dropped_no_link:{}\r\n",
            self.stats.dropped_no_link
        ));
        s.push_str(&format!(
            "messages_held_until_up:{}\r\n",
            self.stats.held_until_up
        ));
        s.push_str(&format!("events_notified:{}\r\n", self.stats.notified));
        s.push_str(&format!("events_dropped:{}\r\n", self.stats.notify_dropped));
        let cut = crate::net::CONNECTIONS_CUT_OFF.load(std::sync::atomic::Ordering::Relaxed);
        s.push_str(&format!("connections_cut_off:{cut}\r\n"));
        let timed_out =
            crate::net::CONNECTIONS_TIMED_OUT.load(std::sync::atomic::Ordering::Relaxed);
        s.push_str(&format!("connections_timed_out:{timed_out}\r\n"));
        s.push_str("# Security\r\n");
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        s.push_str(&format!(
            "handshakes_refused:{}\r\n",
            load(&crate::guard::HANDSHAKES_REFUSED)
        ));
        s.push_str(&format!(
            "frames_refused:{}\r\n",
            load(&crate::guard::FRAMES_REFUSED)
        ));
        s.push_str(&format!(
            "duplicate_hellos:{}\r\n",
            self.stats.duplicate_hellos
        ));
        s.push_str(&format!("links_replaced:{}\r\n", self.stats.links_replaced));
        s.push_str(&format!(
            "auth_failures:{}\r\n",
            load(&crate::auth::AUTH_FAILURES)
        ));
        s.push_str(&format!(
            "tls_handshake_failures:{}\r\n",
            load(&crate::tls::TLS_HANDSHAKE_FAILURES)
        ));
        for (port, b) in &self.info.budgets {
            s.push_str(&format!("{port}_buffer_bytes:{}\r\n", b.used()));
            s.push_str(&format!("{port}_buffer_limit:{}\r\n", b.limit()));
            s.push_str(&format!("{port}_budget_refusals:{}\r\n", b.refusals()));
        }
        s.push_str(&format!("core:{}\r\n", self.core.status()));
        s
    }
}
