//! The fault timeline: what was done to which replica, and when, in
//! seconds since the run began (the history's clock too), printed beside
//! the verdict.

use std::fmt::Write;
use std::time::{Duration, Instant};

/// Prints a line as it happens (above the progress bar, say).
pub type Echo = Box<dyn Fn(&str) + Send>;

pub struct Timeline {
    start: Instant,
    events: Vec<(Duration, String)>,
    echo: Option<Echo>,
}

impl Timeline {
    /// A timeline whose clock starts at `start` (the recorder's base).
    pub fn new(start: Instant, echo: Option<Echo>) -> Timeline {
        Timeline {
            start,
            events: Vec::new(),
            echo,
        }
    }

    /// Note an event now.
    pub fn note(&mut self, what: impl Into<String>) {
        let at = self.start.elapsed();
        let what = what.into();
        if let Some(echo) = &self.echo {
            echo(&line(at, &what));
        }
        self.events.push((at, what));
    }

    /// The whole timeline, one event a line; `mark` (a time and a text) is
    /// put in its place among them, e.g. the failing operation of a violation.
    pub fn render(&self, mark: Option<(Duration, &str)>) -> String {
        let mut s = String::new();
        let mut mark = mark;
        for (at, what) in &self.events {
            if let Some((m, text)) = mark.filter(|(m, _)| m < at) {
                let _ = writeln!(s, "{}", line(m, text));
                mark = None;
            }
            let _ = writeln!(s, "{}", line(*at, what));
        }
        if let Some((m, text)) = mark {
            let _ = writeln!(s, "{}", line(m, text));
        }
        s
    }
}

fn line(at: Duration, what: &str) -> String {
    format!("  {:>9.3}s  {what}", at.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_keep_their_order_and_the_mark_falls_in_place() {
        let start = Instant::now() - Duration::from_secs(1);
        let mut t = Timeline::new(start, None);
        t.note("kill 2");
        t.note("restart 2");
        let text = t.render(None);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].ends_with("s  kill 2") && lines[1].ends_with("restart 2"));
        let first = t.events[0].0;
        let marked = t.render(Some((first - Duration::from_millis(1), "<- here")));
        assert!(
            marked.lines().next().unwrap().ends_with("<- here"),
            "{marked}"
        );
        let last = t.render(Some((Duration::from_secs(99), "end")));
        assert!(last.lines().last().unwrap().ends_with("end"), "{last}");
    }
}
