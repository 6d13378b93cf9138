//! The planner's facts read from a cached pod equal the facts of the full pod.
//!
//! The planner reads [`CachedPod`]s only. Each generated pod is read three ways: the
//! expected facts are computed by their definitions from the full `Pod` (plain map
//! lookups, independent of the single-pass extraction), and compared with
//! [`PodFacts::from_pod`] of the pod cached straight from the API's JSON (the watch's
//! path) and of [`CachedPod::from_pod`] (the path of the CLI, the benches and the tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use inplace_proto::{InPlaceUpdateGrace, InPlaceUpdateState, LifecycleState, keys};
use k8s_openapi::api::core::v1::{ContainerState, Pod, ResourceRequirements};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::{CachedPod, ContainerStatusView};
use crate::{PodFacts, PodPhase};

/// The facts as plain owned data, comparable whichever pod form they were read from.
#[derive(Debug, PartialEq)]
struct Expected {
    name: String,
    name_hash: u64,
    uid: String,
    revision: Option<String>,
    instance_id: Option<String>,
    node_name: Option<String>,
    phase: PodPhase,
    lifecycle: Option<LifecycleState>,
    terminating: bool,
    finished: bool,
    ready: bool,
    ready_condition: bool,
    ready_since: Option<Timestamp>,
    creation: Option<Timestamp>,
    restarts: i32,
    deletion_cost: i64,
    specified_delete: bool,
    has_template_hash: bool,
    labels: BTreeMap<String, String>,
    finalizers: Vec<String>,
    in_place_state: Option<InPlaceUpdateState>,
    in_place_state_unreadable: bool,
    in_place_grace_pending: bool,
    in_place_grace: Option<InPlaceUpdateGrace>,
    in_place_update_ready: Option<bool>,
    /// status, reason, message of `InPlaceUpdateReady`.
    in_place_condition: Option<(String, Option<String>, Option<String>)>,
    lifecycle_timestamp: Option<String>,
    lifecycle_since: Option<Timestamp>,
    /// name, image, resources.
    container_specs: Vec<(String, Option<String>, Option<ResourceRequirements>)>,
    container_statuses: Vec<StatusSeen>,
}

/// What the planner reads of a container status.
#[derive(Debug, PartialEq)]
struct StatusSeen {
    name: String,
    image: String,
    image_id: String,
    container_id: Option<String>,
    ready: bool,
    started: Option<bool>,
    state: Option<ContainerState>,
    resources: Option<ResourceRequirements>,
    restart_count: i32,
}

fn seen(s: &impl ContainerStatusView, restart_count: i32) -> StatusSeen {
    StatusSeen {
        name: s.name().to_owned(),
        image: s.image().to_owned(),
        image_id: s.image_id().to_owned(),
        container_id: s.container_id().map(str::to_owned),
        ready: s.ready(),
        started: s.started(),
        state: s.state().cloned(),
        resources: s.resources().cloned(),
        restart_count,
    }
}

fn of_facts(f: &PodFacts) -> Expected {
    Expected {
        name: f.name.to_owned(),
        name_hash: f.name_hash,
        uid: f.uid().to_owned(),
        revision: f.revision.map(str::to_owned),
        instance_id: f.instance_id.map(str::to_owned),
        node_name: f.node_name.map(str::to_owned),
        phase: f.phase,
        lifecycle: f.lifecycle,
        terminating: f.terminating,
        finished: f.finished,
        ready: f.ready,
        ready_condition: f.ready_condition,
        ready_since: f.ready_since,
        creation: f.creation,
        restarts: f.restarts,
        deletion_cost: f.deletion_cost,
        specified_delete: f.specified_delete,
        has_template_hash: f.has_template_hash,
        labels: f.labels.to_map().unwrap_or_default(),
        finalizers: f.finalizers().to_vec(),
        in_place_state: f.in_place_state.as_deref().cloned(),
        in_place_state_unreadable: f.in_place_state_unreadable,
        in_place_grace_pending: f.in_place_grace_pending,
        in_place_grace: f.in_place_grace.as_deref().cloned(),
        in_place_update_ready: f.in_place_update_ready,
        in_place_condition: f.in_place_condition().map(|c| {
            (
                c.status.to_string(),
                c.reason.as_deref().map(str::to_owned),
                c.message.as_deref().map(str::to_owned),
            )
        }),
        lifecycle_timestamp: f.lifecycle_timestamp().map(str::to_owned),
        lifecycle_since: f.lifecycle_since(),
        container_specs: f
            .container_specs()
            .iter()
            .map(|c| {
                (
                    c.name.to_string(),
                    c.image.as_deref().map(str::to_owned),
                    c.resources.clone(),
                )
            })
            .collect(),
        container_statuses: f
            .container_statuses()
            .iter()
            .map(|s| seen(s, s.restart_count))
            .collect(),
    }
}

