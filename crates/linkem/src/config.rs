//! The parameters of one direction of an emulated link ([`LinkConfig`]) and
//! their validation.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A parameter that cannot describe a link.
#[derive(Debug, Error, PartialEq)]
pub enum ConfigError {
    /// A probability outside `[0, 1]` (or NaN).
    #[error("{what}: probability {value} is outside [0, 1]")]
    Probability {
        /// Which parameter.
        what: &'static str,
        /// The rejected value.
        value: f64,
    },
    /// A rate of zero bits per second would never deliver anything.
    #[error("rate must be positive (omit it for an unlimited link)")]
    ZeroRate,
    /// Gilbert-Elliott mean loss and burst that no two-state chain reaches.
    #[error("gilbert-elliott: mean loss {mean_loss} with mean burst {mean_burst} packets is unreachable ({reason})")]
    Gilbert {
        /// The requested mean loss.
        mean_loss: f64,
        /// The requested mean burst length in packets.
        mean_burst: f64,
        /// Why it is unreachable.
        reason: &'static str,
    },
    /// A command-line or `key=value` text that does not parse.
    #[error("cannot parse {what} from {text:?}: {reason}")]
    Parse {
        /// What was expected (a rate, a size, a duration, ...).
        what: &'static str,
        /// The text given.
        text: String,
        /// Why it was rejected.
        reason: String,
    },
}

fn check_probability(what: &'static str, value: f64) -> Result<(), ConfigError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::Probability { what, value })
    }
}

/// Two-state Gilbert-Elliott bursty loss, in its simple Gilbert form: the
/// good state loses nothing and the bad state loses every packet.
///
/// Per packet the chain first moves (good → bad with probability `p`,
/// bad → good with probability `r`), then the packet is lost if the chain is
/// in the bad state. The stationary (mean) loss is `p / (p + r)` and a loss
/// burst lasts `1 / r` packets on average. This is the same chain as
/// `ctcp_sim::GilbertElliott`, so real-kernel benchmarks and simulations see
/// the same loss process.
///
/// In JSON either form is accepted: `{"p": 0.0132, "r": 0.25}` or
/// `{"mean_loss": 0.05, "mean_burst": 4}`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "GilbertRepr")]
pub struct GilbertElliott {
    /// Probability of moving from the good to the bad state, per packet.
    pub p: f64,
    /// Probability of moving from the bad to the good state, per packet.
    pub r: f64,
}

impl GilbertElliott {
    /// The chain with transition probabilities `p` (good → bad) and `r`
    /// (bad → good).
    ///
    /// # Errors
    /// [`ConfigError::Probability`] if either is outside `[0, 1]`.
    pub fn from_transitions(p: f64, r: f64) -> Result<Self, ConfigError> {
        check_probability("gilbert-elliott p", p)?;
        check_probability("gilbert-elliott r", r)?;
        Ok(Self { p, r })
    }

    /// The chain with mean loss `mean_loss` and mean burst length
    /// `mean_burst` packets: `r = 1 / mean_burst`,
    /// `p = mean_loss · r / (1 − mean_loss)`.
    ///
    /// # Errors
    /// [`ConfigError::Gilbert`] if `mean_loss` is outside `[0, 1)`,
    /// `mean_burst < 1`, or the pair needs `p > 1`.
    pub fn from_mean(mean_loss: f64, mean_burst: f64) -> Result<Self, ConfigError> {
        let fail = |reason| ConfigError::Gilbert {
            mean_loss,
            mean_burst,
            reason,
        };
        if !(0.0..1.0).contains(&mean_loss) {
            return Err(fail("mean loss must be in [0, 1)"));
        }
        if mean_burst.is_nan() || mean_burst < 1.0 {
            return Err(fail("mean burst must be at least 1 packet"));
        }
        let r = 1.0 / mean_burst;
        let p = mean_loss * r / (1.0 - mean_loss);
        if p > 1.0 {
            return Err(fail("needs a good-to-bad probability above 1"));
        }
        Ok(Self { p, r })
    }

    /// The stationary loss rate `p / (p + r)` (0 if the chain never moves).
    #[must_use]
    pub fn mean_loss(&self) -> f64 {
        if self.p + self.r == 0.0 {
            0.0
        } else {
            self.p / (self.p + self.r)
        }
    }

