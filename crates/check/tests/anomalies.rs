//! The classic anomalies, by hand.
use quorumkv_check::{check, History, Model, Op, Operation, Outcome, Verdict};

fn key() -> String {
    "x".into()
}
fn done(client: u64, op: Op, call: u64, ret: u64, outcome: Outcome) -> Operation {
    Operation::new(client, op, call, Some(ret), outcome)
}
fn write(c: u64, v: &str, call: u64, ret: u64) -> Operation {
    done(
        c,
        Op::Write {
            key: key(),
            value: v.into(),
        },
        call,
        ret,
        Outcome::Ok(None),
    )
}
fn read(c: u64, v: Option<&str>, call: u64, ret: u64) -> Operation {
    done(
        c,
        Op::Read { key: key() },
        call,
        ret,
        Outcome::Ok(v.map(String::from)),
    )
}
fn verdict(model: Model, ops: Vec<Operation>) -> Verdict {
    check(&History { ops }, model, None).verdict
}

#[test]
fn stale_read_after_a_completed_write() {
    let ok = vec![
        write(1, "1", 0, 10),
        write(1, "2", 20, 30),
        read(2, Some("2"), 40, 50),
    ];
    assert_eq!(verdict(Model::Register, ok), Verdict::Linearizable);
    let bad = vec![
        write(1, "1", 0, 10),
        write(1, "2", 20, 30),
        read(2, Some("1"), 40, 50),
    ];
    assert_eq!(verdict(Model::Register, bad), Verdict::NotLinearizable);
    // Concurrent with the second write, the old value is fine.
    let racy = vec![
        write(1, "1", 0, 10),
        write(1, "2", 20, 45),
        read(2, Some("1"), 40, 50),
    ];
    assert_eq!(verdict(Model::Register, racy), Verdict::Linearizable);
}

#[test]
fn read_inversion() {
    // A long write; two sequential reads by others see new then old.
    let bad = vec![
        write(1, "1", 0, 5),
        write(1, "2", 10, 100),
        read(2, Some("2"), 20, 30),
        read(3, Some("1"), 40, 50),
    ];
    assert_eq!(verdict(Model::Register, bad), Verdict::NotLinearizable);
    let ok = vec![
        write(1, "1", 0, 5),
        write(1, "2", 10, 100),
        read(2, Some("1"), 20, 30),
        read(3, Some("2"), 40, 50),
    ];
    assert_eq!(verdict(Model::Register, ok), Verdict::Linearizable);
}

#[test]
fn lost_write() {
    let append = |c, v: &str, call, ret| {
        done(
            c,
            Op::Append {
                key: key(),
                value: v.into(),
            },
            call,
            ret,
            Outcome::Ok(None),
        )
    };
    let get = |c, v: &str, call, ret| {
        done(
            c,
            Op::Get { key: key() },
            call,
            ret,
            Outcome::Ok(Some(v.into())),
        )
    };
    // Both appends acknowledged, a later get sees only one of them.
    let bad = vec![
        append(1, "a", 0, 10),
        append(2, "b", 0, 10),
        get(3, "b", 20, 30),
    ];
    assert_eq!(verdict(Model::Kv, bad), Verdict::NotLinearizable);
    let ok = vec![
        append(1, "a", 0, 10),
        append(2, "b", 0, 10),
        get(3, "ba", 20, 30),
    ];
    assert_eq!(verdict(Model::Kv, ok), Verdict::Linearizable);
    // A put acknowledged then a get of a never-written key's "nothing".
    let put = done(
        1,
        Op::Put {
            key: key(),
            value: "v".into(),
        },
        0,
        10,
        Outcome::Ok(None),
    );
    let bad = vec![
        put.clone(),
        done(2, Op::Get { key: key() }, 20, 30, Outcome::Ok(None)),
    ];
    assert_eq!(verdict(Model::Kv, bad), Verdict::NotLinearizable);
    // Delete makes it absent again.
    let del = done(1, Op::Delete { key: key() }, 11, 15, Outcome::Ok(None));
    let ok = vec![
        put,
        del,
        done(2, Op::Get { key: key() }, 20, 30, Outcome::Ok(None)),
    ];
    assert_eq!(verdict(Model::Kv, ok), Verdict::Linearizable);
}

