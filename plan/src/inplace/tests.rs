#![allow(clippy::unwrap_used, clippy::expect_used)]

use inplace_proto::CloneSetUpdateStrategyType::{self, InPlaceIfPossible, InPlaceOnly, ReCreate};
use serde_json::{Value, json};

use super::*;
use crate::fixtures::{cloneset, revision};

fn template(containers: Value) -> Map<String, Value> {
    json!({
        "metadata": {"labels": {"app": "demo"}, "annotations": {"note": "a"}},
        "spec": {"containers": containers},
    })
    .as_object()
    .unwrap()
    .clone()
}

fn base() -> Map<String, Value> {
    template(json!([{"name": "main", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]}]))
}

fn changed(f: impl FnOnce(&mut Value)) -> Map<String, Value> {
    let mut v = Value::Object(base());
    f(&mut v);
    v.as_object().unwrap().clone()
}

fn run(
    ty: CloneSetUpdateStrategyType,
    new: &Map<String, Value>,
    vertical: bool,
) -> InPlaceDecision {
    let options = PlanOptions {
        in_place_vertical_scaling: vertical,
        ..PlanOptions::default()
    };
    decide(ty, Some(&base()), new, None, None, &options)
}

fn recreate_reason(d: InPlaceDecision) -> String {
    match d {
        InPlaceDecision::Recreate { reason } => reason,
        other => panic!("expected recreate, got {other:?}"),
    }
}

#[test]
fn only_a_changed_container_image_goes_in_place() {
    let new = changed(|v| v["spec"]["containers"][0]["image"] = json!("nginx:2"));
    let InPlaceDecision::InPlace(change) = run(InPlaceIfPossible, &new, false) else {
        panic!("expected in place");
    };
    assert_eq!(
        change.images.get("main").map(String::as_str),
        Some("nginx:2")
    );
    assert!(change.labels.is_empty() && change.annotations.is_empty());
    assert_eq!(change.describe(), "image of main → nginx:2");
}

#[test]
fn labels_and_annotations_added_changed_or_removed_go_in_place() {
    let new = changed(|v| {
        v["metadata"]["labels"]["tier"] = json!("web");
        v["metadata"]["annotations"] = json!({});
    });
    let InPlaceDecision::InPlace(change) = run(InPlaceOnly, &new, false) else {
        panic!("expected in place");
    };
    assert_eq!(change.labels.get("tier"), Some(&Some("web".to_owned())));
    assert_eq!(change.annotations.get("note"), Some(&None));
    assert!(change.images.is_empty());
}

