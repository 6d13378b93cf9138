//! A conflicting in-place update write: the pod is read again and, if the plan's guard
//! ([`crate::plan::inplace_write::Guard`]) still holds for the fresh pod, the write is
//! planned again from it and retried at once.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tracing::debug;

use crate::error::Error;
use crate::plan::inplace_write::InPlaceWrite;

use super::Actor;

/// The pod version a write is pinned to.
#[derive(Clone, Debug)]
pub(super) enum Pin {
    /// The version the plan decided from (or one our own write of it left): the plan's
    /// write holds.
    Planned(String),
    /// A version read (or written) since: the write is planned again from it.
    Fresh(Box<Pod>),
}

impl Pin {
    pub(super) fn resource_version(&self) -> String {
        match self {
            Self::Planned(rv) => rv.clone(),
            Self::Fresh(pod) => pod.resource_version().unwrap_or_default(),
        }
    }
}

impl Actor<'_> {
    /// Runs `write_at` pinned to `pin`; on a 409 the pod is read again and, if the guard of
    /// `write` still holds for it ([`Self::reread_for_update`]), the write is retried at
    /// once pinned to the fresh pod, at most [`CONFLICT_RETRIES`] times. Returns the pin
    /// the successful write used, and its result.
    pub(super) async fn retry_on_conflict<T, F, Fut>(
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
        let mut attempt = 0;
        loop {
            match write_at(pin.clone()).await {
                Ok(out) => return Ok((pin, out)),
                Err(err) if err.is_conflict() && attempt < CONFLICT_RETRIES => {
                    attempt += 1;
                    pin = Pin::Fresh(Box::new(
                        self.reread_for_update(write, gate_set, err).await?,
                    ));
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// After a conflict on `write`: the pod as the API server has it now, if the write's
    /// guard still holds for it; otherwise `conflict` (the reconcile fails and re-plans).
    async fn reread_for_update(
        &self,
        write: &InPlaceWrite,
        gate_set: bool,
        conflict: Error,
    ) -> Result<Pod, Error> {
        let name = &write.pod;
        let fresh = self
            .api::<Pod>()
            .get(name)
            .await
            .map_err(|e| Error::kube(format!("read pod {name} after a conflict"), e))?;
        match write.guard.holds(&fresh, gate_set) {
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
/// read of the pod that still passes the write's guard).
const CONFLICT_RETRIES: u32 = 3;
