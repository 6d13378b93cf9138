//! `kubectl inplace get NAME [--watch]`: a view of a CloneSet per revision and per pod, as
//! pure functions over objects already read (the I/O is in [`super::online`]):
//!
//! - [`build`]: the [`View`] data (what `-o json|yaml` prints);
//! - [`table`]: the view in words;
//! - [`frame`]: one redraw of `--watch`: on a terminal the screen is cleared first (ANSI),
//!   otherwise the table is appended after a blank line.
//!
//! Per pod: its revision, lifecycle state, in-place progress (from the in-place state and
//! the `InPlaceUpdateReady` condition: how many of the containers the update restarts run a
//! new container), readiness, restarts, and for each image of the CloneSet's template the
//! pull on the pod's node as its NodeImage reports it (phase and percent).

use std::collections::BTreeMap;

use inplace_proto::{CloneSet, InPlaceUpdateState, NodeImage, keys};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use inplace_proto::inplace_contract::{
    at_revision, container_updated, grace_pending, revision_matches,
};

/// The whole view.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    pub cloneset: String,
    pub replicas: i32,
    pub status: StatusLine,
    pub paused: bool,
    pub update_revision: String,
    pub current_revision: String,
    /// The images of the CloneSet's template, in container order (what each pod's
    /// `imagePulls` reports on).
    pub images: Vec<String>,
    pub revisions: Vec<RevisionRow>,
    pub pods: Vec<PodRow>,
    /// Why the rollout waits ([`super::waiting::reasons`]); set by the command, which knows
    /// the time ([`build`] leaves it empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<super::waiting::Waiting>,
}

/// The CloneSet's status counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusLine {
    pub replicas: i32,
    pub ready: i32,
    pub updated: i32,
    pub updated_ready: i32,
}

/// One revision and its pods.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRow {
    /// `.revision` of the ControllerRevision (0 when there is none, e.g. a pod's label
    /// names a revision that is gone).
    pub number: i64,
    pub name: String,
    pub update: bool,
    pub current: bool,
    pub pods: usize,
    pub ready: usize,
    /// Image per container of its template, in order.
    pub images: Vec<String>,
}

/// One pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRow {
    pub name: String,
    pub revision: String,
    pub updated: bool,
    pub lifecycle: String,
    pub in_place: String,
    pub ready: bool,
    pub restarts: i64,
    pub node: String,
    /// Per image of the CloneSet's template: the pull on the pod's node (`-` when its
    /// NodeImage does not list it).
    pub image_pulls: Vec<String>,
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// The in-place progress of `pod`, in words.
pub fn in_place_progress(pod: &Pod) -> String {
    if grace_pending(pod.metadata.annotations.as_ref()) {
        return "grace period".into();
    }
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let state = match InPlaceUpdateState::from_annotations(&annotations) {
        None => return "-".into(),
        Some(Err(_)) => return "unreadable state".into(),
        Some(Ok(s)) => s,
    };
    if !at_revision(pod.metadata.labels.as_ref(), &state.revision) {
        return "-".into();
    }
    match condition(pod, keys::INPLACE_UPDATE_READY_CONDITION) {
        Some("False") => {}
        Some(_) => return "done".into(),
        None => return "-".into(),
    }
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or(&[]);
    let specs = pod.spec.as_ref().map(|s| s.containers.as_slice());
    let total = state.last_container_statuses.len();
    let restarted = state
        .last_container_statuses
        .iter()
        .filter(|(name, before)| {
            let image = specs
                .and_then(|cs| cs.iter().find(|c| &c.name == *name))
                .and_then(|c| c.image.as_deref());
            statuses
                .iter()
                .find(|s| &s.name == *name)
                .is_some_and(|s| container_updated(image, before, s))
        })
        .count();
    let mut out = if total == 0 {
        "updating".to_string()
    } else {
        format!("updating {restarted}/{total}")
    };
    if state.has_next_batch() {
        out.push_str(", next batch pending");
    }
    out
}

/// The pull of `image` on `node_image`'s node: `Phase` and, while pulling, the percent.
pub fn image_pull(node_image: Option<&NodeImage>, image: &str) -> String {
    let (name, tag) = crate::imagepulljob::plan::split_image(image);
    let found = node_image
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.image_statuses.get(&name))
        .and_then(|s| s.tags.iter().find(|t| t.tag == tag));
    match found {
        None => "-".into(),
        Some(t) => {
            let phase = format!("{:?}", t.phase);
            if t.phase == inplace_proto::ImagePullPhase::Pulling {
                format!("{phase} {}%", t.progress)
            } else {
                phase
            }
        }
    }
}

