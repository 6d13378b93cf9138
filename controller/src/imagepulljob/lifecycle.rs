//! The NodeImage lifecycle, pure (reference `pkg/controller/nodeimage`):
//! one reconcile of the NodeImage named after one node, from the node, the NodeImage, the
//! ImagePullJobs that exist and the time, to one step.
//!
//! - A Ready node gets a NodeImage [`CREATION_DELAY`] after it turned Ready, owned by the
//!   Node (so the garbage collector removes it with the node); one made earlier without
//!   the owner (the ImagePullJob controller creates NodeImages lazily) gets it.
//! - A NodeImage whose node is gone is deleted, unless labelled
//!   `apps.kruise.io/fake-nodeimage`.
//! - Spec, per tag: without `createdAt` it is dropped (nothing can time it); owner
//!   references to ImagePullJobs that no longer exist (name gone or another UID) are
//!   dropped, and a tag left without owners goes; a finished tag (status `completionTime`
//!   for the spec's `version`) goes `ttlSecondsAfterFinished` after it finished; an image
//!   without tags goes.
//! - Status, only when the spec is unchanged: a tag the daemon has not reported (for the
//!   spec's `version`) within [`RESPONSE_TIMEOUT`] of `createdAt` is marked Failed, "node
//!   has not responded for a long time"; an unfinished tag past `activeDeadlineSeconds` +
//!   [`RESPONSE_TIMEOUT`] is marked Failed, "pulling exceeds the activeDeadlineSeconds".
//!   The ImagePullJob controller then counts those nodes as failed with that message.
//!
//! Applied by [`super::nodeimages`] in a controller that watches every namespace.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use inplace_proto::keys;
use inplace_proto::nodeimage::{
    ImagePullPhase, ImageSpec, ImageStatus, ImageTagStatus, NodeImage, NodeImageStatus,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// How long a node must have been Ready before it gets a NodeImage.
pub const CREATION_DELAY: Duration = Duration::from_secs(30);
/// How long the daemon may stay silent about a tag (OpenKruise's NodeImage controller: 10 min).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(600);
/// Status message of a tag whose daemon never answered.
pub const NOT_RESPONDED: &str = "node has not responded for a long time";
/// Status message of a tag past its active deadline.
pub const DEADLINE_EXCEEDED: &str = "pulling exceeds the activeDeadlineSeconds";

/// What one reconcile sees.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The node of this name, if it exists.
    pub node: Option<&'a Node>,
    pub node_image: Option<&'a NodeImage>,
    /// `(namespace, name) -> uid` of every ImagePullJob.
    pub jobs: &'a BTreeMap<(String, String), String>,
    pub now: Timestamp,
}

/// The one write of a reconcile.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Nothing,
    /// Create the NodeImage `name`, owned by its node.
    Create {
        name: String,
        owner: OwnerReference,
    },
    /// Delete the NodeImage (its node is gone), guarded by its UID.
    Delete {
        name: String,
        uid: String,
    },
    /// Replace `spec.images` (and add the node owner reference when `owner` is set).
    UpdateSpec {
        images: BTreeMap<String, ImageSpec>,
        owner: Option<OwnerReference>,
        reasons: Vec<String>,
    },
    /// Write `status`; `failed` lists `(image:tag, message)` newly failed, for events.
    UpdateStatus {
        status: NodeImageStatus,
        failed: Vec<(String, String)>,
    },
}

/// The step and when to look again without an event.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub step: Step,
    pub requeue_after: Option<Duration>,
}

fn secs(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n)
}

fn until(at: Timestamp, now: Timestamp) -> Option<Duration> {
    (at > now).then(|| Duration::try_from(at.duration_since(now)).unwrap_or_default())
}

fn earliest(a: &mut Option<Duration>, b: Option<Duration>) {
    if let Some(b) = b {
        *a = Some(a.map_or(b, |a| a.min(b)));
    }
}

/// The owner reference of a NodeImage to its node.
pub fn node_owner(node: &Node) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.metadata.name.clone().unwrap_or_default(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
        block_owner_deletion: None,
        controller: None,
    }
}