/// `controller.kubernetes.io/pod-deletion-cost` by its definition: a decimal int32 with
/// no `+` sign and no leading zero; anything else counts as 0.
fn deletion_cost(raw: Option<&String>) -> i64 {
    raw.filter(|v| !v.starts_with('+'))
        .filter(|v| !(v.starts_with('0') && v.len() > 1))
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|v| i64::from(i32::MIN) < *v && *v <= i64::from(i32::MAX))
        .unwrap_or(0)
}

/// The facts of `pod` by their definitions.
fn by_definition(pod: &Pod, pods_to_delete: &BTreeSet<&str>) -> Expected {
    let meta = &pod.metadata;
    let labels = meta.labels.clone().unwrap_or_default();
    let annotations = meta.annotations.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let conditions = status.conditions.clone().unwrap_or_default();
    let condition = |ty: &str| conditions.iter().find(|c| c.type_ == ty);
    let phase = PodPhase::parse(status.phase.as_deref());
    let ready_condition = condition("Ready").filter(|c| c.status == "True");
    let in_place = condition(keys::INPLACE_UPDATE_READY_CONDITION);
    let name = meta.name.clone().unwrap_or_default();
    let annotation = |new: &str, legacy: &str| {
        annotations
            .get(new)
            .or_else(|| annotations.get(legacy))
            .cloned()
    };
    let state_raw = annotation(
        keys::INPLACE_UPDATE_STATE_ANNOTATION,
        keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY,
    );
    let grace_raw = annotation(
        keys::INPLACE_UPDATE_GRACE_ANNOTATION,
        keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY,
    );
    let state = state_raw
        .as_deref()
        .and_then(|r| serde_json::from_str::<InPlaceUpdateState>(r).ok());
    let statuses = status.container_statuses.clone().unwrap_or_default();
    let lifecycle_timestamp = annotations
        .get(keys::LIFECYCLE_TIMESTAMP_ANNOTATION)
        .cloned();
    Expected {
        uid: meta.uid.clone().unwrap_or_default(),
        revision: labels.get(keys::REVISION_LABEL).cloned(),
        instance_id: labels.get(keys::INSTANCE_ID_LABEL).cloned(),
        node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        phase,
        lifecycle: labels
            .get(keys::LIFECYCLE_STATE_LABEL)
            .and_then(|l| LifecycleState::parse(l)),
        terminating: meta.deletion_timestamp.is_some(),
        finished: matches!(phase, PodPhase::Succeeded | PodPhase::Failed),
        ready: phase == PodPhase::Running
            && ready_condition.is_some()
            && in_place.is_none_or(|c| c.status == "True"),
        ready_condition: ready_condition.is_some(),
        ready_since: ready_condition
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0),
        creation: meta.creation_timestamp.as_ref().map(|t| t.0),
        restarts: statuses.iter().map(|c| c.restart_count).sum(),
        deletion_cost: deletion_cost(annotations.get(keys::POD_DELETION_COST_ANNOTATION)),
        specified_delete: labels.contains_key(keys::SPECIFIED_DELETE_LABEL)
            || pods_to_delete.contains(name.as_str()),
        has_template_hash: labels.contains_key(keys::POD_TEMPLATE_HASH_LABEL),
        finalizers: meta.finalizers.clone().unwrap_or_default(),
        in_place_state_unreadable: state_raw.is_some() && state.is_none(),
        in_place_state: state,
        in_place_grace_pending: grace_raw.is_some(),
        in_place_grace: grace_raw.and_then(|r| serde_json::from_str(&r).ok()),
        in_place_update_ready: in_place.map(|c| c.status == "True"),
        in_place_condition: in_place
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone())),
        lifecycle_since: lifecycle_timestamp.as_deref().and_then(|t| t.parse().ok()),
        lifecycle_timestamp,
        container_specs: pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .map(|c| (c.name.clone(), c.image.clone(), c.resources.clone()))
            .collect(),
        container_statuses: statuses.iter().map(|s| seen(s, s.restart_count)).collect(),
        labels,
        name_hash: crate::pod_lookup::fnv1a(&name),
        name,
    }
}

