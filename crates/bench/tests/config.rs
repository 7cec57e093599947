//! Flag and list parsing, defaults, and bad input (issue 4 §Bad input).

use std::time::Duration;

use clap::Parser;
use quorumkv_bench::cli::Args;
use quorumkv_bench::config::{
    parse_duration, parse_list, parse_targets, BenchConfig, ConfigError, CoordMode, Distribution,
    Length, TargetSpec, ZkRead, SEED_002_ZIPF,
};
use quorumkv_core::protocol::ProtocolKind;
use quorumkv_node::storage::Durability;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

fn args(v: &[&str]) -> Args {
    let mut all = vec!["bench"];
    all.extend_from_slice(v);
    Cli::try_parse_from(all)
        .expect("clap accepts the flags")
        .args
}

fn err(v: &[&str]) -> String {
    args(v)
        .to_config()
        .expect_err("config should be rejected")
        .to_string()
}

#[test]
fn defaults_are_the_main_job() {
    let c = args(&[]).to_config().unwrap();
    assert_eq!(c.targets, vec![TargetSpec::Local]);
    assert_eq!(c.replicas, vec![3]);
    assert_eq!(c.get_fractions, vec![0.9, 0.1]);
    assert_eq!(c.keys, vec![10]);
    assert_eq!(c.clients, vec![1, 4, 8, 16, 32]);
    assert!(matches!(c.length, Length::Duration(d) if d <= Duration::from_secs(5)));
    assert_eq!(c.protocols, quorumkv_core::protocol::ProtocolKind::all());
    // What `quorumkv server` runs by default.
    assert_eq!(c.durabilities, vec![Durability::Fsync]);
    // 2 mixes × 5 client counts per protocol, a few seconds each.
    assert_eq!(c.point_count(), 10 * c.protocols.len());
}

#[test]
fn lists_expand_into_the_matrix() {
    let c = args(&[
        "--replicas",
        "1,3,5",
        "--clients",
        "1,2,4",
        "--get-fraction",
        "0.9, 0.1",
        "--distribution",
        "uniform,zipf,zipf:0.99,hotspot",
        "--value-size",
        "16,1024",
    ])
    .to_config()
    .unwrap();
    assert_eq!(c.replicas, vec![1, 3, 5]);
    assert_eq!(c.get_fractions, vec![0.9, 0.1]);
    assert_eq!(
        c.distributions,
        vec![
            Distribution::Uniform,
            Distribution::Zipf(SEED_002_ZIPF),
            Distribution::Zipf(0.99),
            Distribution::Hotspot
        ]
    );
    let per_deploy = 3 * 2 * 4 * 2;
    assert_eq!(c.plans().len(), 3 * c.protocols.len());
    assert!(c.plans().iter().all(|p| p.workloads.len() == per_deploy));
}

#[test]
fn durability_modes_are_side_by_side_deployments() {
    let c = args(&["--durability", "memory,buffered,fsync", "--protocol", "abd"])
        .to_config()
        .unwrap();
    let labels: Vec<String> = c.plans().iter().map(|p| p.deploy.label()).collect();
    assert_eq!(labels, ["abd/memory", "abd/buffered", "abd"]);
    let e = err(&["--durability", "disk"]);
    assert!(e.contains("durability") && e.contains("disk"), "{e}");
}

#[test]
fn open_loop_uses_max_outstanding() {
    let c = args(&["--rate", "50,100", "--max-outstanding", "25"])
        .to_config()
        .unwrap();
    assert_eq!(c.rates, vec![50.0, 100.0]);
    let w = c.workloads();
    assert_eq!(w.len(), 2 * 2);
    assert!(w.iter().all(|w| w.clients == 25 && w.rate.is_some()));
    assert!(err(&["--rate", "50", "--clients", "4"]).contains("--max-outstanding"));
}

#[test]
fn targets_parse_with_extra_endpoints() {
    let t =
        parse_targets("local,etcd://127.0.0.1:2379,127.0.0.1:2381,redis://localhost:6379").unwrap();
    assert_eq!(
        t,
        vec![
            TargetSpec::Local,
            TargetSpec::Etcd {
                endpoints: vec!["127.0.0.1:2379".into(), "127.0.0.1:2381".into()]
            },
            TargetSpec::Redis {
                addr: "localhost:6379".into()
            },
        ]
    );
    let q = parse_targets("quorumkv://127.0.0.1:7001,127.0.0.1:7002").unwrap();
    assert!(matches!(&q[0], TargetSpec::Quorumkv { endpoints } if endpoints.len() == 2));
}

