//! `quorumkv bench`: placeholder until its issue lands.
use std::process::ExitCode;

/// Arguments of `quorumkv bench`.
#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("quorumkv bench: not built yet");
    ExitCode::from(2)
}
