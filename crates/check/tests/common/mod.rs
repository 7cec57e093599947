//! Helpers shared by the checker's integration tests.
use clap::Parser;
use quorumkv_check::cli::{run_to, Args};

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: Args,
}

/// `quorumkv check ARGV` through `cli::run_to`: (exit code, stdout, stderr).
pub fn run(argv: &[&str]) -> (u8, String, String) {
    let args = Cmd::try_parse_from(std::iter::once("check").chain(argv.iter().copied()))
        .expect("valid usage")
        .args;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_to(&args, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}
