//! Pure ContainerRecreateRequest decisions: which CRR of a pod runs, the next status of
//! that CRR from what the runtime shows, and which container to kill next.

use inplace_proto::{inplace_contract, keys};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::{
    ContainerRecreateRequest, ContainerRecreateRequestContainerRecreateState as ContainerState,
    ContainerRecreateRequestStatus, CrrFailurePolicy, CrrPhase, ProbeHandler,
};

/// A runtime container instance with its start time (from CRI ContainerStatus).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    pub running: bool,
    /// Nanoseconds since the epoch; 0 when not started.
    pub started_at: i64,
}

/// A container to kill, with its preStop hook.
#[derive(Clone, Debug, PartialEq)]
pub struct Kill {
    pub container: String,
    pub id: String,
    pub pre_stop: Option<ProbeHandler>,
    pub grace_seconds: i64,
}

/// The next status of a CRR and, at most, one container to kill now.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub status: ContainerRecreateRequestStatus,
    pub kill: Option<Kill>,
}

fn completed(mut status: ContainerRecreateRequestStatus, now: Timestamp, message: &str) -> Step {
    status.phase = CrrPhase::Completed;
    status.completion_time = Some(Time(now));
    status.message = message.into();
    Step { status, kill: None }
}

/// One step for an active CRR. `instances(name)` is the newest runtime instance of a
/// container of the pod; `pod_pre_stop(name)` the preStop hook of that container in the
/// pod's own spec; `pod_grace` the pod's termination grace period.
///
/// A request runs only what the pod itself declares: the preStop hook comes from the pod's
/// spec, never from the request (OpenKruise's webhook copies it from the pod, so the two
/// agree for any request it admitted; a request written directly could otherwise run any
/// command in the container, or reach any host from the node). The request's
/// `terminationGracePeriodSeconds` may shorten the pod's own grace period, not lengthen it.
pub fn step(
    crr: &ContainerRecreateRequest,
    pod_uid: Option<&str>,
    instances: &dyn Fn(&str) -> Option<Instance>,
    pod_pre_stop: &dyn Fn(&str) -> Option<ProbeHandler>,
    pod_grace: i64,
    now: Timestamp,
) -> Step {
    let mut status = crr.status.clone().unwrap_or_default();
    if status.phase == CrrPhase::Completed {
        return Step { status, kill: None };
    }
    let wanted_uid = crr
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::CRR_POD_UID_LABEL));
    match (pod_uid, wanted_uid) {
        (None, _) => return completed(status, now, "pod has gone"),
        (Some(u), Some(w)) if u != w => return completed(status, now, "pod has gone"),
        _ => {}
    }
    if let (Some(d), Some(created)) = (
        crr.spec.active_deadline_seconds,
        crr.metadata.creation_timestamp.as_ref(),
    ) && now.duration_since(created.0) >= SignedDuration::from_secs(d)
    {
        return completed(
            status,
            now,
            "recreating has exceeded the activeDeadlineSeconds",
        );
    }
    let strategy = crr.spec.strategy.clone().unwrap_or_default();
    if let Some(g) = strategy.unready_grace_period_seconds.filter(|g| *g > 0) {
        let acquired = crr
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::CRR_UNREADY_ACQUIRED_ANNOTATION))
            .and_then(|t| t.parse::<Timestamp>().ok());
        match acquired {
            None => {
                status.message = "waiting for the pod to be made not-ready".into();
                return Step { status, kill: None };
            }
            Some(t) if now.duration_since(t) < SignedDuration::from_secs(g) => {
                status.message = format!("waiting out unreadyGracePeriodSeconds ({g}s)");
                return Step { status, kill: None };
            }
            _ => {}
        }
    }
    status.phase = CrrPhase::Recreating;
    status.message.clear();
    // The manager's snapshot of the pod status (`None`: no manager writes one, as with
    // a request whose controller is off; then the runtime alone decides).
    let snapshot = crr.sync_container_statuses().and_then(Result::ok);
    let min_started = SignedDuration::from_secs(i64::from(strategy.min_started_seconds.max(0)));
    let pod_grace = pod_grace.max(2);
    let grace = strategy
        .termination_grace_period_seconds
        .unwrap_or(pod_grace)
        .clamp(2, pod_grace);
    let policy = crr.failure_policy();

    let mut states: Vec<ContainerState> = Vec::new();
    let mut kill = None;
    let mut blocked = false; // orderedRecreate: an earlier container is not done
    for c in &crr.spec.containers {
        let mut st = status
            .container_recreate_states
            .iter()
            .find(|s| s.name == c.name)
            .cloned()
            .unwrap_or(ContainerState {
                name: c.name.clone(),
                ..Default::default()
            });
        if matches!(st.phase, CrrPhase::Succeeded | CrrPhase::Failed) {
            states.push(st);
            continue;
        }
        let ctx_id = c
            .status_context
            .as_ref()
            .map(|s| inplace_contract::runtime_id(&s.container_id).to_string())
            .unwrap_or_default();
        if ctx_id.is_empty() {
            st.phase = CrrPhase::Failed;
            st.message = "statusContext.containerID is missing".into();
            states.push(st);
            continue;
        }
        let current = instances(&c.name);
        match current {
            None => {
                st.phase = CrrPhase::Recreating;
                st.message = "container not found in the runtime".into();
            }
            Some(inst) if inst.id != ctx_id => {
                // a new instance: done once it has run long enough (and, when the
                // manager's snapshot knows it, is ready)
                st.phase = CrrPhase::Recreating;
                let started = inst.running
                    && inst.started_at > 0
                    && now.duration_since(
                        Timestamp::from_nanosecond(i128::from(inst.started_at)).unwrap_or(now),
                    ) >= min_started;
                // as the reference: the snapshot must show this very instance ready, so
                // the pod status the kubelet reports has caught up too
                let ready = snapshot.as_ref().is_none_or(|snap| {
                    snap.iter()
                        .find(|s| {
                            s.name == c.name
                                && inplace_contract::runtime_id(&s.container_id) == inst.id
                        })
                        .is_some_and(|s| s.ready)
                });
                if started && ready {
                    st.phase = CrrPhase::Succeeded;
                    st.message.clear();
                }
            }
            Some(inst) => {
                // still the instance the request names
                st.phase = CrrPhase::Recreating;
                if !inst.running && !strategy.force_recreate {
                    st.message = "container exited; waiting for the kubelet to start it".into();
                } else if !st.is_killed && kill.is_none() && !blocked {
                    kill = Some(Kill {
                        container: c.name.clone(),
                        id: inst.id.clone(),
                        pre_stop: pod_pre_stop(&c.name),
                        grace_seconds: grace,
                    });
                }
            }
        }
        if st.phase != CrrPhase::Succeeded && strategy.ordered_recreate {
            blocked = true;
        }
        states.push(st);
    }
    status.container_recreate_states = states;
    let failed = status
        .container_recreate_states
        .iter()
        .any(|s| s.phase == CrrPhase::Failed);
    if failed && policy == CrrFailurePolicy::Fail {
        return completed(
            status,
            now,
            "a container failed to recreate (failurePolicy Fail)",
        );
    }
    if status
        .container_recreate_states
        .iter()
        .all(|s| matches!(s.phase, CrrPhase::Succeeded | CrrPhase::Failed))
    {
        let msg = if failed {
            "some containers failed to recreate"
        } else {
            ""
        };
        return completed(status, now, msg);
    }
    Step { status, kill }
}

