//! The decisions of the plugin's day-2 commands, as pure functions over objects already
//! read (the I/O is in [`super::online`]):
//!
//! - [`parse_target`]: `NAME`, `cloneset/NAME` (and kubectl's other spellings of the kind).
//! - [`history`]: a CloneSet's ControllerRevisions in `.revision` order, each with its change
//!   cause and the image changes per container relative to the previous revision.
//! - [`undo_patch`]: the JSON patch writing a revision's template back into `spec.template`.
//! - [`parse_image_args`] and [`set_image_patch`]: `CONTAINER=IMAGE…` and its JSON patch.
//! - [`restart_patch`] and [`restart_notes`]: `rollout restart`.
//! - [`scale_down_patch`]: pods to delete merged into `spec.scaleStrategy.podsToDelete`, with
//!   `spec.replicas` lowered by the number of pods newly named.

use std::collections::{BTreeMap, BTreeSet};

use inplace_proto::CloneSet;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::plan::revision::template_of;

/// The annotation kubectl and users write to say why a template changed.
pub const CHANGE_CAUSE_ANNOTATION: &str = "kubernetes.io/change-cause";

/// Why a day-2 command cannot do what it was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Day2Error {
    #[error("{0:?} is not a CloneSet: give NAME or cloneset/NAME")]
    NotACloneSet(String),
    #[error("empty CloneSet name")]
    EmptyName,
    #[error("cloneset {cloneset} has no revision {revision} (revisions: {known})")]
    NoSuchRevision {
        cloneset: String,
        revision: i64,
        known: String,
    },
    #[error("cloneset {0} has no previous revision to roll back to")]
    NoPreviousRevision(String),
    #[error(
        "revision {revision} of cloneset {cloneset} is already the current template; nothing to undo"
    )]
    AlreadyCurrent { cloneset: String, revision: i64 },
    #[error("revision {0} holds no pod template")]
    NoTemplate(String),
    #[error("bad CONTAINER=IMAGE argument {0:?}: {1}")]
    BadImageArg(String, String),
    #[error("cloneset {cloneset} has no container named {unknown} (containers: {known})")]
    UnknownContainers {
        cloneset: String,
        unknown: String,
        known: String,
    },
    #[error("--pods names no pod")]
    NoPods,
    #[error("pod {pods} not owned by cloneset {cloneset}")]
    NotOwned { cloneset: String, pods: String },
    #[error("cloneset {cloneset} has {replicas} replicas; it cannot lose {pods} pods")]
    TooFewReplicas {
        cloneset: String,
        replicas: i32,
        pods: usize,
    },
}

/// The CloneSet named by `arg`: `NAME`, or `KIND/NAME` where KIND is `cloneset`,
/// `clonesets`, the short name `clone`, or either of the first two with `.apps.kruise.io`.
pub fn parse_target(arg: &str) -> Result<String, Day2Error> {
    let name = match arg.split_once('/') {
        None => arg,
        Some((kind, name)) => {
            let kind = kind.to_ascii_lowercase();
            let kind = kind
                .strip_suffix(".v1alpha1.apps.kruise.io")
                .or_else(|| kind.strip_suffix(".apps.kruise.io"))
                .unwrap_or(&kind);
            if !matches!(kind, "cloneset" | "clonesets" | "clone") || name.contains('/') {
                return Err(Day2Error::NotACloneSet(arg.to_string()));
            }
            name
        }
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(Day2Error::EmptyName);
    }
    Ok(name.to_string())
}

/// Whether `meta` has a controller owner reference to `uid`.
pub fn controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    !uid.is_empty()
        && meta
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// One revision in a CloneSet's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub revision: i64,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_cause: Option<String>,
    /// Image per container (init containers as `init:NAME`), in template order.
    pub images: Vec<(String, String)>,
    /// What changed relative to the previous revision (empty for the first).
    pub changes: Vec<String>,
    /// This revision's template is the CloneSet's `spec.template`.
    pub current: bool,
}

/// Images per container of a pod template (a JSON object), init containers first as
/// `init:NAME`, each list in template order.
pub fn images(template: &Value) -> Vec<(String, String)> {
    let spec = &template["spec"];
    let mut out = Vec::new();
    for (key, prefix) in [("initContainers", "init:"), ("containers", "")] {
        for c in spec[key].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or_default();
            let image = c["image"].as_str().unwrap_or_default();
            out.push((format!("{prefix}{name}"), image.to_string()));
        }
    }
    out
}