#[test]
fn every_other_template_change_recreates_and_names_the_field() {
    type Mutation = Box<dyn FnOnce(&mut Value)>;
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "spec.containers[main].env",
            Box::new(|v| v["spec"]["containers"][0]["env"][0]["value"] = json!("2")),
        ),
        (
            "spec.containers[main].ports",
            Box::new(|v| v["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}])),
        ),
        (
            "containers added or removed",
            Box::new(|v| {
                v["spec"]["containers"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "side", "image": "busybox"}))
            }),
        ),
        (
            "renamed from main to web",
            Box::new(|v| v["spec"]["containers"][0]["name"] = json!("web")),
        ),
        (
            "spec.initContainers",
            Box::new(|v| {
                v["spec"]["initContainers"] = json!([{"name": "init", "image": "busybox"}])
            }),
        ),
        (
            "spec.volumes",
            Box::new(|v| v["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}])),
        ),
        (
            "spec.containers[main].resources",
            Box::new(|v| v["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "1"}})),
        ),
        (
            "metadata.finalizers",
            Box::new(|v| v["metadata"]["finalizers"] = json!(["x"])),
        ),
        (
            "spec.containers[main].image",
            Box::new(|v| {
                v["spec"]["containers"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("image");
            }),
        ),
    ];
    for (field, mutate) in cases {
        let new = changed(mutate);
        let reason = recreate_reason(run(InPlaceIfPossible, &new, false));
        assert!(reason.contains(field), "{field}: {reason}");
        match run(InPlaceOnly, &new, false) {
            InPlaceDecision::Refused { reason } => assert!(reason.contains(field), "{reason}"),
            other => panic!("{field}: expected refusal, got {other:?}"),
        }
    }
}

#[test]
fn absent_null_and_empty_fields_compare_equal() {
    let new = changed(|v| {
        v["spec"]["volumes"] = json!([]);
        v["spec"]["nodeSelector"] = Value::Null;
        v["spec"]["containers"][0]["ports"] = json!([]);
    });
    assert_eq!(
        run(InPlaceOnly, &new, false),
        InPlaceDecision::InPlace(InPlaceChange::default())
    );
}

#[test]
fn recreate_update_type_always_recreates() {
    let new = changed(|v| v["spec"]["containers"][0]["image"] = json!("nginx:2"));
    assert!(recreate_reason(run(ReCreate, &new, false)).contains("ReCreate"));
}

fn with_resources(resources: Value) -> Map<String, Value> {
    changed(|v| v["spec"]["containers"][0]["resources"] = resources)
}

fn resize(old: Value, new: Value) -> InPlaceDecision {
    let options = PlanOptions {
        in_place_vertical_scaling: true,
        ..PlanOptions::default()
    };
    decide(
        InPlaceIfPossible,
        Some(&with_resources(old)),
        &with_resources(new),
        None,
        None,
        &options,
    )
}

#[test]
fn vertical_scaling_replaces_cpu_and_memory_in_place_when_the_qos_class_stays() {
    let d = resize(
        json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}),
        json!({"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"cpu": "4", "memory": "4Gi"}}),
    );
    let InPlaceDecision::InPlace(change) = d else {
        panic!("expected in place, got {d:?}");
    };
    assert!(change.resources.contains_key("main"));
    assert_eq!(change.describe(), "cpu/memory of main");
}

#[test]
fn vertical_scaling_recreates_for_added_requests_other_resources_and_qos_changes() {
    let cases = [
        (
            json!({"requests": {"cpu": "1"}}),
            json!({"requests": {"cpu": "1", "memory": "1Gi"}}),
            "requests.memory added",
        ),
        (
            json!({"requests": {"cpu": "1", "memory": "1Gi"}}),
            json!({"requests": {"cpu": "1"}}),
            "requests.memory removed",
        ),
        (
            json!({"limits": {"nvidia.com/gpu": "1"}}),
            json!({"limits": {"nvidia.com/gpu": "2"}}),
            "nvidia.com/gpu changed",
        ),
        (
            // Guaranteed (requests = limits) → Burstable.
            json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}),
            json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}),
            "QoS class would change from Guaranteed to Burstable",
        ),
    ];
    for (old, new, want) in cases {
        let reason = recreate_reason(resize(old, new));
        assert!(reason.contains(want), "{want}: {reason}");
    }
}

#[test]
fn qos_class_follows_kubernetes_rules() {
    let spec = |resources: Value| {
        json!({"containers": [{"name": "a", "resources": resources}]})
            .as_object()
            .unwrap()
            .clone()
    };
    assert_eq!(qos_class(&spec(json!({}))), "BestEffort");
    assert_eq!(
        qos_class(&spec(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))),
        "Guaranteed"
    );
    assert_eq!(
        qos_class(&spec(
            json!({"requests": {"cpu": "1000m"}, "limits": {"cpu": "1", "memory": "1Gi"}})
        )),
        "Guaranteed"
    );
    assert_eq!(
        qos_class(&spec(json!({"requests": {"cpu": "1"}}))),
        "Burstable"
    );
    assert_eq!(
        qos_class(&spec(json!({"limits": {"cpu": "1"}}))),
        "Burstable"
    );
}

#[test]
fn changed_volume_claim_templates_force_recreate_behind_the_option_except_in_place_only() {
    let new = changed(|v| v["spec"]["containers"][0]["image"] = json!("nginx:2"));
    let on = PlanOptions {
        recreate_on_vct_change: true,
        ..PlanOptions::default()
    };
    let d = decide(
        InPlaceIfPossible,
        Some(&base()),
        &new,
        Some("1"),
        Some("2"),
        &on,
    );
    assert!(recreate_reason(d).contains("volumeClaimTemplates"));
    let d = decide(InPlaceOnly, Some(&base()), &new, Some("1"), Some("2"), &on);
    assert!(matches!(d, InPlaceDecision::InPlace(_)));
    let off = PlanOptions::default();
    let d = decide(
        InPlaceIfPossible,
        Some(&base()),
        &new,
        Some("1"),
        Some("2"),
        &off,
    );
    assert!(matches!(d, InPlaceDecision::InPlace(_)));
    let d = decide(InPlaceIfPossible, Some(&base()), &new, None, Some("2"), &on);
    assert!(
        matches!(d, InPlaceDecision::InPlace(_)),
        "an unknown hash forces nothing"
    );
}

