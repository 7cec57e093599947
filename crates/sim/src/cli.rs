//! `quorumkv sim` (placeholder while the library takes shape).
use std::process::ExitCode;

/// Arguments of `quorumkv sim`.
#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> ExitCode {
    ExitCode::from(2)
}