/// What changed between two templates, in words: one entry per container whose image
/// changed, was added or removed; `other fields of the template` when only other fields
/// differ.
pub fn changes(previous: &Value, next: &Value) -> Vec<String> {
    let before: BTreeMap<String, String> = images(previous).into_iter().collect();
    let mut out = Vec::new();
    let after = images(next);
    for (name, image) in &after {
        match before.get(name) {
            None => out.push(format!("{name} added ({image})")),
            Some(old) if old != image => out.push(format!("{name}: {old} -> {image}")),
            Some(_) => {}
        }
    }
    let after_names: BTreeSet<&String> = after.iter().map(|(n, _)| n).collect();
    for name in before.keys() {
        if !after_names.contains(name) {
            out.push(format!("{name} removed"));
        }
    }
    if out.is_empty() && !crate::plan::revision::equal_data(previous, next) {
        out.push("other fields of the template".into());
    }
    out
}

fn template_value(revision: &ControllerRevision) -> Option<Value> {
    template_of(revision).map(|t| Value::Object(t.0.0))
}

fn revision_name(r: &ControllerRevision) -> String {
    r.metadata.name.clone().unwrap_or_default()
}

/// The CloneSet's revisions (those it controls), ordered by `.revision` then name.
pub fn owned_revisions(cs: &CloneSet, revisions: &[ControllerRevision]) -> Vec<ControllerRevision> {
    let uid = cs.metadata.uid.clone().unwrap_or_default();
    let mut own: Vec<ControllerRevision> = revisions
        .iter()
        .filter(|r| controlled_by(&r.metadata, &uid))
        .cloned()
        .collect();
    own.sort_by(|a, b| {
        a.revision
            .cmp(&b.revision)
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    own
}

fn template_of_cloneset(cs: &CloneSet) -> Value {
    Value::Object(cs.spec.template.0.0.clone())
}

/// The history of `cs` from its revisions (only those it controls are taken).
pub fn history(cs: &CloneSet, revisions: &[ControllerRevision]) -> Vec<HistoryEntry> {
    let current = template_of_cloneset(cs);
    let mut previous: Option<Value> = None;
    owned_revisions(cs, revisions)
        .iter()
        .map(|r| {
            let template = template_value(r).unwrap_or(Value::Null);
            let entry = HistoryEntry {
                revision: r.revision,
                name: revision_name(r),
                change_cause: r
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(CHANGE_CAUSE_ANNOTATION))
                    .cloned(),
                images: images(&template),
                changes: previous
                    .as_ref()
                    .map(|p| changes(p, &template))
                    .unwrap_or_default(),
                current: crate::plan::revision::equal_data(&template, &current),
            };
            previous = Some(template);
            entry
        })
        .collect()
}

/// The history as a table, like `kubectl rollout history`.
pub fn history_table(cloneset: &str, entries: &[HistoryEntry]) -> String {
    let mut rows = vec![[
        "REVISION".to_string(),
        "NAME".to_string(),
        "CHANGE-CAUSE".to_string(),
        "IMAGES".to_string(),
        "CHANGES".to_string(),
    ]];
    for e in entries {
        let images: Vec<String> = e.images.iter().map(|(c, i)| format!("{c}={i}")).collect();
        let changes = if e.changes.is_empty() {
            "-".to_string()
        } else {
            e.changes.join("; ")
        };
        rows.push([
            format!("{}{}", e.revision, if e.current { "*" } else { "" }),
            e.name.clone(),
            e.change_cause.clone().unwrap_or_else(|| "<none>".into()),
            images.join(","),
            changes,
        ]);
    }
    let mut widths = [0usize; 5];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = format!("cloneset.apps.kruise.io/{cloneset}\n");
    for row in &rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push_str("(* = the current template)\n");
    out
}

fn known_numbers(own: &[ControllerRevision]) -> String {
    let numbers: Vec<String> = own.iter().map(|r| r.revision.to_string()).collect();
    if numbers.is_empty() {
        "none".into()
    } else {
        numbers.join(", ")
    }
}

/// The revision numbered `number` among the CloneSet's own revisions, with its template.
pub fn revision_template(
    cs: &CloneSet,
    revisions: &[ControllerRevision],
    number: i64,
) -> Result<(ControllerRevision, Value), Day2Error> {
    let own = owned_revisions(cs, revisions);
    let found = own
        .iter()
        .rev()
        .find(|r| r.revision == number)
        .ok_or_else(|| Day2Error::NoSuchRevision {
            cloneset: cs.metadata.name.clone().unwrap_or_default(),
            revision: number,
            known: known_numbers(&own),
        })?;
    let template =
        template_value(found).ok_or_else(|| Day2Error::NoTemplate(revision_name(found)))?;
    Ok((found.clone(), template))
}

/// Drops `null` members (the reference's typed encoding stores `creationTimestamp: null`,
/// which a structural schema would refuse to take back).
pub fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// What `rollout undo` writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Undo {
    /// The revision rolled back to.
    pub revision: i64,
    /// The JSON patch: a test of `metadata.resourceVersion` and a replace of `spec.template`.
    pub patch: Value,
}

