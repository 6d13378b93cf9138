//! The objects behind an [`super::Action::Create`]: the pod made from a revision's template
//! and its PVCs (docs "Support PVCs"; OpenKruise `utils/cloneset_utils.go` and
//! `sync/cloneset_scale.go`).
//!
//! Pure functions over the raw template, so that fields unknown to k8s-openapi survive into
//! the created pod; typed variants are offered for callers that want them (they drop such
//! fields).
//!
//! The pod (reference `NewVersionedPods` + `GetPodFromTemplate`):
//! - name `<cloneset>-<id>`, namespace of the CloneSet, controller reference to it;
//! - labels, annotations and finalizers of the template, plus `controller-revision-hash`
//!   (full revision name, or the short hash with the short-hash option),
//!   `pod-template-hash` (always the short hash), `apps.kruise.io/cloneset-instance-id`,
//!   `lifecycle.apps.kruise.io/state: PreparingNormal` and its timestamp annotation;
//! - the template spec, with the `InPlaceUpdateReady` readiness gate appended once, and
//!   the `KruisePodReady` gate appended once (the reference's pod webhook adds that one;
//!   inplace has no webhook, and the applier starts both conditions True);
//! - the container launch barrier env where the template declares launch priorities (the
//!   reference's pod webhook injects it; see [`super::launch_barrier`]);
//! - one volume per volumeClaimTemplate, named after it, claiming `<vct>-<cloneset>-<id>`,
//!   first, followed by the template's other volumes (a template volume with a VCT's name
//!   is replaced).
//!
//! Each PVC is its claim template with name `<vct>-<cloneset>-<id>`, the CloneSet's
//! namespace, labels = template labels + selector `matchLabels` + instance id, and the
//! CloneSet's controller reference added.

use std::collections::BTreeMap;

use inplace_proto::{CloneSet, LifecycleState, PodTemplate, keys};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::revision::{owner_reference, short_hash};

/// `<cloneset>-<id>`.
pub fn pod_name(cloneset: &str, instance_id: &str) -> String {
    format!("{cloneset}-{instance_id}")
}

/// `<vct>-<cloneset>-<id>`.
pub fn pvc_name(vct: &str, cloneset: &str, instance_id: &str) -> String {
    format!("{vct}-{cloneset}-{instance_id}")
}

fn cloneset_name(cs: &CloneSet) -> String {
    cs.metadata.name.clone().unwrap_or_default()
}

