//! Histories in other tools' formats (`tests/data/foreign/`, see its
//! README): the detected format, the verdict, and errors that name the line
//! and the field.
use quorumkv_check::formats::{parse, Format};

mod common;
use common::run;

fn data(name: &str) -> String {
    format!("{}/tests/data/foreign/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("qkv-check-foreign-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn each_foreign_history_is_detected_and_gets_its_verdict() {
    let cases = [
        ("invoke-json-ok.jsonl", Format::InvokeJson, 0, "model kv"),
        ("invoke-json-bad.jsonl", Format::InvokeJson, 1, "model kv"),
        (
            "jepsen-edn-ok.edn",
            Format::JepsenEdn,
            0,
            "model cas-register",
        ),
        (
            "jepsen-edn-bad.edn",
            Format::JepsenEdn,
            1,
            "model cas-register",
        ),
        ("knossos-independent-ok.edn", Format::JepsenEdn, 0, "2 keys"),
        (
            "knossos-independent-bad.edn",
            Format::JepsenEdn,
            1,
            "model cas-register",
        ),
    ];
    for (file, format, code, model) in cases {
        let text = std::fs::read_to_string(data(file)).unwrap();
        assert_eq!(Format::detect(&text), Some(format), "{file}");
        let (got, out, err) = run(&[&data(file)]);
        assert_eq!(got, code, "{file}:\n{out}{err}");
        assert!(out.contains(model), "{file}:\n{out}");
        let verdict = if code == 0 {
            "\nLINEARIZABLE ("
        } else {
            "\nNOT LINEARIZABLE ("
        };
        assert!(out.contains(verdict), "{file}:\n{out}");
        // Forcing the detected format changes nothing.
        let (forced, _, _) = run(&[&data(file), "--format", format.name()]);
        assert_eq!(forced, code, "{file} --format {}", format.name());
    }
}

#[test]
fn the_independent_violation_is_on_its_key() {
    let (code, out, _) = run(&[&data("knossos-independent-bad.edn")]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("violation on key \"2\""), "{out}");
}

#[test]
fn unknown_fields_are_ignored_in_every_json_format() {
    // Our own JSONL with fields of a driver's: once refused, now read.
    let ours = r#"{"client":1,"op":"put","key":"k","value":"v","call":1,"ret":2,"outcome":"ok","node":"n1","trace_id":[1,2]}"#;
    let (h, f) = parse(ours, None).unwrap();
    assert_eq!((f, h.ops.len()), (Format::Jsonl, 1));
    let theirs = r#"{"process":1,"f":"put","key":"k","value":"v","invoke":1,"complete":2,"ok":true,"latency_ns":1,"meta":{"a":null}}"#;
    let (h, f) = parse(theirs, None).unwrap();
    assert_eq!((f, h.ops.len()), (Format::InvokeJson, 1));
}

#[test]
fn errors_name_the_file_line_and_field() {
    let cases = [
        (
            "bad-ok.jsonl",
            "{\"process\":0,\"f\":\"get\",\"key\":\"a\",\"invoke\":1,\"complete\":2,\"ok\":true,\"result\":null}\n\
             {\"process\":1,\"f\":\"get\",\"key\":\"a\",\"invoke\":3,\"complete\":4,\"ok\":\"yes\"}\n",
            "line 2: field \"ok\": expected true, false or null, found \"yes\"",
        ),
        (
            "no-time.jsonl",
            "{\"process\":0,\"f\":\"put\",\"key\":\"a\",\"value\":1,\"ok\":true}\n",
            "line 1: field \"invoke\": missing",
        ),
        (
            "bad-cas.edn",
            "{:type :invoke, :f :read, :value nil, :process 0, :time 1}\n\
             {:type :ok, :f :read, :value nil, :process 0, :time 2}\n\
             {:type :invoke, :f :cas, :value [1], :process 0, :time 3}\n",
            "line 3: field :value: :cas needs [from to], found [1]",
        ),
        (
            "bad-f.edn",
            "{:type :invoke, :f :read, :value nil, :process 0}\n{:type :invoke, :f :inc, :value 1, :process 1}\n",
            "line 2: field :f: unknown operation :inc",
        ),
    ];
    for (name, text, want) in cases {
        let path = tmp(name, text);
        let (code, out, err) = run(&[&path]);
        assert_eq!(code, 2, "{name}: {out}{err}");
        let want = format!("quorumkv check: {path}: {want}");
        assert!(err.starts_with(&want), "{name}\n got: {err}\nwant: {want}");
    }
}

#[test]
fn a_forced_format_reports_where_the_file_differs() {
    let (code, _, err) = run(&[&data("jepsen-edn-ok.edn"), "--format", "invoke-json"]);
    assert_eq!(code, 2);
    assert!(err.contains(": line 1: "), "{err}");
    let (code, _, err) = run(&[&data("invoke-json-ok.jsonl"), "--format", "jsonl"]);
    assert_eq!(code, 2);
    assert!(err.contains(": line 1: missing field `client`"), "{err}");
}
