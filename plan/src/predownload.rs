//! Image pre-download for in-place update (docs "Pre-download image for in-place update";
//! OpenKruise `cloneset_predownload_image.go`): which ImagePullJobs the CloneSet controller
//! creates or deletes and how it labels the update revision, decided as data.
//! [`super::predownload_steps`] makes a [`Decision`] the plan's steps.
//!
//! The rules, in the order [`decide`] applies them:
//!
//! 1. **Enablement**: gate `PreDownloadImageForInPlaceUpdate` ([`PlanOptions::pre_download_image`])
//!    off, or the CloneSet being deleted → nothing at all.
//! 2. **Cleanup**: current revision == update revision → delete every ImagePullJob the
//!    CloneSet controls (owner reference with `controller: true` and its uid).
//! 3. **Trigger**: `status.updatedReadyReplicas` (0 while `status.updateRevision` is not the
//!    update revision: the counters are about another revision) must reach the annotation
//!    `apps.kruise.io/image-predownload-min-updated-ready-pods`. Its value is an integer or
//!    a percent of `spec.replicas` rounded up, as the docs say and as Kruise v1.1–v1.8
//!    computed it (Kruise's v1beta1 field is integer-only; a v1alpha1 percent would be
//!    dropped there). Absent or unreadable counts as 0.
//! 4. The update revision must be stored (the act step creates it; its watch event brings
//!    the next reconcile) and carry neither `apps.kruise.io/pre-predownload-created` nor
//!    `apps.kruise.io/image-predownload-ignored`: each revision is handled once.
//! 5. **Skips** (revision labelled ignored): update type ReCreate or OnDelete;
//!    `spec.replicas` ≤ 3; partition 0 and maxUnavailable (percent rounded down) ≥
//!    replicas, i.e. every pod updates in one batch; the change from the current to the
//!    update revision cannot go in place ([`super::inplace::decide_for_revisions`], the
//!    planner's own in-place rule).
//! 6. **Jobs**: one ImagePullJob per container whose image changes ([`job_for`]), then the
//!    revision is labelled created.
//!
//! **Pull order** (ours; OpenKruise's ImagePullJob controller sorts the selected pods by
//! the owning CloneSet's update order on every reconcile): the jobs created record the
//! nodes of the pods still to update, in the planner's own update order
//! ([`update_node_order`], [`with_node_order`]), and the ImagePullJob controller hands
//! its parallelism slots out in that order, so each batch finds its image pulled.

use std::collections::BTreeMap;
use std::fmt;

use inplace_proto::imagepulljob::{
    CompletionPolicy, CompletionPolicyType, ImagePullJob, ImagePullJobPodSelector,
    ImagePullJobSpec, PullPolicy, SandboxConfig,
};
use inplace_proto::{CloneSet, CloneSetUpdateStrategyType, keys};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use super::diffs;
use super::inplace::{self, InPlaceDecision};
use super::model::{PlanContext, PlanOptions};
use super::revision;
use super::{update, update_order};

/// Pre-download only for CloneSets with more replicas than this.
pub const MIN_REPLICAS_EXCLUSIVE: i32 = 3;
/// Default per-attempt pull timeout of a pre-download job (the reference's code value).
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 300;
/// Default nodes pulling at once.
pub const DEFAULT_PARALLELISM: i32 = 1;
/// Retries after a failed pull attempt.
pub const BACKOFF_LIMIT: i32 = 1;
/// Seconds a finished job is kept.
pub const TTL_SECONDS_AFTER_FINISHED: i32 = 600;

/// What the decision reads, for one CloneSet at one reconcile.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    pub cloneset: &'a CloneSet,
    /// Name of the update revision (the plan's).
    pub update_revision: &'a str,
    /// Name of the current revision (the plan's).
    pub current_revision: &'a str,
    /// Stored ControllerRevisions of the CloneSet; the update one (labels, hash) and the
    /// current one (template) are looked up here.
    pub revisions: &'a [ControllerRevision],
    /// ImagePullJobs of the CloneSet's namespace (those it controls are picked here).
    pub jobs: &'a [ImagePullJob],
    pub options: &'a PlanOptions,
}

/// Why nothing is done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Idle {
    GateOff,
    Deleting,
    /// Revisions converged and no controlled job is left.
    Converged,
    /// The trigger is not reached yet.
    WaitingForUpdatedReady {
        ready: i32,
        min: i32,
    },
    /// The update revision has no ControllerRevision yet.
    RevisionNotStored,
    AlreadyCreated,
    AlreadyIgnored,
}

