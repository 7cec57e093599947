//! `quorumkv check` end to end, through `cli::run_to`.
use quorumkv_check::gen::hard_appends;
use quorumkv_check::{Op, Operation, Outcome};

mod common;
use common::run;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

fn kv(name: &str) -> String {
    format!("{DATA}/kv/{name}")
}

fn tmp(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("qkv-check-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn linearizable_exits_0() {
    let (code, out, err) = run(&[&kv("c10-ok.txt")]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("LINEARIZABLE (10 keys, model kv"), "{out}");
    assert_eq!(out.matches(": linearizable").count(), 10, "{out}");
}

#[test]
fn violation_exits_1_and_explains_with_html() {
    let html = std::env::temp_dir().join(format!("qkv-check-{}.html", std::process::id()));
    let (code, out, _) = run(&[&kv("c01-bad.txt"), "--html", html.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("NOT LINEARIZABLE"), "{out}");
    assert!(out.contains("violation on key"), "{out}");
    assert!(out.contains("shortest non-linearizable prefix"), "{out}");
    assert!(out.contains("operations involved"), "{out}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.starts_with("<!DOCTYPE html>")
            && page.contains("<svg")
            && page.contains("id=\"failing\"")
    );
    assert!(
        !page.contains("http://")
            || page
                .matches("http://")
                .all(|_| page.contains("xmlns=\"http://www.w3.org/2000/svg\""))
    );
}

#[test]
fn jepsen_cas_register_is_read() {
    let log = "\
INFO  jepsen.util - 0\t:invoke\t:write\t1
INFO  jepsen.util - 0\t:ok\t:write\t1
INFO  jepsen.util - 1\t:invoke\t:cas\t[1 2]
INFO  jepsen.util - 1\t:ok\t:cas\t[1 2]
INFO  jepsen.util - 2\t:invoke\t:read\tnil
INFO  jepsen.util - 2\t:ok\t:read\t1
";
    let f = tmp("stale.log", log);
    let (code, out, _) = run(&[&f]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("model cas-register"), "{out}");
    let (code, _, err) = run(&[&f, "--model", "register"]);
    assert_eq!(code, 2);
    assert!(err.contains("is not part of model register"), "{err}");
}

#[test]
fn jepsen_logs_padded_with_spaces_are_read() {
    let (code, out, err) = run(&[&format!("{DATA}/jepsen/cas-spaces-ok.log")]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("LINEARIZABLE (1 keys, model cas-register"),
        "{out}"
    );
    let (code, out, err) = run(&[&format!("{DATA}/jepsen/cas-spaces-bad.log")]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("read -> \"0\""),
        "the stale read is named: {out}"
    );
}

#[test]
fn unreadable_input_exits_2_with_one_line() {
    for (name, text) in [
        ("empty.txt", ""),
        ("junk.txt", "GIF89a"),
        ("bad.jsonl", "{\"client\":1}\n"),
    ] {
        let (code, out, err) = run(&[&tmp(name, text)]);
        assert_eq!(code, 2, "{name}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.starts_with("quorumkv check: "), "{err}");
    }
    let (code, _, err) = run(&["/no/such/file"]);
    assert_eq!(code, 2);
    assert!(err.contains("No such file"), "{err}");
}

/// A key whose refutation is exponential (see `gen::hard_appends`), as JSONL.
fn hard_key_jsonl(extra: &[quorumkv_check::Operation]) -> String {
    let mut h = hard_appends("k", 20, 0);
    h.ops.extend_from_slice(extra);
    let mut out = Vec::new();
    h.write_jsonl(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn timeout_exits_2_and_says_how_far() {
    let (code, out, _) = run(&[
        &tmp("slow.jsonl", &hard_key_jsonl(&[])),
        "--timeout",
        "10ms",
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("UNKNOWN"), "{out}");
    let line = out.lines().find(|l| l.starts_with("key \"k\"")).unwrap();
    assert!(
        line.contains("unknown (timed out) (21 ops; searched"),
        "{line}"
    );
    assert!(line.contains("operations linearized at once"), "{line}");
    assert!(line.contains("of 42 events"), "{line}");
    assert!(line.contains("states explored"), "{line}");
}

#[test]
fn per_key_timeout_gives_up_on_one_key_only() {
    let easy = Operation {
        client: 99,
        op: Op::Put {
            key: "easy".into(),
            value: "v".into(),
        },
        call: 0,
        ret: Some(10),
        outcome: Outcome::Ok(None),
    };
    let file = tmp("one-slow.jsonl", &hard_key_jsonl(&[easy]));
    for threads in ["1", "2"] {
        let args = [&file, "--per-key-timeout", "50ms", "--threads", threads];
        let (code, out, _) = run(&args);
        assert_eq!(code, 2, "{out}");
        assert!(out.contains("key \"easy\": linearizable"), "{out}");
        assert!(out.contains("key \"k\": unknown (timed out)"), "{out}");
    }
}

#[test]
fn usage_errors_exit_3() {
    let code = quorumkv_check::cli::run_from(["check", "--model", "zap", "f"]);
    assert_eq!(
        format!("{code:?}"),
        format!("{:?}", std::process::ExitCode::from(3))
    );
    let code = quorumkv_check::cli::run_from(["check", "--threads", "0", "f"]);
    assert_eq!(
        format!("{code:?}"),
        format!("{:?}", std::process::ExitCode::from(3))
    );
    let code = quorumkv_check::cli::run_from(["check"]);
    assert_eq!(
        format!("{code:?}"),
        format!("{:?}", std::process::ExitCode::from(3))
    );
}
