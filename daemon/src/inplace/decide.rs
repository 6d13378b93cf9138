//! Pure decisions of the in-place executor: is this pod in an in-place update, and if so
//! do the runtime's containers show it complete, or must a container be restarted.

use std::collections::BTreeMap;

use inplace_proto::{InPlaceUpdateState, LifecycleState, inplace_contract, keys};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::resize::{self, Limits};

/// A container as the runtime lists it (CRI `Container` / `ContainerStatus`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeContainer {
    pub id: String,
    pub name: String,
    pub attempt: u32,
    pub running: bool,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    /// The image id the container runs (CRI `imageRef` / `image_id`).
    pub image_ref: String,
    /// The image the container was created from, as the runtime lists it (CRI
    /// `image.image`: what the kubelet asked for, often the image id itself).
    pub image: String,
    /// The image name and image id as the runtime's `ContainerStatus` reports them, which
    /// is what the kubelet copies into the pod status (containerd: the image's first tag,
    /// and its repo digest). Read only where the in-place contract needs them: a state
    /// without the old container's id (written by OpenKruise), judged by images.
    pub reported_image: Option<(String, String)>,
    /// The environment the container was created with (name → value, the kubelet's
    /// downward-API values resolved), when the runtime reports it (containerd does, in
    /// `ContainerStatus` verbose info); read only for containers whose env reads pod
    /// metadata.
    pub env: Option<BTreeMap<String, String>>,
}

/// The daemon's view of a container for the in-place contract: the runtime's id (no
/// `<runtime>://` prefix), and its image and image id as the kubelet reports them where
/// they were read ([`RuntimeContainer::reported_image`]), else as the runtime lists them.
impl inplace_contract::ContainerView for RuntimeContainer {
    fn container_id(&self) -> Option<&str> {
        Some(&self.id)
    }
    fn image_id(&self) -> &str {
        self.reported_image
            .as_ref()
            .map_or(&self.image_ref, |(_, id)| id)
    }
    fn image(&self) -> &str {
        self.reported_image
            .as_ref()
            .map_or(&self.image, |(image, _)| image)
    }
}

/// What to do with one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No in-place update of this revision is waiting for the daemon: touch nothing.
    NotInUpdate,
    /// In an update, not complete yet.
    Wait(String),
    /// Apply these limits to this container through CRI (`--apply-resize-via-cri`).
    Resize {
        container: String,
        id: String,
        target: Limits,
    },
    /// Stop this container (the kubelet starts it again) because its environment
    /// comes from pod metadata that changed.
    Restart { container: String, id: String },
    /// Stop this container (the kubelet starts it again with the same spec): the update
    /// asks for its restart (`restartContainers`, `kubectl inplace rollout restart`) and
    /// the container recorded before the update still runs.
    RestartRequested { container: String, id: String },
    /// Every updated container runs what the spec asks: mark the pod ready and record
    /// these container ids (name → id).
    Complete(BTreeMap<String, String>),
    /// Later container batches are pending and every container whose env reads pod
    /// metadata runs with the pod's values: record these ids (name → id) as checked for
    /// batch `batch` (`daemonEnvChecked`), which lets the controller go on.
    EnvChecked {
        batch: usize,
        readers: BTreeMap<String, String>,
    },
    /// The state annotation or the pod is unusable; reported, nothing done.
    Invalid(String),
}

/// The pod's `InPlaceUpdateReady` condition status, if any.
pub fn ready_condition(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == keys::INPLACE_UPDATE_READY_CONDITION)
        .map(|c| c.status.as_str())
}

/// Cheap filter: the pod carries an update state and `InPlaceUpdateReady=False`.
pub fn in_update(pod: &Pod) -> bool {
    let has_state = pod.metadata.annotations.as_ref().is_some_and(|a| {
        a.contains_key(keys::INPLACE_UPDATE_STATE_ANNOTATION)
            || a.contains_key(keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY)
    });
    has_state && ready_condition(pod) == Some("False") && pod.metadata.deletion_timestamp.is_none()
}

