//! The writes of the actions that neither move a pod in place ([`super::inplace_write`])
//! nor change its lifecycle state ([`super::lifecycle_write`]), planned whole: for each
//! such action its target, its precondition and its body, as data the applier sends.
//!
//! - [`Action::Create`]: a [`CreateRecipe`], not the pod itself (a plan may create a
//!   thousand pods, and every pod would repeat the template): the pod's name, revision and
//!   instance id, the labels it gets beyond the template's, and the PVCs still to create.
//!   [`CreateRecipe::render`] makes the objects from it and the revision's template, for
//!   the applier and for `kubectl inplace plan` alike. The lifecycle timestamp
//!   annotation gets the write time.
//! - [`Action::Delete`]: the pod with a UID precondition (a replacement of the same name
//!   is never deleted by a stale decision), then its PVCs, each with its UID, unless
//!   another live pod of the same instance uses them.
//! - [`Action::DeletePvc`]: the PVC with its UID.
//! - [`Action::ReownPvcToPod`]: a merge patch of the PVC's owner references (the
//!   CloneSet's dropped, the pod's added), only on the PVC version read.
//! - [`Action::PrunePodsToDelete`]: a merge patch of `spec.scaleStrategy.podsToDelete`
//!   on the CloneSet version planned from (a concurrent edit by the user wins).
//! - Recreate ([`Action::Update`] with [`UpdateMethod::Recreate`]) and
//!   [`Action::SetTemplateHash`]: a strategic merge patch of the pod's labels, without
//!   precondition (the label is right whatever the version).
//! - [`Action::ReportInPlaceStall`]: a strategic merge patch of `pods/status`
//!   (`InPlaceUpdateReady` False with its reason and message) on the pod version judged.
//!   The completion ([`Action::CompleteInPlaceUpdate`]) is [`super::completion_write`]'s:
//!   its patch may carry the lifecycle labels of the same plan.
//!
//! An action that needs no write (its pod or PVC is already gone, nothing left to prune)
//! gets [`Write::Skip`] saying why.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use inplace_proto::imagepulljob::ImagePullJob;
use inplace_proto::{CloneSet, PodTemplate, keys};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use super::build;
use super::model::{Action, PodFacts, UpdateMethod};
use super::revision::template_for;
use crate::cached::CachedPod;

/// An action whose write cannot be planned from what is known.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActionWriteError {
    /// An object the write is made from is not known (not in the snapshot).
    #[error("{0} not found in the cache")]
    NotCached(String),
}

/// What the writes are planned from besides the action.
#[derive(Clone, Copy, Debug)]
pub struct ActionInputs<'a> {
    pub cloneset: &'a CloneSet,
    /// The CloneSet's pods (those the plan names among them).
    pub pods: &'a [Arc<CachedPod>],
    pub pvcs: &'a [PersistentVolumeClaim],
    pub revisions: &'a [ControllerRevision],
    pub update_revision: &'a str,
    /// `CloneSetShortHash`: the revision label of a created pod holds only the hash.
    pub short_hash: bool,
}

/// How a pod is created.
///
/// The labels the pod gets beyond its template's ([`CreateRecipe::labels`]) are shown
/// with it but kept as the switch they follow from: a plan that creates thousands of pods
/// holds thousands of recipes, and four strings each are most of a recipe's size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateRecipe {
    pub pod: String,
    pub revision: String,
    pub instance_id: String,
    /// `controller-revision-hash` holds only the hash (`CloneSetShortHash`).
    pub short_hash_label: bool,
    /// The PVCs of the instance to create first (those not there yet), in template order.
    pub pvcs: Vec<String>,
}

impl CreateRecipe {
    /// The labels the pod gets beyond its template's ([`build::added_labels`]).
    pub fn labels(&self) -> BTreeMap<String, String> {
        build::added_labels(&self.revision, &self.instance_id, self.short_hash_label)
    }
}

/// A recipe as shown: its labels written out.
impl Serialize for CreateRecipe {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Shown<'a> {
            pod: &'a str,
            revision: &'a str,
            instance_id: &'a str,
            labels: BTreeMap<String, String>,
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            pvcs: &'a [String],
        }
        Shown {
            pod: &self.pod,
            revision: &self.revision,
            instance_id: &self.instance_id,
            labels: self.labels(),
            pvcs: &self.pvcs,
        }
        .serialize(serializer)
    }
}

