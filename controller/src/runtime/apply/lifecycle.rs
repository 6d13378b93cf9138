//! A lifecycle transition as the plan wrote it down ([`crate::plan::lifecycle_write`]): our
//! key in `KruisePodReady` where the hook marks the pod not ready, then the pod patch of
//! the state label (with the hook put back on a pod that goes through another update).

use tracing::debug;

use crate::error::Error;
use crate::plan::Action;
use crate::plan::lifecycle_write::LifecycleWrite;

use super::{Actor, now_rfc3339};

impl Actor<'_> {
    pub(super) async fn lifecycle(
        &self,
        name: &str,
        write: &LifecycleWrite,
        action: &Action,
    ) -> Result<(), Error> {
        let pod = &self.pod(name)?;
        if let Some(nr) = write.not_ready {
            self.set_not_ready_key(pod, nr.key, nr.add).await?;
        }
        // Nothing to patch, or the completion's `pods/status` patch (earlier in this pod's
        // chain) carried the labels (`with_completion`).
        let Some(body) = write.patch(&now_rfc3339()) else {
            return Ok(());
        };
        self.send_pod_patch(name, false, body, || format!("set lifecycle of pod {name}"))
            .await?;
        if let Action::Lifecycle { from, to, .. } = action {
            debug!(pod = %name, ?from, to = %to, "lifecycle state changed");
        }
        Ok(())
    }
}
