//! A small EDN reader for history lines: enough of the language to read
//! any value a Jepsen or Knossos history may carry (so that fields we do not
//! use are skipped, never refused), and to hand the fields we use to the
//! format parsers.
use std::collections::HashMap;

/// An EDN value. Lists, vectors and sets are all [`Edn::Seq`]; floats,
/// symbols, characters and big numbers are kept as their text.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Edn {
    Nil,
    Bool(bool),
    Int(i64),
    Str(String),
    Kw(String),
    Seq(Vec<Edn>),
    Map(Vec<(Edn, Edn)>),
    Other(String),
}

impl Edn {
    /// A scalar as the text our operations carry (`None` for nil).
    pub(crate) fn scalar(&self) -> Result<Option<String>, String> {
        match self {
            Edn::Nil => Ok(None),
            Edn::Bool(b) => Ok(Some(b.to_string())),
            Edn::Int(i) => Ok(Some(i.to_string())),
            Edn::Str(s) | Edn::Other(s) => Ok(Some(s.clone())),
            other => Err(format!("expected a number or a string, found {other}")),
        }
    }
}

impl std::fmt::Display for Edn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let join = |f: &mut std::fmt::Formatter<'_>, items: &[Edn]| {
            for (i, v) in items.iter().enumerate() {
                write!(f, "{}{v}", if i > 0 { " " } else { "" })?;
            }
            Ok(())
        };
        match self {
            Edn::Nil => f.write_str("nil"),
            Edn::Bool(b) => write!(f, "{b}"),
            Edn::Int(i) => write!(f, "{i}"),
            Edn::Str(s) => write!(f, "{s:?}"),
            Edn::Kw(k) => write!(f, ":{k}"),
            Edn::Other(s) => f.write_str(s),
            Edn::Seq(items) => {
                f.write_str("[")?;
                join(f, items)?;
                f.write_str("]")
            }
            Edn::Map(_) => f.write_str("{…}"),
        }
    }
}

/// Nesting deeper than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 64;

struct Reader<'a> {
    s: &'a str,
    i: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<char> {
        self.s[self.i..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.i += c.len_utf8();
        Some(c)
    }

    /// Skips whitespace, commas, `;` comments and `#_` discarded forms.
    fn skip(&mut self, depth: usize) -> Result<(), String> {
        loop {
            match self.peek() {
                Some(c) if c.is_whitespace() || c == ',' => {
                    self.bump();
                }
                Some(';') => {
                    let rest = &self.s[self.i..];
                    self.i += rest.find('\n').unwrap_or(rest.len());
                }
                Some('#') if self.s[self.i..].starts_with("#_") => {
                    self.i += 2;
                    self.value(depth)?;
                }
                _ => return Ok(()),
            }
        }
    }

    /// A run of symbol characters (a number, a symbol, a keyword's name).
    fn token(&mut self) -> &str {
        let start = self.i;
        while let Some(c) = self.peek() {
            if c.is_whitespace() || ",;\"()[]{}".contains(c) {
                break;
            }
            self.bump();
        }
        &self.s[start..self.i]
    }

    fn string(&mut self) -> Result<String, String> {
        let mut v = String::new();
        loop {
            match self.bump().ok_or("unterminated string")? {
                '"' => return Ok(v),
                '\\' => match self.bump().ok_or("unterminated string")? {
                    'n' => v.push('\n'),
                    't' => v.push('\t'),
                    'r' => v.push('\r'),
                    c => v.push(c),
                },
                c => v.push(c),
            }
        }
    }

    /// Values up to the closing `close`.
    fn items(&mut self, close: char, depth: usize) -> Result<Vec<Edn>, String> {
        let mut out = Vec::new();
        loop {
            self.skip(depth)?;
            match self.peek() {
                None => return Err(format!("missing {close:?}")),
                Some(c) if c == close => {
                    self.bump();
                    return Ok(out);
                }
                Some(_) => out.push(self.value(depth)?),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Edn, String> {
        if depth > MAX_DEPTH {
            return Err("nested too deeply".into());
        }
        let d = depth + 1;
        self.skip(d)?;
        let c = self.bump().ok_or("missing a value")?;
        Ok(match c {
            '"' => Edn::Str(self.string()?),
            ':' => Edn::Kw(self.token().to_string()),
            '[' => Edn::Seq(self.items(']', d)?),
            '(' => Edn::Seq(self.items(')', d)?),
            '{' => {
                let flat = self.items('}', d)?;
                if flat.len() % 2 != 0 {
                    return Err("a map with an odd number of forms".into());
                }
                let mut it = flat.into_iter();
                Edn::Map(std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect())
            }
            '#' if self.peek() == Some('{') => {
                self.bump();
                Edn::Seq(self.items('}', d)?)
            }
            // A tagged literal (`#inst "…"`): the tag is dropped.
            '#' => {
                self.token();
                self.value(d)?
            }
            ')' | ']' | '}' => return Err(format!("unexpected {c:?}")),
            '\\' => Edn::Other(format!("\\{}", self.token())),
            _ => {
                self.i -= c.len_utf8();
                let t = self.token();
                match t {
                    "nil" => Edn::Nil,
                    "true" => Edn::Bool(true),
                    "false" => Edn::Bool(false),
                    _ => t
                        .parse()
                        .map_or_else(|_| Edn::Other(t.to_string()), Edn::Int),
                }
            }
        })
    }
}

/// Parses one line holding a map `{:k v, …}`; keyword keys only (others
/// are skipped), by name without the colon.
pub(crate) fn map(line: &str) -> Result<HashMap<String, Edn>, String> {
    let s = line.trim();
    if !s.starts_with('{') {
        return Err("expected {…}".into());
    }
    let mut r = Reader { s, i: 0 };
    let Edn::Map(pairs) = r.value(0)? else {
        return Err("expected {…}".into());
    };
    r.skip(0)?;
    if r.i < s.len() {
        return Err("text after the map".into());
    }
    Ok(pairs
        .into_iter()
        .filter_map(|(k, v)| match k {
            Edn::Kw(k) => Some((k, v)),
            _ => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_histories_carry() {
        let m = map(
            r#"{:type :ok, :f :read, :value [3 [1 2]], :process 4, :time 12, :error #{:a "b"},
                :x {:y (1 2.5 sym)}, :d #_ 7 8, :c \a, :at #inst "2020", :s "q\"\n"} ; note"#,
        )
        .unwrap();
        assert_eq!(m["type"], Edn::Kw("ok".into()));
        assert_eq!(
            m["value"],
            Edn::Seq(vec![Edn::Int(3), Edn::Seq(vec![Edn::Int(1), Edn::Int(2)])])
        );
        assert_eq!(m["time"], Edn::Int(12));
        assert_eq!(m["c"], Edn::Other("\\a".into()));
        assert_eq!(m["at"], Edn::Str("2020".into()));
        assert_eq!(m["s"], Edn::Str("q\"\n".into()));
        assert_eq!(m["d"], Edn::Int(8), "#_ discards one form");
        assert_eq!(m.len(), 11);
    }

    #[test]
    fn refuses_broken_lines() {
        for bad in ["{:a", "{:a 1} x", "{:a [1}", "{:a}", "[1 2]", "{:a \"b}"] {
            assert!(map(bad).is_err(), "{bad}");
        }
        let deep = format!("{{:a {}{}}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(map(&deep).unwrap_err(), "nested too deeply");
    }
}