fn time(secs: i64) -> String {
    Timestamp::from_second(1_767_225_600 + secs)
        .unwrap()
        .to_string()
}

/// Optional JSON: `None` leaves the field out.
fn maybe(v: impl Strategy<Value = Value>) -> impl Strategy<Value = Option<Value>> {
    proptest::option::of(v)
}

fn label_map() -> impl Strategy<Value = Value> {
    (
        maybe(prop_oneof![
            Just(json!("demo-7c9d")),
            Just(json!("7c9d")),
            Just(json!(""))
        ]),
        maybe(prop_oneof![Just(json!("abcde")), Just(json!("x1"))]),
        maybe(prop_oneof![
            Just(json!("Normal")),
            Just(json!("PreparingUpdate")),
            Just(json!("Updating")),
            Just(json!("Updated")),
            Just(json!("PreparingDelete")),
            Just(json!("bogus")),
        ]),
        maybe(Just(json!("true"))),
        maybe(Just(json!("7c9d"))),
        proptest::collection::btree_map("[a-z]{1,3}", "[a-z0-9]{0,3}", 0..3),
    )
        .prop_map(|(rev, id, life, specified, hash, extra)| {
            let mut m = serde_json::Map::new();
            for (k, v) in extra {
                m.insert(k, json!(v));
            }
            for (k, v) in [
                (keys::REVISION_LABEL, rev),
                (keys::INSTANCE_ID_LABEL, id),
                (keys::LIFECYCLE_STATE_LABEL, life),
                (keys::SPECIFIED_DELETE_LABEL, specified),
                (keys::POD_TEMPLATE_HASH_LABEL, hash),
            ] {
                if let Some(v) = v {
                    m.insert(k.to_owned(), v);
                }
            }
            Value::Object(m)
        })
}

fn state_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(
            "{\"revision\":\"demo-7c9d\",\"updateTimestamp\":\"2026-01-01T00:00:00Z\"}"
        )),
        Just(json!(
            "{\"revision\":\"demo-1\",\"lastContainerStatuses\":{\"main\":{\"imageID\":\"sha-1\"}}}"
        )),
        Just(json!("{not json")),
        Just(json!("{}")),
    ]
}

fn grace_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(
            "{\"revision\":\"demo-7c9d\",\"containerImages\":{\"main\":\"app:2\"},\"graceSeconds\":30}"
        )),
        Just(json!("oops")),
        Just(json!("{}")),
    ]
}

fn annotation_map() -> impl Strategy<Value = Value> {
    (
        maybe(prop_oneof![
            Just(json!("5")),
            Just(json!("-3")),
            Just(json!("0")),
            Just(json!("+10")),
            Just(json!("008")),
            Just(json!("-08")),
            Just(json!("abc")),
            Just(json!("2147483647")),
            Just(json!("-2147483648")),
            Just(json!("99999999999")),
        ]),
        maybe(prop_oneof![Just(json!(time(5))), Just(json!("not a time"))]),
        maybe(state_json()),
        maybe(state_json()),
        maybe(grace_json()),
        maybe(grace_json()),
        proptest::collection::btree_map("[a-z]{1,3}", "[a-z0-9]{0,3}", 0..3),
    )
        .prop_map(
            |(cost, ts, state, state_legacy, grace, grace_legacy, extra)| {
                let mut m = serde_json::Map::new();
                for (k, v) in extra {
                    m.insert(k, json!(v));
                }
                for (k, v) in [
                    (keys::POD_DELETION_COST_ANNOTATION, cost),
                    (keys::LIFECYCLE_TIMESTAMP_ANNOTATION, ts),
                    (keys::INPLACE_UPDATE_STATE_ANNOTATION, state),
                    (keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY, state_legacy),
                    (keys::INPLACE_UPDATE_GRACE_ANNOTATION, grace),
                    (keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY, grace_legacy),
                ] {
                    if let Some(v) = v {
                        m.insert(k.to_owned(), v);
                    }
                }
                Value::Object(m)
            },
        )
}

