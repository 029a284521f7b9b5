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
        goodput_plot(&sel, rtt, &p)?;
        written.push(p);
    }
    if let Some(f) = rows.iter().find(|r| text(r, "workload") == "fairness") {
        // The modes' own run is at 100 ms; one moved elsewhere (`--fairness-rtt`) gets its
        // RTT in the name so it does not overwrite that plot.
        let p = match num(f, "rtt_ms") as u64 {
            100 => dir.join("netbench-fairness.png"),
            rtt => dir.join(format!("netbench-fairness-{rtt}ms.png")),
        };
        fairness_plot(f, &p)?;
        written.push(p);
    }
    Ok(written)
}

fn de<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing: {e:?}")
}

/// Goodput (Mbit/s) against loss (%), one line per system, for one RTT.
fn goodput_plot(rows: &[&Value], rtt: u64, path: &Path) -> Result<()> {
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
            format!("Goodput vs loss, RTT {rtt} ms, {max_rate:.0} Mbit/s link"),
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

/// Per-second throughput of the ctcp and Cubic flows of the fairness run.
fn fairness_plot(row: &Value, path: &Path) -> Result<()> {
    let flows = [
        ("ctcp", series(row, "series_ctcp_bps")),
        ("cubic", series(row, "series_cubic_bps")),
    ];
    let n = flows.iter().map(|f| f.1.len()).max().unwrap_or(0).max(1);
    let rate = num(row, "rate_bps").max(1e6) / 1e6;
    let root = BitMapBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(de)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "ctcp vs kernel Cubic, {rate:.0} Mbit/s, RTT {} ms, Jain {:.3}",
                num(row, "rtt_ms"),
                num(row, "jain")
            ),
            ("sans-serif", 22),
        )
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
            .label(*name)
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