#[test]
fn cas_against_a_value_nobody_wrote() {
    let cas = |from: &str, to: &str, outcome| {
        done(
            2,
            Op::Cas {
                key: key(),
                from: from.into(),
                to: to.into(),
            },
            20,
            30,
            outcome,
        )
    };
    let bad = vec![
        write(1, "1", 0, 10),
        cas("5", "6", Outcome::Ok(None)),
        read(3, Some("6"), 40, 50),
    ];
    assert_eq!(verdict(Model::CasRegister, bad), Verdict::NotLinearizable);
    let bad = vec![write(1, "1", 0, 10), cas("5", "6", Outcome::Ok(None))];
    assert_eq!(
        verdict(Model::CasRegister, bad),
        Verdict::NotLinearizable,
        "even unobserved"
    );
    let ok = vec![
        write(1, "1", 0, 10),
        cas("1", "6", Outcome::Ok(None)),
        read(3, Some("6"), 40, 50),
    ];
    assert_eq!(verdict(Model::CasRegister, ok), Verdict::Linearizable);
    // A failed cas had no effect.
    let failed = vec![
        write(1, "1", 0, 10),
        cas("5", "6", Outcome::Fail),
        read(3, Some("1"), 40, 50),
    ];
    assert_eq!(verdict(Model::CasRegister, failed), Verdict::Linearizable);
    // An unknown cas may have applied late, but only if it matched.
    let unknown = |c: Operation| Operation {
        ret: None,
        outcome: Outcome::Unknown,
        ..c
    };
    let late = vec![
        write(1, "1", 0, 10),
        unknown(cas("1", "6", Outcome::Ok(None))),
        read(3, Some("1"), 40, 50),
        read(3, Some("6"), 60, 70),
    ];
    assert_eq!(verdict(Model::CasRegister, late), Verdict::Linearizable);
    let never = vec![
        write(1, "1", 0, 10),
        unknown(cas("5", "6", Outcome::Ok(None))),
        read(3, Some("6"), 60, 70),
    ];
    assert_eq!(verdict(Model::CasRegister, never), Verdict::NotLinearizable);
}

#[test]
fn unknown_write_may_take_effect_late_or_never() {
    let unknown = Operation {
        client: 1,
        op: Op::Write {
            key: key(),
            value: "2".into(),
        },
        call: 10,
        ret: None,
        outcome: Outcome::Unknown,
    };
    // Invoked at 10, still not visible at 30, visible at 50: took effect late.
    let late = vec![
        write(1, "1", 0, 5),
        unknown.clone(),
        read(2, Some("1"), 20, 30),
        read(2, Some("2"), 40, 50),
    ];
    assert_eq!(verdict(Model::Register, late), Verdict::Linearizable);
    // Never visible at all: never took effect.
    let never = vec![
        write(1, "1", 0, 5),
        unknown.clone(),
        read(2, Some("1"), 40, 50),
    ];
    assert_eq!(verdict(Model::Register, never), Verdict::Linearizable);
    // But not before its invocation.
    let early = vec![
        write(1, "1", 0, 5),
        read(2, Some("2"), 6, 8),
        unknown.clone(),
    ];
    assert_eq!(verdict(Model::Register, early), Verdict::NotLinearizable);
    // And once seen it cannot be unseen (it takes effect once).
    let flicker = vec![
        write(1, "1", 0, 5),
        unknown.clone(),
        read(2, Some("2"), 20, 30),
        read(2, Some("1"), 40, 50),
    ];
    assert_eq!(verdict(Model::Register, flicker), Verdict::NotLinearizable);
    // A failed write is dropped: its value can never be read.
    let failed = Operation {
        ret: Some(12),
        outcome: Outcome::Fail,
        ..unknown
    };
    let bad = vec![write(1, "1", 0, 5), failed, read(2, Some("2"), 40, 50)];
    assert_eq!(verdict(Model::Register, bad), Verdict::NotLinearizable);
}

#[test]
fn unknown_reads_constrain_nothing() {
    let r = Operation {
        ret: None,
        outcome: Outcome::Unknown,
        ..read(2, Some("zzz"), 20, 30)
    };
    assert_eq!(
        verdict(Model::Register, vec![write(1, "1", 0, 10), r]),
        Verdict::Linearizable
    );
}
