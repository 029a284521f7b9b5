//! PNG plots of the results with `plotters` (bitmap backend, a TrueType font from the
//! machine registered for ab_glyph).

use anyhow::{anyhow, bail, Context, Result};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use serde_json::Value;
use std::path::{Path, PathBuf};

const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers the first TrueType font found as "sans-serif".
///
/// # Errors
/// If none of the known font files exists or parses.
pub fn load_font() -> Result<()> {
    for p in FONTS {
        if let Ok(bytes) = std::fs::read(p) {
            // The font must live for the rest of the program: plotters keeps a reference.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return Ok(());
            }
        }
    }
    bail!("no usable TrueType font found (looked for {FONTS:?})")
}

const COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn num(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// Writes all plots the rows support into `dir`; returns the files written.
///
/// # Errors
/// Font or drawing failures.
pub fn write_all(rows: &[Value], dir: &Path) -> Result<Vec<PathBuf>> {
    load_font()?;
    let mut written = Vec::new();
    let curl = |r: &&Value| {
        text(r, "workload") == "curl" && matches!(text(r, "loss_model"), "bernoulli" | "none")
    };
    let mut rtts: Vec<u64> = rows
        .iter()
        .filter(curl)
        .map(|r| num(r, "rtt_ms") as u64)
        .collect();
    rtts.sort_unstable();
    rtts.dedup();
    for rtt in rtts {
        let sel: Vec<&Value> = rows
            .iter()
            .filter(curl)
            .filter(|r| num(r, "rtt_ms") as u64 == rtt)
            .collect();
        let p = dir.join(format!("netbench-goodput-rtt{rtt}.png"));
        goodput_plot(&sel, rtt, "", &p)?;
        written.push(p);
    }
    written.extend(jitter_plots(rows, dir)?);
    written.extend(asymmetric_plots(rows, dir)?);
    if rows.iter().any(|r| text(r, "workload") == "large-pipe") {
        let p = dir.join("netbench-large-pipe.png");
        large_pipe_plot(rows, &p)?;
        written.push(p);
    }
    for f in rows.iter().filter(|r| text(r, "workload") == "fairness") {
        // The modes' own run is at 100 ms, ctcp against Cubic; one moved elsewhere
        // (`--fairness-rtt`, `--fairness-against`, `--fairness-reference`) gets its RTT
        // or flows in the name so it does not overwrite that plot.
        let vs = match (super::report::first_flow(f), super::report::against(f)) {
            ("ctcp", "cubic") => String::new(),
            ("ctcp", k) => format!("-{k}"),
            (a, k) => format!("-{a}-{k}"),
        };
        let p = match num(f, "rtt_ms") as u64 {
            100 => dir.join(format!("netbench-fairness{vs}.png")),
            rtt => dir.join(format!("netbench-fairness{vs}-{rtt}ms.png")),
        };
        fairness_plot(f, &p)?;
        written.push(p);
    }
    Ok(written)
}

/// Total goodput against the per-segment loss r₀ of `netbench --tandem`, one plot per
/// number of flows: `netbench-tandem-flows3.png`.
///
/// # Errors
/// If the font or a PNG cannot be written.
pub fn tandem_plots(rows: &[Value], dir: &Path) -> Result<Vec<PathBuf>> {
    load_font()?;
    let sel: Vec<&Value> = rows
        .iter()
        .filter(|r| text(r, "workload") == "tandem")
        .collect();
    let mut flows: Vec<u64> = sel.iter().map(|r| num(r, "flows") as u64).collect();
    flows.sort_unstable();
    flows.dedup();
    let mut written = Vec::new();
    for n in flows {
        let cell: Vec<&Value> = sel
            .iter()
            .copied()
            .filter(|r| num(r, "flows") as u64 == n && num(r, "repeat") == 0.0)
            .collect();
        let p = dir.join(format!("netbench-tandem-flows{n}.png"));
        let what = format!(", tandem 2 × r₀, {n} flow{}", if n == 1 { "" } else { "s" });
        let rtt = cell.first().map_or(0, |r| num(r, "rtt_ms") as u64);
        goodput_plot(&cell, rtt, &what, &p)?;
        written.push(p);
    }
    Ok(written)
}

/// Goodput against random loss per jitter variant (distribution, reordering) and RTT:
/// `netbench-jitter-uniform-rtt100.png`, `netbench-jitter-normal-reorder-rtt500.png`.
fn jitter_plots(rows: &[Value], dir: &Path) -> Result<Vec<PathBuf>> {
    let sel: Vec<&Value> = rows
        .iter()
        .filter(|r| {
            text(r, "workload") == "jitter" && matches!(text(r, "loss_model"), "bernoulli" | "none")
        })
        .collect();
    let mut keys: Vec<(String, bool, u64)> = sel
        .iter()
        .map(|r| {
            let reorder = r.get("jitter_reorder").and_then(Value::as_bool) == Some(true);
            (
                text(r, "jitter_dist").to_owned(),
                reorder,
                num(r, "rtt_ms") as u64,
            )
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut written = Vec::new();
    for (dist, reorder, rtt) in keys {
        let cell: Vec<&Value> = sel
            .iter()
            .copied()
            .filter(|r| {
                text(r, "jitter_dist") == dist
                    && (r.get("jitter_reorder").and_then(Value::as_bool) == Some(true)) == reorder
                    && num(r, "rtt_ms") as u64 == rtt
            })
            .collect();
        let re = if reorder { "-reorder" } else { "" };
        let p = dir.join(format!("netbench-jitter-{dist}{re}-rtt{rtt}.png"));
        let what = format!(
            ", RTT ± 25 %, {dist} jitter{}",
            if reorder { ", reordering" } else { "" }
        );
        goodput_plot(&cell, rtt, &what, &p)?;
        written.push(p);
    }
    Ok(written)
}

/// Goodput against loss on the asymmetric link, one plot per RTT.
fn asymmetric_plots(rows: &[Value], dir: &Path) -> Result<Vec<PathBuf>> {
    let sel: Vec<&Value> = rows
        .iter()
        .filter(|r| text(r, "workload") == "asymmetric")
        .collect();
    let mut rtts: Vec<u64> = sel.iter().map(|r| num(r, "rtt_ms") as u64).collect();
    rtts.sort_unstable();
    rtts.dedup();
    let mut written = Vec::new();
    for rtt in rtts {
        let cell: Vec<&Value> = sel
            .iter()
            .copied()
            .filter(|r| num(r, "rtt_ms") as u64 == rtt)
            .collect();
        let back = cell
            .first()
            .map_or(0.0, |r| num(r, "return_rate_bps") / 1e6);
        let p = dir.join(format!("netbench-asymmetric-rtt{rtt}.png"));
        goodput_plot(&cell, rtt, &format!(" down, {back} Mbit/s back"), &p)?;
        written.push(p);
    }
    Ok(written)
}

fn de<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing: {e:?}")
}

/// Goodput (Mbit/s) against loss (%), one line per system, for one RTT; `what` ends the
/// caption.
fn goodput_plot(rows: &[&Value], rtt: u64, what: &str, path: &Path) -> Result<()> {
    let mut systems: Vec<&str> = rows.iter().map(|r| text(r, "system")).collect();
    systems.dedup();
    systems.sort_unstable();
    systems.dedup();
    let max_loss = rows
        .iter()
        .map(|r| num(r, "loss") * 100.0)
        .fold(1.0, f64::max);
    let max_rate = rows
        .iter()
        .map(|r| num(r, "rate_bps") / 1e6)
        .fold(1.0, f64::max);
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(de)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Goodput vs loss, RTT {rtt} ms, {max_rate:.0} Mbit/s link{what}"),
            ("sans-serif", 24),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..max_loss * 1.02, 0.0..max_rate * 1.05)
        .map_err(de)?;
    chart
        .configure_mesh()
        .x_desc("random loss (%)")
        .y_desc("goodput (Mbit/s)")
        .draw()
        .map_err(de)?;
    for (i, sys) in systems.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| text(r, "system") == *sys)
            .map(|r| (num(r, "loss") * 100.0, num(r, "goodput_bps") / 1e6))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(de)?
            .label(sys.to_string())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))
            .map_err(de)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(de)?;
    root.present().map_err(de).context("writing the PNG")
}