fn condition(ty: &'static str) -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just("True"), Just("False"), Just("Unknown")],
        maybe(prop_oneof![
            Just(json!("StartInPlaceUpdate")),
            Just(json!("Stalled"))
        ]),
        maybe(Just(json!("waiting for main"))),
        maybe((0i64..1000).prop_map(|s| json!(time(s)))),
    )
        .prop_map(move |(status, reason, message, transition)| {
            let mut c = json!({"type": ty, "status": status});
            if let Some(r) = reason {
                c["reason"] = r;
            }
            if let Some(m) = message {
                c["message"] = m;
            }
            if let Some(t) = transition {
                c["lastTransitionTime"] = t;
            }
            c
        })
}

fn container_status() -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just("main"), Just("side")],
        prop_oneof![Just("app:1"), Just("docker.io/library/app:2")],
        any::<bool>(),
        0i32..5,
        maybe(any::<bool>().prop_map(|b| json!(b))),
        maybe(Just(json!("containerd://c1"))),
        prop_oneof![
            Just(Value::Null),
            Just(json!({"running": {"startedAt": time(1)}})),
            Just(json!({"waiting": {"reason": "ErrImagePull", "message": "nope"}})),
        ],
        maybe(Just(json!({"requests": {"cpu": "100m"}}))),
    )
        .prop_map(
            |(name, image, ready, restarts, started, id, state, resources)| {
                let mut s = json!({"name": name, "image": image, "imageID": format!("sha-{image}"),
                    "ready": ready, "restartCount": restarts});
                if let Some(v) = started {
                    s["started"] = v;
                }
                if let Some(v) = id {
                    s["containerID"] = v;
                }
                if !state.is_null() {
                    s["state"] = state;
                }
                if let Some(v) = resources {
                    s["resources"] = v;
                }
                s
            },
        )
}

/// A pod as the API server could send it, with some fields left out.
fn api_pod() -> impl Strategy<Value = Value> {
    (
        (
            prop_oneof![Just("demo-a"), Just("demo-b"), Just("other")],
            label_map(),
            annotation_map(),
            maybe(Just(json!(["example.io/hook", "other.io/f"]))),
            maybe(Just(json!(time(100)))),
            maybe((0i64..500).prop_map(|s| json!(time(s)))),
        ),
        (
            maybe(prop_oneof![Just(json!("node-1")), Just(json!(""))]),
            proptest::collection::vec(
                (
                    prop_oneof![Just("main"), Just("side")],
                    maybe(Just(json!("app:2"))),
                ),
                0..3,
            ),
            maybe(prop_oneof![
                Just(json!("Running")),
                Just(json!("Pending")),
                Just(json!("Succeeded")),
                Just(json!("Failed")),
                Just(json!("Unknown")),
                Just(json!("Weird")),
            ]),
            maybe(condition("Ready")),
            maybe(condition("InPlaceUpdateReady")),
            maybe(condition("ContainersReady")),
            proptest::collection::vec(container_status(), 0..3),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (name, labels, annotations, finalizers, deletion, creation),
                (node, containers, phase, ready, in_place, other, statuses, no_status),
            )| {
                let mut metadata = json!({"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                    "resourceVersion": "7", "labels": labels, "annotations": annotations});
                if let Some(f) = finalizers {
                    metadata["finalizers"] = f;
                }
                if let Some(d) = deletion {
                    metadata["deletionTimestamp"] = d;
                }
                if let Some(c) = creation {
                    metadata["creationTimestamp"] = c;
                }
                let containers: Vec<Value> = containers
                    .into_iter()
                    .map(|(n, image)| {
                        let mut c = json!({"name": n, "resources": {"limits": {"memory": "64Mi"}}});
                        if let Some(i) = image {
                            c["image"] = i;
                        }
                        c
                    })
                    .collect();
                let mut spec = json!({"containers": containers});
                if let Some(n) = node {
                    spec["nodeName"] = n;
                }
                let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec});
                if !no_status {
                    let conditions: Vec<Value> =
                        [ready, in_place, other].into_iter().flatten().collect();
                    let mut status = json!({"conditions": conditions, "containerStatuses": statuses});
                    if let Some(p) = phase {
                        status["phase"] = p;
                    }
                    pod["status"] = status;
                }
                pod
            },
        )
}

