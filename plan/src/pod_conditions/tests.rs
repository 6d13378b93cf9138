#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use inplace_proto::keys;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::*;
use crate::cached::CachedPod;
use crate::fixtures::PlanForms;
use crate::fixtures::{PodBuilder, pod};
use crate::model::UpdateMethod;

const IUR: &str = keys::INPLACE_UPDATE_READY_CONDITION;
const KPR: &str = keys::KRUISE_POD_READY_CONDITION;

/// A ready pod of revision `r` with readiness gates `gates`, at resourceVersion 5.
fn gated(name: &str, gates: &[&str]) -> PodBuilder {
    let gates: Vec<_> = gates.iter().map(|g| json!({"conditionType": g})).collect();
    pod(name, "r").raw(|v| {
        v["spec"]["readinessGates"] = json!(gates);
        v["metadata"]["resourceVersion"] = json!("5");
    })
}

/// The facts of `pods`, as the planner extracts them.
fn facts_of(pods: &[Arc<CachedPod>]) -> Vec<PodFacts<'_>> {
    pods.iter()
        .map(|p| PodFacts::from_pod(p, &BTreeSet::new()))
        .collect()
}

fn writes(pods: Vec<PodBuilder>, actions: &[Action]) -> Vec<(String, String, Vec<&'static str>)> {
    let pods: Vec<_> = pods.into_iter().map(PodBuilder::cached).collect();
    initial(&facts_of(&pods), actions)
        .into_iter()
        .map(|w| (w.pod, w.resource_version, w.conditions))
        .collect()
}

fn w(pod: &str, conditions: &[&'static str]) -> (String, String, Vec<&'static str>) {
    (pod.to_owned(), "5".to_owned(), conditions.to_vec())
}

#[test]
fn pods_lacking_their_gate_conditions_get_them_unless_an_action_writes_them() {
    let complete = Action::CompleteInPlaceUpdate { pod: "p".into() };
    let update = Action::Update {
        pod: "p".into(),
        method: UpdateMethod::InPlace,
        revision: "r2".into(),
    };
    let graced = Action::ApplyGracedUpdate { pod: "p".into() };
    let lifecycle_only = Action::SetTemplateHash {
        pod: "p".into(),
        hash: "h".into(),
    };
    // (case, pod, actions of the plan, writes)
    let cases: Vec<(&str, PodBuilder, Vec<Action>, Vec<_>)> = vec![
        ("no gate", pod("p", "r"), vec![], vec![]),
        (
            "in-place gate, no condition",
            gated("p", &[IUR]),
            vec![],
            vec![w("p", &[IUR])],
        ),
        (
            "Kruise gate, no condition",
            gated("p", &[KPR]),
            vec![],
            vec![w("p", &[KPR])],
        ),
        (
            "both gates",
            gated("p", &[IUR, KPR]),
            vec![],
            vec![w("p", &[IUR, KPR])],
        ),
        (
            "condition there",
            gated("p", &[IUR]).in_place_ready(false),
            vec![],
            vec![],
        ),
        (
            "an update in progress",
            gated("p", &[IUR]).in_place_state(&json!({"revision": "r"})),
            vec![],
            vec![],
        ),
        (
            "being deleted",
            gated("p", &[IUR]).terminating(),
            vec![],
            vec![],
        ),
        (
            "completed by the plan",
            gated("p", &[IUR]),
            vec![complete],
            vec![],
        ),
        (
            "updated by the plan",
            gated("p", &[IUR]),
            vec![update],
            vec![],
        ),
        (
            "held update applied by the plan",
            gated("p", &[IUR]),
            vec![graced],
            vec![],
        ),
        (
            "another action of the pod",
            gated("p", &[IUR]),
            vec![lifecycle_only],
            vec![w("p", &[IUR])],
        ),
    ];
    for (case, pod, actions, want) in cases {
        assert_eq!(writes(vec![pod], &actions), want, "{case}");
    }
}

/// A gated pod whose `InPlaceUpdateReady` is False with `reason`.
fn in_place_false(reason: &str) -> PodBuilder {
    let condition = json!({"type": IUR, "status": "False", "reason": reason});
    gated("p", &[IUR]).raw(|v| {
        v["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(condition);
    })
}

#[test]
fn a_condition_left_false_by_an_update_that_never_landed_is_set_again() {
    let stuck = in_place_false(keys::START_INPLACE_UPDATE_REASON);
    assert_eq!(writes(vec![stuck], &[]), vec![w("p", &[IUR])]);
    // another reason: left alone
    assert_eq!(writes(vec![in_place_false("Stalled")], &[]), vec![]);
}

#[test]
fn the_write_is_pinned_to_the_version_decided_from() {
    let pods = vec![gated("p", &[IUR, KPR]).cached()];
    let planned = initial(&facts_of(&pods), &[]);
    let now = Time(Timestamp::UNIX_EPOCH);
    assert_eq!(
        planned[0].patch(&now),
        json!({
            "metadata": {"resourceVersion": "5"},
            "status": {"conditions": [
                {"type": IUR, "status": "True", "lastTransitionTime": "1970-01-01T00:00:00Z"},
                {"type": KPR, "status": "True", "lastTransitionTime": "1970-01-01T00:00:00Z"},
            ]},
        })
    );
    assert_eq!(
        serde_json::to_value(&planned[0]).unwrap(),
        json!({"pod": "p", "resourceVersion": "5", "conditions": [IUR, KPR]})
    );
}