fn series(v: &Value, k: &str) -> Vec<f64> {
    v.get(k)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// "ctcp", or "kernel Cubic", "kernel BBR", "kernel Reno".
fn flow_label(k: &str) -> String {
    match k {
        "ctcp" => "ctcp".to_owned(),
        "cubic" => "kernel Cubic".to_owned(),
        "bbr" => "kernel BBR".to_owned(),
        "reno" => "kernel Reno".to_owned(),
        other => format!("kernel {other}"),
    }
}

/// Per-second throughput of the two flows of the fairness run (ctcp or the reference
/// kernel flow, and the kernel flow it is against).
fn fairness_plot(row: &Value, path: &Path) -> Result<()> {
    let (a, k) = (super::report::first_flow(row), super::report::against(row));
    let flows = [
        (a.to_owned(), series(row, &format!("series_{a}_bps"))),
        (k.to_owned(), series(row, &format!("series_{k}_bps"))),
    ];
    let caption = format!(
        "{} vs {}, {:.0} Mbit/s, RTT {} ms, Jain {:.3}",
        flow_label(a),
        flow_label(k),
        num(row, "rate_bps").max(1e6) / 1e6,
        num(row, "rtt_ms"),
        num(row, "jain")
    );
    series_plot(&flows, num(row, "rate_bps"), &caption, path)
}

/// Per-second goodput of each system's large-pipe download.
fn large_pipe_plot(rows: &[Value], path: &Path) -> Result<()> {
    let sel: Vec<&Value> = rows
        .iter()
        .filter(|r| text(r, "workload") == "large-pipe")
        .collect();
    let flows: Vec<(String, Vec<f64>)> = sel
        .iter()
        .map(|r| (text(r, "system").to_owned(), series(r, "series_bps")))
        .collect();
    let rate = sel.first().map_or(0.0, |r| num(r, "rate_bps"));
    let caption = format!(
        "{:.0} Mbit/s, RTT {} ms, {:.0} % loss, {:.0} MB download",
        rate / 1e6,
        sel.first().map_or(0.0, |r| num(r, "rtt_ms")),
        sel.first().map_or(0.0, |r| num(r, "loss") * 100.0),
        sel.first().map_or(0.0, |r| num(r, "size_bytes") / 1e6),
    );
    series_plot(&flows, rate, &caption, path)
}

/// Per-second throughput lines, one per flow, on a link of `rate_bps`.
fn series_plot(
    flows: &[(String, Vec<f64>)],
    rate_bps: f64,
    caption: &str,
    path: &Path,
) -> Result<()> {
    let n = flows.iter().map(|f| f.1.len()).max().unwrap_or(0).max(1);
    let rate = rate_bps.max(1e6) / 1e6;
    let root = BitMapBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(de)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..n as f64, 0.0..rate * 1.2)
        .map_err(de)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("throughput (Mbit/s)")
        .draw()
        .map_err(de)?;
    for (i, (name, s)) in flows.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = s
            .iter()
            .enumerate()
            .map(|(k, v)| (k as f64 + 1.0, v / 1e6))
            .collect();
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(de)?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(de)?;
    root.present().map_err(de).context("writing the PNG")
}
