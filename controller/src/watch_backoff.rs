//! How soon a watch lists (or watches) again after a failure, and how long a controller's
//! trigger stream pauses after one of its watches failed.
//!
//! kube-runtime's `DefaultBackoff` is client-go's reflector schedule: 0.8 s doubling to
//! 30 s, plus up to 100 % jitter (so up to a minute), reset by a success or after 2 min.
//! A watcher's own backoff hardly grows (the `Init` it emits before each new list counts
//! as a success), but a `Controller` applies the same backoff to its merged trigger
//! stream, which sees only the errors of all its watches: through an API server outage
//! of 30-60 s (or a restart) it grows to 30-60 s, and while it sleeps no watch of the
//! controller is read at all. Its stores stay as they were before the outage, reconciles
//! write against them (refused 409 over and over), and when the API server is back the
//! controller may not look for up to a minute, longer if one more attempt fails. A
//! controller should be back within seconds of its API server, so [`relist`] doubles
//! from 0.8 s to a cap of 5 s (+ up to 25 % jitter, so that watches that failed together
//! do not retry in step), and a controller whose every stream backs off by itself (the
//! CloneSet controller) does not pause its trigger stream at all ([`NoPause`]). While
//! the API server is away that is one attempt per watch every second or so (the
//! watcher's): a handful of requests per second for the whole controller.

use std::time::Duration;

use kube::runtime::utils::Backoff;

/// The delay after the first failure.
pub const FIRST: Duration = Duration::from_millis(800);
/// The longest delay before jitter.
pub const CAP: Duration = Duration::from_secs(5);
/// The jitter added: up to this fraction of the delay.
pub const JITTER: f64 = 0.25;

/// The delay after `failures` consecutive failures (1: the first), with `jitter` in
/// `[0, 1)` choosing how much of [`JITTER`] is added (out of range: clamped).
pub fn delay(failures: u32, jitter: f64) -> Duration {
    // Past 16 doublings every delay is the cap; the bound keeps the shift in range.
    let doublings = failures.saturating_sub(1).min(16);
    let raw = FIRST.saturating_mul(1u32 << doublings).min(CAP);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    raw.mul_f64(1.0 + JITTER * jitter)
}

/// The [`Backoff`] of every watch and controller trigger stream of the controller:
/// [`delay`] by consecutive failures, reset by a success.
#[derive(Debug, Default, Clone)]
pub struct Relist {
    failures: u32,
}

/// A fresh [`Relist`] backoff.
pub fn relist() -> Relist {
    Relist::default()
}

impl Iterator for Relist {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        Some(delay(self.failures, rand::random::<f64>()))
    }
}

impl Backoff for Relist {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// The trigger backoff of a `Controller` fed only by streams that back off themselves
/// (`for_stream`, `owns_stream`, `watches_stream`, each with [`relist`]): no pause. Each
/// stream already waits after its own error, so nothing spins; and a pause here would
/// stop every watch of the controller for one failing watch, with the failures of the
/// others (requests cut by the outage, seen only when their stream is polled again)
/// coming out one per pause afterwards.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoPause;

impl Iterator for NoPause {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for NoPause {
    fn reset(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    #[test]
    fn doubles_from_first_to_the_cap() {
        let ms = |d: Duration| d.as_millis();
        let table: Vec<(u32, u128)> = vec![(1, 800), (2, 1600), (3, 3200), (4, 5000), (5, 5000)];
        for (failures, want) in table {
            assert_eq!(ms(delay(failures, 0.0)), want, "failures={failures}");
        }
        assert_eq!(ms(delay(4, 1.0)), 6250, "the cap plus the whole jitter");
        assert_eq!(ms(delay(0, 0.0)), 800, "no failure yet reads as the first");
        assert_eq!(delay(u32::MAX, 0.0), CAP);
        assert_eq!(delay(3, f64::NAN), delay(3, 0.0));
    }

    #[test]
    fn a_success_starts_again_from_first() {
        let mut b = relist();
        let first = b.next().unwrap_or_default();
        let later: Vec<Duration> = (0..10).filter_map(|_| b.next()).collect();
        assert!(first >= FIRST && first <= FIRST.mul_f64(1.0 + JITTER));
        assert!(
            later
                .iter()
                .all(|d| *d >= FIRST * 2 && *d <= CAP.mul_f64(1.0 + JITTER))
        );
        assert!(later.last().is_some_and(|d| *d >= CAP));
        b.reset();
        let again = b.next().unwrap_or_default();
        assert!(
            again >= FIRST && again <= FIRST.mul_f64(1.0 + JITTER),
            "{again:?}"
        );
    }

    #[test]
    fn no_pause_never_waits() {
        let mut b = NoPause;
        assert!(b.by_ref().take(100).all(|d| d.is_zero()));
        b.reset();
        assert_eq!(b.next(), Some(Duration::ZERO));
    }

    proptest! {
        /// Never longer than the cap plus its jitter, never shorter than the first delay,
        /// and never shorter after more failures (for the same jitter).
        #[test]
        fn bounded_and_monotonic(failures in 0u32..10_000, jitter in -1.0f64..2.0) {
            let d = delay(failures, jitter);
            prop_assert!(d >= FIRST);
            prop_assert!(d <= CAP.mul_f64(1.0 + JITTER));
            prop_assert!(delay(failures.saturating_add(1), jitter) >= d);
        }
    }
}