/// Whether a container's environment reads pod labels or annotations.
pub fn env_from_metadata(c: &Container) -> bool {
    c.env.iter().flatten().any(|e| {
        e.value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .is_some_and(|f| {
                f.field_path.starts_with("metadata.labels")
                    || f.field_path.starts_with("metadata.annotations")
            })
    })
}

/// The env vars of `c` that read a pod label or annotation (`fieldRef`
/// `metadata.labels['k']` / `metadata.annotations['k']`) whose value in the running
/// container (`env`, as the container was created) differs from the pod's metadata now:
/// the kubelet resolves such env only when it creates a container, so these need a
/// restart. A key the pod does not carry reads as "" (as the kubelet resolves it).
///
/// This is what decides an env-from-metadata restart: the value the container runs with,
/// not whether this update changed the key. A pod whose annotation was patched by hand
/// before the template changed carries the new value already, while its container still
/// runs with the old one.
pub fn stale_metadata_env(
    c: &Container,
    env: &BTreeMap<String, String>,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Vec<String> {
    let mut want: BTreeMap<&str, &str> = BTreeMap::new();
    for e in c.env.iter().flatten() {
        let path = e
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str());
        let value = match path.and_then(inplace_proto::downward::metadata_key) {
            Some(("labels", key)) => meta.labels.as_ref().and_then(|l| l.get(key)),
            Some((_, key)) => meta.annotations.as_ref().and_then(|a| a.get(key)),
            None => {
                // A later plain definition of the same name wins, as in the kubelet.
                want.remove(e.name.as_str());
                continue;
            }
        };
        want.insert(e.name.as_str(), value.map_or("", String::as_str));
    }
    want.into_iter()
        .filter(|(name, value)| env.get(*name).map_or("", String::as_str) != *value)
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// The env a runtime container was created with, from CRI `ContainerStatus` verbose info:
/// containerd's `info` JSON carries the CRI config (`config.envs`, key/value pairs) and the
/// OCI spec (`runtimeSpec.process.env`, `K=V`); the config is read first.
pub fn env_from_verbose_info(
    info: &std::collections::HashMap<String, String>,
) -> Option<BTreeMap<String, String>> {
    let v: serde_json::Value = serde_json::from_str(info.get("info")?).ok()?;
    if let Some(envs) = v.pointer("/config/envs").and_then(|e| e.as_array()) {
        return Some(
            envs.iter()
                .filter_map(|e| {
                    let key = e.get("key")?.as_str()?;
                    let value = e.get("value").and_then(|v| v.as_str()).unwrap_or_default();
                    Some((key.to_owned(), value.to_owned()))
                })
                .collect(),
        );
    }
    let env = v.pointer("/runtimeSpec/process/env")?.as_array()?;
    Some(
        env.iter()
            .filter_map(|e| e.as_str()?.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
}

/// The newest runtime instance of container `name` (highest attempt, then newest).
pub fn newest<'a>(runtime: &'a [RuntimeContainer], name: &str) -> Option<&'a RuntimeContainer> {
    runtime
        .iter()
        .filter(|c| c.name == name)
        .max_by_key(|c| (c.attempt, c.created_at))
}

fn timestamp_nanos(t: &Timestamp) -> i64 {
    i64::try_from(t.as_nanosecond()).unwrap_or(i64::MAX)
}

/// Decides for one pod without resize information (see [`decide_with_resize`]).
pub fn decide(
    pod: &Pod,
    runtime: &[RuntimeContainer],
    resolved: &BTreeMap<String, String>,
) -> Decision {
    decide_with_resize(pod, runtime, resolved, &BTreeMap::new(), false)
}

/// Key under which the daemon records, in the state annotation, the runtime id of each
/// container it stopped for an env-from-metadata restart while the runtime did not report
/// the container's env (name → id). Not in the reference.
pub const STATE_ENV_STOPPED_KEY: &str = "daemonEnvStoppedIDs";

/// The containers recorded under [`STATE_ENV_STOPPED_KEY`] (name → runtime id).
pub fn env_stopped_ids(state: &InPlaceUpdateState) -> BTreeMap<String, String> {
    state
        .extra
        .get(STATE_ENV_STOPPED_KEY)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}

/// The state annotation with `container` → `id` added under [`STATE_ENV_STOPPED_KEY`], or
/// `None` when it is recorded already.
pub fn state_with_env_stopped(
    state: &InPlaceUpdateState,
    container: &str,
    id: &str,
) -> Result<Option<String>, serde_json::Error> {
    let mut ids = env_stopped_ids(state);
    if ids.get(container).map(String::as_str) == Some(id) {
        return Ok(None);
    }
    ids.insert(container.to_owned(), id.to_owned());
    let mut s = state.clone();
    s.extra
        .insert(STATE_ENV_STOPPED_KEY.into(), serde_json::to_value(ids)?);
    serde_json::to_string(&s).map(Some)
}

/// Facts of the node's own clock for the env-from-metadata decision when the runtime does
/// not report a container's env.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeClock {
    /// When this daemon saw the current container batch of the update appear (node clock,
    /// nanoseconds since the epoch), if it did: a pod already in the update when the
    /// daemon started has none.
    pub batch_seen_at: Option<i64>,
}