fn images_of_template(template: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
    template
        .get("spec")
        .and_then(|s| s.get("containers"))
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("image").and_then(serde_json::Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// The view of `cs` from its pods and revisions (only those it controls are taken) and the
/// NodeImages of the nodes.
pub fn build(
    cs: &CloneSet,
    pods: &[Pod],
    revisions: &[ControllerRevision],
    node_images: &[NodeImage],
) -> View {
    let uid = cs.metadata.uid.clone().unwrap_or_default();
    let status = cs.status.clone().unwrap_or_default();
    let update = status.update_revision.clone().unwrap_or_default();
    let current = status.current_revision.clone().unwrap_or_default();
    let template_images = images_of_template(&cs.spec.template.0.0);
    let by_node: BTreeMap<&str, &NodeImage> = node_images
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
        .collect();
    let mut pod_rows: Vec<PodRow> = pods
        .iter()
        .filter(|p| super::day2::controlled_by(&p.metadata, &uid))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let labels = p.metadata.labels.clone().unwrap_or_default();
            let revision = labels
                .get(keys::REVISION_LABEL)
                .cloned()
                .unwrap_or_default();
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map(|cs| cs.iter().map(|c| i64::from(c.restart_count)).sum())
                .unwrap_or(0);
            let node_image = by_node.get(node.as_str()).copied();
            PodRow {
                name: p.metadata.name.clone().unwrap_or_default(),
                updated: !update.is_empty() && revision_matches(&revision, &update),
                revision,
                lifecycle: labels
                    .get(keys::LIFECYCLE_STATE_LABEL)
                    .cloned()
                    .unwrap_or_else(|| "-".into()),
                in_place: in_place_progress(p),
                ready: condition(p, "Ready") == Some("True"),
                restarts,
                image_pulls: template_images
                    .iter()
                    .map(|i| image_pull(node_image, i))
                    .collect(),
                node,
            }
        })
        .collect();
    pod_rows.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rows: Vec<RevisionRow> = super::day2::owned_revisions(cs, revisions)
        .iter()
        .map(|r| {
            let name = r.metadata.name.clone().unwrap_or_default();
            RevisionRow {
                number: r.revision,
                update: name == update,
                current: name == current,
                images: crate::plan::revision::template_of(r)
                    .map(|t| images_of_template(&t.0.0))
                    .unwrap_or_default(),
                name,
                ..RevisionRow::default()
            }
        })
        .collect();
    for pod in &pod_rows {
        let i = match rows
            .iter()
            .position(|r| revision_matches(&pod.revision, &r.name))
        {
            Some(i) => i,
            None => {
                rows.push(RevisionRow {
                    name: pod.revision.clone(),
                    ..RevisionRow::default()
                });
                rows.len() - 1
            }
        };
        rows[i].pods += 1;
        rows[i].ready += usize::from(pod.ready);
    }
    View {
        cloneset: cs.metadata.name.clone().unwrap_or_default(),
        replicas: cs.replicas(),
        status: StatusLine {
            replicas: status.replicas,
            ready: status.ready_replicas,
            updated: status.updated_replicas,
            updated_ready: status.updated_ready_replicas,
        },
        paused: cs.spec.update_strategy.as_ref().is_some_and(|s| s.paused),
        update_revision: update,
        current_revision: current,
        images: template_images,
        revisions: rows,
        pods: pod_rows,
        waiting: Vec::new(),
    }
}

/// Rows of cells, left-aligned in columns two spaces apart, trailing blanks trimmed.
pub fn columns(rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if widths.len() <= i {
                widths.push(0);
            }
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The view in words: a status line, why the rollout waits (if it does), the revisions,
/// the pods.
pub fn table(view: &View) -> String {
    let s = &view.status;
    let mut out = format!(
        "cloneset.apps.kruise.io/{}: replicas {}/{}, ready {}, updated {}, updated ready {}{}\n",
        view.cloneset,
        s.replicas,
        view.replicas,
        s.ready,
        s.updated,
        s.updated_ready,
        if view.paused { ", paused" } else { "" }
    );
    for w in &view.waiting {
        out.push_str(&format!("waiting: {w}\n"));
    }
    out.push('\n');
    let mut rows = vec![
        ["REVISION", "NAME", "ROLE", "PODS", "READY", "IMAGES"]
            .map(str::to_owned)
            .to_vec(),
    ];
    for r in &view.revisions {
        let role = match (r.update, r.current) {
            (true, true) => "update,current",
            (true, false) => "update",
            (false, true) => "current",
            (false, false) => "-",
        };
        rows.push(vec![
            if r.number == 0 {
                "?".into()
            } else {
                r.number.to_string()
            },
            r.name.clone(),
            role.into(),
            r.pods.to_string(),
            r.ready.to_string(),
            if r.images.is_empty() {
                "-".into()
            } else {
                r.images.join(",")
            },
        ]);
    }
    out.push_str(&columns(&rows));
    out.push('\n');
    let mut rows = vec![
        [
            "POD",
            "REVISION",
            "UPDATED",
            "LIFECYCLE",
            "IN-PLACE",
            "READY",
            "RESTARTS",
            "NODE",
            "IMAGE-PULL",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for p in &view.pods {
        rows.push(vec![
            p.name.clone(),
            crate::plan::revision::short_hash(&p.revision).to_owned(),
            if p.updated { "yes" } else { "no" }.into(),
            p.lifecycle.clone(),
            p.in_place.clone(),
            if p.ready { "yes" } else { "no" }.into(),
            p.restarts.to_string(),
            if p.node.is_empty() {
                "-".into()
            } else {
                p.node.clone()
            },
            pulls(&view.images, &p.image_pulls),
        ]);
    }
    if view.pods.is_empty() {
        rows.push(vec!["(no pods)".into()]);
    }
    out.push_str(&columns(&rows));
    out
}

/// `IMAGE=STATE` per template image (the image by its last path segment), `-` when no
/// NodeImage lists any.
fn pulls(images: &[String], states: &[String]) -> String {
    if states.iter().all(|s| s == "-") {
        return "-".into();
    }
    images
        .iter()
        .zip(states)
        .map(|(i, s)| format!("{}={s}", i.rsplit('/').next().unwrap_or(i)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// ANSI: cursor home, clear the screen.
pub const CLEAR: &str = "\x1b[H\x1b[2J";

/// One redraw of `--watch`: cleared first on a terminal; otherwise appended, after a blank
/// line unless it is the first.
pub fn frame(text: &str, terminal: bool, first: bool) -> String {
    if terminal {
        format!("{CLEAR}{text}")
    } else if first {
        text.to_owned()
    } else {
        format!("\n{text}")
    }
}

#[cfg(test)]
mod tests;
