//! Per-direction statistics as JSON lines, for benchmark runners.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::counters::Counters;

/// One line of statistics: one direction's cumulative counters at time `t`.
///
/// Serialised as a single JSON object, for example
/// `{"t":1.0,"direction":"a_to_b","from":"ctcp-a","to":"ctcp-b","packets_in":10,...,"final":false}`.
#[derive(Clone, Debug, Serialize)]
pub struct StatsLine<'a> {
    /// Seconds since the emulator became ready.
    pub t: f64,
    /// Which link of a chain, 0 for the first (the only one of a two-namespace link).
    pub hop: usize,
    /// `"a_to_b"` or `"b_to_a"`: away from or toward the chain's first namespace.
    pub direction: &'a str,
    /// The namespace the packets come from.
    pub from: &'a str,
    /// The namespace the packets go to.
    pub to: &'a str,
    /// The cumulative counters.
    #[serde(flatten)]
    pub counters: Counters,
    /// Packets scheduled and not yet delivered.
    pub in_flight: usize,
    /// Bytes in the bottleneck queue.
    pub backlog_bytes: u64,
    /// Mean time by which packets left after their release time, in µs,
    /// since the previous line: how closely the emulator keeps its schedule
    /// (timer and scheduling latency). 0 if nothing was released.
    pub late_mean_us: f64,
    /// Largest such lateness since the previous line, in µs.
    pub late_max_us: f64,
    /// Whether the link is cut ([`crate::control`]) at time `t`.
    pub down: bool,
    /// True on the lines written once at exit.
    #[serde(rename = "final")]
    pub last: bool,
}

/// How late packets left relative to their scheduled release times, over
/// one statistics window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Lateness {
    count: u64,
    sum: Duration,
    max: Duration,
}

impl Lateness {
    /// Adds one packet that left `late` after its release time.
    pub fn record(&mut self, late: Duration) {
        self.count += 1;
        self.sum += late;
        self.max = self.max.max(late);
    }

    /// The mean lateness in µs (0 with no packets).
    #[must_use]
    pub fn mean_us(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum.as_secs_f64() * 1e6 / self.count as f64
        }
    }

    /// The largest lateness in µs.
    #[must_use]
    pub fn max_us(&self) -> f64 {
        self.max.as_secs_f64() * 1e6
    }
}

/// Where statistics lines go.
#[derive(Debug)]
pub enum StatsSink {
    /// Standard output.
    Stdout,
    /// A file, created (truncated) when the sink is opened.
    File(BufWriter<File>),
}

impl StatsSink {
    /// A sink writing to `path` (created or truncated), or to stdout for
    /// `None`.
    ///
    /// # Errors
    /// If the file cannot be created.
    pub fn open(path: Option<&Path>) -> io::Result<Self> {
        Ok(match path {
            None => Self::Stdout,
            Some(p) => Self::File(BufWriter::new(File::create(p)?)),
        })
    }

    /// Writes `line` as one JSON object and a newline, and flushes so a
    /// reader tailing the output sees whole lines at once.
    ///
    /// # Errors
    /// If writing fails (for example a closed stdout pipe).
    pub fn write(&mut self, line: &StatsLine<'_>) -> io::Result<()> {
        let mut text = serde_json::to_vec(line).map_err(io::Error::other)?;
        text.push(b'\n');
        match self {
            Self::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(&text)?;
                out.flush()
            }
            Self::File(f) => {
                f.write_all(&text)?;
                f.flush()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_flat_json_object() {
        let line = StatsLine {
            t: 1.5,
            hop: 0,
            direction: "a_to_b",
            from: "ctcp-a",
            to: "ctcp-b",
            counters: Counters {
                packets_in: 3,
                delivered: 2,
                lost: 1,
                ..Counters::default()
            },
            in_flight: 0,
            backlog_bytes: 0,
            late_mean_us: 0.0,
            late_max_us: 0.0,
            down: false,
            last: true,
        };
        let text = serde_json::to_string(&line).unwrap();
        assert!(!text.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for key in [
            "direction",
            "packets_in",
            "bytes_in",
            "delivered",
            "bytes_delivered",
            "lost",
            "queue_drops",
            "duplicated",
            "reordered",
            "t",
            "hop",
            "down_drops",
            "down",
            "final",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {text}");
        }
        assert_eq!(v["packets_in"], 3);
        assert_eq!(v["final"], true);
    }

    #[test]
    fn lateness_mean_and_max() {
        let mut l = Lateness::default();
        assert_eq!(l.mean_us(), 0.0);
        l.record(Duration::from_micros(10));
        l.record(Duration::from_micros(30));
        assert!((l.mean_us() - 20.0).abs() < 1e-9);
        assert!((l.max_us() - 30.0).abs() < 1e-9);
    }
}