/// Whether env reader `rc` (container `name`) runs with metadata older than the current
/// batch, when the runtime does not report its env. Decided from facts of one clock or
/// none, so that a node clock ahead of or behind the controller's changes nothing:
/// - the daemon stopped a container of this name for this update (`stopped`, recorded in
///   the state): stale only while that same container is the newest one, whatever the
///   times say (the kubelet's next one was created after the stop, so after the update);
/// - else, the daemon saw the batch appear: stale if created before that (node clock
///   against node clock; the update was written before the daemon could see it);
/// - else (the pod was in the update when the daemon started): created before the time
///   the controller recorded (`updated_at`, the controller's clock: the only fact left).
///
/// `None` when there is no fact to decide from.
fn stale_without_env(
    rc: &RuntimeContainer,
    stopped: Option<&String>,
    clock: NodeClock,
    updated_at: Option<i64>,
) -> Option<bool> {
    if let Some(id) = stopped {
        return Some(&rc.id == id);
    }
    let anchor = clock.batch_seen_at.or(updated_at)?;
    Some(rc.created_at < anchor)
}

/// The containers whose resources an update changes (state `updateResources`).
pub fn resized_containers(state: &InPlaceUpdateState) -> Vec<String> {
    if !state.update_resources {
        return Vec::new();
    }
    state.last_container_statuses.keys().cloned().collect()
}

/// Decides for one pod. `resolved` maps each spec image to the id the runtime has for
/// it (absent: not resolved yet / not present); `observed` the limits applied to the
/// newest instance of each resized container; `apply_resize` whether the daemon may
/// apply a resize itself.
pub fn decide_with_resize(
    pod: &Pod,
    runtime: &[RuntimeContainer],
    resolved: &BTreeMap<String, String>,
    observed: &BTreeMap<String, Limits>,
    apply_resize: bool,
) -> Decision {
    decide_on_node(
        pod,
        runtime,
        resolved,
        observed,
        apply_resize,
        NodeClock::default(),
    )
}

/// [`decide_with_resize`] with the node's clock facts (see [`NodeClock`]).
pub fn decide_on_node(
    pod: &Pod,
    runtime: &[RuntimeContainer],
    resolved: &BTreeMap<String, String>,
    observed: &BTreeMap<String, Limits>,
    apply_resize: bool,
    clock: NodeClock,
) -> Decision {
    let state = state_of(pod);
    decide_with_state(
        pod,
        state.as_ref(),
        runtime,
        resolved,
        observed,
        apply_resize,
        clock,
    )
}

/// The pod's in-place update state annotation, read (`None`: the pod has none).
pub fn state_of(pod: &Pod) -> Option<Result<InPlaceUpdateState, serde_json::Error>> {
    InPlaceUpdateState::from_annotations(pod.metadata.annotations.as_ref()?)
}

