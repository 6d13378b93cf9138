//! The pod's lifecycle state label (and the hook put back on a pod that goes through
//! another update), with its key in `KruisePodReady` where the hook marks it not ready.

use inplace_proto::{LifecycleState, keys};
use kube::ResourceExt;
use serde_json::json;
use tracing::debug;

use crate::error::Error;

use super::{Actor, now_rfc3339};

impl Actor<'_> {
    pub(super) async fn lifecycle(
        &self,
        name: &str,
        from: Option<LifecycleState>,
        to: LifecycleState,
        mark_not_ready: Option<bool>,
    ) -> Result<(), Error> {
        let pod = &self.pod(name)?;
        if let Some(add) = mark_not_ready {
            let key = if to == LifecycleState::PreparingDelete
                || from == Some(LifecycleState::PreparingDelete)
            {
                keys::PRE_DELETE_HOOK_KEY
            } else {
                keys::PRE_UPDATE_HOOK_KEY
            };
            self.set_not_ready_key(pod, key, add).await?;
        }
        let mut body = json!({"metadata": {
            "labels": {keys::LIFECYCLE_STATE_LABEL: to.as_str()},
            "annotations": {keys::LIFECYCLE_TIMESTAMP_ANNOTATION: now_rfc3339()},
        }});
        if to == LifecycleState::PreparingUpdate && from == Some(LifecycleState::Updated) {
            // Back to PreparingUpdate for another update: the hook is put back on the pod
            // (reference `UpdatePodLifecycleWithHandler`).
            if let Some(hook) = self
                .cs
                .spec
                .lifecycle
                .as_ref()
                .and_then(|l| l.in_place_update.as_ref())
            {
                for (k, v) in &hook.labels_handler {
                    body["metadata"]["labels"][k] = json!(v);
                }
                if !hook.finalizers_handler.is_empty() {
                    body["metadata"]["finalizers"] = json!(hook.finalizers_handler);
                }
            }
        }
        let pod_labels = pod.labels();
        if pod_labels
            .get(keys::LIFECYCLE_STATE_LABEL)
            .map(String::as_str)
            == Some(to.as_str())
            && body["metadata"].get("finalizers").is_none()
        {
            return Ok(());
        }
        self.patch_pod(pod, body, "set lifecycle of", false).await?;
        debug!(pod = %name, ?from, to = %to, "lifecycle state changed");
        Ok(())
    }
}
