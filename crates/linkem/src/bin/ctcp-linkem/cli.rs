//! Command line of ctcp-linkem: symmetric link flags, per-direction
//! `KEY=VALUE` overrides, namespace and output options.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use ctcp_linkem::units::{parse_bytes, parse_duration, parse_probability, parse_rate};
use ctcp_linkem::{ChainConfig, EmulatorConfig, GilbertElliott, JitterDist, LinkConfig, Topology};

/// Added to `--seed` for the B→A direction, so the two directions draw
/// independent streams from one seed.
const B_TO_A_SEED_OFFSET: u64 = 0x9E37_79B9_7F4A_7C15;

/// ctcp-linkem: joins two network namespaces through TUN devices and
/// emulates a link between them (delay, jitter, rate and queue, loss,
/// reordering, duplication), one set of impairments per direction.
#[derive(Debug, Parser)]
#[command(
    version,
    about,
    after_help = "DIRECTIONS:
  a_to_b carries packets sent from namespace A (--ns-a, address --addr-a) to B; b_to_a the
  reverse. Link flags apply to both; --a-to-b / --b-to-a override keys for one direction:
  keys are the link flag names without dashes: delay, jitter, jitter-dist, jitter-reorder,
  rate, queue, loss, ge-loss, ge-burst, ge-p, ge-r, reorder, reorder-delay, dup, seed.

OUTPUT:
  Prints `ready` on stderr (and writes --ready-file) once both namespaces are configured.
  Writes one JSON object per direction per --stats-interval, and once more with
  \"final\":true at exit, to stdout or --stats-file.

EXAMPLES:
  ctcp-linkem --delay 250ms --rate 10mbit --queue 125000 --loss 0.05 --seed 1
  ctcp-linkem --delay 250ms --rate 10mbit --ge-loss 0.05 --ge-burst 4 --ready-file /tmp/up
  ctcp-linkem --delay 10ms --b-to-a rate=1mbit,loss=0 --loss 1%
  ctcp-linkem --delay 37500us --jitter 25ms --jitter-dist normal --rate 10mbit
  ip netns exec ctcp-a iperf3 -c 10.77.0.2

CHAINS:
  Each --hop adds one link to a line of namespaces: ctcp-a, ctcp-m1, ..., ctcp-b (--ns-a,
  --mid-prefix, --ns-b). A hop takes the link flags, then its own KEY=VALUE items (the keys
  above) for both directions; --a-to-b/--b-to-a apply to every hop. Link k joins 10.77.k.1
  (toward ctcp-a) and 10.77.k.2; every namespace forwards, so ctcp-a reaches ctcp-b's
  10.77.K.2 (K = hops - 1) across all links. --client-ns / --server-ns add namespaces
  joined to the ends by plain veth pairs (10.77.200.1 and 10.77.201.2).
  ctcp-linkem --hop delay=300ms,rate=10mbit,loss=1%,seed=7 --hop delay=10ms,rate=50mbit,loss=15%,seed=8
  ip netns exec ctcp-a ping 10.77.1.2   # across both links
  ctcp-linkem --cleanup   # remove namespaces left by a killed run

