//! Pure decisions of the ContainerRecreateRequest controller: what OpenKruise's CRR
//! mutating webhook fills in (we have no webhook), which request of a pod is the active
//! one, and what the reference's CRR manager does (deadline, silent daemon, pod gone,
//! not-ready during `unreadyGracePeriodSeconds`, container snapshot, TTL).
//!
//! One call looks at one request with the pod it names and the other requests of that
//! pod; the I/O around it ([`super`]) carries the [`Plan`] out.

use std::collections::BTreeMap;

use inplace_proto::crr::{
    ContainerRecreateRequest, ContainerRecreateRequestContainer,
    ContainerRecreateRequestContainerContext, ContainerRecreateRequestContainerRecreateState,
    ContainerRecreateRequestStatus, CrrPhase, CrrSyncContainerStatus,
};
use inplace_proto::keys;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

pub use crate::plan::not_ready::kruise_pod_ready;
use crate::plan::not_ready::{CRR_USER_AGENT, NotReadyMessage};

/// The reference's manager completes a request the node's daemon has not answered
/// (no status at all) within this long after creation.
pub const DAEMON_RESPONSE_TIMEOUT_SECONDS: i64 = 60;

/// A request waiting behind another of its pod looks again this often (it is also woken
/// when another request of its pod changes; this covers a wake-up that raced the cache).
pub const QUEUED_RESYNC_SECONDS: i64 = 5;

/// Message of a request completed because its deadline passed (the reference's).
pub const DEADLINE_MESSAGE: &str = "recreating has exceeded the activeDeadlineSeconds";
/// Message of a request completed because its pod went away (the reference's).
pub const POD_GONE_MESSAGE: &str = "pod has gone";
/// Message of a request completed because no daemon answered (the reference's).
pub const DAEMON_SILENT_MESSAGE: &str = "daemon has not responded for a long time";

/// What one request needs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Labels to set (`Some`) or remove (`None`), in one metadata patch with [`Plan::fill`]
    /// and [`Plan::sync_statuses`].
    pub labels: BTreeMap<String, Option<String>>,
    /// The spec filled in from the pod (what the reference's webhook writes on create).
    pub fill: Option<Fill>,
    /// New value of the `crr.apps.kruise.io/sync-container-statuses` annotation.
    pub sync_statuses: Option<String>,
    /// The status to write (through the status subresource).
    pub status: Option<ContainerRecreateRequestStatus>,
    /// A Warning event on the request: it is refused.
    pub refused: Option<String>,
    /// Make the pod not-ready (finalizer, `KruisePodReady` not-ready key, then the
    /// `unready-acquired` annotation with the current time).
    pub acquire_not_ready: bool,
    /// Take the not-ready key off the pod again, then the finalizer.
    pub release_not_ready: bool,
    /// Delete the request (its `ttlSecondsAfterFinished` has passed).
    pub delete: bool,
    /// Look again after this many seconds (a deadline, the daemon timeout, the TTL).
    pub requeue_after_seconds: Option<i64>,
}

/// The filled-in parts of the spec.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fill {
    /// Every container of the request, with its `statusContext`; `preStop` and `ports`
    /// are not copied: the daemon takes the hook from the pod's spec.
    pub containers: Vec<ContainerRecreateRequestContainer>,
    /// `strategy.terminationGracePeriodSeconds` from the pod, when the request has none.
    pub termination_grace_period_seconds: Option<i64>,
}

/// The request's pod-uid and node-name labels are set and every container has its
/// `statusContext`: the request was filled in (by us, or by OpenKruise's webhook).
pub fn is_filled(crr: &ContainerRecreateRequest) -> bool {
    let labels = crr.metadata.labels.as_ref();
    let has = |k: &str| labels.and_then(|l| l.get(k)).is_some_and(|v| !v.is_empty());
    has(keys::CRR_POD_UID_LABEL)
        && has(keys::CRR_NODE_NAME_LABEL)
        && crr
            .spec
            .containers
            .iter()
            .all(|c| c.status_context.is_some())
}

fn label<'a>(crr: &'a ContainerRecreateRequest, key: &str) -> Option<&'a str> {
    crr.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

fn annotation<'a>(crr: &'a ContainerRecreateRequest, key: &str) -> Option<&'a str> {
    crr.metadata
        .annotations
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

