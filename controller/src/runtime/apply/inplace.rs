//! The in-place writes as the plan holds them ([`crate::plan::inplace_write`]): a start
//! (`InPlaceUpdateReady` False first for gated pods, then one pinned patch), a held
//! update, the next container batch; then cpu/memory through `pods/resize` where the plan
//! says so. A start answered 409 is re-read and re-planned as [`crate::plan::resend`]
//! decides.

use k8s_openapi::jiff::Timestamp;
use tracing::{debug, warn};

use crate::error::Error;
use crate::plan::inplace_write::{InPlaceWrite, InPlaceWriteKind, ResizeVia, WriteInputs};
use crate::plan::resend::{self, Pin};
use crate::plan::sending::in_place_what;

use super::{Actor, now_time};

impl Actor<'_> {
    /// Sends the in-place write `write`, then its resize.
    pub(super) async fn in_place(&self, write: &InPlaceWrite) -> Result<(), Error> {
        let name = &write.pod;
        if write.kind == InPlaceWriteKind::Start {
            self.start_in_place(write).await?;
        } else {
            let body = write.pinned_patch(&write.resource_version);
            let what = || in_place_what(write, false);
            self.send_pod_patch(name, None, body, what).await?;
        }
        // A held update of another revision is only dropped: nothing more.
        if !write.applies_spec() {
            return Ok(());
        }
        if write.resize.as_ref().map(|r| r.via) == Some(ResizeVia::Unsupported) {
            warn!(pod = %name, "server has no pods/resize: resources not changed in place");
        }
        match write.resize_patch() {
            Some(body) => {
                let what = || format!("resize pod {name}");
                self.send_pod_patch(name, Some("resize"), body, what)
                    .await
                    .map(drop)
            }
            None => Ok(()),
        }
    }

    async fn start_in_place(&self, write: &InPlaceWrite) -> Result<(), Error> {
        let name = &write.pod;
        // 1. Not ready first, so endpoints drop the pod before its containers restart.
        let mut pin = Pin::Planned(write.resource_version.clone());
        if write.not_ready_first {
            let (used, written) = self
                .retry_on_conflict(write, pin, false, |p| {
                    let body = InPlaceWrite::not_ready_patch(&p.resource_version(), &now_time());
                    self.send_pod_patch(name, Some("status"), body, || in_place_what(write, true))
                })
                .await?;
            pin = used.after(written);
        }
        // 2. One patch: revision labels, lifecycle Updating, state, and the spec itself
        //    (or, during a grace period, the held spec).
        let inputs = WriteInputs {
            cloneset: self.cs,
            revisions: &self.owned.revisions,
            update_revision: &self.plan.revisions.update_revision,
            options: &self.ctx.settings.plan_options,
            now: Timestamp::now(),
        };
        self.retry_on_conflict(write, pin, write.not_ready_first, |p| {
            let body = p.body(
                write,
                &WriteInputs {
                    now: Timestamp::now(),
                    ..inputs
                },
            );
            async move {
                let what = || in_place_what(write, false);
                self.send_pod_patch(name, None, body?, what).await
            }
        })
        .await
        .map(drop)
    }

    /// Runs `write_at` pinned to `pin`; on a 409 the pod is read again and the write
    /// retried at once pinned to it while [`resend`] says so; otherwise the conflict fails
    /// the step (the reconcile re-plans). Returns the pin the successful write used, and
    /// its result.
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
                Err(err) if err.is_conflict() && resend::retries(attempt + 1) => err,
                Err(err) => return Err(err),
            };
            attempt += 1;
            pin = match resend::retry_at(write, self.read_pod(name).await?, gate_set) {
                Ok(pin) => pin,
                Err(why) => {
                    debug!(pod = %name, %why, "conflict: the pod changed, not retrying");
                    return Err(err);
                }
            };
            debug!(pod = %name, rv = %pin.resource_version(), "conflict: pod re-read, decision still holds, retrying");
        }
    }
}