PARALLEL PATHS:
  Each --path adds one link between --ns-a and --ns-b, side by side, with the same KEY=VALUE
  items as --hop. Path k joins 10.77.k.1 (in A) and 10.77.k.2 (in B) over linkemK; traffic
  from 10.77.k.1 leaves A by path k (policy routing), and B answers each A address over its
  path. With --control PATH, commands on that Unix datagram socket cut a path and restore it
  (`down K`, `up K`, `status`); --ctl sends one and prints the reply.
  ctcp-linkem --path delay=300ms,rate=10mbit,loss=1% --path delay=30ms,rate=5mbit,loss=5% --control /tmp/lk.ctl
  ip netns exec ctcp-a curl --interface 10.77.1.1 http://10.77.0.2:8000/   # over path 1
  ctcp-linkem --control /tmp/lk.ctl --ctl 'down 1'"
)]
pub(crate) struct Cli {
    #[command(flatten)]
    link: LinkArgs,
    /// Overrides for A→B only: KEY=VALUE[,KEY=VALUE...], e.g. loss=0.1,rate=5mbit.
    #[arg(long, value_name = "KEY=VALUE,...")]
    a_to_b: Vec<String>,
    /// Overrides for B→A only: KEY=VALUE[,KEY=VALUE...].
    #[arg(long, value_name = "KEY=VALUE,...")]
    b_to_a: Vec<String>,
    /// One link of a chain (repeat for each, in order from --ns-a): KEY=VALUE[,...] over
    /// the link flags, both directions, e.g. delay=300ms,rate=10mbit,loss=1%,seed=7; a hop
    /// without seed= uses --seed plus its index. Without --hop: one link, the flags alone.
    #[arg(long, value_name = "KEY=VALUE,...", conflicts_with = "path")]
    hop: Vec<String>,
    /// One of several parallel paths between --ns-a and --ns-b (repeat for each):
    /// KEY=VALUE[,...] as for --hop; a path without seed= uses --seed plus its index.
    #[arg(long, value_name = "KEY=VALUE,...")]
    path: Vec<String>,
    /// Answer run-time commands (`down K`, `up K`, `status`) on a Unix datagram
    /// socket at this path.
    #[arg(long, value_name = "PATH")]
    pub(crate) control: Option<PathBuf>,
    /// Send this command to the running emulator's --control socket, print the reply
    /// and exit.
    #[arg(long, value_name = "COMMAND", requires = "control")]
    pub(crate) ctl: Option<String>,
    /// Prefix of the middle namespaces of a chain (PREFIX1, PREFIX2, ...).
    #[arg(long, default_value = "ctcp-m")]
    pub(crate) mid_prefix: String,
    /// Add a client namespace joined to --ns-a by a veth pair, routed through the chain.
    #[arg(long, value_name = "NAME")]
    pub(crate) client_ns: Option<String>,
    /// Add a server namespace joined to --ns-b by a veth pair, routed through the chain.
    #[arg(long, value_name = "NAME")]
    pub(crate) server_ns: Option<String>,
    /// Name of network namespace A.
    #[arg(long, default_value = "ctcp-a")]
    pub(crate) ns_a: String,
    /// Name of network namespace B.
    #[arg(long, default_value = "ctcp-b")]
    pub(crate) ns_b: String,
    /// Address of the link's end in A.
    #[arg(long, default_value = "10.77.0.1")]
    addr_a: Ipv4Addr,
    /// Address of the link's end in B.
    #[arg(long, default_value = "10.77.0.2")]
    addr_b: Ipv4Addr,
    /// Name of the TUN interface inside both namespaces.
    #[arg(long, default_value = "linkem0")]
    dev: String,
    /// MTU of both interfaces.
    #[arg(long, default_value_t = 1500)]
    mtu: u16,
    /// Period of the statistics lines (0 = only at exit).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub(crate) stats_interval: Duration,
    /// Write statistics to this file instead of stdout.
    #[arg(long, value_name = "PATH")]
    pub(crate) stats_file: Option<PathBuf>,
    /// Create this file (containing `ready`) once the link is up; removed at exit.
    #[arg(long, value_name = "PATH")]
    pub(crate) ready_file: Option<PathBuf>,
    /// Leave the namespaces in place at exit (the TUN devices still go).
    #[arg(long)]
    keep: bool,
    /// Delete the namespaces named by --ns-a and --ns-b (and a chain's middle ones,
    /// --mid-prefix followed by a number, and --client-ns/--server-ns) if they exist,
    /// then exit.
    #[arg(long)]
    pub(crate) cleanup: bool,
}

