//! Starting an in-place update: the spec from the planner's decision, the not-ready
//! condition first (for gated pods), then one pinned patch of labels, lifecycle, state and
//! the spec (or, during a grace period, the held spec).

use inplace_proto::{InPlaceUpdateGrace, InPlaceUpdateState, LifecycleState, keys};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::{Value, json};

use crate::error::Error;

use super::{Actor, encode, now_rfc3339, now_time, pod_ref};
use crate::plan::pod_conditions::has_gate;

impl Actor<'_> {
    fn revision_labels(&self, revision: &str) -> Value {
        let hash = crate::plan::revision::short_hash(revision);
        let label = if self.ctx.settings.plan_options.short_hash {
            hash.to_owned()
        } else {
            revision.to_owned()
        };
        json!({ keys::REVISION_LABEL: label, keys::POD_TEMPLATE_HASH_LABEL: hash })
    }

    /// The in-place update spec moving `pod` to `revision`, from the planner's decision
    /// (`plan::inplace`), in the shape of the reference's `UpdateSpec` (which is also what
    /// the grace annotation holds).
    fn in_place_spec(&self, pod: &Pod, revision: &str) -> Result<InPlaceUpdateGrace, Error> {
        let decision = crate::plan::inplace::decide_for_revisions(
            self.cs,
            &self.owned.revisions,
            &self.plan.revisions.update_revision,
            pod.labels().get(keys::REVISION_LABEL).map(String::as_str),
            revision,
            &self.ctx.settings.plan_options,
        );
        let change = match decision {
            crate::plan::inplace::InPlaceDecision::InPlace(change) => change,
            crate::plan::inplace::InPlaceDecision::Recreate { reason }
            | crate::plan::inplace::InPlaceDecision::Refused { reason } => {
                return Err(Error::InPlaceRefused {
                    pod: pod.name_any(),
                    reason,
                });
            }
        };
        let grace = self
            .cs
            .spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.in_place_update_strategy.as_ref())
            .and_then(|s| s.grace_period_seconds)
            .unwrap_or(0);
        spec_from_change(&change, revision, grace)
    }

    pub(super) async fn update_in_place(&self, name: &str, revision: &str) -> Result<(), Error> {
        let pod = &self.pod(name)?;
        let result = self.update_in_place_inner(pod, revision).await;
        match &result {
            Ok(()) => {
                self.ctx
                    .metrics
                    .pods_updated_in_place
                    .get_or_create(&self.labels)
                    .inc();
                self.event(
                    Some(pod_ref(pod)),
                    false,
                    keys::events::SUCCESSFUL_UPDATE_POD_IN_PLACE,
                    "UpdateInPlace",
                    format!("successfully update pod {name} in-place(revision {revision})"),
                );
            }
            Err(err) => self.event(
                Some(pod_ref(pod)),
                true,
                keys::events::FAILED_UPDATE_POD_IN_PLACE,
                "UpdateInPlace",
                format!("failed to update pod {name} in-place(revision {revision}): {err}"),
            ),
        }
        result
    }

    async fn update_in_place_inner(&self, pod: &Pod, revision: &str) -> Result<(), Error> {
        let spec = self.in_place_spec(pod, revision)?;
        let resources_only = spec.container_images.is_empty()
            && spec.meta_data_patch.is_empty()
            && spec.restart_containers.is_empty()
            && !spec.container_resources.is_empty();
        let gated = has_gate(pod, keys::INPLACE_UPDATE_READY_CONDITION) && !resources_only;
        // 1. Not ready first, so endpoints drop the pod before its containers restart.
        //    Both writes are pinned to a pod version we checked; on a conflict (the
        //    kubelet/simulator wrote the pod's status meanwhile) the pod is read again and,
        //    if the decision still holds for it, the write is retried at once instead of
        //    failing the reconcile and waiting out a backoff.
        let mut pinned_pod = pod.clone();
        if gated {
            let (_, written) = self
                .retry_on_conflict(pod, pinned_pod, false, |p| async move {
                    self.set_update_not_ready(&p).await
                })
                .await?;
            pinned_pod = written;
        }
        // 2. One patch: revision labels, lifecycle Updating, state, and the spec itself
        //    (or, during a grace period, the held spec).
        let state = InPlaceUpdateState {
            revision: revision.to_owned(),
            update_timestamp: Some(now_time()),
            update_env_from_metadata: spec.update_env_from_metadata,
            update_images: !spec.container_images.is_empty(),
            update_resources: !spec.container_resources.is_empty(),
            ..InPlaceUpdateState::default()
        };
        let mut body = json!({"metadata": {
            "labels": self.revision_labels(revision),
            "annotations": {
                keys::LIFECYCLE_TIMESTAMP_ANNOTATION: now_rfc3339(),
                keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY: Value::Null,
            },
        }});
        body["metadata"]["labels"][keys::LIFECYCLE_STATE_LABEL] =
            json!(LifecycleState::Updating.as_str());
        if spec.grace_seconds > 0 {
            body["metadata"]["annotations"][keys::INPLACE_UPDATE_STATE_ANNOTATION] =
                json!(encode(&state, "in-place state")?);
            body["metadata"]["annotations"][keys::INPLACE_UPDATE_GRACE_ANNOTATION] =
                json!(encode(&spec, "in-place grace")?);
        }
        let (pinned_pod, _) = self
            .retry_on_conflict(pod, pinned_pod, gated, |p| {
                let mut body = body.clone();
                let built = if spec.grace_seconds == 0 {
                    self.apply_spec(&p, &spec, state.clone(), &mut body)
                } else {
                    Ok(())
                };
                async move {
                    built?;
                    self.patch_pod(&p, body, "update in place", true).await
                }
            })
            .await?;
        self.resize(&pinned_pod, &spec).await
    }
}

