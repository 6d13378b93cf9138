//! The CRDs stay acceptable to a v1.20 API server: `apiextensions.k8s.io/v1` fields that
//! 1.20 knows, structural schemas (the rules of the apiextensions "structural schema"
//! validation), and no schema feature newer than 1.20 except `x-kubernetes-validations`
//! (which 1.20 drops). The live counterpart is the test bed, which applies
//! `deploy/crds/*.yaml` to its v1.20 server.

use serde_json::Value;

/// The `JSONSchemaProps` fields of apiextensions v1 in Kubernetes 1.20.
const V1_20_SCHEMA_KEYWORDS: &[&str] = &[
    "id",
    "$schema",
    "$ref",
    "description",
    "type",
    "format",
    "title",
    "default",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "items",
    "allOf",
    "oneOf",
    "anyOf",
    "not",
    "properties",
    "additionalProperties",
    "patternProperties",
    "dependencies",
    "additionalItems",
    "definitions",
    "externalDocs",
    "example",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
];

/// Newer than 1.20, tolerated because an older server drops it (see crdgen's docs).
const DROPPED_BY_V1_20: &[&str] = &["x-kubernetes-validations"];

/// Keywords a structural schema must not use at all (or only in ways we never need).
const FORBIDDEN: &[&str] = &[
    "$ref",
    "id",
    "$schema",
    "definitions",
    "dependencies",
    "patternProperties",
    "additionalItems",
    "uniqueItems",
];

/// Value validations are fine inside `allOf`/`anyOf`/`oneOf`/`not`; these are not.
const FORBIDDEN_IN_JUNCTORS: &[&str] = &[
    "description",
    "type",
    "default",
    "additionalProperties",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
];

fn is_true(node: &Value, key: &str) -> bool {
    node.get(key).and_then(Value::as_bool) == Some(true)
}

/// Problems of one schema tree, as `path: message` lines.
fn structural_problems(root: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if root.get("type").and_then(Value::as_str) != Some("object") {
        out.push("<root>: type must be object".to_owned());
    }
    if let Some(meta) = root.pointer("/properties/metadata") {
        let allowed = ["type", "properties"];
        if meta
            .as_object()
            .is_some_and(|m| m.keys().any(|k| !allowed.contains(&k.as_str())))
        {
            out.push("metadata: only type and name/generateName restrictions are allowed".into());
        }
    }
    check_node(root, "<root>", false, &mut out);
    out
}