/// The link flags shared by both directions.
#[derive(Debug, clap::Args)]
struct LinkArgs {
    /// One-way propagation delay, e.g. 250ms.
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    delay: Duration,
    /// Extra delay per packet, uniform in [0, JITTER] (mean delay = delay + jitter/2).
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    jitter: Duration,
    /// Jitter distribution: uniform in [0, JITTER], or normal with mean JITTER/2 and
    /// standard deviation JITTER/4, clipped at 0 (2.3 % of packets exceed JITTER).
    #[arg(long, default_value = "uniform", value_parser = parse_jitter_dist)]
    jitter_dist: JitterDist,
    /// Let jitter reorder packets (default: jitter keeps FIFO order).
    #[arg(long)]
    jitter_reorder: bool,
    /// Bottleneck rate, e.g. 10mbit, 500kbit, 1gbit [default: unlimited].
    #[arg(long, value_parser = parse_rate)]
    rate: Option<u64>,
    /// Drop-tail queue in bytes (with --rate), e.g. 125000 or 125k.
    #[arg(long, default_value = "125000", value_parser = parse_bytes)]
    queue: u64,
    /// Bernoulli loss probability, e.g. 0.05 or 5%.
    #[arg(long, default_value = "0", value_parser = parse_probability)]
    loss: f64,
    /// Gilbert-Elliott mean loss (with --ge-burst).
    #[arg(long, value_parser = parse_probability)]
    ge_loss: Option<f64>,
    /// Gilbert-Elliott mean loss burst length in packets (with --ge-loss).
    #[arg(long)]
    ge_burst: Option<f64>,
    /// Gilbert-Elliott good→bad transition probability (with --ge-r; instead of --ge-loss).
    #[arg(long, value_parser = parse_probability, conflicts_with_all = ["ge_loss", "ge_burst"])]
    ge_p: Option<f64>,
    /// Gilbert-Elliott bad→good transition probability (with --ge-p).
    #[arg(long, value_parser = parse_probability, conflicts_with_all = ["ge_loss", "ge_burst"])]
    ge_r: Option<f64>,
    /// Probability that a packet is held back by --reorder-delay.
    #[arg(long, default_value = "0", value_parser = parse_probability)]
    reorder: f64,
    /// How long a reordered packet is held back.
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    reorder_delay: Duration,
    /// Duplication probability.
    #[arg(long, default_value = "0", value_parser = parse_probability)]
    dup: f64,
    /// Seed of the random choices (B→A uses a stream derived from it).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn parse_jitter_dist(s: &str) -> Result<JitterDist, ctcp_linkem::ConfigError> {
    s.parse()
}

/// One direction's parameters before the Gilbert-Elliott pair is resolved.
#[derive(Clone, Debug)]
struct Spec {
    link: LinkConfig,
    ge_loss: Option<f64>,
    ge_burst: Option<f64>,
    ge_p: Option<f64>,
    ge_r: Option<f64>,
}

impl Spec {
    fn from_args(a: &LinkArgs) -> Self {
        Self {
            link: LinkConfig {
                delay: a.delay,
                jitter: a.jitter,
                jitter_dist: a.jitter_dist,
                jitter_reorder: a.jitter_reorder,
                rate_bps: a.rate,
                queue_bytes: a.queue,
                loss: a.loss,
                gilbert_elliott: None,
                reorder: a.reorder,
                reorder_delay: a.reorder_delay,
                duplicate: a.dup,
                seed: a.seed,
            },
            ge_loss: a.ge_loss,
            ge_burst: a.ge_burst,
            ge_p: a.ge_p,
            ge_r: a.ge_r,
        }
    }

    /// Applies `KEY=VALUE[,KEY=VALUE...]` items.
    fn apply(&mut self, items: &[String]) -> anyhow::Result<()> {
        for item in items.iter().flat_map(|s| s.split(',')) {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let Some((key, value)) = item.split_once('=') else {
                bail!("override {item:?} is not KEY=VALUE");
            };
            self.set(key.trim(), value.trim())
                .with_context(|| format!("override {item:?}"))?;
        }
        Ok(())
    }

