//! What each mode measures: the link cells, the jobs in each, their sizes and timeouts.

use super::link::{LinkSpec, LossModel};
use std::time::Duration;

/// Bottleneck rate of the sweeps, bit/s.
pub const RATE: u64 = 10_000_000;
const MB: u64 = 1_000_000;

/// How much to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One cell, ctcp and Cubic, asserting ctcp is byte-exact (CI, ≤ 2 min).
    Smoke,
    /// Two RTTs × three loss rates, 5 MB, plus short fairness and reorder runs (≤ 5 min).
    Quick,
    /// The whole sweep (≤ 60 min).
    Full,
}

impl Mode {
    /// `"smoke"`, `"quick"` or `"full"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Smoke => "smoke",
            Self::Quick => "quick",
            Self::Full => "full",
        }
    }
}

/// A transport under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    /// ctcp-forward → link → ctcp-reverse.
    Ctcp,
    /// Kernel TCP Cubic directly across the link.
    Cubic,
    /// Kernel TCP BBR directly across the link.
    Bbr,
    /// Kernel TCP Reno directly across the link.
    Reno,
}

impl System {
    /// Its name in the results.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ctcp => "ctcp",
            Self::Cubic => "cubic",
            Self::Bbr => "bbr",
            Self::Reno => "reno",
        }
    }

    /// The kernel congestion control, `None` for ctcp.
    pub fn cc(self) -> Option<&'static str> {
        match self {
            Self::Ctcp => None,
            s => Some(s.name()),
        }
    }
}

/// What the client does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// curl downloads a file from `python3 -m http.server`.
    Curl,
    /// rsync fetches a file from an rsync daemon (via proxychains4 for ctcp).
    Rsync,
    /// The curl workload on a reordering link.
    Reorder,
}

impl Workload {
    /// Its name in the results.
    pub fn name(self) -> &'static str {
        match self {
            Self::Curl => "curl",
            Self::Rsync => "rsync",
            Self::Reorder => "reorder",
        }
    }
}

/// One transfer on a cell's link.
#[derive(Clone, Debug)]
pub struct Job {
    /// Who carries it.
    pub system: System,
    /// What it is.
    pub workload: Workload,
    /// File size in bytes.
    pub size: u64,
    /// Cut-off; a timed-out transfer is a result.
    pub timeout: Duration,
}

/// One link setting and the jobs run on it, one after another.
#[derive(Clone, Debug)]
pub struct Cell {
    /// The link.
    pub link: LinkSpec,
    /// The transfers, in order.
    pub jobs: Vec<Job>,
}

/// The fairness run: one ctcp and one kernel Cubic download sharing a link.
#[derive(Clone, Copy, Debug)]
pub struct Fairness {
    /// Duration in seconds.
    pub secs: u64,
    /// Link rate, bit/s.
    pub rate_bps: u64,
    /// RTT in ms.
    pub rtt_ms: u64,
}

/// Everything a mode runs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The mode.
    pub mode: Mode,
    /// Link cells.
    pub cells: Vec<Cell>,
    /// The fairness run, if any.
    pub fairness: Option<Fairness>,
}

/// A subset of a mode's plan, for re-measuring a few cells (`netbench --quick --rtt 500
/// --loss 0.2 --systems ctcp`). Empty lists keep everything.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// RTTs in ms to keep.
    pub rtts: Vec<u64>,
    /// Mean loss rates to keep (matched within 1e-9).
    pub losses: Vec<f64>,
    /// Systems to keep.
    pub systems: Vec<System>,
    /// Drop the fairness run.
    pub no_fairness: bool,
    /// Run the fairness run at this RTT in ms instead of the mode's (100 ms): the
    /// controller's fairness depends on the path, and satellite RTTs are the product's case.
    pub fairness_rtt: Option<u64>,
    /// Run the fairness run this many seconds instead of the mode's (a Cubic flow on a
    /// long path takes longer to settle).
    pub fairness_secs: Option<u64>,
    /// Drop every cell and keep only the fairness run.
    pub fairness_only: bool,
}

