//! Liveness checks beyond "every operation of the liveness phase completed
//! in time" (`world/clients.rs`); the stall probe is `world/probe.rs`.

use crate::config::SeedParams;

/// The longest one-way trip of a message once the faults have healed, µs
/// (the slow node's links stay slow).
pub fn slowest_trip_us(p: &SeedParams) -> u64 {
    let slow = if p.slow_node.is_some() { 10 } else { 1 };
    p.latency_us.1 * slow
}

/// One write of the load phase: its server (node id), how long its
/// client waited for the outcome, whether it succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    pub server: u32,
    pub ns: u64,
    pub ok: bool,
}

/// How much longer than the mean a write of the load may wait.
pub const MAX_WAIT_OVER_MEAN: u64 = 3;

/// The load phase's verdict (`writers` closed-loop writers spread evenly
/// over the servers for `window_us`): starvation if a write waited more
/// than [`MAX_WAIT_OVER_MEAN`] times the mean (whatever its outcome). With a fair
/// queue every write waits behind about as many others (seed 004 §4.2:
/// the fairness mechanism bounds the latency of a write, l_max); a server
/// that serves one origin first makes the others' writes wait for lulls.
pub fn starvation(waits: &[Wait], writers: usize, window_us: u64) -> Option<String> {
    let n = waits.len() as u64;
    let worst = waits.iter().max_by_key(|w| w.ns)?;
    let mean = waits.iter().map(|w| w.ns).sum::<u64>() / n;
    if worst.ns <= MAX_WAIT_OVER_MEAN * mean {
        return None;
    }
    let mut per_server = std::collections::BTreeMap::<u32, (u64, u64)>::new();
    for w in waits {
        let e = per_server.entry(w.server).or_default();
        e.0 += u64::from(w.ok);
        e.1 = e.1.max(w.ns);
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    let servers: Vec<String> = (per_server.iter())
        .map(|(s, (ok, max))| format!("n{s}: {ok} ok, max {:.1}ms", ms(*max)))
        .collect();
    Some(format!(
        "starvation: under a saturating write load ({writers} writers spread over the servers for {}ms), \
         a write at n{} {} after {:.1}ms, more than {MAX_WAIT_OVER_MEAN}x the mean wait {:.1}ms ({})",
        window_us / 1000,
        worst.server,
        if worst.ok { "completed" } else { "failed" },
        ms(worst.ns),
        ms(mean),
        servers.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waits(ms: &[(u32, u64)]) -> Vec<Wait> {
        (ms.iter())
            .map(|&(server, ms)| Wait {
                server,
                ns: ms * 1_000_000,
                ok: true,
            })
            .collect()
    }

    #[test]
    fn even_waits_are_fair() {
        let w = waits(&[(1, 10), (2, 12), (3, 9), (1, 11), (2, 25), (3, 10)]);
        assert_eq!(starvation(&w, 3, 100_000), None);
        assert_eq!(starvation(&[], 3, 100_000), None);
    }

    #[test]
    fn a_write_waiting_over_three_means_is_starvation() {
        // Mean 15.4ms; n3's 50ms write is over 3x.
        let w = waits(&[(1, 10), (2, 10), (1, 10), (2, 10), (3, 50), (1, 10), (2, 8)]);
        let s = starvation(&w, 3, 100_000).expect("starved");
        assert!(s.contains("write at n3 completed after 50.0ms"), "{s}");
        assert!(s.contains("n1: 3 ok") && s.contains("n3: 1 ok"), "{s}");
    }
}
