//! Real-network benchmark: ctcp (ctcp-forward → link → ctcp-reverse) against kernel TCP
//! Cubic, BBR and Reno over a `ctcp-linkem` link (10 Mbit/s, queue of one BDP) between two
//! network namespaces, across RTT × random loss, Gilbert-Elliott loss, reordering, an
//! rsync workload and a fairness run. Needs root, curl, rsync, proxychains4 and python3.
//!
//! ```text
//! cargo build --release -p ctcp-forward -p ctcp-reverse -p ctcp-linkem -p ctcp-benches
//! cargo run --release -p ctcp-benches --bin netbench -- --smoke        # CI, ≤ 2 min
//! cargo run --release -p ctcp-benches --bin netbench -- --quick --plots   # ≤ 5 min
//! cargo run --release -p ctcp-benches --bin netbench -- --full --plots    # ≤ 60 min
//! cargo run --release -p ctcp-benches --bin netbench -- --validate     # emulator checks
//! cargo run --release -p ctcp-benches --bin netbench -- --chain-throttle|--plots-only [--out FILE]
//! cargo run --release -p ctcp-benches --bin netbench -- --jitter --plots      # ≤ 30 min
//! cargo run --release -p ctcp-benches --bin netbench -- --large-pipe --plots  # ≤ 5 min
//! cargo run --release -p ctcp-benches --bin netbench -- --asymmetric --plots  # ≤ 8 min
//! cargo run --release -p ctcp-benches --bin netbench -- --chain               # ≤ 10 min
//! cargo run --release -p ctcp-benches --bin netbench -- --tandem --plots      # ≈ 20 min
//! ```
//!
//! `--multipath` (issue 29) runs [`ctcp_benches::netbench::multipath`]: two parallel
//! `ctcp-linkem --path` links between the same namespaces (10 Mbit/s / 600 ms / 1 % and
//! 5 Mbit/s / 60 ms / 5 %; a failover cell cutting path `--failover-path` (default 0) for
//! 20 s mid-transfer; a flap cell taking that path's device in A down for 5 s; and two
//! 10 Mbit/s / 100 ms / 20 % paths), a 40 MB download per
//! system: ctcp over both paths (`ctcp-mp`, run when this build's ctcp-forward accepts
//! the multipath `paths` configuration: a `--check-config` probe of the built-in one or
//! of `--mp-config FILE`; `--ctcp-multipath` runs it without probing), ctcp and kernel
//! BBR/Cubic over each path alone, kernel MPTCP (`mptcpize run curl`, Debian's `mptcpize`
//! package) with Cubic or BBR subflows, and the sum of the paths' capacities. Filters:
//! `--mp-cells aggregate,failover,flap,lossy,redundant`, `--mp-systems ctcp-mp,mptcp-cubic,...`,
//! `--size`. The `redundant` cell (two 10 Mbit/s 5 % paths, 60 and 100 ms) streams
//! timestamped records at 1 Mbit/s instead and reports the extra delivery delay for
//! `ctcp-mp`, `ctcp-mp-redundant` and `ctcp-p0`.
//! Rows go to `benches/results/netbench-multipath.json`.
//!
//! `--chain-delay` (issue 28) runs the same two paths with a stream of timestamped
//! 1000-byte records from the server's namespace at `--delay-rate-mbit` (default 5, half
//! the satellite) for `--delay-secs` (default 30) through `ctcp-e2e` and `ctcp-relay`,
//! and reports the extra delivery delay (arrival − write − the chain's one-way delay,
//! 310 ms) at p50/p90/p99, over all records and after a 5 s warm-up; rows go to
//! `benches/results/netbench-chain-delay.json`. `--chain-radio-loss P` replaces the radio
//! segment's 15 % (0 gives one tunnel's delay with only the satellite's losses: the floor
//! of a cascade's).
//!
//! `--udp` (issue 27) runs [`ctcp_benches::netbench::udp`]: on a 10 Mbit/s link with a
//! one-BDP queue, RTT 100 ms and Bernoulli loss 0, 10 and 20 % both ways (`--rtt`, `--loss`
//! pick others), a seeded generator in A sends 2 Mbit/s of 1,200-byte datagrams
//! (`--udp-traffic voip`: 160 bytes, 50/s; `stream,voip` both) for `--udp-secs` (default
//! 20) to a sink in B (`--udp-gilbert 0.05:4` adds a Gilbert-Elliott cell, mean loss
//! 5 % in bursts of 4 packets on average, at each RTT; several comma-separated), first raw across the link, then through SOCKS UDP ASSOCIATE into a
//! fresh ctcp pair. Rows report the residual loss, the IP bytes into the link per
//! datagram against the raw run's (`wire_vs_raw`; `wire_vs_raw_both` adds the return
//! direction) and the extra delay (arrival − send − one-way delay) at p50/p99; they go
//! to `benches/results/netbench-udp.json`.
//!
//! `--tandem` (issue 28, seed 003) runs [`ctcp_benches::netbench::tandem`]: two middle
//! segments of 3 Mbit/s / 10 ms with random loss r₀ each (in the data's direction)
//! between 5 ms edges, 1 to 4 concurrent downloads each capped at 1 Mbit/s, through
//! plain kernel TCP (`tcp-cubic`; `tcp-reno` on request), one ctcp tunnel over both
//! segments (`ctcp-single`) and two cascaded through a relay (`ctcp-cascade`). Each cell
//! measures `--tandem-secs S` (default 16) after a 4 s warm-up. Filters: `--loss` (r₀,
//! default 0,0.1,0.2,0.3), `--tandem-flows 3,4`, `--tandem-systems ctcp-single,ctcp-cascade`,
//! `--repeats N` (default 1 here). Rows go to `benches/results/netbench-tandem.json`.
//!
//! `--chain` (issue 28) runs the heterogeneous two-segment path of
//! [`ctcp_benches::netbench::chain`] — 10 Mbit/s, 600 ms, 1 % loss (satellite) then
//! 50 Mbit/s, 20 ms, 15 % loss (radio), a three-namespace `ctcp-linkem --hop` chain — and
//! the same two segments the other way round (satellite next to the server, so the
//! download crosses it first, as an upload does on the first path), and on each
//! downloads a 20 MB file (`--size`) `--repeats N` times (default 2) per system: one ctcp
//! tunnel end to end (`ctcp-e2e`), two tunnels cascaded through a relay in the middle
//! namespace (`ctcp-relay`), and kernel BBR and Cubic end to end (cut off after 60 s);
//! `--chain-systems ctcp-e2e,ctcp-relay` picks some. Rows go to
//! `benches/results/netbench-chain.json`. `--chain-throttle` runs the same downloads on
//! one other path instead, [`ctcp_benches::netbench::chain::THROTTLED`], where the
//! relay's next segment (1 Mbit/s) is ten times slower than the one feeding it: the
//! relay's peak RSS against its configured buffer (`NETBENCH_RELAY_ARGS`).
//!
//! The three issue modes ("real links jitter") each compare ctcp with kernel BBR and Cubic
//! and write their own file (`benches/results/netbench-jitter.json`, `-large-pipe.json`,
//! `-asymmetric.json`):
//!
//! - `--jitter`: 10 Mbit/s, one-BDP queue, the RTT varying by ±25 % around its mean:
//!   each direction's fixed delay is RTT/2 − J/2 and its extra delay is drawn with spread
//!   J = RTT/4 (uniform in [0, J], or normal with mean J/2 and sd J/4 clipped at 0, see
//!   `ctcp-linkem --jitter-dist`), with or without reordering (linkem's
//!   `--jitter-reorder`; without it jitter only bunches packets). The grid is RTT
//!   {50, 100, 200, 500} ms × loss {0, 1 %, 5 %} plus Gilbert loss (mean 5 %, bursts of 4)
//!   at 100 ms, per distribution and reordering: 52 cells of 10 MB. By default 22 of them
//!   run: uniform at every RTT and loss, reordering uniform at 100 and 500 ms, normal and
//!   Gilbert at 100 ms. `--jitter-dist uniform,normal` and `--reorder-jitter` (only
//!   reordering cells) pick from the whole grid instead, narrowed by `--rtt`/`--loss`.
//!   Rows add `jitter_ms` (J), `jitter_dist`, `jitter_reorder`, `one_way_delay_ms`.
//! - `--large-pipe`: 100 Mbit/s, 600 ms, a one-BDP queue (7.5 MB), 1 % loss, one 200 MB
//!   download per system (kernel TCP cut off at 60 s, reporting the goodput so far),
//!   TCP buffers up to 64 MiB in both namespaces. The bytes received are sampled every
//!   second: rows add `series_bps`, `steady_goodput_bps` and `steady_efficiency` (from
//!   10 s after curl started to the end), `tun_drops` (packets the TUN devices dropped:
//!   the emulator's own loss), and for ctcp `peak_rss_forward_bytes` /
//!   `peak_rss_reverse_bytes` (the proxies' VmHWM just before they stop).
//! - `--asymmetric`: 10 Mbit/s B→A (the download direction: the servers are in B), a
//!   loss-free 1 Mbit/s A→B with its own one-BDP queue (≥ 30 kB), RTT {100, 600} ms ×
//!   loss {0, 5 %, 10 %} on B→A, 10 MB; efficiency is against the B→A rate. Rows add
//!   `return_rate_bps`, `return_queue_bytes`, `return_loss`.
//!
//! Kernel runs on their lossy cells stop after 20 s, reporting the goodput so far.
//! `--size BYTES` downloads files of that size in every job instead (short checks, e.g.
//! `--large-pipe --size 30000000`).
//! `--steady-from S` samples every download each second and adds the goodput from S s after
//! curl started (`steady_goodput_bps`, `steady_efficiency`): the link's rate without the
//! handshake and ramp.
//!
//! Options: `--out FILE` (default `benches/results/netbench.json`; `--smoke` writes to a
//! temporary file unless given; `--validate` to `benches/results/netbench-validate.json`),
//! `--plots` (PNGs next to the output file), `--with-30` (adds 30 % loss to `--full`),
//! and filters that run a subset of the mode's plan: `--rtt 100,500`, `--loss 0.05,0.2`
//! (mean loss of the cell), `--systems ctcp,bbr`, `--no-fairness`, `--fairness-only`; and
//! `--fairness-rtt MS` / `--fairness-secs S` to run the fairness run on another path (e.g.
//! `--full --fairness-only --fairness-rtt 500 --fairness-secs 120`), and
//! `--fairness-against bbr|cubic` (default cubic) to share the link with kernel BBR instead.
//! `--fairness-reference cubic|reno|bbr` replaces the ctcp flow by a kernel TCP flow with
//! that congestion control, everything else alike (a reference: what a standard TCP gets
//! against the other flow, e.g. `--fairness-against bbr --fairness-reference cubic`).
//! Namespace A then gets a second address, 10.77.0.3, on the link; namespace B's default
//! congestion control is the reference's and its /32 route to 10.77.0.3 carries
//! `congctl <against>`, and the `against` download binds to 10.77.0.3 (`curl
//! --interface`). A few seconds in, the run reads `ss -ti` in namespace B and fails unless
//! each connection shows its own controller. The row's `system` is e.g. `cubic+bbr`, with
//! `reference`, `cc_seen`, `ss_b` and both flows' fields named after their controllers.
//! Set `NETBENCH_KEEP=1` to keep the scratch directory `/tmp/netbench-PID` (logs), and
//! `NETBENCH_LOG=debug` to have the proxies log each session's statistics every 250 ms, and
//! `NETBENCH_PROXY_ARGS="--window 32768"` to pass extra flags to both proxies.
//!
//! Every row is one JSON object per line: `system`, `workload`, `rtt_ms`, `loss`,
//! `loss_model`, `goodput_bps`, `efficiency` = goodput / (rate × (1 − loss)), `bytes_ok`
//! (SHA-256 of the received file), `timed_out`, `wire_bytes` (bytes that entered the link
//! B→A during the transfer, from linkem's cumulative counters) and `wire_per_goodput`,
//! `secs` and, for curl, `first_byte_s` (curl's time to the reply's first byte); fairness
//! rows add `against` (the kernel flow's congestion control), `jain` and both flows'
//! goodput and per-second series (`goodput_ctcp_bps`, `goodput_cubic_bps` or
//! `goodput_bbr_bps`, ...; a reference row `goodput_cubic_bps` and `goodput_bbr_bps`);
//! both flows start together. Kernel runs on
//! lossy cells of `--full` use capped timeouts (25 s at ≤ 1 % loss; a 10 MB file and 20 s
//! at higher loss) to stay within the time budget: a cut-off transfer reports the goodput
//! of the bytes received so far with `timed_out: true`. Both namespaces get
//! `net.ipv4.tcp_rmem`/`tcp_wmem` = `4096 131072 16777216` and `tcp_no_metrics_save = 1`.
//! Linux lets a namespace default only to congestion controls in the global
//! `net.ipv4.tcp_allowed_congestion_control`, so the run adds `cubic` (and `reno`) to it
//! and restores the original list at exit. Ctrl-C kills every child and takes the link down.

