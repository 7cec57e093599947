//! `quorumkv sim` without the root binary (same arguments):
//! `cargo run --release -p quorumkv-sim --example sim -- --seeds 0..1000`.
use clap::Parser;

#[derive(Parser)]
#[command(name = "sim")]
struct Cli {
    #[command(flatten)]
    args: quorumkv_sim::cli::Args,
}

fn main() -> std::process::ExitCode {
    quorumkv_sim::cli::run(Cli::parse().args)
}
