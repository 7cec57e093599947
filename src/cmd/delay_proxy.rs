//! `quorumkv delay-proxy`: TCP relays that add a round trip, for a service
//! that cannot delay its own links (`quorumkv_node::delay_proxy`).

use clap::Args as ClapArgs;
use quorumkv_node::config::parse_duration;
use quorumkv_node::net::LinkDelay;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

/// Relay TCP connections with an added delay (netem in user space)
///
/// Every connection accepted on a --link's LISTEN address is relayed to its
/// TARGET; what goes to the target waits --delay, what comes back waits
/// --reply-delay (each plus a uniform draw from 0 ..= --jitter). Used to put
/// seed 001's client and server round trips in front of ZooKeeper
/// (scripts/peers.sh start zookeeper --rtt-client/--rtt-peer), where the
/// kernel has no netem. quorumkv's own servers add them themselves
/// (server --rtt-client, --rtt-peer).
///
/// Example: a 100 ms client round trip in front of a ZooKeeper on 2181
///   quorumkv delay-proxy --link 127.0.0.1:12181=127.0.0.1:2181 --reply-delay 100ms
#[derive(ClapArgs, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// LISTEN=TARGET (host:port each); repeat for more links.
    #[arg(long = "link", value_name = "LISTEN=TARGET", required = true, value_parser = parse_link)]
    links: Vec<(SocketAddr, SocketAddr)>,
    /// Delay of the bytes going to the target.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    delay: Duration,
    /// Delay of the bytes coming back from the target.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    reply_delay: Duration,
    /// Uniform jitter added to each chunk's delay (0 ..= this).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    jitter: Duration,
}

fn parse_link(s: &str) -> Result<(SocketAddr, SocketAddr), String> {
    let (l, t) = s.split_once('=').ok_or_else(|| {
        format!("'{s}' is not LISTEN=TARGET (e.g. 127.0.0.1:12181=127.0.0.1:2181)")
    })?;
    let addr = |a: &str| {
        a.trim()
            .parse::<SocketAddr>()
            .map_err(|e| format!("'{a}' is not host:port ({e})"))
    };
    Ok((addr(l)?, addr(t)?))
}

pub fn run(a: Args) -> ExitCode {
    super::init_logging("warn", None);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return super::fail(format!("cannot start the runtime: {e}")),
    };
    rt.block_on(async {
        let mut tasks = Vec::new();
        for (i, (listen, to)) in a.links.iter().enumerate() {
            let listener = match tokio::net::TcpListener::bind(listen).await {
                Ok(l) => l,
                Err(e) => return super::fail(format!("cannot listen on {listen}: {e}")),
            };
            let d = |delay, salt| LinkDelay {
                delay,
                jitter: a.jitter,
                seed: (i as u64) << 1 | salt,
            };
            let relay = quorumkv_node::delay_proxy::relay(
                listener,
                *to,
                d(a.delay, 0),
                d(a.reply_delay, 1),
            );
            tasks.push(tokio::spawn(relay));
        }
        eprintln!(
            "quorumkv delay-proxy: {} links, delay {:?}, reply delay {:?}, jitter {:?}; Ctrl-C stops",
            a.links.len(),
            a.delay,
            a.reply_delay,
            a.jitter
        );
        let _ = tokio::signal::ctrl_c().await;
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::parse_link;

    #[test]
    fn links_are_listen_equals_target() {
        let (l, t) = parse_link("127.0.0.1:12181=127.0.0.1:2181").unwrap();
        assert_eq!((l.port(), t.port()), (12181, 2181));
        let e = parse_link("127.0.0.1:12181").unwrap_err();
        assert!(e.contains("is not LISTEN=TARGET"), "{e}");
        let e = parse_link("127.0.0.1:12181=localhost").unwrap_err();
        assert!(e.contains("'localhost' is not host:port"), "{e}");
    }
}
