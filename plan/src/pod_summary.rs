//! What the planner reads of a pod's status, annotations and readiness gates on every
//! plan, worked out once when the watch caches the pod ([`PodSummary::of`], stored in the
//! [`CachedPod`]) instead of once per pod per plan.
//!
//! Why: a plan re-reads every pod of its CloneSet. Read from the cached pod itself, each
//! pod costs a cache miss per heap block it spans (the status, its conditions, the
//! container statuses, the annotations, the readiness gates): at 10,000 pods that was
//! half of a plan. The summary sits inside the cached pod, so the facts of a pod
//! ([`super::PodFacts`]) are read from one block plus its labels. It holds only what
//! depends on the pod alone; what depends on the CloneSet (`podsToDelete`, the priority
//! and scatter rules) is still worked out by the plan.

use inplace_proto::{inplace_contract, keys};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::pod_lookup::fnv1a;
use crate::cached::CachedPod;

/// The pod phase, ordered as the reference sorts it (Pending < Unknown < Running).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum PodPhase {
    #[default]
    Pending,
    Unknown,
    Running,
    Succeeded,
    Failed,
}

impl PodPhase {
    pub fn parse(phase: Option<&str>) -> Self {
        match phase {
            Some("Running") => Self::Running,
            Some("Succeeded") => Self::Succeeded,
            Some("Failed") => Self::Failed,
            Some("Unknown") => Self::Unknown,
            _ => Self::Pending,
        }
    }
}

/// The readiness gates of ours on a pod, and whether it has the `KruisePodReady` condition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateFacts {
    /// `spec.readinessGates` has `InPlaceUpdateReady`.
    pub in_place_update_ready: bool,
    /// `spec.readinessGates` has `KruisePodReady`.
    pub kruise_pod_ready: bool,
    /// `status.conditions` has a `KruisePodReady` condition (any status).
    pub kruise_pod_ready_condition: bool,
}

/// The pod-only facts of a cached pod (see the module docs). Small on purpose: it is
/// copied out of every pod on every plan, and 10,000 pods carry it in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodSummary {
    /// When the `Ready` condition turned True, if it is True and says when.
    pub ready_since: Option<Timestamp>,
    /// Sum of restartCount over the container statuses.
    pub restarts: i32,
    /// `controller.kubernetes.io/pod-deletion-cost`; invalid or absent is 0 (valid values
    /// fit an `i32`, as in Kubernetes).
    pub deletion_cost: i32,
    pub phase: PodPhase,
    /// The first `Ready` condition is True (Kubernetes' `IsPodReady`).
    pub ready_condition: bool,
    /// Status of the first `InPlaceUpdateReady` condition: None when there is none.
    pub in_place_update_ready: Option<bool>,
    pub gates: GateFacts,
    /// An `apps.kruise.io/inplace-update-state` annotation (new or legacy key) is present.
    pub has_in_place_state: bool,
    /// An `apps.kruise.io/inplace-update-grace` annotation (new or legacy key) is present.
    pub has_in_place_grace: bool,
    /// The FNV-1a hash of `metadata.name` as cached: lets [`super::pod_lookup`] pass over
    /// the pods a plan does not write without reading their names (each a cache miss).
    /// A filter only: the lookup confirms every name, and looks again by name for any
    /// name the hashes did not find.
    pub name_hash: u64,
}

impl PodSummary {
    /// The summary of `pod`, from its status, annotations and readiness gates.
    pub fn of(pod: &CachedPod) -> Self {
        // One pass over the conditions (a lookup per type would walk them again); the
        // first condition of a type counts, as in Kubernetes' lookups.
        let (mut ready, mut in_place) = (None, None);
        let mut gates = GateFacts::default();
        for c in pod.conditions() {
            match &*c.type_ {
                "Ready" => ready = ready.or(Some(c)),
                keys::INPLACE_UPDATE_READY_CONDITION => in_place = in_place.or(Some(c)),
                keys::KRUISE_POD_READY_CONDITION => gates.kruise_pod_ready_condition = true,
                _ => {}
            }
        }
        for gate in pod.readiness_gates() {
            match gate {
                keys::INPLACE_UPDATE_READY_CONDITION => gates.in_place_update_ready = true,
                keys::KRUISE_POD_READY_CONDITION => gates.kruise_pod_ready = true,
                _ => {}
            }
        }
        let ready = ready.filter(|c| &*c.status == "True");
        let (mut cost, mut has_in_place_state, mut has_in_place_grace) = (None, false, false);
        for (key, value) in pod.annotations().iter() {
            match key {
                keys::POD_DELETION_COST_ANNOTATION => cost = Some(value),
                keys::INPLACE_UPDATE_STATE_ANNOTATION
                | keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY => has_in_place_state = true,
                key if inplace_contract::is_grace_key(key) => has_in_place_grace = true,
                _ => {}
            }
        }
        Self {
            ready_since: ready
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0),
            restarts: pod
                .container_statuses()
                .iter()
                .fold(0i32, |sum, c| sum.saturating_add(c.restart_count)),
            deletion_cost: cost.map_or(0, deletion_cost),
            phase: PodPhase::parse(pod.phase()),
            ready_condition: ready.is_some(),
            in_place_update_ready: in_place.map(|c| &*c.status == "True"),
            gates,
            has_in_place_state,
            has_in_place_grace,
            name_hash: fnv1a(pod.metadata.name.as_deref().unwrap_or_default()),
        }
    }
}

/// A `pod-deletion-cost` value as Kubernetes reads it: a decimal `int32` without a sign
/// `+` or leading zeros ("+10" and "008" are invalid); anything invalid is 0.
fn deletion_cost(raw: &str) -> i32 {
    let well_formed =
        raw.starts_with(['-', '1', '2', '3', '4', '5', '6', '7', '8', '9']) || raw == "0";
    well_formed
        .then(|| raw.parse::<i32>().ok())
        .flatten()
        // i32::MIN is out of Kubernetes' range (±(2^31-1)).
        .filter(|v| *v != i32::MIN)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletion_cost_reads_like_kubernetes() {
        for (raw, cost) in [
            ("0", 0),
            ("10", 10),
            ("-5", -5),
            ("2147483647", 2_147_483_647),
            ("-2147483647", -2_147_483_647),
            ("-2147483648", 0),
            ("2147483648", 0),
            ("+10", 0),
            ("008", 0),
            ("-0", 0),
            ("", 0),
            ("ten", 0),
        ] {
            assert_eq!(deletion_cost(raw), cost, "{raw:?}");
        }
    }
}
