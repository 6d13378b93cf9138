//! The no-progress abort of an image pull: a pull whose runtime fetches no new bytes for
//! a whole stall window is given up (counted as a failed attempt) instead of holding a
//! pull slot until its per-attempt timeout (10 minutes by default, times backoffLimit + 1).
//!
//! Progress is read from containerd's content store: the active ingests (`ref` → bytes
//! written so far) in the CRI namespace, sampled while the CRI `PullImage` call runs. A
//! registry that never answers opens no ingest at all; one that stalls a blob leaves its
//! ingest's offset where it is. Both look the same here: nothing changes.
//!
//! The ingests do not name the image they belong to (containerd keys them by the blob's
//! digest), so a sample is node-wide: any change counts as progress for every pull in
//! flight. That never aborts a pull that moves bytes; a stalled pull next to a busy one
//! is aborted once the busy one stops moving bytes (finished, or stalled itself) and a
//! whole window has passed. A runtime without a content store (CRI-O), or one whose
//! content store does not answer, gives no samples, and no pull is aborted for stalling
//! (the per-attempt timeout still applies).
//!
//! Pure: the caller samples and passes the time; no I/O, no clock reads.

use std::collections::BTreeMap;
use std::time::Duration;

/// Default stall window of the daemon (`--pull-stall-timeout-seconds`).
pub const DEFAULT_STALL_WINDOW: Duration = Duration::from_secs(90);

/// Active ingests of the content store: ingest ref → bytes written so far.
pub type Ingests = BTreeMap<String, i64>;

/// What to do with a running pull after a sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Continue,
    /// No progress for `idle` (at least the window): cancel the attempt.
    Abort {
        idle: Duration,
    },
}

/// Whether the content store moved between two samples: an ingest grew, appeared, or
/// went away (committed: a blob was fetched whole).
pub fn progressed(before: &Ingests, now: &Ingests) -> bool {
    now.iter()
        .any(|(r, off)| before.get(r).is_none_or(|b| off > b))
        || before.keys().any(|r| !now.contains_key(r))
}

/// The stall state of one pull attempt, fed one sample at a time.
#[derive(Clone, Debug)]
pub struct StallWatch {
    window: Duration,
    last: Option<Ingests>,
    /// When progress (or the start, or a sample that could not be taken) was last seen,
    /// as time since the attempt started.
    since: Duration,
}

impl StallWatch {
    /// A watch for an attempt that starts now (time 0).
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            last: None,
            since: Duration::ZERO,
        }
    }

    /// Takes the sample made at `at` (time since the attempt started): `None` when the
    /// content store could not be read, which counts as progress (no abort without
    /// evidence). The first sample is the baseline: ingests left over from earlier pulls
    /// are not this pull's progress.
    pub fn observe(&mut self, at: Duration, sample: Option<Ingests>) -> Verdict {
        match (sample, self.last.take()) {
            (None, before) => {
                self.since = self.since.max(at);
                self.last = before;
            }
            (Some(now), None) => {
                self.last = Some(now);
            }
            (Some(now), Some(before)) => {
                if progressed(&before, &now) {
                    self.since = self.since.max(at);
                }
                self.last = Some(now);
            }
        }
        let idle = at.saturating_sub(self.since);
        if idle >= self.window {
            Verdict::Abort { idle }
        } else {
            Verdict::Continue
        }
    }
}

/// The verdict after a whole series of samples (time since the attempt started, sample):
/// the first abort, else `Continue`.
pub fn decide(window: Duration, samples: &[(Duration, Option<Ingests>)]) -> Verdict {
    let mut w = StallWatch::new(window);
    for (at, s) in samples {
        if let v @ Verdict::Abort { .. } = w.observe(*at, s.clone()) {
            return v;
        }
    }
    Verdict::Continue
}

/// How often a running pull's progress is sampled: a tenth of the window, between half a
/// second and ten seconds (an abort comes at most that late after the window).
pub fn sample_interval(window: Duration) -> Duration {
    (window / 10).clamp(Duration::from_millis(500), Duration::from_secs(10))
}

