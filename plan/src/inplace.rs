//! In-place eligibility: may a pod move from its revision's template to the target
//! revision's template without being recreated? (docs "Update types", "In-Place Update
//! Support for Modifying Resources"; OpenKruise `pkg/util/inplaceupdate/`,
//! `inplace_update_defaults.go` and `inplace_update_vertical.go`).
//!
//! The two templates are compared field by field, the way the reference reads the JSON
//! patch between the two revisions:
//!
//! - `spec.containers[N].image` replaced → in place;
//! - `metadata.labels` / `metadata.annotations` added, changed or removed → in place;
//!   containers whose env reads a changed key through the downward API
//!   (`fieldRef: metadata.labels['k']` / `metadata.annotations['k']`) are listed in
//!   [`InPlaceChange::env_from_metadata`]: the kubelet only evaluates such env at container
//!   start, so the node daemon must restart them (reference gate
//!   `InPlaceUpdateEnvFromMetadata`, beta and on by default; always on here);
//! - the annotation `kubectl.kubernetes.io/restartedAt` added, changed or removed (what
//!   `kubectl inplace rollout restart` writes) → in place, and every container whose image
//!   does not change and whose env does not read a changed key anyway is listed in
//!   [`InPlaceChange::restarts`]: the node daemon stops each through CRI and the kubelet
//!   starts it again with the same spec (not in the reference, which only patches the
//!   annotation onto the pod and restarts nothing);
//! - with [`PlanOptions::in_place_vertical_scaling`]: `cpu`/`memory` in
//!   `spec.containers[N].resources.{requests,limits}` replaced (not added or removed),
//!   when the pod's QoS class stays the same → in place;
//! - anything else (a container added, removed or renamed, env, ports, probes, other
//!   resources, initContainers, volumes, other metadata, …) → recreate, or for
//!   `InPlaceOnly` refused with the field named.
//!
//! Absent fields, `null`, `{}` and `[]` compare equal (the reference compares its typed
//! encoding, which omits empty fields).

use std::collections::{BTreeMap, BTreeSet};

use inplace_proto::{CloneSet, CloneSetUpdateStrategyType, keys};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value};

use super::model::PlanOptions;
use super::quantity;
use super::revision;

/// What an in-place update changes; the act layer builds the pod patch from it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InPlaceChange {
    /// Container name → new image.
    pub images: BTreeMap<String, String>,
    /// Label key → new value, `None` when the label is removed.
    pub labels: BTreeMap<String, Option<String>>,
    /// Annotation key → new value, `None` when the annotation is removed.
    pub annotations: BTreeMap<String, Option<String>>,
    /// Container name → its new resources (only with in-place vertical scaling).
    pub resources: BTreeMap<String, ResourceRequirements>,
    /// Container name → the changed labels / annotations its env reads through the
    /// downward API, with their new values (the state's `containerRefMetadata`). Not
    /// empty means `updateEnvFromMetadata`: the daemon restarts these containers.
    pub env_from_metadata: BTreeMap<String, ObjectMeta>,
    /// Containers restarted with an unchanged spec because the template's
    /// `kubectl.kubernetes.io/restartedAt` changed (the state's `restartContainers`).
    pub restarts: BTreeSet<String>,
}

impl InPlaceChange {
    /// Nothing but the revision label changes (e.g. only volumeClaimTemplates changed).
    pub fn is_empty(&self) -> bool {
        self.images.is_empty()
            && self.labels.is_empty()
            && self.annotations.is_empty()
            && self.resources.is_empty()
            && self.restarts.is_empty()
    }

