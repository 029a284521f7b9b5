//! What each mode measures: the link cells, the jobs in each, their sizes and timeouts.

use super::link::{Jitter, JitterDist, LinkSpec, LossModel, ReturnPath, TCP_MEM_LARGE};
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
    /// Jittered links (RTT ± 25 %): a default subset of [`jitter_grid`] (≤ 30 min).
    Jitter,
    /// One 200 MB download per system over 100 Mbit/s, 600 ms, 1 % loss (≤ 5 min).
    LargePipe,
    /// 10 Mbit/s down, 1 Mbit/s back, loss on the way down only (≤ 8 min).
    Asymmetric,
}

impl Mode {
    /// `"smoke"`, `"quick"`, `"full"`, `"jitter"`, `"large-pipe"` or `"asymmetric"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Smoke => "smoke",
            Self::Quick => "quick",
            Self::Full => "full",
            Self::Jitter => "jitter",
            Self::LargePipe => "large-pipe",
            Self::Asymmetric => "asymmetric",
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
    /// The curl workload on a jittered link (`--jitter`).
    Jitter,
    /// The curl workload on the 100 Mbit/s, 600 ms link (`--large-pipe`).
    LargePipe,
    /// The curl workload on an asymmetric link (`--asymmetric`).
    Asymmetric,
}

impl Workload {
    /// Its name in the results.
    pub fn name(self) -> &'static str {
        match self {
            Self::Curl => "curl",
            Self::Rsync => "rsync",
            Self::Reorder => "reorder",
            Self::Jitter => "jitter",
            Self::LargePipe => "large-pipe",
            Self::Asymmetric => "asymmetric",
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
    /// Sample the bytes received every second and report the goodput from this many
    /// seconds after the start to the end (the steady state, without handshake and ramp).
    pub steady_from_s: Option<u64>,
}

/// One link setting and the jobs run on it, one after another.
#[derive(Clone, Debug)]
pub struct Cell {
    /// The link.
    pub link: LinkSpec,
    /// The transfers, in order.
    pub jobs: Vec<Job>,
    /// Report the peak resident memory (VmHWM) of ctcp-forward and ctcp-reverse with
    /// each ctcp row.
    pub proxy_rss: bool,
}

/// The fairness run: one ctcp and one kernel TCP download sharing a link, started
/// together; or, as a reference (`--fairness-reference`), two kernel TCP downloads with
/// different congestion controls in place of ctcp's and the kernel flow.
#[derive(Clone, Copy, Debug)]
pub struct Fairness {
    /// The kernel flow's congestion control (Cubic unless `--fairness-against`).
    pub against: System,
    /// A kernel congestion control whose flow replaces the ctcp flow (the reference: what
    /// a standard kernel TCP gets against `against` on the same link); `None` runs ctcp.
    pub reference: Option<System>,
    /// Duration in seconds.
    pub secs: u64,
    /// Link rate, bit/s.
    pub rate_bps: u64,
    /// RTT in ms.
    pub rtt_ms: u64,
}

impl Fairness {
    /// The flow sharing the link with `against`: ctcp, or the reference kernel TCP.
    pub fn first(&self) -> System {
        self.reference.unwrap_or(System::Ctcp)
    }
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
    /// Run the fairness run against this kernel congestion control instead of Cubic.
    pub fairness_against: Option<System>,
    /// Replace the fairness run's ctcp flow by a kernel TCP flow with this congestion
    /// control (`--fairness-reference cubic`), for a reference Jain index.
    pub fairness_reference: Option<System>,
    /// `--jitter` only: pick from the whole [`jitter_grid`] (instead of the default
    /// subset) the cells with these distributions.
    pub jitter_dists: Vec<JitterDist>,
    /// `--jitter` only: pick from the whole [`jitter_grid`] the cells whose jitter
    /// reorders.
    pub reorder_jitter: bool,
    /// Every job downloads a file of this many bytes instead of the plan's (short checks).
    pub size: Option<u64>,
    /// Every job samples its download each second and reports the goodput from this many
    /// seconds after curl started (the steady state, without handshake and ramp).
    pub steady_from_s: Option<u64>,
}

impl Filter {
    /// Whether the filter names a jitter axis (`--jitter-dist`, `--reorder-jitter`), which
    /// makes `--jitter` pick from its whole grid.
    pub fn picks_jitter(&self) -> bool {
        !self.jitter_dists.is_empty() || self.reorder_jitter
    }

