//! A conflicting in-place update write: the pod is read again and the write retried at once
//! if the decision made from the planned pod still holds for the fresh one.

use std::collections::BTreeMap;

use inplace_proto::keys;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tracing::debug;

use crate::error::Error;

use super::Actor;

impl Actor<'_> {
    /// Runs `write` pinned to `pinned`; on a 409 the pod is read again and, if the decision
    /// made from `planned` still holds for it ([`Self::reread_for_update`]), the write is
    /// retried at once, at most [`CONFLICT_RETRIES`] times. Returns the pod version the
    /// successful write was pinned to, and its result.
    pub(super) async fn retry_on_conflict<T, F, Fut>(
        &self,
        planned: &Pod,
        mut pinned: Pod,
        gate_set: bool,
        mut write: F,
    ) -> Result<(Pod, T), Error>
    where
        F: FnMut(Pod) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let mut attempt = 0;
        loop {
            match write(pinned.clone()).await {
                Ok(out) => return Ok((pinned, out)),
                Err(err) if err.is_conflict() && attempt < CONFLICT_RETRIES => {
                    attempt += 1;
                    pinned = self.reread_for_update(planned, gate_set, err).await?;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// After a conflict on a write to `planned`: the pod as the API server has it now, if
    /// the in-place decision made from `planned` still holds for it
    /// ([`still_updatable`]); otherwise `conflict` (the reconcile fails and re-plans).
    async fn reread_for_update(
        &self,
        planned: &Pod,
        gate_set: bool,
        conflict: Error,
    ) -> Result<Pod, Error> {
        let name = planned.name_any();
        let fresh = self
            .pod_api()
            .get(&name)
            .await
            .map_err(|e| Error::kube(format!("read pod {name} after a conflict"), e))?;
        match still_updatable(planned, &fresh, gate_set) {
            Ok(()) => {
                debug!(pod = %name, rv = ?fresh.resource_version(), "conflict: pod re-read, decision still holds, retrying");
                Ok(fresh)
            }
            Err(why) => {
                debug!(pod = %name, %why, "conflict: the pod changed, not retrying");
                Err(conflict)
            }
        }
    }
}

/// Immediate retries of an in-place update write that hit a conflict (each after a fresh
/// read of the pod that still passes [`still_updatable`]).
const CONFLICT_RETRIES: u32 = 3;

/// Whether an in-place update planned from `planned` may be written to `fresh` (the pod as
/// the API server has it now), i.e. everything the decision and the patch content read
/// is unchanged: the same pod (UID), not terminating, on the same revision and lifecycle
/// state, every container on the same image ID (the state's `lastContainerStatuses`), and
/// with `gate_set`, `InPlaceUpdateReady` still False (the spec never changes on a pod the
/// endpoints still count as ready). What may differ: anything else the kubelet writes to
/// the status (Ready, probe times), which is why the version differs.
pub fn still_updatable(planned: &Pod, fresh: &Pod, gate_set: bool) -> Result<(), String> {
    if fresh.uid() != planned.uid() {
        return Err("the pod was replaced (other UID)".into());
    }
    if fresh.metadata.deletion_timestamp.is_some() {
        return Err("the pod is terminating".into());
    }
    for label in [keys::REVISION_LABEL, keys::LIFECYCLE_STATE_LABEL] {
        if fresh.labels().get(label) != planned.labels().get(label) {
            return Err(format!("label {label} changed"));
        }
    }
    let image_ids = |p: &Pod| -> BTreeMap<String, String> {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .map(|c| (c.name.clone(), c.image_id.clone()))
            .collect()
    };
    if image_ids(fresh) != image_ids(planned) {
        return Err("a container's image ID changed".into());
    }
    let images = |p: &Pod| -> Vec<(String, Option<String>)> {
        p.spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| (c.name.clone(), c.image.clone()))
            .collect()
    };
    if images(fresh) != images(planned) {
        return Err("a container's spec image changed".into());
    }
    if gate_set {
        let gate = fresh
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == keys::INPLACE_UPDATE_READY_CONDITION)
            });
        if gate.is_none_or(|c| c.status != "False") {
            return Err(format!(
                "{} is no longer False",
                keys::INPLACE_UPDATE_READY_CONDITION
            ));
        }
    }
    Ok(())
}