    /// The mean loss burst length `1 / r` in packets (infinite if `r = 0`).
    #[must_use]
    pub fn mean_burst(&self) -> f64 {
        1.0 / self.r
    }
}

/// The two JSON spellings of [`GilbertElliott`].
#[derive(Deserialize)]
#[serde(untagged, deny_unknown_fields)]
enum GilbertRepr {
    Transitions { p: f64, r: f64 },
    Mean { mean_loss: f64, mean_burst: f64 },
}

impl TryFrom<GilbertRepr> for GilbertElliott {
    type Error = ConfigError;
    fn try_from(repr: GilbertRepr) -> Result<Self, ConfigError> {
        match repr {
            GilbertRepr::Transitions { p, r } => Self::from_transitions(p, r),
            GilbertRepr::Mean {
                mean_loss,
                mean_burst,
            } => Self::from_mean(mean_loss, mean_burst),
        }
    }
}

/// How the jitter of one packet is drawn, for a spread `J` ([`LinkConfig::jitter`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JitterDist {
    /// Uniform in `[0, J]`: mean `J/2`, standard deviation `J/√12` (≈ 0.29·J),
    /// never more than `J`.
    #[default]
    Uniform,
    /// Normal with mean `J/2` and standard deviation `J/4`, clipped to
    /// `[0, ∞)`: 95 % of packets fall in `[0, J]` like the uniform draw, but a
    /// packet now and then (2.3 % beyond `J`, 0.13 % beyond `1.25·J`) is much
    /// later, as on a real path. The clip at 0 (2.3 % of draws) raises the
    /// mean by under 0.3 % of `J`.
    Normal,
}

impl JitterDist {
    /// `"uniform"` or `"normal"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Uniform => "uniform",
            Self::Normal => "normal",
        }
    }
}

impl std::str::FromStr for JitterDist {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "uniform" => Ok(Self::Uniform),
            "normal" => Ok(Self::Normal),
            other => Err(ConfigError::Parse {
                what: "jitter distribution",
                text: other.to_owned(),
                reason: "expected uniform or normal".to_owned(),
            }),
        }
    }
}

/// Everything one direction of the emulated link does to packets.
///
/// A packet goes through, in order: the drop-tail queue and serialisation at
/// `rate_bps`; channel loss (Bernoulli `loss`, then Gilbert-Elliott); the
/// one-way `delay` plus jitter; with probability `reorder` an extra
/// `reorder_delay`; and with probability `duplicate` a second copy. Loss
/// comes after the bottleneck, so a lost packet has still used link
/// capacity, as on a real radio or satellite channel (and as in ctcp-sim);
/// goodput can then reach at most `rate · (1 − loss)`.
///
/// The default is a perfect link: no delay, no limit, no loss. In JSON
/// every field is optional and durations are humantime strings (`"250ms"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkConfig {
    /// Fixed one-way propagation delay.
    #[serde(with = "humantime_serde")]
    pub delay: Duration,
    /// Spread `J` of the extra delay drawn per packet: uniform in `[0, J]` by
    /// default (see [`JitterDist`]), so the mean one-way delay is
    /// `delay + jitter / 2` (the ctcp-sim convention).
    #[serde(with = "humantime_serde")]
    pub jitter: Duration,
    /// How the jitter is drawn; uniform unless given (`"normal"` in JSON).
    pub jitter_dist: JitterDist,
    /// Whether jitter may reorder packets. When false (the default) a packet
    /// never leaves before one that arrived ahead of it: its release time is
    /// raised to its predecessor's, so jitter only bunches packets.
    pub jitter_reorder: bool,
    /// Bottleneck rate in bits per second; `None` means unlimited (no
    /// serialisation delay, no queue).
    pub rate_bps: Option<u64>,
    /// Drop-tail queue size in bytes: a packet is dropped if the bytes
    /// waiting (including the one being serialised) plus its own exceed
    /// this. A packet arriving at an empty queue is always accepted. Only
    /// used with `rate_bps`.
    pub queue_bytes: u64,
    /// Independent (Bernoulli) loss probability per packet.
    pub loss: f64,
    /// Bursty loss, applied in addition to `loss`.
    pub gilbert_elliott: Option<GilbertElliott>,
    /// Probability that a packet is held back by `reorder_delay`, so that
    /// later packets overtake it.
    pub reorder: f64,
    /// How long a reordered packet is held back.
    #[serde(with = "humantime_serde")]
    pub reorder_delay: Duration,
    /// Probability that a packet is delivered twice (the copy follows the
    /// original immediately and is not lost or delayed separately).
    pub duplicate: f64,
    /// Seed of this direction's random stream. Two links with the same
    /// configuration and seed fed the same packets at the same times make
    /// the same choices.
    pub seed: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            jitter_dist: JitterDist::Uniform,
            jitter_reorder: false,
            rate_bps: None,
            queue_bytes: DEFAULT_QUEUE_BYTES,
            loss: 0.0,
            gilbert_elliott: None,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            duplicate: 0.0,
            seed: 0,
        }
    }
}

