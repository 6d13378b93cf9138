//! Every validation rule of the CRDs, evaluated offline, in tables named after the rule.
//!
//! The rules are taken from the generated CRD, not from `inplace_proto::validation`: a
//! test first finds its rule (by rule text and message) at its path in the generated
//! schema; then [`cel_failures`] walks the whole generated schema along the object like
//! the API server does and evaluates every rule it meets with `self` bound to the value
//! at the rule's place (absent optional fields stay absent, transition rules with
//! `oldSelf` run only on updates). So a passing table proves the rule in the CRD.
//!
//! The interpreter is the `cel` crate with the Kubernetes extension functions of
//! `kube-cel`. kube-cel's own schema walker cannot be used as is: its `cel` version has
//! no `type()` function, which the int-or-string rules need (`type(self) == int` is the
//! Kubernetes idiom for them). The walker here adds `type()`: it returns an opaque type
//! token, and `int`, `string`, ... are bound to the same tokens, so `type(x) == int`
//! behaves as in the API server and `type(x) == 'int'` is false, as there.
//!
//! Each table has valid objects, which must pass every rule and every schema keyword, and
//! invalid ones, which must fail this rule, at this rule's path, and nothing else (so a
//! rule that accidentally rejects or accepts everything is caught, and each mistake gets
//! exactly one message). A rule that does not evaluate to a bool (a missing `has()`
//! guard, a type error) fails the test. Constraints written as schema keywords are
//! tested the same way with [`super::schema_check`].

use std::collections::HashMap;
use std::sync::Arc;

use inplace_proto::validation::{self, CelRule};
use kube_cel::KubeCelExt;
use kube_cel::cel::{self, Context, Program};
use serde_json::{Value, json};

use super::schema_check;

/// One object to validate; `old` makes it an update.
struct Case {
    new: Value,
    old: Option<Value>,
}

/// A create: `patch` merged into the kind's base object.
fn create(patch: Value) -> Case {
    Case {
        new: patch,
        old: None,
    }
}

/// An update from `old` to `new` (both patches of the base object).
fn update(old: Value, new: Value) -> Case {
    Case {
        new,
        old: Some(old),
    }
}

fn base(kind: &str) -> Value {
    match kind {
        "CloneSet" => json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "CloneSet",
            "metadata": {"name": "demo", "namespace": "default"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "demo"}},
                "template": {
                    "metadata": {"labels": {"app": "demo"}},
                    "spec": {"containers": [{"name": "main", "image": "nginx:alpine"}]}
                }
            }
        }),
        "ImagePullJob" => json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ImagePullJob",
            "metadata": {"name": "pull", "namespace": "default"},
            "spec": {"image": "nginx:alpine"}
        }),
        "NodeImage" => json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "NodeImage",
            "metadata": {"name": "node-1"},
            "spec": {"images": {"nginx": {"tags": [{"tag": "alpine", "version": 1}]}}},
            "status": {"desired": 1, "imageStatuses": {"nginx": {"tags": [{"tag": "alpine", "phase": "Succeeded", "progress": 100}]}}}
        }),
        "ContainerRecreateRequest" => json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ContainerRecreateRequest",
            "metadata": {"name": "restart", "namespace": "default"},
            "spec": {"podName": "demo-abcde", "containers": [{"name": "main"}]}
        }),
        other => panic!("no base object for {other}"),
    }
}

/// What one validation found.
#[derive(Debug, Default)]
struct Outcome {
    /// `(schema path, message)` of each failed CEL rule.
    cel: Vec<(String, String)>,
    /// `<schema path>:<keyword>` of each violated schema keyword.
    schema: Vec<String>,
}

/// The CEL value of `value` as the API server builds it for a node of `schema`: objects
/// with declared properties expose only those (unknown fields are pruned or, under
/// `x-kubernetes-preserve-unknown-fields`, invisible to CEL), maps expose every entry.
pub fn to_cel(value: &Value, schema: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => cel::Value::Int(i),
            None => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => {
            let item_schema = schema.get("items").cloned().unwrap_or(Value::Null);
            cel::Value::List(Arc::new(
                items.iter().map(|i| to_cel(i, &item_schema)).collect(),
            ))
        }
        Value::Object(obj) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let mut map = HashMap::new();
            for (k, v) in obj {
                let child = match (props.and_then(|p| p.get(k)), additional) {
                    (Some(s), _) | (None, Some(s)) => s,
                    (None, None) if props.is_none() => &Value::Null,
                    (None, None) => continue,
                };
                map.insert(
                    cel::objects::Key::String(Arc::new(k.clone())),
                    to_cel(v, child),
                );
            }
            cel::Value::Map(cel::objects::Map { map: Arc::new(map) })
        }
    }
}

/// CEL's name of a value's type, as a token that only `type()` and the type identifiers
/// produce.
fn type_token(name: &str) -> cel::Value {
    cel::Value::String(Arc::new(format!("\u{0}type:{name}")))
}

fn type_of(value: cel::Value) -> Result<cel::Value, cel::ExecutionError> {
    let name = match value {
        cel::Value::Int(_) => "int",
        cel::Value::UInt(_) => "uint",
        cel::Value::Float(_) => "double",
        cel::Value::String(_) => "string",
        cel::Value::Bool(_) => "bool",
        cel::Value::Bytes(_) => "bytes",
        cel::Value::List(_) => "list",
        cel::Value::Map(_) => "map",
        cel::Value::Null => "null_type",
        _ => "unknown",
    };
    Ok(type_token(name))
}

