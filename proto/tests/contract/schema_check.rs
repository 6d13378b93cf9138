//! A small validator for the schema keywords the CRDs use (type, enum, bounds, required,
//! list types), so that constraints expressed as keywords rather than CEL are tested
//! offline as well. It refuses keywords it does not implement, so it never passes an
//! object by ignoring a constraint. Violations are named `<schema path>:<keyword>`.

use serde_json::Value;

/// Keywords that validate nothing by themselves or are handled elsewhere.
const NEUTRAL: &[&str] = &[
    "type",
    "format",
    "properties",
    "additionalProperties",
    "items",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
    // Applied before validation (`inplace_proto::defaults::apply`), validates nothing.
    "default",
];

/// Validating keywords this checker implements.
const IMPLEMENTED: &[&str] = &[
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "maxProperties",
    "required",
    "x-kubernetes-list-type",
];

/// The violations of `value` against `schema`.
pub fn violations(schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(schema, value, "", &mut out);
    out
}

fn join(path: &str, seg: &str) -> String {
    if path.is_empty() {
        seg.to_owned()
    } else {
        format!("{path}.{seg}")
    }
}

fn walk(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    let Some(s) = schema.as_object() else { return };
    for key in s.keys() {
        assert!(
            NEUTRAL.contains(&key.as_str()) || IMPLEMENTED.contains(&key.as_str()),
            "schema_check does not implement `{key}` (at {path})"
        );
    }
    let mut fail = |kw: &str| out.push(format!("{path}:{kw}"));
    let type_ok = match s.get("type").and_then(Value::as_str) {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some(_) => false,
        None if s.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) => {
            value.is_i64() || value.is_string()
        }
        None => true,
    };
    if !type_ok {
        fail("type");
        return;
    }
    if let Some(Value::Array(allowed)) = s.get("enum")
        && !allowed.contains(value)
    {
        fail("enum");
    }
    let num = value.as_f64();
    if let (Some(min), Some(v)) = (s.get("minimum").and_then(Value::as_f64), num)
        && v < min
    {
        fail("minimum");
    }
    if let (Some(max), Some(v)) = (s.get("maximum").and_then(Value::as_f64), num)
        && v > max
    {
        fail("maximum");
    }
    if let Some(text) = value.as_str() {
        let len = text.chars().count() as u64;
        if s.get("minLength")
            .and_then(Value::as_u64)
            .is_some_and(|m| len < m)
        {
            fail("minLength");
        }
        if s.get("maxLength")
            .and_then(Value::as_u64)
            .is_some_and(|m| len > m)
        {
            fail("maxLength");
        }
    }
    if let Some(list) = value.as_array() {
        let len = list.len() as u64;
        if s.get("minItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| len < m)
        {
            fail("minItems");
        }
        if s.get("maxItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| len > m)
        {
            fail("maxItems");
        }
        let key_of = |item: &Value| -> Value {
            match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("map") => Value::Array(
                    s.get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(|k| item.get(k).cloned().unwrap_or(Value::Null))
                        .collect(),
                ),
                _ => item.clone(),
            }
        };
        if matches!(
            s.get("x-kubernetes-list-type").and_then(Value::as_str),
            Some("set" | "map")
        ) {
            let keys: Vec<Value> = list.iter().map(key_of).collect();
            let duplicate = keys.iter().enumerate().any(|(i, k)| keys[..i].contains(k));
            if duplicate {
                fail("x-kubernetes-list-type");
            }
        }
        if let Some(items) = s.get("items") {
            for item in list {
                walk(items, item, &format!("{path}[]"), out);
            }
        }
    }
    if let Some(obj) = value.as_object() {
        if s.get("maxProperties")
            .and_then(Value::as_u64)
            .is_some_and(|m| obj.len() as u64 > m)
        {
            out.push(format!("{path}:maxProperties"));
        }
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = r.as_str()
                && !obj.contains_key(name)
            {
                out.push(format!("{}:required", join(path, name)));
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, v) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(sub) => walk(sub, v, &join(path, k), out),
                None => {
                    if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
                        walk(ap, v, &join(path, "*"), out);
                    }
                }
            }
        }
    }
}

#[test]
fn checker_finds_what_it_implements() {
    let schema = serde_json::json!({
        "type": "object",
        "required": ["a"],
        "properties": {
            "a": {"type": "integer", "minimum": 0, "maximum": 3},
            "b": {"type": "string", "enum": ["x", "y"], "minLength": 1},
            "c": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set", "minItems": 1},
            "d": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                  "items": {"type": "object", "required": ["k"], "properties": {"k": {"type": "string"}}}},
            "e": {"x-kubernetes-int-or-string": true},
            "m": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 2}}
        }
    });
    let ok = serde_json::json!({"a": 1, "b": "x", "c": ["p"], "d": [{"k": "1"}, {"k": "2"}], "e": "5%", "m": {"q": "ab"}});
    assert_eq!(violations(&schema, &ok), Vec::<String>::new());
    let bad = serde_json::json!({"b": "", "c": ["p", "p"], "d": [{"k": "1"}, {"k": "1"}], "e": true, "m": {"q": "abc"}});
    let mut found = violations(&schema, &bad);
    found.sort();
    assert_eq!(
        found,
        [
            "a:required",
            "b:enum",
            "b:minLength",
            "c:x-kubernetes-list-type",
            "d:x-kubernetes-list-type",
            "e:type",
            "m.*:maxLength"
        ]
    );
    assert_eq!(
        violations(&schema, &serde_json::json!({"a": 9})),
        ["a:maximum"]
    );
    assert_eq!(
        violations(&schema, &serde_json::json!({"a": -1})),
        ["a:minimum"]
    );
}