/// [`decide_on_node`] over the pod's state as [`state_of`] read it: the executor reads it
/// once per sync, for the decision and for what it asks the runtime beforehand.
pub fn decide_with_state(
    pod: &Pod,
    state: Option<&Result<InPlaceUpdateState, serde_json::Error>>,
    runtime: &[RuntimeContainer],
    resolved: &BTreeMap<String, String>,
    observed: &BTreeMap<String, Limits>,
    apply_resize: bool,
    clock: NodeClock,
) -> Decision {
    if !in_update(pod) {
        return Decision::NotInUpdate;
    }
    let state = match state {
        None => return Decision::NotInUpdate,
        Some(Err(e)) => return Decision::Invalid(format!("unreadable in-place update state: {e}")),
        Some(Ok(s)) => s,
    };
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    // The label holds the full revision name, or only its hash with the short-hash gate,
    // while the state always names the full revision: the contract's rule accepts both.
    if !inplace_contract::at_revision(pod.metadata.labels.as_ref(), &state.revision) {
        return Decision::NotInUpdate;
    }
    if inplace_contract::grace_pending(Some(&annotations)) {
        return Decision::Wait("grace period: spec not patched yet".into());
    }
    let later_batches = state.has_next_batch();
    let Some(spec) = pod.spec.as_ref() else {
        return Decision::Invalid("pod has no spec".into());
    };
    let mut done = BTreeMap::new();

    for (name, before) in &state.last_container_statuses {
        let Some(c) = spec.containers.iter().find(|c| &c.name == name) else {
            return Decision::Invalid(format!(
                "state names container {name} the pod does not have"
            ));
        };
        let image = c.image.clone().unwrap_or_default();
        let Some(want) = resolved.get(&image) else {
            return Decision::Wait(format!(
                "image {image} of {name} not known to the runtime yet"
            ));
        };
        let Some(rc) = newest(runtime, name) else {
            return Decision::Wait(format!("no runtime container for {name} yet"));
        };
        if &rc.image_ref != want {
            return Decision::Wait(format!("{name} runs {} not {want} yet", rc.image_ref));
        }
        // The container that ran when the spec was patched is not the update, even on the
        // new image ID (see `container_updated`: the controller judges by the same rule).
        if !inplace_contract::container_updated(Some(&image), before, rc) {
            if inplace_contract::is_recorded_container(before, rc)
                && rc.running
                && state.restart_containers.iter().any(|r| r == name)
            {
                return Decision::RestartRequested {
                    container: name.clone(),
                    id: rc.id.clone(),
                };
            }
            return Decision::Wait(format!(
                "{name} not restarted by the kubelet yet (still {})",
                rc.id
            ));
        }
        if !rc.running {
            return Decision::Wait(format!("{name} not running yet"));
        }
        done.insert(name.clone(), rc.id.clone());
    }

    for name in resized_containers(state) {
        let Some(c) = spec.containers.iter().find(|c| c.name == name) else {
            continue;
        };
        let want = match resize::target(&c.resources.clone().unwrap_or_default()) {
            Ok(t) => t,
            Err(e) => return Decision::Invalid(format!("resources of {name}: {e}")),
        };
        let Some(got) = observed.get(&name) else {
            return Decision::Wait(format!("resources of {name} not observed yet"));
        };
        let diff = resize::mismatches(&want, got);
        if !diff.is_empty() {
            if apply_resize && let Some(rc) = newest(runtime, &name) {
                return Decision::Resize {
                    container: name,
                    id: rc.id.clone(),
                    target: want,
                };
            }
            return Decision::Wait(format!(
                "resize of {name} not applied yet: {}",
                diff.join(", ")
            ));
        }
    }

    if state.update_env_from_metadata {
        // For the fallback by times: when the current batch started, and its containers
        // (with later batches pending, only they may be restarted now).
        let current = state.container_batches_record.last();
        let updated_at = current
            .map(|b| timestamp_nanos(&b.timestamp.0))
            .or_else(|| {
                state
                    .update_timestamp
                    .as_ref()
                    .map(|t| timestamp_nanos(&t.0))
            });
        let in_current_batch = |name: &str| {
            !later_batches || current.is_some_and(|b| b.containers.iter().any(|c| c == name))
        };
        let stopped = env_stopped_ids(state);
        for c in spec.containers.iter().filter(|c| env_from_metadata(c)) {
            let Some(rc) = newest(runtime, &c.name) else {
                return Decision::Wait(format!("no runtime container for {} yet", c.name));
            };
            let stale = match &rc.env {
                Some(env) => !stale_metadata_env(c, env, &pod.metadata).is_empty(),
                // The runtime does not tell the env: a container created before the update
                // was written is stale (see `stale_without_env` for the facts used).
                None => match stale_without_env(rc, stopped.get(&c.name), clock, updated_at) {
                    Some(stale) => stale && in_current_batch(&c.name),
                    None => {
                        return Decision::Invalid(
                            "updateEnvFromMetadata without updateTimestamp, and the runtime does not report container env".into(),
                        );
                    }
                },
            };
            if stale {
                if rc.running {
                    return Decision::Restart {
                        container: c.name.clone(),
                        id: rc.id.clone(),
                    };
                }
                return Decision::Wait(format!(
                    "{} stopped, waiting for the kubelet to start it",
                    c.name
                ));
            }
            if !rc.running {
                return Decision::Wait(format!("{} not running yet", c.name));
            }
            done.insert(c.name.clone(), rc.id.clone());
        }
    }
    // When the daemon stopped a container itself (env from metadata, a restart), only once
    // the kubelet reports the containers judged here: the kubelet's last sync may have
    // ended before that stop, so the sync a True condition starts may run on a relist from
    // before it, with the old container running and ready, and make the pod Ready on that
    // stale status. A container the kubelet restarted for a new image was stopped and
    // started within one of its syncs, and its next sync waits for a relist newer than
    // that sync's end (`podCache.GetNewerThan`), which shows the new container: completing
    // from the runtime's view then saves the relist period the kubelet's report waits for.
    let daemon_stopped = state.update_env_from_metadata || !state.restart_containers.is_empty();
    if daemon_stopped && let Some(reason) = unreported(pod, &done) {
        return Decision::Wait(reason);
    }
    if later_batches {
        // The controller applies the next batch; what it needs from us is that the env
        // readers of this batch run with the pod's values (it cannot see env).
        let batch = state.container_batches_record.len();
        let readers: BTreeMap<String, String> = spec
            .containers
            .iter()
            .filter(|c| env_from_metadata(c))
            .filter_map(|c| Some((c.name.clone(), done.get(&c.name)?.clone())))
            .collect();
        if !state.update_env_from_metadata || readers.is_empty() {
            return Decision::Wait("later container batches pending".into());
        }
        return Decision::EnvChecked { batch, readers };
    }
    if completed_already(state, &done) {
        // This state's update was completed (by us: the ids are ours), and the pod is in
        // an update again: `InPlaceUpdateReady` False starts the controller's next update,
        // whose spec patch (with its own state) has not come yet. Completing now would mark
        // the pod ready between the two writes and refuse the controller's spec patch.
        return Decision::Wait(
            "the state's update is completed already; the next update's spec patch has not come yet"
                .into(),
        );
    }
    Decision::Complete(done)
}