pub fn base_context() -> Context<'static> {
    let mut ctx = Context::default().with_all();
    ctx.add_function("type", type_of);
    for name in [
        "int",
        "uint",
        "double",
        "string",
        "bool",
        "bytes",
        "list",
        "map",
        "null_type",
    ] {
        ctx.add_variable_from_value(name, type_token(name));
    }
    ctx
}

/// Evaluates every rule of `schema` along `value` (and `old` for transition rules) and
/// returns `(schema path, message)` of each rule that is false. Panics when a rule does
/// not compile or does not evaluate to a bool.
pub fn cel_failures(schema: &Value, value: &Value, old: Option<&Value>) -> Vec<(String, String)> {
    fn walk(
        ctx: &Context<'_>,
        schema: &Value,
        value: &Value,
        old: Option<&Value>,
        path: &str,
        out: &mut Vec<(String, String)>,
    ) {
        for rule in schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let text = rule["rule"].as_str().unwrap_or_default();
            let message = rule["message"].as_str().unwrap_or_default();
            if text.contains("oldSelf") && old.is_none() {
                continue;
            }
            let program = Program::compile(text)
                .unwrap_or_else(|e| panic!("rule at {path} does not compile: {text}: {e}"));
            let mut scope = ctx.new_inner_scope();
            scope.add_variable_from_value("self", to_cel(value, schema));
            if let Some(old) = old {
                scope.add_variable_from_value("oldSelf", to_cel(old, schema));
            }
            match program.execute(&scope) {
                Ok(cel::Value::Bool(true)) => {}
                Ok(cel::Value::Bool(false)) => out.push((path.to_owned(), message.to_owned())),
                other => panic!(
                    "rule at {path} did not evaluate to a bool on {value}: {text}: {other:?}"
                ),
            }
        }
        let join = |seg: &str| {
            if path.is_empty() {
                seg.to_owned()
            } else {
                format!("{path}.{seg}")
            }
        };
        let props = schema.get("properties").and_then(Value::as_object);
        if let Some(obj) = value.as_object() {
            for (k, v) in obj {
                let old_v = old.and_then(|o| o.get(k));
                if let Some(sub) = props.and_then(|p| p.get(k)) {
                    walk(ctx, sub, v, old_v, &join(k), out);
                } else if let Some(ap) =
                    schema.get("additionalProperties").filter(|a| a.is_object())
                {
                    walk(ctx, ap, v, old_v, &join("*"), out);
                }
            }
        }
        if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
            for (i, item) in list.iter().enumerate() {
                let old_item = old.and_then(Value::as_array).and_then(|l| l.get(i));
                walk(ctx, items, item, old_item, &format!("{path}[]"), out);
            }
        }
    }
    let ctx = base_context();
    let mut out = Vec::new();
    walk(&ctx, schema, value, old, "", &mut out);
    out
}

/// Validates `case` as the API server does: the CRD's defaults applied first (to the old
/// object too: the server defaults what it reads from etcd).
fn evaluate(kind: &str, case: &Case) -> Outcome {
    let schema = super::schema(kind);
    let defaulted = |mut v: Value| {
        inplace_proto::defaults::apply(schema, &mut v);
        v
    };
    let new = defaulted(super::merge(base(kind), &case.new));
    let old = case
        .old
        .as_ref()
        .map(|o| defaulted(super::merge(base(kind), o)));
    let cel = cel_failures(schema, &new, old.as_ref());
    let mut schema_found = schema_check::violations(schema, &new);
    if let Some(old) = &old {
        assert!(
            schema_check::violations(schema, old).is_empty()
                && cel_failures(schema, old, None).is_empty(),
            "{kind}: the old object of an update case must be valid: {old}"
        );
    }
    schema_found.sort();
    Outcome {
        cel,
        schema: schema_found,
    }
}

/// The harness itself: `type()` distinguishes the int-or-string forms, transition rules
/// need an old object, a false rule is reported at its schema path.
#[test]
fn harness_evaluates_like_the_api_server() {
    let schema = json!({
        "type": "object",
        "properties": {
            "v": {"x-kubernetes-int-or-string": true, "x-kubernetes-validations": [
                {"rule": "type(self) == int ? self > 0 : self.endsWith('%')", "message": "v"},
                {"rule": "type(self) != 'int'", "message": "type is not a string"}
            ]},
            "l": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}},
                  "x-kubernetes-validations": [{"rule": "self.k != ''", "message": "k"}]}},
            "o": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "o"}]}
        },
        "x-kubernetes-validations": [{"rule": "!has(self.absent)", "message": "absent"}]
    });
    assert!(cel_failures(&schema, &json!({"v": 3, "o": "a"}), None).is_empty());
    assert!(cel_failures(&schema, &json!({"v": "5%"}), None).is_empty());
    assert_eq!(
        cel_failures(&schema, &json!({"v": 0}), None),
        [("v".to_owned(), "v".to_owned())]
    );
    assert_eq!(
        cel_failures(&schema, &json!({"v": "5"}), None),
        [("v".to_owned(), "v".to_owned())]
    );
    assert_eq!(
        cel_failures(&schema, &json!({"l": [{"k": "x"}, {"k": ""}]}), None),
        [("l[]".to_owned(), "k".to_owned())]
    );
    assert!(cel_failures(&schema, &json!({"o": "b"}), None).is_empty());
    assert_eq!(
        cel_failures(&schema, &json!({"o": "b"}), Some(&json!({"o": "a"}))),
        [("o".to_owned(), "o".to_owned())]
    );
    // An unknown field is pruned: `has()` does not see it.
    assert!(cel_failures(&schema, &json!({"absent": 1}), None).is_empty());
}

fn table_rule(kind: &str, id: &str) -> &'static CelRule {
    rules_of(kind)
        .iter()
        .find(|r| r.id == id)
        .unwrap_or_else(|| panic!("{kind}: no rule `{id}` in inplace_proto::validation"))
}

