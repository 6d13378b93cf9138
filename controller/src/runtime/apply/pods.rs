//! Pod creation (with its PVCs), deletion (UID precondition; its PVCs go with it),
//! recreation by the specified-delete label, the `pod-template-hash` back-fill, and
//! pruning `spec.scaleStrategy.podsToDelete`.

use std::collections::BTreeSet;

use inplace_proto::keys;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PostParams};
use serde_json::{Value, json};
use tracing::{debug, info};

use crate::error::{Error, is_already_exists, is_conflict, is_not_found};
use crate::expectations::Expectation;
use crate::plan::DeleteReason;

use super::{Actor, delete_only_uid, pod_ref};

impl Actor<'_> {
    pub(super) async fn create_pod(&self, revision: &str, instance_id: &str) -> Result<(), Error> {
        let cs_name = self.cs.name_any();
        let pod_name = format!("{cs_name}-{instance_id}");
        let result = self
            .create_pod_inner(revision, instance_id, &pod_name)
            .await;
        match &result {
            Ok(()) => {
                self.ctx
                    .metrics
                    .pods_created
                    .get_or_create(&self.labels)
                    .inc();
                self.event(
                    Some(ObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: Some(pod_name.clone()),
                        namespace: Some(self.ns.clone()),
                        ..ObjectReference::default()
                    }),
                    false,
                    keys::events::SUCCESSFUL_CREATE,
                    "Create",
                    format!("succeed to create pod {pod_name}"),
                );
            }
            Err(err) if err.is_conflict() => {
                debug!(pod = %pod_name, %err, "create deferred");
            }
            Err(err) => self.event(
                None,
                true,
                keys::events::FAILED_CREATE,
                "Create",
                format!("failed to create pod {pod_name}: {err}"),
            ),
        }
        result
    }

    async fn create_pod_inner(
        &self,
        revision: &str,
        instance_id: &str,
        pod_name: &str,
    ) -> Result<(), Error> {
        let template = crate::plan::revision::template_for(
            self.cs,
            &self.owned.revisions,
            &self.plan.revisions.update_revision,
            revision,
        )
        .ok_or_else(|| Error::NotCached(format!("template of revision {revision}")))?;
        let short = self.ctx.settings.plan_options.short_hash;
        let now = Timestamp::now();
        // Raw JSON all the way to the server: template fields unknown to k8s-openapi survive.
        let pod =
            crate::plan::build::pod_json(self.cs, &template, revision, instance_id, short, now);
        let pvcs = crate::plan::build::pvcs_json(self.cs, instance_id);
        let existing: BTreeSet<&str> = self
            .owned
            .pvcs
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        let pp = PostParams {
            field_manager: Some(self.ctx.settings.field_manager.clone()),
            ..PostParams::default()
        };
        for pvc in pvcs {
            let pvc = dynamic(pvc, "PVC")?;
            let name = pvc.name_any();
            if existing.contains(name.as_str()) {
                continue;
            }
            match self
                .dyn_api::<PersistentVolumeClaim>()
                .create(&pp, &pvc)
                .await
            {
                Ok(_) => debug!(pvc = %name, "created PVC"),
                Err(e) if is_already_exists(&e) => {}
                Err(e) => return Err(Error::kube(format!("create PVC {name}"), e)),
            }
            self.expect(Expectation::PvcCreated { name });
        }
        match self
            .dyn_api::<Pod>()
            .create(&pp, &dynamic(pod, "pod")?)
            .await
        {
            Ok(_) => {}
            // A pod of that name we know of (the previous one of this instance, still
            // terminating): not created; retried with backoff until the name is free.
            Err(e) if is_already_exists(&e) && self.pods.contains_key(pod_name) => {
                return Err(Error::kube(
                    format!(
                        "create pod {pod_name} (the previous pod of the instance is still there)"
                    ),
                    e,
                ));
            }
            Err(e) if is_already_exists(&e) => {
                debug!(pod = %pod_name, "pod already exists (cache behind)");
                self.expect(Expectation::PodCreated {
                    name: pod_name.to_owned(),
                });
                return Err(Error::kube(
                    format!("create pod {pod_name} (cache behind)"),
                    e,
                ));
            }
            Err(e) => return Err(Error::kube(format!("create pod {pod_name}"), e)),
        }
        self.expect(Expectation::PodCreated {
            name: pod_name.to_owned(),
        });
        Ok(())
    }

    pub(super) async fn delete_pod(&self, name: &str, reason: DeleteReason) -> Result<(), Error> {
        let Ok(pod) = self.pod(name) else {
            debug!(pod = %name, "pod to delete is already gone");
            return Ok(());
        };
        let pod = &pod;
        let uid = pod.uid().unwrap_or_default();
        let dp = delete_only_uid(&uid);
        match self.pod_api().delete(name, &dp).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) || is_conflict(&e) => {
                debug!(pod = %name, "pod already gone or replaced");
            }
            Err(e) => {
                let err = Error::kube(format!("delete pod {name}"), e);
                self.event(
                    Some(pod_ref(pod)),
                    true,
                    keys::events::FAILED_DELETE,
                    "Delete",
                    format!("failed to delete pod {name}: {err}"),
                );
                return Err(err);
            }
        }
        self.expect(Expectation::PodDeleted {
            name: name.to_owned(),
            uid,
        });
        self.ctx
            .metrics
            .pods_deleted
            .get_or_create(&self.labels)
            .inc();
        self.event(
            Some(pod_ref(pod)),
            false,
            keys::events::SUCCESSFUL_DELETE,
            "Delete",
            format!("succeed to delete pod {name} ({reason:?})"),
        );
        // The pod's PVCs go with it, unless another live pod of the same instance uses them.
        if let Some(id) = pod.labels().get(keys::INSTANCE_ID_LABEL) {
            let reused = self.owned.pods.iter().any(|p| {
                p.uid() != pod.uid()
                    && p.metadata.deletion_timestamp.is_none()
                    && p.label_map().get(keys::INSTANCE_ID_LABEL) == Some(id.as_str())
            });
            if !reused {
                for pvc in self
                    .owned
                    .pvcs
                    .iter()
                    .filter(|p| p.labels().get(keys::INSTANCE_ID_LABEL) == Some(id))
                {
                    self.delete_pvc(&pvc.name_any()).await?;
                }
            }
        }
        Ok(())
    }

    pub(super) async fn prune_pods_to_delete(&self, names: &[String]) -> Result<(), Error> {
        let Some(current) = self
            .cs
            .spec
            .scale_strategy
            .as_ref()
            .map(|s| s.pods_to_delete.clone())
        else {
            return Ok(());
        };
        let drop: BTreeSet<&str> = names.iter().map(String::as_str).collect();
        let kept: Vec<&String> = current
            .iter()
            .filter(|n| !drop.contains(n.as_str()))
            .collect();
        if kept.len() == current.len() {
            return Ok(());
        }
        // Pinned to the CloneSet version we planned from: a concurrent edit of the list by
        // the user wins (409 → retry with a fresh cache).
        let body = json!({
            "metadata": {"resourceVersion": self.cs.resource_version()},
            "spec": {"scaleStrategy": {"podsToDelete": kept}},
        });
        self.cs_api()
            .patch(&self.cs.name_any(), &self.pp(), &Patch::Merge(&body))
            .await
            .map_err(|e| Error::kube("prune spec.scaleStrategy.podsToDelete", e))?;
        info!(removed = ?names, "pruned podsToDelete");
        Ok(())
    }

    pub(super) async fn recreate(&self, name: &str, revision: &str) -> Result<(), Error> {
        let pod = &self.pod(name)?;
        let body = json!({"metadata": {"labels": {keys::SPECIFIED_DELETE_LABEL: "true"}}});
        match self.patch_pod(pod, body, "mark for recreate", false).await {
            Ok(_) => {
                self.ctx
                    .metrics
                    .pods_recreated
                    .get_or_create(&self.labels)
                    .inc();
                self.event(
                    Some(pod_ref(pod)),
                    false,
                    keys::events::SUCCESSFUL_UPDATE_POD_RECREATE,
                    "Recreate",
                    format!("successfully patch pod {name} specified-delete for update(revision {revision})"),
                );
                Ok(())
            }
            Err(err) => {
                self.event(
                    Some(pod_ref(pod)),
                    true,
                    keys::events::FAILED_UPDATE_POD_RECREATE,
                    "Recreate",
                    format!("failed to patch pod {name} specified-delete for update(revision {revision}): {err}"),
                );
                Err(err)
            }
        }
    }

    /// Back-fills `pod-template-hash` on a pod made before the label existed.
    pub(super) async fn set_template_hash(&self, name: &str, hash: &str) -> Result<(), Error> {
        let pod = &self.pod(name)?;
        let body = json!({"metadata": {"labels": {keys::POD_TEMPLATE_HASH_LABEL: hash}}});
        self.patch_pod(pod, body, "label", false).await?;
        Ok(())
    }
}

/// A raw JSON object as a [`DynamicObject`] (every field kept).
fn dynamic(value: Value, what: &str) -> Result<DynamicObject, Error> {
    serde_json::from_value(value).map_err(|source| Error::Encode {
        what: format!("{what} built by the planner"),
        source,
    })
}