/// Default drop-tail queue: 125,000 bytes, 100 ms at 10 Mbit/s.
pub const DEFAULT_QUEUE_BYTES: u64 = 125_000;

impl LinkConfig {
    /// Checks that every parameter describes a possible link.
    ///
    /// # Errors
    /// The first parameter out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_probability("loss", self.loss)?;
        check_probability("reorder", self.reorder)?;
        check_probability("duplicate", self.duplicate)?;
        if let Some(ge) = self.gilbert_elliott {
            GilbertElliott::from_transitions(ge.p, ge.r)?;
        }
        if self.rate_bps == Some(0) {
            return Err(ConfigError::ZeroRate);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gilbert_from_mean_round_trips() {
        let ge = GilbertElliott::from_mean(0.05, 4.0).unwrap();
        assert!((ge.r - 0.25).abs() < 1e-12);
        assert!((ge.mean_loss() - 0.05).abs() < 1e-12);
        assert!((ge.mean_burst() - 4.0).abs() < 1e-12);
        assert!(GilbertElliott::from_mean(1.0, 4.0).is_err());
        assert!(GilbertElliott::from_mean(0.05, 0.5).is_err());
        assert!(GilbertElliott::from_mean(0.9, 1.0).is_err());
    }

    #[test]
    fn validate_rejects_bad_values() {
        let ok = LinkConfig::default();
        assert_eq!(ok.validate(), Ok(()));
        let bad = LinkConfig {
            loss: 1.5,
            ..LinkConfig::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(ConfigError::Probability { what: "loss", .. })
        ));
        let nan = LinkConfig {
            duplicate: f64::NAN,
            ..LinkConfig::default()
        };
        assert!(nan.validate().is_err());
        let zero = LinkConfig {
            rate_bps: Some(0),
            ..LinkConfig::default()
        };
        assert_eq!(zero.validate(), Err(ConfigError::ZeroRate));
    }

    #[test]
    fn deserializes_json_with_both_gilbert_forms() {
        let cfg: LinkConfig = serde_json::from_str(
            r#"{"delay":"250ms","rate_bps":10000000,"loss":0.01,
                "gilbert_elliott":{"mean_loss":0.05,"mean_burst":4},"seed":7}"#,
        )
        .unwrap();
        assert_eq!(cfg.delay, Duration::from_millis(250));
        assert_eq!(cfg.rate_bps, Some(10_000_000));
        assert_eq!(cfg.queue_bytes, DEFAULT_QUEUE_BYTES);
        assert_eq!(cfg.seed, 7);
        let ge = cfg.gilbert_elliott.unwrap();
        assert!((ge.mean_loss() - 0.05).abs() < 1e-12);

        assert_eq!(cfg.jitter_dist, JitterDist::Uniform, "uniform unless given");
        let cfg: LinkConfig =
            serde_json::from_str(r#"{"jitter":"25ms","jitter_dist":"normal"}"#).unwrap();
        assert_eq!(cfg.jitter_dist, JitterDist::Normal);
        assert!(serde_json::from_str::<LinkConfig>(r#"{"jitter_dist":"pareto"}"#).is_err());

        let cfg: LinkConfig =
            serde_json::from_str(r#"{"gilbert_elliott":{"p":0.01,"r":0.5}}"#).unwrap();
        assert_eq!(
            cfg.gilbert_elliott,
            Some(GilbertElliott { p: 0.01, r: 0.5 })
        );
        assert!(
            serde_json::from_str::<LinkConfig>(r#"{"gilbert_elliott":{"p":2,"r":0.5}}"#).is_err()
        );
        assert!(serde_json::from_str::<LinkConfig>(r#"{"nonsense":1}"#).is_err());
    }
}