/// Removes `key` from `map` as an object (a missing or non-object value gives an empty one).
fn take_object(map: &mut Map<String, Value>, key: &str) -> Map<String, Value> {
    match map.remove(key) {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// Removes `key` from `map` as an array (a missing or non-array value gives an empty one).
fn take_array(map: &mut Map<String, Value>, key: &str) -> Vec<Value> {
    match map.remove(key) {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    }
}

/// The owner reference as JSON.
fn owner_json(cs: &CloneSet) -> Value {
    serde_json::to_value(owner_reference(cs)).unwrap_or(Value::Null)
}

/// The labels a created pod carries beyond its template's: `controller-revision-hash`
/// (full revision name, or the short hash with `short_hash_label`), `pod-template-hash`,
/// the instance id and lifecycle state PreparingNormal.
pub fn added_labels(
    revision: &str,
    instance_id: &str,
    short_hash_label: bool,
) -> BTreeMap<String, String> {
    let hash = short_hash(revision).to_owned();
    BTreeMap::from([
        (
            keys::REVISION_LABEL.to_owned(),
            if short_hash_label {
                hash.clone()
            } else {
                revision.to_owned()
            },
        ),
        (keys::POD_TEMPLATE_HASH_LABEL.to_owned(), hash),
        (keys::INSTANCE_ID_LABEL.to_owned(), instance_id.to_owned()),
        (
            keys::LIFECYCLE_STATE_LABEL.to_owned(),
            LifecycleState::PreparingNormal.as_str().to_owned(),
        ),
    ])
}

/// The pod for instance `instance_id` of revision `revision` (whose template is
/// `template`), as JSON. `now` stamps the lifecycle timestamp annotation.
pub fn pod_json(
    cs: &CloneSet,
    template: &PodTemplate,
    revision: &str,
    instance_id: &str,
    short_hash_label: bool,
    now: Timestamp,
) -> Value {
    let labels = added_labels(revision, instance_id, short_hash_label);
    pod_json_with_labels(cs, template, instance_id, &labels, now)
}

/// [`pod_json`] with the labels added over the template's given ([`added_labels`]).
pub fn pod_json_with_labels(
    cs: &CloneSet,
    template: &PodTemplate,
    instance_id: &str,
    added: &BTreeMap<String, String>,
    now: Timestamp,
) -> Value {
    let cs_name = cloneset_name(cs);
    let tpl_meta = template.0.0.get("metadata").and_then(Value::as_object);
    let pick = |key: &str| tpl_meta.and_then(|m| m.get(key)).cloned();

    let mut labels = template.labels();
    labels.extend(added.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut annotations = template.annotations();
    let stamp = Timestamp::from_second(now.as_second()).unwrap_or(now);
    annotations.insert(
        keys::LIFECYCLE_TIMESTAMP_ANNOTATION.into(),
        stamp.to_string(),
    );

    let mut meta = Map::new();
    meta.insert("name".into(), json!(pod_name(&cs_name, instance_id)));
    if let Some(ns) = &cs.metadata.namespace {
        meta.insert("namespace".into(), json!(ns));
    }
    meta.insert("labels".into(), json!(labels));
    meta.insert("annotations".into(), json!(annotations));
    if let Some(finalizers) =
        pick("finalizers").filter(|f| f.as_array().is_some_and(|a| !a.is_empty()))
    {
        meta.insert("finalizers".into(), finalizers);
    }
    meta.insert("ownerReferences".into(), json!([owner_json(cs)]));

    let mut spec = template
        .0
        .0
        .get("spec")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut gates = take_array(&mut spec, "readinessGates");
    for gate in [
        keys::INPLACE_UPDATE_READY_CONDITION,
        keys::KRUISE_POD_READY_CONDITION,
    ] {
        if !gates.iter().any(|g| g["conditionType"] == gate) {
            gates.push(json!({"conditionType": gate}));
        }
    }
    spec.insert("readinessGates".into(), Value::Array(gates));
    super::launch_barrier::render(&template.0.0, &mut spec, &pod_name(&cs_name, instance_id));
    let claims: Vec<(String, String)> = cs
        .spec
        .volume_claim_templates
        .iter()
        .filter_map(|vct| vct.name())
        .map(|vct| (vct.to_owned(), pvc_name(vct, &cs_name, instance_id)))
        .collect();
    if !claims.is_empty() {
        let others: Vec<Value> = take_array(&mut spec, "volumes")
            .into_iter()
            .filter(|v| {
                let name = v.get("name").and_then(Value::as_str);
                !claims.iter().any(|(vct, _)| Some(vct.as_str()) == name)
            })
            .collect();
        let mut volumes: Vec<Value> = claims
            .iter()
            .map(|(vct, claim)| json!({"name": vct, "persistentVolumeClaim": {"claimName": claim}}))
            .collect();
        volumes.extend(others);
        spec.insert("volumes".into(), Value::Array(volumes));
    }

    let mut pod = Map::new();
    pod.insert("apiVersion".into(), json!("v1"));
    pod.insert("kind".into(), json!("Pod"));
    pod.insert("metadata".into(), Value::Object(meta));
    pod.insert("spec".into(), Value::Object(spec));
    Value::Object(pod)
}

/// [`pod_json`] as a typed [`Pod`] (fields unknown to k8s-openapi are dropped).
pub fn pod(
    cs: &CloneSet,
    template: &PodTemplate,
    revision: &str,
    instance_id: &str,
    short_hash_label: bool,
    now: Timestamp,
) -> Result<Pod, serde_json::Error> {
    serde_json::from_value(pod_json(
        cs,
        template,
        revision,
        instance_id,
        short_hash_label,
        now,
    ))
}

/// The PVCs of instance `instance_id`, one per volumeClaimTemplate, as JSON.
pub fn pvcs_json(cs: &CloneSet, instance_id: &str) -> Vec<Value> {
    let cs_name = cloneset_name(cs);
    cs.spec
        .volume_claim_templates
        .iter()
        .filter_map(|vct| {
            let vct_name = vct.name()?.to_owned();
            let mut obj = vct.0.0.clone();
            obj.remove("status");
            let mut meta = take_object(&mut obj, "metadata");
            meta.insert(
                "name".into(),
                json!(pvc_name(&vct_name, &cs_name, instance_id)),
            );
            if let Some(ns) = &cs.metadata.namespace {
                meta.insert("namespace".into(), json!(ns));
            }
            let mut labels = take_object(&mut meta, "labels");
            for (k, v) in cs.spec.selector.match_labels.iter().flatten() {
                labels.insert(k.clone(), json!(v));
            }
            labels.insert(keys::INSTANCE_ID_LABEL.into(), json!(instance_id));
            meta.insert("labels".into(), Value::Object(labels));
            let mut owners = take_array(&mut meta, "ownerReferences");
            owners.push(owner_json(cs));
            meta.insert("ownerReferences".into(), Value::Array(owners));
            obj.insert("metadata".into(), Value::Object(meta));
            let mut out = Map::new();
            out.insert("apiVersion".into(), json!("v1"));
            out.insert("kind".into(), json!("PersistentVolumeClaim"));
            out.extend(obj);
            Some(Value::Object(out))
        })
        .collect()
}

/// [`pvcs_json`] as typed [`PersistentVolumeClaim`]s.
pub fn pvcs(
    cs: &CloneSet,
    instance_id: &str,
) -> Result<Vec<PersistentVolumeClaim>, serde_json::Error> {
    pvcs_json(cs, instance_id)
        .into_iter()
        .map(serde_json::from_value)
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::fixtures::{cloneset, t};

    fn with_vct() -> CloneSet {
        cloneset(json!({
            "template": {
                "metadata": {"labels": {"app": "demo"}, "annotations": {"a": "b"}, "finalizers": ["x/y"]},
                "spec": {
                    "containers": [{"name": "main", "image": "nginx:2", "futureField": 1}],
                    "volumes": [{"name": "cache", "emptyDir": {}}, {"name": "data-vol", "emptyDir": {}}],
                    "readinessGates": [{"conditionType": "InPlaceUpdateReady"}]
                }
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data-vol", "labels": {"tier": "db"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}
            }]
        }))
    }

    #[test]
    fn created_pod_carries_revision_hash_instance_id_and_preparing_normal() {
        let cs = with_vct();
        let p = pod_json(&cs, &cs.spec.template, "demo-abc123", "xk2bq", false, t(5));
        let labels = &p["metadata"]["labels"];
        assert_eq!(p["metadata"]["name"], "demo-xk2bq");
        assert_eq!(p["metadata"]["namespace"], "default");
        assert_eq!(labels["app"], "demo");
        assert_eq!(labels[keys::REVISION_LABEL], "demo-abc123");
        assert_eq!(labels[keys::POD_TEMPLATE_HASH_LABEL], "abc123");
        assert_eq!(labels[keys::INSTANCE_ID_LABEL], "xk2bq");
        assert_eq!(labels[keys::LIFECYCLE_STATE_LABEL], "PreparingNormal");
        assert_eq!(p["metadata"]["annotations"]["a"], "b");
        assert_eq!(
            p["metadata"]["annotations"][keys::LIFECYCLE_TIMESTAMP_ANNOTATION],
            "2026-01-01T00:00:05Z"
        );
        assert_eq!(p["metadata"]["finalizers"], json!(["x/y"]));
        let owner = &p["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "CloneSet");
        assert_eq!(owner["controller"], true);
        assert_eq!(owner["uid"], "cs-uid");
        // Unknown fields survive.
        assert_eq!(p["spec"]["containers"][0]["futureField"], 1);
    }

    #[test]
    fn short_hash_option_writes_only_the_hash_in_the_revision_label() {
        let cs = with_vct();
        let p = pod_json(&cs, &cs.spec.template, "demo-abc123", "xk2bq", true, t(0));
        assert_eq!(p["metadata"]["labels"][keys::REVISION_LABEL], "abc123");
        assert_eq!(
            p["metadata"]["labels"][keys::POD_TEMPLATE_HASH_LABEL],
            "abc123"
        );
    }

    #[test]
    fn readiness_gates_are_added_once() {
        let cs = with_vct();
        let p = pod_json(&cs, &cs.spec.template, "demo-abc", "xk2bq", false, t(0));
        assert_eq!(
            p["spec"]["readinessGates"],
            json!([{"conditionType": "InPlaceUpdateReady"}, {"conditionType": "KruisePodReady"}])
        );
    }

    #[test]
    fn each_volume_claim_template_becomes_a_pvc_volume_of_the_pod() {
        let cs = with_vct();
        let p = pod_json(&cs, &cs.spec.template, "demo-abc", "xk2bq", false, t(0));
        assert_eq!(
            p["spec"]["volumes"],
            json!([
                {"name": "data-vol", "persistentVolumeClaim": {"claimName": "data-vol-demo-xk2bq"}},
                {"name": "cache", "emptyDir": {}}
            ])
        );
        // The typed form parses.
        let typed = pod(&cs, &cs.spec.template, "demo-abc", "xk2bq", false, t(0)).unwrap();
        assert_eq!(typed.metadata.name.as_deref(), Some("demo-xk2bq"));
    }

    #[test]
    fn pvc_per_template_has_selector_labels_instance_id_and_cloneset_owner() {
        let cs = with_vct();
        let claims = pvcs_json(&cs, "xk2bq");
        assert_eq!(claims.len(), 1);
        let c = &claims[0];
        assert_eq!(c["metadata"]["name"], "data-vol-demo-xk2bq");
        assert_eq!(c["metadata"]["namespace"], "default");
        assert_eq!(c["metadata"]["labels"]["tier"], "db");
        assert_eq!(c["metadata"]["labels"]["app"], "demo");
        assert_eq!(c["metadata"]["labels"][keys::INSTANCE_ID_LABEL], "xk2bq");
        assert_eq!(c["metadata"]["ownerReferences"][0]["name"], "demo");
        assert_eq!(c["spec"]["resources"]["requests"]["storage"], "20Gi");
        assert_eq!(pvcs(&cs, "xk2bq").unwrap().len(), 1);
    }

    #[test]
    fn no_volume_claim_templates_means_no_pvcs_and_volumes_untouched() {
        let cs = cloneset(json!({}));
        assert!(pvcs_json(&cs, "abcde").is_empty());
        let p = pod_json(&cs, &cs.spec.template, "demo-abc", "abcde", false, t(0));
        assert!(p["spec"].get("volumes").is_none());
    }
}
