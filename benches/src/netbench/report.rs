//! The markdown summary of result rows.

use serde_json::Value;
use std::fmt::Write;

/// Reads JSON rows (one object per line), skipping blank lines.
///
/// # Errors
/// A line that is not JSON.
pub fn read_rows(text: &str) -> anyhow::Result<Vec<Value>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}

pub(crate) fn f(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

pub(crate) fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn b(v: &Value, k: &str) -> bool {
    v.get(k).and_then(Value::as_bool).unwrap_or(false)
}

fn cell_key(v: &Value) -> String {
    let mut k = format!(
        "{} {} ms {} {:.1}%",
        s(v, "workload"),
        f(v, "rtt_ms"),
        s(v, "loss_model"),
        f(v, "loss") * 100.0
    );
    if s(v, "loss_model") == "gilbert" {
        let _ = write!(k, " b{}", f(v, "ge_burst"));
    }
    if v.get("jitter_ms").is_some() {
        let _ = write!(
            k,
            " J{} {}{}",
            f(v, "jitter_ms"),
            s(v, "jitter_dist"),
            if b(v, "jitter_reorder") {
                " reorder"
            } else {
                ""
            }
        );
    }
    if v.get("return_rate_bps").is_some() {
        let _ = write!(k, " return {} Mbit/s", f(v, "return_rate_bps") / 1e6);
    }
    if f(v, "rate_bps") > 0.0 && f(v, "rate_bps") != super::plan::RATE as f64 {
        let _ = write!(k, " {} Mbit/s", f(v, "rate_bps") / 1e6);
    }
    k
}

pub(crate) fn entry(v: &Value) -> String {
    let mut e = format!(
        "{:.2} ({:.2})",
        f(v, "goodput_bps") / 1e6,
        f(v, "efficiency")
    );
    if b(v, "timed_out") {
        e.push_str(" T");
    } else if !b(v, "bytes_ok") {
        e.push_str(" !");
    }
    e
}

/// A markdown table: one line per cell (workload, RTT, loss), one column per system,
/// entries "goodput Mbit/s (efficiency)"; `T` marks a timed-out transfer, `!` a
/// corrupted or failed one. Fairness rows follow as a second table.
pub fn markdown(rows: &[Value]) -> String {
    let mut systems: Vec<&str> = Vec::new();
    let mut cells: Vec<(String, Vec<(&str, String)>)> = Vec::new();
    for r in rows.iter().filter(|r| {
        let w = s(r, "workload");
        w != "fairness" && w != "validate"
    }) {
        let sys = s(r, "system");
        if !systems.contains(&sys) {
            systems.push(sys);
        }
        let key = cell_key(r);
        match cells.iter_mut().find(|(k, _)| *k == key) {
            Some((_, es)) => es.push((sys, entry(r))),
            None => cells.push((key, vec![(sys, entry(r))])),
        }
    }
    let mut out = String::new();
    let _ = writeln!(out, "| cell | {} |", systems.join(" | "));
    let _ = writeln!(out, "|---|{}", "---|".repeat(systems.len()));
    for (key, es) in &cells {
        let cols: Vec<String> = systems
            .iter()
            .map(|sys| {
                es.iter()
                    .find(|(s, _)| s == sys)
                    .map(|(_, e)| e.clone())
                    .unwrap_or_else(|| "–".into())
            })
            .collect();
        let _ = writeln!(out, "| {key} | {} |", cols.join(" | "));
    }
    steady_table(rows, &mut out);
    fairness_table(rows, &mut out);
    out
}

pub(crate) fn opt(v: &Value, k: &str, scale: f64, digits: usize) -> String {
    v.get(k)
        .and_then(Value::as_f64)
        .map_or_else(|| "–".into(), |x| format!("{:.digits$}", x / scale))
}

/// The sampled transfers (`--large-pipe`): whole-transfer and steady-state efficiency,
/// wire bytes per goodput byte, and the proxies' peak RSS.
fn steady_table(rows: &[Value], out: &mut String) {
    let sampled: Vec<&Value> = rows
        .iter()
        .filter(|r| r.get("steady_from_s").is_some() && s(r, "workload") != "fairness")
        .collect();
    if sampled.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n| transfer | system | MB | goodput Mbit/s | efficiency | steady Mbit/s (from) | steady efficiency | wire/goodput | RSS forward MB | RSS reverse MB |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in sampled {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1}{} | {:.2} | {:.3} | {} ({} s) | {} | {} | {} | {} |",
            cell_key(r),
            s(r, "system"),
            f(r, "bytes_received") / 1e6,
            if b(r, "timed_out") { " T" } else { "" },
            f(r, "goodput_bps") / 1e6,
            f(r, "efficiency"),
            opt(r, "steady_goodput_bps", 1e6, 2),
            f(r, "steady_from_s"),
            opt(r, "steady_efficiency", 1.0, 3),
            opt(r, "wire_per_goodput", 1.0, 3),
            opt(r, "peak_rss_forward_bytes", 1e6, 1),
            opt(r, "peak_rss_reverse_bytes", 1e6, 1),
        );
    }
}

