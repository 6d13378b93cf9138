//! The pure core of the ImageListPullJob controller: from the list job, the ImagePullJobs it
//! owns and the time to the jobs to create and delete, the list's status and whether the
//! list is deleted. The rules are the reference's (`pkg/controller/imagelistpulljob`,
//! v1.9.0):
//! - one ImagePullJob per image of `spec.images`, named `<list>-<random>` (generateName),
//!   labelled `controller-revision-hash` with the hash of the template (every spec field
//!   but `images`), controlled by the list, its spec the template plus the image;
//! - a job whose image left the list is deleted; a job made from another template is
//!   deleted and made again (it is current when its hash label is the template's, or when
//!   its spec equals the template's: the reference's own fallback, which here also keeps
//!   the jobs a reference controller made, whose hashes are computed differently);
//! - status: `desired` = the number of images; over the started jobs (`startTime` set):
//!   `active` = jobs with a node pulling, `completed` = jobs whose every node finished,
//!   `succeeded` = jobs whose every node succeeded, `failedImageStatuses` = jobs with a
//!   failed node; `completionTime` once `completed == desired` (not with type `Never`);
//! - once complete the list is left alone, and deleted `ttlSecondsAfterFinished` after
//!   `completionTime` (its jobs go with it, by their owner reference); `activeDeadlineSeconds`
//!   is the jobs' own (each fails its unfinished nodes then, which completes it).
//!
//! Where this differs: the status counts only the jobs that are kept (the reference's
//! counts also the ones it is deleting in the same pass, so a removed image's finished job
//! could complete a list whose new image has not been pulled); two jobs of one image (the
//! reference keeps one at random) keep the oldest and delete the other;
//! `failedImageStatuses` follow the order of `spec.images` (the reference's, map order).

use std::collections::{BTreeMap, BTreeSet};

use inplace_proto::imagelistpulljob::{
    FailedImageStatus, ImageListPullJob, ImageListPullJobStatus,
};
use inplace_proto::imagepulljob::{CompletionPolicyType, ImagePullJob, ImagePullJobSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

/// The label holding the template hash on the list's jobs (the reference's
/// `apps.ControllerRevisionHashLabelKey`).
pub const TEMPLATE_HASH_LABEL: &str = "controller-revision-hash";

/// Everything one reconcile of a list job looks at.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub list: &'a ImageListPullJob,
    /// The ImagePullJobs the list controls, those being deleted included.
    pub jobs: &'a [ImagePullJob],
    pub now: Timestamp,
}

/// One ImagePullJob to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// `generateName`: `<list>-`.
    pub generate_name: String,
    /// The template hash, for [`TEMPLATE_HASH_LABEL`].
    pub hash: String,
    pub spec: ImagePullJobSpec,
}

/// What to do for a list job.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Delete the list (past its TTL); nothing else is done then.
    pub delete_list: bool,
    /// Jobs to create, in the order of `spec.images`.
    pub create: Vec<NewJob>,
    /// Names of jobs to delete, sorted.
    pub delete: Vec<String>,
    /// The list's status as it should be.
    pub status: ImageListPullJobStatus,
    /// Reconcile again after this many seconds (the TTL), if set.
    pub requeue_after_seconds: Option<i64>,
}

/// The hash of the template, as the label value: FNV-1a (32 bits) of the template's
/// canonical JSON (keys sorted), its decimal digits spelt with the reference's
/// `rand.SafeEncodeString` alphabet. The reference hashes Go's dump of the struct, so the
/// values differ from its; they are only ever compared with each other.
pub fn template_hash(list: &ImageListPullJob) -> String {
    let json = serde_json::to_value(list.spec.job_spec(""))
        .map(|v| v.to_string())
        .unwrap_or_default();
    let mut h: u32 = 0x811c_9dc5;
    for b in json.as_bytes() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    safe_encode(&h.to_string())
}

/// `k8s.io/apimachinery/pkg/util/rand.SafeEncodeString`: each byte mapped into an
/// alphabet without vowels and look-alikes.
fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

/// Whether `job` was made from the list's current template.
fn is_current(job: &ImagePullJob, list: &ImageListPullJob, hash: &str) -> bool {
    if job.labels().get(TEMPLATE_HASH_LABEL).map(String::as_str) == Some(hash) {
        return true;
    }
    // `imagePullPolicy` is defaulted on the job (IfNotPresent) and not on the list
    let mut want = list.spec.job_spec(&job.spec.image);
    let mut have = job.spec.clone();
    want.image_pull_policy = Some(want.image_pull_policy.unwrap_or_default());
    have.image_pull_policy = Some(have.image_pull_policy.unwrap_or_default());
    want == have
}

