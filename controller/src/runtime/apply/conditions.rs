//! Pod readiness-gate conditions on `pods/status`: the plan's initial conditions, and our
//! key in `KruisePodReady`'s message list with the lifecycle transition that sets it.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use tracing::debug;

use crate::error::Error;
use crate::plan::lifecycle_write::LifecycleWrite;
use crate::plan::not_ready;
pub use crate::plan::not_ready::not_ready_key_patch;
use crate::plan::pod_conditions::InitialConditions;

use super::{Actor, FailureKind, Outcome, bounded, now_rfc3339, now_time};

impl Actor<'_> {
    /// The plan's readiness-gate conditions for pods that lack them
    /// ([`crate::plan::pod_conditions`]), each pinned to the pod version decided from; a
    /// conflict is no failure (the pod is judged again from the newer version).
    pub(super) async fn init_pod_conditions(&self, outcome: &mut Outcome) {
        let now = now_time();
        let futs: Vec<_> = self
            .plan
            .pod_conditions
            .iter()
            .map(|w| self.init_pod_condition(w, &now))
            .collect();
        let results = bounded(futs, self.ctx.settings.api_parallelism).await;
        let passed = results.into_iter().map(|r| ((), self.pass_if_conflict(r)));
        outcome.tally(0, passed.collect(), |_| FailureKind::Update);
    }

    /// One write of [`Actor::init_pod_conditions`]: its body is built and its request
    /// state allocated only when [`bounded`] starts it (see [`Actor::act_chain`]).
    pub(super) async fn init_pod_condition(
        &self,
        write: &InitialConditions,
        now: &Time,
    ) -> Result<(), Error> {
        Box::pin(self.patch_pod_status_body(&write.pod, write.patch(now))).await
    }

    /// A lifecycle transition as the plan wrote it down ([`crate::plan::lifecycle_write`]):
    /// our key in `KruisePodReady` where the hook marks the pod not ready, then the pod
    /// patch of the state label (with the hook put back on a pod that goes through another
    /// update).
    pub(super) async fn lifecycle(&self, write: &LifecycleWrite) -> Result<(), Error> {
        let name = &write.pod;
        if let Some(nr) = write.not_ready {
            self.set_not_ready_key(name, nr.key, nr.add).await?;
        }
        // Nothing to patch, or the completion's `pods/status` patch (earlier in this pod's
        // chain) carried the labels (`with_completion`).
        let Some(body) = write.patch(&now_rfc3339()) else {
            return Ok(());
        };
        self.send_pod_patch(name, None, body, || format!("set lifecycle of pod {name}"))
            .await?;
        debug!(pod = %name, labels = ?write.labels, "lifecycle state changed");
        Ok(())
    }

    /// Adds or removes our key in the `KruisePodReady` condition's message list of pod
    /// `name` (only on pods with that readiness gate, like the reference; the pod must be
    /// cached). The write is pinned to the pod version decided from: the cached one, or
    /// the one an earlier write of this execution left; on 409 the pod is read again and
    /// the change decided again from it ([`not_ready::key_retries`]).
    pub(super) async fn set_not_ready_key(
        &self,
        name: &str,
        key: &str,
        add: bool,
    ) -> Result<(), Error> {
        let pod = self.cached(name)?.to_pod();
        let first = (self.left.pin_for(name, pod.resource_version()), pod);
        let again = |fresh: Pod| Ok((fresh.resource_version(), fresh));
        let retries = (not_ready::key_retries as fn(u32) -> bool, &again);
        let sent = self.resend_on_conflict(name, first, retries, |(rv, pod)| {
            let body = not_ready_key_patch(pod, key, add, rv.as_deref(), now_time());
            async move {
                match body {
                    Some(body) => self.patch_pod_status_body(name, body).await,
                    None => Ok(()),
                }
            }
        });
        sent.await.map(drop)
    }
}
