//! The in-place writes as the plan wrote them down ([`crate::plan::inplace_write`]):
//! starting an update (the not-ready condition first for gated pods, then one pinned patch
//! of labels, lifecycle, state and the spec or the held spec), a held update once its
//! grace period is over, the next container batch; then cpu/memory through `pods/resize`
//! where the plan says so.
//!
//! A start conflicting with another writer of the pod (the kubelet writing its status) is
//! not a failure at once: the pod is read again and, if the plan's guard
//! ([`crate::plan::inplace_write::Guard`]) still holds for it, the write is planned again
//! from it ([`InPlaceWrite::replan`]) and retried at once, instead of failing the
//! reconcile and waiting out a backoff.

use inplace_proto::keys;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Patch;
use tracing::{debug, warn};

use crate::error::Error;
use crate::plan::inplace_write::{InPlaceWrite, InPlaceWriteKind, ResizeVia, WriteInputs};
use crate::watch::CachedPod;

use super::{Actor, now_time};

/// Immediate retries of an in-place update write that hit a conflict (each after a fresh
/// read of the pod that still passes the write's guard).
const CONFLICT_RETRIES: u32 = 3;

/// The pod version a write is pinned to.
#[derive(Clone, Debug)]
enum Pin {
    /// The version the plan decided from (or one our own write of it left): the plan's
    /// write holds.
    Planned(String),
    /// A version read (or written) since: the write is planned again from it.
    Fresh(Box<Pod>),
}

impl Pin {
    fn resource_version(&self) -> String {
        match self {
            Self::Planned(rv) => rv.clone(),
            Self::Fresh(pod) => pod.resource_version().unwrap_or_default(),
        }
    }
}

impl Actor<'_> {
    /// Sends the in-place write `write`, then its resize.
    pub(super) async fn in_place(&self, write: &InPlaceWrite) -> Result<(), Error> {
        let name = &write.pod;
        if write.kind == InPlaceWriteKind::Start {
            self.start_in_place(write).await?;
        } else {
            let what = match write.kind {
                InPlaceWriteKind::NextBatch => "apply the next container batch of",
                _ => "apply held in-place update of",
            };
            let body = write.pinned_patch(&write.resource_version);
            self.send_pod_patch(name, false, body, || format!("{what} pod {name}"))
                .await?;
        }
        // A held update of another revision is only dropped: nothing more.
        if !write.applies_spec() {
            return Ok(());
        }
        if write.resize.as_ref().map(|r| r.via) == Some(ResizeVia::Unsupported) {
            warn!(pod = %name, "server has no pods/resize: resources not changed in place");
        }
        match write.resize_patch() {
            Some(body) => self.patch_resize(name, body).await,
            None => Ok(()),
        }
    }

    async fn start_in_place(&self, write: &InPlaceWrite) -> Result<(), Error> {
        // 1. Not ready first, so endpoints drop the pod before its containers restart.
        let mut pin = Pin::Planned(write.resource_version.clone());
        if write.not_ready_first {
            let name = &write.pod;
            let (used, written) = self
                .retry_on_conflict(write, pin, false, |p| {
                    let body = InPlaceWrite::not_ready_patch(&p.resource_version(), &now_time());
                    self.send_pod_patch(name, true, body, move || {
                        format!(
                            "set {} False on pod {name}",
                            keys::INPLACE_UPDATE_READY_CONDITION
                        )
                    })
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
        .await
        .map(drop)
    }

    /// The patch of `write` pinned to `pin`: the plan's, or planned again from a pod
    /// read since (at write time).
    fn body_for(&self, write: &InPlaceWrite, pin: &Pin) -> Result<serde_json::Value, Error> {
        let pod = match pin {
            Pin::Planned(rv) => return Ok(write.pinned_patch(rv)),
            Pin::Fresh(pod) => pod,
        };
        let cached = CachedPod::from_pod(pod).map_err(|source| Error::Encode {
            what: format!("pod {} re-read", write.pod),
            source,
        })?;
        let inputs = WriteInputs {
            cloneset: self.cs,
            revisions: &self.owned.revisions,
            update_revision: &self.plan.revisions.update_revision,
            options: &self.ctx.settings.plan_options,
            now: Timestamp::now(),
        };
        let rv = pod.resource_version().unwrap_or_default();
        Ok(write.replan(&inputs, &cached)?.pinned_patch(&rv))
    }

    /// Runs `write_at` pinned to `pin`; on a 409 the pod is read again and, if the guard of
    /// `write` still holds for it, the write is retried at once pinned to the fresh pod, at
    /// most [`CONFLICT_RETRIES`] times; otherwise the conflict fails the step (the
    /// reconcile re-plans). Returns the pin the successful write used, and its result.
    async fn retry_on_conflict<T, F, Fut>(
        &self,
        write: &InPlaceWrite,
        mut pin: Pin,
        gate_set: bool,
        mut write_at: F,
    ) -> Result<(Pin, T), Error>
    where
        F: FnMut(Pin) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let (name, mut attempt) = (&write.pod, 0);
        loop {
            let err = match write_at(pin.clone()).await {
                Ok(out) => return Ok((pin, out)),
                Err(err) if err.is_conflict() && attempt < CONFLICT_RETRIES => err,
                Err(err) => return Err(err),
            };
            attempt += 1;
            let fresh = self
                .api::<Pod>()
                .get(name)
                .await
                .map_err(|e| Error::kube(format!("read pod {name} after a conflict"), e))?;
            if let Err(why) = write.guard.holds(&fresh, gate_set) {
                debug!(pod = %name, %why, "conflict: the pod changed, not retrying");
                return Err(err);
            }
            debug!(pod = %name, rv = ?fresh.resource_version(), "conflict: pod re-read, decision still holds, retrying");
            pin = Pin::Fresh(Box::new(fresh));
        }
    }

    /// The cpu/memory change `body` of pod `name` through `pods/resize`.
    async fn patch_resize(&self, name: &str, body: serde_json::Value) -> Result<(), Error> {
        let req = kube::core::Request::new(format!("/api/v1/namespaces/{}/pods", self.ns));
        let http = req
            .patch_subresource("resize", name, &self.pp(), &Patch::Strategic(body))
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
