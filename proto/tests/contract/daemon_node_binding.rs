//! `deploy/policy/daemon-node-binding.yaml`: the ValidatingAdmissionPolicy that binds each
//! inplace-daemon to its own node's objects (issue: RBAC cannot say "pods on my node"),
//! well-formed for `admissionregistration.k8s.io/v1`, and its CEL evaluated offline on the
//! status writes the daemon makes (its own node: admitted) and the ones a stolen token
//! would make (another node's pod, NodeImage or CRR, a label or a foreign annotation
//! changed through `pods/status`, a token bound to no node: refused). Requests of other
//! users are left alone.

use serde_json::{Value, json};

use super::admission_policy::{self, assert_policy_and_binding, evaluate, rule_matches};

const FILE: &str = "daemon-node-binding.yaml";
const DAEMON: &str = "system:serviceaccount:inplace-system:inplace-daemon";
const STATE: &str = "apps.kruise.io/inplace-update-state";

fn policy() -> Value {
    admission_policy::policy(FILE)
}

#[test]
fn the_policy_and_its_binding_are_admissionregistration_v1_objects() {
    assert_policy_and_binding(FILE);
}

/// An UPDATE (a PATCH is admitted as an UPDATE) of `group`/`resource`/`status` by `user`
/// whose token names `node` (none: not bound to a node).
fn request(user: &str, node: Option<&str>, group: &str, resource: &str) -> Value {
    let mut user_info = json!({"username": user});
    if let Some(n) = node {
        user_info["extra"] = json!({"authentication.kubernetes.io/node-name": [n]});
    }
    json!({"operation": "UPDATE", "userInfo": user_info, "subResource": "status",
           "resource": {"group": group, "version": "v1", "resource": resource}})
}

fn pod(node: &str, labels: Value, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web-1", "namespace": "default", "labels": labels,
                        "annotations": annotations},
           "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:v1"}]}})
}

fn node_image(name: &str) -> Value {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
           "metadata": {"name": name}, "spec": {}})
}

fn crr(node: Option<&str>) -> Value {
    let labels = node.map_or(json!({}), |n| json!({"crr.apps.kruise.io/node-name": n}));
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
           "metadata": {"name": "r", "namespace": "default", "labels": labels},
           "spec": {"podName": "web-1", "containers": [{"name": "app"}]}})
}

/// The policy's verdict: `None` when admitted, else the refusal's message.
fn verdict(req: &Value, object: &Value, old: &Value) -> Option<String> {
    let policy = policy();
    let matched = rule_matches(
        &policy,
        req["resource"]["group"].as_str().unwrap_or_default(),
        &format!(
            "{}/{}",
            req["resource"]["resource"].as_str().unwrap_or_default(),
            req["subResource"].as_str().unwrap_or_default()
        ),
        "UPDATE",
    );
    if !matched {
        return None;
    }
    evaluate(&policy, req, object, old).err()
}

