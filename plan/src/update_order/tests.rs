#![allow(clippy::unwrap_used, clippy::expect_used)]

use inplace_proto::{UpdatePriorityOrderTerm, UpdatePriorityWeightTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::*;
use crate::fixtures::PlanForms;
use crate::fixtures::{PodBuilder, pod, t};

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

/// The reference reads readiness as `IsPodReady` (the Ready condition alone): a Pending
/// pod whose Ready condition is True sorts after a Pending pod that is not ready, and two
/// such pods compare by their ready times like any ready pods.
#[test]
fn default_order_reads_readiness_from_the_ready_condition_alone() {
    let pods = facts(vec![
        pod("pending-ready-old", "r")
            .phase("Pending")
            .ready_since(t(10)),
        pod("pending-not-ready", "r").phase("Pending").not_ready(),
        pod("pending-ready-new", "r")
            .phase("Pending")
            .ready_since(t(20)),
    ]);
    assert!(
        pods.iter().all(|p| !p.ready),
        "none counts as ready for status"
    );
    let mut order = all(pods.len());
    sort_default(&pods, &mut order);
    assert_eq!(
        names(&pods, &order),
        [
            "pending-not-ready",
            "pending-ready-new",
            "pending-ready-old"
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
    assert_eq!(pods[order[0]].labels.get("x"), Some("1"));
    assert_eq!(pods[order[7]].labels.get("x"), Some("1"));
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

/// The update order as it was written before the keys were precomputed: the default
/// comparator, then a stable sort by a priority key read from each pod's labels, then
/// scatter with matches read from the labels, then PreparingUpdate first. The production
/// order must equal it whether or not the facts carry precomputed order labels.
mod reference {
    use std::cmp::Reverse;
    use std::collections::BTreeMap;

    use inplace_proto::{
        CloneSetUpdateStrategy, LifecycleState, UpdatePriorityStrategy, UpdateScatterTerm,
    };
    use k8s_openapi::jiff::Timestamp;

    use super::super::{scatter_term, trailing_int};
    use crate::model::PodFacts;
    use crate::selector::Selector;

    fn empty_or_later_first(t: Option<Timestamp>) -> (u8, Reverse<i128>) {
        match t {
            None => (0, Reverse(0)),
            Some(t) => (1, Reverse(t.as_nanosecond())),
        }
    }

    fn default_order(pods: &[PodFacts], candidates: &mut [usize]) {
        candidates.sort_by(|&a, &b| {
            let key = |p: &PodFacts| {
                let ready_time = if p.ready_condition {
                    empty_or_later_first(p.ready_since)
                } else {
                    (0, Reverse(0))
                };
                (
                    p.node_name.is_some_and(|n| !n.is_empty()),
                    p.phase,
                    p.ready_condition,
                    ready_time,
                    Reverse(p.restarts),
                    empty_or_later_first(p.creation),
                )
            };
            key(&pods[a]).cmp(&key(&pods[b]))
        });
    }

    fn priority_key(
        strategy: &UpdatePriorityStrategy,
        labels: &BTreeMap<String, String>,
    ) -> (i64, i64) {
        if !strategy.weight_priority.is_empty() {
            let weight: i64 = strategy
                .weight_priority
                .iter()
                .filter(|t| Selector::parse(&t.match_selector).is_ok_and(|s| s.matches(labels)))
                .map(|t| i64::from(t.weight))
                .sum();
            return (-weight, 0);
        }
        if strategy.order_priority.is_empty() {
            return (0, 0);
        }
        for (level, term) in strategy.order_priority.iter().enumerate() {
            if let Some(v) = labels.get(&term.ordered_key) {
                return (i64::try_from(level).unwrap(), -trailing_int(v));
            }
        }
        (-1, 0)
    }

    fn scatter(terms: &[UpdateScatterTerm], pods: &[PodFacts], candidates: &mut Vec<usize>) {
        if candidates.len() <= 1 {
            return;
        }
        let hit = |t: &UpdateScatterTerm, p: &PodFacts| p.labels.get(&t.key) == Some(&t.value);
        // Terms matching more candidates first; equal (key, value) pairs count once.
        let mut list: Vec<(usize, usize)> = Vec::new();
        let mut seen: Vec<(&str, &str)> = Vec::new();
        for (t, term) in terms.iter().enumerate() {
            let count = candidates.iter().filter(|&&i| hit(term, &pods[i])).count();
            let id = (term.key.as_str(), term.value.as_str());
            if count > 0 && !seen.contains(&id) {
                seen.push(id);
                list.push((count, t));
            }
        }
        list.sort_by_key(|&(count, t)| (Reverse(count), t));
        let active = pods.iter().filter(|p| p.is_active()).count();
        for (_, t) in list {
            let term = &terms[t];
            let is_match: Vec<bool> = pods.iter().map(|p| hit(term, p)).collect();
            let matched = pods
                .iter()
                .filter(|p| p.is_active() && hit(term, p))
                .count();
            *candidates = scatter_term(&is_match, matched, active - matched, candidates);
        }
    }

    pub fn order(
        strategy: Option<&CloneSetUpdateStrategy>,
        pods: &[PodFacts],
        candidates: &mut Vec<usize>,
    ) {
        default_order(pods, candidates);
        if let Some(priority) = strategy.and_then(|s| s.priority_strategy.as_ref()) {
            candidates.sort_by_key(|&i| {
                priority_key(priority, &pods[i].labels.to_map().unwrap_or_default())
            });
        }
        let terms = strategy.map_or(&[][..], |s| s.scatter_strategy.as_slice());
        if !terms.is_empty() {
            scatter(terms, pods, candidates);
        }
        candidates.sort_by_key(|&i| pods[i].lifecycle != Some(LifecycleState::PreparingUpdate));
    }
}

mod equals_reference {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use inplace_proto::CloneSet;
    use k8s_openapi::api::core::v1::Pod;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::reference;
    use crate::cached::CachedPod;
    use crate::fixtures::{cached, cloneset, pod, t};
    use crate::model::{PlanOptions, PodFacts, Snapshot};
    use crate::update_order::sort_candidates;

    #[derive(Clone, Debug)]
    struct PodSpec {
        zone: Option<u8>,
        rack: Option<u8>,
        ready: bool,
        ready_at: i64,
        restarts: i32,
        created_at: i64,
        phase: u8,
        unscheduled: bool,
        preparing_update: bool,
        terminating: bool,
    }

    fn pod_spec() -> impl Strategy<Value = PodSpec> {
        (
            (proptest::option::of(0u8..3), proptest::option::of(0u8..4)),
            (any::<bool>(), 0i64..3, 0i32..3, 0i64..3),
            (0u8..6, 0u8..8, 0u8..6, 0u8..10),
        )
            .prop_map(
                |((zone, rack), (ready, ready_at, restarts, created_at), (phase, u, p, term))| {
                    PodSpec {
                        zone,
                        rack,
                        ready,
                        ready_at,
                        restarts,
                        created_at,
                        phase,
                        unscheduled: u == 0,
                        preparing_update: p == 0,
                        terminating: term == 0,
                    }
                },
            )
    }

    fn build(i: usize, s: &PodSpec) -> Pod {
        let mut b = pod(&format!("p-{i}"), "r")
            .restarts(s.restarts)
            .created(t(s.created_at));
        b = if s.ready {
            b.ready_since(t(s.ready_at))
        } else {
            b.not_ready()
        };
        if let Some(zone) = s.zone {
            b = b.label("zone", ["a", "b", "c"][usize::from(zone)]);
        }
        if let Some(rack) = s.rack {
            b = b.label("rack", &format!("r{rack}"));
        }
        match s.phase {
            0 => b = b.phase("Pending"),
            1 => b = b.phase("Unknown"),
            _ => {}
        }
        if s.unscheduled {
            b = b.unscheduled();
        }
        if s.preparing_update {
            b = b.lifecycle("PreparingUpdate");
        }
        if s.terminating {
            b = b.terminating();
        }
        b.build()
    }

    /// A strategy with no, weight or order priority and zero to three scatter terms.
    fn update_strategy() -> impl Strategy<Value = Value> {
        (0u8..3, proptest::collection::vec(0u8..4, 0..4)).prop_map(|(priority, terms)| {
            let mut s = json!({"type": "InPlaceIfPossible"});
            match priority {
                1 => {
                    s["priorityStrategy"] = json!({"weightPriority": [
                        {"weight": 50, "matchSelector": {"matchLabels": {"zone": "a"}}},
                        {"weight": 20, "matchSelector": {"matchExpressions": [
                            {"key": "rack", "operator": "In", "values": ["r1", "r2"]}]}},
                        {"weight": 30, "matchSelector": {"matchExpressions": [
                            {"key": "zone", "operator": "NotIn", "values": ["b"]}]}},
                    ]});
                }
                2 => {
                    s["priorityStrategy"] =
                        json!({"orderPriority": [{"orderedKey": "rack"}, {"orderedKey": "zone"}]});
                }
                _ => {}
            }
            let terms: Vec<Value> = terms
                .into_iter()
                .map(|t| match t {
                    0 => json!({"key": "zone", "value": "a"}),
                    1 => json!({"key": "zone", "value": "c"}),
                    2 => json!({"key": "rack", "value": "r1"}),
                    _ => json!({"key": "rack", "value": "r3"}),
                })
                .collect();
            if !terms.is_empty() {
                s["scatterStrategy"] = Value::Array(terms);
            }
            s
        })
    }

    proptest! {
        #[test]
        fn sort_candidates_equals_the_reference_order(
            specs in proptest::collection::vec(pod_spec(), 0..40),
            strategy in update_strategy(),
            skip in proptest::collection::vec(any::<bool>(), 40),
        ) {
            let cs: CloneSet = cloneset(json!({"updateStrategy": strategy}));
            let pods: Vec<Arc<CachedPod>> =
                specs.iter().enumerate().map(|(i, s)| cached(&build(i, s))).collect();
            let options = PlanOptions::default();
            let snapshot = Snapshot {
                cloneset: &cs,
                pods: &pods,
                pvcs: &[],
                revisions: &[],
                nodes: &[],
                now: t(1000),
                options: &options,
                pods_to_delete_seen: &crate::pods_to_delete::NO_NAMES,
                pre_download: None,
            };
            let strategy = cs.spec.update_strategy.as_ref();
            let precomputed = PodFacts::extract_all(&snapshot);
            let plain: Vec<PodFacts> =
                pods.iter().map(|p| PodFacts::from_pod(p, &BTreeSet::new())).collect();
            // Candidates are active pods, some of them left out.
            let candidates: Vec<usize> = (0..pods.len())
                .filter(|&i| plain[i].is_active() && !skip[i])
                .collect();

            let mut expected = candidates.clone();
            reference::order(strategy, &plain, &mut expected);
            for facts in [&precomputed, &plain] {
                let mut got = candidates.clone();
                sort_candidates(strategy, facts, &mut got);
                prop_assert_eq!(&got, &expected);
            }
        }
    }
}

#[test]
fn encoded_times_reverse_the_order_over_the_whole_timestamp_range() {
    let times = [
        Timestamp::MIN,
        Timestamp::from_second(-1).unwrap(),
        Timestamp::new(-1, 999_999_999).unwrap(),
        Timestamp::UNIX_EPOCH,
        Timestamp::new(0, 1).unwrap(),
        t(0),
        Timestamp::MAX,
    ];
    for pair in times.windows(2) {
        assert!(pair[0] < pair[1]);
        assert!(later_first(pair[0]) > later_first(pair[1]), "{pair:?}");
        assert!(later_first(pair[0]) < 1 << TIME_BITS);
    }
    assert!(empty_or_later_first(None) < empty_or_later_first(Some(Timestamp::MAX)));
    assert!(ordered_u64(i64::MIN) < ordered_u64(-1));
    assert!(ordered_u64(-1) < ordered_u64(0));
    assert!(ordered_u64(0) < ordered_u64(i64::MAX));
}

mod ranked_priorities {
    use proptest::prelude::*;

    use super::super::{MAX_RANKED_PRIORITIES, sort_keyed, sort_wide};
    use crate::fixtures::{PlanForms, PodBuilder, pod, t};
    use crate::model::PodFacts;

    /// Pods with few distinct default keys (many ties broken by position).
    fn pods(n: usize) -> Vec<PodFacts<'static>> {
        (0..n)
            .map(|i| {
                let b = pod(&format!("p-{i}"), "r")
                    .restarts(i32::try_from(i % 2).unwrap())
                    .created(t(i64::try_from(i % 3).unwrap()));
                if i % 5 == 0 {
                    b.not_ready()
                } else {
                    b.ready_since(t(i64::try_from(i % 4).unwrap()))
                }
            })
            .map(PodBuilder::facts)
            .collect()
    }

    proptest! {
        /// Ranking the priority keys into the default key (few distinct keys) sorts like
        /// comparing them as a number of their own, and so does the fallback (many keys).
        #[test]
        fn ranked_sort_equals_the_wide_sort(
            n in 0usize..150,
            distinct in prop_oneof![1i64..4, 60i64..70, 100i64..200],
            signed in any::<bool>(),
            skip in 0usize..3,
        ) {
            let pods = pods(n);
            let keys: Vec<(i64, i64)> = (0..n)
                .map(|i| {
                    let v = i64::try_from(i * 7919).unwrap() % distinct;
                    if signed { (-v, v - 3) } else { (v / 2, -(v % 2)) }
                })
                .collect();
            let candidates: Vec<usize> = (0..n).filter(|i| i % 3 != skip).rev().collect();
            let mut wide = candidates.clone();
            sort_wide(&pods, Some(&keys), &mut wide);
            let mut ranked = candidates.clone();
            sort_keyed(&pods, Some(&keys), &mut ranked);
            prop_assert_eq!(&ranked, &wide);
            let mut wide = candidates.clone();
            sort_wide(&pods, None, &mut wide);
            let mut ranked = candidates;
            sort_keyed(&pods, None, &mut ranked);
            prop_assert_eq!(ranked, wide);
        }
    }

    #[test]
    fn more_priority_levels_than_ranked_take_the_wide_sort() {
        let n = MAX_RANKED_PRIORITIES * 3;
        let pods = pods(n);
        let keys: Vec<(i64, i64)> = (0..n)
            .map(|i| (-i64::try_from(i % (MAX_RANKED_PRIORITIES + 1)).unwrap(), 0))
            .collect();
        let candidates: Vec<usize> = (0..n).collect();
        let mut wide = candidates.clone();
        sort_wide(&pods, Some(&keys), &mut wide);
        let mut sorted = candidates;
        sort_keyed(&pods, Some(&keys), &mut sorted);
        assert_eq!(sorted, wide);
        // Highest weight (most negative key) first.
        assert_eq!(
            keys[sorted[0]].0,
            -i64::try_from(MAX_RANKED_PRIORITIES).unwrap()
        );
    }
}
