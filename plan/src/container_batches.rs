//! Container launch priority in in-place updates (OpenKruise
//! `pkg/util/inplaceupdate/inplace_update.go`).
//!
//! When an in-place update changes several containers that have launch priorities, the
//! containers go in batches: the highest priority first, the next batch only once every
//! container of the previous one runs the updated spec and is started (running, its
//! postStart hook and startup probe done) and Ready. Containers without a priority go with
//! the first batch. Containers whose env reads the same changed label or annotation go
//! together (the key can only take one value at a time), so they are pulled into the
//! batch of the first of them. A batch that never gets there (a bad image) holds every
//! later batch back: those containers are never touched.
//!
//! A container's priority comes from the template, since there is no admission webhook
//! to inject it into pods. The reference's pod webhook turns the template's declaration
//! into a `KRUISE_CONTAINER_BARRIER` env on every container, and its in-place update reads
//! that env; we read what the webhook would have written:
//! - `KRUISE_CONTAINER_BARRIER` env with a ConfigMap key `p_<n>` (already in templates
//!   copied from running pods) → `n`, per container;
//! - else, with the annotation `apps.kruise.io/container-launch-priority: Ordered`:
//!   `-index` for every container (the first highest; the webhook then ignores
//!   `KRUISE_CONTAINER_PRIORITY`);
//! - else, when any container has a `KRUISE_CONTAINER_PRIORITY` env: its integer value,
//!   and 0 for every container without one (or with a value that is no integer: the
//!   webhook refuses such a pod, we do not refuse the update);
//! - else none.
//!
//! A restart with an unchanged spec (`restartContainers`, from `kubectl inplace rollout
//! restart`) goes in batches like an image change.
//!
//! The split is kept in the in-place state: `nextContainerImages`,
//! `nextContainerRefMetadata`, `nextContainerResources`, `nextContainerRestarts` hold what
//! is left,
//! `preCheckBeforeNext.containersRequiredReady` the containers that must be Ready first.

use std::collections::{BTreeMap, BTreeSet};

use inplace_proto::{InPlaceUpdateGrace, InPlaceUpdateState, keys};
use serde_json::{Map, Value};

use crate::cached::ContainerStatusView;

/// Each container of the template, in order, with its launch priority.
pub fn launch_priorities(template: &Map<String, Value>) -> Vec<(String, Option<i64>)> {
    let ordered = template
        .get("metadata")
        .and_then(|m| {
            m.pointer(&format!(
                "/annotations/{}",
                escape(keys::CONTAINER_LAUNCH_PRIORITY_ANNOTATION)
            ))
        })
        .and_then(Value::as_str)
        == Some(keys::CONTAINER_LAUNCH_ORDERED);
    let containers: Vec<&Value> = template
        .get("spec")
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let any_priority_env = containers
        .iter()
        .any(|c| find_env(c, keys::CONTAINER_PRIORITY_ENV).is_some());
    containers
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let name = c.get("name")?.as_str()?.to_owned();
            let priority = barrier_priority(c).or_else(|| {
                if ordered {
                    Some(-i64::try_from(i).unwrap_or(i64::MAX))
                } else if any_priority_env {
                    Some(env_priority(c).unwrap_or(0))
                } else {
                    None
                }
            });
            Some((name, priority))
        })
        .collect()
}

/// A JSON pointer token for `key` (`/` and `~` escaped).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn find_env<'v>(container: &'v Value, name: &str) -> Option<&'v Value> {
    container
        .get("env")
        .and_then(Value::as_array)?
        .iter()
        .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
}

/// `p_<n>` of a `KRUISE_CONTAINER_BARRIER` env.
fn barrier_priority(container: &Value) -> Option<i64> {
    find_env(container, keys::CONTAINER_BARRIER_ENV)?
        .pointer("/valueFrom/configMapKeyRef/key")
        .and_then(Value::as_str)?
        .strip_prefix("p_")?
        .parse()
        .ok()
}

/// The integer value of a `KRUISE_CONTAINER_PRIORITY` env.
fn env_priority(container: &Value) -> Option<i64> {
    find_env(container, keys::CONTAINER_PRIORITY_ENV)?
        .get("value")
        .and_then(Value::as_str)?
        .trim()
        .parse()
        .ok()
}