/// The kernel flow of a fairness row: its `against` (Cubic in rows from before the
/// field existed).
pub fn against(r: &Value) -> &str {
    match s(r, "against") {
        "" => "cubic",
        k => k,
    }
}

/// The other flow of a fairness row: ctcp, or the kernel congestion control of a
/// reference row (`--fairness-reference`, its `reference` field).
pub fn first_flow(r: &Value) -> &str {
    match s(r, "reference") {
        "" => "ctcp",
        k => k,
    }
}

fn fairness_table(rows: &[Value], out: &mut String) {
    let fair: Vec<&Value> = rows
        .iter()
        .filter(|r| s(r, "workload") == "fairness")
        .collect();
    if fair.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n| fairness | flows | first Mbit/s | kernel Mbit/s | steady first | steady kernel | Jain (steady) | Jain (whole) |\n|---|---|---|---|---|---|---|---|"
    );
    for r in fair {
        let (a, k) = (first_flow(r), against(r));
        let _ = writeln!(
            out,
            "| {} ms, {:.0} Mbit/s, {} s | {a} vs {k} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} | {:.3} |",
            f(r, "rtt_ms"),
            f(r, "rate_bps") / 1e6,
            f(r, "secs"),
            f(r, &format!("goodput_{a}_bps")) / 1e6,
            f(r, &format!("goodput_{k}_bps")) / 1e6,
            f(r, &format!("steady_{a}_bps")) / 1e6,
            f(r, &format!("steady_{k}_bps")) / 1e6,
            f(r, "jain"),
            f(r, "jain_whole"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fairness_table_names_both_flows() {
        let ctcp = json!({"workload": "fairness", "rtt_ms": 100, "rate_bps": 5e6, "secs": 60,
            "against": "bbr", "goodput_ctcp_bps": 1e6, "goodput_bbr_bps": 3.7e6,
            "steady_ctcp_bps": 0.85e6, "steady_bbr_bps": 3.89e6, "jain": 0.709, "jain_whole": 0.749});
        let old = json!({"workload": "fairness", "rtt_ms": 100, "rate_bps": 5e6, "secs": 20,
            "goodput_ctcp_bps": 2.5e6, "goodput_cubic_bps": 2.4e6,
            "steady_ctcp_bps": 2.5e6, "steady_cubic_bps": 2.4e6, "jain": 0.99, "jain_whole": 0.99});
        let reference = json!({"workload": "fairness", "rtt_ms": 500, "rate_bps": 5e6, "secs": 120,
            "against": "bbr", "reference": "cubic", "goodput_cubic_bps": 2e6, "goodput_bbr_bps": 2.5e6,
            "steady_cubic_bps": 2.1e6, "steady_bbr_bps": 2.6e6, "jain": 0.989, "jain_whole": 0.98});
        let t = markdown(&[ctcp, old, reference]);
        assert!(t.contains("| 100 ms, 5 Mbit/s, 60 s | ctcp vs bbr | 1.00 | 3.70 | 0.85 | 3.89 | 0.709 | 0.749 |"), "{t}");
        assert!(
            t.contains("| 100 ms, 5 Mbit/s, 20 s | ctcp vs cubic | 2.50 | 2.40 |"),
            "{t}"
        );
        assert!(t.contains("| 500 ms, 5 Mbit/s, 120 s | cubic vs bbr | 2.00 | 2.50 | 2.10 | 2.60 | 0.989 | 0.980 |"), "{t}");
    }
}
