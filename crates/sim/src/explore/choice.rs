//! One step of a path: the event the explorer chose, in a text form that
//! names messages and timers by a hash of their contents (so a trace
//! replays even if the order in which a core emits them changes).

use std::fmt;
use std::str::FromStr;

/// An endpoint: a replica (`n1`..) or a client (`c0`..).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ep {
    Node(usize),
    Client(usize),
}

impl fmt::Display for Ep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ep::Node(i) => write!(f, "n{}", i + 1),
            Ep::Client(c) => write!(f, "c{c}"),
        }
    }
}

impl FromStr for Ep {
    type Err = String;
    fn from_str(s: &str) -> Result<Ep, String> {
        let bad = || format!("bad endpoint '{s}' (n1.., c0..)");
        let (kind, num) = s.split_at_checked(1).ok_or_else(bad)?;
        let k: usize = num.parse().map_err(|_| bad())?;
        match kind {
            "n" if k >= 1 => Ok(Ep::Node(k - 1)),
            "c" => Ok(Ep::Client(k)),
            _ => Err(bad()),
        }
    }
}

/// An event the explorer may choose. `cut: Some(k)` crashes the receiving
/// node after `k` of the handler call's commands ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Choice {
    /// The client invokes its next operation.
    Issue {
        client: usize,
    },
    Deliver {
        from: Ep,
        to: Ep,
        id: u64,
        cut: Option<u32>,
    },
    /// Unreliable links: the message is lost.
    Drop {
        from: Ep,
        to: Ep,
        id: u64,
    },
    /// Unreliable links: a second copy of the message is in flight.
    Dup {
        from: Ep,
        to: Ep,
        id: u64,
    },
    /// FIFO-reliable links: the connection of two nodes resets.
    Reset {
        a: usize,
        b: usize,
    },
    Timer {
        at: Ep,
        id: u64,
        cut: Option<u32>,
    },
    /// The node's next link event (Down / Up) is reported to it.
    Link {
        node: usize,
        cut: Option<u32>,
    },
    Crash {
        node: usize,
    },
    Restart {
        node: usize,
    },
}

impl Choice {
    /// The same event, crashing its node after `k` commands.
    pub fn with_cut(self, k: u32) -> Option<Choice> {
        Some(match self {
            Choice::Deliver {
                from,
                to: to @ Ep::Node(_),
                id,
                ..
            } => Choice::Deliver {
                from,
                to,
                id,
                cut: Some(k),
            },
            Choice::Timer {
                at: at @ Ep::Node(_),
                id,
                ..
            } => Choice::Timer {
                at,
                id,
                cut: Some(k),
            },
            Choice::Link { node, .. } => Choice::Link { node, cut: Some(k) },
            _ => return None,
        })
    }
}

fn cut_text(cut: &Option<u32>) -> String {
    cut.map(|k| format!(" crash-after={k}")).unwrap_or_default()
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Choice::Issue { client } => write!(f, "issue c{client}"),
            Choice::Deliver { from, to, id, cut } => {
                write!(f, "deliver {from}>{to} @{id:016x}{}", cut_text(cut))
            }
            Choice::Drop { from, to, id } => write!(f, "drop {from}>{to} @{id:016x}"),
            Choice::Dup { from, to, id } => write!(f, "dup {from}>{to} @{id:016x}"),
            Choice::Reset { a, b } => write!(f, "reset n{} n{}", a + 1, b + 1),
            Choice::Timer { at, id, cut } => write!(f, "timer {at} @{id:016x}{}", cut_text(cut)),
            Choice::Link { node, cut } => write!(f, "link n{}{}", node + 1, cut_text(cut)),
            Choice::Crash { node } => write!(f, "crash n{}", node + 1),
            Choice::Restart { node } => write!(f, "restart n{}", node + 1),
        }
    }
}

fn node_of(s: &str) -> Result<usize, String> {
    match s.parse::<Ep>()? {
        Ep::Node(i) => Ok(i),
        Ep::Client(_) => Err(format!("'{s}' is not a node")),
    }
}

fn id_of(s: &str) -> Result<u64, String> {
    let hex = s.strip_prefix('@').ok_or_else(|| format!("bad id '{s}'"))?;
    u64::from_str_radix(hex, 16).map_err(|_| format!("bad id '{s}'"))
}

fn link_of(s: &str) -> Result<(Ep, Ep), String> {
    let (a, b) = s.split_once('>').ok_or_else(|| format!("bad link '{s}'"))?;
    Ok((a.parse()?, b.parse()?))
}

impl FromStr for Choice {
    type Err = String;
    /// One trace line; anything after a `|` is commentary.
    fn from_str(line: &str) -> Result<Choice, String> {
        let line = line.split('|').next().unwrap_or_default();
        let mut w: Vec<&str> = line.split_whitespace().collect();
        let mut cut = None;
        if let Some(last) = w.last().and_then(|l| l.strip_prefix("crash-after=")) {
            cut = Some(last.parse().map_err(|_| format!("bad cut in '{line}'"))?);
            w.pop();
        }
        let arg = |k: usize| {
            w.get(k)
                .copied()
                .ok_or_else(|| format!("short line '{line}'"))
        };
        let c = match arg(0)? {
            "issue" => match arg(1)?.parse()? {
                Ep::Client(client) => Choice::Issue { client },
                Ep::Node(_) => return Err(format!("'{line}': only clients issue")),
            },
            verb @ ("deliver" | "drop" | "dup") => {
                let ((from, to), id) = (link_of(arg(1)?)?, id_of(arg(2)?)?);
                match verb {
                    "deliver" => Choice::Deliver { from, to, id, cut },
                    "drop" => Choice::Drop { from, to, id },
                    _ => Choice::Dup { from, to, id },
                }
            }
            "reset" => Choice::Reset {
                a: node_of(arg(1)?)?,
                b: node_of(arg(2)?)?,
            },
            "timer" => Choice::Timer {
                at: arg(1)?.parse()?,
                id: id_of(arg(2)?)?,
                cut,
            },
            "link" => Choice::Link {
                node: node_of(arg(1)?)?,
                cut,
            },
            "crash" => Choice::Crash {
                node: node_of(arg(1)?)?,
            },
            "restart" => Choice::Restart {
                node: node_of(arg(1)?)?,
            },
            other => return Err(format!("unknown event '{other}' in '{line}'")),
        };
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_choice_round_trips_through_its_text() {
        let all = [
            Choice::Issue { client: 1 },
            Choice::Deliver {
                from: Ep::Client(0),
                to: Ep::Node(2),
                id: 0xdead_beef,
                cut: Some(1),
            },
            Choice::Drop {
                from: Ep::Node(0),
                to: Ep::Client(1),
                id: 7,
            },
            Choice::Dup {
                from: Ep::Node(0),
                to: Ep::Node(1),
                id: u64::MAX,
            },
            Choice::Reset { a: 0, b: 2 },
            Choice::Timer {
                at: Ep::Node(1),
                id: 3,
                cut: None,
            },
            Choice::Link {
                node: 2,
                cut: Some(2),
            },
            Choice::Crash { node: 0 },
            Choice::Restart { node: 0 },
        ];
        for c in all {
            let text = format!("{c}  | some description");
            assert_eq!(text.parse::<Choice>(), Ok(c), "{text}");
        }
        assert!("fly n1".parse::<Choice>().is_err());
        assert!("crash c0".parse::<Choice>().is_err());
        assert!("deliver n1n2 @00".parse::<Choice>().is_err());
    }
}