/// Whether the container ids the daemon recorded in `state` when it completed the state's
/// update are those of `done`: that update is finished, whatever the condition says now.
fn completed_already(state: &InPlaceUpdateState, done: &BTreeMap<String, String>) -> bool {
    let Some(Value::Object(recorded)) = state.extra.get(STATE_CONTAINER_IDS_KEY) else {
        return false;
    };
    !done.is_empty()
        && done.iter().all(|(name, id)| {
            recorded
                .get(name)
                .and_then(Value::as_str)
                .is_some_and(|r| inplace_contract::runtime_id(r) == id)
        })
}

/// Why the kubelet's pod status does not show `done` (name → runtime id) yet, if it does not.
fn unreported(pod: &Pod, done: &BTreeMap<String, String>) -> Option<String> {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or(&[]);
    for (name, id) in done {
        let reported = statuses
            .iter()
            .find(|s| &s.name == name)
            .and_then(|s| s.container_id.as_deref())
            .map(inplace_contract::runtime_id);
        if reported != Some(id.as_str()) {
            return Some(format!(
                "the kubelet does not report {name}'s new container {id} yet"
            ));
        }
    }
    None
}

/// Key under which the daemon records the container ids in the state annotation.
pub const STATE_CONTAINER_IDS_KEY: &str = "daemonContainerIDs";

