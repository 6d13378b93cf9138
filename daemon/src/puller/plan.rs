//! Pure decisions of the image puller: which tags to start or cancel, the retry
//! schedule, per-attempt deadlines and the status aggregate. No I/O, no clock reads.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::api::{
    ImagePullPolicy, ImageStatus, ImageTagSpec, ImageTagStatus, NodeImageSpec, NodeImageStatus,
    TagPhase,
};

/// Per-attempt timeout when the tag says nothing (the reference's 10 minutes).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// Retries when the tag says nothing, or says something negative.
pub const DEFAULT_BACKOFF_LIMIT: u32 = 3;
/// First retry delay; doubles up to [`MAX_BACKOFF`].
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// One tag of one image, as the NodeImage names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TagKey {
    pub image: String,
    pub tag: String,
}

impl TagKey {
    pub fn new(image: impl Into<String>, tag: impl Into<String>) -> Self {
        Self {
            image: image.into(),
            tag: tag.into(),
        }
    }

    /// The reference handed to the runtime: `name:tag`, or `name@digest` for a digest tag.
    pub fn reference(&self) -> String {
        if self.tag.contains(':') {
            format!("{}@{}", self.image, self.tag)
        } else {
            format!("{}:{}", self.image, self.tag)
        }
    }
}

impl std::fmt::Display for TagKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reference())
    }
}

/// How one tag is pulled, derived from its spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullParams {
    /// Deadline of one attempt.
    pub timeout: Duration,
    /// Attempts in total (`backoffLimit + 1`).
    pub attempts: u32,
    /// Deadline of the whole task, counted from its start.
    pub active_deadline: Option<Duration>,
    /// `imagePullPolicy: Always` (else IfNotPresent).
    pub always: bool,
}

fn positive_secs(v: Option<i64>) -> Option<Duration> {
    v.and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

impl PullParams {
    pub fn from_spec(tag: &ImageTagSpec) -> Self {
        let p = tag.pull_policy.clone().unwrap_or_default();
        let backoff = p
            .backoff_limit
            .and_then(|b| u32::try_from(b).ok())
            .unwrap_or(DEFAULT_BACKOFF_LIMIT);
        Self {
            timeout: positive_secs(p.timeout_seconds.map(i64::from)).unwrap_or(DEFAULT_TIMEOUT),
            attempts: backoff.saturating_add(1),
            active_deadline: positive_secs(p.active_deadline_seconds),
            always: tag.image_pull_policy == Some(ImagePullPolicy::Always),
        }
    }

    /// Deadline of the next attempt after `elapsed` since the task started, or `None`
    /// when the active deadline has passed.
    pub fn attempt_deadline(&self, elapsed: Duration) -> Option<Duration> {
        match self.active_deadline {
            None => Some(self.timeout),
            Some(d) => d
                .checked_sub(elapsed)
                .filter(|left| !left.is_zero())
                .map(|left| left.min(self.timeout)),
        }
    }
}

/// Delay before attempt `attempt + 1`, after `attempt` (1-based) failed attempts: the
/// reference's schedule (1 s doubling to [`MAX_BACKOFF`]) as the floor, plus up to as much
/// again of jitter, capped at [`MAX_BACKOFF`]. The jitter keeps the daemons of many nodes
/// that failed on the same registry outage from retrying in step.
pub fn backoff(attempt: u32) -> Duration {
    use backon::BackoffBuilder as _;
    // Past 16 doublings every delay is the maximum; the bound keeps `nth` short.
    let nth = attempt.saturating_sub(1).min(16) as usize;
    backon::ExponentialBuilder::default()
        .with_jitter()
        .with_min_delay(INITIAL_BACKOFF)
        .with_max_delay(MAX_BACKOFF)
        .with_factor(2.0)
        .without_max_times()
        .build()
        .nth(nth)
        .unwrap_or(MAX_BACKOFF)
        .min(MAX_BACKOFF)
}

/// A tag to start working on.
#[derive(Clone, Debug, PartialEq)]
pub struct Start {
    pub key: TagKey,
    pub version: i64,
    pub params: PullParams,
    /// The unfinished status of the same version found in the NodeImage (the daemon
    /// restarted mid-pull): its start time is kept.
    pub resume: Option<ImageTagStatus>,
}

/// What the puller should do now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub start: Vec<Start>,
    pub cancel: Vec<TagKey>,
}