#[test]
fn a_pod_whose_revision_is_unknown_recreates_or_is_refused() {
    let new = base();
    let options = PlanOptions::default();
    assert!(
        recreate_reason(decide(InPlaceIfPossible, None, &new, None, None, &options))
            .contains("no ControllerRevision")
    );
    assert!(matches!(
        decide(InPlaceOnly, None, &new, None, None, &options),
        InPlaceDecision::Refused { .. }
    ));
}

#[test]
fn the_update_revision_template_is_the_clonesets_own_template() {
    let cs = cloneset(json!({"updateStrategy": {"type": "InPlaceIfPossible"}}));
    let old_template = json!({
        "metadata": {"labels": {"app": "demo"}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1"}]},
    });
    let revisions = vec![revision("demo-old", old_template)];
    let d = decide_for_revisions(
        &cs,
        &revisions,
        "demo-new",
        Some("demo-old"),
        "demo-new",
        &PlanOptions::default(),
    );
    let InPlaceDecision::InPlace(change) = d else {
        panic!("expected in place, got {d:?}");
    };
    assert_eq!(
        change.images.get("main").map(String::as_str),
        Some("nginx:2")
    );
    // Short-hash labels find their revision too.
    let d = decide_for_revisions(
        &cs,
        &revisions,
        "demo-new",
        Some("old"),
        "demo-new",
        &PlanOptions::default(),
    );
    assert!(matches!(d, InPlaceDecision::InPlace(_)));
}

/// Docs "Update types" (`InPlaceUpdateEnvFromMetadata`): containers whose env reads a changed
/// label or annotation through the downward API are restarted by the daemon
/// (updateEnvFromMetadata).
#[test]
fn env_from_changed_metadata_lists_only_the_containers_reading_a_changed_key() {
    let env_ref = |path: &str| json!({"name": "X", "valueFrom": {"fieldRef": {"fieldPath": path}}});
    let containers = |tier: &str| {
        json!([
            {"name": "reads-tier", "image": "a:1", "env": [env_ref("metadata.labels['tier']")]},
            {"name": "reads-note", "image": "b:1", "env": [env_ref("metadata.annotations[\"note\"]")]},
            {"name": "reads-app", "image": "c:1", "env": [env_ref("metadata.labels['app']")]},
            {"name": "plain", "image": "d:1", "env": [{"name": "A", "value": tier}]},
        ])
    };
    let old = template(containers("x"));
    let mut new = Value::Object(template(containers("x")));
    new["metadata"]["labels"]["tier"] = json!("web");
    new["metadata"]["annotations"] = json!({});
    let decision = decide(
        InPlaceIfPossible,
        Some(&old),
        new.as_object().unwrap(),
        None,
        None,
        &PlanOptions::default(),
    );
    let InPlaceDecision::InPlace(change) = decision else {
        panic!("expected in place, got {decision:?}");
    };
    let names: Vec<&str> = change
        .env_from_metadata
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(names, ["reads-note", "reads-tier"]);
    let tier = &change.env_from_metadata["reads-tier"];
    assert_eq!(tier.labels.as_ref().unwrap()["tier"], "web");
    assert!(tier.annotations.is_none());
    // A removed annotation still lists the container (so it restarts), with no value.
    assert!(
        change.env_from_metadata["reads-note"]
            .annotations
            .as_ref()
            .unwrap()
            .is_empty()
    );
    assert!(
        change
            .describe()
            .contains("env from metadata of reads-note, reads-tier")
    );
}

#[test]
fn an_image_only_change_needs_no_env_restart() {
    let new = changed(|v| v["spec"]["containers"][0]["image"] = json!("nginx:2"));
    let InPlaceDecision::InPlace(change) = run(InPlaceIfPossible, &new, false) else {
        panic!("expected in place");
    };
    assert!(change.env_from_metadata.is_empty());
}

/// `kubectl inplace rollout restart` writes `kubectl.kubernetes.io/restartedAt` into the
/// template: every container that does not restart anyway is restarted in place, under
/// both in-place types; with other changes the usual rules hold.
#[test]
fn restarted_at_restarts_every_container_in_place_table() {
    let two = || {
        template(json!([
            {"name": "main", "image": "nginx:1"},
            {"name": "side", "image": "busybox:1", "env": [{"name": "AT",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['kubectl.kubernetes.io/restartedAt']"}}}]},
            {"name": "log", "image": "busybox:1"},
        ]))
    };
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = Value::Object(two());
        f(&mut v);
        v.as_object().unwrap().clone()
    };
    let at = |v: &mut Value, t: &str| {
        v["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = json!(t);
    };
    let before_restart = with(&|v| at(v, "2026-01-01T00:00:00Z"));
    type Case<'a> = (
        &'a str,
        Map<String, Value>,
        Map<String, Value>,
        CloneSetUpdateStrategyType,
        Result<(&'a [&'a str], &'a [&'a str]), &'a str>,
    );
    // (case, old, new, type, Ok((restarts, env restarts)) or Err(recreate reason part))
    let cases: Vec<Case> = vec![
        (
            "added",
            two(),
            with(&|v| at(v, "2026-01-02T00:00:00Z")),
            InPlaceIfPossible,
            Ok((&["log", "main"], &["side"])),
        ),
        (
            "changed, InPlaceOnly",
            before_restart.clone(),
            with(&|v| at(v, "2026-01-02T00:00:00Z")),
            InPlaceOnly,
            Ok((&["log", "main"], &["side"])),
        ),
        (
            "removed (undo to a revision without it)",
            before_restart.clone(),
            two(),
            InPlaceIfPossible,
            Ok((&["log", "main"], &["side"])),
        ),
        (
            "with an image change: that container restarts through the kubelet",
            two(),
            with(&|v| {
                at(v, "2026-01-02T00:00:00Z");
                v["spec"]["containers"][0]["image"] = json!("nginx:2");
            }),
            InPlaceIfPossible,
            Ok((&["log"], &["side"])),
        ),
        (
            "another annotation only: no restart",
            two(),
            with(&|v| v["metadata"]["annotations"]["note"] = json!("b")),
            InPlaceIfPossible,
            Ok((&[], &[])),
        ),
        (
            "with an env change: recreate as ever",
            two(),
            with(&|v| {
                at(v, "2026-01-02T00:00:00Z");
                v["spec"]["containers"][0]["env"] = json!([{"name": "X", "value": "1"}]);
            }),
            InPlaceIfPossible,
            Err("spec.containers[main].env changed"),
        ),
        (
            "ReCreate recreates",
            two(),
            with(&|v| at(v, "2026-01-02T00:00:00Z")),
            ReCreate,
            Err("update type is ReCreate"),
        ),
    ];
    for (case, old, new, ty, want) in cases {
        let got = decide(ty, Some(&old), &new, None, None, &PlanOptions::default());
        match (got, want) {
            (InPlaceDecision::InPlace(change), Ok((restarts, env))) => {
                let restarts: BTreeSet<String> = restarts.iter().map(|s| s.to_string()).collect();
                assert_eq!(change.restarts, restarts, "{case}");
                let env_names: Vec<&str> = change
                    .env_from_metadata
                    .keys()
                    .map(String::as_str)
                    .collect();
                assert_eq!(env_names, env, "{case}");
                assert!(!change.is_empty(), "{case}");
            }
            (InPlaceDecision::Recreate { reason }, Err(part)) => {
                assert!(reason.contains(part), "{case}: {reason}");
            }
            (got, want) => panic!("{case}: got {got:?}, want {want:?}"),
        }
    }
    let InPlaceDecision::InPlace(change) = decide(
        InPlaceIfPossible,
        Some(&two()),
        &with(&|v| at(v, "2026-01-02T00:00:00Z")),
        None,
        None,
        &PlanOptions::default(),
    ) else {
        panic!("expected in place");
    };
    assert_eq!(
        change.describe(),
        "annotations kubectl.kubernetes.io/restartedAt; env from metadata of side; restart of log, main"
    );
}