fn check_node(node: &Value, path: &str, in_junctor: bool, out: &mut Vec<String>) {
    let Some(map) = node.as_object() else {
        out.push(format!("{path}: schema is not an object"));
        return;
    };
    for key in map.keys() {
        let k = key.as_str();
        if !V1_20_SCHEMA_KEYWORDS.contains(&k) && !DROPPED_BY_V1_20.contains(&k) {
            out.push(format!("{path}: `{k}` is unknown to a v1.20 API server"));
        }
        if FORBIDDEN.contains(&k) {
            out.push(format!(
                "{path}: `{k}` is not allowed in a structural schema"
            ));
        }
        if in_junctor && FORBIDDEN_IN_JUNCTORS.contains(&k) {
            out.push(format!(
                "{path}: `{k}` is not allowed inside allOf/anyOf/oneOf/not"
            ));
        }
    }
    let ty = map.get("type").and_then(Value::as_str);
    let int_or_string = is_true(node, "x-kubernetes-int-or-string");
    let preserve = is_true(node, "x-kubernetes-preserve-unknown-fields");
    if !in_junctor {
        match ty {
            Some("object" | "array" | "string" | "integer" | "number" | "boolean") => {}
            Some(other) => out.push(format!("{path}: unknown type `{other}`")),
            None if int_or_string || preserve => {}
            None => out.push(format!("{path}: type must be non-empty")),
        }
    }
    if int_or_string && ty.is_some() {
        out.push(format!(
            "{path}: x-kubernetes-int-or-string must not have a type"
        ));
    }
    if map.contains_key("properties") && ty.is_some_and(|t| t != "object") {
        out.push(format!("{path}: properties on a non-object"));
    }
    if map.contains_key("items") && ty.is_some_and(|t| t != "array") {
        out.push(format!("{path}: items on a non-array"));
    }
    if ty == Some("array") && !map.contains_key("items") {
        out.push(format!("{path}: array without items"));
    }
    match map.get("additionalProperties") {
        None => {}
        Some(Value::Object(_)) if map.contains_key("properties") => out.push(format!(
            "{path}: properties and additionalProperties together"
        )),
        Some(Value::Object(_)) => {}
        Some(other) => out.push(format!(
            "{path}: additionalProperties must be a schema, got {other}"
        )),
    }
    if let Some(Value::Array(values)) = map.get("enum") {
        for v in values {
            let ok = match ty {
                Some("string") => v.is_string(),
                Some("integer") => v.is_i64(),
                Some("boolean") => v.is_boolean(),
                _ => false,
            };
            if !ok {
                out.push(format!("{path}: enum value {v} does not fit type {ty:?}"));
            }
        }
    }
    if let Some(Value::Array(required)) = map.get("required") {
        let props = map.get("properties").and_then(Value::as_object);
        for r in required {
            let name = r.as_str().unwrap_or_default();
            if !preserve && props.is_none_or(|p| !p.contains_key(name)) {
                out.push(format!("{path}: required `{name}` is not a property"));
            }
        }
    }
    check_list_type(map, path, out);
    check_validations(map, path, out);

    if let Some(Value::Object(props)) = map.get("properties") {
        for (name, child) in props {
            check_node(child, &format!("{path}.{name}"), in_junctor, out);
        }
    }
    if let Some(items) = map.get("items") {
        if items.is_array() {
            out.push(format!("{path}: items must be one schema"));
        } else {
            check_node(items, &format!("{path}[]"), in_junctor, out);
        }
    }
    if let Some(ap @ Value::Object(_)) = map.get("additionalProperties") {
        check_node(ap, &format!("{path}.*"), in_junctor, out);
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = map.get(key) {
            for b in branches {
                check_node(b, &format!("{path}({key})"), true, out);
            }
        }
    }
    if let Some(not) = map.get("not") {
        check_node(not, &format!("{path}(not)"), true, out);
    }
}

fn check_list_type(map: &serde_json::Map<String, Value>, path: &str, out: &mut Vec<String>) {
    let list_type = map.get("x-kubernetes-list-type").and_then(Value::as_str);
    let keys = map.get("x-kubernetes-list-map-keys");
    if keys.is_some() && list_type != Some("map") {
        out.push(format!("{path}: list-map-keys without list-type map"));
    }
    let Some(list_type) = list_type else { return };
    if map.get("type").and_then(Value::as_str) != Some("array") {
        out.push(format!("{path}: list-type on a non-array"));
        return;
    }
    let items = map.get("items").cloned().unwrap_or_default();
    let item_type = items.get("type").and_then(Value::as_str);
    match list_type {
        "atomic" => {}
        "set" => {
            if !matches!(item_type, Some("string" | "integer" | "number" | "boolean")) {
                out.push(format!("{path}: list-type set needs scalar items"));
            }
        }
        "map" => {
            if item_type != Some("object") {
                out.push(format!("{path}: list-type map needs object items"));
            }
            let keys: Vec<&str> = keys
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if keys.is_empty() {
                out.push(format!("{path}: list-type map without list-map-keys"));
            }
            let required: Vec<&str> = items
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for key in keys {
                let prop = items.pointer(&format!("/properties/{key}"));
                let scalar = prop
                    .and_then(|p| p.get("type"))
                    .and_then(Value::as_str)
                    .is_some_and(|t| t != "object" && t != "array");
                if !scalar {
                    out.push(format!(
                        "{path}: list-map key `{key}` is not a scalar property"
                    ));
                }
                // 1.20 requires map keys to be required (defaults came later to be
                // accepted as an alternative).
                if !required.contains(&key) {
                    out.push(format!("{path}: list-map key `{key}` must be required"));
                }
            }
        }
        other => out.push(format!("{path}: unknown list-type `{other}`")),
    }
}