/// Why a revision is labelled ignored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// Update type ReCreate or OnDelete.
    NotInPlaceStrategy(CloneSetUpdateStrategyType),
    /// `spec.replicas` ≤ 3.
    TooFewReplicas(i32),
    /// Partition 0 and maxUnavailable ≥ replicas: everything updates at once.
    OneBatch { max_unavailable: i32, replicas: i32 },
    /// The revision change needs a recreate.
    NotInPlace(String),
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotInPlaceStrategy(t) => write!(f, "update type is {}", t.as_str()),
            Self::TooFewReplicas(n) => {
                write!(f, "replicas {n} <= {MIN_REPLICAS_EXCLUSIVE}")
            }
            Self::OneBatch {
                max_unavailable,
                replicas,
            } => write!(
                f,
                "partition 0 and maxUnavailable {max_unavailable} >= replicas {replicas}"
            ),
            Self::NotInPlace(reason) => write!(f, "not an in-place update: {reason}"),
        }
    }
}

/// The decision of one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Nothing(Idle),
    /// Label `revision` with `apps.kruise.io/image-predownload-ignored: "true"`.
    Ignore {
        revision: String,
        reason: SkipReason,
    },
    /// Create `jobs` (already existing ones are fine), then label `revision` with
    /// `apps.kruise.io/pre-predownload-created: "true"`.
    Create {
        revision: String,
        jobs: Vec<ImagePullJob>,
    },
    /// Delete these ImagePullJobs (names, in the CloneSet's namespace).
    Delete {
        jobs: Vec<String>,
    },
}

/// Applies the rules of the module documentation.
pub fn decide(input: &Input<'_>) -> Decision {
    let cs = input.cloneset;
    if !input.options.pre_download_image {
        return Decision::Nothing(Idle::GateOff);
    }
    if cs.metadata.deletion_timestamp.is_some() {
        return Decision::Nothing(Idle::Deleting);
    }
    if input.current_revision == input.update_revision {
        let jobs: Vec<String> = controlled_jobs(cs, input.jobs)
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .filter_map(|j| j.metadata.name.clone())
            .collect();
        return if jobs.is_empty() {
            Decision::Nothing(Idle::Converged)
        } else {
            Decision::Delete { jobs }
        };
    }

    let min = min_updated_ready(cs);
    let status = cs.status.as_ref();
    let ready = match status {
        Some(s) if s.update_revision.as_deref() == Some(input.update_revision) => {
            s.updated_ready_replicas
        }
        _ => 0,
    };
    if ready < min {
        return Decision::Nothing(Idle::WaitingForUpdatedReady { ready, min });
    }

    let Some(update) = input
        .revisions
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(input.update_revision))
    else {
        return Decision::Nothing(Idle::RevisionNotStored);
    };
    let labels = update.metadata.labels.as_ref();
    let has = |key: &str| labels.is_some_and(|l| l.contains_key(key));
    if has(keys::PRE_PREDOWNLOAD_CREATED_LABEL) {
        return Decision::Nothing(Idle::AlreadyCreated);
    }
    if has(keys::IMAGE_PREDOWNLOAD_IGNORED_LABEL) {
        return Decision::Nothing(Idle::AlreadyIgnored);
    }

    let ignore = |reason| Decision::Ignore {
        revision: input.update_revision.to_owned(),
        reason,
    };
    let update_type = cs.update_type();
    if matches!(
        update_type,
        CloneSetUpdateStrategyType::ReCreate | CloneSetUpdateStrategyType::OnDelete
    ) {
        return ignore(SkipReason::NotInPlaceStrategy(update_type));
    }
    let replicas = cs.replicas();
    if replicas <= MIN_REPLICAS_EXCLUSIVE {
        return ignore(SkipReason::TooFewReplicas(replicas));
    }
    let (partition, max_unavailable) = partition_and_max_unavailable(cs);
    if partition == 0 && max_unavailable >= replicas {
        return ignore(SkipReason::OneBatch {
            max_unavailable,
            replicas,
        });
    }
    let change = match inplace::decide_for_revisions(
        cs,
        input.revisions,
        input.update_revision,
        Some(input.current_revision),
        input.update_revision,
        input.options,
    ) {
        InPlaceDecision::InPlace(change) => change,
        InPlaceDecision::Recreate { reason } | InPlaceDecision::Refused { reason } => {
            return ignore(SkipReason::NotInPlace(reason));
        }
    };
    let jobs = change
        .images
        .iter()
        .map(|(container, image)| job_for(cs, update, container, image))
        .collect();
    Decision::Create {
        revision: input.update_revision.to_owned(),
        jobs,
    }
}

/// The jobs of `jobs` whose controller is `cs` ([`controls_job`]).
pub fn controlled_jobs<'a>(
    cs: &'a CloneSet,
    jobs: &'a [ImagePullJob],
) -> impl Iterator<Item = &'a ImagePullJob> + 'a {
    jobs.iter().filter(move |j| controls_job(cs, j))
}