/// The objects of a [`CreateRecipe`], as JSON (fields unknown to k8s-openapi kept).
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    pub pod: Value,
    pub pvcs: Vec<Value>,
}

impl CreateRecipe {
    /// The pod and the PVCs to create, from `template` (the revision's,
    /// [`template_of_recipe`]); `now` stamps the lifecycle timestamp annotation.
    pub fn render(&self, cs: &CloneSet, template: &PodTemplate, now: Timestamp) -> Rendered {
        let pod = build::pod_json_with_labels(cs, template, &self.instance_id, &self.labels(), now);
        let pvcs = build::pvcs_json(cs, &self.instance_id)
            .into_iter()
            .filter(|p| {
                p.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .is_some_and(|name| self.pvcs.iter().any(|n| n == name))
            })
            .collect();
        Rendered { pod, pvcs }
    }
}

/// The template of the recipe's revision.
pub fn template_of_recipe(
    recipe: &CreateRecipe,
    cs: &CloneSet,
    revisions: &[ControllerRevision],
    update_revision: &str,
) -> Result<PodTemplate, ActionWriteError> {
    template_for(cs, revisions, update_revision, &recipe.revision).ok_or_else(|| {
        ActionWriteError::NotCached(format!("template of revision {}", recipe.revision))
    })
}

/// A delete of a PVC, only of this UID.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PvcDelete {
    pub pvc: String,
    pub uid: String,
}

/// The object a [`Patch`] goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Target {
    /// The pod (strategic merge patch).
    Pod,
    /// The pod's `status` subresource (strategic merge patch: conditions merge by type).
    PodStatus,
    /// A PVC (merge patch).
    Pvc,
    /// The CloneSet (merge patch).
    CloneSet,
    /// A ControllerRevision of the CloneSet (merge patch).
    ControllerRevision,
}

/// A patch of one object.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Patch {
    pub target: Target,
    pub name: String,
    /// The precondition: the object version the decision was made from. None: no
    /// precondition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// The body without precondition and write time.
    pub patch: Value,
    /// Every condition of the status patch gets the write time as `lastTransitionTime`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stamp_conditions: bool,
}

impl Patch {
    /// The body sent: with the precondition and, where asked, the write time `now`.
    pub fn body(&self, now: &Time) -> Value {
        let mut body = self.patch.clone();
        if let Some(rv) = &self.resource_version {
            body["metadata"]["resourceVersion"] = json!(rv);
        }
        if self.stamp_conditions
            && let Some(conditions) = body
                .pointer_mut("/status/conditions")
                .and_then(Value::as_array_mut)
        {
            for c in conditions {
                c["lastTransitionTime"] = json!(now);
            }
        }
        body
    }
}

/// One action's write.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Write {
    Create(CreateRecipe),
    /// The pod (UID precondition), then its PVCs.
    DeletePod {
        pod: String,
        uid: String,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pvcs: Vec<PvcDelete>,
    },
    DeletePvc(PvcDelete),
    Patch(Patch),
    /// An ImagePullJob of image pre-download ([`super::predownload_steps`]).
    CreateImagePullJob {
        job: Box<ImagePullJob>,
    },
    /// An ImagePullJob, only of this UID.
    DeleteImagePullJob {
        job: String,
        uid: String,
    },
    /// Nothing to write.
    Skip {
        why: &'static str,
    },
}

/// What one action writes.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionWrite {
    /// The index of the action in the plan's actions.
    pub action: usize,
    #[serde(flatten)]
    pub write: Write,
}

/// The pod an action of this module writes, if it is about one.
fn pod_named(action: &Action) -> Option<&str> {
    match action {
        Action::Delete { pod, .. }
        | Action::Update {
            pod,
            method: UpdateMethod::Recreate,
            ..
        }
        | Action::SetTemplateHash { pod, .. }
        | Action::ReportInPlaceStall { pod, .. }
        | Action::ReownPvcToPod { pod, .. } => Some(pod),
        _ => None,
    }
}

/// Whether this module plans the write of `action`.
pub fn covers(action: &Action) -> bool {
    matches!(
        action,
        Action::Create { .. } | Action::DeletePvc { .. } | Action::PrunePodsToDelete { .. }
    ) || pod_named(action).is_some()
}

