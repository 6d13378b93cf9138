//! Tests of the API contract: the generated CRDs (committed files, structure for a v1.20
//! API server, every CEL rule evaluated offline), the reference documentation's YAML
//! round-tripping through the types, the defaults the CRDs carry, and the serde of the types.
//!
//! One test binary with modules, to link the dependencies once.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod admission_policy;
mod cel_rules;
mod crd_files;
mod daemon_node_binding;
mod defaults;
mod delete_protection;
mod docs_yaml;
mod schema_check;
mod serde_types;
mod structural;

use std::sync::OnceLock;

use inplace_proto::crdgen::{self, GeneratedCrd};
use serde_json::Value;

/// The generated CRDs, computed once per test run.
pub fn generated() -> &'static [GeneratedCrd] {
    static CRDS: OnceLock<Vec<GeneratedCrd>> = OnceLock::new();
    CRDS.get_or_init(|| crdgen::generate().expect("the CRDs generate"))
}

/// The generated CRD of `kind`.
pub fn crd(kind: &str) -> &'static GeneratedCrd {
    generated()
        .iter()
        .find(|c| c.kind == kind)
        .unwrap_or_else(|| panic!("no generated CRD for kind {kind}"))
}

/// The `openAPIV3Schema` of `kind`'s CRD.
pub fn schema(kind: &str) -> &'static Value {
    crd(kind)
        .schema()
        .unwrap_or_else(|| panic!("{kind}: no openAPIV3Schema"))
}

/// A schema node and its path in the syntax of `inplace_proto::validation`
/// (`a.b[]`, `*` for additionalProperties).
#[derive(Debug)]
pub struct SchemaNode<'a> {
    pub path: String,
    pub node: &'a Value,
}

/// Every schema node under `root` (itself included), depth first.
pub fn schema_nodes(root: &Value) -> Vec<SchemaNode<'_>> {
    fn walk<'a>(node: &'a Value, path: String, out: &mut Vec<SchemaNode<'a>>) {
        out.push(SchemaNode {
            path: path.clone(),
            node,
        });
        let join = |seg: &str| {
            if path.is_empty() {
                seg.to_owned()
            } else {
                format!("{path}.{seg}")
            }
        };
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (name, child) in props {
                walk(child, join(name), out);
            }
        }
        if let Some(items) = node.get("items") {
            walk(items, format!("{path}[]"), out);
        }
        if let Some(ap) = node.get("additionalProperties").filter(|a| a.is_object()) {
            walk(ap, join("*"), out);
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            if let Some(list) = node.get(key).and_then(Value::as_array) {
                for branch in list {
                    walk(branch, path.clone(), out);
                }
            }
        }
        if let Some(not) = node.get("not") {
            walk(not, path.clone(), out);
        }
    }
    let mut out = Vec::new();
    walk(root, String::new(), &mut out);
    out
}

/// JSON merge patch (RFC 7386): `null` removes a key, objects merge, anything else
/// replaces.
pub fn merge(mut base: Value, patch: &Value) -> Value {
    fn apply(target: &mut Value, patch: &Value) {
        match patch {
            Value::Object(p) => {
                if !target.is_object() {
                    *target = Value::Object(serde_json::Map::new());
                }
                if let Value::Object(t) = target {
                    for (k, v) in p {
                        if v.is_null() {
                            t.remove(k);
                        } else {
                            apply(t.entry(k.clone()).or_insert(Value::Null), v);
                        }
                    }
                }
            }
            other => *target = other.clone(),
        }
    }
    apply(&mut base, patch);
    base
}

/// The fields of `input` that `output` lacks or has with another value, as paths.
/// `output` may have more fields (defaults, empty collections).
pub fn lost_fields(input: &Value, output: &Value, path: &str) -> Vec<String> {
    match (input, output) {
        (Value::Object(i), Value::Object(o)) => i
            .iter()
            .flat_map(|(k, v)| {
                let p = format!("{path}.{k}");
                match o.get(k) {
                    Some(ov) => lost_fields(v, ov, &p),
                    None => vec![format!("{p} (missing)")],
                }
            })
            .collect(),
        (Value::Array(i), Value::Array(o)) if i.len() == o.len() => i
            .iter()
            .zip(o)
            .enumerate()
            .flat_map(|(n, (a, b))| lost_fields(a, b, &format!("{path}[{n}]")))
            .collect(),
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => Vec::new(),
        (a, b) if a == b => Vec::new(),
        (a, b) => vec![format!("{path}: {a} became {b}")],
    }
}

/// `generated` exposes CRD names the tests refer to.
#[test]
fn the_five_kinds_are_generated() {
    let kinds: Vec<&str> = generated().iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "CloneSet",
            "ImagePullJob",
            "ImageListPullJob",
            "NodeImage",
            "ContainerRecreateRequest"
        ]
    );
}