/// Whether `cs` is the controller of `job`: same namespace, and a controller reference
/// with the CloneSet's uid (a CloneSet without a uid controls nothing).
pub fn controls_job(cs: &CloneSet, job: &ImagePullJob) -> bool {
    let uid = cs.metadata.uid.as_deref().unwrap_or_default();
    !uid.is_empty()
        && job.metadata.namespace == cs.metadata.namespace
        && job
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.uid == uid)
}

fn annotation<'a>(cs: &'a CloneSet, key: &str) -> Option<&'a str> {
    cs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(|v| v.trim())
}

/// `apps.kruise.io/image-predownload-min-updated-ready-pods`: integer, or percent of
/// `spec.replicas` rounded up; absent, unreadable or negative is 0.
pub fn min_updated_ready(cs: &CloneSet) -> i32 {
    let Some(raw) = annotation(
        cs,
        keys::IMAGE_PREDOWNLOAD_MIN_UPDATED_READY_PODS_ANNOTATION,
    ) else {
        return 0;
    };
    let value = match raw.parse::<i32>() {
        Ok(n) => IntOrString::Int(n),
        Err(_) => IntOrString::String(raw.to_owned()),
    };
    diffs::scaled_value(&value, cs.replicas().max(0), true).map_or(0, |v| {
        i32::try_from(v.clamp(0, i64::from(i32::MAX))).unwrap_or(0)
    })
}

/// A non-negative integer annotation, else `default`.
fn int_annotation(cs: &CloneSet, key: &str, default: i32) -> i32 {
    annotation(cs, key)
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|v| *v >= 0)
        .unwrap_or(default)
}

/// `apps.kruise.io/image-predownload-parallelism`: an integer ≥ 0, else 1 (a percent is
/// not valid for an ImagePullJob and is dropped, like the reference's conversion).
pub fn parallelism(cs: &CloneSet) -> i32 {
    int_annotation(
        cs,
        keys::IMAGE_PREDOWNLOAD_PARALLELISM_ANNOTATION,
        DEFAULT_PARALLELISM,
    )
}

/// `apps.kruise.io/image-predownload-timeout-seconds`: an integer ≥ 0, else 300.
pub fn timeout_seconds(cs: &CloneSet) -> i32 {
    int_annotation(
        cs,
        keys::IMAGE_PREDOWNLOAD_TIMEOUT_ANNOTATION,
        DEFAULT_TIMEOUT_SECONDS,
    )
}

/// Absolute partition (an unreadable value counts 0) and maxUnavailable (default 20 %,
/// percent rounded down, unreadable 0), both against `spec.replicas`.
fn partition_and_max_unavailable(cs: &CloneSet) -> (i32, i32) {
    let replicas = cs.replicas().max(0);
    let strategy = cs.spec.update_strategy.as_ref();
    let partition = strategy
        .and_then(|s| s.partition.as_ref())
        .and_then(|p| diffs::partition_replicas(p, replicas))
        .unwrap_or(0);
    let default = IntOrString::String(diffs::DEFAULT_MAX_UNAVAILABLE.to_owned());
    let max_unavailable = diffs::scaled_value(
        strategy
            .and_then(|s| s.max_unavailable.as_ref())
            .unwrap_or(&default),
        replicas,
        false,
    )
    .map_or(0, |v| {
        i32::try_from(v.clamp(0, i64::from(i32::MAX))).unwrap_or(0)
    });
    (partition, max_unavailable)
}