#[test]
fn zookeeper_targets_read_locally_or_after_a_sync() {
    let t = parse_targets("zk://127.0.0.1:2181,127.0.0.1:2184,zk+sync://127.0.0.1:2181").unwrap();
    let local = TargetSpec::Zookeeper {
        endpoints: vec!["127.0.0.1:2181".into(), "127.0.0.1:2184".into()],
        read: ZkRead::Local,
    };
    let sync = TargetSpec::Zookeeper {
        endpoints: vec!["127.0.0.1:2181".into()],
        read: ZkRead::Sync,
    };
    assert_eq!(t, vec![local.clone(), sync.clone()]);
    assert_eq!(t[0].to_string(), "zk://127.0.0.1:2181,127.0.0.1:2184");
    assert_eq!(parse_targets(&t[1].to_string()).unwrap(), vec![sync]);
    let long = parse_targets("zookeeper+sync://h:1,zookeeper://h:2").unwrap();
    assert!(matches!(
        long[0],
        TargetSpec::Zookeeper {
            read: ZkRead::Sync,
            ..
        }
    ));
    assert!(matches!(
        long[1],
        TargetSpec::Zookeeper {
            read: ZkRead::Local,
            ..
        }
    ));
    // One deployment each, labelled by how it reads; only local reads
    // may fail the linearizability check legitimately.
    let cfg = BenchConfig {
        targets: t,
        ..Default::default()
    };
    let plans = cfg.plans();
    let labels: Vec<String> = plans.iter().map(|p| p.deploy.label()).collect();
    assert_eq!(labels, ["zookeeper", "zookeeper+sync"]);
    assert!(plans[0].deploy.weaker_reads().is_some());
    assert!(plans[1].deploy.weaker_reads().is_none());
    assert_eq!(cfg.proxy_fallbacks(), vec![], "no quorumkv target");
}

/// `--client-mode direct` (the default) with a protocol that has no
/// client-side coordinator: the bench runs it through a server and says so.
#[test]
fn direct_mode_falls_back_to_proxy_without_a_client_coordinator() {
    let (without, with): (Vec<ProtocolKind>, Vec<ProtocolKind>) = ProtocolKind::all()
        .into_iter()
        .partition(|p| !p.has_client_coordinator());
    let c = args(&[]).to_config().unwrap();
    assert_eq!(c.coord, CoordMode::Direct);
    assert_eq!(c.proxy_fallbacks(), without);
    for &p in &without {
        let line = BenchConfig::proxy_fallback_notice(p);
        assert!(line.contains(p.name()) && line.contains("proxy"), "{line}");
        assert!(!line.contains('\n'));
    }
    if let Some(p) = with.first() {
        let c = args(&["--protocol", p.name()]).to_config().unwrap();
        assert!(c.proxy_fallbacks().is_empty());
    }
    if let Some(p) = without.first() {
        let c = args(&["--protocol", p.name(), "--client-mode", "proxy"])
            .to_config()
            .unwrap();
        assert!(c.proxy_fallbacks().is_empty(), "proxy was asked");
    }
}

#[test]
fn bad_input_is_one_clear_line() {
    for (flags, needle) in [
        (vec!["--protocol", "abd,paxos"], "unknown protocol 'paxos'"),
        (vec!["--target", "consul://h:8500"], "unknown target scheme"),
        (vec!["--target", "zk://h:2181,redis"], "not host:port"),
        (vec!["--target", "mongo"], "unknown target 'mongo'"),
        (vec!["--target", "etcd://nohost"], "not host:port"),
        (vec!["--clients", "1,x,4"], "--clients: bad value 'x'"),
        (vec!["--clients", "1,,4"], "empty entry"),
        (vec!["--clients", "0"], "out of range"),
        (vec!["--replicas", "-1"], "--replicas: bad value '-1'"),
        (vec!["--get-fraction", "1.5"], "not in [0, 1]"),
        (vec!["--distribution", "zipf:-1"], "bad Zipf exponent"),
        (vec!["--distribution", "pareto"], "unknown distribution"),
        (vec!["--duration", "3 parsecs"], "--duration"),
        (vec!["--keys", "0"], "0 keys"),
        (vec!["--rate", "0"], "not a positive rate"),
    ] {
        let e = err(&flags);
        assert!(e.contains(needle), "{flags:?}: '{e}' lacks '{needle}'");
        assert!(!e.contains('\n'), "{flags:?}: error spans lines: {e}");
    }
}

#[test]
fn helpers() {
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
    assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
    assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
    assert!(parse_duration("fast").is_err());
    assert_eq!(
        parse_list::<u32>("clients", "1, 2,3").unwrap(),
        vec![1, 2, 3]
    );
    assert!(matches!(
        parse_list::<u32>("clients", "1;2"),
        Err(ConfigError::BadValue {
            flag: "clients",
            ..
        })
    ));
    assert_eq!(
        "zipf:1.5".parse::<Distribution>().unwrap().to_string(),
        "zipf:1.5"
    );
}