fn check_validations(map: &serde_json::Map<String, Value>, path: &str, out: &mut Vec<String>) {
    let Some(rules) = map.get("x-kubernetes-validations") else {
        return;
    };
    let Some(rules) = rules.as_array() else {
        out.push(format!("{path}: x-kubernetes-validations is not a list"));
        return;
    };
    for r in rules {
        let Some(obj) = r.as_object() else {
            out.push(format!("{path}: a validation rule is not an object"));
            continue;
        };
        // fieldPath/reason (1.28+), messageExpression (1.27+), optionalOldSelf (1.29+)
        // would be unknown fields to the servers between 1.25 and those versions.
        for key in obj.keys() {
            if key != "rule" && key != "message" {
                out.push(format!("{path}: validation field `{key}` is too new"));
            }
        }
        let message = obj
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if message.is_empty() || message.contains('\n') {
            out.push(format!("{path}: every rule needs a one-line message"));
        }
        if obj
            .get("rule")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            out.push(format!("{path}: empty rule"));
        }
    }
}

#[test]
fn schemas_are_structural_and_known_to_v1_20() {
    // Every version: the older ones are copies of the stored one, edited by crdgen.
    for crd in super::generated() {
        for version in crd.versions() {
            let schema = version
                .pointer("/schema/openAPIV3Schema")
                .expect("every version has a schema");
            let problems = structural_problems(schema);
            assert!(
                problems.is_empty(),
                "{} {}:\n  {}",
                crd.kind,
                version["name"],
                problems.join("\n  ")
            );
        }
    }
}

#[test]
fn every_rule_compiles() {
    for crd in super::generated() {
        for version in crd.versions() {
            let schema = version
                .pointer("/schema/openAPIV3Schema")
                .expect("every version has a schema");
            let compiled = kube_cel::compile_schema(schema);
            let mut errors = Vec::new();
            collect_compile_errors(&compiled, &mut errors);
            assert!(
                errors.is_empty(),
                "{} {}: {errors:?}",
                crd.kind,
                version["name"]
            );
        }
    }
}

fn collect_compile_errors(node: &kube_cel::CompiledSchema, out: &mut Vec<String>) {
    out.extend(node.compilation_errors().iter().map(|e| e.to_string()));
    node.properties
        .values()
        .for_each(|c| collect_compile_errors(c, out));
    if let Some(items) = &node.items {
        collect_compile_errors(items, out);
    }
    if let Some(ap) = &node.additional_properties {
        collect_compile_errors(ap, out);
    }
}

