#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use serde_json::{Value, json};

const NOW: &str = "2026-01-01T00:02:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                if v.is_null() {
                    a.remove(&k);
                } else {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (a, b) => *a = b,
    }
}

/// The reference's manifest: only the pod name and the container names.
fn crr(extra: Value) -> ContainerRecreateRequest {
    let mut v = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
        "metadata": {"name": "r", "namespace": "ns", "creationTimestamp": "2026-01-01T00:01:30Z"},
        "spec": {"podName": "p", "containers": [{"name": "app"}, {"name": "side"}],
            "strategy": {"failurePolicy": "Fail"}}
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

/// The same request as the controller leaves it after filling it in.
fn filled(extra: Value) -> ContainerRecreateRequest {
    let mut v = json!({
        "metadata": {"labels": {"crr.apps.kruise.io/pod-uid": "u1",
            "crr.apps.kruise.io/node-name": "n1", "crr.apps.kruise.io/pod-name": "p",
            "crr.apps.kruise.io/active": "true"}},
        "spec": {"containers": [
            {"name": "app", "statusContext": {"containerID": "containerd://a0", "restartCount": 0}},
            {"name": "side", "statusContext": {"containerID": "containerd://s0", "restartCount": 2}}
        ], "strategy": {"failurePolicy": "Fail", "terminationGracePeriodSeconds": 30}}
    });
    merge(&mut v, extra);
    crr(v)
}

fn pod(extra: Value) -> Pod {
    let mut v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30,
            "readinessGates": [{"conditionType": "KruisePodReady"}],
            "containers": [{"name": "app", "image": "i"}, {"name": "side", "image": "i"},
                {"name": "other", "image": "i"}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "app", "ready": true, "restartCount": 0, "image": "i", "imageID": "x",
             "containerID": "containerd://a0", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
            {"name": "side", "ready": true, "restartCount": 2, "image": "i", "imageID": "x",
             "containerID": "containerd://s0", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
            {"name": "other", "ready": true, "restartCount": 0, "image": "i", "imageID": "x",
             "containerID": "containerd://o0", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
        ]}
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn run(c: &ContainerRecreateRequest, p: Option<&Pod>) -> Plan {
    plan(c, p, &[c], now())
}

fn labels_set(p: &Plan) -> Vec<(&str, Option<&str>)> {
    p.labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_deref()))
        .collect()
}

#[test]
fn a_request_as_the_docs_write_it_is_filled_in_from_the_pod() {
    let c = crr(json!({}));
    let pd = pod(json!({}));
    let p = run(&c, Some(&pd));
    assert_eq!(
        labels_set(&p),
        vec![
            ("crr.apps.kruise.io/active", Some("true")),
            ("crr.apps.kruise.io/node-name", Some("n1")),
            ("crr.apps.kruise.io/pod-name", Some("p")),
            ("crr.apps.kruise.io/pod-uid", Some("u1")),
        ]
    );
    let f = p.fill.expect("filled");
    let ctx: Vec<_> = f
        .containers
        .iter()
        .map(|c| {
            let s = c.status_context.clone().unwrap_or_default();
            (
                c.name.as_str(),
                s.container_id,
                s.restart_count,
                c.pre_stop.is_none(),
            )
        })
        .collect();
    assert_eq!(
        ctx,
        vec![
            ("app", "containerd://a0".to_string(), 0, true),
            ("side", "containerd://s0".to_string(), 2, true),
        ]
    );
    assert_eq!(f.termination_grace_period_seconds, Some(30));
    assert_eq!((p.status, p.refused), (None, None));
    // an explicit grace period is kept (the daemon caps it at the pod's)
    let c = crr(json!({"spec": {"strategy": {"terminationGracePeriodSeconds": 5}}}));
    assert_eq!(
        run(&c, Some(&pd))
            .fill
            .map(|f| f.termination_grace_period_seconds),
        Some(None)
    );
}

#[test]
fn refusals_complete_the_request_with_the_reason() {
    let no_node = pod(
        json!({"spec": {"nodeName": null}, "status": {"phase": "Pending", "containerStatuses": null}}),
    );
    let not_started = pod(json!({"status": {"containerStatuses": [
            {"name": "app", "ready": false, "restartCount": 0, "image": "i", "imageID": ""},
            {"name": "side", "ready": false, "restartCount": 0, "image": "i", "imageID": ""}]}}));
    let done = pod(json!({"status": {"phase": "Succeeded"}}));
    let deleting = pod(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:01:00Z"}}));
    let cases: Vec<(&str, ContainerRecreateRequest, Option<Pod>, &str)> = vec![
        ("no pod", crr(json!({})), None, "pod p not found"),
        (
            "unscheduled",
            crr(json!({})),
            Some(no_node),
            "not running on a node",
        ),
        ("finished pod", crr(json!({})), Some(done), "not active"),
        ("deleting pod", crr(json!({})), Some(deleting), "not active"),
        (
            "unknown container",
            crr(json!({"spec": {"containers": [{"name": "app"}, {"name": "nope"}]}})),
            Some(pod(json!({}))),
            "container nope not found in pod p",
        ),
        (
            "not started",
            crr(json!({})),
            Some(not_started),
            "container app has no containerID",
        ),
        (
            "read-only preStop",
            crr(
                json!({"spec": {"containers": [{"name": "app", "preStop": {"exec": {"command": ["x"]}}}]}}),
            ),
            Some(pod(json!({}))),
            "read-only",
        ),
        (
            "negative grace",
            crr(json!({"spec": {"strategy": {"unreadyGracePeriodSeconds": -1}}})),
            Some(pod(json!({}))),
            "unreadyGracePeriodSeconds must not be negative",
        ),
    ];
    for (what, c, pd, want) in cases {
        let p = run(&c, pd.as_ref());
        let st = p
            .status
            .clone()
            .unwrap_or_else(|| panic!("{what}: no status"));
        assert_eq!(st.phase, CrrPhase::Completed, "{what}");
        assert_eq!(st.completion_time, Some(Time(now())), "{what}");
        assert!(st.message.contains(want), "{what}: {}", st.message);
        assert_eq!(p.refused.as_deref(), Some(st.message.as_str()), "{what}");
        assert_eq!((p.fill, p.labels.len()), (None, 0), "{what}");
    }
}

#[test]
fn one_active_request_per_pod_the_others_pending() {
    let pd = pod(json!({}));
    // r1 older, r2 newer, r0 recreating (newest): recreating runs first
    let r1 =
        filled(json!({"metadata": {"name": "r1", "creationTimestamp": "2026-01-01T00:01:20Z"}}));
    let r2 = crr(json!({"metadata": {"name": "r2", "creationTimestamp": "2026-01-01T00:01:25Z"}}));
    let all = [&r1, &r2];
    assert_eq!(active_name(&all, Some("u1")).as_deref(), Some("r1"));
    let p2 = plan(&r2, Some(&pd), &all, now());
    assert!(p2.fill.is_some(), "filled in while queued");
    assert_eq!(p2.requeue_after_seconds, Some(QUEUED_RESYNC_SECONDS));
    assert!(!p2.labels.contains_key(keys::CRR_ACTIVE_LABEL));
    let st = p2.status.expect("pending status");
    assert_eq!(st.phase, CrrPhase::Pending);
    assert_eq!(
        st.message,
        "waiting for ContainerRecreateRequest r1 to complete: one request per pod runs at a time"
    );
    // the active one keeps its label and writes nothing
    let p1 = plan(&r1, Some(&pd), &all, now());
    assert_eq!(p1.labels, BTreeMap::new());
    assert_eq!(p1.status, None);

    // a Recreating request goes before an older Pending one, which loses the label
    let r0 = filled(
        json!({"metadata": {"name": "r0", "creationTimestamp": "2026-01-01T00:01:50Z"},
            "status": {"phase": "Recreating"}}),
    );
    let all = [&r1, &r2, &r0];
    assert_eq!(active_name(&all, Some("u1")).as_deref(), Some("r0"));
    let p1 = plan(&r1, Some(&pd), &all, now());
    assert_eq!(labels_set(&p1), vec![("crr.apps.kruise.io/active", None)]);
    assert_eq!(p1.requeue_after_seconds, Some(QUEUED_RESYNC_SECONDS));
    assert_eq!(p1.status.map(|s| s.phase), Some(CrrPhase::Pending));

    // once r1 has completed, r2 (filled, queued) becomes active
    let done = filled(
        json!({"metadata": {"name": "r1"}, "status": {"phase": "Completed",
            "completionTime": "2026-01-01T00:01:40Z"}}),
    );
    let r2f = filled(
        json!({"metadata": {"name": "r2", "creationTimestamp": "2026-01-01T00:01:25Z",
            "labels": {"crr.apps.kruise.io/active": null}},
            "status": {"phase": "Pending", "message": "waiting for ContainerRecreateRequest r1 to complete: one request per pod runs at a time"}}),
    );
    let all = [&done, &r2f];
    let p = plan(&r2f, Some(&pd), &all, now());
    assert_eq!(
        labels_set(&p),
        vec![("crr.apps.kruise.io/active", Some("true"))]
    );
    // requests of an older pod with the same name do not hold the queue
    let old = filled(
        json!({"metadata": {"name": "a-old", "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"crr.apps.kruise.io/pod-uid": "u0"}}}),
    );
    assert_eq!(
        active_name(&[&old, &r2f], Some("u1")).as_deref(),
        Some("r2")
    );
}

/// Each container's (name, phase).
fn phases(st: &ContainerRecreateRequestStatus) -> Vec<(&str, CrrPhase)> {
    st.container_recreate_states
        .iter()
        .map(|s| (s.name.as_str(), s.phase))
        .collect()
}

#[test]
fn the_manager_completes_on_deadline_pod_gone_and_silent_daemon() {
    let pd = pod(json!({}));
    // created 00:01:30, now 00:02:00: 30 s old
    let c = filled(json!({"spec": {"activeDeadlineSeconds": 20}}));
    let st = run(&c, Some(&pd)).status.expect("completed");
    assert_eq!(
        (st.phase, st.message.as_str()),
        (CrrPhase::Completed, DEADLINE_MESSAGE)
    );
    assert_eq!(
        phases(&st),
        vec![("app", CrrPhase::Failed), ("side", CrrPhase::Failed)]
    );
    // a succeeded container stays succeeded
    let c = filled(
        json!({"spec": {"activeDeadlineSeconds": 20}, "status": {"phase": "Recreating",
            "containerRecreateStates": [{"name": "app", "phase": "Succeeded"}, {"name": "side", "phase": "Recreating"}]}}),
    );
    let st = run(&c, Some(&pd)).status.expect("completed");
    assert_eq!(
        phases(&st),
        vec![("app", CrrPhase::Succeeded), ("side", CrrPhase::Failed)]
    );
    // not yet: look again when it passes
    let c =
        filled(json!({"spec": {"activeDeadlineSeconds": 45}, "status": {"phase": "Recreating"}}));
    let p = run(&c, Some(&pd));
    assert_eq!((p.status, p.requeue_after_seconds), (None, Some(15)));
    // without a daemon answering (no status at all), an active request is completed
    // 60 s after its creation
    let c = filled(json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:50Z"}}));
    let st = run(&c, Some(&pd)).status.expect("completed");
    assert_eq!(st.message, DAEMON_SILENT_MESSAGE);
    let c = filled(json!({}));
    assert_eq!(run(&c, Some(&pd)).requeue_after_seconds, Some(30));
    // pod gone, replaced (other uid), or deleting
    for pd in [
        None,
        Some(pod(json!({"metadata": {"uid": "u2"}}))),
        Some(pod(
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:01:00Z"}}),
        )),
    ] {
        let st = run(&filled(json!({})), pd.as_ref())
            .status
            .expect("completed");
        assert_eq!(
            (st.phase, st.message.as_str()),
            (CrrPhase::Completed, POD_GONE_MESSAGE)
        );
    }
}

#[test]
fn unready_grace_acquires_once_and_releases_when_finished() {
    let pd = pod(json!({}));
    let c = filled(json!({"spec": {"strategy": {"unreadyGracePeriodSeconds": 3}}}));
    assert!(run(&c, Some(&pd)).acquire_not_ready);
    let c = filled(
        json!({"spec": {"strategy": {"unreadyGracePeriodSeconds": 3}},
            "metadata": {"annotations": {"crr.apps.kruise.io/unready-acquired": "2026-01-01T00:01:40Z"}}}),
    );
    assert!(!run(&c, Some(&pd)).acquire_not_ready);
    // not for a queued request
    let first =
        filled(json!({"metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"}}));
    let c = filled(json!({"spec": {"strategy": {"unreadyGracePeriodSeconds": 3}}}));
    assert!(!plan(&c, Some(&pd), &[&first, &c], now()).acquire_not_ready);
    // finished with the finalizer: release, drop the active label
    let c = filled(
        json!({"metadata": {"finalizers": ["crr.apps.kruise.io/unready-acquired"]},
            "status": {"phase": "Completed", "completionTime": "2026-01-01T00:01:50Z"}}),
    );
    let p = run(&c, Some(&pd));
    assert!(p.release_not_ready);
    assert_eq!(labels_set(&p), vec![("crr.apps.kruise.io/active", None)]);
    // being deleted: release only
    let c = filled(
        json!({"metadata": {"finalizers": ["crr.apps.kruise.io/unready-acquired"],
            "deletionTimestamp": "2026-01-01T00:01:55Z"}}),
    );
    let p = run(&c, Some(&pd));
    assert!(p.release_not_ready && p.labels.is_empty() && p.status.is_none());
}

#[test]
fn ttl_after_finished() {
    let done = |ttl: Value| {
        filled(
            json!({"metadata": {"labels": {"crr.apps.kruise.io/active": null}},
                "spec": {"ttlSecondsAfterFinished": ttl},
                "status": {"phase": "Completed", "completionTime": "2026-01-01T00:01:50Z"}}),
        )
    };
    let p = run(&done(json!(10)), None);
    assert!(p.delete);
    let p = run(&done(json!(25)), None);
    assert_eq!((p.delete, p.requeue_after_seconds), (false, Some(15)));
    let p = run(&done(Value::Null), None);
    assert_eq!((p.delete, p.requeue_after_seconds), (false, None));
}

#[test]
fn the_snapshot_has_the_named_containers_started_since_the_request() {
    let pd = pod(json!({"status": {"containerStatuses": [
            {"name": "app", "ready": false, "restartCount": 1, "image": "i", "imageID": "x",
             "containerID": "containerd://a1", "state": {"running": {"startedAt": "2026-01-01T00:01:45Z"}}},
            {"name": "side", "ready": true, "restartCount": 2, "image": "i", "imageID": "x",
             "containerID": "containerd://s0", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}}));
    let c = filled(json!({"status": {"phase": "Recreating"}}));
    let p = run(&c, Some(&pd));
    assert_eq!(
        p.sync_statuses.as_deref(),
        Some(r#"[{"name":"app","ready":false,"restartCount":1,"containerID":"containerd://a1"}]"#)
    );
    // unchanged: nothing to write; not while Pending
    let c = filled(
        json!({"status": {"phase": "Recreating"}, "metadata": {"annotations": {
            "crr.apps.kruise.io/sync-container-statuses":
            r#"[{"name":"app","ready":false,"restartCount":1,"containerID":"containerd://a1"}]"#}}}),
    );
    assert_eq!(run(&c, Some(&pd)).sync_statuses, None);
    let c = filled(json!({"status": {"phase": "Pending"}}));
    assert_eq!(run(&c, Some(&pd)).sync_statuses, None);
}

#[test]
fn kruise_pod_ready_keys_are_added_and_removed() {
    let c = crr(json!({}));
    let key = not_ready_key(&c);
    let pd = pod(json!({}));
    let (st, msg) = kruise_pod_ready(&pd, &key, true).expect("a change");
    assert_eq!(st, "False");
    assert_eq!(
        msg,
        r#"[{"userAgent":"ContainerRecreateRequest","key":"ns/r"}]"#
    );
    // another writer's key stays; ours goes
    let both = pod(
        json!({"status": {"conditions": [{"type": "KruisePodReady", "status": "False",
            "message": r#"[{"userAgent":"Lifecycle","key":"preUpdateHook"},{"userAgent":"ContainerRecreateRequest","key":"ns/r"}]"#}]}}),
    );
    assert_eq!(kruise_pod_ready(&both, &key, true), None);
    let (st, msg) = kruise_pod_ready(&both, &key, false).expect("a change");
    assert_eq!(st, "False");
    assert_eq!(msg, r#"[{"userAgent":"Lifecycle","key":"preUpdateHook"}]"#);
    let ours = pod(
        json!({"status": {"conditions": [{"type": "KruisePodReady", "status": "False",
            "message": r#"[{"userAgent":"ContainerRecreateRequest","key":"ns/r"}]"#}]}}),
    );
    assert_eq!(
        kruise_pod_ready(&ours, &key, false),
        Some(("True".into(), String::new()))
    );
    assert_eq!(kruise_pod_ready(&pd, &key, false), None);
}
