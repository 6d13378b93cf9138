//! The pure core of the ImagePullJob controller: from the job, the nodes, their NodeImages,
//! the pods (for `podSelector`) and the time to the NodeImage writes, the job status and
//! whether the job is deleted.
//!
//! Per node the job is in one of four states: not synced (the node's NodeImage does not list
//! the tag with an owner reference to the job), active (listed, not finished for the listed
//! `version`), succeeded or failed. At most `parallelism − active` not-synced nodes get the
//! tag per reconcile: first those listed in our annotation
//! `inplace.kruise.io/predownload-node-order` in its order (the CloneSet controller writes
//! there the update order of the pods still to update, [`hand_out_order`]), then the
//! others by name. With completion policy `Always` the job completes once
//! no node is pending, or at `activeDeadlineSeconds` after `startTime` (unfinished nodes then
//! count as failed); `ttlSecondsAfterFinished` after completion the job is deleted. `Never`
//! never completes and keeps adding nodes that appear.

use std::collections::BTreeMap;

use inplace_proto::imagepulljob::{
    CompletionPolicyType, ImagePullJob, ImagePullJobStatus, ImagePullPolicy,
};
use inplace_proto::nodeimage::{
    ImagePullPhase, ImageSpec, ImageTagPullPolicy, ImageTagSpec, NodeImage, ReferenceObject,
};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::{Resource, ResourceExt};

use crate::plan::selector::{Selector, SelectorError};

/// Extra seconds added to the NodeImage tag TTL of an `Always` job (the reference's
/// `--default-ttlseconds-for-always-nodeimage`).
pub const ALWAYS_TTL_EXTRA_SECONDS: i32 = 300;
/// NodeImage tag TTL of a `Never` job.
pub const NEVER_TTL_SECONDS: i32 = 24 * 3600;
/// Minimum NodeImage tag active deadline of a `Never` job.
pub const NEVER_MIN_ACTIVE_DEADLINE_SECONDS: i64 = 1800;
/// Failed nodes quoted in `status.message`.
const MESSAGE_FAILED_NODES: usize = 3;

/// Why a job cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("spec.image {0:?} has no image name")]
    Image(String),
    #[error("spec.selector: {0}")]
    NodeSelector(#[source] SelectorError),
    #[error("spec.podSelector: {0}")]
    PodSelector(#[source] SelectorError),
    #[error("the job has no uid yet")]
    NoUid,
}

/// Everything one reconcile of a job looks at.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub job: &'a ImagePullJob,
    /// NodeImages by name (= node name).
    pub node_images: &'a BTreeMap<String, NodeImage>,
    pub nodes: &'a [Node],
    /// Pods of the job's namespace (only read with `podSelector`).
    pub pods: &'a [Pod],
    pub now: Timestamp,
    /// Random seconds spread over TTLs (the reference's rand): 0..=300 for `Always`
    /// jobs, −600..=600 for `Never` jobs; the caller draws it.
    pub ttl_jitter_seconds: i32,
}

/// A tag entry to write: set `spec.images[image]` of NodeImage `node` to `spec`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeImageWrite {
    pub node: String,
    /// The NodeImage does not exist and has to be created.
    pub create: bool,
    pub image: String,
    pub spec: ImageSpec,
}

/// What to do for a job.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub writes: Vec<NodeImageWrite>,
    /// The status to write (equal to the current one when nothing changed).
    pub status: ImagePullJobStatus,
    /// The job's TTL after completion has passed.
    pub delete: bool,
    /// Seconds after which to look again even without events (deadline, TTL).
    pub requeue_after_seconds: Option<i64>,
}

/// The job's state on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NodeState {
    NotSynced,
    Active,
    Succeeded,
    Failed(String),
}

/// Splits `name[:tag|@digest]` into the NodeImage image name and tag (default `latest`).
/// A digest wins over a tag, and the name then keeps the tag (`r/a:v1@sha256:…` is
/// `r/a:v1`, `sha256:…`).
pub fn split_image(image: &str) -> (String, String) {
    let parts = inplace_proto::image_ref::split(image);
    match (parts.tag, parts.digest) {
        (tag, Some(digest)) => {
            let name = tag.map_or(parts.name.to_string(), |t| format!("{}:{t}", parts.name));
            (name, digest.to_string())
        }
        (Some(tag), None) => (parts.name.to_string(), tag.to_string()),
        (None, None) => (parts.name.to_string(), "latest".to_string()),
    }
}