fn not_cached_pod(cs: &CloneSet, name: &str) -> ActionWriteError {
    let ns = cs.metadata.namespace.as_deref().unwrap_or_default();
    ActionWriteError::NotCached(format!("pod {ns}/{name}"))
}

fn skip(action: usize, why: &'static str) -> ActionWrite {
    ActionWrite {
        action,
        write: Write::Skip { why },
    }
}

/// The write of `action` (at `index` in its plan), `pod` being the cached pod it names
/// (None when unknown); None for an action this module does not cover ([`covers`]).
pub fn of(
    inputs: &ActionInputs,
    pod: Option<&CachedPod>,
    index: usize,
    action: &Action,
) -> Option<Result<ActionWrite, ActionWriteError>> {
    let cs = inputs.cloneset;
    let planned = |write| {
        Ok(ActionWrite {
            action: index,
            write,
        })
    };
    let pod_or_err = |name: &str| pod.ok_or_else(|| not_cached_pod(cs, name));
    Some(match action {
        Action::Create {
            revision,
            instance_id,
        } => create(inputs, revision, instance_id).map(|r| ActionWrite {
            action: index,
            write: Write::Create(r),
        }),
        Action::Delete { .. } => Ok(match pod {
            None => skip(index, "the pod is gone"),
            Some(pod) => ActionWrite {
                action: index,
                write: delete_pod(inputs, pod),
            },
        }),
        Action::DeletePvc { pvc } => Ok(match live_pvc(inputs.pvcs, pvc) {
            Some(delete) => ActionWrite {
                action: index,
                write: Write::DeletePvc(delete),
            },
            None => skip(index, "the PVC is gone or terminating"),
        }),
        Action::ReownPvcToPod { pvc, pod: name } => {
            let Some(claim) = inputs
                .pvcs
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(pvc.as_str()))
            else {
                return Some(Ok(skip(index, "the PVC is gone")));
            };
            pod_or_err(name).and_then(|pod| planned(Write::Patch(reown(cs, claim, pvc, pod))))
        }
        Action::PrunePodsToDelete { names } => Ok(match prune(cs, names) {
            Some(patch) => ActionWrite {
                action: index,
                write: Write::Patch(patch),
            },
            None => skip(index, "nothing of it is in podsToDelete"),
        }),
        Action::Update {
            pod: name,
            method: UpdateMethod::Recreate,
            ..
        } => pod_or_err(name)
            .and_then(|_| planned(label_patch(name, keys::SPECIFIED_DELETE_LABEL, "true"))),
        Action::SetTemplateHash { pod: name, hash } => pod_or_err(name)
            .and_then(|_| planned(label_patch(name, keys::POD_TEMPLATE_HASH_LABEL, hash))),
        Action::ReportInPlaceStall {
            pod: name,
            reason,
            message,
        } => pod_or_err(name).and_then(|pod| {
            let status = json!({"conditions": [{
                "type": keys::INPLACE_UPDATE_READY_CONDITION, "status": "False",
                "reason": reason, "message": message,
            }]});
            planned(status_patch(pod, name, status, false))
        }),
        _ => return None,
    })
}

/// The writes of the actions among `actions` this module covers, aligned with `actions`
/// (`None` for an action it does not cover), the pods they name found among `pods` (the
/// plan's facts). A write that cannot be planned is kept as its error.
pub fn all(
    inputs: &ActionInputs,
    pods: &[PodFacts<'_>],
    actions: &[Action],
) -> Vec<Option<Result<ActionWrite, ActionWriteError>>> {
    let by_name = super::pod_lookup::pods_named(
        pods,
        actions.iter().filter(|a| covers(a)).filter_map(pod_named),
    );
    actions
        .iter()
        .enumerate()
        .map(|(index, action)| {
            let pod = pod_named(action).and_then(|name| by_name.get(name).copied());
            of(inputs, pod, index, action)
        })
        .collect()
}

fn create(
    inputs: &ActionInputs,
    revision: &str,
    instance_id: &str,
) -> Result<CreateRecipe, ActionWriteError> {
    let cs = inputs.cloneset;
    // Only whether the template is known: cloning it for every create of a large plan
    // would cost what the recipe saves.
    let known = revision == inputs.update_revision
        || inputs
            .revisions
            .iter()
            .any(|r| r.metadata.name.as_deref() == Some(revision));
    if !known {
        return Err(ActionWriteError::NotCached(format!(
            "template of revision {revision}"
        )));
    }
    let cs_name = cs.metadata.name.as_deref().unwrap_or_default();
    let existing: BTreeSet<&str> = inputs
        .pvcs
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    let pvcs = cs
        .spec
        .volume_claim_templates
        .iter()
        .filter_map(|vct| vct.name())
        .map(|vct| build::pvc_name(vct, cs_name, instance_id))
        .filter(|name| !existing.contains(name.as_str()))
        .collect();
    Ok(CreateRecipe {
        pod: build::pod_name(cs_name, instance_id),
        revision: revision.to_owned(),
        instance_id: instance_id.to_owned(),
        short_hash_label: inputs.short_hash,
        pvcs,
    })
}

/// The PVC `name` with its UID, unless it is gone or already terminating.
fn live_pvc(pvcs: &[PersistentVolumeClaim], name: &str) -> Option<PvcDelete> {
    pvcs.iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| PvcDelete {
            pvc: name.to_owned(),
            uid: p.metadata.uid.clone().unwrap_or_default(),
        })
}

