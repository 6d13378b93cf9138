#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use super::*;

const NOW: &str = "2026-01-01T00:10:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

/// A CloneSet `demo` (uid u1, generation 2) with `spec` merged over 5 replicas and
/// `status` merged over "observed, 5 replicas, 2 of 5 updated".
fn cloneset(spec: Value, status: Value) -> CloneSet {
    let mut s = json!({"replicas": 5, "selector": {"matchLabels": {"app": "demo"}},
        "template": {"metadata": {"labels": {"app": "demo"}},
            "spec": {"containers": [{"name": "main", "image": "reg/app:v2"}]}}});
    merge(&mut s, spec);
    let mut st = json!({"observedGeneration": 2, "replicas": 5, "readyReplicas": 5,
        "availableReplicas": 5, "updatedReplicas": 2, "updatedReadyReplicas": 2,
        "updateRevision": "demo-new", "currentRevision": "demo-old"});
    merge(&mut st, status);
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": "demo", "namespace": "default", "uid": "u1", "generation": 2},
        "spec": s, "status": st
    }))
    .unwrap()
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), from) {
        for (k, v) in b {
            a.insert(k, v);
        }
    }
}

/// A pod of `demo` named `name`; `status` merged over "Running, Ready since 00:00".
fn pod(name: &str, status: Value) -> Pod {
    pod_with(name, json!({}), status)
}

fn pod_with(name: &str, labels: Value, status: Value) -> Pod {
    let mut st = json!({"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    merge(&mut st, status);
    let mut l = json!({"app": "demo", "controller-revision-hash": "demo-new"});
    merge(&mut l, labels);
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": l, "ownerReferences": [{
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "demo",
            "uid": "u1", "controller": true}]},
        "spec": {"containers": [{"name": "main", "image": "reg/app:v2"}]},
        "status": st
    }))
    .unwrap()
}

fn healthy(n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| pod(&format!("demo-{i}"), json!({})))
        .collect()
}

fn not_ready() -> Value {
    json!({"conditions": [{"type": "Ready", "status": "False"}]})
}

