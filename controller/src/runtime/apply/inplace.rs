//! The in-place writes as the plan holds them ([`crate::plan::inplace_write`]): a start
//! (`InPlaceUpdateReady` False first for gated pods), a held update, the next container
//! batch, each one pinned patch; then what follows the patch ([`AfterPatch`]). Every
//! write answered 409 is re-read and re-planned as [`crate::plan::resend`] decides.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use tracing::{debug, warn};

use crate::error::Error;
use crate::plan::inplace_write::{AfterPatch, InPlaceWrite, WriteInputs};
use crate::plan::resend::{self, Pin};
use crate::plan::sending::in_place_what;

use super::{Actor, now_time};

impl Actor<'_> {
    /// Sends the in-place write `write`, then what follows it.
    pub(super) async fn in_place(&self, write: &InPlaceWrite) -> Result<(), Error> {
        let (name, gated) = (&write.pod, write.not_ready_first);
        let again = |fresh| resend::retry_at(write, fresh, gated);
        // 1. Not ready first, so endpoints drop the pod before its containers restart.
        let mut pin = Pin::Planned(write.resource_version.clone());
        if gated {
            let (used, written) = self
                .resend_on_conflict(name, pin, (resend::retries, &again), |p| {
                    let body = InPlaceWrite::not_ready_patch(&p.resource_version(), &now_time());
                    self.send_pod_patch(name, Some("status"), body, || in_place_what(write, true))
                })
                .await?;
            pin = used.after(written);
        }
        // 2. One patch: a start's revision labels, lifecycle Updating, state and spec (or,
        //    during a grace period, the held spec); the held spec; the next batch. Planned
        //    again from a pod re-read.
        let sent = self.resend_on_conflict(name, pin, (resend::retries, &again), |p| {
            let inputs = WriteInputs {
                cloneset: self.cs,
                revisions: &self.owned.revisions,
                update_revision: &self.plan.revisions.update_revision,
                options: &self.ctx.settings.plan_options,
                now: Timestamp::now(),
            };
            let body = p.body(write, &inputs);
            async move {
                let what = || in_place_what(write, false);
                self.send_pod_patch(name, None, body?, what).await
            }
        });
        sent.await?;
        match write.after_patch() {
            AfterPatch::Nothing => Ok(()),
            AfterPatch::ResizeUnsupported => {
                warn!(pod = %name, "server has no pods/resize: resources not changed in place");
                Ok(())
            }
            AfterPatch::Resize(body) => {
                let what = || format!("resize pod {name}");
                let sent = self.send_pod_patch(name, Some("resize"), body, what);
                sent.await.map(drop)
            }
        }
    }

    /// Runs `write_at` pinned to `pin`; on a 409, while `retries` allows (given the
    /// attempt, from 1), pod `name` is read again and the write retried at once at the pin
    /// `again` decides from it, if it does; otherwise the conflict fails the step (the
    /// reconcile re-plans). Returns the pin the successful write used, and its result.
    pub(super) async fn resend_on_conflict<P, T, Fut>(
        &self,
        name: &str,
        mut pin: P,
        (retries, again): (fn(u32) -> bool, &impl Fn(Pod) -> Result<P, String>),
        mut write_at: impl FnMut(&P) -> Fut,
    ) -> Result<(P, T), Error>
    where
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let mut attempt = 0;
        loop {
            let err = match write_at(&pin).await {
                Ok(out) => return Ok((pin, out)),
                Err(err) if err.is_conflict() && retries(attempt + 1) => err,
                Err(err) => return Err(err),
            };
            attempt += 1;
            let read = self.api::<Pod>().get(name).await;
            let fresh =
                read.map_err(|e| Error::kube(format!("read pod {name} after a conflict"), e))?;
            pin = match again(fresh) {
                Ok(pin) => pin,
                Err(why) => {
                    debug!(pod = %name, %why, "conflict: not retrying");
                    return Err(err);
                }
            };
            debug!(pod = %name, "conflict: pod re-read, decision still holds, retrying");
        }
    }
}
