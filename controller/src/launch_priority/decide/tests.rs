#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use super::*;

fn barrier_env(key: &str) -> Value {
    json!({"name": "KRUISE_CONTAINER_BARRIER",
        "valueFrom": {"configMapKeyRef": {"name": "p-barrier", "key": key}}})
}

/// A pod with containers (name, barrier key or none, Ready), annotations and conditions.
fn pod(containers: &[(&str, Option<&str>, bool)], annotations: Value, conditions: Value) -> Pod {
    let spec: Vec<Value> = containers
        .iter()
        .map(|(n, key, _)| match key {
            Some(k) => json!({"name": n, "env": [{"name": "PORT", "value": "1"}, barrier_env(k)]}),
            None => json!({"name": n}),
        })
        .collect();
    let statuses: Vec<Value> = containers
        .iter()
        .map(|(n, _, ready)| json!({"name": n, "ready": ready, "restartCount": 0, "image": "i", "imageID": ""}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": annotations},
        "spec": {"containers": spec},
        "status": {"containerStatuses": statuses, "conditions": conditions},
    }))
    .unwrap()
}

fn cm(keys: &[&str], owner_uid: Option<&str>) -> ConfigMap {
    let data: serde_json::Map<String, Value> = keys
        .iter()
        .map(|k| ((*k).to_owned(), json!("true")))
        .collect();
    let owners: Vec<Value> = owner_uid
        .into_iter()
        .map(|u| json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": u}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "p-barrier", "namespace": "ns", "ownerReferences": owners},
        "data": data,
    }))
    .unwrap()
}

fn pend(highest: i64, lowest: i64) -> Option<Pending> {
    Some(Pending { highest, lowest })
}

/// `findNextPriorities` and the `shouldEnqueue` filter of the reference.
#[test]
fn pending_priorities_of_a_pod() {
    let none = json!({});
    let cases: Vec<(&str, Pod, Option<Pending>)> = vec![
        (
            "nothing Ready: highest and lowest",
            pod(
                &[
                    ("a", Some("p_10"), false),
                    ("b", Some("p_0"), false),
                    ("c", Some("p_-3"), false),
                ],
                none.clone(),
                json!([]),
            ),
            pend(10, -3),
        ),
        (
            "the Ready ones no longer count",
            pod(
                &[
                    ("a", Some("p_10"), true),
                    ("b", Some("p_0"), false),
                    ("c", Some("p_-3"), false),
                ],
                none.clone(),
                json!([]),
            ),
            pend(0, -3),
        ),
        (
            "one left",
            pod(
                &[("a", Some("p_10"), true), ("b", Some("p_0"), false)],
                none.clone(),
                json!([]),
            ),
            pend(0, 0),
        ),
        (
            "containers without a barrier do not count",
            pod(
                &[("a", None, false), ("b", Some("p_2"), false)],
                none.clone(),
                json!([]),
            ),
            pend(2, 2),
        ),
        (
            "no barrier at all",
            pod(
                &[("a", None, false), ("b", None, false)],
                none.clone(),
                json!([]),
            ),
            None,
        ),
        (
            "all Ready",
            pod(
                &[("a", Some("p_1"), true), ("b", Some("p_0"), true)],
                none.clone(),
                json!([]),
            ),
            None,
        ),
        (
            "marked completed",
            pod(
                &[("a", Some("p_1"), false), ("b", Some("p_0"), false)],
                json!({"apps.kruise.io/container-launch-priority-completed": "true"}),
                json!([]),
            ),
            None,
        ),
        (
            "ContainersReady True",
            pod(
                &[("a", Some("p_1"), false), ("b", Some("p_0"), false)],
                none.clone(),
                json!([{"type": "ContainersReady", "status": "True"}]),
            ),
            None,
        ),
        (
            "ContainersReady False",
            pod(
                &[("a", Some("p_1"), false), ("b", Some("p_0"), false)],
                none.clone(),
                json!([{"type": "ContainersReady", "status": "False"}]),
            ),
            pend(1, 0),
        ),
        (
            "a key that is no number counts as 0",
            pod(
                &[("a", Some("p_x"), false), ("b", Some("p_-1"), false)],
                none,
                json!([]),
            ),
            pend(0, -1),
        ),
    ];
    for (case, pod, want) in cases {
        assert_eq!(pending(&pod), want, "{case}");
    }
}

/// `Reconcile` and `handle` of the reference: the barrier created, the highest pending
/// priority released, completion once the lowest is.
#[test]
fn the_next_write() {
    let key = |k: &str| k.to_owned();
    let p = |h, l| Pending {
        highest: h,
        lowest: l,
    };
    let cases: Vec<(&str, Pending, Option<ConfigMap>, Step)> = vec![
        (
            "no ConfigMap: created with the highest",
            p(10, 0),
            None,
            Step::Create {
                key: key("p_10"),
                complete: false,
            },
        ),
        (
            "no ConfigMap, one priority left: created and completed",
            p(3, 3),
            None,
            Step::Create {
                key: key("p_3"),
                complete: true,
            },
        ),
        (
            "empty ConfigMap: the highest released",
            p(10, 0),
            Some(cm(&[], Some("u1"))),
            Step::Release {
                key: key("p_10"),
                complete: false,
            },
        ),
        (
            "the highest already released: wait for Ready",
            p(10, 0),
            Some(cm(&["p_10"], Some("u1"))),
            Step::Nothing,
        ),
        (
            "the next one released, the last: completed",
            p(0, 0),
            Some(cm(&["p_10"], Some("u1"))),
            Step::Release {
                key: key("p_0"),
                complete: true,
            },
        ),
        (
            "the lowest already released: completed only",
            p(10, 0),
            Some(cm(&["p_10", "p_0"], Some("u1"))),
            Step::Complete,
        ),
        (
            "a ConfigMap without owner is used as it is",
            p(5, -5),
            Some(cm(&[], None)),
            Step::Release {
                key: key("p_5"),
                complete: false,
            },
        ),
        (
            "a ConfigMap of an earlier pod of the same name is replaced",
            p(10, 0),
            Some(cm(&["p_10", "p_0"], Some("old-uid"))),
            Step::ReplaceStale,
        ),
    ];
    for (case, pending, barrier, want) in cases {
        assert_eq!(step(&pending, "u1", barrier.as_ref()), want, "{case}");
    }
}
