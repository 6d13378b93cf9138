//! Pod creation from the plan's recipe (with its PVCs), deletion (UID precondition; its
//! PVCs go with it) and recreation by the specified-delete label, with their events and
//! metrics.

use inplace_proto::keys;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{DynamicObject, PostParams};
use serde_json::Value;
use tracing::debug;

use crate::error::{Error, is_already_exists, is_conflict, is_not_found};
use crate::expectations::Expectation;
use crate::plan::DeleteReason;
use crate::plan::action_write::{CreateRecipe, Patch, PvcDelete, template_of_recipe};

use super::{Actor, delete_only_uid, pod_ref};

impl Actor<'_> {
    pub(super) async fn create_pod(&self, recipe: &CreateRecipe) -> Result<(), Error> {
        let pod_name = &recipe.pod;
        let result = self.create_pod_inner(recipe).await;
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

    async fn create_pod_inner(&self, recipe: &CreateRecipe) -> Result<(), Error> {
        let pod_name = recipe.pod.as_str();
        let template = template_of_recipe(
            recipe,
            self.cs,
            &self.owned.revisions,
            &self.plan.revisions.update_revision,
        )?;
        // Raw JSON all the way to the server: template fields unknown to k8s-openapi survive.
        let rendered = recipe.render(self.cs, &template, Timestamp::now());
        let pp = PostParams {
            field_manager: Some(self.ctx.settings.field_manager.clone()),
            ..PostParams::default()
        };
        for pvc in rendered.pvcs {
            let pvc = dynamic(pvc, "PVC")?;
            let name = pvc.name_any();
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
        let pod = rendered.pod;
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

    /// Deletes pod `name`, only of `uid`, then the PVCs planned to go with it.
    pub(super) async fn delete_pod(
        &self,
        name: &str,
        uid: &str,
        pvcs: &[PvcDelete],
        reason: DeleteReason,
    ) -> Result<(), Error> {
        // The full pod only for the events' reference (as every event of a pod has it).
        let pod = self.pod(name).ok();
        let related = || pod.as_ref().map(pod_ref);
        match self.api::<Pod>().delete(name, &delete_only_uid(uid)).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) || is_conflict(&e) => {
                debug!(pod = %name, "pod already gone or replaced");
            }
            Err(e) => {
                let err = Error::kube(format!("delete pod {name}"), e);
                self.event(
                    related(),
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
            uid: uid.to_owned(),
        });
        self.ctx
            .metrics
            .pods_deleted
            .get_or_create(&self.labels)
            .inc();
        self.event(
            related(),
            false,
            keys::events::SUCCESSFUL_DELETE,
            "Delete",
            format!("succeed to delete pod {name} ({reason:?})"),
        );
        for pvc in pvcs {
            self.delete_pvc(pvc).await?;
        }
        Ok(())
    }

    /// Sends the plan's specified-delete label `patch` of pod `name`, with its events.
    pub(super) async fn recreate(
        &self,
        name: &str,
        revision: &str,
        patch: &Patch,
        what: &str,
    ) -> Result<(), Error> {
        let pod = &self.pod(name)?;
        match self.send_patch(patch, what).await {
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
}

/// A raw JSON object as a [`DynamicObject`] (every field kept).
fn dynamic(value: Value, what: &str) -> Result<DynamicObject, Error> {
    serde_json::from_value(value).map_err(|source| Error::Encode {
        what: format!("{what} built by the planner"),
        source,
    })
}
