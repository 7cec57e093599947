pub mod cluster;
pub mod kv;
pub mod server;

/// Print one clear line and return the failure exit code.
pub fn fail(msg: impl std::fmt::Display) -> std::process::ExitCode {
    eprintln!("quorumkv: {msg}");
    std::process::ExitCode::FAILURE
}

pub fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("QUORUMKV_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