impl Filter {
    /// `plan` without the cells, jobs and fairness run the filter drops.
    pub fn apply(&self, mut plan: Plan) -> Plan {
        let keep_cell = |c: &Cell| {
            (self.rtts.is_empty() || self.rtts.contains(&c.link.rtt_ms))
                && (self.losses.is_empty()
                    || self
                        .losses
                        .iter()
                        .any(|l| (l - c.link.loss.mean()).abs() < 1e-9))
        };
        plan.cells.retain(|c| !self.fairness_only && keep_cell(c));
        for c in &mut plan.cells {
            c.jobs
                .retain(|j| self.systems.is_empty() || self.systems.contains(&j.system));
        }
        plan.cells.retain(|c| !c.jobs.is_empty());
        let fairness_kept = !self.no_fairness
            && (self.systems.is_empty()
                || (self.systems.contains(&System::Ctcp) && self.systems.contains(&System::Cubic)));
        if !fairness_kept {
            plan.fairness = None;
        }
        if let Some(f) = &mut plan.fairness {
            f.rtt_ms = self.fairness_rtt.unwrap_or(f.rtt_ms);
            f.secs = self.fairness_secs.unwrap_or(f.secs);
        }
        plan
    }
}

impl System {
    /// The system named `s` (`ctcp`, `cubic`, `bbr`, `reno`).
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Ctcp, Self::Cubic, Self::Bbr, Self::Reno]
            .into_iter()
            .find(|x| x.name() == s)
    }
}

