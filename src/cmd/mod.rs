pub mod auth_args;
pub mod cert;
pub mod chaos;
pub mod cluster;
pub mod delay_proxy;
pub mod endpoints;
pub mod health;
pub mod json_log;
pub mod kv;
pub mod member;
pub mod protocols;
pub mod secret;
pub mod server;
pub mod snapshot;
pub mod target;
pub mod tls_args;
pub mod user;
pub mod verify;
pub mod zk;

/// Print one clear line and return the failure exit code.
pub fn fail(msg: impl std::fmt::Display) -> std::process::ExitCode {
    eprintln!("quorumkv: {msg}");
    std::process::ExitCode::FAILURE
}

/// Log to stderr, filtered by `$QUORUMKV_LOG` (else `default`), in the
/// format of `$QUORUMKV_LOG_FORMAT` (`text`, the default, or `json`).
pub fn init_logging(default: &str, who: Option<String>) {
    init_logging_as(json_log::LogFormat::from_env(), default, who)
}

/// Log to stderr as [`init_logging`], in `format`. Text has colours only
/// when stderr is a terminal, so piped and redirected logs stay plain
/// text. With `who`, every line starts with it (`replica 2`; in JSON, the
/// `who` field), so the interleaved logs of `quorumkv cluster`'s replicas
/// say whose they are.
pub fn init_logging_as(format: json_log::LogFormat, default: &str, who: Option<String>) {
    use std::io::IsTerminal;
    // The storage engine's own logs only when asked for by name
    // (QUORUMKV_LOG=fjall=info): our log says what matters to an operator.
    let mut spec = std::env::var("QUORUMKV_LOG").unwrap_or_else(|_| default.to_string());
    if !spec.contains("fjall") && !spec.contains("lsm_tree") {
        spec.push_str(",fjall=off,lsm_tree=off");
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&spec)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    if format == json_log::LogFormat::Json {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .event_format(json_log::JsonLines { who })
            .try_init();
        return;
    }
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let format = tracing_subscriber::fmt::format()
        .with_target(false)
        .with_ansi(ansi);
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .event_format(Prefixed {
            who: who.map(|w| w + " "),
            inner: format,
        })
        .try_init();
}

/// An event format that writes a fixed prefix before each line.
struct Prefixed<F> {
    who: Option<String>,
    inner: F,
}

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for Prefixed<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        if let Some(who) = &self.who {
            writer.write_str(who)?;
        }
        self.inner.format_event(ctx, writer, event)
    }
}

/// `--help` text listing every registered protocol and its options.
pub fn protocols_help() -> String {
    let mut s = String::from("Protocols and their options (--opt KEY=VALUE):\n");
    for info in quorumkv_core::protocol::registry::infos() {
        s += &format!("  {} — {}\n", info.name, info.about);
        for o in info.options {
            s += &format!("    {:<18} {} [default: {}]\n", o.name, o.help, o.default);
        }
    }
    s
}