fn plus_secs(t: Timestamp, secs: i64) -> Timestamp {
    t.checked_add(SignedDuration::from_secs(secs))
        .unwrap_or(Timestamp::MAX)
}

/// Plans one reconcile of `input.list`.
pub fn plan(input: &Input<'_>) -> Plan {
    let list = input.list;
    let old = list.status.clone().unwrap_or_default();

    if let Some(done) = old.completion_time.as_ref().map(|t| t.0) {
        let (delete_list, requeue_after_seconds) =
            match list.spec.completion_policy.ttl_seconds_after_finished {
                Some(ttl) => {
                    let at = plus_secs(done, i64::from(ttl));
                    if at <= input.now {
                        (true, None)
                    } else {
                        let secs = at.duration_since(input.now).as_secs().max(1);
                        (false, Some(secs))
                    }
                }
                None => (false, None),
            };
        return Plan {
            delete_list,
            create: Vec::new(),
            delete: Vec::new(),
            status: old,
            requeue_after_seconds,
        };
    }

    let hash = template_hash(list);
    let wanted: BTreeSet<&str> = list.spec.images.iter().map(String::as_str).collect();
    let mut delete = BTreeSet::new();
    // the kept job of each image: current, oldest first
    let mut kept: BTreeMap<&str, &ImagePullJob> = BTreeMap::new();
    let mut live: Vec<&ImagePullJob> = input
        .jobs
        .iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .collect();
    live.sort_by(|a, b| {
        let created = |j: &ImagePullJob| j.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(a)
            .cmp(&created(b))
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    for job in live {
        let image = job.spec.image.as_str();
        if !wanted.contains(image) || !is_current(job, list, &hash) || kept.contains_key(image) {
            delete.insert(job.name_any());
        } else {
            kept.insert(image, job);
        }
    }

    let mut seen = BTreeSet::new();
    let create = list
        .spec
        .images
        .iter()
        .filter(|i| !kept.contains_key(i.as_str()) && seen.insert(i.as_str()))
        .map(|image| NewJob {
            generate_name: format!("{}-", list.name_any()),
            hash: hash.clone(),
            spec: list.spec.job_spec(image),
        })
        .collect();

    let status = aggregate(list, &kept, &old, input.now);
    Plan {
        delete_list: false,
        create,
        delete: delete.into_iter().collect(),
        status,
        requeue_after_seconds: None,
    }
}

/// The list's status from its kept jobs (by image).
fn aggregate(
    list: &ImageListPullJob,
    kept: &BTreeMap<&str, &ImagePullJob>,
    old: &ImageListPullJobStatus,
    now: Timestamp,
) -> ImageListPullJobStatus {
    let mut status = ImageListPullJobStatus {
        start_time: Some(old.start_time.clone().unwrap_or(Time(now))),
        desired: i32::try_from(list.spec.images.len()).unwrap_or(i32::MAX),
        ..ImageListPullJobStatus::default()
    };
    let mut counted = BTreeSet::new();
    for image in &list.spec.images {
        let Some(job) = kept.get(image.as_str()) else {
            continue;
        };
        if !counted.insert(image.as_str()) {
            continue;
        }
        let Some(s) = job.status.as_ref().filter(|s| s.start_time.is_some()) else {
            continue;
        };
        if s.active > 0 {
            status.active += 1;
        }
        if s.failed > 0 {
            status.failed_image_statuses.push(FailedImageStatus {
                image_pull_job: job.name_any(),
                name: job.spec.image.clone(),
                message: format!(
                    "Please check for details which nodes failed by 'kubectl get ImagePullJob {}'.",
                    job.name_any()
                ),
            });
        }
        if s.desired == s.failed + s.succeeded {
            status.completed += 1;
        }
        if s.desired == s.succeeded {
            status.succeeded += 1;
        }
    }
    if list.completion_type() != CompletionPolicyType::Never && status.desired == status.completed {
        status.completion_time = Some(Time(now));
    }
    status
}

#[cfg(test)]
#[path = "list_plan/tests.rs"]
mod tests;
