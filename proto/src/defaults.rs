//! The defaults the CRDs carry as structural `default:` values, per kind, placed at schema
//! paths by [`crate::crdgen`]; and [`apply`], the API server's defaulting algorithm over a
//! schema, for offline use (tests, previews from files).
//!
//! OpenKruise writes its defaults in a mutating webhook (`apis/apps/defaults/v1alpha1.go`,
//! and the ContainerRecreateRequest handler of `pkg/webhook/containerrecreaterequest`).
//! inplace has no webhook; what a structural schema can express is a `default:` here, so
//! the stored object reads as the reference's does (`kubectl get -o yaml`, the scale
//! subresource, `DESIRED`, HPA). Every default below is one the reference's webhook
//! writes; the readers (the accessor methods of the types) apply the same values, so an
//! object stored before these defaults existed behaves the same (the API server also
//! applies them when it reads such an object from etcd).
//!
//! What a structural default cannot express, and is therefore not here:
//! - defaults that depend on another field: with `updateStrategy.type` InPlaceIfPossible or
//!   InPlaceOnly the reference adds an empty `inPlaceUpdateStrategy` (no effect: its only
//!   field, `gracePeriodSeconds`, defaults to 0 when read);
//! - defaults inside the pod template and the volumeClaimTemplates (the Kubernetes pod and
//!   PVC defaults; they change the revision hash, see the README);
//! - defaults taken from other objects or the clock: a NodeImage tag's `createdAt` (the
//!   controller writes it), a CRR's `terminationGracePeriodSeconds` from its pod, and the
//!   CRR labels naming the pod's node and UID;
//! - the ImagePullJob protection finalizer (metadata).
//!
//! Rules the API server enforces on defaults (checked by the contract tests): a default
//! validates against its schema node (and, on servers ≥ 1.25, the CEL rules there), is
//! pruned (names no field the schema does not know), and sits neither in `metadata` nor
//! inside `allOf`/`anyOf`/`oneOf`/`not`. A default on an object applies only where that
//! object exists, so each optional parent that the reference always fills has a `{}`
//! default of its own (the API server then defaults the fields inside it).

use serde_json::{Map, Value};

/// A value of a [`SchemaDefault`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultValue {
    Int(i64),
    Str(&'static str),
    /// `{}`: the object exists, its fields take their own defaults.
    EmptyObject,
}

impl DefaultValue {
    /// The JSON value.
    pub fn to_json(self) -> Value {
        match self {
            Self::Int(n) => Value::from(n),
            Self::Str(s) => Value::from(s),
            Self::EmptyObject => Value::Object(Map::new()),
        }
    }
}

/// A `default:` at a schema path (syntax of [`crate::validation::CelRule::path`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchemaDefault {
    pub path: &'static str,
    pub value: DefaultValue,
}

const fn int(path: &'static str, n: i64) -> SchemaDefault {
    SchemaDefault {
        path,
        value: DefaultValue::Int(n),
    }
}

const fn string(path: &'static str, s: &'static str) -> SchemaDefault {
    SchemaDefault {
        path,
        value: DefaultValue::Str(s),
    }
}

const fn object(path: &'static str) -> SchemaDefault {
    SchemaDefault {
        path,
        value: DefaultValue::EmptyObject,
    }
}

/// CloneSet (`SetDefaultsCloneSet`). `scaleStrategy` and `updateStrategy` are plain
/// structs in the reference's Go types, so its stored objects always carry them.
pub const CLONESET_DEFAULTS: &[SchemaDefault] = &[
    int("spec.replicas", 1),
    int("spec.revisionHistoryLimit", 10),
    object("spec.scaleStrategy"),
    object("spec.updateStrategy"),
    string("spec.updateStrategy.type", "ReCreate"),
    int("spec.updateStrategy.partition", 0),
    string("spec.updateStrategy.maxUnavailable", "20%"),
    int("spec.updateStrategy.maxSurge", 0),
];

/// ImagePullJob (`SetDefaultsImagePullJob`; `completionPolicy` is a plain struct there).
/// `parallelism` has no webhook default (its default of 1 is applied when read).
pub const IMAGEPULLJOB_DEFAULTS: &[SchemaDefault] = &[
    object("spec.completionPolicy"),
    string("spec.completionPolicy.type", "Always"),
    object("spec.pullPolicy"),
    int("spec.pullPolicy.timeoutSeconds", 600),
    int("spec.pullPolicy.backoffLimit", 3),
    string("spec.imagePullPolicy", "IfNotPresent"),
];