    /// `plan` without the cells, jobs and fairness run the filter drops. For a
    /// [`Mode::Jitter`] plan and a filter that [`picks_jitter`](Self::picks_jitter), the
    /// cells are first replaced by the whole [`jitter_grid`].
    pub fn apply(&self, mut plan: Plan) -> Plan {
        if plan.mode == Mode::Jitter && self.picks_jitter() {
            plan.cells = jitter_grid();
        }
        let keep_jitter = |c: &Cell| match c.link.jitter {
            Some(j) => {
                (self.jitter_dists.is_empty() || self.jitter_dists.contains(&j.dist))
                    && (!self.reorder_jitter || j.reorder)
            }
            None => !self.picks_jitter(),
        };
        let keep_cell = |c: &Cell| {
            (self.rtts.is_empty() || self.rtts.contains(&c.link.rtt_ms))
                && (self.losses.is_empty()
                    || self
                        .losses
                        .iter()
                        .any(|l| (l - c.link.loss.mean()).abs() < 1e-9))
                && keep_jitter(c)
        };
        plan.cells.retain(|c| !self.fairness_only && keep_cell(c));
        for c in &mut plan.cells {
            c.jobs
                .retain(|j| self.systems.is_empty() || self.systems.contains(&j.system));
            if let Some(size) = self.size {
                let loss = c.link.loss.mean();
                for j in &mut c.jobs {
                    j.size = size;
                    // A larger download needs a longer budget to finish; the kernel
                    // systems keep theirs (their lossy cells report the goodput so far).
                    if j.system == System::Ctcp {
                        j.timeout = j.timeout.max(generous_timeout(size, loss));
                    }
                }
            }
            if let Some(from) = self.steady_from_s {
                for j in &mut c.jobs {
                    j.steady_from_s = Some(from);
                }
            }
        }
        plan.cells.retain(|c| !c.jobs.is_empty());
        if let Some(f) = &mut plan.fairness {
            f.rtt_ms = self.fairness_rtt.unwrap_or(f.rtt_ms);
            f.secs = self.fairness_secs.unwrap_or(f.secs);
            f.against = self.fairness_against.unwrap_or(f.against);
            f.reference = self.fairness_reference.or(f.reference);
        }
        let fairness_kept = !self.no_fairness
            && plan.fairness.is_some_and(|f| {
                self.systems.is_empty()
                    || (self.systems.contains(&f.first()) && self.systems.contains(&f.against))
            });
        if !fairness_kept {
            plan.fairness = None;
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
        steady_from_s: None,
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
        Mode::Smoke | Mode::Jitter | Mode::Asymmetric => (size, Duration::from_secs(20)),
        Mode::LargePipe => (size, LARGE_PIPE_KERNEL_TIMEOUT),
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
        proxy_rss: false,
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
        Mode::Jitter => jitter_plan(),
        Mode::LargePipe => large_pipe_plan(),
        Mode::Asymmetric => asymmetric_plan(),
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
            against: System::Cubic,
            reference: None,
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
            against: System::Cubic,
            reference: None,
            secs: 60,
            rate_bps: 5_000_000,
            rtt_ms: 100,
        }),
    }
}

/// RTTs of the jitter grid, ms.
pub const JITTER_RTTS: [u64; 4] = [50, 100, 200, 500];
/// Bernoulli loss rates of the jitter grid.
pub const JITTER_LOSSES: [f64; 3] = [0.0, 0.01, 0.05];
/// File size of the jitter, asymmetric cells.
const JITTER_SIZE: u64 = 10 * MB;

fn gilbert_5_4() -> LossModel {
    LossModel::Gilbert {
        mean: 0.05,
        burst: 4.0,
    }
}

/// Every jitter cell `--jitter` can run: per distribution (uniform, normal) and with and
/// without reordering, RTT {50, 100, 200, 500} ms × loss {0, 1 %, 5 %} plus Gilbert loss
/// (mean 5 %, bursts of 4) at 100 ms: 52 cells, ctcp, BBR and Cubic each, 10 MB, the
/// RTT varying by ±25 % ([`Jitter::quarter_rtt`]). Seeds follow the grid's order, so a
/// cell has the same seed whichever subset runs it.
pub fn jitter_grid() -> Vec<Cell> {
    let systems = [System::Ctcp, System::Bbr, System::Cubic];
    let mut cells = Vec::new();
    for dist in [JitterDist::Uniform, JitterDist::Normal] {
        for reorder in [false, true] {
            let mut links: Vec<(u64, LossModel)> = JITTER_RTTS
                .iter()
                .flat_map(|&rtt| JITTER_LOSSES.iter().map(move |&p| (rtt, loss_model(p))))
                .collect();
            links.push((100, gilbert_5_4()));
            for (rtt, loss) in links {
                let w = Workload::Jitter;
                let jobs = curl_jobs(Mode::Jitter, &systems, JITTER_SIZE, loss.mean(), w);
                let mut c = cell(rtt, loss, 201 + cells.len() as u64, jobs);
                c.link.jitter = Some(Jitter::quarter_rtt(rtt, dist, reorder));
                cells.push(c);
            }
        }
    }
    cells
}

