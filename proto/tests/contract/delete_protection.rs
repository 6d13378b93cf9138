//! `deploy/policy/delete-protection.yaml`: the ValidatingAdmissionPolicy for
//! `policy.kruise.io/delete-protection`, its objects well-formed for
//! `admissionregistration.k8s.io/v1`, and its CEL evaluated offline on DELETE requests for
//! CloneSets, Namespaces and CRDs against the reference's decisions
//! (`pkg/webhook/util/deletionprotection`: Always refuses, Cascading refuses a workload with
//! replicas > 0; a Namespace / CRD only while it has active pods / custom resources, which
//! a policy cannot see, so the policy refuses Cascading there always; an object already
//! being deleted is never held).
//!
//! The API server runs a policy's validations only for requests its `matchConstraints`
//! match; [`admitted`] does the same (resource rules and the object selector), then
//! evaluates `variables` and `validations` with `oldObject`, `object` (null on DELETE)
//! and `request` bound as the API server binds them.

use serde_json::{Value, json};

use super::admission_policy::{self, assert_policy_and_binding, evaluate, rule_matches};

const LABEL: &str = "policy.kruise.io/delete-protection";
const FILE: &str = "delete-protection.yaml";

fn policy() -> Value {
    admission_policy::policy(FILE)
}

#[test]
fn the_policy_and_its_binding_are_admissionregistration_v1_objects() {
    assert_policy_and_binding(FILE);
}

/// A DELETE of `resource` (`group`, plural) on the object `old`.
struct Request {
    group: &'static str,
    resource: &'static str,
    old: Value,
}

fn cloneset(labels: Value, replicas: Option<i64>, deleting: bool) -> Request {
    let mut old = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": "demo", "namespace": "default", "labels": labels},
        "spec": {"selector": {"matchLabels": {"app": "demo"}}}
    });
    if let Some(n) = replicas {
        old["spec"]["replicas"] = json!(n);
    }
    if deleting {
        old["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    Request {
        group: "apps.kruise.io",
        resource: "clonesets",
        old,
    }
}

fn namespace(labels: Value) -> Request {
    Request {
        group: "",
        resource: "namespaces",
        old: json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "team", "labels": labels}}),
    }
}

fn crd(labels: Value) -> Request {
    Request {
        group: "apiextensions.k8s.io",
        resource: "customresourcedefinitions",
        old: json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": "clonesets.apps.kruise.io", "labels": labels}}),
    }
}

fn deployment(labels: Value) -> Request {
    Request {
        group: "apps",
        resource: "deployments",
        old: json!({"metadata": {"name": "web", "labels": labels}, "spec": {"replicas": 3}}),
    }
}

/// Whether `matchConstraints` select the request (resource rules, then the object
/// selector, which on DELETE is matched against the old object).
fn matched(policy: &Value, req: &Request) -> bool {
    let constraints = &policy["spec"]["matchConstraints"];
    let has = |list: &Value, v: &str| list.as_array().is_some_and(|l| l.iter().any(|x| x == v));
    let labels = &req.old["metadata"]["labels"];
    let selector_matches = constraints["objectSelector"]["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let value = labels[e["key"].as_str().unwrap_or_default()].as_str();
            match e["operator"].as_str() {
                Some("In") => value.is_some_and(|v| has(&e["values"], v)),
                other => panic!("operator {other:?} not modelled"),
            }
        });
    rule_matches(policy, req.group, req.resource, "DELETE") && selector_matches
}

/// `Ok(())` when admitted, else the message of the first failing validation.
fn admitted(req: &Request) -> Result<(), String> {
    let policy = policy();
    if !matched(&policy, req) {
        return Ok(());
    }
    let request = json!({"operation": "DELETE",
        "resource": {"group": req.group, "version": "v1", "resource": req.resource}});
    evaluate(&policy, &request, &Value::Null, &req.old)
}

