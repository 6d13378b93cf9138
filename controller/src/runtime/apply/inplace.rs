//! The in-place writes as the plan wrote them down ([`crate::plan::inplace_write`]):
//! starting an update (the not-ready condition first for gated pods, then one pinned patch
//! of labels, lifecycle, state and the spec or the held spec), a held update once its
//! grace period is over, the next container batch; then cpu/memory through `pods/resize`
//! where the plan says so.

use inplace_proto::keys;
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Patch;
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::error::Error;
use crate::plan::inplace_write::{self, InPlaceWrite, InPlaceWriteKind, ResizeVia, WriteInputs};
use crate::plan::{Action, StepWrite};
use crate::watch::CachedPod;

use super::conflict::Pin;
use super::{Actor, pod_ref};

impl Actor<'_> {
    /// What an in-place write planned again after a conflict is planned from (at write
    /// time).
    fn write_inputs(&self) -> WriteInputs<'_> {
        WriteInputs {
            cloneset: self.cs,
            revisions: &self.owned.revisions,
            update_revision: &self.plan.revisions.update_revision,
            options: &self.ctx.settings.plan_options,
            now: Timestamp::now(),
        }
    }

    /// `write` planned again for `pod`, re-read after a conflict.
    pub(super) fn replan(&self, write: &InPlaceWrite, pod: &Pod) -> Result<InPlaceWrite, Error> {
        let cached = CachedPod::from_pod(pod).map_err(|source| Error::Encode {
            what: format!("pod {} re-read", write.pod),
            source,
        })?;
        let inputs = self.write_inputs();
        Ok(match write.kind {
            InPlaceWriteKind::Start => {
                inplace_write::start(&inputs, &cached, write.action, &write.revision)?
            }
            InPlaceWriteKind::ApplyHeld => {
                inplace_write::apply_held(&inputs, &cached, write.action)?
            }
            InPlaceWriteKind::NextBatch => {
                inplace_write::next_batch(&inputs, &cached, write.action)?
            }
        })
    }

    /// Starts the in-place update the plan wrote down (`write`, or why it could not),
    /// with its event and metric.
    pub(super) async fn update_in_place(
        &self,
        name: &str,
        revision: &str,
        action: &Action,
        write: Result<&StepWrite, Error>,
    ) -> Result<(), Error> {
        let pod = &self.pod(name)?;
        let result = match write {
            Ok(StepWrite::InPlace(write)) => self.start_in_place(write).await,
            Ok(other) => Err(super::mismatch(action, other)),
            Err(err) => Err(err),
        };
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

    async fn start_in_place(&self, write: &InPlaceWrite) -> Result<(), Error> {
        // 1. Not ready first, so endpoints drop the pod before its containers restart.
        //    Both writes are pinned to a pod version we checked; on a conflict (the
        //    kubelet/simulator wrote the pod's status meanwhile) the pod is read again and,
        //    if the plan's guard still holds for it, the write is planned again from it and
        //    retried at once instead of failing the reconcile and waiting out a backoff.
        let mut pin = Pin::Planned(write.resource_version.clone());
        if write.not_ready_first {
            let (used, written) = self
                .retry_on_conflict(write, pin, false, |p| async move {
                    self.set_update_not_ready(&write.pod, &p.resource_version())
                        .await
                })
                .await?;
            // The pod the condition was written to is the planned one (same version) or
            // one read since: the patch is planned again from it.
            pin = match used {
                Pin::Planned(_) => Pin::Planned(written.resource_version().unwrap_or_default()),
                Pin::Fresh(_) => Pin::Fresh(Box::new(written)),
            };
        }
        // 2. One patch: revision labels, lifecycle Updating, state, and the spec itself
        //    (or, during a grace period, the held spec).
        self.retry_on_conflict(write, pin, write.not_ready_first, |p| {
            let body = self.body_for(write, &p);
            async move {
                let name = &write.pod;
                self.send_pod_patch(name, false, body?, || format!("update in place pod {name}"))
                    .await
            }
        })
        .await?;
        self.resize(write).await
    }

    /// The patch of `write` pinned to `pin`: the plan's, or planned again from a pod
    /// read since.
    fn body_for(&self, write: &InPlaceWrite, pin: &Pin) -> Result<Value, Error> {
        match pin {
            Pin::Planned(rv) => Ok(write.pinned_patch(rv)),
            Pin::Fresh(pod) => Ok(self
                .replan(write, pod)?
                .pinned_patch(&pod.resource_version().unwrap_or_default())),
        }
    }

    /// A held update once its grace period is over, or the next container batch of an
    /// update: the plan's patch pinned to the pod version judged, then the resize.
    pub(super) async fn apply_planned(
        &self,
        name: &str,
        write: &InPlaceWrite,
    ) -> Result<(), Error> {
        let next_batch = write.kind == InPlaceWriteKind::NextBatch;
        let (what, done) = if next_batch {
            (
                "apply the next container batch of",
                "next container batch of the in-place update applied",
            )
        } else {
            (
                "apply held in-place update of",
                "grace period over, in-place update applied",
            )
        };
        let body = write.pinned_patch(&write.resource_version);
        self.send_pod_patch(name, false, body, || format!("{what} pod {name}"))
            .await?;
        // A held update of another revision is only dropped: nothing more.
        if next_batch || on_revision(write) {
            self.resize(write).await?;
            info!(pod = %name, "{done}");
        }
        Ok(())
    }

    /// The cpu/memory change of `write` through `pods/resize`, where the plan says so.
    async fn resize(&self, write: &InPlaceWrite) -> Result<(), Error> {
        let Some(resize) = &write.resize else {
            return Ok(());
        };
        match resize.via {
            ResizeVia::Subresource => self.patch_resize(&write.pod, &resize.containers).await,
            ResizeVia::Spec => Ok(()),
            ResizeVia::Unsupported => {
                warn!(pod = %write.pod, "server has no pods/resize: resources not changed in place");
                Ok(())
            }
        }
    }

    async fn patch_resize(
        &self,
        name: &str,
        resources: &std::collections::BTreeMap<String, ResourceRequirements>,
    ) -> Result<(), Error> {
        let containers: Vec<Value> = resources
            .iter()
            .map(|(name, r)| json!({"name": name, "resources": r}))
            .collect();
        let req = kube::core::Request::new(format!("/api/v1/namespaces/{}/pods", self.ns));
        let patch = Patch::Strategic(json!({"spec": {"containers": containers}}));
        let http = req
            .patch_subresource("resize", name, &self.pp(), &patch)
            .map_err(|e| Error::kube(format!("resize pod {name}"), kube::Error::BuildRequest(e)))?;
        let written: Pod = self
            .ctx
            .client
            .request(http)
            .await
            .map_err(|e| Error::kube(format!("resize pod {name}"), e))?;
        self.expect_written(name, &written);
        Ok(())
    }
}

/// A held update's write applies the spec (rather than dropping a held update of another
/// revision): it writes the state.
fn on_revision(write: &InPlaceWrite) -> bool {
    write
        .patch
        .writes_annotation(keys::INPLACE_UPDATE_STATE_ANNOTATION)
}