/// The state annotation with the observed container ids added (unknown keys kept).
pub fn state_with_container_ids(
    state: &InPlaceUpdateState,
    ids: &BTreeMap<String, String>,
) -> Result<String, serde_json::Error> {
    let mut s = state.clone();
    s.extra
        .insert(STATE_CONTAINER_IDS_KEY.into(), serde_json::to_value(ids)?);
    serde_json::to_string(&s)
}

/// The key under which `pod` keeps its in-place state (the legacy key only when the pod
/// has that one alone).
fn state_key(pod: &Pod) -> &'static str {
    let annotations = pod.metadata.annotations.as_ref();
    if annotations.is_some_and(|a| {
        !a.contains_key(keys::INPLACE_UPDATE_STATE_ANNOTATION)
            && a.contains_key(keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY)
    }) {
        keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY
    } else {
        keys::INPLACE_UPDATE_STATE_ANNOTATION
    }
}

/// The patch (merge or strategic: the same here) that writes `state` into `pod`'s state
/// annotation, pinned to the pod's resourceVersion.
pub fn state_patch(pod: &Pod, state: String) -> serde_json::Value {
    serde_json::json!({
        "metadata": {
            "resourceVersion": pod.metadata.resource_version,
            "annotations": { state_key(pod): state }
        }
    })
}

/// The lifecycle state the completion of `pod`'s update moves its label to: the one the
/// controller named in the state when it started the update (`lifecycleStateOnCompletion`,
/// written only when it was certain then), and only while the pod's label still says
/// Updating. Any other label was written after the start (by the controller or a user) and
/// is not ours to overwrite. `None` (a state without the field: written by the reference
/// or an older controller) leaves the label to the controller, as before.
pub fn lifecycle_on_completion(pod: &Pod, state: &InPlaceUpdateState) -> Option<LifecycleState> {
    let label = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::LIFECYCLE_STATE_LABEL))?;
    (LifecycleState::parse(label) == Some(LifecycleState::Updating))
        .then(|| state.lifecycle_on_completion())
        .flatten()
}

/// The one strategic merge patch of `pods/status` that completes an update of `pod`,
/// pinned to the resourceVersion judged:
/// - `InPlaceUpdateReady` True;
/// - the container ids (`ids`, name → `<runtime>://<id>`) into the state annotation
///   unless recorded already;
/// - the lifecycle label (and its timestamp annotation) Updating → the state the
///   controller named ([`lifecycle_on_completion`]), which saves the controller its own
///   lifecycle write. A `pods/status` patch may write labels (the server's status strategy
///   resets only the spec, deletion timestamp and owner references); a server that
///   dropped them would leave the label Updating with the condition True, and the
///   controller then writes the label itself, as it did before.
pub fn completion_patch(
    pod: &Pod,
    ids: &BTreeMap<String, String>,
    now: Timestamp,
) -> Result<serde_json::Value, serde_json::Error> {
    let rv = pod.metadata.resource_version.as_deref().unwrap_or_default();
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let Some(Ok(state)) = InPlaceUpdateState::from_annotations(&annotations) else {
        return Ok(inplace_contract::completion_patch(rv, Value::Null, now));
    };
    let mut metadata = match lifecycle_on_completion(pod, &state) {
        Some(to) => inplace_contract::lifecycle_metadata(
            &BTreeMap::from([(
                keys::LIFECYCLE_STATE_LABEL.to_owned(),
                to.as_str().to_owned(),
            )]),
            &LifecycleState::timestamp(now),
        ),
        None => Value::Null,
    };
    if state.extra.get(STATE_CONTAINER_IDS_KEY) != Some(&serde_json::to_value(ids)?) {
        metadata["annotations"][state_key(pod)] =
            serde_json::json!(state_with_container_ids(&state, ids)?);
    }
    Ok(inplace_contract::completion_patch(rv, metadata, now))
}

/// The strategic merge patch of pod status that sets `InPlaceUpdateReady` True
/// (conditions merge by `type`, so no other condition is touched).
pub fn ready_patch(now: Timestamp) -> serde_json::Value {
    serde_json::json!({ "status": inplace_contract::ready_status(now) })
}

#[cfg(test)]
mod tests;