#[test]
fn table_of_status_writes() {
    let labels = json!({"app": "web", "controller-revision-hash": "web-2"});
    let state = json!({STATE: "{\"revision\":\"web-2\"}"});
    let state_with_ids = json!({STATE: "{\"revision\":\"web-2\",\"daemonContainerIDs\":{}}"});
    let on = |node: &str| pod(node, labels.clone(), state.clone());
    let pods = |user: &str, node: Option<&str>| request(user, node, "", "pods");
    let kruise = |node: Option<&str>, r: &str| request(DAEMON, node, "apps.kruise.io", r);
    // (what, request, object, old object, refused with a message containing)
    let cases: Vec<(&str, Value, Value, Value, Option<&str>)> = vec![
        (
            "the daemon completes a pod on its node (condition and ids)",
            pods(DAEMON, Some("node-a")),
            pod("node-a", labels.clone(), state_with_ids.clone()),
            on("node-a"),
            None,
        ),
        (
            "a pod on another node",
            pods(DAEMON, Some("node-a")),
            on("node-b"),
            on("node-b"),
            Some("pods on its own node"),
        ),
        (
            "a pod not scheduled yet",
            pods(DAEMON, Some("node-a")),
            pod("", labels.clone(), state.clone()),
            pod("", labels.clone(), state.clone()),
            Some("pods on its own node"),
        ),
        (
            "a label changed through pods/status",
            pods(DAEMON, Some("node-a")),
            pod(
                "node-a",
                json!({"app": "db", "controller-revision-hash": "web-2"}),
                state.clone(),
            ),
            on("node-a"),
            Some("labels"),
        ),
        (
            "a label added",
            pods(DAEMON, Some("node-a")),
            pod(
                "node-a",
                json!({"app": "web", "controller-revision-hash": "web-2", "x": "y"}),
                state.clone(),
            ),
            on("node-a"),
            Some("labels"),
        ),
        (
            "another annotation changed",
            pods(DAEMON, Some("node-a")),
            pod("node-a", labels.clone(), json!({STATE: "{}", "other": "x"})),
            on("node-a"),
            Some("annotation"),
        ),
        (
            "an annotation removed",
            pods(DAEMON, Some("node-a")),
            pod("node-a", labels.clone(), json!({})),
            pod("node-a", labels.clone(), json!({STATE: "{}", "other": "x"})),
            Some("annotation"),
        ),
        (
            "the legacy state key written",
            pods(DAEMON, Some("node-a")),
            pod(
                "node-a",
                labels.clone(),
                json!({"inplace-update-state": "{}"}),
            ),
            pod("node-a", labels.clone(), json!({})),
            None,
        ),
        (
            "a daemon token bound to no node",
            pods(DAEMON, None),
            on("node-a"),
            on("node-a"),
            Some("names no node"),
        ),
        (
            "another user (the kubelet) on another node's pod",
            pods("system:node:node-b", Some("node-b")),
            on("node-a"),
            on("node-a"),
            None,
        ),
        (
            "the controller changes labels through pods/status",
            pods(
                "system:serviceaccount:inplace-system:inplace-controller",
                None,
            ),
            pod("node-a", json!({"app": "db"}), state.clone()),
            on("node-a"),
            None,
        ),
        (
            "its own NodeImage",
            kruise(Some("node-a"), "nodeimages"),
            node_image("node-a"),
            node_image("node-a"),
            None,
        ),
        (
            "another node's NodeImage",
            kruise(Some("node-a"), "nodeimages"),
            node_image("node-b"),
            node_image("node-b"),
            Some("NodeImage"),
        ),
        (
            "a CRR of its node",
            kruise(Some("node-a"), "containerrecreaterequests"),
            crr(Some("node-a")),
            crr(Some("node-a")),
            None,
        ),
        (
            "a CRR of another node",
            kruise(Some("node-a"), "containerrecreaterequests"),
            crr(Some("node-b")),
            crr(Some("node-b")),
            Some("ContainerRecreateRequests"),
        ),
        (
            "a CRR without a node label yet",
            kruise(Some("node-a"), "containerrecreaterequests"),
            crr(None),
            crr(None),
            Some("ContainerRecreateRequests"),
        ),
        (
            "a CRR moved onto its node",
            kruise(Some("node-a"), "containerrecreaterequests"),
            crr(Some("node-a")),
            crr(Some("node-b")),
            Some("ContainerRecreateRequests"),
        ),
    ];
    for (what, req, object, old, want) in cases {
        match (verdict(&req, &object, &old), want) {
            (None, None) => {}
            (Some(message), Some(part)) => assert!(
                message.contains(part),
                "{what}: refused with {message:?}, expected it to mention {part:?}"
            ),
            (None, Some(part)) => panic!("{what}: admitted, expected a refusal ({part})"),
            (Some(message), None) => panic!("{what}: refused ({message}), expected admitted"),
        }
    }
}

/// The policy looks at the daemon's status writes only: the pods/status, NodeImage status
/// and CRR status UPDATEs (a PATCH is admitted as an UPDATE); the daemon holds no other
/// write verb (controller/tests/deploy_manifests.rs checks its role).
#[test]
fn the_policy_matches_exactly_the_daemons_status_writes() {
    let p = policy();
    for (group, resource, op, want) in [
        ("", "pods/status", "UPDATE", true),
        ("apps.kruise.io", "nodeimages/status", "UPDATE", true),
        (
            "apps.kruise.io",
            "containerrecreaterequests/status",
            "UPDATE",
            true,
        ),
        ("", "pods", "UPDATE", false),
        ("", "pods/status", "CREATE", false),
        ("apps.kruise.io", "nodeimages", "UPDATE", false),
    ] {
        assert_eq!(
            rule_matches(&p, group, resource, op),
            want,
            "{group}/{resource} {op}"
        );
    }
    let conditions = p["spec"]["matchConditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(conditions.len(), 1);
    assert!(
        conditions[0]["expression"]
            .as_str()
            .unwrap_or_default()
            .contains(DAEMON),
        "{}",
        conditions[0]
    );
}

/// `old` with `patch` applied (the daemon's `pods/status` patches are merge patches, or
/// strategic ones whose only list is the conditions, which the policy does not read).
fn patched(old: &Value, patch: &Value) -> Value {
    let mut new = old.clone();
    json_patch::merge(&mut new, patch);
    new
}

/// A pod of `node` in the middle of an in-place update, as the controller leaves it for the
/// daemon: revision label (the short hash, as with `CloneSetShortHash`), lifecycle state
/// Updating with its timestamp, the state naming the full revision and the lifecycle state
/// to take on completion, `InPlaceUpdateReady` False.
fn updating_pod(node: &str) -> k8s_openapi::api::core::v1::Pod {
    let state = json!({
        "revision": "web-6fccd6cd9d",
        "updateTimestamp": "2026-01-01T00:00:10Z",
        "updateEnvFromMetadata": true,
        "lastContainerStatuses": {"app": {"imageID": "reg/app@sha256:aa", "containerID": "containerd://a0"}},
        "lifecycleStateOnCompletion": "Normal",
    });
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "default", "resourceVersion": "41",
            "labels": {"app": "web", "controller-revision-hash": "6fccd6cd9d",
                       "lifecycle.apps.kruise.io/state": "Updating"},
            "annotations": {STATE: state.to_string(),
                            "lifecycle.apps.kruise.io/timestamp": "2026-01-01T00:00:10Z",
                            "other": "kept"}},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:v2"}]},
        "status": {"conditions": [{"type": "InPlaceUpdateReady", "status": "False"}]}
    }))
    .unwrap_or_default()
}

