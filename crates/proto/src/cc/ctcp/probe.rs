//! Start-up probe: the first flight of slow start as a packet train (Swift-Start style).
//!
//! Why: on a long path slow start spends one round trip per doubling, from the initial
//! window of 32 packets to a BDP of several hundred (≈ 4 rounds at 500 ms / 10 Mbit/s,
//! 2 s of a half-idle link). The first flight already says how fast the bottleneck is: the
//! flight is sent as a train faster than the normal slow-start pace (see
//! [`train_gain`]), the bottleneck spreads it out to its own rate, and the ACKs come back
//! with that spacing. The delivery rate over the ACK-arrival span, times `RTT_min`, is the
//! BDP; the window jumps to a safe fraction of it ([`JUMP_FRACTION`]) and slow start goes
//! on from there, with its delay exit, so an overestimate is corrected by the queue it
//! builds, exactly as without the jump.
//!
//! What counts as delivered: packets acknowledged in the train's ACKs after the first one,
//! plus packets declared lost at the same instant as one of those ACKs (a hole behind an
//! acknowledged packet: it passed the bottleneck too, since random loss on a satellite
//! channel comes after the queue), so 20–30 % random loss does not read as a slow link.
//!
//! When no estimate is made (the window never jumps):
//! - fewer than [`MIN_TRAIN`] packets went out before the first ACK (application limited);
//! - fewer than [`MIN_SAMPLES`] packets were delivered after the first ACK;
//! - the ACKs carry no dispersion: they arrived within less than half the time the train
//!   took to send (ACK aggregation or compression on the return path hides the bottleneck's
//!   spacing), including all at once;
//! - the train's ACKs are not resolved within half an `RTT_min` of the first one: ACKs after
//!   that may be of packets sent in reply to the first ACK (they come one `RTT_min` after
//!   it), and a train spread over more than half a round trip means a BDP of under two
//!   trains, where a jump gains little.
//!
//! The rate is `delivered / max(ack span, send span)`: a train sent slower than the
//! bottleneck measures its own send rate, a lower bound of the bottleneck rate, so the
//! jump is smaller but still safe.

use std::time::{Duration, Instant};

/// Fewest packets in the first flight for a rate estimate.
pub(super) const MIN_TRAIN: u64 = 8;
/// Fewest packets delivered after the first ACK for a rate estimate.
pub(super) const MIN_SAMPLES: u64 = 6;
/// Fraction of the estimated BDP the window jumps to. The jump's flight is paced at the
/// measured rate (no queue of its own), and slow start grows by only a quarter per round
/// above the measured BDP, so an estimate a few percent high (what a paced train gives)
/// still lands below one BDP, and the delay exit corrects a larger error; much lower
/// leaves the first round's link underused (evidence:
/// docs/experiments/code-evidence.md#jump-fraction).
pub(super) const JUMP_FRACTION: f64 = 0.85;
/// The train is paced so the whole first flight leaves within this span (never slower
/// than normal slow-start pacing): 32 packets of 1452 B in 25 ms is ~15 Mbit/s, above the
/// links the train is meant to measure, while a 20 ms / 10 Mbit/s path with a one-BDP
/// queue (18 packets) queues at most ~11 of them.
pub(super) const TRAIN_SPAN: Duration = Duration::from_millis(25);
/// No ACK for this long after the last one ends the measurement (at the next send): the
/// train's ACKs come every few milliseconds at any rate the jump matters for.
pub(super) const QUIET: Duration = Duration::from_millis(25);
/// ACKs spread over at least this multiple of the train's send span: the bottleneck, not
/// the sender, set their spacing.
pub(super) const DISPERSED: f64 = 1.2;
/// A pause this long between sends ends the train: what follows (a probe timeout's
/// packet, a late application write) is not part of the first flight, and its ACK would
/// stretch the measured span.
pub(super) const TRAIN_GAP: Duration = Duration::from_millis(25);

/// Pacing gain for the train at this smoothed RTT: the pacer sends `gain × window / srtt`,
/// so `srtt / TRAIN_SPAN` sends a window in [`TRAIN_SPAN`]. At least `floor`, the normal
/// slow-start gain.
pub(super) fn train_gain(srtt: Duration, floor: f64) -> f64 {
    (srtt.as_secs_f64() / TRAIN_SPAN.as_secs_f64()).max(floor)
}