/// Whether `--jitter` runs a grid cell by default: uniform jitter at every RTT and loss,
/// reordering uniform jitter at 100 and 500 ms, normal jitter at 100 ms, Gilbert loss with
/// uniform jitter at 100 ms (22 cells).
fn jitter_default(c: &Cell) -> bool {
    let Some(j) = c.link.jitter else {
        return false;
    };
    let rtt = c.link.rtt_ms;
    match (j.dist, j.reorder) {
        _ if matches!(c.link.loss, LossModel::Gilbert { .. }) => {
            j.dist == JitterDist::Uniform && !j.reorder
        }
        (JitterDist::Uniform, false) => true,
        (JitterDist::Uniform, true) => rtt == 100 || rtt == 500,
        (JitterDist::Normal, false) => rtt == 100,
        (JitterDist::Normal, true) => false,
    }
}

fn jitter_plan() -> Plan {
    let mut cells = jitter_grid();
    cells.retain(jitter_default);
    Plan {
        mode: Mode::Jitter,
        cells,
        fairness: None,
    }
}

/// Rate of the large-pipe link, bit/s.
pub const LARGE_PIPE_RATE: u64 = 100_000_000;
/// Kernel TCP's cut-off on the large pipe: it reports the goodput of what arrived.
const LARGE_PIPE_KERNEL_TIMEOUT: Duration = Duration::from_secs(60);

/// `--large-pipe`: 100 Mbit/s, 600 ms, a queue of one BDP (7.5 MB), 1 % loss, one 200 MB
/// download per system (ctcp up to 180 s; kernel BBR and Cubic cut off at 60 s), each
/// sampled every second for the steady state from 10 s on; ctcp rows carry the proxies'
/// peak RSS. Both namespaces allow TCP buffers of 64 MiB.
fn large_pipe_plan() -> Plan {
    let (rtt, p, size) = (600, 0.01, 200 * MB);
    let mut link = LinkSpec::bdp_queued(rtt, LARGE_PIPE_RATE, LossModel::Bernoulli(p), 301);
    link.tcp_mem = TCP_MEM_LARGE;
    let jobs = [System::Ctcp, System::Bbr, System::Cubic]
        .into_iter()
        .map(|s| {
            let t = match s {
                System::Ctcp => Duration::from_secs(180),
                _ => LARGE_PIPE_KERNEL_TIMEOUT,
            };
            Job {
                steady_from_s: Some(10),
                ..job(s, Workload::LargePipe, size, t)
            }
        })
        .collect();
    Plan {
        mode: Mode::LargePipe,
        cells: vec![Cell {
            link,
            jobs,
            proxy_rss: true,
        }],
        fairness: None,
    }
}