fn selector(
    match_labels: &Option<BTreeMap<String, String>>,
    match_expressions: &Option<
        Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement>,
    >,
) -> Result<Selector, SelectorError> {
    Selector::parse(&LabelSelector {
        match_labels: match_labels.clone(),
        match_expressions: match_expressions.clone(),
    })
}

fn pod_is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// The names of the nodes the job pulls on, sorted.
pub fn target_nodes(input: &Input<'_>) -> Result<Vec<String>, PlanError> {
    let spec = &input.job.spec;
    let mut out: Vec<String> = if let Some(ps) = &spec.pod_selector {
        let sel =
            selector(&ps.match_labels, &ps.match_expressions).map_err(PlanError::PodSelector)?;
        let ns = input.job.namespace().unwrap_or_default();
        let on_pods: std::collections::BTreeSet<&str> = input
            .pods
            .iter()
            .filter(|p| p.metadata.namespace.as_deref().unwrap_or_default() == ns)
            .filter(|p| pod_is_active(p) && sel.matches(p.labels()))
            .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()))
            .filter(|n| !n.is_empty())
            .collect();
        input
            .nodes
            .iter()
            .map(|n| n.name_any())
            .filter(|n| on_pods.contains(n.as_str()))
            .collect()
    } else if let Some(ns) = &spec.selector {
        if ns.names.is_empty() {
            let sel = selector(&ns.match_labels, &ns.match_expressions)
                .map_err(PlanError::NodeSelector)?;
            input
                .nodes
                .iter()
                .filter(|n| sel.matches(n.labels()))
                .map(|n| n.name_any())
                .collect()
        } else {
            input
                .nodes
                .iter()
                .map(|n| n.name_any())
                .filter(|n| ns.names.contains(n))
                .collect()
        }
    } else {
        input.nodes.iter().map(|n| n.name_any()).collect()
    };
    out.sort();
    out.dedup();
    Ok(out)
}

/// The node order recorded on `job` (annotation
/// [`inplace_proto::keys::PREDOWNLOAD_NODE_ORDER_ANNOTATION`]); empty without one.
pub fn recorded_node_order(job: &ImagePullJob) -> Vec<&str> {
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(inplace_proto::keys::PREDOWNLOAD_NODE_ORDER_ANNOTATION))
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The order in which the nodes `waiting` (sorted by name) get a parallelism slot:
/// those in `order` by their first place there, then the rest by name. The same nodes,
/// only reordered.
pub fn hand_out_order<'a>(waiting: &[&'a str], order: &[&str]) -> Vec<&'a str> {
    let mut rank: std::collections::HashMap<&str, usize> =
        std::collections::HashMap::with_capacity(order.len());
    for (i, node) in order.iter().enumerate() {
        rank.entry(*node).or_insert(i);
    }
    let mut out = waiting.to_vec();
    // stable: unlisted nodes keep their order by name
    out.sort_by_key(|n| rank.get(n).copied().unwrap_or(usize::MAX));
    out
}

fn owned_by(tag: &ImageTagSpec, uid: &str) -> bool {
    tag.owner_references
        .iter()
        .any(|o| o.uid.as_deref() == Some(uid))
}

fn node_state(ni: Option<&NodeImage>, image: &str, tag: &str, uid: &str) -> NodeState {
    let Some(ni) = ni else {
        return NodeState::NotSynced;
    };
    let Some(spec) = ni.tag_spec(image, tag).filter(|t| owned_by(t, uid)) else {
        return NodeState::NotSynced;
    };
    match ni.tag_status(image, tag) {
        Some(st) if st.version == spec.version => match st.phase {
            ImagePullPhase::Succeeded => NodeState::Succeeded,
            ImagePullPhase::Failed => NodeState::Failed(st.message.clone()),
            ImagePullPhase::Waiting | ImagePullPhase::Pulling => NodeState::Active,
        },
        _ => NodeState::Active,
    }
}