fn reported_tag<'a>(status: &'a NodeImageStatus, key: &TagKey) -> Option<&'a ImageTagStatus> {
    status
        .image_statuses
        .get(&key.image)
        .and_then(|s| s.tags.iter().find(|t| t.tag == key.tag))
}

/// Compares the spec with what runs (`running`: key → version) and what was reported.
///
/// A tag starts when nothing runs for it and the reported status is not a finished
/// status of the same version; it restarts when its version changed; it is cancelled
/// when it left the spec.
pub fn reconcile(
    spec: &NodeImageSpec,
    reported: &NodeImageStatus,
    running: &BTreeMap<TagKey, i64>,
) -> Plan {
    let mut plan = Plan::default();
    let mut wanted = BTreeMap::new();
    for (image, ispec) in &spec.images {
        for t in &ispec.tags {
            let key = TagKey::new(image, &t.tag);
            // a tag listed twice: the first entry wins
            if wanted.contains_key(&key) {
                continue;
            }
            wanted.insert(key.clone(), t.version);
            match running.get(&key) {
                Some(v) if *v == t.version => continue,
                Some(_) => plan.cancel.push(key.clone()),
                None => {}
            }
            let prior = reported_tag(reported, &key).filter(|s| s.version == t.version);
            if running.get(&key).is_none() && prior.is_some_and(|s| s.phase.is_finished()) {
                continue;
            }
            plan.start.push(Start {
                key,
                version: t.version,
                params: PullParams::from_spec(t),
                resume: prior.filter(|s| !s.phase.is_finished()).cloned(),
            });
        }
    }
    for key in running.keys() {
        if !wanted.contains_key(key) {
            plan.cancel.push(key.clone());
        }
    }
    plan
}

/// The NodeImage status for `spec` from the per-tag statuses in `live`: tags the spec no
/// longer lists are dropped, tags without a status (or with an older version) are Waiting.
pub fn aggregate(spec: &NodeImageSpec, live: &BTreeMap<TagKey, ImageTagStatus>) -> NodeImageStatus {
    let mut out = NodeImageStatus::default();
    for (image, ispec) in &spec.images {
        let mut tags: Vec<ImageTagStatus> = Vec::new();
        for t in &ispec.tags {
            if tags.iter().any(|s| s.tag == t.tag) {
                continue;
            }
            let key = TagKey::new(image, &t.tag);
            let st = match live.get(&key) {
                Some(s) if s.version == t.version => s.clone(),
                _ => ImageTagStatus {
                    tag: t.tag.clone(),
                    phase: TagPhase::Waiting,
                    version: t.version,
                    ..Default::default()
                },
            };
            match st.phase {
                TagPhase::Waiting => out.waiting += 1,
                TagPhase::Pulling => out.pulling += 1,
                TagPhase::Succeeded => out.succeeded += 1,
                TagPhase::Failed => out.failed += 1,
            }
            out.desired += 1;
            tags.push(st);
        }
        if !tags.is_empty() {
            tags.sort_by(|a, b| a.tag.cmp(&b.tag));
            out.image_statuses
                .insert(image.clone(), ImageStatus { tags });
        }
    }
    out
}