/// `--asymmetric`: 10 Mbit/s B→A (the download direction: servers are in namespace B),
/// 1 Mbit/s A→B (acknowledgements, requests) with its own one-BDP queue (at least 30 kB)
/// and no loss, RTT {100, 600} ms × loss {0, 5 %, 10 %} on B→A, 10 MB downloads.
fn asymmetric_plan() -> Plan {
    let systems = [System::Ctcp, System::Bbr, System::Cubic];
    let mut cells = Vec::new();
    for rtt in [100, 600] {
        for p in [0.0, 0.05, 0.10] {
            let jobs = curl_jobs(
                Mode::Asymmetric,
                &systems,
                JITTER_SIZE,
                p,
                Workload::Asymmetric,
            );
            let mut c = cell(rtt, loss_model(p), 401 + cells.len() as u64, jobs);
            let back = RATE / 10;
            c.link.return_path = Some(ReturnPath {
                rate_bps: back,
                queue_bytes: (back / 8 * rtt / 1000).max(30_000),
            });
            cells.push(c);
        }
    }
    Plan {
        mode: Mode::Asymmetric,
        cells,
        fairness: None,
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

    /// A line per job with every parameter the runner used before the issue modes (their
    /// new fields are checked to be unset separately), for pinning plans.
    fn dump(p: &Plan) -> String {
        let fair = p.fairness.map(|f| (f.secs, f.rate_bps, f.rtt_ms));
        let mut out = format!("{:?} {fair:?}\n", p.mode);
        for c in &p.cells {
            let l = &c.link;
            out += &format!(
                "{} {:?} {} {:?} {:?} {}\n",
                l.rtt_ms, l.rate_bps, l.queue_bytes, l.loss, l.reorder, l.seed
            );
            for j in &c.jobs {
                out += &format!(
                    "  {:?} {:?} {} {:?}\n",
                    j.system, j.workload, j.size, j.timeout
                );
            }
        }
        out
    }

    fn fnv(s: &str) -> u64 {
        s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    #[test]
    fn smoke_quick_and_full_plans_are_pinned() {
        let count = |p: &Plan| (p.cells.len(), p.cells.iter().map(|c| c.jobs.len()).sum());
        let plans = [
            plan(Mode::Smoke, false),
            plan(Mode::Quick, false),
            plan(Mode::Full, false),
            plan(Mode::Full, true),
        ];
        let counts: Vec<(usize, usize)> = plans.iter().map(count).collect();
        assert_eq!(counts, [(1, 2), (7, 21), (31, 140), (35, 156)]);
        for p in &plans {
            assert!(p.cells.iter().all(|c| c.link.jitter.is_none()
                && c.link.return_path.is_none()
                && c.link.tcp_mem == super::super::link::TCP_MEM
                && !c.proxy_rss
                && c.jobs.iter().all(|j| j.steady_from_s.is_none())));
            if let Some(f) = p.fairness {
                assert_eq!((f.against, f.reference), (System::Cubic, None));
            }
        }
        // Any change to what these modes measure shows here: update the pins only on
        // purpose (the published figures come from these plans).
        let pins: Vec<u64> = plans.iter().map(|p| fnv(&dump(p))).collect();
        assert_eq!(pins, PINS, "{pins:#x?}");
    }

    /// As computed at 2048db8, before the issue modes existed.
    const PINS: [u64; 4] = [
        0x73c5_5717_3f47_4852,
        0x3c67_9c94_ca88_0e3f,
        0xea86_0f52_f4af_f2b5,
        0xcd8a_cb45_aeb3_1d1d,
    ];

    fn jitter_of(c: &Cell) -> Jitter {
        c.link.jitter.expect("a jitter cell has jitter")
    }

    #[test]
    fn jitter_grid_and_default_subset() {
        let grid = jitter_grid();
        assert_eq!(grid.len(), 52);
        let seeds: std::collections::BTreeSet<u64> = grid.iter().map(|c| c.link.seed).collect();
        assert_eq!(seeds.len(), 52, "every cell its own seed");
        for c in &grid {
            let j = jitter_of(c);
            let rtt = c.link.rtt_ms;
            // ±25 %: J = RTT/4 per direction, fixed delay RTT/2 − J/2, so the mean
            // one-way delay is RTT/2 and the RTT spans [0.75, 1.25] × RTT.
            assert_eq!(j.spread_us, rtt * 250);
            assert_eq!(c.link.one_way_delay_us() * 2 + j.spread_us, rtt * 1000);
            assert_eq!(c.link.one_way_delay_us() * 2, rtt * 750);
            assert_eq!(c.link.rate_bps, Some(RATE));
            assert_eq!(c.link.queue_bytes, (RATE / 8 * rtt / 1000).max(30_000));
            let systems: Vec<System> = c.jobs.iter().map(|j| j.system).collect();
            assert_eq!(systems, [System::Ctcp, System::Bbr, System::Cubic]);
            assert!(c.jobs.iter().all(|j| j.size == 10 * MB
                && j.workload == Workload::Jitter
                && (j.system == System::Ctcp
                    || c.link.loss.mean() == 0.0
                    || j.timeout == Duration::from_secs(20))));
        }
        let p = plan(Mode::Jitter, false);
        assert!(p.fairness.is_none());
        assert_eq!(p.cells.len(), 22);
        let n = |f: &dyn Fn(&Cell) -> bool| p.cells.iter().filter(|c| f(c)).count();
        let uniform = |c: &Cell| jitter_of(c).dist == JitterDist::Uniform;
        let reorder = |c: &Cell| jitter_of(c).reorder;
        let gilbert = |c: &Cell| matches!(c.link.loss, LossModel::Gilbert { .. });
        assert_eq!(n(&|c| uniform(c) && !reorder(c) && !gilbert(c)), 12);
        assert_eq!(n(&|c| uniform(c) && reorder(c)), 6);
        assert_eq!(n(&|c| !uniform(c) && !reorder(c)), 3);
        assert_eq!(n(&|c| !uniform(c) && reorder(c)), 0);
        assert_eq!(n(&|c| gilbert(c) && uniform(c) && !reorder(c)), 1);
        assert!(p
            .cells
            .iter()
            .filter(|c| reorder(c))
            .all(|c| [100, 500].contains(&c.link.rtt_ms)));
        assert!(p
            .cells
            .iter()
            .filter(|c| !uniform(c) || gilbert(c))
            .all(|c| c.link.rtt_ms == 100));
        // The default cells are grid cells, seeds included.
        for c in &p.cells {
            assert!(grid
                .iter()
                .any(|g| g.link.seed == c.link.seed && g.link.jitter == c.link.jitter));
        }
    }

    #[test]
    fn jitter_filters_pick_from_the_whole_grid() {
        let normal = Filter {
            jitter_dists: vec![JitterDist::Normal],
            ..Filter::default()
        };
        let p = normal.apply(plan(Mode::Jitter, false));
        assert_eq!(p.cells.len(), 26);
        assert!(p
            .cells
            .iter()
            .all(|c| jitter_of(c).dist == JitterDist::Normal));

        let f = Filter {
            jitter_dists: vec![JitterDist::Normal],
            reorder_jitter: true,
            rtts: vec![500],
            losses: vec![0.05],
            systems: vec![System::Ctcp, System::Bbr],
            size: Some(MB),
            ..Filter::default()
        };
        let p = f.apply(plan(Mode::Jitter, false));
        assert_eq!(p.cells.len(), 1);
        let c = &p.cells[0];
        assert_eq!(
            (c.link.rtt_ms, c.link.loss),
            (500, LossModel::Bernoulli(0.05))
        );
        assert_eq!(
            jitter_of(c),
            Jitter::quarter_rtt(500, JitterDist::Normal, true)
        );
        let jobs: Vec<(System, u64)> = c.jobs.iter().map(|j| (j.system, j.size)).collect();
        assert_eq!(jobs, [(System::Ctcp, MB), (System::Bbr, MB)]);

        let both = Filter {
            jitter_dists: vec![JitterDist::Uniform, JitterDist::Normal],
            ..Filter::default()
        };
        assert_eq!(both.apply(plan(Mode::Jitter, false)).cells.len(), 52);
        let reorder = Filter {
            reorder_jitter: true,
            rtts: vec![200],
            ..Filter::default()
        };
        assert_eq!(reorder.apply(plan(Mode::Jitter, false)).cells.len(), 6);
        // Without a jitter axis the filters narrow the default subset.
        let rtt = Filter {
            rtts: vec![200],
            ..Filter::default()
        };
        let p = rtt.apply(plan(Mode::Jitter, false));
        assert_eq!(p.cells.len(), 3);
        assert!(p
            .cells
            .iter()
            .all(|c| jitter_of(c) == Jitter::quarter_rtt(200, JitterDist::Uniform, false)));
    }

    #[test]
    fn large_pipe_plan() {
        let p = plan(Mode::LargePipe, false);
        assert!(p.fairness.is_none());
        assert_eq!(p.cells.len(), 1);
        let c = &p.cells[0];
        let l = &c.link;
        assert_eq!(
            (l.rtt_ms, l.rate_bps, l.queue_bytes, l.loss),
            (
                600,
                Some(100_000_000),
                7_500_000,
                LossModel::Bernoulli(0.01)
            )
        );
        assert_eq!(l.tcp_mem, super::super::link::TCP_MEM_LARGE);
        let max: u64 = l.tcp_mem.split(' ').next_back().unwrap().parse().unwrap();
        assert!(max >= 32 << 20);
        assert!(c.proxy_rss && l.jitter.is_none() && l.return_path.is_none());
        let jobs: Vec<(System, u64, u64)> = c
            .jobs
            .iter()
            .map(|j| (j.system, j.size, j.timeout.as_secs()))
            .collect();
        assert_eq!(
            jobs,
            [
                (System::Ctcp, 200 * MB, 180),
                (System::Bbr, 200 * MB, 60),
                (System::Cubic, 200 * MB, 60)
            ]
        );
        assert!(c
            .jobs
            .iter()
            .all(|j| j.steady_from_s == Some(10) && j.workload == Workload::LargePipe));
        let short = Filter {
            size: Some(30 * MB),
            systems: vec![System::Ctcp],
            ..Filter::default()
        }
        .apply(p);
        assert_eq!(short.cells[0].jobs.len(), 1);
        assert_eq!(short.cells[0].jobs[0].size, 30 * MB);
    }

    #[test]
    fn asymmetric_plan() {
        let p = plan(Mode::Asymmetric, false);
        assert!(p.fairness.is_none());
        assert_eq!(p.cells.len(), 6);
        let mut grid = Vec::new();
        for c in &p.cells {
            let l = &c.link;
            grid.push((l.rtt_ms, l.loss.mean()));
            assert_eq!(l.rate_bps, Some(10_000_000));
            let back = l.return_path.expect("a return path");
            assert_eq!(back.rate_bps, 1_000_000);
            assert_eq!(back.queue_bytes, (125_000 * l.rtt_ms / 1000).max(30_000));
            assert!(l.jitter.is_none());
            assert!(c
                .jobs
                .iter()
                .all(|j| j.size == 10 * MB && j.workload == Workload::Asymmetric));
            assert_eq!(c.jobs.len(), 3);
        }
        assert_eq!(
            grid,
            [
                (100, 0.0),
                (100, 0.05),
                (100, 0.10),
                (600, 0.0),
                (600, 0.05),
                (600, 0.10)
            ]
        );
        let f = Filter {
            rtts: vec![600],
            losses: vec![0.1],
            ..Filter::default()
        };
        assert_eq!(f.apply(plan(Mode::Asymmetric, false)).cells.len(), 1);
    }

    #[test]
    fn fairness_against_bbr() {
        let f = Filter {
            fairness_against: Some(System::Bbr),
            ..Filter::default()
        };
        let fair = f.apply(plan(Mode::Quick, false)).fairness.unwrap();
        assert_eq!(fair.against, System::Bbr);
        // `--systems` must name both flows for the run to stay.
        let f = Filter {
            fairness_against: Some(System::Bbr),
            systems: vec![System::Ctcp, System::Cubic],
            ..Filter::default()
        };
        assert!(f.apply(plan(Mode::Quick, false)).fairness.is_none());
        let f = Filter {
            fairness_against: Some(System::Bbr),
            systems: vec![System::Ctcp, System::Bbr],
            fairness_only: true,
            ..Filter::default()
        };
        let p = f.apply(plan(Mode::Full, false));
        assert!(p.cells.is_empty());
        assert_eq!(p.fairness.unwrap().against, System::Bbr);
        let p = Filter::default().apply(plan(Mode::Quick, false));
        assert_eq!(p.fairness.unwrap().against, System::Cubic);
    }

    #[test]
    fn fairness_reference_replaces_the_ctcp_flow() {
        let f = Filter {
            fairness_against: Some(System::Bbr),
            fairness_reference: Some(System::Cubic),
            fairness_only: true,
            fairness_rtt: Some(500),
            fairness_secs: Some(120),
            ..Filter::default()
        };
        let p = f.apply(plan(Mode::Quick, false));
        assert!(p.cells.is_empty());
        let fair = p.fairness.expect("the fairness run is kept");
        assert_eq!(
            (
                fair.first(),
                fair.against,
                fair.rtt_ms,
                fair.secs,
                fair.rate_bps
            ),
            (System::Cubic, System::Bbr, 500, 120, 5_000_000)
        );
        // `--systems` names the reference flow, not ctcp.
        let f = Filter {
            fairness_reference: Some(System::Reno),
            systems: vec![System::Reno, System::Cubic],
            ..Filter::default()
        };
        let fair = f.apply(plan(Mode::Quick, false)).fairness.unwrap();
        assert_eq!((fair.first(), fair.against), (System::Reno, System::Cubic));
        let f = Filter {
            fairness_reference: Some(System::Reno),
            systems: vec![System::Ctcp, System::Cubic],
            ..Filter::default()
        };
        assert!(f.apply(plan(Mode::Quick, false)).fairness.is_none());
        let fair = Filter::default().apply(plan(Mode::Quick, false)).fairness;
        assert_eq!(fair.unwrap().first(), System::Ctcp);
    }
}
