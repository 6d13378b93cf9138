//! Every `default:` of the CRDs: exactly the reference webhook's defaults are in the
//! generated schemas, each one is acceptable to the API server where it sits (valid
//! against its schema node and the CEL rules there, pruned, outside `metadata` and
//! junctors), a minimal object of each kind is defaulted to what the reference stores,
//! values that are set are kept, and the readers see the same values with and without
//! the defaults (objects stored before the defaults existed behave the same).
//!
//! The expected defaults are written out here from the reference
//! (`apis/apps/defaults/v1alpha1.go`: `SetDefaultsCloneSet`, `SetDefaultsImagePullJob`,
//! `SetDefaultsNodeImage`; the CRR mutating handler), independently of
//! `inplace_proto::defaults`.

use inplace_proto::defaults;
use inplace_proto::{CloneSet, ContainerRecreateRequest, ImagePullJob, NodeImage};
use serde_json::{Value, json};

use super::cel_rules::cel_failures;
use super::schema_check;

/// `(kind, schema path, default)` of the reference.
fn expected() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("CloneSet", "spec.replicas", json!(1)),
        ("CloneSet", "spec.revisionHistoryLimit", json!(10)),
        ("CloneSet", "spec.scaleStrategy", json!({})),
        ("CloneSet", "spec.updateStrategy", json!({})),
        ("CloneSet", "spec.updateStrategy.type", json!("ReCreate")),
        ("CloneSet", "spec.updateStrategy.partition", json!(0)),
        (
            "CloneSet",
            "spec.updateStrategy.maxUnavailable",
            json!("20%"),
        ),
        ("CloneSet", "spec.updateStrategy.maxSurge", json!(0)),
        ("ImagePullJob", "spec.completionPolicy", json!({})),
        (
            "ImagePullJob",
            "spec.completionPolicy.type",
            json!("Always"),
        ),
        ("ImagePullJob", "spec.pullPolicy", json!({})),
        ("ImagePullJob", "spec.pullPolicy.timeoutSeconds", json!(600)),
        ("ImagePullJob", "spec.pullPolicy.backoffLimit", json!(3)),
        (
            "ImagePullJob",
            "spec.imagePullPolicy",
            json!("IfNotPresent"),
        ),
        ("NodeImage", "spec.images.*.tags[].pullPolicy", json!({})),
        (
            "NodeImage",
            "spec.images.*.tags[].pullPolicy.timeoutSeconds",
            json!(600),
        ),
        (
            "NodeImage",
            "spec.images.*.tags[].pullPolicy.backoffLimit",
            json!(3),
        ),
        ("ContainerRecreateRequest", "spec.strategy", json!({})),
        (
            "ContainerRecreateRequest",
            "spec.strategy.failurePolicy",
            json!("Fail"),
        ),
    ]
}

const KINDS: [&str; 4] = [
    "CloneSet",
    "ImagePullJob",
    "NodeImage",
    "ContainerRecreateRequest",
];

/// `(path, default)` of every schema node of `kind` that has one.
fn defaults_in_crd(kind: &str) -> Vec<(String, Value)> {
    super::schema_nodes(super::schema(kind))
        .into_iter()
        .filter_map(|n| n.node.get("default").map(|d| (n.path.clone(), d.clone())))
        .collect()
}

fn defaulted(kind: &str, mut object: Value) -> Value {
    defaults::apply(super::schema(kind), &mut object);
    object
}

#[test]
fn the_crds_carry_exactly_the_reference_defaults() {
    for kind in KINDS {
        let mut have = defaults_in_crd(kind);
        let mut want: Vec<(String, Value)> = expected()
            .into_iter()
            .filter(|(k, _, _)| *k == kind)
            .map(|(_, p, v)| (p.to_owned(), v))
            .collect();
        have.sort_by(|a, b| a.0.cmp(&b.0));
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(have, want, "{kind}: defaults in the generated CRD");
    }
}