use anyhow::{bail, Context, Result};
use ctcp_benches::netbench::link::JitterDist;
use ctcp_benches::netbench::plan::{self, Mode};
use ctcp_benches::netbench::run::{fairness_size, run_plan, Ctx, Out, WorkDir};
use ctcp_benches::netbench::workload::Bins;
use ctcp_benches::netbench::{chain, multipath, plots, procs, report, tandem, udp, validate};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What the command line asks for.
enum Action {
    Run(Mode),
    Chain,
    ChainDelay,
    Tandem,
    Multipath,
    Udp,
    Validate,
    PlotsOnly,
}

struct Args {
    action: Action,
    out: Option<PathBuf>,
    plots: bool,
    with_30: bool,
    filter: plan::Filter,
    repeats: usize,
    chain_systems: Vec<String>,
    repeats_given: bool,
    tandem_flows: Vec<usize>,
    tandem_systems: Vec<String>,
    tandem_secs: u64,
    delay_rate_mbit: f64,
    delay_secs: u64,
    chain_radio_loss: Option<f64>,
    chain_throttle: bool,
    mp_cells: Vec<String>,
    mp_systems: Vec<String>,
    failover_path: usize,
    mp_config: Option<PathBuf>,
    ctcp_multipath: bool,
    udp_secs: u64,
    udp_traffic: Vec<String>,
    udp_gilbert: Vec<(f64, f64)>,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        action: Action::Run(Mode::Quick),
        out: None,
        plots: false,
        with_30: false,
        filter: plan::Filter::default(),
        repeats: 2,
        chain_systems: ["ctcp-e2e", "ctcp-relay", "bbr", "cubic"]
            .map(String::from)
            .to_vec(),
        repeats_given: false,
        tandem_flows: vec![1, 2, 3, 4],
        tandem_systems: ["tcp-cubic", "ctcp-single", "ctcp-cascade"]
            .map(String::from)
            .to_vec(),
        tandem_secs: 16,
        delay_rate_mbit: 5.0,
        delay_secs: 30,
        chain_radio_loss: None,
        chain_throttle: false,
        mp_cells: multipath::CELLS.map(String::from).to_vec(),
        mp_systems: multipath::SYSTEMS.map(String::from).to_vec(),
        failover_path: 0,
        mp_config: None,
        ctcp_multipath: false,
        udp_secs: 20,
        udp_traffic: vec!["stream".into()],
        udp_gilbert: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        match k.as_str() {
            "--smoke" => a.action = Action::Run(Mode::Smoke),
            "--quick" => a.action = Action::Run(Mode::Quick),
            "--full" => a.action = Action::Run(Mode::Full),
            "--jitter" => a.action = Action::Run(Mode::Jitter),
            "--large-pipe" => a.action = Action::Run(Mode::LargePipe),
            "--asymmetric" => a.action = Action::Run(Mode::Asymmetric),
            "--validate" => a.action = Action::Validate,
            "--chain" => a.action = Action::Chain,
            "--chain-throttle" => {
                a.action = Action::Chain;
                a.chain_throttle = true;
            }
            "--tandem" => a.action = Action::Tandem,
            "--chain-delay" => a.action = Action::ChainDelay,
            "--multipath" => a.action = Action::Multipath,
            "--mp-cells" => {
                let v = it.next().context("--mp-cells needs a list")?;
                a.mp_cells = v.split(',').map(String::from).collect();
                if let Some(bad) = a
                    .mp_cells
                    .iter()
                    .find(|c| !multipath::CELLS.contains(&c.as_str()))
                {
                    bail!(
                        "unknown multipath cell {bad} ({})",
                        multipath::CELLS.join(", ")
                    );
                }
            }
            "--mp-systems" => {
                let v = it.next().context("--mp-systems needs a list")?;
                a.mp_systems = v.split(',').map(String::from).collect();
                if let Some(bad) = a
                    .mp_systems
                    .iter()
                    .find(|s| !multipath::SYSTEMS.contains(&s.as_str()))
                {
                    bail!(
                        "unknown multipath system {bad} ({})",
                        multipath::SYSTEMS.join(", ")
                    );
                }
            }
            "--failover-path" => {
                let v = it.next().context("--failover-path needs 0 or 1")?;
                a.failover_path = match v.as_str() {
                    "0" => 0,
                    "1" => 1,
                    _ => bail!("--failover-path needs 0 or 1"),
                };
            }
            "--mp-config" => {
                a.mp_config = Some(it.next().context("--mp-config needs a file")?.into())
            }
            "--ctcp-multipath" => a.ctcp_multipath = true,
            "--udp" => a.action = Action::Udp,
            "--udp-secs" => {
                let v = it.next().context("--udp-secs needs seconds")?;
                a.udp_secs = v.parse().context("--udp-secs needs seconds")?;
            }
            "--udp-traffic" => {
                let v = it
                    .next()
                    .context("--udp-traffic needs stream, voip or both")?;
                a.udp_traffic = v.split(',').map(String::from).collect();
            }
            "--udp-gilbert" => {
                let v = it.next().context("--udp-gilbert needs MEAN:BURST,..")?;
                a.udp_gilbert = v
                    .split(',')
                    .map(|c| {
                        let (m, b) = c
                            .split_once(':')
                            .with_context(|| format!("--udp-gilbert {c}: MEAN:BURST"))?;
                        let (m, b): (f64, f64) = (
                            m.parse().context("--udp-gilbert MEAN")?,
                            b.parse().context("--udp-gilbert BURST")?,
                        );
                        if !(m > 0.0 && m < 1.0 && b >= 1.0) {
                            bail!("--udp-gilbert {c}: mean in (0, 1), burst ≥ 1");
                        }
                        Ok((m, b))
                    })
                    .collect::<Result<_>>()?;
            }
            "--delay-rate-mbit" => {
                let v = it.next().context("--delay-rate-mbit needs Mbit/s")?;
                a.delay_rate_mbit = v.parse().context("--delay-rate-mbit needs Mbit/s")?;
            }
            "--chain-radio-loss" => {
                let v = it.next().context("--chain-radio-loss needs a rate")?;
                let p: f64 = v.parse().context("--chain-radio-loss needs a rate")?;
                if !(0.0..1.0).contains(&p) {
                    bail!("--chain-radio-loss must be in [0, 1), not {p}");
                }
                a.chain_radio_loss = Some(p);
            }
            "--delay-secs" => {
                let v = it.next().context("--delay-secs needs seconds")?;
                a.delay_secs = v.parse().context("--delay-secs needs seconds")?;
            }
            "--repeats" => {
                let v = it.next().context("--repeats needs a count")?;
                a.repeats = v.parse().context("--repeats needs a count")?;
                a.repeats_given = true;
            }
            "--tandem-flows" => {
                let v = it.next().context("--tandem-flows needs a list")?;
                a.tandem_flows = v.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "--tandem-systems" => {
                let v = it.next().context("--tandem-systems needs a list")?;
                a.tandem_systems = v.split(',').map(String::from).collect();
            }
            "--tandem-secs" => {
                let v = it.next().context("--tandem-secs needs seconds")?;
                a.tandem_secs = v.parse().context("--tandem-secs needs seconds")?;
            }
            "--chain-systems" => {
                let v = it.next().context("--chain-systems needs a list")?;
                a.chain_systems = v.split(',').map(String::from).collect();
            }
            "--plots-only" => a.action = Action::PlotsOnly,
            "--plots" => a.plots = true,
            "--with-30" => a.with_30 = true,
            "--out" => a.out = Some(it.next().context("--out needs a path")?.into()),
            "--rtt" => {
                let v = it.next().context("--rtt needs a list of ms")?;
                a.filter.rtts = v.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "--loss" => {
                let v = it.next().context("--loss needs a list of rates")?;
                a.filter.losses = v.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "--systems" => {
                let v = it.next().context("--systems needs a list")?;
                a.filter.systems = v
                    .split(',')
                    .map(|s| plan::System::parse(s).with_context(|| format!("unknown system {s}")))
                    .collect::<Result<_>>()?;
            }
            "--jitter-dist" => {
                let v = it
                    .next()
                    .context("--jitter-dist needs uniform, normal or both")?;
                a.filter.jitter_dists = v
                    .split(',')
                    .map(str::parse::<JitterDist>)
                    .collect::<Result<_, _>>()?;
            }
            "--reorder-jitter" => a.filter.reorder_jitter = true,
            "--size" => {
                let v = it.next().context("--size needs bytes")?;
                let size: u64 = v.parse().context("--size needs bytes")?;
                if size == 0 {
                    bail!("--size needs at least one byte");
                }
                a.filter.size = Some(size);
            }
            "--steady-from" => {
                let v = it.next().context("--steady-from needs seconds")?;
                a.filter.steady_from_s = Some(v.parse().context("--steady-from needs seconds")?);
            }
            "--fairness-against" => {
                let v = it.next().context("--fairness-against needs bbr or cubic")?;
                a.filter.fairness_against = match plan::System::parse(&v) {
                    Some(s) if s.cc().is_some() => Some(s),
                    _ => bail!("--fairness-against needs a kernel TCP: bbr, cubic or reno"),
                };
            }
            "--fairness-reference" => {
                let v = it
                    .next()
                    .context("--fairness-reference needs cubic, reno or bbr")?;
                a.filter.fairness_reference = match plan::System::parse(&v) {
                    Some(s) if s.cc().is_some() => Some(s),
                    _ => bail!("--fairness-reference needs a kernel TCP: cubic, reno or bbr"),
                };
            }
            "--no-fairness" => a.filter.no_fairness = true,
            "--fairness-only" => a.filter.fairness_only = true,
            "--fairness-rtt" => {
                let v = it.next().context("--fairness-rtt needs ms")?;
                a.filter.fairness_rtt = Some(v.parse().context("--fairness-rtt needs ms")?);
            }
            "--fairness-secs" => {
                let v = it.next().context("--fairness-secs needs seconds")?;
                let secs: u64 = v.parse().context("--fairness-secs needs seconds")?;
                if secs < 10 {
                    bail!("--fairness-secs needs at least 10 s");
                }
                a.filter.fairness_secs = Some(secs);
            }
            "-h" | "--help" => {
                println!(
                    "netbench --smoke|--quick|--full|--jitter|--large-pipe|--asymmetric|--chain|--chain-delay|--tandem|--multipath|--udp|--validate|--plots-only [--out FILE] [--mp-cells aggregate,failover,flap,lossy,redundant] [--mp-systems ctcp-mp,ctcp-p0,...] [--failover-path 0|1] [--mp-config FILE] [--ctcp-multipath] [--repeats N] [--chain-systems ctcp-e2e,ctcp-relay,bbr,cubic] [--tandem-flows 1,2,3,4] [--tandem-systems tcp-cubic,tcp-reno,ctcp-single,ctcp-cascade] [--tandem-secs S] [--delay-rate-mbit M] [--delay-secs S] [--chain-radio-loss P] [--udp-secs S] [--udp-traffic stream,voip] [--udp-gilbert MEAN:BURST,..] [--plots] [--with-30] [--rtt MS,..] [--loss P,..] [--systems ctcp,cubic,bbr,reno] [--size BYTES] [--steady-from S] [--jitter-dist uniform,normal] [--reorder-jitter] [--no-fairness] [--fairness-only] [--fairness-rtt MS] [--fairness-secs S] [--fairness-against bbr|cubic] [--fairness-reference cubic|reno|bbr]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other} (try --help)"),
        }
    }
    if let Some(r) = a.filter.fairness_reference {
        let against = a.filter.fairness_against.unwrap_or(plan::System::Cubic);
        if r == against {
            bail!(
                "--fairness-reference {} needs another congestion control than the flow it is against (--fairness-against, default cubic)",
                r.name()
            );
        }
    }
    if a.filter.picks_jitter() && !matches!(a.action, Action::Run(Mode::Jitter)) {
        bail!("--jitter-dist and --reorder-jitter go with --jitter");
    }
    Ok(a)
}

fn results_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("results")
}

fn default_out() -> PathBuf {
    results_dir().join("netbench.json")
}

/// Where a mode writes unless `--out` says: the issue modes each their own file, so that
/// they do not overwrite the sweep's.
fn mode_out(mode: Mode) -> PathBuf {
    match mode {
        Mode::Jitter | Mode::LargePipe | Mode::Asymmetric => {
            results_dir().join(format!("netbench-{}.json", mode.name()))
        }
        Mode::Smoke | Mode::Quick | Mode::Full => default_out(),
    }
}

fn plot_dir(out: &Path) -> PathBuf {
    match out.parent() {
        Some(d) if !d.as_os_str().is_empty() && !d.starts_with(std::env::temp_dir()) => d.into(),
        _ => results_dir(),
    }
}

fn write_plots(rows: &[Value], out: &Path) -> Result<()> {
    for p in plots::write_all(rows, &plot_dir(out))? {
        println!("plot: {}", p.display());
    }
    Ok(())
}

fn plots_only(out: Option<PathBuf>) -> Result<()> {
    let out = out.unwrap_or_else(default_out);
    let text =
        std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    let rows = report::read_rows(&text)?;
    if rows.iter().any(|r| r["workload"] == "tandem") {
        print!("{}", tandem::markdown(&rows));
        for p in plots::tandem_plots(&rows, &plot_dir(&out))? {
            println!("plot: {}", p.display());
        }
        return Ok(());
    }
    print!("{}", report::markdown(&rows));
    write_plots(&rows, &out)
}

fn validate_mode(out: Option<PathBuf>) -> Result<()> {
    let bins = Bins::locate()?;
    let work = WorkDir::create()?;
    let mut out =
        Out::create(&out.unwrap_or_else(|| results_dir().join("netbench-validate.json")))?;
    let rows = validate::run(&bins, &work.path)?;
    for r in &rows {
        out.write(r)?;
    }
    println!("wrote {}", out.path.display());
    if rows.iter().any(|r| r["pass"] != Value::Bool(true)) {
        bail!("emulator validation failed");
    }
    Ok(())
}

/// Fails with the names of the programs the plan runs that are not on `PATH`. Why: a
/// fresh machine without rsync failed a whole sweep with "rsync daemon not ready after
/// 15s", minutes in and after building everything.
fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| dir.join(tool).is_file())
}