fn said(cs: &CloneSet, pods: &[Pod]) -> Vec<String> {
    reasons(cs, pods, now())
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn reasons_table() {
    let mut unready = healthy(4);
    unready.push(pod("demo-4", not_ready()));
    let mut two_unready = healthy(3);
    two_unready.push(pod("demo-3", not_ready()));
    two_unready.push(pod("demo-4", not_ready()));
    let mut pulling = healthy(4);
    pulling.push(pod(
        "demo-4",
        json!({"conditions": [{"type": "Ready", "status": "False"}],
               "containerStatuses": [{"name": "main", "ready": false, "restartCount": 0,
                   "image": "reg/app:v3", "imageID": "",
                   "state": {"waiting": {"reason": "ImagePullBackOff",
                       "message": "Back-off pulling image \"reg/app:v3\""}}}]}),
    ));
    let mut stalled = healthy(4);
    stalled.push(pod(
        "demo-4",
        json!({"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "InPlaceUpdateReady", "status": "False", "reason": "InPlaceUpdateStalled",
             "message": "container main has not restarted within 5m0s"}]}),
    ));
    let mut unschedulable = healthy(4);
    unschedulable.push(pod(
        "demo-4",
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/3 nodes are available"}]}),
    ));
    let mut hooked = healthy(4);
    hooked.push(pod_with(
        "demo-4",
        json!({"lifecycle.apps.kruise.io/state": "PreparingUpdate"}),
        json!({}),
    ));
    let mut fresh = healthy(4);
    fresh.push(pod(
        "demo-4",
        json!({"conditions": [{"type": "Ready", "status": "True",
            "lastTransitionTime": "2026-01-01T00:09:50Z"}]}),
    ));
    let mut surge = healthy(5);
    surge.push(pod("demo-5", not_ready()));
    let mut terminating = healthy(4);
    let mut gone = pod("demo-4", not_ready());
    gone.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    terminating.push(gone);
    let mut stranger = healthy(4);
    let mut other = pod("other", not_ready());
    other.metadata.owner_references = None;
    stranger.push(other);

    let cases: Vec<(&str, CloneSet, Vec<Pod>, Vec<&str>)> = vec![
        (
            "in progress, budget left: nothing to say",
            cloneset(json!({}), json!({})),
            healthy(5),
            vec![],
        ),
        (
            "done: nothing to say",
            cloneset(
                json!({}),
                json!({"updatedReplicas": 5, "updatedReadyReplicas": 5}),
            ),
            healthy(5),
            vec![],
        ),
        (
            "no status yet",
            serde_json::from_value(json!({"metadata": {"name": "demo", "uid": "u1"},
                "spec": {"selector": {}, "template": {}}}))
            .unwrap(),
            healthy(1),
            vec![],
        ),
        (
            "generation not observed",
            cloneset(json!({}), json!({"observedGeneration": 1})),
            healthy(5),
            vec!["the controller has not observed generation 2 yet (saw 1)"],
        ),
        (
            "Progressing=False",
            cloneset(
                json!({}),
                json!({"conditions": [{"type": "Progressing", "status": "False",
                    "reason": "ProgressDeadlineExceeded", "message": "CloneSet demo has timed out progressing."}]}),
            ),
            healthy(5),
            vec!["failed: ProgressDeadlineExceeded: CloneSet demo has timed out progressing."],
        ),
        (
            "paused with pods left",
            cloneset(json!({"updateStrategy": {"paused": true}}), json!({})),
            unready.clone(),
            vec!["paused: 3 pod(s) left to update (kubectl inplace rollout resume)"],
        ),
        (
            "paused when done: nothing to say",
            cloneset(
                json!({"updateStrategy": {"paused": true}}),
                json!({"updatedReplicas": 5}),
            ),
            healthy(5),
            vec![],
        ),
        (
            "default budget (20 % of 5 = 1) spent by one unready pod",
            cloneset(json!({}), json!({})),
            unready.clone(),
            vec!["maxUnavailable reached: 1 unavailable of 1 allowed"],
        ),
        (
            "maxUnavailable 2: one unready pod leaves budget",
            cloneset(json!({"updateStrategy": {"maxUnavailable": 2}}), json!({})),
            unready.clone(),
            vec![],
        ),
        (
            "maxUnavailable 2 spent by two",
            cloneset(json!({"updateStrategy": {"maxUnavailable": 2}}), json!({})),
            two_unready,
            vec!["maxUnavailable reached: 2 unavailable of 2 allowed"],
        ),
        (
            "maxUnavailable 40 %",
            cloneset(
                json!({"updateStrategy": {"maxUnavailable": "40%"}}),
                json!({}),
            ),
            unready.clone(),
            vec![],
        ),
        (
            "a surge pod widens the budget",
            cloneset(
                json!({"updateStrategy": {"maxSurge": 1, "maxUnavailable": 1}}),
                json!({}),
            ),
            surge,
            vec![],
        ),
        (
            "ready for less than minReadySeconds is unavailable",
            cloneset(json!({"minReadySeconds": 30}), json!({})),
            fresh,
            vec!["maxUnavailable reached: 1 unavailable of 1 allowed"],
        ),
        (
            "terminating pods are not counted",
            cloneset(json!({}), json!({})),
            terminating,
            vec![],
        ),
        (
            "pods of others are not counted",
            cloneset(json!({}), json!({})),
            stranger,
            vec![],
        ),
        (
            "an image pull back-off",
            cloneset(json!({}), json!({})),
            pulling,
            vec![
                "maxUnavailable reached: 1 unavailable of 1 allowed",
                "pod demo-4: container main: ImagePullBackOff: Back-off pulling image \"reg/app:v3\"",
            ],
        ),
        (
            "the controller's stall report",
            cloneset(json!({}), json!({})),
            stalled,
            vec!["pod demo-4: InPlaceUpdateStalled: container main has not restarted within 5m0s"],
        ),
        (
            "unschedulable",
            cloneset(json!({}), json!({})),
            unschedulable,
            vec![
                "maxUnavailable reached: 1 unavailable of 1 allowed",
                "pod demo-4: not scheduled: Unschedulable: 0/3 nodes are available",
            ],
        ),
        (
            "a lifecycle hook holds a pod (and it is unavailable)",
            cloneset(json!({}), json!({})),
            hooked,
            vec![
                "maxUnavailable reached: 1 unavailable of 1 allowed",
                "pod demo-4: held by a lifecycle hook (state PreparingUpdate)",
            ],
        ),
        (
            "partition reached",
            cloneset(
                json!({"updateStrategy": {"partition": 3}}),
                json!({"expectedUpdatedReplicas": 2}),
            ),
            healthy(5),
            vec!["partition 3 reached: 3 pod(s) stay at the current revision"],
        ),
        (
            "partition as a percent (40 % of 5 = 2), computed without expectedUpdatedReplicas",
            cloneset(
                json!({"updateStrategy": {"partition": "40%"}}),
                json!({"updatedReplicas": 3}),
            ),
            healthy(5),
            vec!["partition 2 reached: 2 pod(s) stay at the current revision"],
        ),
        (
            "partition not reached yet",
            cloneset(json!({"updateStrategy": {"partition": 2}}), json!({})),
            healthy(5),
            vec![],
        ),
    ];
    for (case, cs, pods, want) in cases {
        assert_eq!(said(&cs, &pods), want, "{case}");
    }
}

#[test]
fn a_failed_pod_and_an_init_container_crash_loop() {
    let failed = pod(
        "demo-0",
        json!({"phase": "Failed", "reason": "Evicted", "message": "low on memory"}),
    );
    assert_eq!(
        pod_problem(&failed).as_deref(),
        Some("failed: Evicted: low on memory")
    );
    let crashing = pod(
        "demo-1",
        json!({"initContainerStatuses": [{"name": "init", "ready": false, "restartCount": 4,
            "image": "i", "imageID": "", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
    );
    assert_eq!(
        pod_problem(&crashing).as_deref(),
        Some("container init: CrashLoopBackOff")
    );
    // Waiting to be created is not a problem.
    let creating = pod(
        "demo-2",
        json!({"containerStatuses": [{"name": "main", "ready": false, "restartCount": 0,
            "image": "i", "imageID": "", "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
    );
    assert_eq!(pod_problem(&creating), None);
    // An in-place update that is just in progress is not either.
    let updating = pod(
        "demo-3",
        json!({"conditions": [{"type": "InPlaceUpdateReady", "status": "False"}]}),
    );
    assert_eq!(pod_problem(&updating), None);
}

#[test]
fn reasons_serialize_with_their_kind() {
    let w = Waiting::MaxUnavailable {
        unavailable: 1,
        allowed: 1,
    };
    assert_eq!(
        serde_json::to_value(&w).unwrap(),
        json!({"reason": "maxUnavailable", "unavailable": 1, "allowed": 1})
    );
}