/// When the node turned Ready, if it is Ready.
fn ready_since(node: &Node) -> Option<Timestamp> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
        })
}

/// Plans one reconcile of the NodeImage named after `input.node` / `input.node_image`.
pub fn plan(input: &Input<'_>) -> Plan {
    let nothing = |requeue_after| Plan {
        step: Step::Nothing,
        requeue_after,
    };
    let node = input
        .node
        .filter(|n| n.metadata.deletion_timestamp.is_none());
    let Some(ni) = input.node_image else {
        let Some(node) = node else {
            return nothing(None);
        };
        let Some(since) = ready_since(node) else {
            return nothing(None);
        };
        let at = since
            .checked_add(SignedDuration::try_from(CREATION_DELAY).unwrap_or_default())
            .unwrap_or(since);
        if let Some(wait) = until(at, input.now) {
            return nothing(Some(wait));
        }
        return Plan {
            step: Step::Create {
                name: node.metadata.name.clone().unwrap_or_default(),
                owner: node_owner(node),
            },
            requeue_after: None,
        };
    };
    if ni.metadata.deletion_timestamp.is_some() {
        return nothing(None);
    }
    let Some(node) = node else {
        let fake = ni
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(keys::FAKE_NODEIMAGE_LABEL));
        if fake {
            return nothing(None);
        }
        return Plan {
            step: Step::Delete {
                name: ni.metadata.name.clone().unwrap_or_default(),
                uid: ni.metadata.uid.clone().unwrap_or_default(),
            },
            requeue_after: None,
        };
    };

    let (images, reasons, mut requeue) = plan_spec(ni, input);
    let owned = ni
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Node" && Some(&o.uid) == node.metadata.uid.as_ref());
    let owner = (!owned).then(|| node_owner(node));
    if !reasons.is_empty() || owner.is_some() {
        return Plan {
            step: Step::UpdateSpec {
                images,
                owner,
                reasons,
            },
            requeue_after: None,
        };
    }
    let (status, failed, status_requeue) = plan_status(ni, input.now);
    earliest(&mut requeue, status_requeue);
    if failed.is_empty() {
        return nothing(requeue);
    }
    Plan {
        step: Step::UpdateStatus { status, failed },
        requeue_after: requeue,
    }
}

/// `spec.images` with the tags that stay, why others went, and the next TTL expiry.
fn plan_spec(
    ni: &NodeImage,
    input: &Input<'_>,
) -> (BTreeMap<String, ImageSpec>, Vec<String>, Option<Duration>) {
    let mut reasons = Vec::new();
    let mut requeue = None;
    let mut images = BTreeMap::new();
    for (name, spec) in &ni.spec.images {
        let mut kept = Vec::new();
        for tag in &spec.tags {
            let full = format!("{name}:{}", tag.tag);
            if tag.created_at.is_none() {
                reasons.push(format!("{full}: no createdAt"));
                continue;
            }
            let mut tag = tag.clone();
            let before = tag.owner_references.len();
            tag.owner_references.retain(|o| {
                let is_job = o.kind.as_deref() == Some("ImagePullJob")
                    && o.api_version
                        .as_deref()
                        .is_some_and(|v| v.starts_with(&format!("{}/", keys::GROUP)));
                if !is_job {
                    return true;
                }
                let key = (
                    o.namespace.clone().unwrap_or_default(),
                    o.name.clone().unwrap_or_default(),
                );
                input
                    .jobs
                    .get(&key)
                    .is_some_and(|uid| o.uid.as_ref() == Some(uid))
            });
            if tag.owner_references.len() != before {
                reasons.push(format!(
                    "{full}: {} owner job(s) gone",
                    before - tag.owner_references.len()
                ));
                if tag.owner_references.is_empty() {
                    continue;
                }
            }
            let ttl = tag
                .pull_policy
                .as_ref()
                .and_then(|p| p.ttl_seconds_after_finished);
            let finished = ni
                .tag_status(name, &tag.tag)
                .filter(|s| s.version == tag.version)
                .and_then(|s| s.completion_time.as_ref());
            if let (Some(ttl), Some(done)) = (ttl, finished) {
                let expiry = done.0.checked_add(secs(i64::from(ttl))).unwrap_or(done.0);
                match until(expiry, input.now) {
                    None => {
                        reasons.push(format!("{full}: TTL of {ttl}s after completion passed"));
                        continue;
                    }
                    wait => earliest(&mut requeue, wait),
                }
            }
            kept.push(tag);
        }
        if kept.is_empty() {
            if !spec.tags.is_empty() {
                reasons.push(format!("{name}: no tags left"));
            } else {
                reasons.push(format!("{name}: no tags"));
            }
            continue;
        }
        let mut spec = spec.clone();
        spec.tags = kept;
        images.insert(name.clone(), spec);
    }
    (images, reasons, requeue)
}

