//! Property tests: a correct register under random concurrency is always
//! linearizable; one mutated read makes it not.
use proptest::prelude::*;
use quorumkv_check::gen::{mutate_never_written, mutate_stale_read, RegisterGen, SplitMix64};
use quorumkv_check::{check, check_with, Model, Options, Verdict};

fn gen(
    seed: u64,
    ops: usize,
    clients: u64,
    values: Option<u64>,
    unknown_ratio: f64,
) -> RegisterGen {
    RegisterGen {
        seed,
        ops,
        clients,
        values,
        unknown_ratio,
        ..Default::default()
    }
}

fn verdict_only(h: &quorumkv_check::History) -> Verdict {
    check_with(
        h,
        Model::Register,
        Options {
            explain: false,
            ..Options::default()
        },
    )
    .verdict
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..Default::default() })]

    #[test]
    fn correct_register_is_linearizable(
        seed in any::<u64>(),
        ops in 1usize..300,
        clients in 1u64..12,
        values in prop_oneof![Just(None), (1u64..6).prop_map(Some)],
        unknown in prop_oneof![Just(0.0), Just(0.1)],
    ) {
        let h = gen(seed, ops, clients, values, unknown).history();
        prop_assert_eq!(verdict_only(&h), Verdict::Linearizable);
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..Default::default() })]

    #[test]
    fn never_written_value_is_rejected(seed in any::<u64>(), ops in 2usize..200, clients in 1u64..12) {
        let h = gen(seed, ops, clients, Some(4), 0.05).history();
        if let Some(bad) = mutate_never_written(&h, &mut SplitMix64(seed)) {
            prop_assert_eq!(verdict_only(&bad), Verdict::NotLinearizable);
        }
    }

    #[test]
    fn older_value_after_newer_is_rejected(seed in any::<u64>(), ops in 2usize..200, clients in 1u64..12) {
        let h = gen(seed, ops, clients, None, 0.05).history();
        if let Some(bad) = mutate_stale_read(&h, &mut SplitMix64(seed)) {
            prop_assert_ne!(&bad, &h);
            prop_assert_eq!(verdict_only(&bad), Verdict::NotLinearizable);
        }
    }
}

/// Guards the guards: the mutations do apply on typical histories, and the
/// explanation points at the mutated read.
#[test]
fn mutations_apply_and_are_explained() {
    let mut applied = 0;
    for seed in 0..20 {
        let h = gen(seed, 200, 8, None, 0.0).history();
        applied += mutate_stale_read(&h, &mut SplitMix64(seed)).is_some() as u32;
    }
    assert!(applied >= 18, "stale-read mutation applied to {applied}/20");
    let h = gen(3, 300, 8, Some(4), 0.0).history();
    let bad = mutate_never_written(&h, &mut SplitMix64(9)).expect("has reads");
    let r = check(&bad, Model::Register, None);
    assert_eq!(r.verdict, Verdict::NotLinearizable);
    let v = r.violation.expect("explained");
    let never = quorumkv_check::Outcome::Ok(Some("never-written".into()));
    assert_eq!(v.ops[v.failing_op].outcome, never);
    assert_eq!(
        v.involved,
        vec![v.failing_op],
        "that read alone is impossible"
    );
}

/// An obviously correct checker for tiny histories: try every order.
mod brute {
    use quorumkv_check::{History, Op, Operation, Outcome};

    fn apply(state: &Option<String>, o: &Operation) -> Option<Option<String>> {
        let unknown = o.outcome == Outcome::Unknown;
        match (&o.op, &o.outcome) {
            (Op::Read { .. }, Outcome::Ok(r)) => (r == state).then(|| state.clone()),
            (Op::Write { value, .. }, _) => Some(Some(value.clone())),
            (Op::Cas { from, to, .. }, _) => {
                let matches = state.as_deref() == Some(from.as_str());
                if matches {
                    Some(Some(to.clone()))
                } else if unknown {
                    Some(state.clone())
                } else {
                    None
                }
            }
            _ => unreachable!("registers only"),
        }
    }