    /// One line for events, logs and the plan preview.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (container, image) in &self.images {
            parts.push(format!("image of {container} → {image}"));
        }
        let meta = |what: &str, map: &BTreeMap<String, Option<String>>| {
            (!map.is_empty()).then(|| {
                let keys: Vec<&str> = map.keys().map(String::as_str).collect();
                format!("{what} {}", keys.join(", "))
            })
        };
        parts.extend(meta("labels", &self.labels));
        parts.extend(meta("annotations", &self.annotations));
        for container in self.resources.keys() {
            parts.push(format!("cpu/memory of {container}"));
        }
        if !self.env_from_metadata.is_empty() {
            let names: Vec<&str> = self.env_from_metadata.keys().map(String::as_str).collect();
            parts.push(format!("env from metadata of {}", names.join(", ")));
        }
        if !self.restarts.is_empty() {
            let names: Vec<&str> = self.restarts.iter().map(String::as_str).collect();
            parts.push(format!("restart of {}", names.join(", ")));
        }
        if parts.is_empty() {
            "revision label only".to_owned()
        } else {
            parts.join("; ")
        }
    }
}

/// How a pod reaches the target revision.
#[derive(Clone, Debug, PartialEq)]
pub enum InPlaceDecision {
    InPlace(InPlaceChange),
    /// Delete and create again (`apps.kruise.io/specified-delete`).
    Recreate {
        reason: String,
    },
    /// `InPlaceOnly` and the change cannot go in place: the pod is left alone and the
    /// reason is reported as a `FailedUpdate` condition.
    Refused {
        reason: String,
    },
}

/// Decides for a pod whose template is `old` (None when its revision is unknown) moving to
/// `new`, under `update_type`. `old_vct_hash`/`new_vct_hash` are the revisions'
/// volumeClaimTemplates hashes, `None` when unknown.
///
/// - `ReCreate` (and `OnDelete`, which never reaches an update) always recreates.
/// - `InPlaceIfPossible` goes in place when the change allows it, else recreates.
/// - `InPlaceOnly` goes in place or refuses.
/// - With [`PlanOptions::recreate_on_vct_change`], a volumeClaimTemplates hash that differs
///   between the revisions forces recreate, except under `InPlaceOnly` (reference: the
///   InPlaceOnly strategy ignores the hash). An unknown hash forces nothing.
pub fn decide(
    update_type: CloneSetUpdateStrategyType,
    old: Option<&Map<String, Value>>,
    new: &Map<String, Value>,
    old_vct_hash: Option<&str>,
    new_vct_hash: Option<&str>,
    options: &PlanOptions,
) -> InPlaceDecision {
    let in_place_only = match update_type {
        CloneSetUpdateStrategyType::ReCreate | CloneSetUpdateStrategyType::OnDelete => {
            return InPlaceDecision::Recreate {
                reason: format!("update type is {}", update_type.as_str()),
            };
        }
        CloneSetUpdateStrategyType::InPlaceIfPossible => false,
        CloneSetUpdateStrategyType::InPlaceOnly => true,
    };
    let not_in_place = |reason: String| {
        if in_place_only {
            InPlaceDecision::Refused {
                reason: format!("InPlaceOnly cannot update in place: {reason}"),
            }
        } else {
            InPlaceDecision::Recreate { reason }
        }
    };
    let Some(old) = old else {
        return not_in_place("the pod's revision has no ControllerRevision to compare with".into());
    };
    if options.recreate_on_vct_change
        && !in_place_only
        && let (Some(a), Some(b)) = (old_vct_hash, new_vct_hash)
        && a != b
    {
        return InPlaceDecision::Recreate {
            reason: "volumeClaimTemplates changed".into(),
        };
    }
    match diff_templates(old, new, options.in_place_vertical_scaling) {
        Ok(change) => InPlaceDecision::InPlace(change),
        Err(reason) => not_in_place(reason),
    }
}