/// The ImagePullJob for `container` moving to `image` in revision `update`: name
/// `<revision>-<container>`, controlled by the CloneSet, labels = template labels + the
/// revision's hash label, pods of the CloneSet not on the update revision, the
/// template's pull secrets, parallelism and timeout from the annotations, one retry,
/// completion `Always` kept 600 s, sandbox labelled like the pods.
pub fn job_for(
    cs: &CloneSet,
    update: &ControllerRevision,
    container: &str,
    image: &str,
) -> ImagePullJob {
    let update_name = update.metadata.name.clone().unwrap_or_default();
    let hash = update
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::CONTROLLER_REVISION_HASH_LABEL))
        .cloned()
        .unwrap_or_else(|| revision::short_hash(&update_name).to_owned());
    let template = &cs.spec.template.0;
    let template_labels = template.string_map(&["metadata", "labels"]);
    let template_annotations = template.string_map(&["metadata", "annotations"]);
    let mut labels = template_labels.clone();
    labels.insert(
        keys::CONTROLLER_REVISION_HASH_LABEL.to_owned(),
        hash.clone(),
    );

    let mut values = vec![update_name.clone()];
    if hash != update_name {
        values.push(hash);
    }
    let mut expressions = cs
        .spec
        .selector
        .match_expressions
        .clone()
        .unwrap_or_default();
    expressions.push(LabelSelectorRequirement {
        key: keys::REVISION_LABEL.to_owned(),
        operator: "NotIn".to_owned(),
        values: Some(values),
    });
    let pull_secrets = template
        .pointer(&["spec", "imagePullSecrets"])
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|s| s.get("name").and_then(Value::as_str))
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let sandbox = (!template_labels.is_empty() || !template_annotations.is_empty()).then_some(
        SandboxConfig {
            labels: template_labels,
            annotations: template_annotations,
        },
    );
    ImagePullJob {
        metadata: ObjectMeta {
            name: Some(format!("{update_name}-{container}")),
            namespace: cs.metadata.namespace.clone(),
            labels: Some(labels),
            owner_references: Some(vec![revision::owner_reference(cs)]),
            ..ObjectMeta::default()
        },
        spec: ImagePullJobSpec {
            image: image.to_owned(),
            pull_secrets,
            selector: None,
            pod_selector: Some(ImagePullJobPodSelector {
                match_labels: cs.spec.selector.match_labels.clone(),
                match_expressions: Some(expressions),
            }),
            parallelism: Some(IntOrString::Int(parallelism(cs))),
            pull_policy: Some(PullPolicy {
                timeout_seconds: Some(timeout_seconds(cs)),
                backoff_limit: Some(BACKOFF_LIMIT),
            }),
            completion_policy: CompletionPolicy {
                type_: Some(CompletionPolicyType::Always),
                active_deadline_seconds: None,
                ttl_seconds_after_finished: Some(TTL_SECONDS_AFTER_FINISHED),
            },
            sandbox_config: sandbox,
            image_pull_policy: None,
        },
        status: None,
    }
}

/// Longest node-order annotation written ([`encode_node_order`]): far below the API
/// server's 256 KiB for all annotations together; nodes past it are pulled after the
/// listed ones, by name.
pub const MAX_NODE_ORDER_BYTES: usize = 64 * 1024;

/// The nodes of the pods still to move to the update revision, in the order the update
/// step takes them (the candidates of [`update::candidates`] sorted by
/// [`update_order::sort_candidates`]: priority, scatter, the default order, pods in
/// PreparingUpdate first), each node once, at the place of its first pod. Pods the
/// partition keeps come last in that order, so their nodes do too.
pub fn update_node_order(ctx: &PlanContext<'_>) -> Vec<String> {
    let mut candidates = update::candidates(ctx, false);
    update_order::sort_candidates(
        ctx.cloneset().spec.update_strategy.as_ref(),
        &ctx.pods,
        &mut candidates,
    );
    let mut seen = std::collections::HashSet::new();
    candidates
        .into_iter()
        .filter_map(|i| ctx.pods[i].node_name)
        .filter(|n| !n.is_empty() && seen.insert(*n))
        .map(str::to_owned)
        .collect()
}

/// The annotation value for `nodes`: comma-separated, cut after the last whole name that
/// fits in [`MAX_NODE_ORDER_BYTES`]. Node names cannot contain a comma.
pub fn encode_node_order(nodes: &[String]) -> String {
    let mut out = String::new();
    for node in nodes {
        let extra = node.len() + usize::from(!out.is_empty());
        if out.len() + extra > MAX_NODE_ORDER_BYTES {
            break;
        }
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(node);
    }
    out
}

/// Records the pull order `nodes` on the jobs of a [`Decision::Create`] (nothing when
/// `nodes` is empty).
pub fn with_node_order(decision: &mut Decision, nodes: &[String]) {
    let Decision::Create { jobs, .. } = decision else {
        return;
    };
    let value = encode_node_order(nodes);
    if value.is_empty() {
        return;
    }
    for job in jobs {
        job.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(
                keys::PREDOWNLOAD_NODE_ORDER_ANNOTATION.to_owned(),
                value.clone(),
            );
    }
}

/// The labels a decision writes on the update revision: (revision, key).
pub fn revision_label(decision: &Decision) -> Option<(&str, &'static str)> {
    match decision {
        Decision::Ignore { revision, .. } => {
            Some((revision.as_str(), keys::IMAGE_PREDOWNLOAD_IGNORED_LABEL))
        }
        Decision::Create { revision, .. } => {
            Some((revision.as_str(), keys::PRE_PREDOWNLOAD_CREATED_LABEL))
        }
        Decision::Nothing(_) | Decision::Delete { .. } => None,
    }
}

/// Container → image of the jobs of a decision (for logs and tests).
pub fn job_images(decision: &Decision) -> BTreeMap<String, String> {
    match decision {
        Decision::Create { jobs, .. } => jobs
            .iter()
            .map(|j| {
                (
                    j.metadata.name.clone().unwrap_or_default(),
                    j.spec.image.clone(),
                )
            })
            .collect(),
        _ => BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests;