    fn go(ops: &[Operation], placed: &mut Vec<bool>, state: Option<String>) -> bool {
        let open: Vec<usize> = (0..ops.len()).filter(|&i| !placed[i]).collect();
        if open.iter().all(|&i| ops[i].ret.is_none()) {
            return true;
        }
        for &b in &open {
            // b may go next unless some unplaced op returned before b's call
            let blocked = open
                .iter()
                .any(|&a| ops[a].ret.is_some_and(|r| r < ops[b].call));
            if blocked {
                continue;
            }
            if let Some(next) = apply(&state, &ops[b]) {
                placed[b] = true;
                if go(ops, placed, next) {
                    return true;
                }
                placed[b] = false;
            }
        }
        false
    }

    pub fn linearizable(h: &History) -> bool {
        let ops: Vec<Operation> = h
            .ops
            .iter()
            .filter(|o| match o.outcome {
                Outcome::Fail => false,
                Outcome::Unknown => !o.op.is_read(),
                Outcome::Ok(_) => true,
            })
            .map(|o| Operation {
                ret: if o.outcome == Outcome::Unknown {
                    None
                } else {
                    o.ret
                },
                ..o.clone()
            })
            .collect();
        go(&ops, &mut vec![false; ops.len()], None)
    }
}

fn arb_op() -> impl Strategy<Value = quorumkv_check::Operation> {
    use quorumkv_check::{Op, Operation, Outcome};
    let val = || {
        prop_oneof![
            Just("1".to_string()),
            Just("2".to_string()),
            Just("3".to_string())
        ]
    };
    let op = prop_oneof![
        3 => Just(Op::Read { key: String::new() }),
        3 => val().prop_map(|value| Op::Write { key: String::new(), value }),
        1 => (val(), val()).prop_map(|(from, to)| Op::Cas { key: String::new(), from, to }),
    ];
    let result = prop_oneof![Just(None), val().prop_map(Some)];
    (0u64..4, op, 0u64..20, 0u64..10, result, 0u8..10).prop_map(|(client, op, call, len, r, o)| {
        let outcome = match o {
            0 => Outcome::Unknown,
            1 => Outcome::Fail,
            _ if op.is_read() => Outcome::Ok(r),
            _ => Outcome::Ok(None),
        };
        let ret = (outcome != Outcome::Unknown).then_some(call + len);
        Operation::new(client, op, call, ret, outcome)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..Default::default() })]

    /// The search with all its pruning agrees with trying every order, on
    /// small arbitrary (mostly non-linearizable) histories.
    #[test]
    fn agrees_with_brute_force(ops in proptest::collection::vec(arb_op(), 0..8)) {
        let h = quorumkv_check::History { ops };
        let want = brute::linearizable(&h);
        let got = check(&h, Model::CasRegister, None).verdict;
        prop_assert_eq!(got == Verdict::Linearizable, want, "{:?}", got);
    }

    /// Same with only reads and writes, where blind writes are forced.
    #[test]
    fn agrees_with_brute_force_without_cas(ops in proptest::collection::vec(arb_op(), 0..9)) {
        let ops: Vec<_> = ops.into_iter().filter(|o| !matches!(o.op, quorumkv_check::Op::Cas { .. })).collect();
        let h = quorumkv_check::History { ops };
        let want = brute::linearizable(&h);
        let got = check(&h, Model::Register, None).verdict;
        prop_assert_eq!(got == Verdict::Linearizable, want, "{:?}", got);
    }
}

/// Guards the guard: the arbitrary histories above are a real mix of
/// linearizable and not, with blind writes and unknown outcomes in play.
#[test]
fn arbitrary_histories_are_a_mix() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strat = proptest::collection::vec(arb_op(), 0..8);
    let (mut yes, mut no) = (0, 0);
    for _ in 0..500 {
        let h = quorumkv_check::History {
            ops: strat.new_tree(&mut runner).unwrap().current(),
        };
        if brute::linearizable(&h) {
            yes += 1
        } else {
            no += 1
        }
    }
    assert!(yes > 50 && no > 50, "linearizable {yes}, not {no}");
}