fn has_finalizer(crr: &ContainerRecreateRequest) -> bool {
    crr.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == keys::CRR_UNREADY_ACQUIRED_FINALIZER))
}

/// The name of the request of this pod that runs now: the first unfinished one in the
/// reference's order among `all` (this pod's requests, for its current UID or not yet
/// filled in).
pub fn active_name(all: &[&ContainerRecreateRequest], pod_uid: Option<&str>) -> Option<String> {
    let mut open: Vec<&ContainerRecreateRequest> = all
        .iter()
        .copied()
        .filter(|c| !c.is_completed() && c.metadata.deletion_timestamp.is_none())
        .filter(|c| match (label(c, keys::CRR_POD_UID_LABEL), pod_uid) {
            (Some(l), Some(u)) => l == u,
            _ => true,
        })
        .collect();
    open.sort_by_key(|c| c.run_order_key());
    open.first().and_then(|c| c.metadata.name.clone())
}

fn secs_until(deadline: Timestamp, now: Timestamp) -> i64 {
    let left = deadline.duration_since(now).as_secs();
    left.max(1)
}

fn complete(
    crr: &ContainerRecreateRequest,
    now: Timestamp,
    message: &str,
    fail_open_containers: bool,
) -> ContainerRecreateRequestStatus {
    let mut status = crr.status.clone().unwrap_or_default();
    status.phase = CrrPhase::Completed;
    status.completion_time = Some(Time(now));
    status.message = message.into();
    if fail_open_containers {
        for c in &crr.spec.containers {
            match status
                .container_recreate_states
                .iter_mut()
                .find(|s| s.name == c.name)
            {
                Some(s) if matches!(s.phase, CrrPhase::Succeeded | CrrPhase::Failed) => {}
                Some(s) => {
                    s.phase = CrrPhase::Failed;
                    s.message = message.into();
                }
                None => status.container_recreate_states.push(
                    ContainerRecreateRequestContainerRecreateState {
                        name: c.name.clone(),
                        phase: CrrPhase::Failed,
                        message: message.into(),
                        is_killed: false,
                    },
                ),
            }
        }
    }
    status
}

/// Why the reference's webhook would have refused `crr` against `pod`; otherwise the
/// filled-in spec.
pub fn fill(crr: &ContainerRecreateRequest, pod: Option<&Pod>) -> Result<Fill, String> {
    let pod_name = &crr.spec.pod_name;
    let pod = pod.ok_or_else(|| format!("pod {pod_name} not found"))?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if pod.metadata.deletion_timestamp.is_some() || matches!(phase, Some("Succeeded" | "Failed")) {
        return Err(format!(
            "pod {pod_name} is not active: not allowed to recreate containers in an inactive pod"
        ));
    }
    let spec = pod.spec.as_ref();
    if spec
        .and_then(|s| s.node_name.as_deref())
        .is_none_or(str::is_empty)
    {
        return Err(format!(
            "pod {pod_name} is not running on a node yet: not allowed to recreate containers in a pending pod"
        ));
    }
    let strategy = crr.spec.strategy.clone().unwrap_or_default();
    if strategy
        .termination_grace_period_seconds
        .is_some_and(|g| g < 0)
    {
        return Err("strategy.terminationGracePeriodSeconds must not be negative".into());
    }
    if strategy.unready_grace_period_seconds.is_some_and(|g| g < 0) {
        return Err("strategy.unreadyGracePeriodSeconds must not be negative".into());
    }
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    let mut seen = std::collections::BTreeSet::new();
    let mut containers = Vec::with_capacity(crr.spec.containers.len());
    for c in &crr.spec.containers {
        if !seen.insert(c.name.as_str()) {
            return Err(format!("container {} is named more than once", c.name));
        }
        if c.pre_stop.is_some() || !c.ports.is_empty() || c.status_context.is_some() {
            return Err(format!(
                "container {}: preStop, ports and statusContext are read-only (filled in from the pod)",
                c.name
            ));
        }
        if !spec.is_some_and(|s| s.containers.iter().any(|pc| pc.name == c.name)) {
            return Err(format!("container {} not found in pod {pod_name}", c.name));
        }
        let st = statuses
            .and_then(|s| s.iter().find(|s| s.name == c.name))
            .ok_or_else(|| format!("container {} has no status in pod {pod_name} yet", c.name))?;
        let id = st.container_id.clone().unwrap_or_default();
        if id.is_empty() {
            return Err(format!(
                "container {} has no containerID in pod {pod_name}: it has not been started yet",
                c.name
            ));
        }
        containers.push(ContainerRecreateRequestContainer {
            name: c.name.clone(),
            pre_stop: None,
            ports: Vec::new(),
            status_context: Some(ContainerRecreateRequestContainerContext {
                container_id: id,
                restart_count: st.restart_count,
            }),
        });
    }
    Ok(Fill {
        containers,
        termination_grace_period_seconds: match strategy.termination_grace_period_seconds {
            Some(_) => None,
            None => spec.and_then(|s| s.termination_grace_period_seconds),
        },
    })
}