/// The patch rolling `cs` back to revision `to`, or by default to the newest revision
/// whose template is not the current one (`kubectl rollout undo`).
pub fn undo_patch(
    cs: &CloneSet,
    revisions: &[ControllerRevision],
    to: Option<i64>,
) -> Result<Undo, Day2Error> {
    let name = cs.metadata.name.clone().unwrap_or_default();
    let current = template_of_cloneset(cs);
    let (number, template) = match to {
        Some(n) => {
            let (_, template) = revision_template(cs, revisions, n)?;
            if crate::plan::revision::equal_data(&template, &current) {
                return Err(Day2Error::AlreadyCurrent {
                    cloneset: name,
                    revision: n,
                });
            }
            (n, template)
        }
        None => owned_revisions(cs, revisions)
            .iter()
            .rev()
            .filter_map(|r| template_value(r).map(|t| (r.revision, t)))
            .find(|(_, t)| !crate::plan::revision::equal_data(t, &current))
            .ok_or(Day2Error::NoPreviousRevision(name))?,
    };
    let mut ops = Vec::new();
    if let Some(rv) = &cs.metadata.resource_version {
        ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
    }
    ops.push(json!({"op": "replace", "path": "/spec/template", "value": without_nulls(&template)}));
    Ok(Undo {
        revision: number,
        patch: Value::Array(ops),
    })
}

/// Parses `CONTAINER=IMAGE` arguments (`*=IMAGE` sets every container); a container named
/// twice is an error.
pub fn parse_image_args(args: &[String]) -> Result<Vec<(String, String)>, Day2Error> {
    let mut out: Vec<(String, String)> = Vec::new();
    if args.is_empty() {
        return Err(Day2Error::BadImageArg(
            String::new(),
            "give at least one CONTAINER=IMAGE".into(),
        ));
    }
    for arg in args {
        let bad = |why: &str| Day2Error::BadImageArg(arg.clone(), why.into());
        let (container, image) = arg.split_once('=').ok_or_else(|| bad("no '='"))?;
        let (container, image) = (container.trim(), image.trim());
        if container.is_empty() {
            return Err(bad("empty container name"));
        }
        if image.is_empty() {
            return Err(bad("empty image"));
        }
        if image.chars().any(char::is_whitespace) {
            return Err(bad("the image contains white space"));
        }
        if out.iter().any(|(c, _)| c == container) {
            return Err(bad("container named twice"));
        }
        out.push((container.to_string(), image.to_string()));
    }
    if out.len() > 1 && out.iter().any(|(c, _)| c == "*") {
        return Err(Day2Error::BadImageArg(
            "*".into(),
            "'*' sets every container; give it alone".into(),
        ));
    }
    Ok(out)
}