/// The status with silent or overdue tags failed, the newly failed, and the next timeout.
fn plan_status(
    ni: &NodeImage,
    now: Timestamp,
) -> (NodeImageStatus, Vec<(String, String)>, Option<Duration>) {
    let mut status = ni.status.clone().unwrap_or_default();
    let mut failed = Vec::new();
    let mut requeue = None;
    let timeout = i64::try_from(RESPONSE_TIMEOUT.as_secs()).unwrap_or(i64::MAX);
    for (name, spec) in &ni.spec.images {
        for tag in &spec.tags {
            let Some(created) = &tag.created_at else {
                continue;
            };
            let full = format!("{name}:{}", tag.tag);
            let entry = status
                .image_statuses
                .entry(name.clone())
                .or_insert_with(|| ImageStatus { tags: Vec::new() });
            let current = entry
                .tags
                .iter()
                .position(|t| t.tag == tag.tag && t.version == tag.version);
            let message = match current {
                None => {
                    let at = created.0.checked_add(secs(timeout)).unwrap_or(created.0);
                    match until(at, now) {
                        Some(wait) => {
                            earliest(&mut requeue, Some(wait));
                            None
                        }
                        None => Some(NOT_RESPONDED),
                    }
                }
                Some(i) if entry.tags[i].completion_time.is_none() => {
                    match tag
                        .pull_policy
                        .as_ref()
                        .and_then(|p| p.active_deadline_seconds)
                    {
                        Some(deadline) => {
                            let at = created
                                .0
                                .checked_add(secs(deadline.saturating_add(timeout)))
                                .unwrap_or(created.0);
                            match until(at, now) {
                                Some(wait) => {
                                    earliest(&mut requeue, Some(wait));
                                    None
                                }
                                None => Some(DEADLINE_EXCEEDED),
                            }
                        }
                        None => None,
                    }
                }
                Some(_) => None,
            };
            let Some(message) = message else { continue };
            let failed_status = ImageTagStatus {
                tag: tag.tag.clone(),
                phase: ImagePullPhase::Failed,
                completion_time: Some(Time(now)),
                version: tag.version,
                message: message.to_owned(),
                ..current
                    .and_then(|i| entry.tags.get(i).cloned())
                    .unwrap_or_default()
            };
            entry.tags.retain(|t| t.tag != tag.tag);
            entry.tags.push(failed_status);
            entry.tags.sort_by(|a, b| a.tag.cmp(&b.tag));
            failed.push((full, message.to_owned()));
        }
    }
    status.image_statuses.retain(|_, s| !s.tags.is_empty());
    let listed: BTreeSet<(String, String)> = ni
        .spec
        .images
        .iter()
        .flat_map(|(n, s)| s.tags.iter().map(move |t| (n.clone(), t.tag.clone())))
        .collect();
    let count = |phase: ImagePullPhase| {
        let n = status
            .image_statuses
            .iter()
            .flat_map(|(n, s)| s.tags.iter().map(move |t| (n, t)))
            .filter(|(n, t)| t.phase == phase && listed.contains(&((*n).clone(), t.tag.clone())))
            .count();
        i32::try_from(n).unwrap_or(i32::MAX)
    };
    if !failed.is_empty() {
        status.desired = i32::try_from(listed.len()).unwrap_or(i32::MAX);
        status.succeeded = count(ImagePullPhase::Succeeded);
        status.failed = count(ImagePullPhase::Failed);
        status.pulling = count(ImagePullPhase::Pulling);
        status.waiting = count(ImagePullPhase::Waiting);
    }
    (status, failed, requeue)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;
    use inplace_testkit::pods::t;

    fn node(ready_at: Option<i64>) -> Node {
        let mut n = json!({"metadata": {"name": "n1", "uid": "node-uid"}});
        if let Some(at) = ready_at {
            n["status"] = json!({"conditions": [{"type": "Ready", "status": "True",
                "lastTransitionTime": Time(t(at))}]});
        }
        serde_json::from_value(n).unwrap()
    }

    fn node_image(spec: serde_json::Value, status: serde_json::Value, owned: bool) -> NodeImage {
        let mut ni = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
            "metadata": {"name": "n1", "uid": "ni-uid"}, "spec": spec, "status": status});
        if owned {
            ni["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid"}]);
        }
        serde_json::from_value(ni).unwrap()
    }

    fn job_ref(name: &str, uid: &str) -> serde_json::Value {
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
               "namespace": "default", "name": name, "uid": uid})
    }

    fn jobs(list: &[(&str, &str)]) -> BTreeMap<(String, String), String> {
        list.iter()
            .map(|(n, u)| (("default".to_owned(), (*n).to_owned()), (*u).to_owned()))
            .collect()
    }

    fn run(
        node: Option<&Node>,
        ni: Option<&NodeImage>,
        jobs: &BTreeMap<(String, String), String>,
        now: i64,
    ) -> Plan {
        plan(&Input {
            node,
            node_image: ni,
            jobs,
            now: t(now),
        })
    }

    #[test]
    fn creation_waits_for_the_node_to_be_ready_30_seconds() {
        let none = jobs(&[]);
        assert_eq!(
            run(Some(&node(None)), None, &none, 100),
            Plan {
                step: Step::Nothing,
                requeue_after: None
            }
        );
        let early = run(Some(&node(Some(90))), None, &none, 100);
        assert_eq!(early.step, Step::Nothing);
        assert_eq!(early.requeue_after, Some(Duration::from_secs(20)));
        let due = run(Some(&node(Some(70))), None, &none, 100);
        assert_eq!(
            due.step,
            Step::Create {
                name: "n1".into(),
                owner: node_owner(&node(None))
            }
        );
        // No node, no NodeImage: nothing.
        assert_eq!(run(None, None, &none, 100).step, Step::Nothing);
    }

    #[test]
    fn a_node_image_without_its_node_is_deleted_unless_fake() {
        let none = jobs(&[]);
        let ni = node_image(json!({}), json!({}), true);
        assert_eq!(
            run(None, Some(&ni), &none, 100).step,
            Step::Delete {
                name: "n1".into(),
                uid: "ni-uid".into()
            }
        );
        let mut fake = ni.clone();
        fake.metadata.labels =
            Some([(keys::FAKE_NODEIMAGE_LABEL.to_owned(), "true".to_owned())].into());
        assert_eq!(run(None, Some(&fake), &none, 100).step, Step::Nothing);
    }

    #[test]
    fn a_node_image_made_before_gets_its_node_as_owner() {
        let ni = node_image(json!({}), json!({}), false);
        let p = run(Some(&node(Some(0))), Some(&ni), &jobs(&[]), 100);
        let Step::UpdateSpec { owner, reasons, .. } = p.step else {
            panic!("{p:?}")
        };
        assert_eq!(owner, Some(node_owner(&node(None))));
        assert!(reasons.is_empty());
    }

    /// `(tag spec, tag status, jobs that exist, now) -> tag kept?, reason fragment`.
    #[test]
    fn tags_go_with_their_jobs_their_ttl_or_without_created_at() {
        let cases = [
            // Owner job exists, not finished: kept.
            (
                json!({"tag": "v1", "createdAt": Time(t(0)), "ownerReferences": [job_ref("j", "u1")]}),
                json!(null),
                vec![("j", "u1")],
                100,
                true,
                "",
            ),
            // Owner job gone: the tag goes.
            (
                json!({"tag": "v1", "createdAt": Time(t(0)), "ownerReferences": [job_ref("j", "u1")]}),
                json!(null),
                vec![],
                100,
                false,
                "owner job(s) gone",
            ),
            // A job of the same name with another UID is another job.
            (
                json!({"tag": "v1", "createdAt": Time(t(0)), "ownerReferences": [job_ref("j", "u1")]}),
                json!(null),
                vec![("j", "u2")],
                100,
                false,
                "owner job(s) gone",
            ),
            // No createdAt: nothing can time it.
            (
                json!({"tag": "v1", "ownerReferences": [job_ref("j", "u1")]}),
                json!(null),
                vec![("j", "u1")],
                100,
                false,
                "no createdAt",
            ),
            // Finished at 50 with TTL 100: kept at 149, gone at 150.
            (
                json!({"tag": "v1", "createdAt": Time(t(0)), "ownerReferences": [job_ref("j", "u1")],
                    "pullPolicy": {"ttlSecondsAfterFinished": 100}}),
                json!({"tag": "v1", "phase": "Succeeded", "completionTime": Time(t(50))}),
                vec![("j", "u1")],
                149,
                true,
                "",
            ),
            (
                json!({"tag": "v1", "createdAt": Time(t(0)), "ownerReferences": [job_ref("j", "u1")],
                    "pullPolicy": {"ttlSecondsAfterFinished": 100}}),
                json!({"tag": "v1", "phase": "Succeeded", "completionTime": Time(t(50))}),
                vec![("j", "u1")],
                150,
                false,
                "TTL",
            ),
            // A finished status of an older version does not start the TTL.
            (
                json!({"tag": "v1", "createdAt": Time(t(0)), "version": 2,
                    "ownerReferences": [job_ref("j", "u1")], "pullPolicy": {"ttlSecondsAfterFinished": 100}}),
                json!({"tag": "v1", "version": 1, "phase": "Succeeded", "completionTime": Time(t(50))}),
                vec![("j", "u1")],
                500,
                true,
                "",
            ),
        ];
        for (i, (tag, tag_status, existing, now, kept, reason)) in cases.into_iter().enumerate() {
            let status = if tag_status.is_null() {
                json!({})
            } else {
                json!({"imageStatuses": {"app": {"tags": [tag_status]}}})
            };
            let ni = node_image(json!({"images": {"app": {"tags": [tag]}}}), status, true);
            let p = run(Some(&node(Some(0))), Some(&ni), &jobs(&existing), now);
            match p.step {
                Step::UpdateSpec {
                    images, reasons, ..
                } => {
                    assert!(!kept, "case {i}: removed ({reasons:?})");
                    assert!(images.is_empty(), "case {i}: {images:?}");
                    assert!(
                        reasons.iter().any(|r| r.contains(reason)),
                        "case {i}: {reasons:?}"
                    );
                }
                other => assert!(kept, "case {i}: kept, {other:?}"),
            }
        }
    }

    #[test]
    fn the_ttl_sets_the_requeue() {
        let ni = node_image(
            json!({"images": {"app": {"tags": [{"tag": "v1", "createdAt": Time(t(0)),
                "ownerReferences": [job_ref("j", "u1")], "pullPolicy": {"ttlSecondsAfterFinished": 100}}]}}}),
            json!({"imageStatuses": {"app": {"tags": [{"tag": "v1", "phase": "Succeeded",
                "completionTime": Time(t(50))}]}}}),
            true,
        );
        let p = run(Some(&node(Some(0))), Some(&ni), &jobs(&[("j", "u1")]), 120);
        assert_eq!(p.step, Step::Nothing);
        assert_eq!(p.requeue_after, Some(Duration::from_secs(30)));
    }

    #[test]
    fn silent_daemons_and_overdue_pulls_fail_the_tag() {
        let spec = |deadline: Option<i64>| {
            let mut tag = json!({"tag": "v1", "createdAt": Time(t(0)), "version": 1,
                                 "ownerReferences": [job_ref("j", "u1")]});
            if let Some(d) = deadline {
                tag["pullPolicy"] = json!({"activeDeadlineSeconds": d});
            }
            json!({"images": {"app": {"tags": [tag]}}})
        };
        let existing = jobs(&[("j", "u1")]);
        // Not reported: waits the response timeout, then fails.
        let ni = node_image(spec(None), json!({}), true);
        let p = run(Some(&node(Some(0))), Some(&ni), &existing, 599);
        assert_eq!(p.step, Step::Nothing);
        assert_eq!(p.requeue_after, Some(Duration::from_secs(1)));
        let p = run(Some(&node(Some(0))), Some(&ni), &existing, 600);
        let Step::UpdateStatus { status, failed } = p.step else {
            panic!("{p:?}")
        };
        assert_eq!(failed, [("app:v1".to_owned(), NOT_RESPONDED.to_owned())]);
        let tag = &status.image_statuses["app"].tags[0];
        assert_eq!((tag.phase, tag.version), (ImagePullPhase::Failed, 1));
        assert_eq!(tag.completion_time, Some(Time(t(600))));
        assert_eq!((status.desired, status.failed), (1, 1));

        // Reported for an older version only: the same.
        let old = node_image(
            spec(None),
            json!({"imageStatuses": {"app": {"tags": [{"tag": "v1", "version": 0, "phase": "Succeeded",
                "completionTime": Time(t(1))}]}}}),
            true,
        );
        let p = run(Some(&node(Some(0))), Some(&old), &existing, 600);
        assert!(
            matches!(p.step, Step::UpdateStatus { ref failed, .. } if failed[0].1 == NOT_RESPONDED),
            "{p:?}"
        );

        // Reported and still pulling: the active deadline (+ the response timeout) fails it.
        let pulling = json!({"imageStatuses": {"app": {"tags": [{"tag": "v1", "version": 1,
            "phase": "Pulling", "startTime": Time(t(5))}]}}});
        let ni = node_image(spec(Some(100)), pulling.clone(), true);
        let p = run(Some(&node(Some(0))), Some(&ni), &existing, 699);
        assert_eq!(
            (p.step, p.requeue_after),
            (Step::Nothing, Some(Duration::from_secs(1)))
        );
        let p = run(Some(&node(Some(0))), Some(&ni), &existing, 700);
        let Step::UpdateStatus { status, failed } = p.step else {
            panic!("{p:?}")
        };
        assert_eq!(failed[0].1, DEADLINE_EXCEEDED);
        let tag = &status.image_statuses["app"].tags[0];
        assert_eq!(
            tag.start_time,
            Some(Time(t(5))),
            "the rest of the status is kept"
        );
        // Without a deadline a pull that was reported is never failed here.
        let ni = node_image(spec(None), pulling, true);
        assert_eq!(
            run(Some(&node(Some(0))), Some(&ni), &existing, 100_000).step,
            Step::Nothing
        );

        // Finished tags are left alone.
        let done = node_image(
            spec(Some(100)),
            json!({"imageStatuses": {"app": {"tags": [{"tag": "v1", "version": 1, "phase": "Succeeded",
                "completionTime": Time(t(10))}]}}}),
            true,
        );
        assert_eq!(
            run(Some(&node(Some(0))), Some(&done), &existing, 100_000).step,
            Step::Nothing
        );
    }

    #[test]
    fn spec_changes_come_before_status_changes() {
        // A gone job and a silent daemon: the tag is removed first, nothing is failed.
        let ni = node_image(
            json!({"images": {"app": {"tags": [{"tag": "v1", "createdAt": Time(t(0)),
                "ownerReferences": [job_ref("j", "u1")]}]}}}),
            json!({}),
            true,
        );
        let p = run(Some(&node(Some(0))), Some(&ni), &jobs(&[]), 10_000);
        assert!(matches!(p.step, Step::UpdateSpec { .. }), "{p:?}");
    }
}