    fn set(&mut self, key: &str, value: &str) -> anyhow::Result<()> {
        let l = &mut self.link;
        match key.replace('_', "-").as_str() {
            "delay" => l.delay = parse_duration(value)?,
            "jitter" => l.jitter = parse_duration(value)?,
            "jitter-dist" => l.jitter_dist = parse_jitter_dist(value)?,
            "jitter-reorder" => {
                l.jitter_reorder = value.parse().context("expected true or false")?
            }
            "rate" => {
                l.rate_bps = match value {
                    "none" | "unlimited" => None,
                    v => Some(parse_rate(v)?),
                }
            }
            "queue" => l.queue_bytes = parse_bytes(value)?,
            "loss" => l.loss = parse_probability(value)?,
            "reorder" => l.reorder = parse_probability(value)?,
            "reorder-delay" => l.reorder_delay = parse_duration(value)?,
            "dup" => l.duplicate = parse_probability(value)?,
            "seed" => l.seed = value.parse().context("expected an unsigned integer")?,
            "ge-loss" => self.ge_loss = Some(parse_probability(value)?),
            "ge-burst" => self.ge_burst = Some(value.parse().context("expected a number")?),
            "ge-p" => self.ge_p = Some(parse_probability(value)?),
            "ge-r" => self.ge_r = Some(parse_probability(value)?),
            other => bail!("unknown key {other:?}"),
        }
        Ok(())
    }

    /// The final configuration, with the Gilbert-Elliott chain resolved.
    fn resolve(self) -> anyhow::Result<LinkConfig> {
        let ge = match (self.ge_loss, self.ge_burst, self.ge_p, self.ge_r) {
            (None, None, None, None) => None,
            (Some(0.0), _, None, None) => None,
            (Some(loss), Some(burst), None, None) => Some(GilbertElliott::from_mean(loss, burst)?),
            (Some(_), None, None, None) => {
                bail!("--ge-loss needs --ge-burst (mean burst length in packets)")
            }
            (None, Some(_), None, None) => bail!("--ge-burst needs --ge-loss"),
            (None, None, Some(p), Some(r)) => Some(GilbertElliott::from_transitions(p, r)?),
            (None, None, _, _) => bail!("--ge-p and --ge-r go together"),
            _ => bail!(
                "give Gilbert-Elliott loss as --ge-loss/--ge-burst or as --ge-p/--ge-r, not both"
            ),
        };
        let mut link = self.link;
        link.gilbert_elliott = ge;
        link.validate()?;
        Ok(link)
    }
}

impl Cli {
    /// The chain the flags describe: with no --hop, the single link of
    /// [`Cli::emulator_config`], plus any end namespaces.
    pub(crate) fn chain_config(&self) -> anyhow::Result<ChainConfig> {
        let one = self.emulator_config()?;
        let mut chain = ChainConfig::from(&one);
        chain.client_ns = self.client_ns.clone();
        chain.server_ns = self.server_ns.clone();
        if !self.path.is_empty() {
            chain.topology = Topology::Parallel;
            chain.hops = self.links(&self.path, "--path")?;
            return Ok(chain);
        }
        if self.hop.is_empty() {
            return Ok(chain);
        }
        let k = self.hop.len();
        chain.hops = self.links(&self.hop, "--hop")?;
        chain.namespaces = std::iter::once(self.ns_a.clone())
            .chain((1..k).map(|j| format!("{}{j}", self.mid_prefix)))
            .chain(std::iter::once(self.ns_b.clone()))
            .collect();
        Ok(chain)
    }