/// The reference's `UpdateSpec` for a planner [`InPlaceChange`](crate::plan::inplace::InPlaceChange):
/// images and resources by container, labels/annotations as a strategic merge patch
/// (`null` removes a key).
pub fn spec_from_change(
    change: &crate::plan::inplace::InPlaceChange,
    revision: &str,
    grace_seconds: i32,
) -> Result<InPlaceUpdateGrace, Error> {
    // Keys that a container's env reads are written with that container's batch
    // (`containerRefMetadata`), as the reference does; removals stay in the patch.
    let per_container = |field: &str, key: &str| {
        change.env_from_metadata.values().any(|m| {
            let map = if field == "labels" {
                &m.labels
            } else {
                &m.annotations
            };
            map.as_ref().is_some_and(|m| m.contains_key(key))
        })
    };
    let mut meta = serde_json::Map::new();
    for (field, entries) in [
        ("labels", &change.labels),
        ("annotations", &change.annotations),
    ] {
        let map: serde_json::Map<String, Value> = entries
            .iter()
            .filter(|(k, _)| !per_container(field, k))
            .map(|(k, v)| (k.clone(), v.as_ref().map_or(Value::Null, |v| json!(v))))
            .collect();
        if map.is_empty() {
            continue;
        }
        meta.insert(field.to_owned(), Value::Object(map));
    }
    let meta_data_patch = if meta.is_empty() {
        String::new()
    } else {
        encode(&json!({ "metadata": meta }), "metaDataPatch")?
    };
    Ok(InPlaceUpdateGrace {
        revision: revision.to_owned(),
        container_images: change.images.clone(),
        container_resources: change.resources.clone(),
        container_ref_metadata: change.env_from_metadata.clone(),
        update_env_from_metadata: !change.env_from_metadata.is_empty(),
        restart_containers: change.restarts.iter().cloned().collect(),
        meta_data_patch,
        grace_seconds,
        ..InPlaceUpdateGrace::default()
    })
}