/// Fields of `value` that `schema` does not declare (what the API server would prune).
fn unknown_fields(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    if let Some(obj) = value.as_object() {
        let props = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties").filter(|a| a.is_object());
        for (k, v) in obj {
            match (props.and_then(|p| p.get(k)), additional) {
                (Some(s), _) | (None, Some(s)) => unknown_fields(s, v, &format!("{path}.{k}"), out),
                (None, None) => out.push(format!("{path}.{k}")),
            }
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
        for item in list {
            unknown_fields(items, item, &format!("{path}[]"), out);
        }
    }
}

/// What the API server checks of each default when it accepts the CRD: the default, with
/// the defaults of its own fields applied, validates against its schema node (and the CEL
/// rules there, on servers that have CEL) and has no field the schema would prune.
#[test]
fn every_default_is_valid_and_pruned_where_it_sits() {
    let mut checked = 0;
    for kind in KINDS {
        for node in super::schema_nodes(super::schema(kind)) {
            let Some(default) = node.node.get("default") else {
                continue;
            };
            let mut value = default.clone();
            defaults::apply(node.node, &mut value);
            let violations = schema_check::violations(node.node, &value);
            assert!(
                violations.is_empty(),
                "{kind}: default {value} at {} violates {violations:?}",
                node.path
            );
            let cel = cel_failures(node.node, &value, None);
            assert!(
                cel.is_empty(),
                "{kind}: default {value} at {} fails CEL {cel:?}",
                node.path
            );
            let mut unknown = Vec::new();
            unknown_fields(node.node, &value, &node.path, &mut unknown);
            assert!(
                unknown.is_empty(),
                "{kind}: default at {} has fields the schema prunes: {unknown:?}",
                node.path
            );
            assert!(
                !node.path.starts_with("metadata"),
                "{kind}: a default in metadata ({}) is refused",
                node.path
            );
            checked += 1;
        }
    }
    assert_eq!(checked, expected().len());
}

/// Defaults inside `allOf`/`anyOf`/`oneOf`/`not` are refused by the API server; the
/// schema walker of the tests visits junctor branches under their parent's path, so look
/// for them directly.
#[test]
fn no_default_inside_a_junctor() {
    fn walk(node: &Value, in_junctor: bool, out: &mut usize) {
        let Some(map) = node.as_object() else { return };
        if in_junctor && map.contains_key("default") {
            *out += 1;
        }
        for (key, child) in map {
            match key.as_str() {
                "properties" => child
                    .as_object()
                    .into_iter()
                    .flat_map(|m| m.values())
                    .for_each(|c| walk(c, in_junctor, out)),
                "items" | "additionalProperties" => walk(child, in_junctor, out),
                "not" => walk(child, true, out),
                "allOf" | "anyOf" | "oneOf" => child
                    .as_array()
                    .into_iter()
                    .flatten()
                    .for_each(|c| walk(c, true, out)),
                _ => {}
            }
        }
    }
    for kind in KINDS {
        let mut found = 0;
        walk(super::schema(kind), false, &mut found);
        assert_eq!(found, 0, "{kind}");
    }
}

fn minimal_cloneset() -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "demo"}},
            "template": {
                "metadata": {"labels": {"app": "demo"}},
                "spec": {"containers": [{"name": "main", "image": "nginx:alpine"}]}
            }
        }
    })
}

#[test]
fn a_cloneset_without_replicas_or_strategies_is_stored_as_the_reference_stores_it() {
    let out = defaulted("CloneSet", minimal_cloneset());
    assert_eq!(
        out["spec"],
        json!({
            "replicas": 1,
            "revisionHistoryLimit": 10,
            "scaleStrategy": {},
            "updateStrategy": {"type": "ReCreate", "partition": 0, "maxUnavailable": "20%", "maxSurge": 0},
            "selector": {"matchLabels": {"app": "demo"}},
            "template": {
                "metadata": {"labels": {"app": "demo"}},
                "spec": {"containers": [{"name": "main", "image": "nginx:alpine"}]}
            }
        })
    );
    // The template is not touched (see the README for what the reference adds there).
    assert_eq!(
        out["spec"]["template"],
        minimal_cloneset()["spec"]["template"]
    );
}

#[test]
fn values_that_are_set_are_kept_and_the_rest_is_filled_in() {
    let mut cs = minimal_cloneset();
    cs["spec"]["replicas"] = json!(0);
    cs["spec"]["revisionHistoryLimit"] = json!(0);
    cs["spec"]["updateStrategy"] =
        json!({"type": "InPlaceIfPossible", "maxSurge": "10%", "paused": true});
    cs["spec"]["scaleStrategy"] = json!({"podsToDelete": ["demo-a"]});
    let out = defaulted("CloneSet", cs);
    assert_eq!(out["spec"]["replicas"], 0);
    assert_eq!(out["spec"]["revisionHistoryLimit"], 0);
    assert_eq!(
        out["spec"]["updateStrategy"],
        json!({"type": "InPlaceIfPossible", "maxSurge": "10%", "paused": true,
               "partition": 0, "maxUnavailable": "20%"})
    );
    assert_eq!(
        out["spec"]["scaleStrategy"],
        json!({"podsToDelete": ["demo-a"]})
    );
}