impl Plan {
    /// File sizes the origins must serve.
    pub fn sizes(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .cells
            .iter()
            .flat_map(|c| c.jobs.iter().map(|j| j.size))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// max(60 s, 4 × the ideal transfer time at `RATE` × (1 − loss)).
pub fn generous_timeout(size: u64, loss: f64) -> Duration {
    let ideal = size as f64 * 8.0 / (RATE as f64 * (1.0 - loss));
    Duration::from_secs_f64((4.0 * ideal).max(60.0))
}

fn job(system: System, workload: Workload, size: u64, timeout: Duration) -> Job {
    Job {
        system,
        workload,
        size,
        timeout,
    }
}

/// Kernel TCP at loss: (size, timeout) under the mode's time budget.
fn kernel_budget(mode: Mode, size: u64, loss: f64) -> (u64, Duration) {
    let full = generous_timeout(size, loss);
    if loss == 0.0 {
        return (size, full);
    }
    match mode {
        Mode::Full if loss <= 0.01 => (size, full.min(Duration::from_secs(25))),
        Mode::Full => (10 * MB, Duration::from_secs(20)),
        Mode::Quick => (size, Duration::from_secs(15)),
        Mode::Smoke => (size, Duration::from_secs(20)),
    }
}

fn curl_jobs(mode: Mode, systems: &[System], size: u64, loss: f64, w: Workload) -> Vec<Job> {
    systems
        .iter()
        .map(|&s| {
            if s == System::Ctcp {
                job(s, w, size, generous_timeout(size, loss))
            } else {
                let (sz, t) = kernel_budget(mode, size, loss);
                job(s, w, sz, t)
            }
        })
        .collect()
}

fn rsync_jobs(systems: &[System], size: u64, loss: f64) -> Vec<Job> {
    systems
        .iter()
        .map(|&s| {
            let full = generous_timeout(size, loss);
            let t = if s == System::Ctcp || loss == 0.0 {
                full
            } else {
                full.min(Duration::from_secs(25))
            };
            job(s, Workload::Rsync, size, t)
        })
        .collect()
}

fn cell(rtt: u64, loss: LossModel, seed: u64, jobs: Vec<Job>) -> Cell {
    Cell {
        link: LinkSpec::bdp_queued(rtt, RATE, loss, seed),
        jobs,
    }
}

fn loss_model(p: f64) -> LossModel {
    if p == 0.0 {
        LossModel::None
    } else {
        LossModel::Bernoulli(p)
    }
}

fn reorder_cell(mode: Mode, systems: &[System], size: u64, seed: u64) -> Cell {
    let mut c = cell(
        100,
        LossModel::None,
        seed,
        curl_jobs(mode, systems, size, 0.0, Workload::Reorder),
    );
    c.link.reorder = Some((0.02, 50));
    c
}

/// The plan of `mode`; `with_30` adds 30 % loss to the full sweep.
pub fn plan(mode: Mode, with_30: bool) -> Plan {
    match mode {
        Mode::Smoke => Plan {
            mode,
            cells: vec![cell(
                100,
                LossModel::Bernoulli(0.05),
                1,
                curl_jobs(
                    mode,
                    &[System::Ctcp, System::Cubic],
                    2 * MB,
                    0.05,
                    Workload::Curl,
                ),
            )],
            fairness: None,
        },
        Mode::Quick => quick_plan(),
        Mode::Full => full_plan(with_30),
    }
}

fn quick_plan() -> Plan {
    let systems = [System::Ctcp, System::Bbr, System::Cubic];
    let mut cells = Vec::new();
    for rtt in [100, 500] {
        for loss in [0.0, 0.05, 0.2] {
            let jobs = curl_jobs(Mode::Quick, &systems, 5 * MB, loss, Workload::Curl);
            cells.push(cell(rtt, loss_model(loss), cells.len() as u64 + 1, jobs));
        }
    }
    cells.push(reorder_cell(Mode::Quick, &systems, 5 * MB, 99));
    Plan {
        mode: Mode::Quick,
        cells,
        fairness: Some(Fairness {
            secs: 20,
            rate_bps: 5_000_000,
            rtt_ms: 100,
        }),
    }
}

fn full_plan(with_30: bool) -> Plan {
    let systems = [System::Ctcp, System::Cubic, System::Bbr, System::Reno];
    let mut losses = vec![0.0, 0.005, 0.01, 0.025, 0.05, 0.10, 0.20];
    if with_30 {
        losses.push(0.30);
    }
    let mut cells = Vec::new();
    for rtt in [20, 100, 500, 600] {
        for &loss in &losses {
            let mut jobs = curl_jobs(Mode::Full, &systems, 20 * MB, loss, Workload::Curl);
            if rtt == 500 && loss == 0.20 {
                // The cell the "ctcp vs kernel TCP" ratios are read from: kernel TCP gets
                // 60 s instead of 20, so its first seconds (initial window and slow start
                // before the first losses) weigh less in a rate that, for a 20 MB file it
                // cannot finish, should describe the whole transfer.
                for j in jobs.iter_mut().filter(|j| j.system != System::Ctcp) {
                    j.timeout = Duration::from_secs(60);
                }
            }
            if rtt == 500 && [0.0, 0.01, 0.05, 0.20].contains(&loss) {
                jobs.extend(rsync_jobs(&systems, 20 * MB, loss));
            }
            cells.push(cell(rtt, loss_model(loss), cells.len() as u64 + 1, jobs));
        }
    }
    for rtt in [100, 500] {
        let ge = LossModel::Gilbert {
            mean: 0.05,
            burst: 4.0,
        };
        let jobs = curl_jobs(Mode::Full, &systems, 20 * MB, 0.05, Workload::Curl);
        cells.push(cell(rtt, ge, cells.len() as u64 + 1, jobs));
    }
    cells.push(reorder_cell(Mode::Full, &systems, 20 * MB, 99));
    Plan {
        mode: Mode::Full,
        cells,
        fairness: Some(Fairness {
            secs: 60,
            rate_bps: 5_000_000,
            rtt_ms: 100,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fairness_only_keeps_the_fairness_run_on_the_asked_path() {
        let f = Filter {
            fairness_only: true,
            fairness_rtt: Some(500),
            fairness_secs: Some(120),
            ..Filter::default()
        };
        let p = f.apply(plan(Mode::Full, false));
        assert!(p.cells.is_empty());
        let fair = p.fairness.expect("the fairness run is kept");
        assert_eq!(
            (fair.rtt_ms, fair.secs, fair.rate_bps),
            (500, 120, 5_000_000)
        );
        // Without the overrides the mode's own run is untouched.
        let p = Filter::default().apply(plan(Mode::Full, false));
        assert!(!p.cells.is_empty());
        let fair = p.fairness.expect("the full plan has a fairness run");
        assert_eq!((fair.rtt_ms, fair.secs), (100, 60));
    }
}