/// What the train showed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Estimate {
    /// Delivery rate in packets per second.
    pub(super) rate: f64,
    /// Whether the bottleneck spread the train out (ACK span ≥ [`DISPERSED`] × send
    /// span): `rate` is then the bottleneck's rate, not just a lower bound of it.
    pub(super) dispersed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Sending the first flight; no ACK yet.
    Train {
        sent: u64,
        first_sent: Option<Instant>,
        last_sent: Option<Instant>,
        /// A send gap ended the train; later sends are not counted.
        closed: bool,
    },
    /// The first ACK arrived; counting the train's deliveries.
    Measuring {
        train: u64,
        send_span: Duration,
        train_end: Instant,
        first_ack: Instant,
        /// ACKs from here on are not counted (half an `RTT_min` after the first).
        horizon: Instant,
        /// Packets resolved (acknowledged or lost) so far, the first ACK's included.
        resolved: u64,
        /// Packets delivered after the first ACK.
        delivered: u64,
        last_ack: Instant,
    },
    /// Estimate taken (or given up); when the train's last packet left, if it was sent.
    /// `rearm`: the flight was application limited (fewer than [`MIN_TRAIN`] packets), so
    /// the next flight that starts from an empty pipe is a new train.
    Done {
        train_end: Option<Instant>,
        rearm: bool,
    },
}

/// The start-up probe (see the module docs): feed it every send, ACK and loss until it
/// returns a rate from [`Probe::on_ack`] or [`Probe::on_loss`].
#[derive(Debug, Clone)]
pub(super) struct Probe {
    state: State,
}

impl Probe {
    pub(super) fn new() -> Self {
        Probe {
            state: State::Train {
                sent: 0,
                first_sent: None,
                last_sent: None,
                closed: false,
            },
        }
    }

    /// Ends the probe without an estimate of its own: the handshake measured the path.
    /// Packets of a train already sent still count as the train's ([`Probe::in_train`]).
    pub(super) fn skip(&mut self) {
        let train_end = match self.state {
            State::Train { last_sent, .. } => last_sent,
            State::Measuring { train_end, .. } => Some(train_end),
            State::Done { train_end, .. } => train_end,
        };
        self.state = State::Done {
            train_end,
            rearm: false,
        };
    }

    /// Whether the first flight is still being sent (the pacer uses [`train_gain`]).
    pub(super) fn sending_train(&self) -> bool {
        matches!(self.state, State::Train { .. })
    }

    /// Whether a packet sent at `sent_time` belonged to the train (sent no later than its
    /// last packet). The train is sent faster than the bottleneck on purpose, so its own
    /// transient queue shows in the RTT; a loss among its packets must not read as loss
    /// with queueing, or random loss during the train ends slow start far below the BDP
    /// (evidence: docs/experiments/comment-figures.md).
    pub(super) fn in_train(&self, sent_time: Instant) -> bool {
        let last = match self.state {
            State::Train { last_sent, .. } => last_sent,
            State::Measuring { train_end, .. } => Some(train_end),
            State::Done { train_end, .. } => train_end,
        };
        last.is_some_and(|l| sent_time <= l)
    }

    /// `packets` left at `now`. While measuring, a send after the train's ACKs have gone
    /// quiet ([`QUIET`]) ends the measurement: the rest of the train was lost, and waiting
    /// for the next ACK would wait a round trip.
    ///
    /// `from_idle`: nothing else was in flight and the sender is still in slow start. After
    /// an application-limited first flight such a send starts a new train. Why: in the
    /// proxies a session's first flights are a stream OPEN, its result and a request, a
    /// packet or two each; the bulk reply comes a round trip later, and without re-arming
    /// it would ramp up by slow start alone (at 500 ms the probe never fired on the real
    /// link).
    pub(super) fn on_sent(
        &mut self,
        now: Instant,
        packets: u64,
        from_idle: bool,
    ) -> Option<Estimate> {
        if from_idle && matches!(self.state, State::Done { rearm: true, .. }) {
            self.state = State::Train {
                sent: 0,
                first_sent: None,
                last_sent: None,
                closed: false,
            };
        }
        if let State::Measuring { last_ack, .. } = self.state {
            if now.saturating_duration_since(last_ack) >= QUIET {
                return self.finish();
            }
            return None;
        }
        if let State::Train {
            sent,
            first_sent,
            last_sent,
            closed,
        } = &mut self.state
        {
            if *closed || last_sent.is_some_and(|l| now.saturating_duration_since(l) > TRAIN_GAP) {
                *closed = true;
                return None;
            }
            *sent += packets;
            first_sent.get_or_insert(now);
            *last_sent = Some(now);
        }
        None
    }