proptest! {
    #[test]
    fn facts_of_a_cached_pod_equal_the_facts_of_the_full_pod(
        json in api_pod(),
        listed in any::<bool>(),
    ) {
        let full: Pod = serde_json::from_value(json.clone()).unwrap();
        let pods_to_delete: BTreeSet<&str> = if listed {
            ["demo-a"].into()
        } else {
            BTreeSet::new()
        };
        let expected = by_definition(&full, &pods_to_delete);
        let watched: CachedPod = serde_json::from_value(json).unwrap();
        let converted = CachedPod::from_pod(&full).unwrap();
        prop_assert_eq!(&watched, &converted);
        prop_assert_eq!(&of_facts(&PodFacts::from_pod(&watched, &pods_to_delete)), &expected);
        prop_assert_eq!(&of_facts(&PodFacts::from_pod(&converted, &pods_to_delete)), &expected);
    }
}

#[test]
fn representative_pods_read_the_same_from_either_form() {
    // A pod mid in-place update, with a pending grace, hooks and a deletion cost; and a
    // bare pod with no status at all.
    let updating = json!({
        "metadata": {"name": "demo-a", "uid": "u1", "creationTimestamp": time(1),
            "labels": {"controller-revision-hash": "demo-7c9d",
                "apps.kruise.io/cloneset-instance-id": "a",
                "lifecycle.apps.kruise.io/state": "Updating", "zone": "z1"},
            "annotations": {"controller.kubernetes.io/pod-deletion-cost": "-20",
                "apps.kruise.io/inplace-update-state": "{\"revision\":\"demo-7c9d\",\"lastContainerStatuses\":{\"main\":{\"imageID\":\"sha-1\"}}}",
                "lifecycle.apps.kruise.io/timestamp": time(3)},
            "finalizers": ["example.io/hook"]},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "app:2"}],
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": time(2)},
                {"type": "InPlaceUpdateReady", "status": "False", "reason": "StartInPlaceUpdate"}],
            "containerStatuses": [{"name": "main", "image": "app:1", "imageID": "sha-1",
                "ready": true, "restartCount": 2, "state": {"running": {"startedAt": time(1)}}}]},
    });
    let bare = json!({"metadata": {"name": "demo-b"}});
    let none = BTreeSet::new();
    let read = |json: &Value| {
        let full: Pod = serde_json::from_value(json.clone()).unwrap();
        let cached: CachedPod = serde_json::from_value(json.clone()).unwrap();
        let expected = by_definition(&full, &none);
        assert_eq!(of_facts(&PodFacts::from_pod(&cached, &none)), expected);
        expected
    };
    let facts = read(&updating);
    assert_eq!(facts.deletion_cost, -20);
    assert_eq!(facts.restarts, 2);
    assert_eq!(facts.lifecycle, Some(LifecycleState::Updating));
    assert_eq!(facts.in_place_update_ready, Some(false));
    assert!(facts.ready_condition && !facts.ready);
    assert!(facts.in_place_state.is_some() && !facts.in_place_state_unreadable);
    assert_eq!(facts.finalizers, ["example.io/hook"]);
    let facts = read(&bare);
    assert_eq!(facts.phase, PodPhase::Pending);
    assert!(facts.labels.is_empty() && facts.container_statuses.is_empty());
}