/// The in-place decision for a pod on revision `pod_revision` (the label value) moving to
/// the revision named `target`, looking the templates up in `revisions`. The CloneSet's
/// own template stands for the update revision, which may not be stored yet (the act
/// layer creates it in the same reconcile); its volumeClaimTemplates hash is computed.
pub fn decide_for_revisions(
    cloneset: &CloneSet,
    revisions: &[ControllerRevision],
    update_revision: &str,
    pod_revision: Option<&str>,
    target: &str,
    options: &PlanOptions,
) -> InPlaceDecision {
    let stored = |label: &str| {
        revisions.iter().find(|r| {
            r.metadata
                .name
                .as_deref()
                .is_some_and(|n| super::model::revision_matches(label, n))
        })
    };
    let old_rev = pod_revision.and_then(stored);
    let on_update_revision =
        pod_revision.is_some_and(|label| super::model::revision_matches(label, update_revision));
    let old_tpl = if on_update_revision {
        Some(cloneset.spec.template.clone())
    } else {
        old_rev.and_then(revision::template_of)
    };
    let Some(new_tpl) = revision::template_for(cloneset, revisions, update_revision, target) else {
        let reason = format!("the target revision {target} has no ControllerRevision");
        return match cloneset.update_type() {
            CloneSetUpdateStrategyType::InPlaceOnly => InPlaceDecision::Refused { reason },
            _ => InPlaceDecision::Recreate { reason },
        };
    };
    let vct_annotation = |r: &ControllerRevision| {
        r.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::VOLUME_CLAIM_TEMPLATE_HASH_ANNOTATION))
            .cloned()
    };
    let new_vct = if target == update_revision {
        Some(revision::vct_hash(&cloneset.spec.volume_claim_templates))
    } else {
        stored(target).and_then(vct_annotation)
    };
    decide(
        cloneset.update_type(),
        old_tpl.as_ref().map(|t| &t.0.0),
        &new_tpl.0.0,
        old_rev.and_then(vct_annotation).as_deref(),
        new_vct.as_deref(),
        options,
    )
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// `v` without empty values, so that absent, `null`, `{}` and `[]` compare equal.
fn normalize(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalize(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

fn object(v: Option<&Value>) -> &Map<String, Value> {
    v.and_then(Value::as_object).unwrap_or(&EMPTY)
}

fn keys_of<'a>(a: &'a Map<String, Value>, b: &'a Map<String, Value>) -> BTreeSet<&'a str> {
    a.keys().chain(b.keys()).map(String::as_str).collect()
}

/// The change from template `old` to `new`, or why it cannot go in place (naming the field).
pub fn diff_templates(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    vertical: bool,
) -> Result<InPlaceChange, String> {
    let (old, new) = (
        normalize(&Value::Object(old.clone())),
        normalize(&Value::Object(new.clone())),
    );
    let (old, new) = (object(Some(&old)), object(Some(&new)));
    let mut change = InPlaceChange::default();
    for key in keys_of(old, new) {
        let (a, b) = (old.get(key), new.get(key));
        match key {
            "$patch" => {}
            "metadata" => diff_metadata(object(a), object(b), &mut change)?,
            "spec" => diff_spec(object(a), object(b), vertical, &mut change)?,
            _ if a != b => return Err(format!("template field {key} changed")),
            _ => {}
        }
    }
    change.env_from_metadata = env_from_metadata(new, &change);
    change.restarts = restarts(new, &change);
    Ok(change)
}

/// The containers of template `new` that a change of `kubectl.kubernetes.io/restartedAt`
/// restarts: all of them, except those that restart anyway (their image changes, or their
/// env reads a changed key). None when the annotation does not change.
fn restarts(new: &Map<String, Value>, change: &InPlaceChange) -> BTreeSet<String> {
    if !change
        .annotations
        .contains_key(keys::RESTARTED_AT_ANNOTATION)
    {
        return BTreeSet::new();
    }
    let spec = object(new.get("spec"));
    let containers = spec.get("containers").and_then(Value::as_array);
    containers
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .filter(|name| {
            !change.images.contains_key(*name) && !change.env_from_metadata.contains_key(*name)
        })
        .map(str::to_owned)
        .collect()
}

/// The containers of template `new` whose env reads a label or annotation that `change`
/// sets or removes, each with the new values of the keys it reads that are set (a
/// container reading only removed keys is listed with an empty map).
fn env_from_metadata(
    new: &Map<String, Value>,
    change: &InPlaceChange,
) -> BTreeMap<String, ObjectMeta> {
    let mut out = BTreeMap::new();
    if change.labels.is_empty() && change.annotations.is_empty() {
        return out;
    }
    let spec = object(new.get("spec"));
    let containers = spec.get("containers").and_then(Value::as_array);
    for container in containers.into_iter().flatten() {
        let Some(name) = container.get("name").and_then(Value::as_str) else {
            continue;
        };
        let mut meta = ObjectMeta::default();
        let envs = container.get("env").and_then(Value::as_array);
        for env in envs.into_iter().flatten() {
            let path = env
                .pointer("/valueFrom/fieldRef/fieldPath")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let Some((field, key)) = inplace_proto::downward::metadata_key(path) else {
                continue;
            };
            let (changed, target) = match field {
                "labels" => (&change.labels, &mut meta.labels),
                _ => (&change.annotations, &mut meta.annotations),
            };
            match changed.get(key) {
                Some(Some(value)) => {
                    target
                        .get_or_insert_with(BTreeMap::new)
                        .insert(key.to_owned(), value.clone());
                }
                // Removed: the metadata patch removes it; the container is listed (with
                // no value to write) so that the daemon still restarts it.
                Some(None) => {
                    target.get_or_insert_with(BTreeMap::new);
                }
                None => {}
            }
        }
        if meta.labels.is_some() || meta.annotations.is_some() {
            out.insert(name.to_owned(), meta);
        }
    }
    out
}

fn diff_metadata(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    change: &mut InPlaceChange,
) -> Result<(), String> {
    for key in keys_of(old, new) {
        let (a, b) = (old.get(key), new.get(key));
        match key {
            "labels" => change.labels = diff_string_map("labels", object(a), object(b))?,
            "annotations" => {
                change.annotations = diff_string_map("annotations", object(a), object(b))?;
            }
            _ if a != b => return Err(format!("metadata.{key} changed")),
            _ => {}
        }
    }
    Ok(())
}

fn diff_string_map(
    what: &str,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Result<BTreeMap<String, Option<String>>, String> {
    let mut out = BTreeMap::new();
    for key in keys_of(old, new) {
        let (a, b) = (old.get(key), new.get(key));
        if a == b {
            continue;
        }
        let value = match b {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(format!("metadata.{what}.{key} is not a string: {other}"));
            }
        };
        out.insert(key.to_owned(), value);
    }
    Ok(out)
}

fn diff_spec(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    vertical: bool,
    change: &mut InPlaceChange,
) -> Result<(), String> {
    for key in keys_of(old, new) {
        let (a, b) = (old.get(key), new.get(key));
        if a == b {
            continue;
        }
        if key != "containers" {
            return Err(format!("spec.{key} changed"));
        }
        let empty = Vec::new();
        let list = |v: Option<&Value>| v.and_then(Value::as_array).unwrap_or(&empty).clone();
        let (old_list, new_list) = (list(a), list(b));
        if old_list.len() != new_list.len() {
            return Err(format!(
                "spec.containers: containers added or removed ({} → {})",
                old_list.len(),
                new_list.len()
            ));
        }
        for (i, (oc, nc)) in old_list.iter().zip(&new_list).enumerate() {
            diff_container(i, object(Some(oc)), object(Some(nc)), vertical, change)?;
        }
    }
    if !change.resources.is_empty() {
        let (before, after) = (qos_class(old), qos_class(new));
        if before != after {
            return Err(format!(
                "the pod QoS class would change from {before} to {after}"
            ));
        }
    }
    Ok(())
}

fn diff_container(
    index: usize,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    vertical: bool,
    change: &mut InPlaceChange,
) -> Result<(), String> {
    let name_of = |c: &Map<String, Value>| c.get("name").and_then(Value::as_str).map(str::to_owned);
    let (old_name, new_name) = (name_of(old), name_of(new));
    if old_name != new_name {
        return Err(format!(
            "spec.containers[{index}] renamed from {} to {}",
            old_name.as_deref().unwrap_or("?"),
            new_name.as_deref().unwrap_or("?")
        ));
    }
    let name = new_name.unwrap_or_else(|| index.to_string());
    for key in keys_of(old, new) {
        let (a, b) = (old.get(key), new.get(key));
        if a == b {
            continue;
        }
        match (key, a, b) {
            ("image", Some(Value::String(_)), Some(Value::String(image))) => {
                change.images.insert(name.clone(), image.clone());
            }
            ("resources", _, _) if vertical => {
                diff_resources(&name, object(a), object(b))?;
                let resources: ResourceRequirements =
                    serde_json::from_value(b.cloned().unwrap_or(Value::Null)).map_err(|e| {
                        format!("spec.containers[{name}].resources cannot be read: {e}")
                    })?;
                change.resources.insert(name.clone(), resources);
            }
            ("resources", _, _) => {
                return Err(format!(
                    "spec.containers[{name}].resources changed (in-place resizing is off)"
                ));
            }
            (key, _, _) => return Err(format!("spec.containers[{name}].{key} changed")),
        }
    }
    Ok(())
}

fn diff_resources(
    container: &str,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Result<(), String> {
    for list in keys_of(old, new) {
        let (a, b) = (old.get(list), new.get(list));
        if a == b {
            continue;
        }
        let path = format!("spec.containers[{container}].resources.{list}");
        if list != "requests" && list != "limits" {
            return Err(format!("{path} changed"));
        }
        let (a, b) = (object(a), object(b));
        for resource in keys_of(a, b) {
            match (a.get(resource), b.get(resource)) {
                (x, y) if x == y => {}
                (Some(_), Some(_)) if matches!(resource, "cpu" | "memory") => {}
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "{path}.{resource} changed (only cpu and memory resize in place)"
                    ));
                }
                (None, _) => return Err(format!("{path}.{resource} added")),
                (_, None) => return Err(format!("{path}.{resource} removed")),
            }
        }
    }
    Ok(())
}

