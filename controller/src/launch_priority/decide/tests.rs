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

/// The loop and a kubelet together, for any priorities: a key is released only once every
/// container of a higher priority is Ready, the keys go out highest first, and in the end
/// every container's key is released (nothing waits forever) and the pod is marked
/// completed unless its containers all became Ready first.
mod release_order {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn simulate(priorities: &[i64], ready_order: &[usize]) -> Result<(), TestCaseError> {
        let names: Vec<String> = (0..priorities.len()).map(|i| format!("c{i}")).collect();
        let keys: Vec<String> = priorities.iter().map(|p| format!("p_{p}")).collect();
        let mut ready = vec![false; priorities.len()];
        let mut barrier: Option<BTreeSet<String>> = None;
        let mut completed = false;
        let mut released: Vec<i64> = Vec::new();
        let mut kubelet_turn = 0;
        for _ in 0..100 {
            let containers: Vec<(&str, Option<&str>, bool)> = names
                .iter()
                .zip(&keys)
                .zip(&ready)
                .map(|((n, k), r)| (n.as_str(), Some(k.as_str()), *r))
                .collect();
            let annotations = if completed {
                json!({"apps.kruise.io/container-launch-priority-completed": "true"})
            } else {
                json!({})
            };
            let all_ready = ready.iter().all(|r| *r);
            let conditions = json!([{"type": "ContainersReady", "status": if all_ready { "True" } else { "False" }}]);
            let p = pod(&containers, annotations, conditions);
            let cm_keys: Vec<&str> = barrier.iter().flatten().map(String::as_str).collect();
            let cm = barrier.as_ref().map(|_| cm(&cm_keys, Some("u1")));
            let next = pending(&p).map(|pend| step(&pend, "u1", cm.as_ref()));
            let mut release =
                |key: String, complete: bool, barrier: &mut Option<BTreeSet<String>>| {
                    let priority: i64 = key[2..].parse().unwrap();
                    // every container of a higher priority is Ready
                    for (i, q) in priorities.iter().enumerate() {
                        if *q > priority {
                            assert!(ready[i], "{key} released before c{i} ({q}) is Ready");
                        }
                    }
                    released.push(priority);
                    barrier.get_or_insert_with(BTreeSet::new).insert(key);
                    completed |= complete;
                };
            match next {
                Some(Step::Create { key, complete }) => {
                    prop_assert!(barrier.is_none());
                    release(key, complete, &mut barrier);
                }
                Some(Step::Release { key, complete }) => release(key, complete, &mut barrier),
                Some(Step::Complete) => completed = true,
                Some(Step::ReplaceStale) => prop_assert!(false, "no stale ConfigMap here"),
                Some(Step::Nothing) | None => {
                    // the kubelet: one released container becomes Ready, in the given order
                    let startable: Vec<usize> = (0..priorities.len())
                        .filter(|i| !ready[*i] && barrier.iter().flatten().any(|k| *k == keys[*i]))
                        .collect();
                    if startable.is_empty() {
                        break;
                    }
                    let pick = startable
                        [ready_order.get(kubelet_turn).copied().unwrap_or(0) % startable.len()];
                    kubelet_turn += 1;
                    ready[pick] = true;
                }
            }
        }
        prop_assert!(
            released.windows(2).all(|w| w[0] > w[1]),
            "released highest first, once each: {released:?}"
        );
        for key in &keys {
            prop_assert!(
                barrier.iter().flatten().any(|k| k == key),
                "{key} never released"
            );
        }
        prop_assert!(ready.iter().all(|r| *r), "every container started");
        Ok(())
    }

    proptest! {
        #[test]
        fn containers_are_released_by_priority(
            priorities in prop::collection::vec(-3i64..=3, 2..6),
            ready_order in prop::collection::vec(0usize..6, 0..12),
        ) {
            simulate(&priorities, &ready_order)?;
        }
    }
}