#[test]
fn table_of_delete_requests() {
    let always = json!({LABEL: "Always"});
    let cascading = json!({LABEL: "Cascading"});
    let none = json!({"app": "demo"});
    // (what, request, refused with a message containing)
    let cases: Vec<(&str, Request, Option<&str>)> = vec![
        (
            "cloneset without the label",
            cloneset(none.clone(), Some(3), false),
            None,
        ),
        (
            "cloneset Always",
            cloneset(always.clone(), Some(3), false),
            Some("=Always"),
        ),
        (
            "cloneset Always, 0 replicas",
            cloneset(always.clone(), Some(0), false),
            Some("=Always"),
        ),
        (
            "cloneset Cascading, 3 replicas",
            cloneset(cascading.clone(), Some(3), false),
            Some("replicas > 0"),
        ),
        (
            "cloneset Cascading, 0 replicas",
            cloneset(cascading.clone(), Some(0), false),
            None,
        ),
        // Absent replicas is the CRD default 1 (the API server fills it on read anyway).
        (
            "cloneset Cascading, replicas absent",
            cloneset(cascading.clone(), None, false),
            Some("replicas > 0"),
        ),
        (
            "cloneset with another value",
            cloneset(json!({LABEL: "Never"}), Some(3), false),
            None,
        ),
        (
            "cloneset Always, already being deleted",
            cloneset(always.clone(), Some(3), true),
            None,
        ),
        (
            "cloneset Cascading, already being deleted",
            cloneset(cascading.clone(), Some(3), true),
            None,
        ),
        ("namespace without the label", namespace(none.clone()), None),
        (
            "namespace Always",
            namespace(always.clone()),
            Some("=Always"),
        ),
        (
            "namespace Cascading",
            namespace(cascading.clone()),
            Some("=Cascading"),
        ),
        ("crd without the label", crd(none.clone()), None),
        ("crd Always", crd(always.clone()), Some("=Always")),
        ("crd Cascading", crd(cascading.clone()), Some("=Cascading")),
        // Not matched: the policy covers CloneSets, Namespaces and CRDs only.
        ("deployment Always", deployment(always.clone()), None),
    ];
    for (what, req, want) in cases {
        match (admitted(&req), want) {
            (Ok(()), None) => {}
            (Err(message), Some(part)) => assert!(
                message.contains(part),
                "{what}: refused with {message:?}, expected it to mention {part:?}"
            ),
            (Ok(()), Some(part)) => panic!("{what}: admitted, expected a refusal ({part})"),
            (Err(message), None) => panic!("{what}: refused ({message}), expected admitted"),
        }
    }
}

/// The match constraints name exactly the DELETE of CloneSets, Namespaces and CRDs, and
/// only labelled objects are evaluated at all.
#[test]
fn the_policy_matches_only_deletes_of_labelled_clonesets_namespaces_and_crds() {
    let p = policy();
    let mut rules: Vec<(String, String, String)> = p["spec"]["matchConstraints"]["resourceRules"]
        .as_array()
        .expect("resourceRules")
        .iter()
        .flat_map(|r| {
            let ops = r["operations"].clone();
            assert_eq!(ops, json!(["DELETE"]), "{r}");
            let groups: Vec<String> = r["apiGroups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|g| g.as_str().map(str::to_owned))
                .collect();
            let resources: Vec<String> = r["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|g| g.as_str().map(str::to_owned))
                .collect();
            groups.into_iter().flat_map(move |g| {
                resources
                    .clone()
                    .into_iter()
                    .map(move |res| (g.clone(), res, "DELETE".to_owned()))
            })
        })
        .collect();
    rules.sort();
    assert_eq!(
        rules,
        [
            ("".to_owned(), "namespaces".to_owned(), "DELETE".to_owned()),
            (
                "apiextensions.k8s.io".to_owned(),
                "customresourcedefinitions".to_owned(),
                "DELETE".to_owned()
            ),
            (
                "apps.kruise.io".to_owned(),
                "clonesets".to_owned(),
                "DELETE".to_owned()
            ),
        ]
    );
    assert_eq!(
        p["spec"]["matchConstraints"]["objectSelector"],
        json!({"matchExpressions": [{"key": LABEL, "operator": "In", "values": ["Always", "Cascading"]}]})
    );
}