/// The merge patch that makes the stored status equal `new`: the whole object, plus
/// `null` for every image the stored status has and `new` has not (a merge patch keeps
/// map keys it does not mention). Conditional on `resource_version`, the version the
/// stored status was read at: the nulls are right only for that status, so when the
/// NodeImage changed meanwhile the API server answers 409 and the patch is made again
/// from the newer object.
pub fn status_patch(
    stored: Option<&NodeImageStatus>,
    new: &NodeImageStatus,
    resource_version: Option<&str>,
) -> Result<serde_json::Value, serde_json::Error> {
    let mut v = serde_json::to_value(new)?;
    // zero counts are left out when serialised; a merge patch must still reset them
    if let Some(obj) = v.as_object_mut() {
        for (k, n) in [
            ("desired", new.desired),
            ("succeeded", new.succeeded),
            ("failed", new.failed),
            ("pulling", new.pulling),
            ("waiting", new.waiting),
        ] {
            obj.insert(k.into(), n.into());
        }
    }
    if let (Some(stored), Some(obj)) = (stored, v.as_object_mut()) {
        let statuses = obj
            .entry("imageStatuses")
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        if let Some(m) = statuses.as_object_mut() {
            for gone in stored.image_statuses.keys() {
                if !new.image_statuses.contains_key(gone) {
                    m.insert(gone.clone(), serde_json::Value::Null);
                }
            }
        }
        if stored.first_sync_status.is_some() && new.first_sync_status.is_none() {
            obj.remove("firstSyncStatus");
        }
    }
    let mut body = serde_json::json!({ "status": v });
    if let Some(rv) = resource_version {
        body["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ImageSpec, ImageTagPullPolicy};

    fn tag(t: &str, version: i64) -> ImageTagSpec {
        ImageTagSpec {
            tag: t.into(),
            version,
            ..Default::default()
        }
    }

    fn spec(images: &[(&str, Vec<ImageTagSpec>)]) -> NodeImageSpec {
        NodeImageSpec {
            images: images
                .iter()
                .map(|(n, tags)| {
                    (
                        n.to_string(),
                        ImageSpec {
                            tags: tags.clone(),
                            ..Default::default()
                        },
                    )
                })
                .collect(),
        }
    }

    fn st(t: &str, version: i64, phase: TagPhase) -> ImageTagStatus {
        ImageTagStatus {
            tag: t.into(),
            version,
            phase,
            ..Default::default()
        }
    }

    fn reported(entries: &[(&str, ImageTagStatus)]) -> NodeImageStatus {
        let mut s = NodeImageStatus::default();
        for (image, t) in entries {
            s.image_statuses
                .entry(image.to_string())
                .or_default()
                .tags
                .push(t.clone());
        }
        s
    }

    fn keys(starts: &[Start]) -> Vec<String> {
        starts.iter().map(|s| s.key.reference()).collect()
    }

    #[test]
    fn reconcile_table() {
        let k = |i: &str, t: &str| TagKey::new(i, t);
        struct Case {
            name: &'static str,
            spec: NodeImageSpec,
            reported: NodeImageStatus,
            running: Vec<(TagKey, i64)>,
            start: Vec<&'static str>,
            cancel: Vec<&'static str>,
        }
        let cases = vec![
            Case {
                name: "fresh tags start",
                spec: spec(&[("r/a", vec![tag("v1", 0), tag("v2", 0)])]),
                reported: NodeImageStatus::default(),
                running: vec![],
                start: vec!["r/a:v1", "r/a:v2"],
                cancel: vec![],
            },
            Case {
                name: "running same version is left alone",
                spec: spec(&[("r/a", vec![tag("v1", 0)])]),
                reported: NodeImageStatus::default(),
                running: vec![(k("r/a", "v1"), 0)],
                start: vec![],
                cancel: vec![],
            },
            Case {
                name: "version bump restarts",
                spec: spec(&[("r/a", vec![tag("v1", 2)])]),
                reported: reported(&[("r/a", st("v1", 1, TagPhase::Pulling))]),
                running: vec![(k("r/a", "v1"), 1)],
                start: vec!["r/a:v1"],
                cancel: vec!["r/a:v1"],
            },
            Case {
                name: "finished same version stays finished",
                spec: spec(&[("r/a", vec![tag("v1", 1), tag("v2", 1)])]),
                reported: reported(&[
                    ("r/a", st("v1", 1, TagPhase::Succeeded)),
                    ("r/a", st("v2", 1, TagPhase::Failed)),
                ]),
                running: vec![],
                start: vec![],
                cancel: vec![],
            },
            Case {
                name: "finished older version pulls again",
                spec: spec(&[("r/a", vec![tag("v1", 2)])]),
                reported: reported(&[("r/a", st("v1", 1, TagPhase::Succeeded))]),
                running: vec![],
                start: vec!["r/a:v1"],
                cancel: vec![],
            },
            Case {
                name: "unfinished after a restart resumes",
                spec: spec(&[("r/a", vec![tag("v1", 0)])]),
                reported: reported(&[("r/a", st("v1", 0, TagPhase::Pulling))]),
                running: vec![],
                start: vec!["r/a:v1"],
                cancel: vec![],
            },
            Case {
                name: "removed tag is cancelled",
                spec: spec(&[("r/a", vec![tag("v1", 0)])]),
                reported: NodeImageStatus::default(),
                running: vec![(k("r/a", "v1"), 0), (k("r/b", "v9"), 0)],
                start: vec![],
                cancel: vec!["r/b:v9"],
            },
            Case {
                name: "duplicate tag entries count once",
                spec: spec(&[("r/a", vec![tag("v1", 0), tag("v1", 5)])]),
                reported: NodeImageStatus::default(),
                running: vec![],
                start: vec!["r/a:v1"],
                cancel: vec![],
            },
        ];
        for c in cases {
            let running: BTreeMap<_, _> = c.running.into_iter().collect();
            let plan = reconcile(&c.spec, &c.reported, &running);
            assert_eq!(keys(&plan.start), c.start, "{}", c.name);
            let cancel: Vec<String> = plan.cancel.iter().map(TagKey::reference).collect();
            assert_eq!(cancel, c.cancel, "{}", c.name);
        }
    }

    #[test]
    fn resume_keeps_the_reported_start() {
        let mut prior = st("v1", 3, TagPhase::Pulling);
        prior.start_time = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let plan = reconcile(
            &spec(&[("r/a", vec![tag("v1", 3)])]),
            &reported(&[("r/a", prior.clone())]),
            &BTreeMap::new(),
        );
        assert_eq!(plan.start.len(), 1);
        assert_eq!(plan.start[0].resume.as_ref(), Some(&prior));
    }

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn params_from_spec() {
        let mut t = tag("v1", 0);
        assert_eq!(
            PullParams::from_spec(&t),
            PullParams {
                timeout: DEFAULT_TIMEOUT,
                attempts: 4,
                active_deadline: None,
                always: false
            }
        );
        t.pull_policy = Some(ImageTagPullPolicy {
            timeout_seconds: Some(7),
            backoff_limit: Some(0),
            active_deadline_seconds: Some(20),
            ttl_seconds_after_finished: None,
        });
        t.image_pull_policy = Some(ImagePullPolicy::Always);
        assert_eq!(
            PullParams::from_spec(&t),
            PullParams {
                timeout: Duration::from_secs(7),
                attempts: 1,
                active_deadline: Some(Duration::from_secs(20)),
                always: true
            }
        );
        t.pull_policy = Some(ImageTagPullPolicy {
            timeout_seconds: Some(-1),
            backoff_limit: Some(-5),
            ..Default::default()
        });
        let p = PullParams::from_spec(&t);
        assert_eq!((p.timeout, p.attempts), (DEFAULT_TIMEOUT, 4));
    }

    #[test]
    fn backoff_schedule_with_jitter() {
        // The reference's delays are the floor; the jitter adds up to as much again, and
        // nothing goes past the cap.
        let floor = [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000];
        for _ in 0..200 {
            for (attempt, f) in (1..).zip(floor) {
                let got = backoff(attempt).as_millis() as u64;
                assert!(
                    got >= f && got <= (2 * f).min(30_000),
                    "attempt {attempt}: {got} ms, floor {f} ms"
                );
            }
        }
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
        assert!(backoff(0) >= INITIAL_BACKOFF && backoff(0) <= 2 * INITIAL_BACKOFF);
        // Jitter: the same attempt does not always wait the same.
        for attempt in 1..=4 {
            let spread: std::collections::BTreeSet<Duration> =
                (0..50).map(|_| backoff(attempt)).collect();
            assert!(
                spread.len() > 10,
                "attempt {attempt}: no jitter: {spread:?}"
            );
        }
    }

    #[test]
    fn attempt_deadline_is_capped_by_the_active_deadline() {
        let p = PullParams {
            timeout: Duration::from_secs(10),
            attempts: 3,
            active_deadline: Some(Duration::from_secs(25)),
            always: false,
        };
        let s = Duration::from_secs;
        assert_eq!(p.attempt_deadline(s(0)), Some(s(10)));
        assert_eq!(p.attempt_deadline(s(20)), Some(s(5)));
        assert_eq!(p.attempt_deadline(s(25)), None);
        assert_eq!(p.attempt_deadline(s(99)), None);
        let unbounded = PullParams {
            active_deadline: None,
            ..p
        };
        assert_eq!(unbounded.attempt_deadline(s(1000)), Some(s(10)));
    }

    #[test]
    fn aggregate_counts_and_fills_waiting() {
        let sp = spec(&[
            ("r/a", vec![tag("v2", 0), tag("v1", 0)]),
            ("r/b", vec![tag("x", 2)]),
            ("r/empty", vec![]),
        ]);
        let mut live = BTreeMap::new();
        live.insert(TagKey::new("r/a", "v1"), st("v1", 0, TagPhase::Succeeded));
        live.insert(TagKey::new("r/a", "v2"), st("v2", 0, TagPhase::Pulling));
        live.insert(TagKey::new("r/b", "x"), st("x", 1, TagPhase::Failed)); // stale version
        live.insert(TagKey::new("r/gone", "x"), st("x", 0, TagPhase::Failed));
        let s = aggregate(&sp, &live);
        assert_eq!(
            (s.desired, s.succeeded, s.pulling, s.waiting, s.failed),
            (3, 1, 1, 1, 0)
        );
        let a: Vec<&str> = s.image_statuses["r/a"]
            .tags
            .iter()
            .map(|t| t.tag.as_str())
            .collect();
        assert_eq!(a, vec!["v1", "v2"]);
        assert_eq!(s.image_statuses["r/b"].tags[0].phase, TagPhase::Waiting);
        assert_eq!(s.image_statuses["r/b"].tags[0].version, 2);
        assert!(!s.image_statuses.contains_key("r/gone"));
        assert!(!s.image_statuses.contains_key("r/empty"));
    }

    #[test]
    fn status_patch_nulls_images_that_left() -> Result<(), serde_json::Error> {
        let stored = reported(&[
            ("r/a", st("v1", 0, TagPhase::Succeeded)),
            ("r/old", st("v1", 0, TagPhase::Failed)),
        ]);
        let new = reported(&[("r/a", st("v1", 0, TagPhase::Succeeded))]);
        let p = status_patch(Some(&stored), &new, None)?;
        assert_eq!(
            p["status"]["imageStatuses"]["r/old"],
            serde_json::Value::Null
        );
        assert_eq!(
            p["status"]["imageStatuses"]["r/a"]["tags"][0]["phase"],
            "Succeeded"
        );
        let empty = status_patch(Some(&stored), &NodeImageStatus::default(), None)?;
        assert_eq!(
            empty["status"]["imageStatuses"]["r/a"],
            serde_json::Value::Null
        );
        assert_eq!(empty["status"]["desired"], 0);
        // zero counts are written explicitly, or the stored ones would stay
        for k in ["succeeded", "failed", "pulling", "waiting"] {
            assert_eq!(empty["status"][k], 0, "{k}");
        }
        Ok(())
    }

    #[test]
    fn status_patch_is_conditional_on_the_version_read() -> Result<(), serde_json::Error> {
        let stored = reported(&[("r/old", st("v1", 0, TagPhase::Failed))]);
        let new = reported(&[("r/a", st("v1", 0, TagPhase::Succeeded))]);
        let p = status_patch(Some(&stored), &new, Some("31"))?;
        assert_eq!(p["metadata"], serde_json::json!({"resourceVersion": "31"}));
        assert_eq!(
            p["status"]["imageStatuses"]["r/old"],
            serde_json::Value::Null
        );
        assert_eq!(p.as_object().map(|o| o.len()), Some(2));
        assert_eq!(
            status_patch(Some(&stored), &new, None)?.get("metadata"),
            None
        );
        Ok(())
    }

    #[test]
    fn digest_tags_use_at() {
        assert_eq!(TagKey::new("r/a", "sha256:ab").reference(), "r/a@sha256:ab");
        assert_eq!(
            TagKey::new("127.0.0.1:5000/a", "v1").reference(),
            "127.0.0.1:5000/a:v1"
        );
    }
}
