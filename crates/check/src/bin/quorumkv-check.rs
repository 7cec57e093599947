//! `quorumkv-check FILE [options]`: the `quorumkv check` command on its own
//! (same options and exit codes), for scripts and the checker's own tests.
fn main() -> std::process::ExitCode {
    quorumkv_check::cli::run_from(std::env::args_os())
}
