//! Checks znode histories saved as JSON (`[call, ret, op]` rows) in the
//! directory named by `ZNODE_DUMPS`, printing each verdict and time: a
//! profiling aid, skipped when the variable is unset.
use quorumkv_check::znode::{check_history, ZnodeOp};
use quorumkv_check::SpecOp;
use std::time::{Duration, Instant};

#[test]
fn saved_znode_histories() {
    let Ok(dir) = std::env::var("ZNODE_DUMPS") else {
        return;
    };
    let budget = std::env::var("ZNODE_BUDGET").map_or(10.0, |s| s.parse().unwrap());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    for f in files {
        let rows: Vec<(u64, Option<u64>, ZnodeOp)> =
            serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let ops = rows
            .into_iter()
            .map(|(call, ret, op)| SpecOp { call, ret, op })
            .collect();
        let t = Instant::now();
        let (v, _) = check_history(ops, Duration::from_secs_f64(budget));
        println!("{} {v:?} {:.3}s", f.display(), t.elapsed().as_secs_f64());
    }
}