    /// `acked` packets acknowledged at `now`; `min_rtt` is the path's minimum RTT with this
    /// ACK's sample. Returns the bottleneck rate in packets per second once the train is
    /// resolved.
    pub(super) fn on_ack(
        &mut self,
        now: Instant,
        acked: u64,
        min_rtt: Duration,
    ) -> Option<Estimate> {
        match &mut self.state {
            State::Train {
                sent,
                first_sent,
                last_sent,
                ..
            } => {
                let send_span = match (*first_sent, *last_sent) {
                    (Some(f), Some(l)) => l.saturating_duration_since(f),
                    _ => Duration::ZERO,
                };
                let Some(train_end) = *last_sent else {
                    self.state = State::Done {
                        train_end: None,
                        rearm: true,
                    };
                    return None;
                };
                if *sent < MIN_TRAIN {
                    self.state = State::Done {
                        train_end: Some(train_end),
                        rearm: true,
                    };
                    return None;
                }
                self.state = State::Measuring {
                    train: *sent,
                    send_span,
                    train_end,
                    first_ack: now,
                    horizon: now + min_rtt / 2,
                    resolved: acked,
                    delivered: 0,
                    last_ack: now,
                };
                None
            }
            State::Measuring { .. } => self.resolve(now, acked, true),
            State::Done { .. } => None,
        }
    }

    /// `lost` packets declared lost at `now`. Only losses found by an ACK of the train
    /// (same instant) count as delivered: a hole behind a delivered packet.
    pub(super) fn on_loss(&mut self, now: Instant, lost: u64) -> Option<Estimate> {
        self.resolve(now, lost, false)
    }

    /// While measuring: `n` more of the train's packets resolved at `now`, acknowledged
    /// (`acked`) or declared lost. Acknowledged ones were delivered; lost ones count as
    /// delivered only when an ACK of the train after the first found them at that instant.
    fn resolve(&mut self, now: Instant, n: u64, acked: bool) -> Option<Estimate> {
        let State::Measuring {
            first_ack,
            horizon,
            resolved,
            delivered,
            last_ack,
            ..
        } = &mut self.state
        else {
            return None;
        };
        if now >= *horizon {
            return self.finish();
        }
        *resolved += n;
        if acked || (now == *last_ack && now > *first_ack) {
            *delivered += n;
        }
        if acked {
            *last_ack = now;
        }
        self.finish_if_resolved()
    }

    fn finish_if_resolved(&mut self) -> Option<Estimate> {
        match self.state {
            State::Measuring {
                train, resolved, ..
            } if resolved >= train => self.finish(),
            _ => None,
        }
    }

    /// Ends the measurement and returns the rate, if the train allows one.
    fn finish(&mut self) -> Option<Estimate> {
        let train_end = match self.state {
            State::Train { last_sent, .. } => last_sent,
            State::Measuring { train_end, .. } => Some(train_end),
            State::Done { train_end, .. } => train_end,
        };
        let state = std::mem::replace(
            &mut self.state,
            State::Done {
                train_end,
                rearm: false,
            },
        );
        let State::Measuring {
            send_span,
            first_ack,
            delivered,
            last_ack,
            ..
        } = state
        else {
            return None;
        };
        let ack_span = last_ack.saturating_duration_since(first_ack);
        if delivered < MIN_SAMPLES || ack_span.is_zero() || ack_span < send_span / 2 {
            return None;
        }
        Some(Estimate {
            rate: delivered as f64 / ack_span.max(send_span).as_secs_f64(),
            dispersed: ack_span.as_secs_f64() >= DISPERSED * send_span.as_secs_f64(),
        })
    }
}
