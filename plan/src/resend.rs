//! What the applier does when the server refuses a write, as decisions it follows:
//! - an in-place write answered 409: the pod is read again and, while the write's guard
//!   ([`Guard`](crate::inplace_write::Guard)) holds for it, the write is planned again from
//!   it ([`InPlaceWrite::replan`]) and retried at once, at most [`CONFLICT_RETRIES`] times,
//!   instead of failing the reconcile and waiting out a backoff;
//! - a create refused because the name exists ([`create_exists`]).

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use crate::cached::CachedPod;
use crate::inplace_write::{InPlaceWrite, InPlaceWriteError, WriteInputs};

/// Immediate retries of an in-place write that hit a conflict (each after a fresh read of
/// the pod that still passes the write's guard).
pub const CONFLICT_RETRIES: u32 = 3;

/// The pod version an in-place write is pinned to.
#[derive(Clone, Debug, PartialEq)]
pub enum Pin {
    /// The version the plan decided from (or one our own write of it left): the plan's
    /// write holds.
    Planned(String),
    /// A version read (or written) since: the write is planned again from it.
    Fresh(Box<Pod>),
}

impl Pin {
    pub fn resource_version(&self) -> String {
        match self {
            Self::Planned(rv) => rv.clone(),
            Self::Fresh(pod) => pod.metadata.resource_version.clone().unwrap_or_default(),
        }
    }

    /// The pin of the next write of the pod after a write at this pin left `written`:
    /// still the plan's pod (at the version written), or the fresh one as written.
    pub fn after(&self, written: Pod) -> Self {
        match self {
            Self::Planned(_) => {
                Self::Planned(written.metadata.resource_version.unwrap_or_default())
            }
            Self::Fresh(_) => Self::Fresh(Box::new(written)),
        }
    }

    /// The patch of `write` at this pin: the plan's, or planned again from the pod read
    /// since (`inputs.now` the write time).
    pub fn body(
        &self,
        write: &InPlaceWrite,
        inputs: &WriteInputs,
    ) -> Result<Value, InPlaceWriteError> {
        let pod = match self {
            Self::Planned(rv) => return Ok(write.pinned_patch(rv)),
            Self::Fresh(pod) => pod,
        };
        let cached = CachedPod::from_pod(pod).map_err(|source| InPlaceWriteError::Encode {
            what: "the pod read again after a conflict",
            source,
        })?;
        Ok(write
            .replan(inputs, &cached)?
            .pinned_patch(&self.resource_version()))
    }
}

/// After the `attempt`th conflict (from 1) of an in-place write: whether the pod is read
/// again for a retry.
pub fn retries(attempt: u32) -> bool {
    attempt <= CONFLICT_RETRIES
}

/// The pin to retry `write` at after a conflict, from `fresh`, the pod read again:
/// while the write's guard holds (`gate_set`: this write set `InPlaceUpdateReady` False),
/// else why not (the conflict fails the step; the reconcile plans again).
pub fn retry_at(write: &InPlaceWrite, fresh: Pod, gate_set: bool) -> Result<Pin, String> {
    write.guard.holds(&fresh, gate_set)?;
    Ok(Pin::Fresh(Box::new(fresh)))
}

/// A create of pod `pod` refused because the name exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateExists {
    /// What the failed create was doing (the error's text).
    pub what: String,
    /// Whether the pod is expected as created: a pod of that name the cache does not hold
    /// yet is ours (the cache is behind), one it holds is the instance's previous pod,
    /// still terminating (retried with backoff until the name is free).
    pub expect_created: bool,
}

/// What a create of pod `pod` refused because the name exists means; `cached`: a pod of
/// that name is in the cache.
pub fn create_exists(pod: &str, cached: bool) -> CreateExists {
    if cached {
        CreateExists {
            what: format!("create pod {pod} (the previous pod of the instance is still there)"),
            expect_created: false,
        }
    } else {
        CreateExists {
            what: format!("create pod {pod} (cache behind)"),
            expect_created: true,
        }
    }
}

#[cfg(test)]
mod tests;