/// The `pullPolicy` of the NodeImage tag entry for this job.
pub fn tag_pull_policy(job: &ImagePullJob, jitter: i32) -> ImageTagPullPolicy {
    let timeout = job.timeout_seconds();
    let backoff = job.backoff_limit();
    let cp = &job.spec.completion_policy;
    let (ttl, deadline) = match job.completion_type() {
        CompletionPolicyType::Always => {
            let base = match (cp.ttl_seconds_after_finished, cp.active_deadline_seconds) {
                (Some(ttl), _) => i64::from(ttl),
                (None, Some(ads)) => ads,
                (None, None) => i64::from(timeout) * i64::from(backoff.max(1)),
            };
            let ttl = base + i64::from(ALWAYS_TTL_EXTRA_SECONDS) + i64::from(jitter);
            (
                i32::try_from(ttl).unwrap_or(i32::MAX),
                cp.active_deadline_seconds,
            )
        }
        CompletionPolicyType::Never => (
            NEVER_TTL_SECONDS.saturating_add(jitter),
            Some(NEVER_MIN_ACTIVE_DEADLINE_SECONDS.max(i64::from(timeout))),
        ),
    };
    ImageTagPullPolicy {
        timeout_seconds: Some(timeout),
        backoff_limit: Some(backoff),
        ttl_seconds_after_finished: Some(ttl),
        active_deadline_seconds: deadline,
    }
}

fn owner_ref(job: &ImagePullJob, uid: &str) -> ObjectReference {
    ObjectReference {
        // The stored version, as the reference writes it (`apps.kruise.io/v1beta1` since
        // v1.9.0); owners are matched by group, so v1alpha1 entries stay recognised.
        api_version: Some(ImagePullJob::api_version(&()).into_owned()),
        kind: Some("ImagePullJob".into()),
        name: Some(job.name_any()),
        namespace: job.namespace(),
        uid: Some(uid.to_string()),
        ..ObjectReference::default()
    }
}

/// `spec.images[image]` of `ni` with the job's tag entry added (or its owner reference
/// added and `version` bumped, when the tag is listed already).
pub fn with_tag(
    ni: Option<&NodeImage>,
    input: &Input<'_>,
    image: &str,
    tag: &str,
    uid: &str,
) -> ImageSpec {
    let job = input.job;
    let mut spec = ni
        .and_then(|n| n.spec.images.get(image).cloned())
        .unwrap_or_default();
    let ns = job.namespace().unwrap_or_default();
    for s in &job.spec.pull_secrets {
        if !spec
            .pull_secrets
            .iter()
            .any(|r| r.namespace == ns && &r.name == s)
        {
            spec.pull_secrets.push(ReferenceObject {
                namespace: ns.clone(),
                name: s.clone(),
                mode: None,
            });
        }
    }
    if spec.sandbox_config.is_none() {
        spec.sandbox_config = job.spec.sandbox_config.clone();
    }
    let pull_policy = Some(tag_pull_policy(job, input.ttl_jitter_seconds));
    let created_at = Some(Time(input.now));
    let policy = job.image_pull_policy();
    if let Some(t) = spec.tags.iter_mut().find(|t| t.tag == tag) {
        t.owner_references.retain(|o| o.uid.as_deref() != Some(uid));
        t.owner_references.push(owner_ref(job, uid));
        // a new pull for this job: the runtime short-circuits IfNotPresent when present
        t.version += 1;
        t.created_at = created_at;
        t.pull_policy = pull_policy;
        if policy == ImagePullPolicy::Always || t.image_pull_policy.is_none() {
            t.image_pull_policy = Some(policy);
        }
    } else {
        spec.tags.push(ImageTagSpec {
            tag: tag.to_string(),
            created_at,
            pull_policy,
            owner_references: vec![owner_ref(job, uid)],
            version: 0,
            image_pull_policy: Some(policy),
        });
    }
    spec
}

fn secs_until(t: Timestamp, now: Timestamp) -> i64 {
    t.duration_since(now).as_secs().max(1)
}

fn plus_secs(t: Timestamp, secs: i64) -> Timestamp {
    t.checked_add(SignedDuration::from_secs(secs))
        .unwrap_or(Timestamp::MAX)
}