fn check_tools(plan: &plan::Plan) -> Result<()> {
    let rsync = plan
        .cells
        .iter()
        .flat_map(|c| &c.jobs)
        .any(|j| j.workload == plan::Workload::Rsync);
    let mut needed = vec!["curl", "python3", "ip"];
    if rsync {
        needed.extend(["rsync", "proxychains4"]);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let missing: Vec<&str> = needed
        .into_iter()
        .filter(|tool| !std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
        .collect();
    if !missing.is_empty() {
        bail!(
            "missing on PATH: {} (e.g. `apt-get install proxychains4 rsync curl python3 iproute2`)",
            missing.join(", ")
        );
    }
    Ok(())
}

fn run_mode(mode: Mode, args: &Args) -> Result<()> {
    let plan = args.filter.apply(plan::plan(mode, args.with_30));
    if plan.cells.is_empty() && plan.fairness.is_none() {
        bail!("the filters leave nothing to run");
    }
    let bins = Bins::locate()?;
    let work = WorkDir::create()?;
    let out_path = match (&args.out, mode) {
        (Some(p), _) => p.clone(),
        (None, Mode::Smoke) => work.path.join("netbench-smoke.json"),
        (None, _) => mode_out(mode),
    };
    let mut out = Out::create(&out_path)?;
    let mut ctx = Ctx {
        bins: &bins,
        work: &work,
        files: Default::default(),
        mode: mode.name(),
    };
    let extra: Vec<u64> = plan.fairness.iter().map(fairness_size).collect();
    ctx.make_files(&plan, &extra)?;
    let start = ctcp_runtime::clock::now();
    let rows = run_plan(&ctx, &plan, &mut out)?;
    println!(
        "\n## netbench --{} ({:.0} s)\n\nGoodput Mbit/s (efficiency); T = timed out, ! = not byte-exact\n",
        mode.name(),
        start.elapsed().as_secs_f64()
    );
    print!("{}", report::markdown(&rows));
    println!("\nwrote {}", out.path.display());
    if args.plots {
        write_plots(&rows, &out_path)?;
    }
    if mode == Mode::Smoke {
        smoke_check(&rows)?;
    }
    Ok(())
}

/// `--chain`: the heterogeneous satellite + radio path, one tunnel against two in cascade.
fn chain_mode(args: &Args) -> Result<()> {
    let bins = Bins::locate()?;
    let work = WorkDir::create()?;
    let out_path = args
        .out
        .clone()
        .unwrap_or_else(|| results_dir().join("netbench-chain.json"));
    let mut out = Out::create(&out_path)?;
    let systems: Vec<&str> = args.chain_systems.iter().map(String::as_str).collect();
    let size = args.filter.size.unwrap_or(20_000_000);
    let mut rows = Vec::new();
    let paths = if args.chain_throttle {
        vec![chain::THROTTLED]
    } else {
        vec![chain::CHAIN, chain::CHAIN_REVERSED]
    };
    for segs in paths {
        rows.extend(chain::run(
            &bins,
            &work.path,
            &work.www,
            &mut out,
            segs,
            size,
            args.repeats,
            &systems,
        )?);
    }
    println!("\n| path (client side first) | system | goodput Mbit/s | efficiency | first byte s | wire/goodput, first segment, second | byte-exact | relay peak RSS MB |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let wire = |i: usize| {
            let name = r["segments"][i]["name"].as_str().unwrap_or("?");
            r[format!("wire_per_goodput_{name}")]
                .as_f64()
                .unwrap_or(0.0)
        };
        println!(
            "| {} | {} | {:.2} | {:.3} | {:.2} | {:.3}, {:.3} | {} | {} |",
            r["path"].as_str().unwrap_or("?"),
            r["system"].as_str().unwrap_or("?"),
            r["goodput_bps"].as_f64().unwrap_or(0.0) / 1e6,
            r["efficiency"].as_f64().unwrap_or(0.0),
            r["first_byte_s"].as_f64().unwrap_or(0.0),
            wire(0),
            wire(1),
            r["bytes_ok"],
            r["peak_rss_relay_bytes"]
                .as_u64()
                .map_or_else(|| "-".to_owned(), |b| (b >> 20).to_string()),
        );
    }
    println!("\nwrote {}", out.path.display());
    Ok(())
}

/// `--chain-delay`: the chain's extra delivery delay, one tunnel against the cascade.
fn chain_delay_mode(args: &Args) -> Result<()> {
    let bins = Bins::locate()?;
    let work = WorkDir::create()?;
    let out_path = args
        .out
        .clone()
        .unwrap_or_else(|| results_dir().join("netbench-chain-delay.json"));
    let mut out = Out::create(&out_path)?;
    let systems: Vec<&str> = args
        .chain_systems
        .iter()
        .map(String::as_str)
        .filter(|s| s.starts_with("ctcp"))
        .collect();
    let rate = (args.delay_rate_mbit * 1e6) as u64;
    let repeats = if args.repeats_given { args.repeats } else { 1 };
    for mut segs in [chain::CHAIN, chain::CHAIN_REVERSED] {
        // `--chain-radio-loss 0`: one tunnel over this chain without the radio's loss
        // crosses the satellite as a cascade's satellite session does: the floor of the
        // cascade's delay.
        for s in segs.iter_mut().filter(|s| s.name == "radio") {
            s.loss = args.chain_radio_loss.unwrap_or(s.loss);
        }
        chain::run_delay(
            &bins,
            &work.path,
            &work.www,
            &mut out,
            segs,
            rate,
            args.delay_secs,
            repeats,
            &systems,
        )?;
    }
    println!("wrote {}", out.path.display());
    Ok(())
}

/// `--udp`: a UDP stream raw and through the tunnel, per cell.
fn udp_mode(args: &Args) -> Result<()> {
    let bins = Bins::locate()?;
    let work = WorkDir::create()?;
    let out_path = args
        .out
        .clone()
        .unwrap_or_else(|| results_dir().join("netbench-udp.json"));
    let mut out = Out::create(&out_path)?;
    let traffic = args
        .udp_traffic
        .iter()
        .map(|t| match t.as_str() {
            "stream" => Ok(udp::STREAM),
            "voip" => Ok(udp::VOIP),
            other => bail!("unknown --udp-traffic {other} (stream, voip)"),
        })
        .collect::<Result<Vec<_>>>()?;
    let cells = udp::cells(&args.filter.rtts, &args.filter.losses, &args.udp_gilbert);
    let repeats = if args.repeats_given { args.repeats } else { 1 };
    let rows = udp::run(
        &bins,
        &work.path,
        &work.www,
        &mut out,
        &cells,
        &traffic,
        args.udp_secs,
        repeats,
    )?;
    print!("\n{}", udp::markdown(&rows));
    println!("\nwrote {}", out.path.display());
    Ok(())
}

/// `--tandem`: seed 003's tandem, plain TCP against one tunnel and two in cascade.
fn tandem_mode(args: &Args) -> Result<()> {
    let bins = Bins::locate()?;
    let work = WorkDir::create()?;
    let out_path = args
        .out
        .clone()
        .unwrap_or_else(|| results_dir().join("netbench-tandem.json"));
    let mut out = Out::create(&out_path)?;
    let plan = tandem::TandemPlan {
        losses: if args.filter.losses.is_empty() {
            vec![0.0, 0.1, 0.2, 0.3]
        } else {
            args.filter.losses.clone()
        },
        flows: args.tandem_flows.clone(),
        systems: args.tandem_systems.clone(),
        warmup: std::time::Duration::from_secs(4),
        measure: std::time::Duration::from_secs(args.tandem_secs),
        repeats: if args.repeats_given { args.repeats } else { 1 },
    };
    let rows = tandem::run(&bins, &work.path, &work.www, &mut out, &plan)?;
    println!("\n{}", tandem::markdown(&rows));
    println!("wrote {}", out.path.display());
    if args.plots {
        for p in plots::tandem_plots(&rows, &plot_dir(&out_path))? {
            println!("plot: {}", p.display());
        }
    }
    Ok(())
}

/// `--multipath`: two parallel paths, ctcp against single paths and kernel MPTCP.
fn multipath_mode(args: &Args) -> Result<()> {
    let bins = Bins::locate()?;
    let work = WorkDir::create()?;
    let out_path = args
        .out
        .clone()
        .unwrap_or_else(|| results_dir().join("netbench-multipath.json"));
    let mut out = Out::create(&out_path)?;
    let config_text = match &args.mp_config {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => multipath::MP_FORWARD_CONFIG.to_owned(),
    };
    let support = if args.ctcp_multipath {
        let p = work.path.join("mp-forward.toml");
        std::fs::write(&p, &config_text)?;
        multipath::MpSupport::Available(p)
    } else {
        multipath::probe_multipath(&bins, &work.path, &config_text)?
    };
    if let multipath::MpSupport::Unavailable(why) = &support {
        eprintln!("netbench: ctcp-mp {why}");
    }
    let mut cells = multipath::cells(args.failover_path);
    cells.retain(|c| args.mp_cells.iter().any(|n| n == c.name));
    if let Some(size) = args.filter.size {
        for c in &mut cells {
            c.size = size;
        }
    }
    let plan = multipath::MpPlan {
        cells,
        systems: args.mp_systems.clone(),
        support,
    };
    let start = ctcp_runtime::clock::now();
    let rows = multipath::run(&bins, &work.path, &work.www, &mut out, &plan)?;
    println!(
        "\n## netbench --multipath ({:.0} s)\n\nGoodput Mbit/s (efficiency against the sum of the paths' capacities); T = timed out, ! = not byte-exact\n{}",
        start.elapsed().as_secs_f64(),
        multipath::markdown(&rows)
    );
    println!("wrote {}", out.path.display());
    Ok(())
}

/// `--smoke` passes only if every ctcp transfer arrived byte-exact.
fn smoke_check(rows: &[Value]) -> Result<()> {
    let ctcp: Vec<&Value> = rows.iter().filter(|r| r["system"] == "ctcp").collect();
    if ctcp.is_empty() || ctcp.iter().any(|r| r["bytes_ok"] != Value::Bool(true)) {
        bail!("smoke: the ctcp transfer was not byte-exact");
    }
    println!("smoke: ctcp transfer byte-exact: PASS");
    Ok(())
}

fn main() -> Result<()> {
    let args = parse_args()?;
    if let Action::PlotsOnly = args.action {
        return plots_only(args.out);
    }
    if let Action::Run(mode) = args.action {
        // Before touching the host's settings.
        check_tools(&args.filter.apply(plan::plan(mode, args.with_30)))?;
    }
    if let Action::Multipath = args.action {
        if args.mp_systems.iter().any(|s| s.starts_with("mptcp")) && !on_path("mptcpize") {
            bail!("mptcpize is not on PATH (`apt-get install mptcpize`), or leave out the mptcp systems (--mp-systems)");
        }
    }
    procs::install_interrupt_handler()?;
    procs::allow_congestion_controls(&["reno", "cubic", "bbr"])?;
    let r = match args.action {
        Action::Validate => validate_mode(args.out.clone()),
        Action::Chain => chain_mode(&args),
        Action::Tandem => tandem_mode(&args),
        Action::Udp => udp_mode(&args),
        Action::ChainDelay => chain_delay_mode(&args),
        Action::Multipath => multipath_mode(&args),
        Action::Run(mode) => run_mode(mode, &args),
        Action::PlotsOnly => Ok(()),
    };
    // Guards have run by now; a last sweep in case an error skipped one, and the host's
    // allowed congestion controls restored.
    procs::emergency_cleanup();
    r
}
