//! [`ReleaseTimer`]: a one-shot `timerfd` the I/O loop sleeps on until the
//! next packet is due.
//!
//! tokio's own timers tick in whole milliseconds, which would add up to 1 ms
//! of error to every release and send packets in millisecond bursts; a
//! `timerfd` fires with the kernel's high-resolution timers, so delay and
//! serialisation are emulated to within the scheduling latency.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::{Duration, Instant};

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;

/// Gives tokio's `AsyncFd` the raw descriptor it registers with epoll.
#[derive(Debug)]
struct Fd(TimerFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// A re-armable one-shot timer on the monotonic clock, registered with the
/// tokio reactor. Must be created inside a tokio runtime.
#[derive(Debug)]
pub struct ReleaseTimer {
    fd: AsyncFd<Fd>,
    /// The deadline currently armed, so re-arming it is free.
    armed: Option<Instant>,
}

impl ReleaseTimer {
    /// A disarmed timer.
    ///
    /// # Errors
    /// If the kernel refuses a timerfd or the reactor refuses to register it.
    pub fn new() -> io::Result<Self> {
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        Ok(Self {
            fd: register(Fd(fd))?,
            armed: None,
        })
    }

    /// Makes the timer fire at `deadline` (as soon as possible if it has
    /// passed), or never for `None`. `now` is the caller's current time.
    ///
    /// # Errors
    /// If `timerfd_settime` fails.
    pub fn arm(&mut self, deadline: Option<Instant>, now: Instant) -> io::Result<()> {
        if deadline == self.armed {
            return Ok(());
        }
        let timer = &self.fd.get_ref().0;
        match deadline {
            None => timer.unset()?,
            Some(at) => {
                // A zero one-shot value would disarm the timer: wait at least 1 ns.
                let wait = at
                    .saturating_duration_since(now)
                    .max(Duration::from_nanos(1));
                timer.set(
                    Expiration::OneShot(TimeSpec::from_duration(wait)),
                    TimerSetTimeFlags::empty(),
                )?;
            }
        }
        self.armed = deadline;
        Ok(())
    }

    /// Waits until the armed deadline passes. Cancel-safe: the expiry is
    /// consumed only when this returns.
    ///
    /// # Errors
    /// If reading the timerfd fails.
    pub async fn expired(&mut self) -> io::Result<()> {
        loop {
            let mut guard = self.fd.readable().await?;
            // Reading a non-blocking timerfd that has not fired gives EAGAIN,
            // which try_io turns into "clear readiness and wait again".
            match guard.try_io(|fd| fd.get_ref().0.wait().map_err(io::Error::from)) {
                Ok(result) => {
                    self.armed = None;
                    return result;
                }
                Err(_would_block) => continue,
            }
        }
    }
}

/// Asks the kernel to fire this thread's timers without the default 50 µs
/// of slack (`PR_SET_TIMERSLACK` = 1 ns), so packets leave closer to their
/// release times. Best effort: a refusal is logged and ignored.
pub fn tighten_timer_slack() {
    if let Err(e) = nix::sys::prctl::set_timerslack(1) {
        tracing::debug!(error = %e, "cannot reduce the timer slack");
    }
}

/// Registers the timer with the tokio reactor.
///
/// tokio 1.54 marks the safe `AsyncFd::new` deprecated in favour of an `unsafe fn
/// register` whose contract is that the descriptor stays open and unchanged while
/// registered. `Fd` owns its `TimerFd` (an `OwnedFd`), moved into the `AsyncFd` and
/// closed only when it drops, and nothing hands out `&mut Fd`; so the contract holds and
/// the project keeps `unsafe` out of everything but the SIMD kernels.
#[allow(deprecated)]
fn register(fd: Fd) -> io::Result<AsyncFd<Fd>> {
    AsyncFd::new(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock;

    #[tokio::test]
    async fn fires_after_the_deadline_with_sub_millisecond_precision() {
        let mut timer = ReleaseTimer::new().unwrap();
        let start = clock::now();
        let deadline = start + Duration::from_micros(2_500);
        timer.arm(Some(deadline), start).unwrap();
        timer.expired().await.unwrap();
        let woke = clock::now();
        assert!(woke >= deadline, "fired early");
        assert!(
            woke - deadline < Duration::from_millis(20),
            "fired {:?} late",
            woke - deadline
        );
    }

    #[tokio::test]
    async fn rearming_replaces_the_deadline() {
        let mut timer = ReleaseTimer::new().unwrap();
        let start = clock::now();
        timer
            .arm(Some(start + Duration::from_secs(3600)), start)
            .unwrap();
        let soon = start + Duration::from_millis(1);
        timer.arm(Some(soon), start).unwrap();
        tokio::time::timeout(Duration::from_secs(5), timer.expired())
            .await
            .expect("the re-armed deadline fires")
            .unwrap();
        timer.arm(None, clock::now()).unwrap();
        let never = tokio::time::timeout(Duration::from_millis(20), timer.expired()).await;
        assert!(never.is_err(), "a disarmed timer fired");
    }
}