#[test]
fn image_pull_job_node_image_and_crr_are_defaulted_like_the_reference() {
    let job = defaulted(
        "ImagePullJob",
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
               "metadata": {"name": "pull", "namespace": "default"},
               "spec": {"image": "nginx:alpine", "parallelism": 2,
                        "completionPolicy": {"activeDeadlineSeconds": 1200}}}),
    );
    assert_eq!(
        job["spec"],
        json!({"image": "nginx:alpine", "parallelism": 2,
               "completionPolicy": {"type": "Always", "activeDeadlineSeconds": 1200},
               "pullPolicy": {"timeoutSeconds": 600, "backoffLimit": 3},
               "imagePullPolicy": "IfNotPresent"})
    );

    let ni = defaulted(
        "NodeImage",
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
        "metadata": {"name": "node-1"},
        "spec": {"images": {"nginx": {"tags": [
            {"tag": "alpine", "version": 1},
            {"tag": "1.25", "pullPolicy": {"timeoutSeconds": 60, "ttlSecondsAfterFinished": 300}}
        ]}}}}),
    );
    assert_eq!(
        ni["spec"]["images"]["nginx"]["tags"],
        json!([
            {"tag": "alpine", "version": 1, "pullPolicy": {"timeoutSeconds": 600, "backoffLimit": 3}},
            {"tag": "1.25", "pullPolicy": {"timeoutSeconds": 60, "backoffLimit": 3, "ttlSecondsAfterFinished": 300}}
        ])
    );

    let crr = defaulted(
        "ContainerRecreateRequest",
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
               "metadata": {"name": "restart", "namespace": "default"},
               "spec": {"podName": "demo-abcde", "containers": [{"name": "main"}]}}),
    );
    assert_eq!(crr["spec"]["strategy"], json!({"failurePolicy": "Fail"}));
    let crr = defaulted(
        "ContainerRecreateRequest",
        json!({"spec": {"podName": "p", "containers": [{"name": "main"}],
                        "strategy": {"failurePolicy": "Ignore", "orderedRecreate": true}}}),
    );
    assert_eq!(
        crr["spec"]["strategy"],
        json!({"failurePolicy": "Ignore", "orderedRecreate": true})
    );
}

/// The accessor methods apply the same defaults when a field is absent, so an object
/// read before the CRDs had defaults (or from a file) means what the stored one means.
#[test]
fn readers_see_the_same_values_with_and_without_the_defaults() {
    let bare: CloneSet = serde_json::from_value(minimal_cloneset()).expect("parses");
    let full: CloneSet =
        serde_json::from_value(defaulted("CloneSet", minimal_cloneset())).expect("parses");
    assert_eq!(bare.replicas(), full.replicas());
    assert_eq!(bare.update_type(), full.update_type());
    assert_eq!(bare.revision_history_limit(), full.revision_history_limit());
    assert_eq!(full.spec.replicas, Some(1));

    let job_json = json!({"metadata": {"name": "pull", "namespace": "default"},
                          "spec": {"image": "nginx:alpine"}});
    let bare: ImagePullJob = serde_json::from_value(job_json.clone()).expect("parses");
    let full: ImagePullJob =
        serde_json::from_value(defaulted("ImagePullJob", job_json)).expect("parses");
    assert_eq!(bare.timeout_seconds(), full.timeout_seconds());
    assert_eq!(bare.backoff_limit(), full.backoff_limit());
    assert_eq!(bare.completion_type(), full.completion_type());
    assert_eq!(bare.image_pull_policy(), full.image_pull_policy());
    assert!(full.spec.pull_policy.is_some() && full.spec.image_pull_policy.is_some());

    let ni_json = json!({"metadata": {"name": "n"},
                         "spec": {"images": {"nginx": {"tags": [{"tag": "a"}]}}}});
    let full: NodeImage = serde_json::from_value(defaulted("NodeImage", ni_json)).expect("parses");
    let policy = full
        .tag_spec("nginx", "a")
        .and_then(|t| t.pull_policy.clone())
        .expect("defaulted");
    assert_eq!(
        (policy.timeout_seconds, policy.backoff_limit),
        (
            Some(inplace_proto::DEFAULT_PULL_TIMEOUT_SECONDS),
            Some(inplace_proto::DEFAULT_BACKOFF_LIMIT)
        )
    );

    let crr_json = json!({"metadata": {"name": "r", "namespace": "default"},
                          "spec": {"podName": "p", "containers": [{"name": "main"}]}});
    let bare: ContainerRecreateRequest = serde_json::from_value(crr_json.clone()).expect("parses");
    let full: ContainerRecreateRequest =
        serde_json::from_value(defaulted("ContainerRecreateRequest", crr_json)).expect("parses");
    assert_eq!(bare.failure_policy(), full.failure_policy());
}

/// Every base object of the CEL tables, defaulted, still passes every rule and keyword
/// (the API server validates the defaulted object).
#[test]
fn defaulted_objects_pass_validation() {
    let objects = [
        ("CloneSet", minimal_cloneset()),
        (
            "ImagePullJob",
            json!({"metadata": {"name": "pull"}, "spec": {"image": "nginx"}}),
        ),
        (
            "NodeImage",
            json!({"metadata": {"name": "n"}, "spec": {"images": {"nginx": {"tags": [{"tag": "a"}]}}}}),
        ),
        (
            "ContainerRecreateRequest",
            json!({"metadata": {"name": "r"}, "spec": {"podName": "p", "containers": [{"name": "main"}]}}),
        ),
    ];
    for (kind, object) in objects {
        let out = defaulted(kind, object);
        let schema = super::schema(kind);
        assert!(
            schema_check::violations(schema, &out).is_empty(),
            "{kind}: {out}"
        );
        assert!(cel_failures(schema, &out, None).is_empty(), "{kind}: {out}");
        // An update that changes nothing passes the transition rules too.
        assert!(
            cel_failures(schema, &out, Some(&out)).is_empty(),
            "{kind}: {out}"
        );
    }
}