fn rules_of(kind: &str) -> &'static [CelRule] {
    match kind {
        "CloneSet" => validation::CLONESET_RULES,
        "ImagePullJob" => validation::IMAGEPULLJOB_RULES,
        "NodeImage" => validation::NODEIMAGE_RULES,
        "ContainerRecreateRequest" => validation::CRR_RULES,
        other => panic!("unknown kind {other}"),
    }
}

/// Every `(path, rule, message)` in the generated schema of `kind`.
fn rules_in_crd(kind: &str) -> Vec<(String, String, String)> {
    super::schema_nodes(super::schema(kind))
        .into_iter()
        .flat_map(|n| {
            let path = n.path.clone();
            n.node
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |r| {
                    (
                        path.clone(),
                        r["rule"].as_str().unwrap_or_default().to_owned(),
                        r["message"].as_str().unwrap_or_default().to_owned(),
                    )
                })
        })
        .collect()
}

/// Runs the table of CEL rule `id` of `kind`.
fn check_rule(kind: &str, id: &str, valid: &[Case], invalid: &[Case]) {
    let rule = table_rule(kind, id);
    let placed = rules_in_crd(kind)
        .into_iter()
        .filter(|(p, r, m)| p == rule.path && r == rule.rule && m == rule.message)
        .count();
    assert_eq!(
        placed, 1,
        "{kind}/{id}: the rule must be in the generated CRD exactly once at {}",
        rule.path
    );
    assert!(
        !valid.is_empty() && !invalid.is_empty(),
        "{kind}/{id}: table needs both kinds of case"
    );
    for case in valid {
        let out = evaluate(kind, case);
        assert!(
            out.cel.is_empty() && out.schema.is_empty(),
            "{kind}/{id}: valid case rejected: {}\n  {out:?}",
            case.new
        );
    }
    for case in invalid {
        let out = evaluate(kind, case);
        assert!(
            !out.cel.is_empty(),
            "{kind}/{id}: invalid case accepted: {}",
            case.new
        );
        for (path, message) in &out.cel {
            assert!(
                message == rule.message && path == rule.path,
                "{kind}/{id}: invalid case {} failed another rule: {path}: {message}",
                case.new
            );
        }
        assert!(
            out.schema.is_empty(),
            "{kind}/{id}: invalid case {} also violates schema keywords {:?}",
            case.new,
            out.schema
        );
    }
}

/// Runs the table of schema keyword constraint `id` (`<schema path>:<keyword>`).
fn check_keyword(kind: &str, id: &str, valid: &[Case], invalid: &[Case]) {
    let (path, keyword) = id.rsplit_once(':').unwrap_or((id, ""));
    let (parent, field) = match keyword {
        "required" => path.rsplit_once('.').unwrap_or(("", path)),
        _ => (path, ""),
    };
    let node = super::schema_nodes(super::schema(kind))
        .into_iter()
        .find(|n| n.path == parent)
        .unwrap_or_else(|| panic!("{kind}: no schema node {parent}"));
    let present = match keyword {
        "required" => node.node["required"]
            .as_array()
            .is_some_and(|r| r.iter().any(|x| x == field)),
        kw => node.node.get(kw).is_some(),
    };
    assert!(present, "{kind}: `{keyword}` is not set at {parent}");
    for case in valid {
        let out = evaluate(kind, case);
        assert!(
            out.cel.is_empty() && out.schema.is_empty(),
            "{kind}/{id}: valid case rejected: {}\n  {out:?}",
            case.new
        );
    }
    for case in invalid {
        let out = evaluate(kind, case);
        assert_eq!(out.schema, [id], "{kind}/{id}: invalid case {}", case.new);
        assert!(
            out.cel.is_empty(),
            "{kind}/{id}: invalid case {} also fails CEL rules {:?}",
            case.new,
            out.cel
        );
    }
}

/// The rule ids that have a table below; must be exactly the rules of the tables in
/// `inplace_proto::validation`.
const TESTED: &[(&str, &str)] = &[
    ("CloneSet", "selector_not_empty"),
    ("CloneSet", "selector_immutable"),
    ("CloneSet", "selector_expression_valid"),
    ("CloneSet", "selector_matches_template_labels"),
    ("CloneSet", "progress_deadline_exceeds_min_ready"),
    ("CloneSet", "max_surge_forbidden_with_in_place_only"),
    ("CloneSet", "max_unavailable_and_max_surge_not_both_zero"),
    ("CloneSet", "partition_int_or_percent"),
    ("CloneSet", "max_unavailable_int_or_percent"),
    ("CloneSet", "max_surge_int_or_percent"),
    ("CloneSet", "scale_max_unavailable_int_or_percent"),
    ("CloneSet", "priority_weight_or_order"),
    ("CloneSet", "priority_selector_not_empty"),
    ("CloneSet", "priority_selector_expression_valid"),
    ("ImagePullJob", "parallelism_integer"),
    ("ImagePullJob", "selector_names_or_labels"),
    ("ImagePullJob", "selector_expression_valid"),
    ("ImagePullJob", "pod_selector_expression_valid"),
    ("ImagePullJob", "selector_or_pod_selector"),
    ("ImagePullJob", "deadline_and_ttl_only_with_always"),
    ("ImagePullJob", "active_deadline_exceeds_pull_timeout"),
    ("ContainerRecreateRequest", "spec_immutable"),
];

