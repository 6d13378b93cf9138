//! The restarts of the bed's API server as the runs' waits must count them. Every run
//! shares that API server, so a restart one run makes stops every other run's controller,
//! simulator and watches too, and afterwards the plane takes a while to be whole again
//! (informers relisting with backoff, node Leases unseen past their grace, pods marked
//! not Ready until the simulator's status resync). A bound on settling is meant for an
//! undisturbed plane: it is counted from the end of the last restart, and does not run
//! out while one is under way.

use std::time::{Duration, Instant};

/// The restarts under way and when the last one ended (the API server serving again, or
/// the restart given up).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RestartClock {
    under_way: u32,
    last_end: Option<Instant>,
}

impl RestartClock {
    pub const fn new() -> RestartClock {
        RestartClock {
            under_way: 0,
            last_end: None,
        }
    }

    pub fn begun(&mut self) {
        self.under_way += 1;
    }

    pub fn ended(&mut self, at: Instant) {
        self.under_way = self.under_way.saturating_sub(1);
        self.last_end = Some(self.last_end.map_or(at, |e| e.max(at)));
    }

    /// Whether a wait of `bound` begun at `started` is over at `now`: `bound` counted
    /// from the later of `started` and the end of the last restart, never over while a
    /// restart is under way.
    pub fn wait_over(&self, now: Instant, started: Instant, bound: Duration) -> bool {
        if self.under_way > 0 {
            return false;
        }
        let from = self.last_end.map_or(started, |e| e.max(started));
        now > from + bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_secs(90);

    #[test]
    fn without_restarts_the_bound_counts_from_the_start() {
        let t0 = Instant::now();
        let c = RestartClock::new();
        assert!(!c.wait_over(t0 + BOUND, t0, BOUND));
        assert!(c.wait_over(t0 + BOUND + Duration::from_millis(1), t0, BOUND));
    }

    #[test]
    fn a_restart_before_the_wait_began_changes_nothing() {
        let t0 = Instant::now();
        let mut c = RestartClock::new();
        c.begun();
        c.ended(t0);
        let started = t0 + Duration::from_secs(5);
        assert!(c.wait_over(started + BOUND + Duration::from_millis(1), started, BOUND));
    }

    #[test]
    fn a_restart_during_the_wait_restarts_the_bound_from_its_end() {
        let t0 = Instant::now();
        let mut c = RestartClock::new();
        c.begun();
        // Under way: never over, however long it takes.
        assert!(!c.wait_over(t0 + 3 * BOUND, t0, BOUND));
        let back = t0 + Duration::from_secs(60);
        c.ended(back);
        assert!(!c.wait_over(t0 + BOUND + Duration::from_secs(1), t0, BOUND));
        assert!(!c.wait_over(back + BOUND, t0, BOUND));
        assert!(c.wait_over(back + BOUND + Duration::from_millis(1), t0, BOUND));
    }

    #[test]
    fn overlapping_restarts_count_from_the_last_end() {
        let t0 = Instant::now();
        let mut c = RestartClock::new();
        c.begun();
        c.begun();
        let first = t0 + Duration::from_secs(20);
        c.ended(first + Duration::from_secs(10));
        assert!(
            !c.wait_over(t0 + 5 * BOUND, t0, BOUND),
            "one still under way"
        );
        c.ended(first);
        let last = first + Duration::from_secs(10);
        assert!(!c.wait_over(last + BOUND, t0, BOUND));
        assert!(c.wait_over(last + BOUND + Duration::from_millis(1), t0, BOUND));
    }
}
