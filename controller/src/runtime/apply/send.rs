//! One send for every write a step holds: the pod and PVC creates of a recipe, the
//! ImagePullJobs of pre-download, deletes with their UID precondition (gone or replaced is
//! no failure), and planned patches of pods, PVCs, the CloneSet and its revisions; each
//! write the CloneSet's plans wait for is recorded as the expectation of what it left.

use inplace_proto::CloneSet;
use inplace_proto::imagepulljob::ImagePullJob;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, DynamicObject, Patch as KubePatch};
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;
use tracing::debug;

use crate::delete_as_read::delete_only_uid;
use crate::error::{Error, is_already_exists, is_conflict, is_not_found};
use crate::expectations::Expectation;
use crate::plan::action_write::{
    CreateRecipe, Patch, PvcDelete, Target, Write, template_of_recipe,
};
use crate::plan::resend::create_exists;
use crate::plan::sending::patch_what;
use crate::plan::{Action, StepWrite};

use super::{Actor, now_rfc3339, now_time};

impl Actor<'_> {
    /// Sends `write`, the write of `action`'s step (a deleted pod's PVCs excepted: they go
    /// after its report, [`Actor::act`]).
    pub(super) async fn send(&self, action: &Action, write: &StepWrite) -> Result<(), Error> {
        match write {
            StepWrite::Nothing { why } | StepWrite::Object(Write::Skip { why }) => {
                debug!(?action, why, "nothing to write");
                Ok(())
            }
            StepWrite::Lifecycle(write) => self.lifecycle(write).await,
            StepWrite::Completion(write) => {
                let body = write.patch(&now_time(), &now_rfc3339());
                self.patch_pod_status_body(&write.pod, body).await
            }
            StepWrite::InPlace(write) => self.in_place(write).await,
            StepWrite::Object(Write::Create(recipe)) => self.create_pod(recipe).await,
            StepWrite::Object(Write::DeletePod { pod, uid, .. }) => {
                self.delete::<Pod>("pod", pod, &delete_only_uid(uid))
                    .await?;
                let (name, uid) = (pod.clone(), uid.clone());
                self.expect(Expectation::PodDeleted { name, uid });
                Ok(())
            }
            StepWrite::Object(Write::DeletePvc(delete)) => self.delete_pvc(delete).await,
            StepWrite::Object(Write::CreateImagePullJob { job }) => {
                let what = format!("ImagePullJob {}", job.name_any());
                let created = self.create_kept(self.api::<ImagePullJob>(), job, &what);
                created.await.map(drop)
            }
            StepWrite::Object(Write::DeleteImagePullJob { job, uid }) => {
                self.delete::<ImagePullJob>("ImagePullJob", job, &delete_only_uid(uid))
                    .await
            }
            StepWrite::Object(Write::Patch(patch)) => {
                self.send_patch(patch, &patch_what(action, patch)).await
            }
        }
    }

    /// Creates the recipe's PVCs (those there already kept), then its pod.
    async fn create_pod(&self, recipe: &CreateRecipe) -> Result<(), Error> {
        let pod_name = recipe.pod.as_str();
        let (revisions, update) = (&self.owned.revisions, &self.plan.revisions.update_revision);
        let template = template_of_recipe(recipe, self.cs, revisions, update)?;
        // Raw JSON all the way to the server: template fields unknown to k8s-openapi survive.
        let rendered = recipe.render(self.cs, &template, Timestamp::now());
        for pvc in rendered.pvcs {
            let pvc = dynamic(pvc, "PVC")?;
            let name = pvc.name_any();
            let api = self.dyn_api::<PersistentVolumeClaim>();
            self.create_kept(api, &pvc, &format!("PVC {name}")).await?;
            self.expect(Expectation::PvcCreated { name });
        }
        let created = self
            .dyn_api::<Pod>()
            .create(
                &self.ctx.settings.post_params(),
                &dynamic(rendered.pod, "pod")?,
            )
            .await;
        let (expect, result) = match created {
            Ok(_) => (true, Ok(())),
            Err(e) if is_already_exists(&e) => {
                let exists = create_exists(pod_name, self.pods.contains_key(pod_name));
                (exists.expect_created, Err(Error::kube(exists.what, e)))
            }
            Err(e) => (false, Err(Error::kube(format!("create pod {pod_name}"), e))),
        };
        if expect {
            let name = pod_name.to_owned();
            self.expect(Expectation::PodCreated { name });
        }
        result
    }

    /// Creates `obj` (`what`, for logs and the error); one that exists already is kept
    /// (a PVC of the instance, a revision, a pre-download job: each name is fixed by what
    /// it is made from). Whether it was created.
    pub(super) async fn create_kept<K>(
        &self,
        api: Api<K>,
        obj: &K,
        what: &str,
    ) -> Result<bool, Error>
    where
        K: Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    {
        match api.create(&self.ctx.settings.post_params(), obj).await {
            Ok(_) => Ok(true),
            Err(e) if is_already_exists(&e) => {
                debug!(what, "exists already");
                Ok(false)
            }
            Err(e) => Err(Error::kube(format!("create {what}"), e)),
        }
    }

    /// Deletes the `what` `name` with `params`: a pod, a PVC or a job only of its planned
    /// UID (a replacement of the same name, e.g. a new pod reusing the instance id, is
    /// never deleted by a stale decision). Gone or replaced is no failure.
    pub(super) async fn delete<K: Resource<DynamicType = ()>>(
        &self,
        what: &str,
        name: &str,
        params: &DeleteParams,
    ) -> Result<(), Error> {
        match self.dyn_api::<K>().delete(name, params).await {
            Ok(_) => debug!(%name, what, "deleted"),
            Err(e) if is_not_found(&e) || is_conflict(&e) => {
                debug!(%name, what, "already gone or replaced");
            }
            Err(e) => return Err(Error::kube(format!("delete {what} {name}"), e)),
        }
        Ok(())
    }

    /// Deletes a PVC, only of the planned UID.
    pub(super) async fn delete_pvc(&self, delete: &PvcDelete) -> Result<(), Error> {
        let (name, uid) = (delete.pvc.clone(), delete.uid.clone());
        self.delete::<PersistentVolumeClaim>("PVC", &name, &delete_only_uid(&uid))
            .await?;
        self.expect(Expectation::PvcDeleted { name, uid });
        Ok(())
    }

    /// Sends a planned patch (with its precondition and write time): of a pod by
    /// [`Actor::send_pod_patch`], else a merge patch whose answer is not read.
    async fn send_patch(&self, patch: &Patch, what: &str) -> Result<(), Error> {
        let (body, name) = (patch.body(&now_time()), &patch.name);
        let api = match patch.target {
            Target::Pod | Target::PodStatus => {
                let sub = (patch.target == Target::PodStatus).then_some("status");
                let sent = self.send_pod_patch(name, sub, body, || what.to_owned());
                return sent.await.map(drop);
            }
            Target::Pvc => self.dyn_api::<PersistentVolumeClaim>(),
            Target::CloneSet => self.dyn_api::<CloneSet>(),
            Target::ControllerRevision => self.dyn_api::<ControllerRevision>(),
        };
        let (pp, body) = (self.ctx.settings.patch_params(), KubePatch::Merge(&body));
        let sent = api.patch(name, &pp, &body).await;
        sent.map(drop).map_err(|e| Error::kube(what, e))
    }
}

/// A raw JSON object as a [`DynamicObject`] (every field kept).
fn dynamic(value: Value, what: &str) -> Result<DynamicObject, Error> {
    serde_json::from_value(value).map_err(|source| Error::Encode {
        what: format!("{what} built by the planner"),
        source,
    })
}