/// Plans one reconcile of `input.job`.
pub fn plan(input: &Input<'_>) -> Result<Plan, PlanError> {
    let job = input.job;
    let uid = job.metadata.uid.clone().ok_or(PlanError::NoUid)?;
    let old = job.status.clone().unwrap_or_default();
    let ttl = job.spec.completion_policy.ttl_seconds_after_finished;
    let always = job.completion_type() == CompletionPolicyType::Always;

    if let Some(done) = old.completion_time.as_ref().map(|t| t.0) {
        let (delete, requeue) = match ttl.filter(|_| always) {
            Some(ttl) => {
                let at = plus_secs(done, i64::from(ttl));
                if at <= input.now {
                    (true, None)
                } else {
                    (false, Some(secs_until(at, input.now)))
                }
            }
            None => (false, None),
        };
        return Ok(Plan {
            writes: Vec::new(),
            status: old,
            delete,
            requeue_after_seconds: requeue,
        });
    }

    let (image, tag) = split_image(&job.spec.image);
    if image.is_empty() {
        return Err(PlanError::Image(job.spec.image.clone()));
    }
    let start = old.start_time.as_ref().map_or(input.now, |t| t.0);
    let targets = target_nodes(input)?;
    let mut states: Vec<(String, NodeState)> = targets
        .into_iter()
        .map(|n| {
            let s = node_state(input.node_images.get(&n), &image, &tag, &uid);
            (n, s)
        })
        .collect();

    let deadline = job
        .spec
        .completion_policy
        .active_deadline_seconds
        .filter(|_| always)
        .map(|s| plus_secs(start, s));
    let past_deadline = deadline.is_some_and(|d| d <= input.now);

    let mut writes = Vec::new();
    if !past_deadline {
        let active = states
            .iter()
            .filter(|(_, s)| *s == NodeState::Active)
            .count();
        let room = usize::try_from(job.parallelism())
            .unwrap_or(0)
            .saturating_sub(active);
        let waiting: Vec<&str> = states
            .iter()
            .filter(|(_, s)| *s == NodeState::NotSynced)
            .map(|(n, _)| n.as_str())
            .collect();
        let chosen: Vec<String> = hand_out_order(&waiting, &recorded_node_order(job))
            .into_iter()
            .take(room)
            .map(str::to_owned)
            .collect();
        for node in &chosen {
            let ni = input.node_images.get(node.as_str());
            writes.push(NodeImageWrite {
                node: node.clone(),
                create: ni.is_none(),
                image: image.clone(),
                spec: with_tag(ni, input, &image, &tag, &uid),
            });
        }
        let chosen: std::collections::HashSet<&str> = chosen.iter().map(String::as_str).collect();
        for (node, state) in &mut states {
            if chosen.contains(node.as_str()) {
                *state = NodeState::Active;
            }
        }
    }

    let count = |f: fn(&NodeState) -> bool| -> i32 {
        i32::try_from(states.iter().filter(|(_, s)| f(s)).count()).unwrap_or(i32::MAX)
    };
    let desired = i32::try_from(states.len()).unwrap_or(i32::MAX);
    let succeeded = count(|s| *s == NodeState::Succeeded);
    let mut failed = count(|s| matches!(s, NodeState::Failed(_)));
    let active = count(|s| *s == NodeState::Active);
    let pending = count(|s| *s == NodeState::NotSynced);
    let mut failed_nodes: Vec<String> = states
        .iter()
        .filter(|(_, s)| matches!(s, NodeState::Failed(_)))
        .map(|(n, _)| n.clone())
        .collect();
    let failures: Vec<String> = states
        .iter()
        .filter_map(|(n, s)| match s {
            NodeState::Failed(m) => Some(format!("{n}: {m}")),
            _ => None,
        })
        .take(MESSAGE_FAILED_NODES)
        .collect();

    let mut completion_time = None;
    let mut message;
    if always && past_deadline {
        completion_time = Some(Time(input.now));
        failed = desired - succeeded;
        failed_nodes = states
            .iter()
            .filter(|(_, s)| *s != NodeState::Succeeded)
            .map(|(n, _)| n.clone())
            .collect();
        message = "job exceeds activeDeadlineSeconds".to_string();
    } else if always && active == 0 && pending == 0 {
        completion_time = Some(Time(input.now));
        message = "job has completed".to_string();
    } else {
        let done = succeeded + failed;
        let pct = if desired == 0 {
            100.0
        } else {
            f64::from(done) * 100.0 / f64::from(desired)
        };
        message = format!("job is running, progress {pct:.1}%");
    }
    if !failures.is_empty() {
        message = format!("{message}; failed on {}", failures.join("; "));
    }
    failed_nodes.sort();

    let status = ImagePullJobStatus {
        start_time: Some(Time(start)),
        completion_time: completion_time.clone(),
        desired,
        active: if completion_time.is_some() { 0 } else { active },
        succeeded,
        failed,
        message,
        failed_nodes,
    };
    let requeue_after_seconds = match (&completion_time, ttl.filter(|_| always), deadline) {
        (Some(_), Some(ttl), _) => Some(i64::from(ttl).max(1)),
        (None, _, Some(d)) => Some(secs_until(d, input.now)),
        _ => None,
    };
    Ok(Plan {
        writes,
        status,
        delete: false,
        requeue_after_seconds,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
