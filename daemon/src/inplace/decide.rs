//! Pure decisions of the in-place executor: is this pod in an in-place update, and if so
//! do the runtime's containers show it complete, or must a container be restarted.

use std::collections::BTreeMap;

use inplace_proto::InPlaceUpdateState;
use inplace_proto::keys;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;

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
    /// The environment the container was created with (name → value, the kubelet's
    /// downward-API values resolved), when the runtime reports it (containerd does, in
    /// `ContainerStatus` verbose info); read only for containers whose env reads pod
    /// metadata.
    pub env: Option<BTreeMap<String, String>>,
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
    if !in_update(pod) {
        return Decision::NotInUpdate;
    }
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let state = match InPlaceUpdateState::from_annotations(&annotations) {
        None => return Decision::NotInUpdate,
        Some(Err(e)) => return Decision::Invalid(format!("unreadable in-place update state: {e}")),
        Some(Ok(s)) => s,
    };
    let revision = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::REVISION_LABEL));
    if revision != Some(&state.revision) {
        return Decision::NotInUpdate;
    }
    if annotations.contains_key(keys::INPLACE_UPDATE_GRACE_ANNOTATION)
        || annotations.contains_key(keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY)
    {
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
        // The container that ran when the spec was patched (recorded by the controller as
        // `<runtime>://<id>`) is not the update, even on the new image ID: a retag has the
        // same image ID as the old tag, and only a new container runs the new spec.
        let old_id = before
            .container_id
            .rsplit_once("://")
            .map_or(before.container_id.as_str(), |(_, id)| id);
        if !old_id.is_empty() && rc.id == old_id {
            if rc.running && state.restart_containers.iter().any(|r| r == name) {
                return Decision::RestartRequested {
                    container: name.clone(),
                    id: rc.id.clone(),
                };
            }
            return Decision::Wait(format!(
                "{name} not restarted by the kubelet yet (still {old_id})"
            ));
        }
        if !rc.running {
            return Decision::Wait(format!("{name} not running yet"));
        }
        done.insert(name.clone(), rc.id.clone());
    }

    for name in resized_containers(&state) {
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
        for c in spec.containers.iter().filter(|c| env_from_metadata(c)) {
            let Some(rc) = newest(runtime, &c.name) else {
                return Decision::Wait(format!("no runtime container for {} yet", c.name));
            };
            let stale = match &rc.env {
                Some(env) => !stale_metadata_env(c, env, &pod.metadata).is_empty(),
                // The runtime does not tell the env: a container created before the update
                // was written is stale (compares the node's clock with the controller's).
                None => match updated_at {
                    Some(at) => rc.created_at < at && in_current_batch(&c.name),
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
    // Only once the kubelet reports the containers judged here: until its pod status
    // names them, it still reports the old containers (running and ready), and a True
    // condition would make the pod Ready on that stale status before the new container
    // has passed its readiness probe.
    if let Some(reason) = unreported(pod, &done) {
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
    Decision::Complete(done)
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
            .map(|full| full.rsplit_once("://").map_or(full, |(_, id)| id));
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

/// The one strategic merge patch of `pods/status` that completes an update of `pod`:
/// `InPlaceUpdateReady` True, the container ids (`ids`, name → `<runtime>://<id>`) into the
/// state annotation unless recorded already, pinned to the resourceVersion judged.
pub fn completion_patch(
    pod: &Pod,
    ids: &BTreeMap<String, String>,
    now: Timestamp,
) -> Result<serde_json::Value, serde_json::Error> {
    let mut patch = ready_patch(now);
    patch["metadata"] = serde_json::json!({ "resourceVersion": pod.metadata.resource_version });
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    if let Some(Ok(state)) = InPlaceUpdateState::from_annotations(&annotations)
        && state.extra.get(STATE_CONTAINER_IDS_KEY) != Some(&serde_json::to_value(ids)?)
    {
        patch["metadata"]["annotations"] =
            serde_json::json!({ state_key(pod): state_with_container_ids(&state, ids)? });
    }
    Ok(patch)
}

/// The strategic merge patch of pod status that sets `InPlaceUpdateReady` True
/// (conditions merge by `type`, so no other condition is touched).
pub fn ready_patch(now: Timestamp) -> serde_json::Value {
    serde_json::json!({
        "status": {
            "conditions": [{
                "type": keys::INPLACE_UPDATE_READY_CONDITION,
                "status": "True",
                "lastTransitionTime": now.to_string(),
                "reason": null,
                "message": null,
            }]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `p` with its status naming the newest runtime container of each name, as the
    /// kubelet reports once it has synced.
    fn reported(p: &Pod, rt: &[RuntimeContainer]) -> Pod {
        let mut p = p.clone();
        let names: std::collections::BTreeSet<&str> = rt.iter().map(|c| c.name.as_str()).collect();
        let statuses = names
            .into_iter()
            .filter_map(|n| newest(rt, n))
            .map(|c| k8s_openapi::api::core::v1::ContainerStatus {
                name: c.name.clone(),
                container_id: Some(format!("containerd://{}", c.id)),
                ..Default::default()
            })
            .collect();
        p.status
            .get_or_insert_with(Default::default)
            .container_statuses = Some(statuses);
        p
    }

    fn decide(p: &Pod, rt: &[RuntimeContainer], res: &BTreeMap<String, String>) -> Decision {
        super::decide(&reported(p, rt), rt, res)
    }

    fn decide_with_resize(
        p: &Pod,
        rt: &[RuntimeContainer],
        res: &BTreeMap<String, String>,
        observed: &BTreeMap<String, Limits>,
        apply: bool,
    ) -> Decision {
        super::decide_with_resize(&reported(p, rt), rt, res, observed, apply)
    }
    use serde_json::json;

    fn pod(extra: serde_json::Value) -> Pod {
        let mut base = json!({
            "metadata": {
                "name": "p", "uid": "u1",
                "labels": {"controller-revision-hash": "cs-2"},
                "annotations": {
                    "apps.kruise.io/inplace-update-state":
                        r#"{"revision":"cs-2","updateTimestamp":"2026-01-01T00:00:10Z","lastContainerStatuses":{"main":{"imageID":"reg/app@sha256:old"}},"updateImages":true}"#
                }
            },
            "spec": {"containers": [
                {"name": "main", "image": "reg/app:v2"},
                {"name": "side", "image": "reg/side:v1",
                 "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['x']"}}}]}
            ]},
            "status": {"conditions": [
                {"type": "InPlaceUpdateReady", "status": "False", "reason": "StartInPlaceUpdate"},
                {"type": "Ready", "status": "False"}
            ]}
        });
        merge(&mut base, extra);
        serde_json::from_value(base).unwrap_or_default()
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    const T10: i64 = 1_767_225_610_000_000_000; // 2026-01-01T00:00:10Z

    fn rc(
        id: &str,
        name: &str,
        attempt: u32,
        running: bool,
        created: i64,
        image: &str,
    ) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            name: name.into(),
            attempt,
            running,
            created_at: created,
            image_ref: image.into(),
            env: None,
        }
    }

    fn with_env(mut c: RuntimeContainer, env: &[(&str, &str)]) -> RuntimeContainer {
        c.env = Some(
            env.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        c
    }

    /// The controller recorded the container that ran as the spec was patched: that
    /// container is not the update even on the new image ID (a retag keeps the image ID).
    #[test]
    fn a_recorded_old_container_is_not_the_update_even_on_the_same_image_id() {
        let state = r#"{"revision":"cs-2","updateTimestamp":"2026-01-01T00:00:10Z","lastContainerStatuses":{"main":{"imageID":"reg/app@sha256:new","containerID":"containerd://a0"}},"updateImages":true}"#;
        let p = pod(
            json!({"metadata": {"annotations": {"apps.kruise.io/inplace-update-state": state}}}),
        );
        assert_eq!(
            decide(
                &p,
                &[rc("a0", "main", 0, true, T10 - 5, "sha256:new")],
                &resolved()
            ),
            Decision::Wait("main not restarted by the kubelet yet (still a0)".into())
        );
        assert_eq!(
            decide(
                &p,
                &[
                    rc("a0", "main", 0, false, T10 - 5, "sha256:new"),
                    rc("a1", "main", 1, true, T10 + 5, "sha256:new"),
                ],
                &resolved()
            ),
            Decision::Complete(BTreeMap::from([("main".into(), "a1".into())]))
        );
    }

    /// `kubectl inplace rollout restart`: the containers in `restartContainers` keep their
    /// spec; the daemon stops the recorded container while it runs (the kubelet would never
    /// restart it), waits while it is stopped, and completes once a new one runs and the
    /// kubelet reports it. A container not asked for is never stopped.
    #[test]
    fn requested_restarts_stop_the_recorded_container_once() {
        let state = r#"{"revision":"cs-2","updateTimestamp":"2026-01-01T00:00:10Z","lastContainerStatuses":{"main":{"imageID":"reg/app@sha256:new","containerID":"containerd://a0"}},"restartContainers":["main"]}"#;
        let p = pod(
            json!({"metadata": {"annotations": {"apps.kruise.io/inplace-update-state": state}}}),
        );
        let old = rc("a0", "main", 0, true, T10 - 5, "sha256:new");
        assert_eq!(
            decide(&p, std::slice::from_ref(&old), &resolved()),
            Decision::RestartRequested {
                container: "main".into(),
                id: "a0".into()
            }
        );
        let stopped = rc("a0", "main", 0, false, T10 - 5, "sha256:new");
        assert_eq!(
            decide(&p, std::slice::from_ref(&stopped), &resolved()),
            Decision::Wait("main not restarted by the kubelet yet (still a0)".into())
        );
        let new = rc("a1", "main", 1, true, T10 + 5, "sha256:new");
        assert_eq!(
            decide(&p, &[stopped.clone(), new.clone()], &resolved()),
            Decision::Complete(BTreeMap::from([("main".into(), "a1".into())]))
        );
        // The kubelet still reports the old container: wait for it.
        let stale = reported(&p, std::slice::from_ref(&old));
        assert!(matches!(
            super::decide(&stale, &[stopped, new], &resolved()),
            Decision::Wait(_)
        ));
        // The same state without `restartContainers` (an image change): only wait.
        let image_state = r#"{"revision":"cs-2","updateTimestamp":"2026-01-01T00:00:10Z","lastContainerStatuses":{"main":{"imageID":"reg/app@sha256:new","containerID":"containerd://a0"}},"updateImages":true}"#;
        let p = pod(
            json!({"metadata": {"annotations": {"apps.kruise.io/inplace-update-state": image_state}}}),
        );
        assert!(matches!(decide(&p, &[old], &resolved()), Decision::Wait(_)));
    }

    /// Env from metadata is judged by the value the running container was started with:
    /// a pod that already carried the new value (patched by hand before the template
    /// changed) still gets its container restarted, whatever the times say; a container
    /// that runs with the pod's values is done.
    #[test]
    fn env_from_metadata_is_judged_by_the_running_containers_values() {
        let env_state = r#"{"revision":"cs-2","updateTimestamp":"2026-01-01T00:00:10Z","updateEnvFromMetadata":true}"#;
        let p = pod(json!({"metadata": {
            "labels": {"x": "new"},
            "annotations": {"apps.kruise.io/inplace-update-state": env_state}}}));
        let old_value = with_env(
            rc("s0", "side", 0, true, T10 + 60, "sha256:side"),
            &[("X", "old")],
        );
        assert_eq!(
            decide(&p, &[old_value], &resolved()),
            Decision::Restart {
                container: "side".into(),
                id: "s0".into()
            }
        );
        let new_value = with_env(
            rc("s0", "side", 0, true, T10 - 60, "sha256:side"),
            &[("X", "new")],
        );
        assert_eq!(
            decide(&p, &[new_value], &resolved()),
            Decision::Complete(BTreeMap::from([("side".into(), "s0".into())]))
        );
        // A key the pod lost reads as "".
        let unlabelled = pod(json!({"metadata": {
            "annotations": {"apps.kruise.io/inplace-update-state": env_state}}}));
        let empty = with_env(
            rc("s1", "side", 1, true, T10 + 60, "sha256:side"),
            &[("X", "")],
        );
        assert!(matches!(
            decide(&unlabelled, &[empty], &resolved()),
            Decision::Complete(_)
        ));
    }

    /// The runtime runs the new container before the kubelet reports it: until the pod
    /// status names it, the kubelet still reports the old container as running and ready,
    /// and a True condition would make the pod Ready on that stale status (seen on the bed:
    /// the CloneSet counted the pod updated and ready with `restartCount` 0). The daemon
    /// waits for the kubelet; then it completes, and the same for an env-checked batch.
    #[test]
    fn completion_waits_until_the_kubelet_reports_the_new_containers() {
        let p = pod(json!({}));
        let new = rc("a1", "main", 1, true, T10 + 5, "sha256:new");
        let stale = reported(&p, &[rc("a0", "main", 0, true, T10 - 5, "sha256:old")]);
        let d = super::decide(&stale, std::slice::from_ref(&new), &resolved());
        assert_eq!(
            d,
            Decision::Wait("the kubelet does not report main's new container a1 yet".into())
        );
        let unreported = pod(json!({}));
        assert!(matches!(
            super::decide(&unreported, std::slice::from_ref(&new), &resolved()),
            Decision::Wait(_)
        ));
        let synced = reported(&p, std::slice::from_ref(&new));
        assert_eq!(
            super::decide(&synced, &[new], &resolved()),
            Decision::Complete(BTreeMap::from([("main".into(), "a1".into())]))
        );
    }

    /// With later batches pending, the daemon restarts the env readers of the current
    /// batch and then records them as checked for this batch; it completes nothing.
    #[test]
    fn between_batches_env_readers_are_restarted_then_recorded_as_checked() {
        let state = r#"{"revision":"cs-2","updateTimestamp":"2026-01-01T00:00:10Z","updateEnvFromMetadata":true,"nextContainerImages":{"main":"reg/app:v3"},"containerBatchesRecord":[{"timestamp":"2026-01-01T00:00:10Z","containers":["side"]}]}"#;
        let p = pod(json!({"metadata": {
            "labels": {"x": "new"},
            "annotations": {"apps.kruise.io/inplace-update-state": state}}}));
        let main = rc("a0", "main", 0, true, T10 - 5, "sha256:new");
        let stale = with_env(
            rc("s0", "side", 0, true, T10 - 5, "sha256:side"),
            &[("X", "old")],
        );
        assert_eq!(
            decide(&p, &[main.clone(), stale], &resolved()),
            Decision::Restart {
                container: "side".into(),
                id: "s0".into()
            }
        );
        let fresh = with_env(
            rc("s1", "side", 1, true, T10 + 5, "sha256:side"),
            &[("X", "new")],
        );
        assert_eq!(
            decide(&p, &[main.clone(), fresh], &resolved()),
            Decision::EnvChecked {
                batch: 1,
                readers: BTreeMap::from([("side".into(), "s1".into())]),
            }
        );
        // Without env from the runtime, by times: only the current batch's readers.
        let old = rc("s0", "side", 0, true, T10 - 5, "sha256:side");
        assert!(matches!(
            decide(&p, &[main, old], &resolved()),
            Decision::Restart { .. }
        ));
    }

    #[test]
    fn stale_env_names_each_metadata_env_whose_value_differs() -> Result<(), serde_json::Error> {
        let c: Container = serde_json::from_value(json!({"name": "c", "env": [
            {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['a']"}}},
            {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations[\"b\"]"}}},
            {"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['c']"}}},
            {"name": "C", "value": "plain wins"},
            {"name": "D", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ]}))?;
        let meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
            serde_json::from_value(
                json!({"labels": {"a": "1", "c": "3"}, "annotations": {"b": "2"}}),
            )?;
        let env = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect()
        };
        assert!(stale_metadata_env(&c, &env(&[("A", "1"), ("B", "2")]), &meta).is_empty());
        assert_eq!(
            stale_metadata_env(&c, &env(&[("A", "0"), ("B", "2")]), &meta),
            ["A"]
        );
        assert_eq!(stale_metadata_env(&c, &env(&[]), &meta), ["A", "B"]);
        Ok(())
    }

    #[test]
    fn env_is_read_from_the_cri_config_or_else_the_oci_spec() {
        let info = |v: serde_json::Value| {
            std::collections::HashMap::from([("info".to_owned(), v.to_string())])
        };
        let cri = info(
            json!({"config": {"envs": [{"key": "A", "value": "1"}, {"key": "B"}]},
            "runtimeSpec": {"process": {"env": ["A=ignored"]}}}),
        );
        assert_eq!(
            env_from_verbose_info(&cri),
            Some(BTreeMap::from([
                ("A".into(), "1".into()),
                ("B".into(), String::new())
            ]))
        );
        let oci = info(json!({"runtimeSpec": {"process": {"env": ["A=1=2", "PATH=/bin"]}}}));
        assert_eq!(
            env_from_verbose_info(&oci),
            Some(BTreeMap::from([
                ("A".into(), "1=2".into()),
                ("PATH".into(), "/bin".into())
            ]))
        );
        assert_eq!(env_from_verbose_info(&info(json!({"pid": 1}))), None);
        assert_eq!(env_from_verbose_info(&Default::default()), None);
    }

    fn resolved() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("reg/app:v2".to_string(), "sha256:new".to_string()),
            ("reg/side:v1".to_string(), "sha256:side".to_string()),
        ])
    }

    #[test]
    fn table() {
        let env_state = r#"{"revision":"cs-2","updateTimestamp":"2026-01-01T00:00:10Z","lastContainerStatuses":{},"updateEnvFromMetadata":true}"#;
        let cases: Vec<(&str, Pod, Vec<RuntimeContainer>, Decision)> = vec![
            (
                "new container running the new image completes",
                pod(json!({})),
                vec![
                    rc("a0", "main", 0, false, T10 - 5, "sha256:old"),
                    rc("a1", "main", 1, true, T10 + 5, "sha256:new"),
                ],
                Decision::Complete(BTreeMap::from([("main".into(), "a1".into())])),
            ),
            (
                "old container still running waits",
                pod(json!({})),
                vec![rc("a0", "main", 0, true, T10 - 5, "sha256:old")],
                Decision::Wait("main runs sha256:old not sha256:new yet".into()),
            ),
            (
                "new image created but not running waits",
                pod(json!({})),
                vec![rc("a1", "main", 1, false, T10 + 5, "sha256:new")],
                Decision::Wait("main not running yet".into()),
            ),
            (
                "no runtime container waits",
                pod(json!({})),
                vec![],
                Decision::Wait("no runtime container for main yet".into()),
            ),
            (
                "condition already True: not in update",
                pod(
                    json!({"status": {"conditions": [{"type": "InPlaceUpdateReady", "status": "True"}]}}),
                ),
                vec![rc("a1", "main", 1, true, T10 + 5, "sha256:new")],
                Decision::NotInUpdate,
            ),
            (
                "no condition at all: not in update",
                pod(json!({"status": {"conditions": []}})),
                vec![],
                Decision::NotInUpdate,
            ),
            (
                "revision label differs from the state: not in update",
                pod(json!({"metadata": {"labels": {"controller-revision-hash": "cs-3"}}})),
                vec![rc("a1", "main", 1, true, T10 + 5, "sha256:new")],
                Decision::NotInUpdate,
            ),
            (
                "grace annotation present waits",
                pod(
                    json!({"metadata": {"annotations": {"apps.kruise.io/inplace-update-grace": "{}"}}}),
                ),
                vec![rc("a1", "main", 1, true, T10 + 5, "sha256:new")],
                Decision::Wait("grace period: spec not patched yet".into()),
            ),
            (
                "garbage state is reported, not acted on",
                pod(
                    json!({"metadata": {"annotations": {"apps.kruise.io/inplace-update-state": "{nope"}}}),
                ),
                vec![],
                Decision::Invalid(
                    "unreadable in-place update state: key must be a string at line 1 column 2"
                        .into(),
                ),
            ),
            (
                "env from metadata: old running container is restarted",
                pod(
                    json!({"metadata": {"annotations": {"apps.kruise.io/inplace-update-state": env_state}}}),
                ),
                vec![rc("s0", "side", 0, true, T10 - 1, "sha256:side")],
                Decision::Restart {
                    container: "side".into(),
                    id: "s0".into(),
                },
            ),
            (
                "env from metadata: stopped, waiting for the kubelet",
                pod(
                    json!({"metadata": {"annotations": {"apps.kruise.io/inplace-update-state": env_state}}}),
                ),
                vec![rc("s0", "side", 0, false, T10 - 1, "sha256:side")],
                Decision::Wait("side stopped, waiting for the kubelet to start it".into()),
            ),
            (
                "env from metadata: restarted container completes",
                pod(
                    json!({"metadata": {"annotations": {"apps.kruise.io/inplace-update-state": env_state}}}),
                ),
                vec![
                    rc("s0", "side", 0, false, T10 - 1, "sha256:side"),
                    rc("s1", "side", 1, true, T10 + 1, "sha256:side"),
                ],
                Decision::Complete(BTreeMap::from([("side".into(), "s1".into())])),
            ),
        ];
        for (name, p, runtime, want) in cases {
            assert_eq!(decide(&p, &runtime, &resolved()), want, "{name}");
        }
    }

    #[test]
    fn resize_is_verified_and_applied_only_when_allowed() {
        let state = r#"{"revision":"cs-2","lastContainerStatuses":{"main":{"imageID":"x"}},"updateResources":true}"#;
        let p = pod(
            json!({"metadata": {"annotations": {"apps.kruise.io/inplace-update-state": state}},
            "spec": {"containers": [{"name": "main", "image": "reg/app:v2",
                "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}}]}}),
        );
        let rt = [rc("a0", "main", 0, true, T10 - 5, "sha256:new")];
        let want = Limits {
            cpu_quota: Some(50_000),
            cpu_shares: Some(512),
            memory_limit: Some(64 << 20),
        };
        let old = Limits {
            cpu_quota: Some(100_000),
            cpu_shares: Some(1024),
            memory_limit: Some(128 << 20),
        };
        let obs = |l: Limits| BTreeMap::from([("main".to_string(), l)]);
        assert_eq!(
            decide_with_resize(&p, &rt, &resolved(), &BTreeMap::new(), false),
            Decision::Wait("resources of main not observed yet".into())
        );
        assert!(matches!(
            decide_with_resize(&p, &rt, &resolved(), &obs(old), false),
            Decision::Wait(m) if m.starts_with("resize of main not applied yet: cpu.cfs_quota_us is 100000 not 50000")
        ));
        assert_eq!(
            decide_with_resize(&p, &rt, &resolved(), &obs(old), true),
            Decision::Resize {
                container: "main".into(),
                id: "a0".into(),
                target: want
            }
        );
        assert_eq!(
            decide_with_resize(&p, &rt, &resolved(), &obs(want), true),
            Decision::Complete(BTreeMap::from([("main".into(), "a0".into())]))
        );
    }

    #[test]
    fn unresolved_image_waits() {
        let d = decide(
            &pod(json!({})),
            &[rc("a1", "main", 1, true, T10 + 5, "sha256:new")],
            &BTreeMap::new(),
        );
        assert_eq!(
            d,
            Decision::Wait("image reg/app:v2 of main not known to the runtime yet".into())
        );
    }

    #[test]
    fn env_detection() {
        let p = pod(json!({}));
        let cs = &p
            .spec
            .as_ref()
            .map(|s| s.containers.clone())
            .unwrap_or_default();
        assert!(!env_from_metadata(&cs[0]));
        assert!(env_from_metadata(&cs[1]));
    }

    #[test]
    fn ids_go_into_extra_and_unknown_keys_survive() -> Result<(), serde_json::Error> {
        let s: InPlaceUpdateState = serde_json::from_str(r#"{"revision":"r","future":1}"#)?;
        let out = state_with_container_ids(
            &s,
            &BTreeMap::from([("main".into(), "containerd://a1".into())]),
        )?;
        let v: serde_json::Value = serde_json::from_str(&out)?;
        assert_eq!(v["future"], 1);
        assert_eq!(v["daemonContainerIDs"]["main"], "containerd://a1");
        Ok(())
    }

    /// Completion is one write: the condition and, unless already recorded, the ids in
    /// the state annotation (under the key the pod uses), pinned to the resourceVersion.
    #[test]
    fn completion_is_one_pinned_patch_of_condition_and_ids() -> Result<(), serde_json::Error> {
        let ids = BTreeMap::from([("main".to_owned(), "containerd://a1".to_owned())]);
        let state = r#"{"revision":"cs-2","lastContainerStatuses":{"main":{"imageID":"x"}}}"#;
        let recorded = r#"{"revision":"cs-2","daemonContainerIDs":{"main":"containerd://a1"}}"#;
        let key = "apps.kruise.io/inplace-update-state";
        let legacy = "inplace-update-state";
        let cases = [
            // (annotations, key expected to carry the ids, or None: no annotation written)
            (json!({key: state}), Some(key)),
            (json!({legacy: state}), Some(legacy)),
            (json!({key: recorded}), None),
            (json!({}), None),
        ];
        for (annotations, written) in cases {
            let mut p = pod(json!({}));
            p.metadata.annotations = serde_json::from_value(annotations.clone())?;
            p.metadata.resource_version = Some("42".into());
            let patch = completion_patch(&p, &ids, Timestamp::UNIX_EPOCH)?;
            assert_eq!(patch["metadata"]["resourceVersion"], "42", "{annotations}");
            assert_eq!(
                patch["status"],
                ready_patch(Timestamp::UNIX_EPOCH)["status"],
                "{annotations}"
            );
            match written {
                Some(k) => {
                    let v: serde_json::Value = serde_json::from_str(
                        patch["metadata"]["annotations"][k]
                            .as_str()
                            .unwrap_or_default(),
                    )?;
                    assert_eq!(v["daemonContainerIDs"]["main"], "containerd://a1");
                    assert_eq!(v["revision"], "cs-2", "the rest of the state kept");
                    let n = patch["metadata"]["annotations"]
                        .as_object()
                        .map(|m| m.len());
                    assert_eq!(n, Some(1), "{annotations}");
                }
                None => assert!(
                    patch["metadata"].get("annotations").is_none(),
                    "{annotations}"
                ),
            }
        }
        Ok(())
    }

    #[test]
    fn a_state_write_is_pinned_and_keeps_the_pods_key() {
        let mut p = pod(json!({}));
        p.metadata.resource_version = Some("7".into());
        let patch = state_patch(&p, "{}".into());
        assert_eq!(
            patch,
            json!({"metadata": {"resourceVersion": "7",
                "annotations": {"apps.kruise.io/inplace-update-state": "{}"}}})
        );
        p.metadata.annotations = Some(BTreeMap::from([(
            "inplace-update-state".to_owned(),
            "{}".to_owned(),
        )]));
        let patch = state_patch(&p, "{}".into());
        assert_eq!(
            patch["metadata"]["annotations"]["inplace-update-state"],
            "{}"
        );
    }

    #[test]
    fn ready_patch_is_one_condition_by_type() {
        let p = ready_patch(Timestamp::UNIX_EPOCH);
        assert_eq!(
            p,
            json!({"status": {"conditions": [{"type": "InPlaceUpdateReady", "status": "True",
                "lastTransitionTime": "1970-01-01T00:00:00Z", "reason": null, "message": null}]}})
        );
    }
}
