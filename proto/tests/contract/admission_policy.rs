//! Offline evaluation of the ValidatingAdmissionPolicies under `deploy/policy/`, as the API
//! server evaluates them for a request its `matchConstraints` matched: `matchConditions`
//! first (any false: the policy does not apply), then `variables` in order, then the
//! `validations` (the first false one refuses, with its message), with `object`,
//! `oldObject` and `request` bound as the API server binds them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube_cel::cel::{self, Program};
use serde_json::Value;

use super::cel_rules::{base_context, to_cel};

/// The documents of `deploy/policy/<file>`.
pub fn documents(file: &str) -> Vec<Value> {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/policy")).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The ValidatingAdmissionPolicy of `deploy/policy/<file>`.
pub fn policy(file: &str) -> Value {
    documents(file)
        .into_iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .unwrap_or_else(|| panic!("{file}: no ValidatingAdmissionPolicy"))
}

/// `file` holds one policy and one binding of it, both `admissionregistration.k8s.io/v1`
/// objects that lose no field when read as the typed API (a misspelt field would be
/// dropped by the typed form), the binding denying, the policy failing closed.
pub fn assert_policy_and_binding(file: &str) {
    let docs = documents(file);
    assert_eq!(docs.len(), 2, "{file}: a policy and its binding");
    for doc in &docs {
        assert_eq!(doc["apiVersion"], "admissionregistration.k8s.io/v1");
        let back = match doc["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => serde_json::to_value(
                serde_json::from_value::<ValidatingAdmissionPolicy>(doc.clone())
                    .expect("a ValidatingAdmissionPolicy"),
            ),
            Some("ValidatingAdmissionPolicyBinding") => serde_json::to_value(
                serde_json::from_value::<ValidatingAdmissionPolicyBinding>(doc.clone())
                    .expect("a ValidatingAdmissionPolicyBinding"),
            ),
            other => panic!("{file}: unexpected kind {other:?}"),
        }
        .expect("serializes");
        let lost = super::lost_fields(doc, &back, "");
        assert!(lost.is_empty(), "{file} {}: {lost:?}", doc["kind"]);
    }
    let binding = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
        .expect("a binding");
    assert_eq!(
        binding["spec"]["policyName"],
        policy(file)["metadata"]["name"]
    );
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_json::json!(["Deny"])
    );
    assert_eq!(policy(file)["spec"]["failurePolicy"], "Fail");
}

/// Whether a resource rule of the policy names `group`, `resource` (`pods/status` for a
/// subresource) and `operation`.
pub fn rule_matches(policy: &Value, group: &str, resource: &str, operation: &str) -> bool {
    let has = |list: &Value, v: &str| {
        list.as_array()
            .is_some_and(|l| l.iter().any(|x| x == v || x == "*"))
    };
    policy["spec"]["matchConstraints"]["resourceRules"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| {
            has(&r["apiGroups"], group)
                && has(&r["resources"], resource)
                && has(&r["operations"], operation)
        })
}

/// `Ok(())` when admitted (or when a match condition leaves the request out), else the
/// message of the first failing validation. Panics when an expression does not compile
/// or gives no bool where one is needed.
pub fn evaluate(
    policy: &Value,
    request: &Value,
    object: &Value,
    old: &Value,
) -> Result<(), String> {
    let ctx = base_context();
    let mut scope = ctx.new_inner_scope();
    scope.add_variable_from_value("object", to_cel(object, &Value::Null));
    scope.add_variable_from_value("oldObject", to_cel(old, &Value::Null));
    scope.add_variable_from_value("request", to_cel(request, &Value::Null));
    let eval = |scope: &cel::Context<'_>, expr: &str| {
        Program::compile(expr)
            .unwrap_or_else(|e| panic!("does not compile: {expr}: {e}"))
            .execute(scope)
            .unwrap_or_else(|e| panic!("does not evaluate: {expr}: {e:?}"))
    };
    let list = |field: &str| {
        policy["spec"][field]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    for c in list("matchConditions") {
        let expr = c["expression"].as_str().unwrap_or_default();
        match eval(&scope, expr) {
            cel::Value::Bool(true) => {}
            cel::Value::Bool(false) => return Ok(()),
            other => panic!("match condition {expr} gave {other:?}, not a bool"),
        }
    }
    let as_map = |m: &HashMap<cel::objects::Key, cel::Value>| {
        cel::Value::Map(cel::objects::Map {
            map: Arc::new(m.clone()),
        })
    };
    let mut variables = HashMap::new();
    for v in list("variables") {
        let name = v["name"].as_str().unwrap_or_default().to_owned();
        let mut inner = scope.new_inner_scope();
        inner.add_variable_from_value("variables", as_map(&variables));
        let value = eval(&inner, v["expression"].as_str().unwrap_or_default());
        variables.insert(cel::objects::Key::String(Arc::new(name)), value);
    }
    scope.add_variable_from_value("variables", as_map(&variables));
    for v in list("validations") {
        let expr = v["expression"].as_str().unwrap_or_default();
        match eval(&scope, expr) {
            cel::Value::Bool(true) => {}
            cel::Value::Bool(false) => {
                assert_eq!(v["reason"], "Forbidden", "{expr}");
                return Err(v["message"].as_str().unwrap_or_default().to_owned());
            }
            other => panic!("{expr} gave {other:?}, not a bool"),
        }
    }
    Ok(())
}