#[test]
fn every_rule_has_a_table_and_the_crds_have_no_other_rules() {
    for kind in [
        "CloneSet",
        "ImagePullJob",
        "NodeImage",
        "ContainerRecreateRequest",
    ] {
        let mut declared: Vec<&str> = rules_of(kind).iter().map(|r| r.id).collect();
        let mut tested: Vec<&str> = TESTED
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, id)| *id)
            .collect();
        declared.sort_unstable();
        tested.sort_unstable();
        assert_eq!(
            declared, tested,
            "{kind}: rules without a table, or tables without a rule"
        );
        assert_eq!(
            rules_in_crd(kind).len(),
            rules_of(kind).len(),
            "{kind}: the CRD holds rules that are not in the validation table"
        );
    }
}

#[test]
fn base_objects_are_valid_and_deserialize() {
    for kind in [
        "CloneSet",
        "ImagePullJob",
        "NodeImage",
        "ContainerRecreateRequest",
    ] {
        let out = evaluate(kind, &create(json!({})));
        assert!(
            out.cel.is_empty() && out.schema.is_empty(),
            "{kind}: {out:?}"
        );
    }
    let _: inplace_proto::CloneSet = serde_json::from_value(base("CloneSet")).expect("CloneSet");
    let _: inplace_proto::ImagePullJob =
        serde_json::from_value(base("ImagePullJob")).expect("ImagePullJob");
    let _: inplace_proto::NodeImage = serde_json::from_value(base("NodeImage")).expect("NodeImage");
    let _: inplace_proto::ContainerRecreateRequest =
        serde_json::from_value(base("ContainerRecreateRequest")).expect("CRR");
}

// ----- CloneSet: CEL rules -----

#[test]
fn selector_not_empty() {
    check_rule(
        "CloneSet",
        "selector_not_empty",
        &[
            create(json!({})),
            create(
                json!({"spec": {"selector": {"matchLabels": null, "matchExpressions": [{"key": "app", "operator": "Exists"}]}}}),
            ),
        ],
        &[
            create(json!({"spec": {"selector": {"matchLabels": null}}})),
            create(json!({"spec": {"selector": {"matchLabels": {"app": null}}}})),
            create(json!({"spec": {"selector": {"matchLabels": null, "matchExpressions": []}}})),
        ],
    );
}

