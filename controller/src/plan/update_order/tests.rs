#![allow(clippy::unwrap_used, clippy::expect_used)]

use inplace_proto::{UpdatePriorityOrderTerm, UpdatePriorityWeightTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::*;
use crate::plan::fixtures::{PodBuilder, pod, t};

fn facts(pods: Vec<PodBuilder>) -> Vec<PodFacts<'static>> {
    pods.into_iter().map(PodBuilder::facts).collect()
}

fn names(pods: &[PodFacts], order: &[usize]) -> Vec<String> {
    order.iter().map(|&i| pods[i].name.to_owned()).collect()
}

fn all(n: usize) -> Vec<usize> {
    (0..n).collect()
}

#[test]
fn default_order_is_unscheduled_pending_unknown_not_ready_then_ready_time_restarts_creation() {
    let pods = facts(vec![
        pod("old-ready", "r").ready_since(t(10)).created(t(0)),
        pod("new-ready", "r").ready_since(t(20)).created(t(0)),
        pod("ready-no-time", "r").raw(|v| {
            v["status"]["conditions"][0]
                .as_object_mut()
                .unwrap()
                .remove("lastTransitionTime");
        }),
        pod("crashing", "r")
            .ready_since(t(10))
            .restarts(5)
            .created(t(0)),
        pod("newer", "r").ready_since(t(10)).created(t(5)),
        pod("not-ready", "r").not_ready(),
        pod("unknown", "r").phase("Unknown").not_ready(),
        pod("pending", "r").phase("Pending").not_ready(),
        pod("unscheduled", "r")
            .unscheduled()
            .phase("Pending")
            .not_ready(),
    ]);
    let mut order = all(pods.len());
    sort_default(&pods, &mut order);
    assert_eq!(
        names(&pods, &order),
        [
            "unscheduled",
            "pending",
            "unknown",
            "not-ready",
            "ready-no-time",
            "new-ready",
            "crashing",
            "newer",
            "old-ready",
        ]
    );
}

#[test]
fn default_order_keeps_equal_pods_in_snapshot_order() {
    let pods = facts((0..5).map(|i| pod(&format!("p{i}"), "r")).collect());
    let mut order = all(5);
    sort_default(&pods, &mut order);
    assert_eq!(order, all(5));
}

fn weight_term(weight: i32, key: &str, value: &str) -> UpdatePriorityWeightTerm {
    UpdatePriorityWeightTerm {
        weight,
        match_selector: LabelSelector {
            match_labels: Some([(key.to_owned(), value.to_owned())].into()),
            match_expressions: None,
        },
    }
}

#[test]
fn weight_priority_sums_matching_weights_higher_first_ties_keep_order() {
    // Docs example: weight 50 for test-key=foo, 30 for test-key=bar.
    let strategy = UpdatePriorityStrategy {
        weight_priority: vec![
            weight_term(50, "test-key", "foo"),
            weight_term(30, "test-key", "bar"),
            weight_term(40, "zone", "a"),
        ],
        order_priority: vec![],
    };
    let pods = facts(vec![
        pod("none-1", "r"),
        pod("bar", "r").label("test-key", "bar"),
        pod("foo", "r").label("test-key", "foo"),
        pod("none-2", "r"),
        pod("bar-zone-a", "r")
            .label("test-key", "bar")
            .label("zone", "a"),
    ]);
    let mut order = all(pods.len());
    sort_by_priority(&strategy, &pods, &mut order);
    assert_eq!(
        names(&pods, &order),
        ["bar-zone-a", "foo", "bar", "none-1", "none-2"]
    );
}

#[test]
fn order_priority_uses_the_first_key_present_and_the_trailing_integer_larger_first() {
    let strategy = UpdatePriorityStrategy {
        weight_priority: vec![],
        order_priority: vec![
            UpdatePriorityOrderTerm {
                ordered_key: "first".into(),
            },
            UpdatePriorityOrderTerm {
                ordered_key: "second".into(),
            },
        ],
    };
    let pods = facts(vec![
        pod("second-9", "r").label("second", "9"),
        pod("first-sts-2", "r").label("first", "sts-2"),
        pod("first-sts-10", "r").label("first", "sts-10"),
        pod("no-key", "r"),
        pod("both", "r").label("first", "1").label("second", "100"),
        pod("first-no-int", "r").label("first", "abc"),
    ]);
    let mut order = all(pods.len());
    sort_by_priority(&strategy, &pods, &mut order);
    // Pods with none of the keys go first, like the reference.
    assert_eq!(
        names(&pods, &order),
        [
            "no-key",
            "first-sts-10",
            "first-sts-2",
            "both",
            "first-no-int",
            "second-9"
        ]
    );
}