#[test]
fn a_quorumkv_target_needs_one_protocol() {
    let mut c = BenchConfig {
        targets: parse_targets("quorumkv://127.0.0.1:7001").unwrap(),
        ..Default::default()
    };
    c.protocols = vec!["abd".parse().unwrap(); 2];
    assert!(matches!(c.validate(), Err(ConfigError::Conflict(_))));
    // Without --protocol the bench asks the cluster; with two it refuses.
    let t = ["--target", "quorumkv://127.0.0.1:7001"];
    let asked = args(&t).to_config().unwrap();
    assert!(asked.protocol_from_target);
    assert!(err(&[t[0], t[1], "--protocol", "abd,ring"]).contains("one protocol"));
    let given = args(&[t[0], t[1], "--protocol", "abd"])
        .to_config()
        .unwrap();
    assert!(!given.protocol_from_target);
}

#[test]
fn variants_are_each_protocols_and_options_are_checked() {
    use quorumkv_bench::config::Variant;
    let abd = "abd".parse().unwrap();
    let named = |s: &str| s.parse::<Variant>().unwrap().options_for(abd);
    assert_eq!(named("default"), Some(vec![]));
    let thrifty = named("thrifty").expect("abd offers thrifty");
    assert_eq!(thrifty, vec![("thrifty".to_string(), "true".to_string())]);
    let adhoc = named("fast-read=false+thrifty=true").expect("valid options");
    assert_eq!(adhoc.len(), 2);
    assert_eq!(named("warp-speed"), None);
    assert_eq!(named("lease=1s"), None, "not an abd option");
    // A variant only one protocol offers runs for that protocol alone.
    let c = args(&["--protocol", "abd", "--variant", "default,thrifty"])
        .to_config()
        .unwrap();
    assert_eq!(c.plans().len(), 2);
    let every = args(&["--variant", "default,thrifty"]).to_config().unwrap();
    assert_eq!(every.plans().len(), every.protocols.len() + 1);
    assert!(err(&["--variant", "warp-speed"]).contains("warp-speed"));
    assert!(err(&["--opt", "nonsense=1"]).contains("nonsense"));
    assert!(err(&["--opt", "thrifty=true"]).contains("ring: unknown option 'thrifty'"));
    let c = args(&["--protocol", "abd", "--opt", "thrifty=true"])
        .to_config()
        .unwrap();
    assert_eq!(c.options, vec![("thrifty".to_string(), "true".to_string())]);
}

/// `--think`: a range, a single value, none by default; an inverted range
/// is refused in one line.
#[test]
fn think_time_is_a_range_or_one_value() {
    let ms = Duration::from_millis;
    assert_eq!(args(&[]).to_config().unwrap().think, None);
    let c = args(&["--think", "25ms..75ms"]).to_config().unwrap();
    assert_eq!(c.think, Some((ms(25), ms(75))));
    let c = args(&["--think", "10ms"]).to_config().unwrap();
    assert_eq!(c.think, Some((ms(10), ms(10))));
    let e = err(&["--think", "75ms..25ms"]);
    assert!(e.contains("think") && e.contains("below"), "{e}");
    assert!(err(&["--think", "soon"]).contains("think"));
}

#[test]
fn security_settings_are_clusters_side_by_side() {
    use quorumkv_bench::config::{DeploySpec, Security};
    let c = args(&["--protocol", "abd,zab", "--security", "plain,tls,tls+auth"])
        .to_config()
        .unwrap();
    assert_eq!(
        c.securities,
        vec![Security::Plain, Security::Tls, Security::TlsAuth]
    );
    let plans = c.plans();
    let labels: Vec<String> = plans.iter().map(|p| p.deploy.label()).collect();
    assert_eq!(
        labels,
        [
            "abd",
            "abd/tls",
            "abd/tls+auth",
            "zab",
            "zab/tls",
            "zab/tls+auth"
        ]
    );
    assert!(matches!(
        plans[2].deploy,
        DeploySpec::Local {
            security: Security::TlsAuth,
            ..
        }
    ));
    // A protocol's settings run at the same time, workload by workload.
    assert_eq!(
        quorumkv_bench::sweep::security_groups(&plans),
        vec![vec![0, 1, 2], vec![3, 4, 5]]
    );
    assert_eq!(
        args(&["--tls"]).to_config().unwrap().securities,
        vec![Security::Tls]
    );
    assert!(err(&["--security", "tls,ssl"]).contains("unknown security setting 'ssl'"));
    assert!(err(&["--security", "tls,tls"]).contains("listed twice"));
    assert!(Cli::try_parse_from(["bench", "--tls", "--security", "tls"]).is_err());
    assert!(err(&[
        "--workload",
        "znode",
        "--protocol",
        "zab",
        "--security",
        "auth"
    ])
    .contains("kv workload"));
}

#[test]
fn rounds_multiply_the_points() {
    let c = args(&[
        "--protocol",
        "abd",
        "--security",
        "plain,tls",
        "--rounds",
        "3",
    ])
    .to_config()
    .unwrap();
    assert_eq!(c.rounds, 3);
    // 2 clusters × 2 mixes × 5 client counts × 3 rounds.
    assert_eq!(c.point_count(), 60);
    assert!(err(&["--rounds", "0"]).contains("--rounds"));
}
