//! Why a CloneSet's rollout waits, as `get` and `rollout status` say it: a pure function
//! from the CloneSet and the pods it controls, at a time, to reasons ([`reasons`]).
//!
//! - the controller has not observed the newest generation yet;
//! - the rollout failed (`Progressing=False`: the condition's reason and message);
//! - the rollout is paused while pods are left to update;
//! - the unavailability budget is spent (`maxUnavailable` reached: N unavailable of M
//!   allowed) while pods are left to update;
//! - pods that stall or fail: the controller's `InPlaceUpdateReady=False` report
//!   (`InPlaceUpdateFailed`/`InPlaceUpdateStalled`), a container the kubelet cannot start
//!   (an image pull or crash-loop back-off, ...), a pod that cannot be scheduled, a failed
//!   pod, a pod held by a lifecycle hook;
//! - the partition is reached: the pods it keeps stay at the current revision (the rollout
//!   is complete as asked, which `rollout status` reports as done).
//!
//! Unavailable counts the controlled, not terminating pods that are not ready, not in
//! lifecycle state Normal, or not yet ready for `minReadySeconds` (what the controller's
//! update budget counts). The budget is the controller's own resolution of `maxUnavailable`
//! ([`crate::plan::diffs::resolve`]) plus the pods above `replicas` (surge), as in its diffs.

use inplace_proto::{CloneSet, keys};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

/// One reason why the rollout waits (or stopped, for a partition).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "reason")]
pub enum Waiting {
    /// `status.observedGeneration` is behind `metadata.generation`.
    NotObserved { generation: i64, observed: i64 },
    /// `Progressing=False`.
    Failed { message: String },
    /// `spec.updateStrategy.paused` with `left` pods still to update.
    Paused { left: i32 },
    /// `unavailable` pods are unavailable and the budget allows `allowed`.
    MaxUnavailable { unavailable: i32, allowed: i32 },
    /// A pod that does not progress by itself, and why.
    Pod { pod: String, why: String },
    /// The partition keeps `kept` pods at the current revision; the rollout stops there.
    Partition { partition: i32, kept: i32 },
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Waiting::NotObserved {
                generation,
                observed,
            } => write!(
                f,
                "the controller has not observed generation {generation} yet (saw {observed})"
            ),
            Waiting::Failed { message } => write!(f, "failed: {message}"),
            Waiting::Paused { left } => write!(
                f,
                "paused: {left} pod(s) left to update (kubectl inplace rollout resume)"
            ),
            Waiting::MaxUnavailable {
                unavailable,
                allowed,
            } => write!(
                f,
                "maxUnavailable reached: {unavailable} unavailable of {allowed} allowed"
            ),
            Waiting::Pod { pod, why } => write!(f, "pod {pod}: {why}"),
            Waiting::Partition { partition, kept } => write!(
                f,
                "partition {partition} reached: {kept} pod(s) stay at the current revision"
            ),
        }
    }
}

/// Lifecycle states in which a hook holds the pod until its owner removes the hook's
/// label (or finalizer).
const HELD_STATES: &[&str] = &["PreparingNormal", "PreparingUpdate", "PreparingDelete"];