/// Every `pods/status` write the daemon makes, built by the daemon's own code: each is
/// admitted for a pod on the daemon's node and refused for the same pod on another node.
/// A change to what the daemon writes (a new label or annotation) fails here unless the
/// policy admits it too.
#[test]
fn every_pod_write_of_the_daemon_is_admitted_on_its_node_only()
-> Result<(), Box<dyn std::error::Error>> {
    use inplace_daemon::inplace::decide;
    use k8s_openapi::jiff::Timestamp;
    use std::collections::BTreeMap;

    let now = Timestamp::from_second(1_767_225_700)?;
    let ids = BTreeMap::from([("app".to_owned(), "containerd://a1".to_owned())]);
    for (node, admitted) in [("node-a", true), ("node-b", false)] {
        let pod = updating_pod(node);
        let state = match inplace_proto::InPlaceUpdateState::from_annotations(
            pod.metadata.annotations.as_ref().ok_or("no annotations")?,
        ) {
            Some(Ok(s)) => s,
            _ => return Err("unreadable state".into()),
        };
        let env_stopped =
            decide::state_with_env_stopped(&state, "app", "a0")?.ok_or("already recorded")?;
        let mut checked = state.clone();
        checked.daemon_env_checked = Some(inplace_proto::EnvChecked {
            batch: 1,
            containers: ids.clone(),
        });
        let writes = [
            ("completion", decide::completion_patch(&pod, &ids, now)?),
            (
                "env restart recorded",
                decide::state_patch(&pod, env_stopped),
            ),
            (
                "env checked",
                decide::state_patch(&pod, serde_json::to_string(&checked)?),
            ),
        ];
        let old = serde_json::to_value(&pod)?;
        for (what, patch) in writes {
            let new = patched(&old, &patch);
            assert_ne!(new, old, "{what}: the write changes the pod");
            let v = verdict(&request(DAEMON, Some("node-a"), "", "pods"), &new, &old);
            assert_eq!(v.is_none(), admitted, "{what} on {node}: {v:?}");
        }
        // The completion moves the lifecycle label: the write the policy once refused.
        let completed = patched(&old, &decide::completion_patch(&pod, &ids, now)?);
        assert_eq!(
            completed["metadata"]["labels"]["lifecycle.apps.kruise.io/state"],
            "Normal"
        );
    }
    Ok(())
}

/// The lifecycle label may move only as a completion moves it: from Updating to Normal or
/// Updated, and the timestamp annotation only with it.
#[test]
fn the_lifecycle_label_moves_only_out_of_updating() {
    let req = request(DAEMON, Some("node-a"), "", "pods");
    let with = |state: &str, stamp: &str| {
        pod(
            "node-a",
            json!({"app": "web", "lifecycle.apps.kruise.io/state": state}),
            json!({"lifecycle.apps.kruise.io/timestamp": stamp}),
        )
    };
    for (from, to, stamp_changed, ok) in [
        ("Updating", "Normal", true, true),
        ("Updating", "Updated", true, true),
        ("Updating", "PreparingDelete", true, false),
        ("Normal", "Updating", true, false),
        ("Normal", "PreparingDelete", false, false),
        ("Normal", "Normal", true, false),
    ] {
        let new_stamp = if stamp_changed { "t2" } else { "t1" };
        let v = verdict(&req, &with(to, new_stamp), &with(from, "t1"));
        assert_eq!(
            v.is_none(),
            ok,
            "{from} -> {to} (stamp changed {stamp_changed}): {v:?}"
        );
    }
}
