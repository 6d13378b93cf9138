#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::*;

fn template(annotations: Value, containers: Value) -> Map<String, Value> {
    json!({"metadata": {"annotations": annotations}, "spec": {"containers": containers}})
        .as_object()
        .unwrap()
        .clone()
}

fn prio(value: &str) -> Value {
    json!([{"name": "KRUISE_CONTAINER_PRIORITY", "value": value}])
}

fn barrier(pod: &str, key: &str) -> Value {
    json!({"name": "KRUISE_CONTAINER_BARRIER",
        "valueFrom": {"configMapKeyRef": {"name": format!("{pod}-barrier"), "key": key}}})
}

/// The webhook's cases (`container_launch_priority_initialization.go`): which pods get a
/// barrier, and each container's priority.
#[test]
fn which_pods_get_a_barrier_and_at_which_priorities() {
    let ordered = json!({"apps.kruise.io/container-launch-priority": "Ordered"});
    let cases: Vec<(&str, Value, Value, Option<Vec<i64>>)> = vec![
        (
            "no priority at all",
            json!({}),
            json!([{"name": "a"}, {"name": "b"}]),
            None,
        ),
        (
            "one container, even Ordered",
            ordered.clone(),
            json!([{"name": "a"}]),
            None,
        ),
        (
            "one container with a priority",
            json!({}),
            json!([{"name": "a", "env": prio("5")}]),
            None,
        ),
        (
            "Ordered: the first highest",
            ordered.clone(),
            json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]),
            Some(vec![0, -1, -2]),
        ),
        (
            "Ordered wins over the env",
            ordered,
            json!([{"name": "a", "env": prio("-9")}, {"name": "b", "env": prio("9")}]),
            Some(vec![0, -1]),
        ),
        (
            "env on one container, the other 0",
            json!({}),
            json!([{"name": "a", "env": prio("10")}, {"name": "b"}]),
            Some(vec![10, 0]),
        ),
        (
            "negative env",
            json!({}),
            json!([{"name": "a"}, {"name": "b", "env": prio("-1")}]),
            Some(vec![0, -1]),
        ),
        (
            "all equal: no barrier",
            json!({}),
            json!([{"name": "a", "env": prio("3")}, {"name": "b", "env": prio("3")}]),
            None,
        ),
        (
            "all zero: no barrier",
            json!({}),
            json!([{"name": "a", "env": prio("0")}, {"name": "b"}]),
            None,
        ),
        (
            "no integer counts as 0",
            json!({}),
            json!([{"name": "a", "env": prio("x")}, {"name": "b", "env": prio("1")}]),
            Some(vec![0, 1]),
        ),
    ];
    for (case, annotations, containers, want) in cases {
        assert_eq!(
            startup_priorities(&template(annotations, containers)),
            want,
            "{case}"
        );
    }
}

#[test]
fn names_and_keys_are_the_references() {
    assert_eq!(barrier_name("web-abcde"), "web-abcde-barrier");
    assert_eq!(barrier_key(10), "p_10");
    assert_eq!(barrier_key(-2), "p_-2");
    assert_eq!(barrier_env("web-abcde", -2), barrier("web-abcde", "p_-2"));
}

fn rendered(t: &Map<String, Value>, pod: &str) -> Value {
    let mut spec = t["spec"].as_object().unwrap().clone();
    render(t, &mut spec, pod);
    Value::Object(spec)
}

/// Every container gets the env after its own (a container without env gets one).
#[test]
fn every_container_gets_the_barrier_after_its_env() {
    let port = json!({"name": "PORT", "value": "8080"});
    let t = template(
        json!({}),
        json!([
            {"name": "a", "env": [port.clone(), prio("10")[0].clone()]},
            {"name": "b"},
        ]),
    );
    let spec = rendered(&t, "cs-x");
    assert_eq!(
        spec["containers"][0]["env"],
        json!([port, prio("10")[0].clone(), barrier("cs-x", "p_10")])
    );
    assert_eq!(
        spec["containers"][1]["env"],
        json!([barrier("cs-x", "p_0")])
    );
}

/// No priorities: the spec is left as it is.
#[test]
fn no_priorities_leave_the_spec_alone() {
    let t = template(json!({}), json!([{"name": "a"}, {"name": "b", "env": []}]));
    assert_eq!(rendered(&t, "cs-x"), t["spec"]);
}

/// A template copied from a pod names that pod's ConfigMap: the env is replaced, once,
/// by this pod's, keeping its key; with priorities the others get theirs too.
#[test]
fn a_copied_barrier_is_re_pointed_to_this_pod() {
    let t = template(
        json!({}),
        json!([{"name": "a", "env": [barrier("old-pod", "p_7")]}, {"name": "b"}]),
    );
    let spec = rendered(&t, "cs-x");
    assert_eq!(
        spec["containers"][0]["env"],
        json!([barrier("cs-x", "p_7")])
    );
    assert_eq!(
        spec["containers"][1]["env"],
        json!([barrier("cs-x", "p_0")])
    );

    let single = template(
        json!({}),
        json!([{"name": "a", "env": [barrier("old", "p_3")]}]),
    );
    let spec = rendered(&single, "cs-y");
    assert_eq!(
        spec["containers"][0]["env"],
        json!([barrier("cs-y", "p_3")])
    );
}

/// A created pod carries the barrier named after it (`build::pod_json`).
#[test]
fn the_created_pod_carries_the_barrier_named_after_it() {
    use crate::build::pod_json;
    use crate::fixtures::{cloneset, t};
    let cs = cloneset(json!({
        "template": {
            "metadata": {"labels": {"app": "demo"}},
            "spec": {"containers": [
                {"name": "sidecar", "image": "s:1", "env": prio("10")},
                {"name": "main", "image": "m:1"},
            ]}
        }
    }));
    let p = pod_json(&cs, &cs.spec.template, "demo-abc123", "xk2bq", false, t(0));
    assert_eq!(p["metadata"]["name"], "demo-xk2bq");
    assert_eq!(
        p["spec"]["containers"][0]["env"][1],
        barrier("demo-xk2bq", "p_10")
    );
    assert_eq!(
        p["spec"]["containers"][1]["env"],
        json!([barrier("demo-xk2bq", "p_0")])
    );
}
