//! Pod and PVC templates kept as raw JSON.
//!
//! The reference CRD declares `template` and `volumeClaimTemplates` schemaless with
//! `x-kubernetes-preserve-unknown-fields`, and users put fields into them that a given
//! k8s-openapi release may not know yet. Deserializing into the typed structs would
//! silently drop such fields, change the revision hash and lose them on every write. So
//! the raw object is what we store, hash and write back, and the typed view is derived
//! on demand.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A JSON object that keeps every field it was given.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawObject(pub Map<String, Value>);

impl RawObject {
    /// The typed view of this object. Unknown fields are dropped in the view only.
    pub fn typed<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(Value::Object(self.0.clone()))
    }

    /// Builds a raw object from a typed value (used by tests and generators).
    pub fn from_typed<T: Serialize>(value: &T) -> Result<Self, serde_json::Error> {
        match serde_json::to_value(value)? {
            Value::Object(map) => Ok(Self(map)),
            other => Err(serde::de::Error::custom(format!(
                "expected an object, got {other}"
            ))),
        }
    }

    /// Looks up a nested field by path.
    pub fn pointer(&self, path: &[&str]) -> Option<&Value> {
        let (first, rest) = path.split_first()?;
        let mut cur = self.0.get(*first)?;
        for key in rest {
            cur = cur.get(*key)?;
        }
        Some(cur)
    }

    /// A string map at `path` (labels, annotations), empty when absent.
    pub fn string_map(&self, path: &[&str]) -> std::collections::BTreeMap<String, String> {
        self.pointer(path)
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// `spec.template` of a CloneSet: a PodTemplateSpec kept verbatim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PodTemplate(pub RawObject);

impl PodTemplate {
    pub fn typed(&self) -> Result<PodTemplateSpec, serde_json::Error> {
        self.0.typed()
    }

    pub fn from_typed(spec: &PodTemplateSpec) -> Result<Self, serde_json::Error> {
        RawObject::from_typed(spec).map(Self)
    }

    /// `metadata.labels` of the template.
    pub fn labels(&self) -> std::collections::BTreeMap<String, String> {
        self.0.string_map(&["metadata", "labels"])
    }

    /// `metadata.annotations` of the template.
    pub fn annotations(&self) -> std::collections::BTreeMap<String, String> {
        self.0.string_map(&["metadata", "annotations"])
    }
}

/// One entry of `spec.volumeClaimTemplates`: a PersistentVolumeClaim kept verbatim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClaimTemplate(pub RawObject);

impl ClaimTemplate {
    pub fn typed(&self) -> Result<PersistentVolumeClaim, serde_json::Error> {
        self.0.typed()
    }

    /// `metadata.name`, which names the pod volume and prefixes the PVC names.
    pub fn name(&self) -> Option<&str> {
        self.0
            .pointer(&["metadata", "name"])
            .and_then(Value::as_str)
    }
}

/// Schema of a preserved object that still exposes `metadata.labels` and
/// `metadata.annotations` as typed maps, so that CEL rules can read them.
fn preserved_object_with_metadata() -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "metadata": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {
                    "name": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}}
                }
            }
        }
    })
}

impl JsonSchema for RawObject {
    fn schema_name() -> Cow<'static, str> {
        "RawObject".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
    }
}

impl JsonSchema for PodTemplate {
    fn schema_name() -> Cow<'static, str> {
        "PodTemplate".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        preserved_object_with_metadata()
    }
}

impl JsonSchema for ClaimTemplate {
    fn schema_name() -> Cow<'static, str> {
        "ClaimTemplate".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        preserved_object_with_metadata()
    }
}
