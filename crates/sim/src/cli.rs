//! `quorumkv sim`: placeholder until its issue lands.
use std::process::ExitCode;

/// Arguments of `quorumkv sim`.
#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("quorumkv sim: not built yet");
    ExitCode::from(2)
}
