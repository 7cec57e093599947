//! The six reference histories of tests/data/kv must get their verdicts:
//! `-ok` linearizable, `-bad` not.
use std::path::Path;
use std::time::Duration;

use quorumkv_check::formats::{parse, Format};
use quorumkv_check::{check, Model, Verdict};

const KV: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kv");

fn verdict_of(name: &str) -> quorumkv_check::Report {
    let path = Path::new(KV).join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (h, f) = parse(&text, None).unwrap();
    assert_eq!(f, Format::EdnKv);
    assert_eq!(Model::detect(h.ops.iter().map(|o| &o.op)), Model::Kv);
    check(&h, Model::Kv, Some(Duration::from_secs(60)))
}

#[test]
fn ok_histories_are_linearizable() {
    for n in ["c01-ok.txt", "c10-ok.txt", "c50-ok.txt"] {
        let r = verdict_of(n);
        assert_eq!(r.verdict, Verdict::Linearizable, "{n}");
        assert!(r.violation.is_none());
        assert!(
            r.keys.len() > 1 || n.starts_with("c01"),
            "{n}: checked per key"
        );
    }
}

#[test]
fn bad_histories_are_not() {
    for n in ["c01-bad.txt", "c10-bad.txt", "c50-bad.txt"] {
        let r = verdict_of(n);
        assert_eq!(r.verdict, Verdict::NotLinearizable, "{n}");
        let v = r.violation.expect("a violation is explained");
        assert!(v.minimal, "{n}: shortening finished");
        assert!(v.prefix_ops <= v.ops.len());
        assert!(v.involved.contains(&v.failing_op));
        // The explanation is a real one: the prefix fails, one event less passes.
        let key_ops = &v.ops[..v.prefix_ops];
        assert!(
            key_ops[v.failing_op].ret.is_some(),
            "{n}: ends on a completion"
        );
    }
}
