//! A protocol's typed options, settable by name.
//!
//! Every protocol declares its knobs once, as [`OptSpec`]s and a struct
//! implementing [`ProtocolOptions`]. The same `key = value` pairs then come
//! from the cluster file's `[options]` table, from `--opt key=value` on
//! `server`, `cluster`, `bench` and `sim`, and from a server's hello (so a
//! client-side coordinator runs with the servers' settings). `--help`
//! lists each protocol's specs.

use std::fmt::Debug;
use std::time::Duration;

/// One option as the user sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptSpec {
    /// Kebab-case name: `fast-read`.
    pub name: &'static str,
    /// The default, as the user would write it.
    pub default: &'static str,
    /// One line for `--help`.
    pub help: &'static str,
}

/// A protocol's options: `Default` is what an unconfigured cluster runs.
pub trait ProtocolOptions: Clone + Debug + Default + PartialEq + Send + Sync + 'static {
    /// Every option, in the order `--help` shows them.
    fn specs() -> &'static [OptSpec];
    /// Set one option from text; `key` is one of `specs()`' names.
    fn set(&mut self, key: &str, value: &str) -> Result<(), String>;
    /// The current value of option `key`, as text `set` accepts.
    fn get(&self, key: &str) -> String;
    /// Whether these options suit a cluster of `n` replicas (a variant
    /// defined for one size only); drivers refuse to start otherwise.
    fn check_size(&self, _n: usize) -> Result<(), String> {
        Ok(())
    }

    /// Defaults overridden by `pairs`, in order; an unknown key or a bad
    /// value is an error naming the protocol's options.
    fn from_pairs(pairs: &[(String, String)]) -> Result<Self, String> {
        let mut opts = Self::default();
        opts.apply(pairs)?;
        Ok(opts)
    }
    /// Override options by `pairs`, in order.
    fn apply(&mut self, pairs: &[(String, String)]) -> Result<(), String> {
        for (k, v) in pairs {
            if !Self::specs().iter().any(|s| s.name == k) {
                let known: Vec<_> = Self::specs().iter().map(|s| s.name).collect();
                return Err(if known.is_empty() {
                    format!("unknown option '{k}': this protocol has no options")
                } else {
                    format!("unknown option '{k}' (known: {})", known.join(", "))
                });
            }
            self.set(k, v).map_err(|e| format!("option {k}: {e}"))?;
        }
        Ok(())
    }
    /// Every option with its current value, for a hello or a report.
    fn pairs(&self) -> Vec<(String, String)> {
        Self::specs()
            .iter()
            .map(|s| (s.name.to_string(), self.get(s.name)))
            .collect()
    }
}

/// Options of a protocol that has none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NoOptions;

impl ProtocolOptions for NoOptions {
    fn specs() -> &'static [OptSpec] {
        &[]
    }
    fn set(&mut self, key: &str, _: &str) -> Result<(), String> {
        Err(format!("unknown option '{key}'"))
    }
    fn get(&self, _: &str) -> String {
        String::new()
    }
}

/// Split `key=value` (the `--opt` syntax).
pub fn parse_pair(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not KEY=VALUE"))?;
    let k = k.trim();
    if k.is_empty() {
        return Err(format!("'{s}' has no key"));
    }
    Ok((k.to_string(), v.trim().to_string()))
}

/// `true`/`false` (also `on`/`off`, `yes`/`no`, `1`/`0`).
pub fn parse_bool(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Ok(true),
        "false" | "off" | "no" | "0" => Ok(false),
        _ => Err(format!("'{v}' is not a boolean (true or false)")),
    }
}

/// Parse a human duration: `250ms`, `2s`, `1.5s`, `3m`, or plain seconds
/// (`2`). The one parser of CLI flags, cluster files and options.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic() || c == 'µ') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration '{s}' (try 500ms, 2s, 1m)"))?;
    let secs = match unit {
        "us" | "µs" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration unit in '{s}' (use us, ms, s, m or h)"
            ))
        }
    };
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(format!("invalid duration '{s}'"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A duration range `LO..HI`, or `D` for exactly D (`sim --link-delay`,
/// `bench --think`); an upper bound below the lower one is an error.
pub fn parse_duration_range(s: &str) -> Result<(Duration, Duration), String> {
    let (lo, hi) = s.split_once("..").unwrap_or((s, s));
    let (lo, hi) = (parse_duration(lo)?, parse_duration(hi)?);
    if hi < lo {
        return Err(format!("{s}: the upper bound is below the lower one"));
    }
    Ok((lo, hi))
}

/// Render a duration so that [`parse_duration`] reads it back exactly.
pub fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}us", d.as_micros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_trip_and_reject_nonsense() {
        for d in ["250ms", "2s", "500us", "0s"] {
            assert_eq!(format_duration(parse_duration(d).unwrap()), d);
        }
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("3y").unwrap_err().contains("unit"));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn pairs_and_bools() {
        assert_eq!(parse_pair("a = b").unwrap(), ("a".into(), "b".into()));
        assert!(parse_pair("ab").is_err());
        assert!(parse_pair("=b").is_err());
        assert!(parse_bool("on").unwrap());
        assert!(!parse_bool("FALSE").unwrap());
        assert!(parse_bool("maybe").is_err());
    }

    #[test]
    fn a_protocol_without_options_refuses_any() {
        let err = NoOptions::from_pairs(&[("x".into(), "1".into())]).unwrap_err();
        assert!(err.contains("no options"), "{err}");
        assert!(NoOptions.pairs().is_empty());
    }
}