/// The reason of an aborted attempt, for the NodeImage status and the event.
pub fn reason(idle: Duration, registry: &str) -> String {
    format!(
        "no progress for {}s from registry {registry}",
        idle.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn ing(entries: &[(&str, i64)]) -> Option<Ingests> {
        Some(entries.iter().map(|(r, o)| ((*r).to_owned(), *o)).collect())
    }

    #[test]
    fn progress_is_growth_a_new_ingest_or_a_committed_one() {
        let a = ing(&[("layer-sha256:a", 10)]).unwrap_or_default();
        assert!(!progressed(&a, &a));
        assert!(progressed(
            &a,
            &ing(&[("layer-sha256:a", 11)]).unwrap_or_default()
        ));
        assert!(progressed(
            &a,
            &ing(&[("layer-sha256:a", 10), ("layer-sha256:b", 0)]).unwrap_or_default()
        ));
        assert!(progressed(&a, &Ingests::new()));
        // an ingest restarted from 0 under the same ref is not progress by itself
        assert!(!progressed(
            &a,
            &ing(&[("layer-sha256:a", 3)]).unwrap_or_default()
        ));
    }

    /// Table: samples → verdict, with a 90 s window.
    #[test]
    fn table() {
        let w = secs(90);
        let abort = |s| Verdict::Abort { idle: secs(s) };
        type Samples = Vec<(Duration, Option<Ingests>)>;
        let cases: Vec<(&str, Samples, Verdict)> = vec![
            ("no samples", vec![], Verdict::Continue),
            (
                "registry never answers: no ingest ever, aborted at the window",
                (0..=10).map(|i| (secs(i * 10), ing(&[]))).collect(),
                abort(90),
            ),
            (
                "just under the window",
                (0..=8).map(|i| (secs(i * 10), ing(&[]))).collect(),
                Verdict::Continue,
            ),
            (
                "steady download never aborted",
                (0..=30)
                    .map(|i| {
                        (
                            secs(i * 10),
                            ing(&[(
                                "layer-sha256:a",
                                i64::try_from(i).unwrap_or_default() * 1000,
                            )]),
                        )
                    })
                    .collect(),
                Verdict::Continue,
            ),
            (
                "blob stalls after the manifest: the window counts from the last growth",
                vec![
                    (secs(0), ing(&[])),
                    (secs(5), ing(&[("manifest-sha256:m", 500)])),
                    (secs(10), ing(&[("layer-sha256:a", 100)])),
                    (secs(20), ing(&[("layer-sha256:a", 4096)])),
                    (secs(60), ing(&[("layer-sha256:a", 4096)])),
                    (secs(109), ing(&[("layer-sha256:a", 4096)])),
                    (secs(110), ing(&[("layer-sha256:a", 4096)])),
                ],
                abort(90),
            ),
            (
                "a stale ingest left by an earlier pull is not progress",
                (0..=9)
                    .map(|i| (secs(i * 10), ing(&[("layer-sha256:old", 77)])))
                    .collect(),
                abort(90),
            ),
            (
                "content store unreadable: no abort without evidence",
                (0..=20).map(|i| (secs(i * 10), None)).collect(),
                Verdict::Continue,
            ),
            (
                "an unreadable sample counts as progress at its time",
                vec![
                    (secs(0), ing(&[])),
                    (secs(80), None),
                    (secs(160), ing(&[])),
                    (secs(170), ing(&[])),
                ],
                abort(90),
            ),
            (
                "a blob committed (ingest gone) is progress",
                vec![
                    (secs(0), ing(&[("layer-sha256:a", 10)])),
                    (secs(80), ing(&[])),
                    (secs(160), ing(&[])),
                ],
                Verdict::Continue,
            ),
        ];
        for (name, samples, want) in cases {
            assert_eq!(decide(w, &samples), want, "{name}");
        }
    }

    #[test]
    fn sampling_and_reason() {
        assert_eq!(sample_interval(secs(90)), secs(9));
        assert_eq!(sample_interval(secs(1)), Duration::from_millis(500));
        assert_eq!(sample_interval(secs(3600)), secs(10));
        assert_eq!(
            reason(secs(91), "127.0.0.1:5001"),
            "no progress for 91s from registry 127.0.0.1:5001"
        );
    }
}