/// The snapshot the daemon reads: the named containers running in an instance started
/// since the request was made (the reference's manager skips older and not-running
/// ones).
pub fn sync_container_statuses(
    crr: &ContainerRecreateRequest,
    pod: &Pod,
) -> Vec<CrrSyncContainerStatus> {
    let created = crr.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    crr.spec
        .containers
        .iter()
        .filter_map(|c| statuses.iter().find(|s| s.name == c.name))
        .filter(|s| {
            let started = s
                .state
                .as_ref()
                .and_then(|st| st.running.as_ref())
                .and_then(|r| r.started_at.as_ref())
                .map(|t| t.0);
            match (started, created) {
                (Some(st), Some(cr)) => st >= cr,
                (Some(_), None) => true,
                (None, _) => false,
            }
        })
        .map(|s| CrrSyncContainerStatus {
            name: s.name.clone(),
            ready: s.ready,
            restart_count: s.restart_count,
            container_id: s.container_id.clone().unwrap_or_default(),
        })
        .collect()
}

/// The next step for `crr`. `pod` is the pod its `spec.podName` names (in its
/// namespace), `all` every request naming that pod (`crr` among them, in any version).
pub fn plan(
    crr: &ContainerRecreateRequest,
    pod: Option<&Pod>,
    all: &[&ContainerRecreateRequest],
    now: Timestamp,
) -> Plan {
    let mut p = Plan::default();
    let name = crr.metadata.name.clone().unwrap_or_default();
    let status = crr.status.as_ref();
    let finished = crr.metadata.deletion_timestamp.is_some()
        || status.is_some_and(|s| s.completion_time.is_some() || s.phase == CrrPhase::Completed);
    if finished {
        p.release_not_ready = has_finalizer(crr);
        if crr.metadata.deletion_timestamp.is_some() {
            return p;
        }
        if label(crr, keys::CRR_ACTIVE_LABEL).is_some() {
            p.labels.insert(keys::CRR_ACTIVE_LABEL.into(), None);
        }
        let done_at = status
            .and_then(|s| s.completion_time.as_ref())
            .map(|t| t.0)
            .unwrap_or(now);
        if let Some(ttl) = crr.spec.ttl_seconds_after_finished {
            let at = done_at + SignedDuration::from_secs(i64::from(ttl.max(0)));
            if now >= at {
                p.delete = true;
            } else {
                p.requeue_after_seconds = Some(secs_until(at, now));
            }
        }
        return p;
    }

    let pod_uid = pod.and_then(|p| p.metadata.uid.as_deref());
    if !is_filled(crr) {
        // what the reference's webhook does on create
        if let (Some(want), Some(have)) = (label(crr, keys::CRR_POD_UID_LABEL), pod_uid)
            && want != have
        {
            p.status = Some(complete(crr, now, POD_GONE_MESSAGE, false));
            return p;
        }
        match fill(crr, pod) {
            Err(why) => {
                p.status = Some(complete(crr, now, &why, false));
                p.refused = Some(why);
            }
            Ok(f) => {
                // pod is Some here: `fill` refuses a missing pod
                let spec = pod.and_then(|p| p.spec.as_ref());
                let node = spec.and_then(|s| s.node_name.clone()).unwrap_or_default();
                p.labels.insert(
                    keys::CRR_POD_NAME_LABEL.into(),
                    Some(crr.spec.pod_name.clone()),
                );
                p.labels.insert(
                    keys::CRR_POD_UID_LABEL.into(),
                    Some(pod_uid.unwrap_or_default().to_string()),
                );
                p.labels
                    .insert(keys::CRR_NODE_NAME_LABEL.into(), Some(node));
                let active = active_name(all, pod_uid).as_deref() == Some(name.as_str());
                set_active(&mut p, crr, active);
                if !active {
                    queue(&mut p, crr, all, pod_uid);
                    p.requeue_after_seconds = Some(QUEUED_RESYNC_SECONDS);
                }
                p.fill = Some(f);
            }
        }
        return p;
    }

    // what the reference's manager does
    let gone = match pod {
        None => true,
        Some(pod) => {
            pod.metadata.deletion_timestamp.is_some()
                || label(crr, keys::CRR_POD_UID_LABEL) != pod.metadata.uid.as_deref()
        }
    };
    if gone {
        p.status = Some(complete(crr, now, POD_GONE_MESSAGE, false));
        return p;
    }
    let created = crr.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let mut next: Option<i64> = None;
    let mut soonest = |s: i64| next = Some(next.map_or(s, |n: i64| n.min(s)));
    if let (Some(d), Some(created)) = (crr.spec.active_deadline_seconds, created) {
        let at = created + SignedDuration::from_secs(d);
        if now >= at {
            p.status = Some(complete(crr, now, DEADLINE_MESSAGE, true));
            return p;
        }
        soonest(secs_until(at, now));
    }
    let active = active_name(all, pod_uid).as_deref() == Some(name.as_str());
    set_active(&mut p, crr, active);
    if !active {
        queue(&mut p, crr, all, pod_uid);
        p.requeue_after_seconds =
            Some(next.map_or(QUEUED_RESYNC_SECONDS, |n| n.min(QUEUED_RESYNC_SECONDS)));
        return p;
    }
    if status.is_none()
        && let Some(created) = created
    {
        let at = created + SignedDuration::from_secs(DAEMON_RESPONSE_TIMEOUT_SECONDS);
        if now >= at {
            p.status = Some(complete(crr, now, DAEMON_SILENT_MESSAGE, true));
            p.requeue_after_seconds = None;
            return p;
        }
        soonest(secs_until(at, now));
    }
    let strategy = crr.spec.strategy.clone().unwrap_or_default();
    if strategy.unready_grace_period_seconds.is_some()
        && annotation(crr, keys::CRR_UNREADY_ACQUIRED_ANNOTATION).is_none_or(str::is_empty)
    {
        p.acquire_not_ready = true;
    }
    if crr.phase() == CrrPhase::Recreating
        && let Some(pod) = pod
    {
        let snapshot = sync_container_statuses(crr, pod);
        let text = serde_json::to_string(&snapshot).unwrap_or_else(|_| "[]".into());
        if annotation(crr, keys::CRR_SYNC_CONTAINER_STATUSES_ANNOTATION) != Some(text.as_str()) {
            p.sync_statuses = Some(text);
        }
    }
    p.requeue_after_seconds = next;
    p
}

