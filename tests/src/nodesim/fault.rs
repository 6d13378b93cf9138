//! Faults a simulated pod can be told to show, per pod by the annotation
//! [`FAULT_ANNOTATION`] or for every pod by a flag.
//!
//! Grammar: a comma-separated list of
//! - `image-pull-failure` (every pull fails) or `image-pull-failure=<text>` (pulls of
//!   images whose reference contains `<text>` fail),
//! - `crash-loop` (the container keeps exiting with code 1),
//! - `slow-start=<duration>` (extra time before a started container is ready),
//! - `none` (no fault; on a pod it turns off the global fault).

use std::hash::Hasher as _;

use thiserror::Error;

use super::duration::{DurationError, parse_millis};

/// The pod annotation that selects faults.
pub const FAULT_ANNOTATION: &str = "sim.inplace.dev/fault";

/// Which image pulls fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullFailure {
    /// Every pull.
    Any,
    /// Pulls of images whose reference contains this text.
    Matching(String),
}

/// The faults of one pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Faults {
    pub image_pull_failure: Option<PullFailure>,
    pub crash_loop: bool,
    /// Extra milliseconds before a started container becomes ready.
    pub slow_start: i64,
}

/// A fault specification that could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FaultError {
    #[error(
        "unknown fault {0:?} (known: image-pull-failure[=TEXT], crash-loop, slow-start=DURATION, none)"
    )]
    Unknown(String),
    #[error("slow-start: {0}")]
    Duration(#[from] DurationError),
    #[error("image-pull-failure= needs a non-empty image text")]
    EmptyImage,
}

impl Faults {
    /// No fault at all.
    pub fn is_none(&self) -> bool {
        *self == Faults::default()
    }

    /// Whether pulling `image` fails.
    pub fn pull_fails(&self, image: &str) -> bool {
        match &self.image_pull_failure {
            None => false,
            Some(PullFailure::Any) => true,
            Some(PullFailure::Matching(text)) => image.contains(text.as_str()),
        }
    }

    /// Parses a specification (see the module docs).
    pub fn parse(spec: &str) -> Result<Faults, FaultError> {
        let mut faults = Faults::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = match part.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim())),
                None => (part, None),
            };
            match (name, value) {
                ("none", None) => {}
                ("crash-loop", None) => faults.crash_loop = true,
                ("image-pull-failure", None) => {
                    faults.image_pull_failure = Some(PullFailure::Any);
                }
                ("image-pull-failure", Some("")) => return Err(FaultError::EmptyImage),
                ("image-pull-failure", Some(text)) => {
                    faults.image_pull_failure = Some(PullFailure::Matching(text.to_owned()));
                }
                ("slow-start", Some(d)) => faults.slow_start = parse_millis(d)?,
                _ => return Err(FaultError::Unknown(part.to_owned())),
            }
        }
        Ok(faults)
    }
}

/// The faults given by flags to every pod (or to a fraction of them).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GlobalFaults {
    pub faults: Faults,
    /// Share of pods (0.0..=1.0, chosen by a hash of the pod UID) that get `faults`.
    pub ratio: f64,
}

impl GlobalFaults {
    /// The faults of a pod: its annotation when present (even `none`), else the global
    /// faults if the pod is in the chosen share. An annotation that does not parse is
    /// returned as the error, and the caller falls back to the global faults.
    pub fn for_pod(&self, uid: &str, annotation: Option<&str>) -> (Faults, Option<FaultError>) {
        if let Some(spec) = annotation {
            match Faults::parse(spec) {
                Ok(f) => return (f, None),
                Err(e) => return (self.global_for(uid), Some(e)),
            }
        }
        (self.global_for(uid), None)
    }

    fn global_for(&self, uid: &str) -> Faults {
        if self.faults.is_none() || self.ratio <= 0.0 {
            return Faults::default();
        }
        if self.ratio >= 1.0 || unit_hash(uid) < self.ratio {
            self.faults.clone()
        } else {
            Faults::default()
        }
    }
}

/// A stable number in [0, 1) from a string (FNV-1a, 64 bits, then the SplitMix64
/// finaliser so that similar strings spread evenly).
fn unit_hash(s: &str) -> f64 {
    let mut fnv = fnv::FnvHasher::default();
    fnv.write(s.as_bytes());
    let mut h = fnv.finish();
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let ok: &[(&str, Faults)] = &[
            ("", Faults::default()),
            ("none", Faults::default()),
            (
                "crash-loop",
                Faults {
                    crash_loop: true,
                    ..Faults::default()
                },
            ),
            (
                "image-pull-failure",
                Faults {
                    image_pull_failure: Some(PullFailure::Any),
                    ..Faults::default()
                },
            ),
            (
                "image-pull-failure=:bad",
                Faults {
                    image_pull_failure: Some(PullFailure::Matching(":bad".into())),
                    ..Faults::default()
                },
            ),
            (
                "slow-start=1.5s, crash-loop",
                Faults {
                    crash_loop: true,
                    slow_start: 1_500,
                    ..Faults::default()
                },
            ),
        ];
        for (spec, want) in ok {
            assert_eq!(Faults::parse(spec).as_ref(), Ok(want), "spec {spec:?}");
        }
        for bad in [
            "explode",
            "crash-loop=1",
            "slow-start",
            "slow-start=fast",
            "image-pull-failure=",
        ] {
            assert!(Faults::parse(bad).is_err(), "spec {bad:?} should fail");
        }
    }

    #[test]
    fn pull_matching() {
        let f = Faults {
            image_pull_failure: Some(PullFailure::Matching("v9".into())),
            ..Faults::default()
        };
        assert!(f.pull_fails("reg/app:v9"));
        assert!(!f.pull_fails("reg/app:v1"));
        assert!(!Faults::default().pull_fails("x"));
    }

    #[test]
    fn global_ratio_and_annotation_override() {
        let crash = Faults::parse("crash-loop").unwrap_or_default();
        let g = GlobalFaults {
            faults: crash.clone(),
            ratio: 0.25,
        };
        let hit = (0..4000)
            .filter(|i| g.for_pod(&format!("uid-{i}"), None).0.crash_loop)
            .count();
        assert!(
            (800..1200).contains(&hit),
            "25% of 4000 expected, got {hit}"
        );
        let all = GlobalFaults {
            faults: crash,
            ratio: 1.0,
        };
        assert!(all.for_pod("u", None).0.crash_loop);
        assert!(all.for_pod("u", Some("none")).0.is_none());
        let (f, e) = all.for_pod("u", Some("bogus"));
        assert!(f.crash_loop && e.is_some());
    }
}