/// A pod's QoS class (Kubernetes `GetPodQOS`) from a template spec, counting cpu and
/// memory of containers and init containers; a limit without a request counts as both, as
/// API defaulting makes it.
pub fn qos_class(spec: &Map<String, Value>) -> &'static str {
    let mut requests: BTreeMap<&str, i128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i128> = BTreeMap::new();
    let mut guaranteed = true;
    let containers = ["containers", "initContainers"]
        .into_iter()
        .filter_map(|k| spec.get(k).and_then(Value::as_array))
        .flatten();
    for container in containers {
        let resources = object(container.get("resources"));
        let lim = object(resources.get("limits"));
        let mut req = object(resources.get("requests")).clone();
        for (k, v) in lim {
            req.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let positive = |v: &Value| {
            v.as_str()
                .map(|s| Quantity(s.to_owned()))
                .or_else(|| v.as_f64().map(|n| Quantity(n.to_string())))
                .filter(quantity::is_positive)
                .and_then(|q| quantity::millis(&q.0))
        };
        for name in ["cpu", "memory"] {
            if let Some(m) = req.get(name).and_then(positive) {
                *requests.entry(name).or_default() += m;
            }
        }
        let mut found = 0;
        for name in ["cpu", "memory"] {
            if let Some(m) = lim.get(name).and_then(positive) {
                *limits.entry(name).or_default() += m;
                found += 1;
            }
        }
        if found < 2 {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed
        && requests.len() == limits.len()
        && requests.iter().all(|(k, v)| limits.get(k) == Some(v))
    {
        return "Guaranteed";
    }
    "Burstable"
}

#[cfg(test)]
mod tests;