/// The JSON patch of `set image`: for every container to change, a test of its name at
/// its index (the list may not have moved under us) and a replace of its image. `None`
/// when every named container already has its image.
pub fn set_image_patch(
    cs: &CloneSet,
    pairs: &[(String, String)],
) -> Result<Option<Value>, Day2Error> {
    let template = template_of_cloneset(cs);
    let mut slots: Vec<(&str, usize, String, String)> = Vec::new();
    for key in ["initContainers", "containers"] {
        for (i, c) in template["spec"][key]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            slots.push((
                key,
                i,
                c["name"].as_str().unwrap_or_default().to_string(),
                c["image"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    let all = pairs.len() == 1 && pairs[0].0 == "*";
    let unknown: Vec<&str> = pairs
        .iter()
        .filter(|(c, _)| !all && !slots.iter().any(|(_, _, name, _)| name == c))
        .map(|(c, _)| c.as_str())
        .collect();
    if !unknown.is_empty() {
        let known: Vec<&str> = slots.iter().map(|(_, _, n, _)| n.as_str()).collect();
        return Err(Day2Error::UnknownContainers {
            cloneset: cs.metadata.name.clone().unwrap_or_default(),
            unknown: unknown.join(", "),
            known: known.join(", "),
        });
    }
    let mut ops = Vec::new();
    for (key, i, name, image) in &slots {
        let wanted = if all {
            Some(&pairs[0].1)
        } else {
            pairs.iter().find(|(c, _)| c == name).map(|(_, im)| im)
        };
        let Some(wanted) = wanted else { continue };
        if wanted == image {
            continue;
        }
        let base = format!("/spec/template/spec/{key}/{i}");
        ops.push(json!({"op": "test", "path": format!("{base}/name"), "value": name}));
        ops.push(json!({"op": "replace", "path": format!("{base}/image"), "value": wanted}));
    }
    Ok((!ops.is_empty()).then_some(Value::Array(ops)))
}

/// The merge patch of `rollout restart`: the template annotation
/// `kubectl.kubernetes.io/restartedAt` set to `at` (what `kubectl rollout restart` writes
/// for a Deployment). The new revision restarts every container in place
/// ([`crate::plan::inplace`]).
pub fn restart_patch(at: &str) -> Value {
    json!({"spec": {"template": {"metadata": {"annotations": {
        inplace_proto::keys::RESTARTED_AT_ANNOTATION: at
    }}}}})
}

/// What a user should know about how a restart of `cs` will go, besides the default (every
/// pod's containers restarted in place, within maxUnavailable and partition).
pub fn restart_notes(cs: &CloneSet) -> Vec<String> {
    use inplace_proto::CloneSetUpdateStrategyType as T;
    let mut notes = Vec::new();
    match cs.update_type() {
        T::ReCreate => notes.push(
            "updateStrategy.type is ReCreate: the pods are recreated, not restarted in place"
                .to_string(),
        ),
        T::OnDelete => notes.push(
            "updateStrategy.type is OnDelete: nothing restarts until pods are deleted".to_string(),
        ),
        T::InPlaceIfPossible | T::InPlaceOnly => {}
    }
    let strategy = cs.spec.update_strategy.clone().unwrap_or_default();
    if strategy.paused {
        notes.push("the rollout is paused: the restart starts on resume".to_string());
    }
    if strategy.partition.is_some() {
        let partition = crate::plan::diffs::resolve(cs).partition;
        if partition > 0 {
            notes.push(format!(
                "partition {partition}: that many pods stay on their revision and are not restarted"
            ));
        }
    }
    notes
}

/// Parses `--pods a,b` (also given several times): trimmed, empty parts skipped,
/// duplicates dropped, order kept.
pub fn parse_pods(args: &[String]) -> Result<Vec<String>, Day2Error> {
    let mut out: Vec<String> = Vec::new();
    for part in args.iter().flat_map(|a| a.split(',')) {
        let p = part.trim();
        if !p.is_empty() && !out.iter().any(|o| o == p) {
            out.push(p.to_string());
        }
    }
    if out.is_empty() {
        return Err(Day2Error::NoPods);
    }
    Ok(out)
}

/// What `scale-down` writes.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleDown {
    /// Pods newly added to `podsToDelete`.
    pub added: Vec<String>,
    /// Pods already in it (not counted again).
    pub already: Vec<String>,
    pub replicas: i32,
    /// The merge patch (with `metadata.resourceVersion`, so that a concurrent write fails).
    pub patch: Value,
}

/// Merges `pods` into `spec.scaleStrategy.podsToDelete` and lowers `spec.replicas` by the
/// number of pods newly named (as `kubectl-kruise scaledown` does, except that a pod
/// already listed is not counted twice). `owned` are the names of the pods the CloneSet
/// controls; any other pod is refused.
pub fn scale_down_patch(
    cs: &CloneSet,
    pods: &[String],
    owned: &BTreeSet<String>,
) -> Result<ScaleDown, Day2Error> {
    let name = cs.metadata.name.clone().unwrap_or_default();
    if pods.is_empty() {
        return Err(Day2Error::NoPods);
    }
    let foreign: Vec<&str> = pods
        .iter()
        .filter(|p| !owned.contains(*p))
        .map(String::as_str)
        .collect();
    if !foreign.is_empty() {
        return Err(Day2Error::NotOwned {
            cloneset: name,
            pods: foreign.join(", "),
        });
    }
    let existing: Vec<String> = cs
        .spec
        .scale_strategy
        .as_ref()
        .map(|s| s.pods_to_delete.clone())
        .unwrap_or_default();
    let (already, added): (Vec<String>, Vec<String>) =
        pods.iter().cloned().partition(|p| existing.contains(p));
    let replicas_now = cs.replicas();
    let replicas = i64::from(replicas_now) - added.len() as i64;
    let replicas =
        i32::try_from(replicas)
            .ok()
            .filter(|r| *r >= 0)
            .ok_or(Day2Error::TooFewReplicas {
                cloneset: name,
                replicas: replicas_now,
                pods: added.len(),
            })?;
    let mut list = existing;
    list.extend(added.iter().cloned());
    let mut metadata = Map::new();
    if let Some(rv) = &cs.metadata.resource_version {
        metadata.insert("resourceVersion".into(), Value::String(rv.clone()));
    }
    let patch = json!({
        "metadata": metadata,
        "spec": {"replicas": replicas, "scaleStrategy": {"podsToDelete": list}},
    });
    Ok(ScaleDown {
        added,
        already,
        replicas,
        patch,
    })
}

#[cfg(test)]
mod tests;