#[test]
fn selector_immutable() {
    check_rule(
        "CloneSet",
        "selector_immutable",
        &[
            update(json!({}), json!({"spec": {"replicas": 5}})),
            update(
                json!({}),
                json!({"spec": {"template": {"metadata": {"labels": {"app": "demo", "v": "2"}}}}}),
            ),
        ],
        &[
            update(
                json!({}),
                json!({"spec": {
                    "selector": {"matchLabels": {"app": "demo", "tier": "web"}},
                    "template": {"metadata": {"labels": {"app": "demo", "tier": "web"}}}
                }}),
            ),
            update(
                json!({}),
                json!({"spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}}),
            ),
        ],
    );
}

#[test]
fn selector_expression_valid() {
    let expr = |e: Value| create(json!({"spec": {"selector": {"matchExpressions": [e]}}}));
    check_rule(
        "CloneSet",
        "selector_expression_valid",
        &[
            expr(json!({"key": "app", "operator": "In", "values": ["demo"]})),
            expr(json!({"key": "tier", "operator": "NotIn", "values": ["db"]})),
            expr(json!({"key": "legacy", "operator": "DoesNotExist"})),
            expr(json!({"key": "app", "operator": "Exists", "values": []})),
        ],
        &[
            expr(json!({"key": "app", "operator": "In"})),
            expr(json!({"key": "app", "operator": "NotIn", "values": []})),
            expr(json!({"key": "app", "operator": "Exists", "values": ["demo"]})),
            expr(json!({"key": "app", "operator": "Equals", "values": ["demo"]})),
        ],
    );
}

#[test]
fn selector_matches_template_labels() {
    check_rule(
        "CloneSet",
        "selector_matches_template_labels",
        &[
            create(
                json!({"spec": {"template": {"metadata": {"labels": {"app": "demo", "extra": "x"}}}}}),
            ),
            create(json!({"spec": {
                "selector": {"matchLabels": null, "matchExpressions": [{"key": "app", "operator": "Exists"}]},
                "template": {"metadata": null}
            }})),
        ],
        &[
            create(json!({"spec": {"template": {"metadata": {"labels": {"app": "other"}}}}})),
            create(json!({"spec": {"template": {"metadata": null}}})),
            create(
                json!({"spec": {"template": {"metadata": {"labels": null, "annotations": {"app": "demo"}}}}}),
            ),
            create(json!({"spec": {"selector": {"matchLabels": {"app": "demo", "tier": "web"}}}})),
        ],
    );
}

#[test]
fn progress_deadline_exceeds_min_ready() {
    check_rule(
        "CloneSet",
        "progress_deadline_exceeds_min_ready",
        &[
            create(json!({"spec": {"progressDeadlineSeconds": 600, "minReadySeconds": 10}})),
            create(json!({"spec": {"progressDeadlineSeconds": 1}})),
            create(
                json!({"spec": {"progressDeadlineSeconds": 2147483647, "minReadySeconds": 2147483647}}),
            ),
            create(json!({"spec": {"minReadySeconds": 60}})),
        ],
        &[
            create(json!({"spec": {"progressDeadlineSeconds": 10, "minReadySeconds": 10}})),
            create(json!({"spec": {"progressDeadlineSeconds": 5, "minReadySeconds": 30}})),
            create(json!({"spec": {"progressDeadlineSeconds": 0}})),
        ],
    );
}

#[test]
fn max_surge_forbidden_with_in_place_only() {
    let strat = |s: Value| create(json!({"spec": {"updateStrategy": s}}));
    check_rule(
        "CloneSet",
        "max_surge_forbidden_with_in_place_only",
        &[
            strat(json!({"type": "InPlaceOnly", "maxSurge": 0})),
            strat(json!({"type": "InPlaceOnly", "maxSurge": "0%"})),
            strat(json!({"type": "InPlaceOnly"})),
            strat(json!({"type": "InPlaceIfPossible", "maxSurge": 3})),
            strat(json!({"maxSurge": "50%"})),
            create(
                json!({"spec": {"replicas": 0, "updateStrategy": {"type": "InPlaceOnly", "maxSurge": "50%"}}}),
            ),
        ],
        &[
            strat(json!({"type": "InPlaceOnly", "maxSurge": 1})),
            strat(json!({"type": "InPlaceOnly", "maxSurge": "10%"})),
            create(
                json!({"spec": {"replicas": null, "updateStrategy": {"type": "InPlaceOnly", "maxSurge": "1%"}}}),
            ),
            create(
                json!({"spec": {"replicas": 0, "updateStrategy": {"type": "InPlaceOnly", "maxSurge": 2}}}),
            ),
        ],
    );
}

#[test]
fn max_unavailable_and_max_surge_not_both_zero() {
    let strat = |s: Value| create(json!({"spec": {"updateStrategy": s}}));
    check_rule(
        "CloneSet",
        "max_unavailable_and_max_surge_not_both_zero",
        &[
            strat(json!({"maxUnavailable": 0, "maxSurge": 1})),
            strat(json!({"maxUnavailable": "0%", "maxSurge": "1%"})),
            strat(json!({"maxUnavailable": "1%", "maxSurge": 0})),
            strat(json!({"maxUnavailable": 1})),
            strat(json!({"maxSurge": 0})),
            strat(json!({"paused": true})),
            create(
                json!({"spec": {"replicas": 0, "updateStrategy": {"maxUnavailable": 0, "maxSurge": 0}}}),
            ),
        ],
        &[
            strat(json!({"maxUnavailable": 0})),
            strat(json!({"maxUnavailable": 0, "maxSurge": 0})),
            strat(json!({"maxUnavailable": "0%", "maxSurge": "0%"})),
            strat(json!({"maxUnavailable": "00%", "maxSurge": 0})),
            create(
                json!({"spec": {"replicas": null, "updateStrategy": {"maxUnavailable": 0, "maxSurge": "0%"}}}),
            ),
        ],
    );
}

#[test]
fn partition_int_or_percent() {
    let p = |v: Value| create(json!({"spec": {"updateStrategy": {"partition": v}}}));
    check_rule(
        "CloneSet",
        "partition_int_or_percent",
        &[
            p(json!(0)),
            p(json!(3)),
            p(json!("0%")),
            p(json!("50%")),
            p(json!("100%")),
            p(json!("007%")),
        ],
        &[
            p(json!(-1)),
            p(json!("101%")),
            p(json!("50")),
            p(json!("abc")),
            p(json!("-5%")),
            p(json!("%")),
            p(json!("1000%")),
        ],
    );
}

#[test]
fn max_unavailable_int_or_percent() {
    let m = |v: Value| {
        create(json!({"spec": {"updateStrategy": {"maxUnavailable": v, "maxSurge": 1}}}))
    };
    check_rule(
        "CloneSet",
        "max_unavailable_int_or_percent",
        &[m(json!(0)), m(json!(2)), m(json!("20%")), m(json!("150%"))],
        &[
            m(json!(-1)),
            m(json!("20")),
            m(json!("abc")),
            m(json!("-1%")),
            m(json!("2.5%")),
        ],
    );
}

#[test]
fn max_surge_int_or_percent() {
    let m = |v: Value| create(json!({"spec": {"updateStrategy": {"maxSurge": v}}}));
    check_rule(
        "CloneSet",
        "max_surge_int_or_percent",
        &[m(json!(0)), m(json!(3)), m(json!("10%"))],
        &[m(json!(-1)), m(json!("10")), m(json!("x%"))],
    );
}

#[test]
fn scale_max_unavailable_int_or_percent() {
    let m = |v: Value| create(json!({"spec": {"scaleStrategy": {"maxUnavailable": v}}}));
    check_rule(
        "CloneSet",
        "scale_max_unavailable_int_or_percent",
        &[m(json!(0)), m(json!(1)), m(json!("10%"))],
        &[m(json!(-2)), m(json!("ten")), m(json!("5"))],
    );
}

#[test]
fn priority_weight_or_order() {
    let weight = json!([{"weight": 50, "matchSelector": {"matchLabels": {"test-key": "foo"}}}]);
    let order = json!([{"orderedKey": "some-label-key"}]);
    let p = |s: Value| create(json!({"spec": {"updateStrategy": {"priorityStrategy": s}}}));
    check_rule(
        "CloneSet",
        "priority_weight_or_order",
        &[
            p(json!({"weightPriority": weight})),
            p(json!({"orderPriority": order})),
            p(json!({"weightPriority": weight, "orderPriority": []})),
            p(json!({})),
        ],
        &[p(json!({"weightPriority": weight, "orderPriority": order}))],
    );
}

#[test]
fn priority_selector_not_empty() {
    let w = |sel: Value| {
        create(json!({"spec": {"updateStrategy": {"priorityStrategy": {
            "weightPriority": [{"weight": 30, "matchSelector": sel}]
        }}}}))
    };
    check_rule(
        "CloneSet",
        "priority_selector_not_empty",
        &[
            w(json!({"matchLabels": {"test-key": "bar"}})),
            w(json!({"matchExpressions": [{"key": "test-key", "operator": "Exists"}]})),
        ],
        &[w(json!({})), w(json!({"matchLabels": {}}))],
    );
}

#[test]
fn priority_selector_expression_valid() {
    let w = |e: Value| {
        create(json!({"spec": {"updateStrategy": {"priorityStrategy": {
            "weightPriority": [{"weight": 30, "matchSelector": {"matchLabels": {"a": "b"}, "matchExpressions": [e]}}]
        }}}}))
    };
    check_rule(
        "CloneSet",
        "priority_selector_expression_valid",
        &[w(json!({"key": "k", "operator": "NotIn", "values": ["x"]}))],
        &[
            w(json!({"key": "k", "operator": "Exists", "values": ["x"]})),
            w(json!({"key": "k", "operator": "in", "values": ["x"]})),
        ],
    );
}

// ----- CloneSet: schema keywords -----

#[test]
fn replicas_not_negative() {
    check_keyword(
        "CloneSet",
        "spec.replicas:minimum",
        &[create(json!({"spec": {"replicas": 0}}))],
        &[create(json!({"spec": {"replicas": -1}}))],
    );
}

#[test]
fn selector_and_template_required() {
    check_keyword(
        "CloneSet",
        "spec.selector:required",
        &[create(json!({}))],
        &[create(json!({"spec": {"selector": null}}))],
    );
    check_keyword(
        "CloneSet",
        "spec.template:required",
        &[create(json!({}))],
        &[create(json!({"spec": {"template": null}}))],
    );
}

#[test]
fn update_strategy_type_is_an_enum() {
    let t = |v: &str| create(json!({"spec": {"updateStrategy": {"type": v}}}));
    check_keyword(
        "CloneSet",
        "spec.updateStrategy.type:enum",
        &[
            t("ReCreate"),
            t("InPlaceIfPossible"),
            t("InPlaceOnly"),
            t("OnDelete"),
        ],
        &[t("RollingUpdate"), t("recreate"), t("")],
    );
}

#[test]
fn priority_weight_0_to_100() {
    let w = |n: i64| {
        create(json!({"spec": {"updateStrategy": {"priorityStrategy": {
            "weightPriority": [{"weight": n, "matchSelector": {"matchLabels": {"a": "b"}}}]
        }}}}))
    };
    let path = "spec.updateStrategy.priorityStrategy.weightPriority[].weight";
    check_keyword(
        "CloneSet",
        &format!("{path}:maximum"),
        &[w(0), w(100)],
        &[w(101)],
    );
    check_keyword("CloneSet", &format!("{path}:minimum"), &[w(1)], &[w(-1)]);
}

#[test]
fn ordered_key_not_empty() {
    let o = |k: &str| {
        create(
            json!({"spec": {"updateStrategy": {"priorityStrategy": {"orderPriority": [{"orderedKey": k}]}}}}),
        )
    };
    check_keyword(
        "CloneSet",
        "spec.updateStrategy.priorityStrategy.orderPriority[].orderedKey:minLength",
        &[o("some-label-key")],
        &[o("")],
    );
}

#[test]
fn scatter_key_not_empty_and_terms_unique() {
    let s = |terms: Value| create(json!({"spec": {"updateStrategy": {"scatterStrategy": terms}}}));
    check_keyword(
        "CloneSet",
        "spec.updateStrategy.scatterStrategy[].key:minLength",
        &[s(json!([{"key": "foo", "value": "bar"}]))],
        &[s(json!([{"key": "", "value": "bar"}]))],
    );
    check_keyword(
        "CloneSet",
        "spec.updateStrategy.scatterStrategy:x-kubernetes-list-type",
        &[
            s(json!([{"key": "foo", "value": "bar"}, {"key": "foo", "value": "baz"}])),
            s(json!([{"key": "foo", "value": "bar"}, {"key": "zone", "value": "bar"}])),
        ],
        &[s(
            json!([{"key": "foo", "value": "bar"}, {"key": "foo", "value": "bar"}]),
        )],
    );
}

#[test]
fn pods_to_delete_unique() {
    let p = |names: Value| create(json!({"spec": {"scaleStrategy": {"podsToDelete": names}}}));
    check_keyword(
        "CloneSet",
        "spec.scaleStrategy.podsToDelete:x-kubernetes-list-type",
        &[p(json!(["sample-9m4hp", "sample-abcde"]))],
        &[p(json!(["sample-9m4hp", "sample-9m4hp"]))],
    );
}

#[test]
fn selector_labels_bounded() {
    let long = "v".repeat(64);
    check_keyword(
        "CloneSet",
        "spec.template.metadata.labels.*:maxLength",
        &[create(
            json!({"spec": {"template": {"metadata": {"labels": {"app": "demo", "x": "v".repeat(63)}}}}}),
        )],
        &[create(
            json!({"spec": {"template": {"metadata": {"labels": {"app": "demo", "x": long}}}}}),
        )],
    );
    // With the base object's `app` label: 64 labels pass, 65 do not.
    let labels = |n: usize| -> Value {
        (0..n)
            .map(|i| (format!("k{i}"), json!("v")))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    check_keyword(
        "CloneSet",
        "spec.selector.matchLabels:maxProperties",
        &[create(json!({"spec": {
            "selector": {"matchLabels": labels(63)},
            "template": {"metadata": {"labels": labels(63)}}
        }}))],
        &[create(json!({"spec": {
            "selector": {"matchLabels": labels(64)},
            "template": {"metadata": {"labels": labels(64)}}
        }}))],
    );
    // A selector label is also a template label, so a long one violates both bounds.
    let out = evaluate(
        "CloneSet",
        &create(json!({"spec": {
            "selector": {"matchLabels": {"x": long}},
            "template": {"metadata": {"labels": {"x": long}}}
        }})),
    );
    assert!(out.cel.is_empty(), "{out:?}");
    assert_eq!(
        out.schema,
        [
            "spec.selector.matchLabels.*:maxLength",
            "spec.template.metadata.labels.*:maxLength"
        ]
    );
}

#[test]
fn counts_not_negative() {
    for field in ["minReadySeconds", "revisionHistoryLimit"] {
        check_keyword(
            "CloneSet",
            &format!("spec.{field}:minimum"),
            &[create(json!({"spec": {field: 0}}))],
            &[create(json!({"spec": {field: -1}}))],
        );
    }
    check_keyword(
        "CloneSet",
        "spec.updateStrategy.inPlaceUpdateStrategy.gracePeriodSeconds:minimum",
        &[create(
            json!({"spec": {"updateStrategy": {"inPlaceUpdateStrategy": {"gracePeriodSeconds": 10}}}}),
        )],
        &[create(
            json!({"spec": {"updateStrategy": {"inPlaceUpdateStrategy": {"gracePeriodSeconds": -1}}}}),
        )],
    );
}

// ----- ImagePullJob -----

#[test]
fn parallelism_integer() {
    let p = |v: Value| create(json!({"spec": {"parallelism": v}}));
    check_rule(
        "ImagePullJob",
        "parallelism_integer",
        &[p(json!(0)), p(json!(1)), p(json!(10))],
        &[p(json!("10")), p(json!("50%")), p(json!(-1))],
    );
}

#[test]
fn selector_names_or_labels() {
    let s = |sel: Value| create(json!({"spec": {"selector": sel}}));
    check_rule(
        "ImagePullJob",
        "selector_names_or_labels",
        &[
            s(json!({"names": ["node-1", "node-2"]})),
            s(json!({"matchLabels": {"pool": "web"}})),
            s(json!({"names": [], "matchLabels": {"pool": "web"}})),
        ],
        &[
            s(json!({"names": ["node-1"], "matchLabels": {"pool": "web"}})),
            s(
                json!({"names": ["node-1"], "matchExpressions": [{"key": "pool", "operator": "Exists"}]}),
            ),
            s(json!({"names": ["node-1"], "matchLabels": {}})),
        ],
    );
}

#[test]
fn image_pull_job_selector_expression_valid() {
    let s = |e: Value| create(json!({"spec": {"selector": {"matchExpressions": [e]}}}));
    check_rule(
        "ImagePullJob",
        "selector_expression_valid",
        &[s(json!({"key": "pool", "operator": "Exists"}))],
        &[s(json!({"key": "pool", "operator": "In", "values": []}))],
    );
}

#[test]
fn pod_selector_expression_valid() {
    let s = |e: Value| create(json!({"spec": {"podSelector": {"matchExpressions": [e]}}}));
    check_rule(
        "ImagePullJob",
        "pod_selector_expression_valid",
        &[s(
            json!({"key": "app", "operator": "In", "values": ["demo"]}),
        )],
        &[s(
            json!({"key": "app", "operator": "DoesNotExist", "values": ["demo"]}),
        )],
    );
}

#[test]
fn selector_or_pod_selector() {
    check_rule(
        "ImagePullJob",
        "selector_or_pod_selector",
        &[
            create(json!({"spec": {"selector": {"names": ["node-1"]}}})),
            create(json!({"spec": {"podSelector": {"matchLabels": {"app": "demo"}}}})),
            create(json!({})),
        ],
        &[create(json!({"spec": {
            "selector": {"names": ["node-1"]},
            "podSelector": {"matchLabels": {"app": "demo"}}
        }}))],
    );
}

#[test]
fn deadline_and_ttl_only_with_always() {
    let c = |p: Value| create(json!({"spec": {"completionPolicy": p}}));
    check_rule(
        "ImagePullJob",
        "deadline_and_ttl_only_with_always",
        &[
            c(
                json!({"type": "Always", "activeDeadlineSeconds": 1200, "ttlSecondsAfterFinished": 300}),
            ),
            c(json!({"ttlSecondsAfterFinished": 300})),
            c(json!({"type": "Never"})),
        ],
        &[
            c(json!({"type": "Never", "ttlSecondsAfterFinished": 300})),
            c(json!({"type": "Never", "activeDeadlineSeconds": 1200})),
        ],
    );
}

#[test]
fn active_deadline_exceeds_pull_timeout() {
    check_rule(
        "ImagePullJob",
        "active_deadline_exceeds_pull_timeout",
        &[
            create(json!({"spec": {"completionPolicy": {"activeDeadlineSeconds": 601}}})),
            create(
                json!({"spec": {"completionPolicy": {"activeDeadlineSeconds": 100}, "pullPolicy": {"timeoutSeconds": 50}}}),
            ),
            create(json!({"spec": {"pullPolicy": {"timeoutSeconds": 50}}})),
        ],
        &[
            create(json!({"spec": {"completionPolicy": {"activeDeadlineSeconds": 600}}})),
            create(
                json!({"spec": {"completionPolicy": {"activeDeadlineSeconds": 100}, "pullPolicy": {}}}),
            ),
            create(
                json!({"spec": {"completionPolicy": {"activeDeadlineSeconds": 300}, "pullPolicy": {"timeoutSeconds": 300}}}),
            ),
        ],
    );
}

#[test]
fn image_required_and_not_empty() {
    check_keyword(
        "ImagePullJob",
        "spec.image:required",
        &[create(json!({}))],
        &[create(json!({"spec": {"image": null}}))],
    );
    check_keyword(
        "ImagePullJob",
        "spec.image:minLength",
        &[create(json!({"spec": {"image": "busybox"}}))],
        &[create(json!({"spec": {"image": ""}}))],
    );
}

#[test]
fn node_names_unique() {
    let n = |names: Value| create(json!({"spec": {"selector": {"names": names}}}));
    check_keyword(
        "ImagePullJob",
        "spec.selector.names:x-kubernetes-list-type",
        &[n(json!(["node-1", "node-2"]))],
        &[n(json!(["node-1", "node-1"]))],
    );
}

#[test]
fn image_pull_job_enums() {
    check_keyword(
        "ImagePullJob",
        "spec.completionPolicy.type:enum",
        &[create(
            json!({"spec": {"completionPolicy": {"type": "Never"}}}),
        )],
        &[create(
            json!({"spec": {"completionPolicy": {"type": "Sometimes"}}}),
        )],
    );
    check_keyword(
        "ImagePullJob",
        "spec.imagePullPolicy:enum",
        &[
            create(json!({"spec": {"imagePullPolicy": "Always"}})),
            create(json!({"spec": {"imagePullPolicy": "IfNotPresent"}})),
        ],
        &[create(json!({"spec": {"imagePullPolicy": "Never"}}))],
    );
}

// ----- NodeImage -----

#[test]
fn node_image_tags_unique_and_progress_bounded() {
    check_keyword(
        "NodeImage",
        "spec.images.*.tags:x-kubernetes-list-type",
        &[create(
            json!({"spec": {"images": {"nginx": {"tags": [{"tag": "1.25"}, {"tag": "alpine"}]}}}}),
        )],
        &[create(
            json!({"spec": {"images": {"nginx": {"tags": [{"tag": "alpine"}, {"tag": "alpine", "version": 2}]}}}}),
        )],
    );
    let progress = |p: i64| {
        create(
            json!({"status": {"imageStatuses": {"nginx": {"tags": [{"tag": "alpine", "phase": "Pulling", "progress": p}]}}}}),
        )
    };
    check_keyword(
        "NodeImage",
        "status.imageStatuses.*.tags[].progress:maximum",
        &[progress(0), progress(100)],
        &[progress(101)],
    );
    check_keyword(
        "NodeImage",
        "status.imageStatuses.*.tags[].progress:minimum",
        &[progress(50)],
        &[progress(-1)],
    );
    check_keyword(
        "NodeImage",
        "status.imageStatuses.*.tags[].phase:enum",
        &[create(
            json!({"status": {"imageStatuses": {"nginx": {"tags": [{"tag": "alpine", "phase": "Waiting"}]}}}}),
        )],
        &[create(
            json!({"status": {"imageStatuses": {"nginx": {"tags": [{"tag": "alpine", "phase": "Done"}]}}}}),
        )],
    );
}

// ----- ContainerRecreateRequest -----

fn filled() -> Value {
    json!({"containerID": "containerd://0123", "restartCount": 0})
}

/// A CRR as the controller leaves it after filling it in.
fn filled_in() -> Value {
    json!({"spec": {"containers": [{"name": "main", "statusContext": filled()}]}})
}

#[test]
fn spec_immutable() {
    check_rule(
        "ContainerRecreateRequest",
        "spec_immutable",
        &[
            update(
                json!({}),
                json!({"metadata": {"labels": {"crr.apps.kruise.io/active": "true"}}}),
            ),
            update(json!({}), json!({"status": {"phase": "Recreating"}})),
            // the controller fills the spec in once, as the reference's webhook does
            update(
                json!({}),
                json!({"spec": {"containers": [{"name": "main", "statusContext": filled()}],
                    "strategy": {"terminationGracePeriodSeconds": 30}}}),
            ),
            // before it is filled in, the request is still the user's
            update(json!({}), json!({"spec": {"podName": "demo-fghij"}})),
            update(
                filled_in(),
                json!({"spec": {"containers": [{"name": "main", "statusContext": filled()}]},
                    "metadata": {"labels": {"crr.apps.kruise.io/active": "true"}}}),
            ),
        ],
        &[
            update(filled_in(), json!({"spec": {"podName": "demo-fghij"}})),
            update(
                filled_in(),
                json!({"spec": {"containers": [{"name": "main", "statusContext": filled()},
                    {"name": "sidecar"}]}}),
            ),
            update(
                filled_in(),
                json!({"spec": {"containers": [{"name": "main", "statusContext":
                    {"containerID": "containerd://other", "restartCount": 1}}]}}),
            ),
            update(
                filled_in(),
                json!({"spec": {"strategy": {"orderedRecreate": true}}}),
            ),
        ],
    );
}

#[test]
fn crr_active_deadline_at_least_3() {
    let d = |n: i64| create(json!({"spec": {"activeDeadlineSeconds": n}}));
    check_keyword(
        "ContainerRecreateRequest",
        "spec.activeDeadlineSeconds:minimum",
        &[d(3), d(300)],
        &[d(2), d(0)],
    );
}

#[test]
fn crr_containers_not_empty_and_unique() {
    let c = |list: Value| create(json!({"spec": {"containers": list}}));
    check_keyword(
        "ContainerRecreateRequest",
        "spec.containers:minItems",
        &[c(json!([{"name": "a"}, {"name": "b"}]))],
        &[c(json!([]))],
    );
    check_keyword(
        "ContainerRecreateRequest",
        "spec.containers:x-kubernetes-list-type",
        &[c(json!([{"name": "a"}]))],
        &[c(json!([{"name": "a"}, {"name": "a"}]))],
    );
    check_keyword(
        "ContainerRecreateRequest",
        "spec.strategy.failurePolicy:enum",
        &[create(
            json!({"spec": {"strategy": {"failurePolicy": "Ignore"}}}),
        )],
        &[create(
            json!({"spec": {"strategy": {"failurePolicy": "Retry"}}}),
        )],
    );
}