/// Records the outcome of a kill in the status.
pub fn record_kill(
    status: &mut ContainerRecreateRequestStatus,
    container: &str,
    result: Result<(), String>,
) {
    if let Some(s) = status
        .container_recreate_states
        .iter_mut()
        .find(|s| s.name == container)
    {
        match result {
            Ok(()) => {
                s.is_killed = true;
                s.message.clear();
            }
            Err(m) => {
                s.phase = CrrPhase::Failed;
                s.message = m;
            }
        }
    }
}

/// Whether the controller has made `crr` the active request of its pod (the label the
/// daemon's watch selects on).
pub fn is_active(crr: &ContainerRecreateRequest) -> bool {
    crr.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::CRR_ACTIVE_LABEL))
        .is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    const NOW: i64 = 1_767_225_700; // seconds

    fn now() -> Timestamp {
        Timestamp::from_second(NOW).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn crr(extra: serde_json::Value) -> ContainerRecreateRequest {
        let mut v = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": "r", "namespace": "ns", "creationTimestamp": "2026-01-01T00:01:00Z",
                "labels": {"crr.apps.kruise.io/pod-uid": "u1"}},
            "spec": {"podName": "p", "containers": [
                {"name": "a", "statusContext": {"containerID": "containerd://a0", "restartCount": 0}},
                {"name": "b", "statusContext": {"containerID": "containerd://b0", "restartCount": 0}}
            ]}
        });
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn inst(id: &str, running: bool, started_secs_ago: i64) -> Instance {
        Instance {
            id: id.into(),
            running,
            started_at: (NOW - started_secs_ago) * 1_000_000_000,
        }
    }

    fn run(c: &ContainerRecreateRequest, rt: &BTreeMap<&str, Instance>) -> Step {
        step(c, Some("u1"), &|n| rt.get(n).cloned(), &|_| None, 30, now())
    }

    fn phases(s: &Step) -> Vec<(String, CrrPhase, bool)> {
        s.status
            .container_recreate_states
            .iter()
            .map(|c| (c.name.clone(), c.phase, c.is_killed))
            .collect()
    }

    #[test]
    fn active_is_the_controllers_label() {
        assert!(!is_active(&crr(json!({}))));
        assert!(is_active(&crr(
            json!({"metadata": {"labels": {keys::CRR_ACTIVE_LABEL: "true"}}})
        )));
        assert!(!is_active(&crr(
            json!({"metadata": {"labels": {keys::CRR_ACTIVE_LABEL: "false"}}})
        )));
    }

    #[test]
    fn first_step_kills_the_first_container_only() {
        let rt = BTreeMap::from([("a", inst("a0", true, 100)), ("b", inst("b0", true, 100))]);
        let s = run(&crr(json!({})), &rt);
        assert_eq!(s.status.phase, CrrPhase::Recreating);
        assert_eq!(s.kill.as_ref().map(|k| k.id.as_str()), Some("a0"));
        assert_eq!(s.kill.as_ref().map(|k| k.grace_seconds), Some(30));
    }

    /// The hook that runs is the pod's own; one the request carries is never run. The
    /// request may shorten the pod's grace period, not lengthen it.
    #[test]
    fn the_pre_stop_hook_is_the_pods_and_the_grace_period_at_most_the_pods() {
        let rt = BTreeMap::from([("a", inst("a0", true, 100)), ("b", inst("b0", true, 100))]);
        let c = crr(json!({"spec": {
            "containers": [
                {"name": "a", "statusContext": {"containerID": "containerd://a0", "restartCount": 0},
                 "preStop": {"exec": {"command": ["/bin/sh", "-c", "cat /secrets/*"]}}}],
            "strategy": {"terminationGracePeriodSeconds": 3600}}}));
        let pods_hook = ProbeHandler {
            exec: Some(k8s_openapi::api::core::v1::ExecAction {
                command: Some(vec!["/bin/drain".into()]),
            }),
            ..ProbeHandler::default()
        };
        let s = step(
            &c,
            Some("u1"),
            &|n| rt.get(n).cloned(),
            &|n| (n == "a").then(|| pods_hook.clone()),
            30,
            now(),
        );
        let kill = s.kill.unwrap_or_else(|| panic!("a kill"));
        assert_eq!(kill.pre_stop, Some(pods_hook));
        assert_eq!(kill.grace_seconds, 30, "clamped to the pod's 30 s");
        // No hook in the pod: none runs, whatever the request says.
        let s = run(&c, &rt);
        assert_eq!(s.kill.and_then(|k| k.pre_stop), None);
        // A shorter grace period is taken; never below 2 s.
        let short = crr(json!({"spec": {"strategy": {"terminationGracePeriodSeconds": 0}}}));
        assert_eq!(run(&short, &rt).kill.map(|k| k.grace_seconds), Some(2));
        let five = crr(json!({"spec": {"strategy": {"terminationGracePeriodSeconds": 5}}}));
        assert_eq!(run(&five, &rt).kill.map(|k| k.grace_seconds), Some(5));
    }

    #[test]
    fn unordered_kills_the_next_after_the_first_is_killed() {
        let rt = BTreeMap::from([("a", inst("a0", true, 100)), ("b", inst("b0", true, 100))]);
        let mut c = crr(json!({}));
        let mut s = run(&c, &rt);
        record_kill(&mut s.status, "a", Ok(()));
        c.status = Some(s.status);
        let s2 = run(&c, &rt);
        assert_eq!(s2.kill.as_ref().map(|k| k.id.as_str()), Some("b0"));
    }

    #[test]
    fn ordered_waits_for_the_first_to_succeed() {
        let mut rt = BTreeMap::from([("a", inst("a0", true, 100)), ("b", inst("b0", true, 100))]);
        let mut c =
            crr(json!({"spec": {"strategy": {"orderedRecreate": true, "minStartedSeconds": 5}}}));
        let mut s = run(&c, &rt);
        record_kill(&mut s.status, "a", Ok(()));
        c.status = Some(s.status);
        // a restarted 1 s ago: not yet minStartedSeconds
        rt.insert("a", inst("a1", true, 1));
        let s2 = run(&c, &rt);
        assert_eq!(s2.kill, None);
        assert_eq!(phases(&s2)[0], ("a".into(), CrrPhase::Recreating, true));
        rt.insert("a", inst("a1", true, 6));
        let s3 = run(&c, &rt);
        assert_eq!(phases(&s3)[0], ("a".into(), CrrPhase::Succeeded, true));
        assert_eq!(s3.kill.as_ref().map(|k| k.id.as_str()), Some("b0"));
    }

    #[test]
    fn all_succeeded_completes() {
        let rt = BTreeMap::from([("a", inst("a1", true, 100)), ("b", inst("b1", true, 100))]);
        let c = crr(json!({}));
        let s = run(&c, &rt);
        assert_eq!(s.status.phase, CrrPhase::Completed);
        assert_eq!(s.kill, None);
        assert!(s.status.completion_time.is_some());
        assert_eq!(
            phases(&s),
            vec![
                ("a".into(), CrrPhase::Succeeded, false),
                ("b".into(), CrrPhase::Succeeded, false)
            ]
        );
    }

    #[test]
    fn not_ready_in_the_manager_snapshot_is_not_succeeded() {
        let rt = BTreeMap::from([("a", inst("a1", true, 100)), ("b", inst("b0", true, 100))]);
        let c = crr(
            json!({"metadata": {"annotations": {"crr.apps.kruise.io/sync-container-statuses":
            r#"[{"name":"a","ready":false,"restartCount":1,"containerID":"containerd://a1"}]"#}}}),
        );
        let s = run(&c, &rt);
        assert_eq!(phases(&s)[0].1, CrrPhase::Recreating);
    }

    /// Once the manager writes a snapshot, a new instance succeeds only when the snapshot
    /// shows it, ready (the pod status has caught up with the runtime).
    #[test]
    fn with_a_snapshot_the_new_instance_must_be_in_it_and_ready() {
        let rt = BTreeMap::from([("a", inst("a1", true, 100)), ("b", inst("b1", true, 100))]);
        let snap = |v: &str| {
            crr(
                json!({"metadata": {"annotations": {"crr.apps.kruise.io/sync-container-statuses": v}}}),
            )
        };
        let cases = [
            ("[]", CrrPhase::Recreating),
            (
                r#"[{"name":"a","ready":true,"restartCount":0,"containerID":"containerd://a0"}]"#,
                CrrPhase::Recreating,
            ),
            (
                r#"[{"name":"a","ready":true,"restartCount":1,"containerID":"containerd://a1"}]"#,
                CrrPhase::Succeeded,
            ),
        ];
        for (annotation, want) in cases {
            assert_eq!(
                phases(&run(&snap(annotation), &rt))[0].1,
                want,
                "{annotation}"
            );
        }
    }

    #[test]
    fn kill_failure_with_fail_policy_completes_and_with_ignore_goes_on() {
        let rt = BTreeMap::from([("a", inst("a0", true, 100)), ("b", inst("b0", true, 100))]);
        let mut c = crr(json!({}));
        let mut s = run(&c, &rt);
        record_kill(
            &mut s.status,
            "a",
            Err("Unknown: failed to stop container".into()),
        );
        c.status = Some(s.status.clone());
        let s2 = run(&c, &rt);
        assert_eq!(s2.status.phase, CrrPhase::Completed);
        assert_eq!(
            s2.status.container_recreate_states[0].message,
            "Unknown: failed to stop container"
        );

        let mut ci = crr(json!({"spec": {"strategy": {"failurePolicy": "Ignore"}}}));
        ci.status = Some(s.status);
        let s3 = run(&ci, &rt);
        assert_eq!(s3.status.phase, CrrPhase::Recreating);
        assert_eq!(s3.kill.as_ref().map(|k| k.id.as_str()), Some("b0"));
    }

    #[test]
    fn pod_gone_or_replaced_completes() {
        let c = crr(json!({}));
        let rt: BTreeMap<&str, Instance> = BTreeMap::new();
        let s = step(&c, None, &|n| rt.get(n).cloned(), &|_| None, 30, now());
        assert_eq!(
            (s.status.phase, s.status.message.as_str()),
            (CrrPhase::Completed, "pod has gone")
        );
        let s = step(
            &c,
            Some("other"),
            &|n| rt.get(n).cloned(),
            &|_| None,
            30,
            now(),
        );
        assert_eq!(s.status.phase, CrrPhase::Completed);
    }

    #[test]
    fn active_deadline_completes() {
        // created 00:01:00, now is 00:01:40 → 40 s old
        let rt = BTreeMap::from([("a", inst("a0", true, 100))]);
        let s = run(&crr(json!({"spec": {"activeDeadlineSeconds": 30}})), &rt);
        assert_eq!(s.status.phase, CrrPhase::Completed);
        assert!(s.status.message.contains("activeDeadlineSeconds"));
        let s = run(&crr(json!({"spec": {"activeDeadlineSeconds": 60}})), &rt);
        assert_eq!(s.status.phase, CrrPhase::Recreating);
    }

    #[test]
    fn unready_grace_waits_for_the_acquired_time() {
        let rt = BTreeMap::from([("a", inst("a0", true, 100)), ("b", inst("b0", true, 100))]);
        let c = crr(json!({"spec": {"strategy": {"unreadyGracePeriodSeconds": 10}}}));
        assert_eq!(run(&c, &rt).kill, None);
        let c = crr(
            json!({"spec": {"strategy": {"unreadyGracePeriodSeconds": 10}},
            "metadata": {"annotations": {"crr.apps.kruise.io/unready-acquired": "2026-01-01T00:01:35Z"}}}),
        );
        assert_eq!(run(&c, &rt).kill, None);
        let c = crr(
            json!({"spec": {"strategy": {"unreadyGracePeriodSeconds": 10}},
            "metadata": {"annotations": {"crr.apps.kruise.io/unready-acquired": "2026-01-01T00:01:20Z"}}}),
        );
        assert!(run(&c, &rt).kill.is_some());
    }

    #[test]
    fn exited_container_is_left_to_the_kubelet_unless_forced() {
        let rt = BTreeMap::from([("a", inst("a0", false, 100)), ("b", inst("b1", true, 100))]);
        let s = run(&crr(json!({})), &rt);
        assert_eq!(s.kill, None);
        let s = run(
            &crr(json!({"spec": {"strategy": {"forceRecreate": true}}})),
            &rt,
        );
        assert_eq!(s.kill.as_ref().map(|k| k.id.as_str()), Some("a0"));
    }

    #[test]
    fn sort_order() {
        let mut v = [
            crr(json!({"metadata": {"name": "p"}, "status": {"phase": "Pending"}})),
            crr(json!({"metadata": {"name": "c"}, "status": {"phase": "Completed"}})),
            crr(json!({"metadata": {"name": "r"}, "status": {"phase": "Recreating"}})),
        ];
        v.sort_by_key(ContainerRecreateRequest::run_order_key);
        let names: Vec<_> = v.iter().filter_map(|c| c.metadata.name.clone()).collect();
        assert_eq!(names, vec!["c", "r", "p"]);
    }
}