    /// Both directions of each link given by `specs` (`--hop` or `--path` items over
    /// the link flags; a link without `seed=` uses `--seed` plus its index).
    fn links(&self, specs: &[String], flag: &str) -> anyhow::Result<Vec<(LinkConfig, LinkConfig)>> {
        let mut links = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let mut ab = Spec::from_args(&self.link);
            ab.link.seed = self.link.seed.wrapping_add(i as u64);
            ab.apply(std::slice::from_ref(spec))
                .with_context(|| format!("{flag} {}", i + 1))?;
            let mut ba = ab.clone();
            ba.link.seed = ab.link.seed.wrapping_add(B_TO_A_SEED_OFFSET);
            ab.apply(&self.a_to_b).context("--a-to-b")?;
            ba.apply(&self.b_to_a).context("--b-to-a")?;
            links.push((
                ab.resolve()
                    .with_context(|| format!("{flag} {}: A to B", i + 1))?,
                ba.resolve()
                    .with_context(|| format!("{flag} {}: B to A", i + 1))?,
            ));
        }
        Ok(links)
    }

    /// The emulator configuration the flags describe.
    pub(crate) fn emulator_config(&self) -> anyhow::Result<EmulatorConfig> {
        let base = Spec::from_args(&self.link);
        let mut a_to_b = base.clone();
        a_to_b.apply(&self.a_to_b).context("--a-to-b")?;
        let mut b_to_a = base;
        b_to_a.link.seed = self.link.seed.wrapping_add(B_TO_A_SEED_OFFSET);
        b_to_a.apply(&self.b_to_a).context("--b-to-a")?;
        Ok(EmulatorConfig {
            ns_a: self.ns_a.clone(),
            ns_b: self.ns_b.clone(),
            addr_a: self.addr_a,
            addr_b: self.addr_b,
            dev: self.dev.clone(),
            mtu: self.mtu,
            a_to_b: a_to_b.resolve().context("A to B")?,
            b_to_a: b_to_a.resolve().context("B to A")?,
            keep: self.keep,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> anyhow::Result<EmulatorConfig> {
        let mut full = vec!["ctcp-linkem"];
        full.extend_from_slice(args);
        Cli::try_parse_from(full)?.emulator_config()
    }

    #[test]
    fn symmetric_flags_apply_to_both_directions() {
        let c = parse(&[
            "--delay",
            "250ms",
            "--rate",
            "10mbit",
            "--queue",
            "125000",
            "--loss",
            "0.05",
            "--ge-loss",
            "0.05",
            "--ge-burst",
            "4",
            "--reorder",
            "0.02",
            "--reorder-delay",
            "50ms",
            "--dup",
            "0",
            "--seed",
            "1",
        ])
        .unwrap();
        for l in [&c.a_to_b, &c.b_to_a] {
            assert_eq!(l.delay, Duration::from_millis(250));
            assert_eq!(l.rate_bps, Some(10_000_000));
            assert_eq!(l.queue_bytes, 125_000);
            assert!((l.loss - 0.05).abs() < 1e-12);
            let ge = l.gilbert_elliott.unwrap();
            assert!((ge.mean_loss() - 0.05).abs() < 1e-12);
            assert!((ge.mean_burst() - 4.0).abs() < 1e-12);
            assert!((l.reorder - 0.02).abs() < 1e-12);
            assert_eq!(l.reorder_delay, Duration::from_millis(50));
        }
        assert_eq!(c.a_to_b.seed, 1);
        assert_ne!(c.b_to_a.seed, c.a_to_b.seed);
        assert_eq!(c.a_to_b.jitter_dist, JitterDist::Uniform);
        assert_eq!(c.ns_a, "ctcp-a");
        assert_eq!(c.addr_b, Ipv4Addr::new(10, 77, 0, 2));
    }

    #[test]
    fn per_direction_overrides() {
        let c = parse(&[
            "--delay",
            "10ms",
            "--loss",
            "1%",
            "--b-to-a",
            "rate=1mbit,loss=0",
            "--a-to-b",
            "ge_p=0.01",
            "--a-to-b",
            "ge-r=0.5,seed=9",
        ])
        .unwrap();
        assert_eq!(c.b_to_a.rate_bps, Some(1_000_000));
        assert_eq!(c.b_to_a.loss, 0.0);
        assert_eq!(c.a_to_b.rate_bps, None);
        assert!((c.a_to_b.loss - 0.01).abs() < 1e-12);
        assert_eq!(
            c.a_to_b.gilbert_elliott,
            Some(GilbertElliott { p: 0.01, r: 0.5 })
        );
        assert_eq!(c.a_to_b.seed, 9);
        assert_eq!(c.b_to_a.delay, Duration::from_millis(10));

        let c = parse(&[
            "--jitter",
            "25ms",
            "--jitter-dist",
            "normal",
            "--a-to-b",
            "jitter-dist=uniform",
        ])
        .unwrap();
        assert_eq!(c.b_to_a.jitter_dist, JitterDist::Normal);
        assert_eq!(c.a_to_b.jitter_dist, JitterDist::Uniform);
        assert_eq!(c.a_to_b.jitter, Duration::from_millis(25));
    }

    fn chain(args: &[&str]) -> anyhow::Result<ChainConfig> {
        let mut full = vec!["ctcp-linkem"];
        full.extend_from_slice(args);
        Cli::try_parse_from(full)?.chain_config()
    }

    #[test]
    fn hops_make_a_chain_with_their_own_parameters_and_seeds() {
        let c = chain(&[
            "--rate",
            "20mbit",
            "--hop",
            "delay=300ms,rate=10mbit,loss=1%,seed=7",
            "--hop",
            "delay=10ms,loss=15%",
            "--hop",
            "queue=50k",
            "--server-ns",
            "srv",
        ])
        .unwrap();
        assert_eq!(c.namespaces, ["ctcp-a", "ctcp-m1", "ctcp-m2", "ctcp-b"]);
        assert_eq!(c.hops.len(), 3);
        let (ab, ba) = &c.hops[0];
        assert_eq!(ab.delay, Duration::from_millis(300));
        assert_eq!(ba.rate_bps, Some(10_000_000));
        assert!((ba.loss - 0.01).abs() < 1e-12);
        assert_eq!(ab.seed, 7);
        assert_eq!(ba.seed, 7u64.wrapping_add(B_TO_A_SEED_OFFSET));
        let (ab1, _) = &c.hops[1];
        assert_eq!(
            ab1.rate_bps,
            Some(20_000_000),
            "the flags are every hop's base"
        );
        assert_eq!(ab1.seed, 2, "--seed 1 plus the hop's index");
        assert_eq!(c.hops[2].0.queue_bytes, 50_000);
        assert_eq!(c.hops[2].0.delay, Duration::ZERO);
        assert_eq!(c.server_ns.as_deref(), Some("srv"));
        assert_eq!(c.client_ns, None);
        // Without --hop: the two-namespace link, unchanged.
        let one = chain(&["--delay", "5ms"]).unwrap();
        assert_eq!(one.namespaces, ["ctcp-a", "ctcp-b"]);
        assert_eq!(one.hops.len(), 1);
        assert_eq!(one.hops[0].0.delay, Duration::from_millis(5));
        assert!(chain(&["--hop", "bogus=1"]).is_err());
        assert!(chain(&["--hop", "loss=2"]).is_err());
    }

    #[test]
    fn paths_join_the_two_namespaces_side_by_side() {
        let c = chain(&[
            "--path",
            "delay=300ms,rate=10mbit,loss=1%",
            "--path",
            "delay=30ms,rate=5mbit,loss=5%,seed=9",
            "--b-to-a",
            "queue=50k",
        ])
        .unwrap();
        assert_eq!(c.topology, Topology::Parallel);
        assert_eq!(c.namespaces, ["ctcp-a", "ctcp-b"]);
        assert_eq!(c.hops.len(), 2);
        let (ab0, ba0) = &c.hops[0];
        assert_eq!(ab0.delay, Duration::from_millis(300));
        assert_eq!(ab0.seed, 1, "--seed 1 plus the path's index");
        assert_eq!(ba0.queue_bytes, 50_000);
        assert_eq!(ab0.queue_bytes, 125_000);
        let (ab1, ba1) = &c.hops[1];
        assert_eq!(ab1.rate_bps, Some(5_000_000));
        assert!((ba1.loss - 0.05).abs() < 1e-12);
        assert_eq!(ab1.seed, 9);
        assert_ne!(ba1.seed, ab1.seed);
        assert!(chain(&["--path", "delay=1ms", "--hop", "delay=1ms"]).is_err());
        assert!(chain(&["--path", "loss=2"]).is_err());
    }

    #[test]
    fn rejects_incomplete_or_bad_values() {
        assert!(parse(&["--ge-loss", "0.05"]).is_err());
        assert!(parse(&["--ge-p", "0.1"]).is_err());
        assert!(parse(&["--ge-loss", "0.05", "--ge-burst", "4", "--ge-p", "0.1"]).is_err());
        assert!(parse(&["--loss", "2"]).is_err());
        assert!(parse(&["--rate", "10mbps"]).is_err());
        assert!(parse(&["--a-to-b", "bogus=1"]).is_err());
        assert!(parse(&["--a-to-b", "loss"]).is_err());
        assert!(parse(&["--jitter-dist", "pareto"]).is_err());
        assert!(parse(&["--b-to-a", "jitter-dist=pareto"]).is_err());
    }
}
