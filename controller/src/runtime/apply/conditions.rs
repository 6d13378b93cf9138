//! Pod readiness-gate conditions, written by strategic merge patch on `pods/status`:
//! `InPlaceUpdateReady` / `KruisePodReady` set True on pods that lack them, False when an
//! in-place update starts, True when it completes (with the lifecycle labels the plan put
//! in that write), and our key in `KruisePodReady`'s message list. (A stall's report is a
//! planned write: `writes`.)

use inplace_proto::keys;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use serde_json::json;

use crate::error::Error;
use crate::plan::completion_write::CompletionWrite;
pub use crate::plan::not_ready::not_ready_key_patch;
use crate::plan::pod_conditions::InitialConditions;

use super::{Actor, Failure, FailureKind, Outcome, bounded, now_rfc3339, now_time};

impl Actor<'_> {
    /// The plan's readiness-gate conditions for pods that lack them
    /// ([`crate::plan::pod_conditions`]), each pinned to the pod version decided from; a
    /// conflict is no failure (the pod is judged again from the newer version).
    pub(super) async fn init_pod_conditions(&self, outcome: &mut Outcome) {
        if self.plan.pod_conditions.is_empty() {
            return;
        }
        let now = now_time();
        let futs: Vec<_> = self
            .plan
            .pod_conditions
            .iter()
            .map(|w| self.init_pod_condition(w, &now))
            .collect();
        let results = bounded(futs, self.ctx.settings.api_parallelism).await;
        for r in results {
            outcome.attempted += 1;
            match r {
                Ok(()) => {}
                Err(e) if e.is_conflict() => self.pass_conflict(),
                Err(error) => outcome.failures.push(Failure {
                    kind: FailureKind::Update,
                    error,
                }),
            }
        }
    }

    /// One write of [`Actor::init_pod_conditions`]: its body is built and its request
    /// state allocated only when [`bounded`] starts it (see [`Actor::act_boxed`]).
    pub(super) async fn init_pod_condition(
        &self,
        write: &InitialConditions,
        now: &Time,
    ) -> Result<(), Error> {
        Box::pin(self.patch_pod_status_body(&write.pod, write.patch(now))).await
    }

    /// Sets `InPlaceUpdateReady` (and `Ready`) False on pod `name`, pinned to
    /// `resource_version`; returns the pod as written.
    pub(super) async fn set_update_not_ready(
        &self,
        name: &str,
        resource_version: &str,
    ) -> Result<Pod, Error> {
        let now = now_time();
        let body = json!({
            "metadata": {"resourceVersion": resource_version},
            "status": {"conditions": [
                {"type": keys::INPLACE_UPDATE_READY_CONDITION, "status": "False",
                 "reason": keys::START_INPLACE_UPDATE_REASON, "message": null,
                 "lastTransitionTime": now},
                {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady",
                 "message": format!("the status of pod readiness gate \"{}\" is not \"True\", but False", keys::INPLACE_UPDATE_READY_CONDITION),
                 "lastTransitionTime": now},
            ]}
        });
        // Recorded like every pod write: the next plan must see the condition False.
        self.send_pod_patch(name, true, body, || {
            format!(
                "set {} False on pod {name}",
                keys::INPLACE_UPDATE_READY_CONDITION
            )
        })
        .await
    }

    /// The plan's completion write of pod `name` ([`crate::plan::completion_write`]):
    /// `InPlaceUpdateReady` True, with the lifecycle labels the plan put in it, pinned to
    /// the pod version judged complete.
    pub(super) async fn complete_in_place(
        &self,
        name: &str,
        write: &CompletionWrite,
    ) -> Result<(), Error> {
        let body = write.patch(&now_time(), &now_rfc3339());
        // Only for the pod version we checked: a newer one is judged again next time.
        self.written_or_passed(self.patch_pod_status_body(name, body).await)
            .map(|_| ())
    }

    /// Adds or removes our key in the `KruisePodReady` condition's message list (only on
    /// pods with that readiness gate, like the reference). The write is pinned to the pod
    /// version decided from: the cached one, or the one an earlier write of this execution
    /// left. Others edit the same list (ContainerRecreateRequests, the daemon), so on 409
    /// the pod is read again and the change decided again from it, once.
    pub(super) async fn set_not_ready_key(
        &self,
        pod: &Pod,
        key: &str,
        add: bool,
    ) -> Result<(), Error> {
        let name = pod.name_any();
        let pinned = self.left.pin_for(pod);
        let Some(body) = not_ready_key_patch(pod, key, add, pinned.as_deref(), now_time()) else {
            return Ok(());
        };
        match self.patch_pod_status_body(&name, body).await {
            Err(e) if e.is_conflict() => {
                let fresh = self
                    .api::<Pod>()
                    .get(&name)
                    .await
                    .map_err(|e| Error::kube(format!("read pod {name} after a conflict"), e))?;
                let rv = fresh.resource_version();
                match not_ready_key_patch(&fresh, key, add, rv.as_deref(), now_time()) {
                    Some(body) => self.patch_pod_status_body(&name, body).await,
                    None => Ok(()),
                }
            }
            other => other,
        }
    }
}