#[test]
fn trailing_int_reads_the_integer_suffix() {
    for (value, want) in [
        ("5", 5),
        ("sts-10", 10),
        ("abc", 0),
        ("", 0),
        ("a1b2", 2),
        ("99999999999999999999", 0),
    ] {
        assert_eq!(trailing_int(value), want, "{value}");
    }
}

fn term(key: &str, value: &str) -> UpdateScatterTerm {
    UpdateScatterTerm {
        key: key.into(),
        value: value.into(),
    }
}

#[test]
fn scatter_puts_three_of_ten_matching_pods_at_the_1st_6th_and_10th_place() {
    // Docs "scatter": replicas 10, 3 pods labelled foo=bar → the 1st, 6th and 10th updated.
    let pods = facts(
        (0..10)
            .map(|i| {
                let p = pod(&format!("p{i}"), "r");
                if i < 3 { p.label("foo", "bar") } else { p }
            })
            .collect(),
    );
    let mut order = all(10);
    scatter(&[term("foo", "bar")], &pods, &mut order);
    let places: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|(_, i)| pods[**i].labels.contains_key("foo"))
        .map(|(place, _)| place + 1)
        .collect();
    assert_eq!(places, [1, 6, 10]);
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, all(10), "a permutation");
}

#[test]
fn scatter_uses_the_density_among_all_pods_when_waiting_pods_are_less_dense() {
    // 20 active pods, every other one matches. 11 wait: 3 matched, 8 unmatched. After the
    // last matched pod is set aside, all pods hold 9 matched : 10 unmatched, denser in
    // matched pods than the waiting 2 : 8, so the groups follow all pods (1 : 1) and the
    // unmatched pods that do not fit in groups go first.
    let all_pods = facts(
        (0..20)
            .map(|i| {
                let p = pod(&format!("p{i}"), "r");
                if i % 2 == 0 { p.label("foo", "bar") } else { p }
            })
            .collect(),
    );
    let mut order = vec![0, 2, 4, 1, 3, 5, 7, 9, 11, 13, 15];
    scatter(&[term("foo", "bar")], &all_pods, &mut order);
    assert_eq!(
        names(&all_pods, &order),
        [
            "p1", "p3", "p5", "p7", "p9", "p11", "p0", "p13", "p2", "p15", "p4"
        ]
    );
}

#[test]
fn scatter_leaves_the_order_alone_with_one_matched_or_one_unmatched_pod() {
    let pods = facts(vec![
        pod("a", "r").label("foo", "bar"),
        pod("b", "r"),
        pod("c", "r"),
    ]);
    let mut order = all(3);
    scatter(&[term("foo", "bar")], &pods, &mut order);
    assert_eq!(order, all(3));
}

#[test]
fn scatter_with_several_terms_applies_the_one_matching_more_pods_first() {
    let pods = facts(
        (0..8)
            .map(|i| {
                let mut p = pod(&format!("p{i}"), "r");
                if i < 2 {
                    p = p.label("x", "1");
                }
                if i >= 5 {
                    p = p.label("y", "1");
                }
                p
            })
            .collect(),
    );
    let mut order = all(8);
    scatter(&[term("x", "1"), term("y", "1")], &pods, &mut order);
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, all(8), "a permutation");
    // The x term is applied last, so its two pods end up first and last.
    assert_eq!(
        pods[order[0]].labels.get("x").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        pods[order[7]].labels.get("x").map(String::as_str),
        Some("1")
    );
}

#[test]
fn preparing_update_pods_go_first_and_the_rest_keep_their_order() {
    let pods = facts(vec![
        pod("a", "r"),
        pod("b", "r").lifecycle("PreparingUpdate"),
        pod("c", "r"),
        pod("d", "r").lifecycle("PreparingUpdate"),
    ]);
    let mut order = all(4);
    preparing_update_first(&pods, &mut order);
    assert_eq!(names(&pods, &order), ["b", "d", "a", "c"]);
}