fn delete_pod(inputs: &ActionInputs, pod: &CachedPod) -> Write {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let labels = pod.label_map();
    // The pod's PVCs go with it, unless another live pod of the same instance uses them.
    let pvcs = match labels.get(keys::INSTANCE_ID_LABEL) {
        Some(id) => {
            let reused = inputs.pods.iter().any(|p| {
                p.metadata.uid != pod.metadata.uid
                    && p.metadata.deletion_timestamp.is_none()
                    && p.label_map().get(keys::INSTANCE_ID_LABEL) == Some(id)
            });
            if reused {
                Vec::new()
            } else {
                inputs
                    .pvcs
                    .iter()
                    .filter(|p| {
                        p.metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(keys::INSTANCE_ID_LABEL))
                            .is_some_and(|v| v == id)
                    })
                    .filter_map(|p| live_pvc(inputs.pvcs, p.metadata.name.as_deref()?))
                    .collect()
            }
        }
        None => Vec::new(),
    };
    Write::DeletePod {
        pod: pod.metadata.name.clone().unwrap_or_default(),
        uid,
        pvcs,
    }
}

fn reown(cs: &CloneSet, claim: &PersistentVolumeClaim, pvc: &str, pod: &CachedPod) -> Patch {
    let cs_uid = cs.metadata.uid.clone().unwrap_or_default();
    let mut refs: Vec<Value> = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.uid != cs_uid)
        .map(|o| serde_json::to_value(o).unwrap_or(Value::Null))
        .filter(|v| !v.is_null())
        .collect();
    refs.push(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "name": pod.metadata.name,
        "uid": pod.metadata.uid,
        "controller": true,
        "blockOwnerDeletion": true,
    }));
    Patch {
        target: Target::Pvc,
        name: pvc.to_owned(),
        resource_version: claim.metadata.resource_version.clone(),
        patch: json!({"metadata": {"ownerReferences": refs}}),
        stamp_conditions: false,
    }
}

fn prune(cs: &CloneSet, names: &[String]) -> Option<Patch> {
    let current = &cs.spec.scale_strategy.as_ref()?.pods_to_delete;
    let drop: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    let kept: Vec<&String> = current
        .iter()
        .filter(|n| !drop.contains(n.as_str()))
        .collect();
    if kept.len() == current.len() {
        return None;
    }
    Some(Patch {
        target: Target::CloneSet,
        name: cs.metadata.name.clone().unwrap_or_default(),
        resource_version: cs.metadata.resource_version.clone(),
        patch: json!({"spec": {"scaleStrategy": {"podsToDelete": kept}}}),
        stamp_conditions: false,
    })
}

fn label_patch(pod: &str, key: &str, value: &str) -> Write {
    Write::Patch(Patch {
        target: Target::Pod,
        name: pod.to_owned(),
        resource_version: None,
        patch: json!({"metadata": {"labels": {key: value}}}),
        stamp_conditions: false,
    })
}

fn status_patch(pod: &CachedPod, name: &str, status: Value, stamp: bool) -> Write {
    Write::Patch(Patch {
        target: Target::PodStatus,
        name: name.to_owned(),
        resource_version: pod.metadata.resource_version.clone(),
        patch: json!({ "status": status }),
        stamp_conditions: stamp,
    })
}

#[cfg(test)]
mod tests;
