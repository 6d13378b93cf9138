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
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::plan::revision::revision_data;
    use inplace_proto::PodTemplate;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use k8s_openapi::apimachinery::pkg::runtime::RawExtension;

    fn template(containers: &[(&str, &str)]) -> Value {
        let cs: Vec<Value> = containers
            .iter()
            .map(|(n, i)| json!({"name": n, "image": i}))
            .collect();
        json!({"metadata": {"labels": {"app": "demo"}}, "spec": {"containers": cs}})
    }

    fn cloneset(tpl: &Value) -> CloneSet {
        let mut cs: CloneSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
            "metadata": {"name": "demo", "uid": "u1", "resourceVersion": "42"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "demo"}},
                     "template": tpl},
        }))
        .unwrap();
        cs.metadata.namespace = Some("default".into());
        cs
    }

    fn revision(
        name: &str,
        number: i64,
        tpl: &Value,
        owner: &str,
        cause: Option<&str>,
    ) -> ControllerRevision {
        let t = PodTemplate(inplace_proto::RawObject(tpl.as_object().unwrap().clone()));
        ControllerRevision {
            metadata: ObjectMeta {
                name: Some(name.into()),
                owner_references: Some(vec![OwnerReference {
                    uid: owner.into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                annotations: cause.map(|c| {
                    [(CHANGE_CAUSE_ANNOTATION.to_string(), c.to_string())]
                        .into_iter()
                        .collect()
                }),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(revision_data(&t))),
            revision: number,
        }
    }

    #[test]
    fn targets() {
        let table: &[(&str, Result<&str, ()>)] = &[
            ("demo", Ok("demo")),
            ("cloneset/demo", Ok("demo")),
            ("clonesets/demo", Ok("demo")),
            ("CloneSet/demo", Ok("demo")),
            ("clone/demo", Ok("demo")),
            ("cloneset.apps.kruise.io/demo", Ok("demo")),
            ("clonesets.v1alpha1.apps.kruise.io/demo", Ok("demo")),
            ("deployment/demo", Err(())),
            ("cloneset/a/b", Err(())),
            ("cloneset/", Err(())),
            ("", Err(())),
        ];
        for (arg, want) in table {
            assert_eq!(
                parse_target(arg).map_err(|_| ()),
                want.map(str::to_string),
                "{arg}"
            );
        }
    }

    #[test]
    fn changes_between_templates() {
        let a = template(&[("app", "img:v1"), ("side", "s:1")]);
        let table: &[(Value, &[&str])] = &[
            (template(&[("app", "img:v1"), ("side", "s:1")]), &[]),
            (
                template(&[("app", "img:v2"), ("side", "s:1")]),
                &["app: img:v1 -> img:v2"],
            ),
            (template(&[("app", "img:v1")]), &["side removed"]),
            (
                template(&[("app", "img:v1"), ("side", "s:1"), ("log", "l:1")]),
                &["log added (l:1)"],
            ),
            (
                {
                    let mut t = a.clone();
                    t["metadata"]["labels"]["x"] = json!("y");
                    t
                },
                &["other fields of the template"],
            ),
        ];
        for (next, want) in table {
            assert_eq!(changes(&a, next), *want, "{next}");
        }
    }

    #[test]
    fn init_containers_are_named_with_a_prefix() {
        let mut t = template(&[("app", "a:1")]);
        t["spec"]["initContainers"] = json!([{"name": "setup", "image": "s:1"}]);
        assert_eq!(
            images(&t),
            vec![
                ("init:setup".to_string(), "s:1".to_string()),
                ("app".to_string(), "a:1".to_string())
            ]
        );
    }

    #[test]
    fn history_orders_by_revision_and_skips_other_owners() {
        let v1 = template(&[("app", "img:v1")]);
        let v2 = template(&[("app", "img:v2")]);
        let cs = cloneset(&v2);
        let revs = vec![
            revision("demo-b", 2, &v2, "u1", Some("bump")),
            revision("other-x", 1, &v1, "u2", None),
            revision("demo-a", 1, &v1, "u1", None),
        ];
        let h = history(&cs, &revs);
        assert_eq!(h.len(), 2);
        assert_eq!((h[0].revision, h[0].name.as_str()), (1, "demo-a"));
        assert!(h[0].changes.is_empty());
        assert!(!h[0].current);
        assert_eq!(h[1].change_cause.as_deref(), Some("bump"));
        assert_eq!(h[1].changes, ["app: img:v1 -> img:v2"]);
        assert!(h[1].current);
        assert_eq!(
            history_table("demo", &h),
            "cloneset.apps.kruise.io/demo
REVISION  NAME    CHANGE-CAUSE  IMAGES      CHANGES
1         demo-a  <none>        app=img:v1  -
2*        demo-b  bump          app=img:v2  app: img:v1 -> img:v2
(* = the current template)
"
        );
        let json = serde_json::to_value(&h).unwrap();
        assert_eq!(json[0].get("changeCause"), None);
        assert_eq!(json[1]["changeCause"], "bump");
    }

    #[test]
    fn undo_decisions() {
        let v1 = template(&[("app", "img:v1")]);
        let v2 = template(&[("app", "img:v2")]);
        let v3 = template(&[("app", "img:v3")]);
        let revs = vec![
            revision("demo-a", 1, &v1, "u1", None),
            revision("demo-b", 2, &v2, "u1", None),
            revision("demo-c", 3, &v3, "u1", None),
        ];
        let cs = cloneset(&v3);
        // Default: the newest revision that is not the current template.
        let undo = undo_patch(&cs, &revs, None).unwrap();
        assert_eq!(undo.revision, 2);
        assert_eq!(
            undo.patch,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "replace", "path": "/spec/template", "value": v2},
            ])
        );
        assert_eq!(undo_patch(&cs, &revs, Some(1)).unwrap().revision, 1);
        assert!(matches!(
            undo_patch(&cs, &revs, Some(3)),
            Err(Day2Error::AlreadyCurrent { revision: 3, .. })
        ));
        let e = undo_patch(&cs, &revs, Some(9)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cloneset demo has no revision 9 (revisions: 1, 2, 3)"
        );
        // After an undo to 1 the controller bumps revision 1 to 4: the default is then 3.
        let mut bumped = revs.clone();
        bumped[0].revision = 4;
        assert_eq!(
            undo_patch(&cloneset(&v1), &bumped, None).unwrap().revision,
            3
        );
        // Only one revision: nothing to go back to.
        assert_eq!(
            undo_patch(&cloneset(&v1), &revs[..1], None),
            Err(Day2Error::NoPreviousRevision("demo".into()))
        );
    }

    #[test]
    fn undo_drops_nulls_of_typed_encodings() {
        let mut v1 = template(&[("app", "img:v1")]);
        v1["metadata"]["creationTimestamp"] = Value::Null;
        let revs = vec![revision("demo-a", 1, &v1, "u1", None)];
        let undo = undo_patch(&cloneset(&template(&[("app", "x")])), &revs, None).unwrap();
        assert_eq!(undo.patch[1]["value"], template(&[("app", "img:v1")]));
    }

    #[test]
    fn image_arguments() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ok = |a: &[&str]| parse_image_args(&args(a)).unwrap();
        assert_eq!(
            ok(&["app=reg/app:v2", " side = s:2"]),
            vec![
                ("app".to_string(), "reg/app:v2".to_string()),
                ("side".to_string(), "s:2".to_string())
            ]
        );
        // An image may itself contain '=' (a digest query is not valid, but the split is
        // on the first '=').
        assert_eq!(ok(&["app=a=b"])[0].1, "a=b");
        assert_eq!(ok(&["*=x:1"])[0].0, "*");
        for bad in [
            &["app"][..],
            &["=img"],
            &["app="],
            &["app=a b"],
            &["app=a", "app=b"],
            &["*=a", "app=b"],
            &[],
        ] {
            assert!(parse_image_args(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn set_image_patches() {
        let mut tpl = template(&[("app", "a:1"), ("side", "s:1")]);
        tpl["spec"]["initContainers"] = json!([{"name": "setup", "image": "i:1"}]);
        let cs = cloneset(&tpl);
        let pair = |c: &str, i: &str| (c.to_string(), i.to_string());
        assert_eq!(
            set_image_patch(&cs, &[pair("side", "s:2"), pair("setup", "i:2")]).unwrap(),
            Some(json!([
                {"op": "test", "path": "/spec/template/spec/initContainers/0/name", "value": "setup"},
                {"op": "replace", "path": "/spec/template/spec/initContainers/0/image", "value": "i:2"},
                {"op": "test", "path": "/spec/template/spec/containers/1/name", "value": "side"},
                {"op": "replace", "path": "/spec/template/spec/containers/1/image", "value": "s:2"},
            ]))
        );
        assert_eq!(set_image_patch(&cs, &[pair("app", "a:1")]).unwrap(), None);
        let all = set_image_patch(&cs, &[pair("*", "a:1")]).unwrap().unwrap();
        assert_eq!(all.as_array().unwrap().len(), 4, "{all}");
        let e = set_image_patch(
            &cs,
            &[pair("app", "a:2"), pair("nope", "x"), pair("zz", "y")],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "cloneset demo has no container named nope, zz (containers: setup, app, side)"
        );
    }

    #[test]
    fn pods_argument() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_pods(&args(&["a, b,", "a,c"])).unwrap(),
            ["a", "b", "c"]
        );
        assert_eq!(parse_pods(&args(&[" , "])), Err(Day2Error::NoPods));
    }

    #[test]
    fn scale_down_merges_pods_to_delete() {
        let mut cs = cloneset(&template(&[("app", "a:1")]));
        let owned: BTreeSet<String> = ["p1", "p2", "p3"].iter().map(|s| s.to_string()).collect();
        let pods = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();

        let s = scale_down_patch(&cs, &pods(&["p1", "p2"]), &owned).unwrap();
        assert_eq!(s.replicas, 1);
        assert_eq!(
            s.patch,
            json!({"metadata": {"resourceVersion": "42"},
                   "spec": {"replicas": 1, "scaleStrategy": {"podsToDelete": ["p1", "p2"]}}})
        );

        // Already listed: kept, not counted again.
        cs.spec.scale_strategy = Some(inplace_proto::CloneSetScaleStrategy {
            pods_to_delete: vec!["p1".into()],
            ..Default::default()
        });
        let s = scale_down_patch(&cs, &pods(&["p1", "p3"]), &owned).unwrap();
        assert_eq!(
            (s.added.clone(), s.already.clone(), s.replicas),
            (pods(&["p3"]), pods(&["p1"]), 2)
        );
        assert_eq!(
            s.patch["spec"]["scaleStrategy"]["podsToDelete"],
            json!(["p1", "p3"])
        );

        let e = scale_down_patch(&cs, &pods(&["p2", "x", "y"]), &owned).unwrap_err();
        assert_eq!(e.to_string(), "pod x, y not owned by cloneset demo");

        cs.spec.replicas = Some(1);
        cs.spec.scale_strategy = None;
        assert!(matches!(
            scale_down_patch(&cs, &pods(&["p1", "p2"]), &owned),
            Err(Day2Error::TooFewReplicas { .. })
        ));
        assert_eq!(scale_down_patch(&cs, &[], &owned), Err(Day2Error::NoPods));
    }

    /// `rollout restart` writes only the template annotation; the planner then restarts
    /// every container in place (never a recreate), and a second restart does it again.
    #[test]
    fn restart_patch_makes_an_in_place_restart_of_every_container() {
        let before = template(&[("main", "nginx:1"), ("side", "busybox:1")]);
        let cs = cloneset(&before);
        let mut patched = serde_json::to_value(&cs).unwrap();
        json_patch::merge(&mut patched, &restart_patch("2026-01-02T03:04:05Z"));
        assert_eq!(
            patched["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"],
            "2026-01-02T03:04:05Z"
        );
        assert_eq!(
            patched["spec"]["template"]["metadata"]["labels"],
            json!({"app": "demo"})
        );
        let after = patched["spec"]["template"].as_object().unwrap().clone();
        let decide = |old: &Value, new: &Map<String, Value>| {
            crate::plan::inplace::decide(
                inplace_proto::CloneSetUpdateStrategyType::InPlaceIfPossible,
                old.as_object(),
                new,
                None,
                None,
                &crate::plan::model::PlanOptions::default(),
            )
        };
        let crate::plan::inplace::InPlaceDecision::InPlace(change) = decide(&before, &after) else {
            panic!("a restart must go in place");
        };
        let restarts: Vec<&str> = change.restarts.iter().map(String::as_str).collect();
        assert_eq!(restarts, ["main", "side"]);
        assert!(change.images.is_empty());
        let mut again = Value::Object(after.clone());
        json_patch::merge(
            &mut again,
            &restart_patch("2026-01-02T03:05:00Z")["spec"]["template"],
        );
        let crate::plan::inplace::InPlaceDecision::InPlace(change) =
            decide(&Value::Object(after), again.as_object().unwrap())
        else {
            panic!("a second restart must go in place");
        };
        assert_eq!(change.restarts.len(), 2);
    }

    #[test]
    fn restart_notes_name_what_keeps_pods_from_restarting_in_place() {
        let mut cs = cloneset(&template(&[("main", "nginx:1")]));
        // The default type is ReCreate, as in the reference.
        assert!(restart_notes(&cs)[0].contains("ReCreate"));
        cs.spec.update_strategy =
            serde_json::from_value(json!({"type": "InPlaceIfPossible", "partition": 0})).unwrap();
        assert!(restart_notes(&cs).is_empty());
        cs.spec.update_strategy = serde_json::from_value(json!({
            "type": "ReCreate", "paused": true, "partition": 2}))
        .unwrap();
        let notes = restart_notes(&cs);
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes[0].contains("ReCreate"));
        assert!(notes[1].contains("paused"));
        assert!(notes[2].starts_with("partition 2"));
        cs.spec.update_strategy = serde_json::from_value(json!({"type": "OnDelete"})).unwrap();
        assert!(restart_notes(&cs)[0].contains("OnDelete"));
    }
}