/// An in-place update split into the batch to apply now and what is left for later.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Split {
    /// The update restricted to this batch's containers (the metadata patch whole).
    pub now: InPlaceUpdateGrace,
    /// Containers of this batch, sorted.
    pub containers: Vec<String>,
    pub next_images: BTreeMap<String, String>,
    pub next_ref_metadata:
        BTreeMap<String, k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
    pub next_resources: BTreeMap<String, k8s_openapi::api::core::v1::ResourceRequirements>,
    /// Containers to restart (with an unchanged spec) in a later batch.
    pub next_restarts: Vec<String>,
}

impl Split {
    /// Something is left for a later batch.
    pub fn has_next(&self) -> bool {
        !self.next_images.is_empty()
            || !self.next_ref_metadata.is_empty()
            || !self.next_resources.is_empty()
            || !self.next_restarts.is_empty()
    }

    /// Writes the batch bookkeeping into `state`: what is left, the containers that must be
    /// Ready before it, and (by the caller) the batch record.
    pub fn record_in(&self, state: &mut InPlaceUpdateState) {
        state.next_container_images = self.next_images.clone();
        state.next_container_ref_metadata = self.next_ref_metadata.clone();
        state.next_container_resources = self.next_resources.clone();
        state.next_container_restarts = self.next_restarts.clone();
        state.pre_check_before_next = self.has_next().then(|| inplace_proto::PreCheckBeforeNext {
            containers_required_ready: self.containers.clone(),
        });
    }
}

/// Splits `spec` by the containers' `priorities` (from [`launch_priorities`]).
pub fn split(spec: &InPlaceUpdateGrace, priorities: &[(String, Option<i64>)]) -> Split {
    let changed = |name: &str| {
        spec.container_images.contains_key(name)
            || spec.container_ref_metadata.contains_key(name)
            || spec.container_resources.contains_key(name)
            || spec.restart_containers.iter().any(|r| r == name)
    };
    let mut now: BTreeSet<String> = BTreeSet::new();
    let mut highest: Option<i64> = None;
    let mut at_highest: Vec<&str> = Vec::new();
    for (name, priority) in priorities.iter().filter(|(n, _)| changed(n)) {
        match *priority {
            None => {
                now.insert(name.clone());
            }
            Some(p) if highest.is_none_or(|h| p > h) => {
                highest = Some(p);
                at_highest = vec![name];
            }
            Some(p) if Some(p) == highest => at_highest.push(name),
            Some(_) => {}
        }
    }
    now.extend(at_highest.into_iter().map(str::to_owned));
    // Changed containers the template does not list (cannot happen for a valid revision)
    // go now rather than never.
    let listed: BTreeSet<&str> = priorities.iter().map(|(n, _)| n.as_str()).collect();
    for name in spec
        .container_images
        .keys()
        .chain(spec.container_ref_metadata.keys())
        .chain(spec.container_resources.keys())
        .chain(&spec.restart_containers)
    {
        if !listed.contains(name.as_str()) {
            now.insert(name.clone());
        }
    }
    pull_in_metadata_sharers(&mut now, spec);

    let mut out = Split {
        now: InPlaceUpdateGrace {
            revision: spec.revision.clone(),
            meta_data_patch: spec.meta_data_patch.clone(),
            grace_seconds: spec.grace_seconds,
            extra: spec.extra.clone(),
            ..InPlaceUpdateGrace::default()
        },
        containers: now.iter().cloned().collect(),
        ..Split::default()
    };
    split_map(
        &spec.container_images,
        &now,
        &mut out.now.container_images,
        &mut out.next_images,
    );
    split_map(
        &spec.container_ref_metadata,
        &now,
        &mut out.now.container_ref_metadata,
        &mut out.next_ref_metadata,
    );
    split_map(
        &spec.container_resources,
        &now,
        &mut out.now.container_resources,
        &mut out.next_resources,
    );
    let (now_restarts, next_restarts) = spec
        .restart_containers
        .iter()
        .cloned()
        .partition(|name| now.contains(name));
    out.now.restart_containers = now_restarts;
    out.next_restarts = next_restarts;
    out.now.update_env_from_metadata = !out.now.container_ref_metadata.is_empty();
    out
}

/// Copies each entry of `all` (keyed by container) into `now` when its container is in
/// `batch`, else into `next`.
fn split_map<V: Clone>(
    all: &BTreeMap<String, V>,
    batch: &BTreeSet<String>,
    now: &mut BTreeMap<String, V>,
    next: &mut BTreeMap<String, V>,
) {
    for (name, value) in all {
        let to = if batch.contains(name) {
            &mut *now
        } else {
            &mut *next
        };
        to.insert(name.clone(), value.clone());
    }
}

