//! The driver's and the core's counters in Prometheus text format (served
//! by the metrics port).

use super::Driver;
use quorumkv_core::protocol::Protocol;
use quorumkv_core::{NodeId, Peer};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes samples labelled with the replica id: HELP and TYPE once per
/// metric name, then one sample per label set.
struct Prom {
    id: NodeId,
    s: String,
    last: String,
}

impl Prom {
    fn metric(&mut self, name: &str, kind: &str, help: &str, labels: &str, v: u64) {
        if self.last != name {
            let _ = writeln!(
                self.s,
                "# HELP quorumkv_{name} {help}\n# TYPE quorumkv_{name} {kind}"
            );
            self.last = name.to_string();
        }
        let id = self.id;
        let _ = writeln!(self.s, "quorumkv_{name}{{replica=\"{id}\"{labels}}} {v}");
    }
}

impl<P: Protocol + Send + 'static> Driver<P> {
    pub(super) fn metrics_text(&self) -> String {
        let mut m = Prom {
            id: self.info.id,
            s: String::new(),
            last: String::new(),
        };
        self.driver_metrics(&mut m);
        self.state_metrics(&mut m);
        self.persist_metrics(&mut m);
        self.peer_metrics(&mut m);
        self.port_metrics(&mut m);
        for (name, help, v) in self.core.metrics() {
            let kind = if name.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            };
            m.metric(name, kind, help, "", v);
        }
        m.s
    }

    fn driver_metrics(&self, m: &mut Prom) {
        let st = &self.stats;
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let counters = [
            (
                "client_requests_total",
                "client requests received",
                st.client_requests,
            ),
            ("inputs_total", "inputs handled by the driver", st.inputs),
            (
                "messages_sent_total",
                "protocol messages sent to other nodes",
                st.sent,
            ),
            (
                "messages_dropped_no_link_total",
                "messages for a peer without a link",
                st.dropped_no_link,
            ),
            (
                "messages_held_until_up_total",
                "messages held for a member whose link had not come up yet",
                st.held_until_up,
            ),
            (
                "events_notified_total",
                "events pushed to client sessions",
                st.notified,
            ),
            (
                "events_dropped_total",
                "events for a session that is gone or cannot carry them",
                st.notify_dropped,
            ),
            (
                "stale_link_downs_total",
                "link-down reports of connections already replaced",
                st.stale_link_downs,
            ),
            (
                "handshakes_refused_total",
                "hellos and peer proofs refused (logged with the remote address)",
                load(&crate::guard::HANDSHAKES_REFUSED),
            ),
            (
                "frames_refused_total",
                "frames refused for the connection's role (peer-only messages from clients)",
                load(&crate::guard::FRAMES_REFUSED),
            ),
            (
                "versions_refused_total",
                "client and replica hellos refused for another major wire version",
                load(&crate::guard::VERSIONS_REFUSED),
            ),
            (
                "auth_failures_total",
                "failed user authentications (RESP AUTH/HELLO, native Auth, ZooKeeper addAuth digest)",
                load(&crate::auth::AUTH_FAILURES),
            ),
            (
                "tls_handshake_failures_total",
                "failed TLS handshakes on the native and RESP ports",
                load(&crate::tls::TLS_HANDSHAKE_FAILURES),
            ),
            (
                "duplicate_hellos_total",
                "unauthenticated hellos naming a replica that has a live link",
                st.duplicate_hellos,
            ),
            (
                "links_replaced_total",
                "live replica links replaced by an authenticated hello",
                st.links_replaced,
            ),
        ];
        for (name, help, v) in counters {
            m.metric(name, "counter", help, "", v);
        }
    }

    /// Uptime, latency, and the replica's state as gauges.
    fn state_metrics(&self, m: &mut Prom) {
        m.s.push_str(&self.stats.latency.prometheus(self.info.id));
        m.last.clear();
        let uptime = self.start.elapsed().as_secs();
        m.metric("uptime_seconds", "gauge", "seconds since start", "", uptime);
        // What `/readyz` and `quorumkv endpoints status` judge, as gauges
        // (alerts on quorum loss need them over time).
        let s = self.node_status();
        let gauges = [
            ("members", "replicas in the cluster", s.members.len() as u64),
            (
                "peers_up",
                "peers with a live link",
                s.peers_up.len() as u64,
            ),
            (
                "quorum_reachable",
                "1 while this replica and the peers it reaches form a majority",
                u64::from(s.quorum_reachable()),
            ),
            (
                "ready",
                "1 while /readyz answers 200 (serving and reaching a quorum)",
                u64::from(s.unready(true).is_none()),
            ),
        ];
        for (name, help, v) in gauges {
            m.metric(name, "gauge", help, "", v);
        }
    }

    fn persist_metrics(&self, m: &mut Prom) {
        let p = self.storage.report();
        let mode = format!(",durability=\"{}\"", self.storage.mode());
        let help = "1, labelled with the durability mode (memory, buffered, fsync)";
        m.metric("durability_info", "gauge", help, &mode, 1);
        let counters = [
            ("persist_records_total", "records made durable", p.records),
            (
                "persist_syncs_total",
                "sync (fsync) or flush batches",
                p.syncs,
            ),
            (
                "persist_errors_total",
                "failed writes or syncs (retried)",
                p.errors,
            ),
        ];
        for (name, help, v) in counters {
            m.metric(name, "counter", help, "", v);
        }
        let help = "records handed to storage and not durable yet";
        m.metric("persist_pending", "gauge", help, "", p.pending);
        let help = "1 while persisting fails (e.g. a full disk) and acknowledgements wait";
        m.metric(
            "persist_stalled",
            "gauge",
            help,
            "",
            u64::from(!p.stalled.is_empty()),
        );
        let id = self.info.id;
        let secs = p.sync_us_sum as f64 / 1e6;
        let _ = writeln!(
            m.s,
            "# HELP quorumkv_persist_sync_seconds time spent writing and syncing batches\n\
             # TYPE quorumkv_persist_sync_seconds summary\n\
             quorumkv_persist_sync_seconds_sum{{replica=\"{id}\"}} {secs}\n\
             quorumkv_persist_sync_seconds_count{{replica=\"{id}\"}} {}",
            p.syncs
        );
        m.last.clear();
    }

    fn peer_metrics(&self, m: &mut Prom) {
        let id = self.info.id;
        for &p in self.info.members.iter().filter(|&&p| p != id) {
            let up = self.links.contains_key(&Peer::Node(p)) as u64;
            m.metric(
                "peer_up",
                "gauge",
                "1 when the link to the peer is up",
                &format!(",peer=\"{p}\""),
                up,
            );
        }
    }

    /// The client ports' buffer budgets and connection limits.
    fn port_metrics(&self, m: &mut Prom) {
        for (port, b) in &self.info.budgets {
            let l = format!(",port=\"{port}\"");
            let help = "bytes held by client connections' buffers and queued replies";
            m.metric("buffer_bytes", "gauge", help, &l, b.used() as u64);
        }
        for (port, b) in &self.info.budgets {
            let l = format!(",port=\"{port}\"");
            let help = "most bytes client connections of the port may hold together";
            m.metric("buffer_limit_bytes", "gauge", help, &l, b.limit() as u64);
        }
        for (port, b) in &self.info.budgets {
            let l = format!(",port=\"{port}\"");
            let help = "connections closed because the port's buffer budget was exhausted";
            m.metric("budget_refusals_total", "counter", help, &l, b.refusals());
        }
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        m.metric(
            "connections_timed_out_total",
            "counter",
            "client connections closed by the idle or read timeout",
            "",
            load(&crate::net::CONNECTIONS_TIMED_OUT),
        );
    }
}