/// Why `cs`'s rollout waits at `now`, from `pods` (those `cs` controls are taken). Empty
/// when nothing holds it (in progress, or done).
pub fn reasons(cs: &CloneSet, pods: &[Pod], now: Timestamp) -> Vec<Waiting> {
    let mut out = Vec::new();
    let Some(status) = cs.status.as_ref() else {
        return out;
    };
    let generation = cs.metadata.generation.unwrap_or(0);
    let observed = status.observed_generation.unwrap_or(0);
    if observed < generation {
        out.push(Waiting::NotObserved {
            generation,
            observed,
        });
    }
    if let Some(c) = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing" && c.status == "False")
    {
        let reason = c.reason.as_deref().unwrap_or("Progressing=False");
        let message = match c.message.as_deref() {
            Some(m) if !m.is_empty() => format!("{reason}: {m}"),
            _ => reason.to_owned(),
        };
        out.push(Waiting::Failed { message });
    }
    let resolved = crate::plan::diffs::resolve(cs);
    let replicas = resolved.replicas;
    let expected = status
        .expected_updated_replicas
        .unwrap_or(replicas - resolved.partition);
    let left = (expected - status.updated_replicas).max(0);
    let paused = cs.spec.update_strategy.as_ref().is_some_and(|s| s.paused);
    if paused && left > 0 {
        out.push(Waiting::Paused { left });
    }
    let uid = cs.metadata.uid.clone().unwrap_or_default();
    let mine: Vec<&Pod> = pods
        .iter()
        .filter(|p| super::day2::controlled_by(&p.metadata, &uid))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let min_ready = i64::from(cs.min_ready_seconds().max(0));
    let unavailable = mine
        .iter()
        .filter(|p| !available(p, min_ready, now))
        .count();
    let unavailable = i32::try_from(unavailable).unwrap_or(i32::MAX);
    // Surge pods above replicas widen the budget, as in the controller's diffs.
    let surplus = i32::try_from(mine.len())
        .unwrap_or(i32::MAX)
        .saturating_sub(replicas)
        .max(0);
    let allowed = resolved.max_unavailable.saturating_add(surplus);
    if left > 0 && !paused && unavailable >= allowed {
        out.push(Waiting::MaxUnavailable {
            unavailable,
            allowed,
        });
    }
    let mut stuck: Vec<Waiting> = mine
        .iter()
        .filter_map(|p| {
            Some(Waiting::Pod {
                pod: p.metadata.name.clone().unwrap_or_default(),
                why: pod_problem(p)?,
            })
        })
        .collect();
    stuck.sort_by_key(|w| w.to_string());
    out.extend(stuck);
    if resolved.partition > 0 && left == 0 && status.updated_replicas < replicas {
        out.push(Waiting::Partition {
            partition: resolved.partition,
            kept: replicas - status.updated_replicas,
        });
    }
    out
}

/// Ready, in lifecycle state Normal (or none), and ready for `min_ready` seconds by `now`
/// (the Ready condition's transition time): the controller's availability.
fn available(pod: &Pod, min_ready: i64, now: Timestamp) -> bool {
    let state = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::LIFECYCLE_STATE_LABEL));
    if state.is_some_and(|s| s != "Normal") {
        return false;
    }
    let Some(ready) = condition(pod, "Ready") else {
        return false;
    };
    if ready.status != "True" {
        return false;
    }
    if min_ready == 0 {
        return true;
    }
    ready
        .last_transition_time
        .as_ref()
        .is_some_and(|t| now.as_second() - t.0.as_second() >= min_ready)
}

fn condition<'a>(
    pod: &'a Pod,
    type_: &str,
) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// `reason: message`, or the one that is there.
fn said(reason: Option<&str>, message: Option<&str>) -> String {
    match (
        reason.filter(|r| !r.is_empty()),
        message.filter(|m| !m.is_empty()),
    ) {
        (Some(r), Some(m)) => format!("{r}: {m}"),
        (Some(r), None) => r.to_owned(),
        (None, Some(m)) => m.to_owned(),
        (None, None) => String::new(),
    }
}

/// Why `pod` does not progress by itself, if something says so (first found: the
/// controller's in-place report, a container that cannot start, scheduling, a failed pod,
/// a lifecycle hook).
pub fn pod_problem(pod: &Pod) -> Option<String> {
    if let Some(c) = condition(pod, keys::INPLACE_UPDATE_READY_CONDITION)
        && c.status == "False"
        && c.reason
            .as_deref()
            .is_some_and(|r| r == "InPlaceUpdateFailed" || r == "InPlaceUpdateStalled")
    {
        return Some(said(c.reason.as_deref(), c.message.as_deref()));
    }
    let status = pod.status.as_ref();
    let containers = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .collect::<Vec<_>>();
    for c in containers {
        if let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref())
            && w.reason
                .as_deref()
                .is_some_and(|r| crate::plan::stall::FAILING_REASONS.contains(&r))
        {
            return Some(format!(
                "container {}: {}",
                c.name,
                said(w.reason.as_deref(), w.message.as_deref())
            ));
        }
    }
    if let Some(c) = condition(pod, "PodScheduled")
        && c.status == "False"
    {
        return Some(format!(
            "not scheduled: {}",
            said(c.reason.as_deref(), c.message.as_deref())
        ));
    }
    if let Some(s) = status
        && s.phase.as_deref() == Some("Failed")
    {
        let why = said(s.reason.as_deref(), s.message.as_deref());
        return Some(if why.is_empty() {
            "failed".to_owned()
        } else {
            format!("failed: {why}")
        });
    }
    let state = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::LIFECYCLE_STATE_LABEL))?;
    HELD_STATES
        .contains(&state.as_str())
        .then(|| format!("held by a lifecycle hook (state {state})"))
}

#[cfg(test)]
mod tests;
