//! `--log-format json`: one JSON object per log line, for log shippers
//! (Loki, Elasticsearch, `jq`). Fields: `ts` (RFC 3339, UTC), `level`,
//! `who` (`replica 2`, `cluster`, ... when set), `target`, `message`, and
//! every field of the event under its own name.

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (the default).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// From `$QUORUMKV_LOG_FORMAT` (`text` or `json`), else text.
    pub fn from_env() -> LogFormat {
        match std::env::var("QUORUMKV_LOG_FORMAT").as_deref() {
            Ok("json") => LogFormat::Json,
            _ => LogFormat::Text,
        }
    }
}

/// The JSON event format.
pub struct JsonLines {
    pub who: Option<String>,
}

/// Collects an event's fields into a JSON object.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, f: &Field, v: &str) {
        self.0.insert(f.name().into(), v.into());
    }
    fn record_u64(&mut self, f: &Field, v: u64) {
        self.0.insert(f.name().into(), v.into());
    }
    fn record_i64(&mut self, f: &Field, v: i64) {
        self.0.insert(f.name().into(), v.into());
    }
    fn record_bool(&mut self, f: &Field, v: bool) {
        self.0.insert(f.name().into(), v.into());
    }
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.0.insert(f.name().into(), format!("{v:?}").into());
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let mut ts = String::new();
        SystemTime.format_time(&mut Writer::new(&mut ts))?;
        let meta = event.metadata();
        let mut o = Map::new();
        o.insert("ts".into(), ts.into());
        o.insert("level".into(), meta.level().as_str().into());
        if let Some(who) = &self.who {
            o.insert("who".into(), who.as_str().into());
        }
        o.insert("target".into(), meta.target().into());
        event.record(&mut Fields(&mut o));
        writeln!(writer, "{}", Value::Object(o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn each_event_is_one_json_object_with_its_fields() {
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .event_format(JsonLines {
                who: Some("replica 2".into()),
            })
            .finish();
        tracing::subscriber::with_default(sub, || {
            tracing::warn!(peer = 3, up = false, "link \"down\"");
            tracing::info!(addr = ?"127.0.0.1:1", "listening");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect(l))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["level"], "WARN");
        assert_eq!(lines[0]["who"], "replica 2");
        assert_eq!(lines[0]["message"], "link \"down\"");
        assert_eq!(lines[0]["peer"], 3);
        assert_eq!(lines[0]["up"], false);
        assert_eq!(lines[1]["addr"], "\"127.0.0.1:1\"");
        assert!(lines[1]["ts"].as_str().unwrap().contains('T'));
    }
}