/// Adds to `now` every container that reads a label or annotation that a container of
/// `now` reads, until nothing changes.
fn pull_in_metadata_sharers(now: &mut BTreeSet<String>, spec: &InPlaceUpdateGrace) {
    let keys_of = |name: &str| {
        let meta = spec.container_ref_metadata.get(name);
        let labels = meta.and_then(|m| m.labels.as_ref()).into_iter().flatten();
        let annotations = meta
            .and_then(|m| m.annotations.as_ref())
            .into_iter()
            .flatten();
        labels
            .map(|(k, _)| ("labels", k.clone()))
            .chain(annotations.map(|(k, _)| ("annotations", k.clone())))
            .collect::<BTreeSet<_>>()
    };
    loop {
        let taken: BTreeSet<(&str, String)> = now.iter().flat_map(|n| keys_of(n)).collect();
        let joining: Vec<String> = spec
            .container_ref_metadata
            .keys()
            .filter(|n| !now.contains(*n))
            .filter(|n| keys_of(n).iter().any(|k| taken.contains(k)))
            .cloned()
            .collect();
        if joining.is_empty() {
            return;
        }
        now.extend(joining);
    }
}

/// Whether the next batch of an in-place update may start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NextBatch {
    /// No later batch is pending.
    None,
    /// Waiting for these containers (of the previous batch) to be Ready.
    Waiting(Vec<String>),
    /// The previous batch is Ready: apply the next one.
    Due,
}

/// Judges `state` against the pod's container statuses.
pub fn next_batch<S: ContainerStatusView>(state: &InPlaceUpdateState, statuses: &[S]) -> NextBatch {
    if !state.has_next_batch() {
        return NextBatch::None;
    }
    let required = state
        .pre_check_before_next
        .as_ref()
        .map(|p| p.containers_required_ready.as_slice())
        .unwrap_or_default();
    let not_ready: Vec<String> = required
        .iter()
        .filter(|name| {
            !statuses
                .iter()
                .any(|s| s.name() == name.as_str() && started_and_ready(s))
        })
        .cloned()
        .collect();
    if not_ready.is_empty() {
        NextBatch::Due
    } else {
        NextBatch::Waiting(not_ready)
    }
}

/// The containers of the current batch whose only change is a label or annotation their
/// env reads (in the batch record, not in `lastContainerStatuses`, where the reference
/// records the containers whose image changes) that the node daemon has not yet reported
/// running with the pod's values (`daemonEnvChecked` for this batch, naming the container
/// the status shows now). Only the daemon restarts them, and only it can see their env:
/// the next batch waits for its word. Empty when nothing is awaited.
pub fn env_restarts_awaited<S: ContainerStatusView>(
    state: &InPlaceUpdateState,
    statuses: &[S],
) -> Vec<String> {
    let Some(batch) = state.container_batches_record.last() else {
        return Vec::new();
    };
    let checked = state
        .daemon_env_checked
        .as_ref()
        .filter(|c| c.batch == state.container_batches_record.len());
    batch
        .containers
        .iter()
        .filter(|name| !state.last_container_statuses.contains_key(*name))
        .filter(|name| {
            let running = statuses
                .iter()
                .find(|s| s.name() == name.as_str())
                .and_then(|s| s.container_id());
            let verified = checked
                .and_then(|c| c.containers.get(*name))
                .map(String::as_str);
            running.is_none() || running != verified
        })
        .cloned()
        .collect()
}

/// Running, started (postStart hook and startup probe done: the kubelet reports neither
/// before) and Ready, as the reference's pre-check asks (`state.running` and `ready`).
fn started_and_ready(status: &impl ContainerStatusView) -> bool {
    status.ready()
        && status.started() != Some(false)
        && status.state().is_some_and(|s| s.running.is_some())
}

/// The update that is left in `state`, as a spec to [`split`] again.
pub fn remaining(state: &InPlaceUpdateState) -> InPlaceUpdateGrace {
    InPlaceUpdateGrace {
        revision: state.revision.clone(),
        container_images: state.next_container_images.clone(),
        container_ref_metadata: state.next_container_ref_metadata.clone(),
        container_resources: state.next_container_resources.clone(),
        restart_containers: state.next_container_restarts.clone(),
        update_env_from_metadata: !state.next_container_ref_metadata.is_empty(),
        ..InPlaceUpdateGrace::default()
    }
}

#[cfg(test)]
mod tests;