/// ImageListPullJob (`SetDefaultsImageListPullJobV1beta1`): ImagePullJob's but for
/// `imagePullPolicy`, which the jobs it creates get from their own defaults.
pub const IMAGELISTPULLJOB_DEFAULTS: &[SchemaDefault] = &[
    object("spec.completionPolicy"),
    string("spec.completionPolicy.type", "Always"),
    object("spec.pullPolicy"),
    int("spec.pullPolicy.timeoutSeconds", 600),
    int("spec.pullPolicy.backoffLimit", 3),
];

/// NodeImage (`SetDefaultsNodeImage`): every tag gets a pull policy with timeout and
/// backoff limit.
pub const NODEIMAGE_DEFAULTS: &[SchemaDefault] = &[
    object("spec.images.*.tags[].pullPolicy"),
    int("spec.images.*.tags[].pullPolicy.timeoutSeconds", 600),
    int("spec.images.*.tags[].pullPolicy.backoffLimit", 3),
];

/// ContainerRecreateRequest (the CRR mutating handler): `strategy` and its
/// `failurePolicy`.
pub const CRR_DEFAULTS: &[SchemaDefault] = &[
    object("spec.strategy"),
    string("spec.strategy.failurePolicy", "Fail"),
];

/// The defaults of `kind`, or none for an unknown kind.
pub fn of_kind(kind: &str) -> &'static [SchemaDefault] {
    match kind {
        "CloneSet" => CLONESET_DEFAULTS,
        "ImagePullJob" => IMAGEPULLJOB_DEFAULTS,
        "ImageListPullJob" => IMAGELISTPULLJOB_DEFAULTS,
        "NodeImage" => NODEIMAGE_DEFAULTS,
        "ContainerRecreateRequest" => CRR_DEFAULTS,
        _ => &[],
    }
}

/// Applies the `default:` values of `schema` to `value` as the API server does (its
/// structural defaulting): in every object, each absent (or `null`, the server prunes
/// those first) property with a default gets a copy of it; then every field is defaulted
/// by its own schema, the ones just added included, so a `{}` default fills in its
/// children's defaults. Lists default their items, maps their values.
pub fn apply(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(obj) => {
            let props = schema.get("properties").and_then(Value::as_object);
            if let Some(props) = props {
                for (name, prop) in props {
                    if let Some(default) = prop.get("default")
                        && obj.get(name).is_none_or(Value::is_null)
                    {
                        obj.insert(name.clone(), default.clone());
                    }
                }
            }
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (name, child) in obj.iter_mut() {
                match (props.and_then(|p| p.get(name)), additional) {
                    (Some(s), _) | (None, Some(s)) => apply(s, child),
                    (None, None) => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_fill_absent_and_null_fields_and_nest_through_empty_objects() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer", "default": 1},
                "o": {"type": "object", "default": {}, "properties": {
                    "x": {"type": "string", "default": "x"},
                    "y": {"type": "integer"}
                }},
                "l": {"type": "array", "items": {"type": "object", "properties": {
                    "p": {"type": "object", "default": {}, "properties": {"t": {"type": "integer", "default": 600}}}
                }}},
                "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                    "z": {"type": "boolean", "default": true}
                }}}
            }
        });
        let mut v = json!({"a": null, "l": [{}, {"p": {"t": 5}}], "m": {"k": {}}});
        apply(&schema, &mut v);
        assert_eq!(
            v,
            json!({
                "a": 1,
                "o": {"x": "x"},
                "l": [{"p": {"t": 600}}, {"p": {"t": 5}}],
                "m": {"k": {"z": true}}
            })
        );
        // Set values are kept.
        let mut v = json!({"a": 0, "o": {"x": "set", "y": 2}});
        apply(&schema, &mut v);
        assert_eq!(v["a"], 0);
        assert_eq!(v["o"], json!({"x": "set", "y": 2}));
    }

    #[test]
    fn every_kind_has_its_table() {
        for kind in [
            "CloneSet",
            "ImagePullJob",
            "ImageListPullJob",
            "NodeImage",
            "ContainerRecreateRequest",
        ] {
            assert!(!of_kind(kind).is_empty(), "{kind}");
        }
        assert!(of_kind("Pod").is_empty());
    }
}
