//! The whole planner with `podsToDelete` names that match no pod: what is deleted, what is
//! pruned, what is reported.

use std::collections::BTreeSet;

use serde_json::json;

use super::*;
use crate::cached::CachedPod;
use crate::fixtures::{PlanForms, PodBuilder, cloneset, pod};
use crate::model::{Action, DeleteReason, PlanOptions, Snapshot};
use crate::{Plan, plan, revision};
use inplace_proto::CloneSet;
use inplace_proto::keys::CONDITION_FAILED_SCALE;
use std::sync::Arc;

struct World {
    cs: CloneSet,
    pods: Vec<Arc<CachedPod>>,
    seen: BTreeSet<String>,
    options: PlanOptions,
}

/// A CloneSet of `replicas` with `podsToDelete: listed`, and `pods` named `demo-<n>` on
/// its update revision (`terminating` ones being deleted), the names in `seen` remembered.
fn world(replicas: i32, listed: &[&str], pods: &[(&str, bool)], seen: &[&str]) -> World {
    let cs = cloneset(json!({
        "replicas": replicas,
        "scaleStrategy": {"podsToDelete": listed},
    }));
    let rev = revision::new_revision(&cs, 1, 0)
        .metadata
        .name
        .unwrap_or_default();
    let pods = pods
        .iter()
        .map(|(name, terminating)| {
            let p = pod(name, &rev);
            if *terminating { p.terminating() } else { p }
        })
        .map(PodBuilder::cached)
        .collect();
    World {
        cs,
        pods,
        seen: seen.iter().map(|s| (*s).to_owned()).collect(),
        options: PlanOptions::default(),
    }
}

fn run(w: &World) -> Plan {
    let p = plan(Snapshot {
        pods_to_delete_seen: &w.seen,
        ..crate::fixtures::snapshot(&w.cs, &w.pods, &[], &w.options)
    });
    p.unwrap_or_else(|e| panic!("plan: {e}"))
}

/// Pods deleted, with why.
fn deleted(p: &Plan) -> Vec<(String, DeleteReason)> {
    p.actions()
        .iter()
        .filter_map(|a| match a {
            Action::Delete { pod, reason } => Some((pod.clone(), *reason)),
            _ => None,
        })
        .collect()
}

fn pruned(p: &Plan) -> Vec<String> {
    p.actions()
        .iter()
        .filter_map(|a| match a {
            Action::PrunePodsToDelete { names } => Some(names.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn not_found_problem(p: &Plan) -> Option<String> {
    p.problems
        .iter()
        .find(|q| q.condition == CONDITION_FAILED_SCALE && q.reason == REASON_NOT_FOUND)
        .map(|q| q.message.clone())
}

const FOUR: &[(&str, bool)] = &[
    ("demo-a", false),
    ("demo-b", false),
    ("demo-c", false),
    ("demo-d", false),
];

#[test]
fn a_typo_with_replicas_lowered_deletes_no_other_pod() {
    // the user meant one pod and lowered replicas 4 -> 3 in the same change
    let w = world(3, &["demo-typo"], FOUR, &[]);
    let p = run(&w);
    assert_eq!(deleted(&p), []);
    assert!(pruned(&p).is_empty(), "kept while it holds the scale-in");
    let m = not_found_problem(&p).unwrap_or_default();
    assert!(m.contains("demo-typo") && m.contains("1 pod(s)"), "{m}");
    let cond = p
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_FAILED_SCALE)
        .map(|c| (c.reason.clone(), c.message.clone()));
    assert_eq!(cond, Some((Some(REASON_NOT_FOUND.into()), Some(m))));
}

#[test]
fn only_the_part_of_the_scale_in_the_unknown_names_stand_for_is_held() {
    // 4 -> 2 with one unknown name: one default-order victim, not two
    let w = world(2, &["demo-typo"], FOUR, &[]);
    let p = run(&w);
    let d = deleted(&p);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].1, DeleteReason::ScaleDown);
    assert!(not_found_problem(&p).is_some());
    // 4 -> 2 with two unknown names: nothing
    let w = world(2, &["demo-x", "demo-y"], FOUR, &[]);
    assert_eq!(deleted(&run(&w)), []);
}

#[test]
fn a_known_name_is_deleted_and_an_unknown_one_beside_it_still_holds() {
    // 4 -> 2 listing demo-b and a typo: demo-b goes (specified) ...
    let w = world(2, &["demo-b", "demo-typo"], FOUR, &[]);
    let p = run(&w);
    assert_eq!(
        deleted(&p),
        [("demo-b".to_owned(), DeleteReason::SpecifiedDelete)]
    );
    // ... then, demo-b terminating (seen), the typo holds the second victim back
    let terminating = [
        ("demo-a", false),
        ("demo-b", true),
        ("demo-c", false),
        ("demo-d", false),
    ];
    let w = world(2, &["demo-b", "demo-typo"], &terminating, &["demo-b"]);
    let p = run(&w);
    assert_eq!(deleted(&p), []);
    assert_eq!(pruned(&p), ["demo-b"]);
    assert!(not_found_problem(&p).is_some_and(|m| m.contains("demo-typo")));
}

#[test]
fn a_name_seen_before_whose_pod_is_gone_is_pruned_and_holds_nothing() {
    // our earlier deletion of demo-e completed before its name was pruned
    let w = world(3, &["demo-e"], FOUR, &["demo-e"]);
    let p = run(&w);
    assert_eq!(pruned(&p), ["demo-e"]);
    assert_eq!(not_found_problem(&p), None);
    let d = deleted(&p);
    assert_eq!(d.len(), 1, "the scale-in goes on: {d:?}");
    assert_eq!(d[0].1, DeleteReason::ScaleDown);
}

#[test]
fn an_unknown_name_with_nothing_to_scale_in_is_reported_and_pruned() {
    let w = world(4, &["demo-typo"], FOUR, &[]);
    let p = run(&w);
    assert_eq!(deleted(&p), []);
    assert_eq!(pruned(&p), ["demo-typo"]);
    let m = not_found_problem(&p).unwrap_or_default();
    assert!(m.contains("removed from the list"), "{m}");
}

#[test]
fn raising_replicas_releases_the_hold() {
    // the typo is held at 3; at replicas 4 nothing is to be scaled in, and it goes
    let held = world(3, &["demo-typo"], FOUR, &[]);
    assert!(pruned(&run(&held)).is_empty());
    let raised = world(4, &["demo-typo"], FOUR, &[]);
    assert_eq!(pruned(&run(&raised)), ["demo-typo"]);
}