/// The CRD object itself uses only `apiextensions.k8s.io/v1` fields of 1.20.
#[test]
fn crd_objects_use_v1_20_fields() {
    fn keys(v: &Value) -> Vec<&str> {
        v.as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }
    fn only(what: &str, v: &Value, allowed: &[&str], out: &mut Vec<String>) {
        for k in keys(v) {
            if !allowed.contains(&k) {
                out.push(format!("{what}: `{k}` is unknown to v1.20"));
            }
        }
    }
    for crd in super::generated() {
        let c = &crd.crd;
        let mut out = Vec::new();
        assert_eq!(c["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(c["kind"], "CustomResourceDefinition");
        only(
            "CRD",
            c,
            &["apiVersion", "kind", "metadata", "spec"],
            &mut out,
        );
        only(
            "spec",
            &c["spec"],
            &[
                "group",
                "names",
                "scope",
                "versions",
                "conversion",
                "preserveUnknownFields",
            ],
            &mut out,
        );
        only(
            "names",
            &c["spec"]["names"],
            &[
                "plural",
                "singular",
                "shortNames",
                "kind",
                "listKind",
                "categories",
            ],
            &mut out,
        );
        let versions = c["spec"]["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        // OpenKruise v1.9.0's versions: v1alpha1 only, or v1alpha1 served beside the stored
        // v1beta1 (crdgen's SERVED_VERSIONS).
        let names: Vec<(&str, bool, bool)> = versions
            .iter()
            .map(|v| {
                (
                    v["name"].as_str().unwrap_or_default(),
                    v["served"] == true,
                    v["storage"] == true,
                )
            })
            .collect();
        let want: &[(&str, bool, bool)] = match crd.kind.as_str() {
            "ImagePullJob" | "NodeImage" | "ImageListPullJob" => {
                &[("v1alpha1", true, false), ("v1beta1", true, true)]
            }
            _ => &[("v1alpha1", true, true)],
        };
        assert_eq!(names, want, "{}: versions", crd.kind);
        for v in &versions {
            only(
                "version",
                v,
                &[
                    "name",
                    "served",
                    "storage",
                    "deprecated",
                    "deprecationWarning",
                    "schema",
                    "subresources",
                    "additionalPrinterColumns",
                ],
                &mut out,
            );
            assert_eq!(
                v["subresources"]["status"],
                serde_json::json!({}),
                "{}",
                crd.kind
            );
            only(
                "subresources",
                &v["subresources"],
                &["status", "scale"],
                &mut out,
            );
            for col in v["additionalPrinterColumns"]
                .as_array()
                .into_iter()
                .flatten()
            {
                only(
                    "printer column",
                    col,
                    &[
                        "name",
                        "type",
                        "format",
                        "description",
                        "priority",
                        "jsonPath",
                    ],
                    &mut out,
                );
                let ty = col["type"].as_str().unwrap_or_default();
                assert!(
                    ["integer", "number", "string", "boolean", "date"].contains(&ty),
                    "{}: column type {ty}",
                    crd.kind
                );
            }
        }
        assert!(out.is_empty(), "{}:\n  {}", crd.kind, out.join("\n  "));
    }
}

#[test]
fn printer_columns_match_the_reference() {
    // The stored version's columns (v1.9.0's `v1beta1` for ImagePullJob and NodeImage).
    let stored = |kind: &str| -> Value {
        super::crd(kind)
            .versions()
            .find(|v| v["storage"] == true)
            .cloned()
            .unwrap_or_default()
    };
    let names = |version: &Value| -> Vec<String> {
        version["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let cols = |kind: &str| names(&stored(kind));
    assert_eq!(
        cols("CloneSet"),
        [
            "DESIRED",
            "UPDATED",
            "UPDATED_READY",
            "UPDATED_AVAILABLE",
            "READY",
            "TOTAL",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    assert_eq!(
        cols("ImagePullJob"),
        ["TOTAL", "ACTIVE", "SUCCEED", "FAILED", "AGE"]
    );
    // v1.9.0's ImagePullJob v1alpha1 keeps the MESSAGE column its v1beta1 dropped.
    let alpha = super::crd("ImagePullJob")
        .versions()
        .find(|v| v["name"] == "v1alpha1")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        names(&alpha),
        ["TOTAL", "ACTIVE", "SUCCEED", "FAILED", "AGE", "MESSAGE"]
    );
    assert_eq!(
        cols("NodeImage"),
        ["DESIRED", "PULLING", "SUCCEED", "FAILED", "AGE"]
    );
    assert_eq!(
        cols("ContainerRecreateRequest"),
        ["PHASE", "POD", "NODE", "AGE"]
    );
    let scale = &stored("CloneSet")["subresources"]["scale"];
    assert_eq!(scale["labelSelectorPath"], ".status.labelSelector");
    assert_eq!(scale["specReplicasPath"], ".spec.replicas");
    assert_eq!(scale["statusReplicasPath"], ".status.replicas");
    assert_eq!(super::crd("NodeImage").crd["spec"]["scope"], "Cluster");
    for kind in ["CloneSet", "ImagePullJob", "ContainerRecreateRequest"] {
        assert_eq!(
            super::crd(kind).crd["spec"]["scope"],
            "Namespaced",
            "{kind}"
        );
    }
}

/// The checker itself catches what it is meant to catch.
#[test]
fn structural_check_rejects_non_structural_schemas() {
    let bad = serde_json::json!({
        "type": "object",
        "properties": {
            "a": {"properties": {"b": {"type": "string"}}},
            "c": {"type": "string", "x-kubernetes-int-or-string": true},
            "d": {"type": "array", "items": {"type": "object"}, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"]},
            "e": {"type": "string", "x-kubernetes-validations": [{"rule": "true", "message": "m", "fieldPath": ".x"}]},
            "f": {"anyOf": [{"type": "string"}]},
            "g": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
            "h": {"type": "string", "x-kubernetes-selectable": true}
        }
    });
    let problems = structural_problems(&bad);
    for expected in [
        "<root>.a: type must be non-empty",
        "<root>.c: x-kubernetes-int-or-string must not have a type",
        "<root>.d: list-map key `k` is not a scalar property",
        "<root>.d: list-map key `k` must be required",
        "<root>.e: validation field `fieldPath` is too new",
        "<root>.f(anyOf): `type` is not allowed inside allOf/anyOf/oneOf/not",
        "<root>.g: `uniqueItems` is not allowed in a structural schema",
        "<root>.h: `x-kubernetes-selectable` is unknown to a v1.20 API server",
    ] {
        assert!(
            problems.iter().any(|p| p == expected),
            "expected `{expected}` in {problems:#?}"
        );
    }
}
