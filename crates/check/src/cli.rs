//! `quorumkv check`: placeholder until its issue lands.
use std::process::ExitCode;

/// Arguments of `quorumkv check`.
#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("quorumkv check: not built yet");
    ExitCode::from(2)
}
