//! Writing an in-place update spec onto a pod (the reference's `PatchSpecToPod`): the
//! container batch due now, a held update once its grace period is over, the next
//! container batch, and cpu/memory through `pods/resize`.

use std::collections::BTreeSet;

use inplace_proto::{InPlaceUpdateContainerStatus, InPlaceUpdateGrace, InPlaceUpdateState, keys};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Patch;
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::error::Error;
use crate::expectations::Expectation;
use crate::plan::container_batches;

use super::{Actor, encode, now_time};

impl Actor<'_> {
    /// Adds the held `spec` to `body` (the reference's `PatchSpecToPod`): container images,
    /// metadata, `lastContainerStatuses`, the state annotation; removes the grace annotation.
    pub(super) fn apply_spec(
        &self,
        pod: &Pod,
        spec: &InPlaceUpdateGrace,
        mut state: InPlaceUpdateState,
        body: &mut Value,
    ) -> Result<(), Error> {
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or(&[]);
        // Container launch priority: only the first batch now, the rest in the state.
        let priorities = crate::plan::revision::template_for(
            self.cs,
            &self.owned.revisions,
            &self.plan.revisions.update_revision,
            &spec.revision,
        )
        .map(|t| container_batches::launch_priorities(&t.0.0))
        .unwrap_or_default();
        let split = container_batches::split(spec, &priorities);
        split.record_in(&mut state);
        let spec = &split.now;
        let changed: BTreeSet<&String> = split.containers.iter().collect();
        // `lastContainerStatuses`, as the reference records it: the containers whose image
        // changes (with the id of the container running now: the kubelet replaces it) and
        // those resized (no restart: no id). A container whose only change is metadata its
        // env reads is not recorded; the daemon restarts it (`updateEnvFromMetadata`).
        // A container restarted with an unchanged spec (`restartContainers`) is recorded
        // with the id of the container running now, like an image change: the daemon stops
        // that one, and the update is done once another one runs.
        for name in &changed {
            let restarted = spec.container_images.contains_key(*name)
                || spec.restart_containers.iter().any(|r| r == *name);
            if !restarted && !spec.container_resources.contains_key(*name) {
                continue;
            }
            let status = statuses.iter().find(|s| &&s.name == name);
            let container_id = status
                .and_then(|s| s.container_id.clone())
                .filter(|_| restarted)
                .unwrap_or_default();
            state.last_container_statuses.insert(
                (*name).clone(),
                InPlaceUpdateContainerStatus {
                    image_id: status.map(|s| s.image_id.clone()).unwrap_or_default(),
                    container_id,
                    resources: None,
                },
            );
        }
        for name in &spec.restart_containers {
            if !state.restart_containers.contains(name) {
                state.restart_containers.push(name.clone());
            }
        }
        if !changed.is_empty() {
            state
                .container_batches_record
                .push(inplace_proto::ContainerBatch {
                    timestamp: now_time(),
                    containers: changed.iter().map(|s| (*s).clone()).collect(),
                });
        }
        let containers: Vec<Value> = spec
            .container_images
            .iter()
            .map(|(name, image)| {
                let mut c = json!({"name": name, "image": image});
                if let Some(r) = spec.container_resources.get(name)
                    && self.write_resources_to_spec()
                {
                    c["resources"] = serde_json::to_value(r).unwrap_or(Value::Null);
                }
                c
            })
            .collect();
        if !containers.is_empty() {
            body["spec"] = json!({ "containers": containers });
        }
        if !spec.meta_data_patch.is_empty() {
            let meta: Value =
                serde_json::from_str(&spec.meta_data_patch).map_err(|source| Error::Encode {
                    what: "metaDataPatch of the in-place spec".into(),
                    source,
                })?;
            let meta = meta.get("metadata").cloned().unwrap_or(meta);
            for field in ["labels", "annotations"] {
                if let Some(map) = meta.get(field).and_then(Value::as_object) {
                    for (k, v) in map {
                        // Our own bookkeeping keys win over template metadata.
                        if body["metadata"][field].get(k).is_none() {
                            body["metadata"][field][k] = v.clone();
                        }
                    }
                }
            }
        }
        // Labels / annotations read by the env of this batch's containers (kept out of
        // metaDataPatch so that later batches' containers are not restarted early).
        for meta in spec.container_ref_metadata.values() {
            for (field, map) in [("labels", &meta.labels), ("annotations", &meta.annotations)] {
                for (k, v) in map.iter().flatten() {
                    if body["metadata"][field].get(k).is_none() {
                        body["metadata"][field][k] = json!(v);
                    }
                }
            }
        }
        body["metadata"]["annotations"][keys::INPLACE_UPDATE_STATE_ANNOTATION] =
            json!(encode(&state, "in-place state")?);
        body["metadata"]["annotations"][keys::INPLACE_UPDATE_GRACE_ANNOTATION] = Value::Null;
        body["metadata"]["annotations"][keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY] = Value::Null;
        Ok(())
    }

    /// Resources go into the pod spec only where the server accepts spec changes of them
    /// and has no `pods/resize` subresource.
    fn write_resources_to_spec(&self) -> bool {
        !self.ctx.caps.pod_resize && self.ctx.settings.plan_options.in_place_vertical_scaling
    }

    /// cpu/memory changes through `pods/resize`, where the server serves it.
    pub(super) async fn resize(&self, pod: &Pod, spec: &InPlaceUpdateGrace) -> Result<(), Error> {
        if spec.container_resources.is_empty() || spec.grace_seconds > 0 {
            return Ok(());
        }
        if !self.ctx.caps.pod_resize {
            if !self.write_resources_to_spec() {
                warn!(pod = %pod.name_any(), "server has no pods/resize: resources not changed in place");
            }
            return Ok(());
        }
        let containers: Vec<Value> = spec
            .container_resources
            .iter()
            .map(|(name, r)| json!({"name": name, "resources": r}))
            .collect();
        let name = pod.name_any();
        let req = kube::core::Request::new(format!("/api/v1/namespaces/{}/pods", self.ns));
        let patch = Patch::Strategic(json!({"spec": {"containers": containers}}));
        let http = req
            .patch_subresource("resize", &name, &self.pp(), &patch)
            .map_err(|e| Error::kube(format!("resize pod {name}"), kube::Error::BuildRequest(e)))?;
        let written: Pod = self
            .ctx
            .client
            .request(http)
            .await
            .map_err(|e| Error::kube(format!("resize pod {name}"), e))?;
        self.expect(Expectation::PodUpdated {
            name,
            uid: written.uid().unwrap_or_default(),
            resource_version: written.resource_version().unwrap_or_default(),
        });
        Ok(())
    }

    pub(super) async fn apply_graced(&self, name: &str) -> Result<(), Error> {
        let pod = &self.pod(name)?;
        let annotations = pod.annotations();
        let raw = annotations
            .get(keys::INPLACE_UPDATE_GRACE_ANNOTATION)
            .or_else(|| annotations.get(keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY))
            .ok_or_else(|| Error::AnnotationMissing {
                pod: name.to_owned(),
                what: "grace annotation",
            })?;
        let spec: InPlaceUpdateGrace =
            serde_json::from_str(raw).map_err(|source| Error::BadAnnotation {
                pod: name.to_owned(),
                what: "grace annotation",
                source,
            })?;
        let on_revision = pod
            .labels()
            .get(keys::REVISION_LABEL)
            .is_some_and(|l| crate::plan::revision_matches(l, &spec.revision));
        let mut body = json!({"metadata": {"annotations": {}}});
        if on_revision {
            let state = InPlaceUpdateState::from_annotations(annotations)
                .and_then(Result::ok)
                .unwrap_or_else(|| InPlaceUpdateState {
                    revision: spec.revision.clone(),
                    update_timestamp: Some(now_time()),
                    update_images: !spec.container_images.is_empty(),
                    update_resources: !spec.container_resources.is_empty(),
                    update_env_from_metadata: spec.update_env_from_metadata,
                    ..InPlaceUpdateState::default()
                });
            self.apply_spec(pod, &spec, state, &mut body)?;
        } else {
            // The pod moved to another revision meanwhile: drop the held update.
            body["metadata"]["annotations"][keys::INPLACE_UPDATE_GRACE_ANNOTATION] = Value::Null;
            body["metadata"]["annotations"][keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY] =
                Value::Null;
        }
        let written = self
            .patch_pod(pod, body, "apply held in-place update of", true)
            .await?;
        if on_revision {
            self.resize(
                &written,
                &InPlaceUpdateGrace {
                    grace_seconds: 0,
                    ..spec
                },
            )
            .await?;
            info!(pod = %name, "grace period over, in-place update applied");
        }
        Ok(())
    }

    /// The next container batch of an in-place update (`plan::container_batches`): what
    /// the state still holds is split again by priority and patched like the first batch,
    /// pinned to the pod version whose readiness was judged.
    pub(super) async fn apply_next_batch(&self, name: &str) -> Result<(), Error> {
        let pod = &self.pod(name)?;
        let state = InPlaceUpdateState::from_annotations(pod.annotations())
            .ok_or_else(|| Error::AnnotationMissing {
                pod: name.to_owned(),
                what: "in-place state",
            })?
            .map_err(|source| Error::BadAnnotation {
                pod: name.to_owned(),
                what: "in-place state",
                source,
            })?;
        let spec = container_batches::remaining(&state);
        let mut body = json!({"metadata": {"labels": {}, "annotations": {}}});
        self.apply_spec(pod, &spec, state, &mut body)?;
        let written = self
            .patch_pod(pod, body, "apply the next container batch of", true)
            .await?;
        self.resize(&written, &spec).await?;
        info!(pod = %name, "next container batch of the in-place update applied");
        Ok(())
    }
}