fn set_active(p: &mut Plan, crr: &ContainerRecreateRequest, active: bool) {
    let has = label(crr, keys::CRR_ACTIVE_LABEL) == Some("true");
    if active && !has {
        p.labels
            .insert(keys::CRR_ACTIVE_LABEL.into(), Some("true".into()));
    } else if !active && label(crr, keys::CRR_ACTIVE_LABEL).is_some() {
        p.labels.insert(keys::CRR_ACTIVE_LABEL.into(), None);
    }
}

/// A request waiting for another of its pod: reported Pending, saying which. Only a
/// request still Pending is touched (one the daemon already works on keeps its status).
fn queue(
    p: &mut Plan,
    crr: &ContainerRecreateRequest,
    all: &[&ContainerRecreateRequest],
    pod_uid: Option<&str>,
) {
    if crr.phase() != CrrPhase::Pending {
        return;
    }
    let Some(first) = active_name(all, pod_uid) else {
        return;
    };
    let message = format!(
        "waiting for ContainerRecreateRequest {first} to complete: one request per pod runs at a time"
    );
    let mut status = crr.status.clone().unwrap_or_default();
    if status.message != message || crr.status.is_none() {
        status.phase = CrrPhase::Pending;
        status.message = message;
        p.status = Some(status);
    }
}

/// The not-ready key of `crr` in a pod's `KruisePodReady` message.
pub fn not_ready_key(crr: &ContainerRecreateRequest) -> NotReadyMessage {
    NotReadyMessage {
        user_agent: CRR_USER_AGENT.into(),
        key: format!(
            "{}/{}",
            crr.metadata.namespace.as_deref().unwrap_or_default(),
            crr.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

#[cfg(test)]
mod tests;
