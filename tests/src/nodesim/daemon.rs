//! What the node daemon (`inplace-daemon`) writes for a pod of a simulated node. Pure.
//!
//! On a real node the daemon completes an in-place update: once the runtime runs the
//! updated containers it sends one `pods/status` strategic merge patch, pinned to the
//! resourceVersion it judged (`InPlaceUpdateReady` True, the container ids into the state
//! annotation, the lifecycle label Updating → the state's `lifecycleStateOnCompletion`).
//! The simulated nodes run the same decision and build the same patch, with the daemon
//! crate's own functions ([`decide::decide_on_node`], [`decide::completion_patch`]), over
//! the simulated runtime ([`runtime_view`]) in place of CRI.
//!
//! Like the daemon, a pod revision it completed is not completed again for
//! [`COMPLETION_MEMORY`], while the watch may still show the pod from before the
//! completion.
//!
//! Only the completion is emulated. The daemon's other acts (an env-from-metadata
//! restart, a requested restart, a resize through CRI, `daemonEnvChecked` between
//! container batches) are decided but not carried out: the simulated runtime has no
//! container env, no stop and no cgroup limits, and a pod that needs one of them is left
//! to the controller, as on a node without the daemon.

use std::collections::BTreeMap;

use inplace_daemon::inplace::decide::{self, Decision, NodeClock, RuntimeContainer};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::model::{CState, ContainerSim, Ms, PodSim, image_id};

/// The runtime name in the simulated containers' ids (`sim://<id>`,
/// [`super::model::container_id`]).
pub const RUNTIME: &str = "sim";

/// How long a completion keeps the daemon from completing the same pod revision again,
/// in ms: the daemon's own [`inplace_daemon::inplace::COMPLETION_MEMORY`].
pub const COMPLETION_MEMORY: Ms = inplace_daemon::inplace::COMPLETION_MEMORY.as_millis() as Ms;

/// A completion the simulated daemon wrote: the pod's revision label then, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    pub revision: String,
    pub at: Ms,
}

/// The pod's revision label (`controller-revision-hash`), by which the daemon remembers a
/// completion.
pub fn revision_label(pod: &Pod) -> String {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(inplace_proto::keys::REVISION_LABEL))
        .cloned()
        .unwrap_or_default()
}

fn nanos(ms: Ms) -> i64 {
    ms.saturating_mul(1_000_000)
}

/// When the container the simulated runtime lists for `c` was created (ns since the
/// epoch): the running one's start, else the start of the one that exited last (0 when
/// none is known).
fn created_at(c: &ContainerSim) -> i64 {
    match &c.state {
        CState::Running { since, .. } => nanos(*since),
        _ => c
            .last_terminated
            .as_ref()
            .map_or(0, |t| nanos(t.started_at)),
    }
}

/// The pod's containers as the daemon reads them from CRI: for each simulated container
/// that has been created, the newest instance (the simulator keeps only that one), by its
/// runtime id (no `sim://`), running or not, with the image id it runs.
pub fn runtime_view(sim: &PodSim) -> Vec<RuntimeContainer> {
    sim.containers
        .iter()
        .filter_map(|c| {
            let full = c.container_id.as_deref()?;
            Some(RuntimeContainer {
                id: inplace_proto::inplace_contract::runtime_id(full).to_owned(),
                name: c.name.clone(),
                attempt: c.restart_count,
                running: matches!(c.state, CState::Running { .. }),
                created_at: created_at(c),
                image_ref: c.image_id.clone().unwrap_or_default(),
                image: c.image.clone(),
                reported_image: None,
                env: None,
            })
        })
        .collect()
}

/// Each image of the pod's containers → the id the simulated runtime reports for it (the
/// daemon's CRI `ImageStatus`). Every image resolves: a container runs an image only once
/// its node holds it, and the decision asks for the image of a running container.
pub fn resolved_images(pod: &Pod) -> BTreeMap<String, String> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| c.image.as_ref())
        .map(|image| (image.clone(), image_id(image)))
        .collect()
}

/// The daemon's decision for `pod` (the latest snapshot) over the simulated runtime
/// `sim`: no resize observed, none applied, no node-clock facts (the simulated runtime
/// reports no env, and env-from-metadata restarts are not emulated).
pub fn decision(pod: &Pod, sim: &PodSim) -> Decision {
    decide::decide_on_node(
        pod,
        &runtime_view(sim),
        &resolved_images(pod),
        &BTreeMap::new(),
        false,
        NodeClock::default(),
    )
}

/// What the simulated daemon writes for `pod` now: the completion patch of `pods/status`
/// (strategic merge, pinned to the pod's resourceVersion) when its decision is
/// [`Decision::Complete`] and `last`, its latest completion of the pod, is not of the same
/// revision within [`COMPLETION_MEMORY`]; else nothing. `now` stamps the condition and the
/// lifecycle timestamp.
pub fn completion(
    pod: &Pod,
    sim: &PodSim,
    last: Option<&Completed>,
    now: Timestamp,
) -> Result<Option<Value>, serde_json::Error> {
    if !decide::in_update(pod) {
        return Ok(None);
    }
    let remembered = last.is_some_and(|c| {
        c.revision == revision_label(pod) && now.as_millisecond() - c.at < COMPLETION_MEMORY
    });
    if remembered {
        return Ok(None);
    }
    let Decision::Complete(ids) = decision(pod, sim) else {
        return Ok(None);
    };
    let full: BTreeMap<String, String> = ids
        .into_iter()
        .map(|(name, id)| (name, format!("{RUNTIME}://{id}")))
        .collect();
    decide::completion_patch(pod, &full, now).map(Some)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::nodesim::model::{PodView, SimConfig, advance, container_id};
    use crate::nodesim::podview::view_from_pod;

    const STATE: &str = "apps.kruise.io/inplace-update-state";
    const LIFECYCLE: &str = "lifecycle.apps.kruise.io/state";

    /// A pod of one container `app` on image `image`, at resourceVersion `rv`, in the
    /// given `InPlaceUpdateReady` status (none if `None`), with the in-place state
    /// annotation `state` (none if `None`) and the revision and lifecycle labels.
    fn pod(
        image: &str,
        rv: &str,
        ready: Option<&str>,
        state: Option<Value>,
    ) -> Result<Pod, serde_json::Error> {
        let mut annotations = serde_json::Map::new();
        if let Some(s) = state {
            annotations.insert(STATE.into(), json!(s.to_string()));
        }
        let conditions = match ready {
            Some(status) => json!([{ "type": "InPlaceUpdateReady", "status": status,
                                      "lastTransitionTime": "2026-01-01T00:00:00Z" }]),
            None => json!([]),
        };
        serde_json::from_value(json!({
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": rv,
                "labels": { "controller-revision-hash": "web-2", LIFECYCLE: "Updating" },
                "annotations": annotations,
            },
            "spec": {
                "nodeName": "sim-node-0",
                "readinessGates": [{ "conditionType": "InPlaceUpdateReady" }],
                "containers": [{ "name": "app", "image": image }],
            },
            "status": { "conditions": conditions },
        }))
    }

    /// The state the controller writes with the spec patch: `app` ran `old_id` on `v1`.
    fn state(old_id: &str) -> Value {
        json!({
            "revision": "web-2",
            "updateTimestamp": "2026-01-01T00:00:00Z",
            "lastContainerStatuses": { "app": { "imageID": image_id("app:v1"), "containerID": old_id } },
            "updateImages": true,
            "containerBatchesRecord": [{ "timestamp": "2026-01-01T00:00:00Z", "containers": ["app"] }],
            "lifecycleStateOnCompletion": "Normal",
        })
    }

    fn view(p: &Pod) -> PodView {
        view_from_pod(p, &Default::default()).0
    }

    /// The simulated runtime of a pod that ran `app:v1` (from -10 s) and then saw
    /// `patched` at 0 ms, advanced to `at` ms (`SimConfig::default`: the old container is
    /// stopped at once, the new one runs at 1,000 ms); `at` < 0: the simulated kubelet has
    /// not seen the patch yet, the old container still runs.
    fn runtime(before: &Pod, patched: &Pod, at: Ms) -> PodSim {
        let cfg = SimConfig::default();
        let mut sim = PodSim::new(&view(before), String::new(), String::new(), -10_000, &cfg);
        advance(&view(before), &mut sim, -5_000, &cfg);
        if at >= 0 {
            advance(&view(patched), &mut sim, 0, &cfg);
            advance(&view(patched), &mut sim, at, &cfg);
        }
        sim
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    /// A pod in an update gets the completion once its new container runs, and not
    /// before; a pod not in an update, or one completed already (by the controller or the
    /// daemon: the condition is True), gets nothing.
    #[test]
    fn the_simulated_daemon_completes_once_the_new_container_runs() -> Result<(), serde_json::Error>
    {
        let old_id = container_id("u1", "app", 0);
        let new_id = container_id("u1", "app", 1);
        let before = pod("app:v1", "10", Some("True"), None)?;
        let patched = pod("app:v2", "12", Some("False"), Some(state(&old_id)))?;
        // (case, the pod snapshot, ms after the spec patch, completes)
        let cases: [(&str, &Pod, Ms, bool); 7] = [
            (
                "spec patched, old container still running",
                &patched,
                -1,
                false,
            ),
            (
                "old container stopped, new one being created",
                &patched,
                0,
                false,
            ),
            ("new one still being created", &patched, 999, false),
            ("new container runs", &patched, 1_000, true),
            ("new container runs, later", &patched, 60_000, true),
            (
                "not in an update (no state, condition True)",
                &before,
                60_000,
                false,
            ),
            (
                "completed already (condition True, by the controller: no ids recorded)",
                &pod("app:v2", "13", Some("True"), Some(state(&old_id)))?,
                60_000,
                false,
            ),
        ];
        for (case, p, at, completes) in cases {
            let sim = runtime(&before, p, at);
            let patch = completion(p, &sim, None, now())?;
            assert_eq!(patch.is_some(), completes, "{case}: {patch:?}");
            if let Some(patch) = patch {
                assert_eq!(patch["metadata"]["resourceVersion"], "12", "{case}: pinned");
                assert_eq!(
                    patch["status"]["conditions"][0]["type"], "InPlaceUpdateReady",
                    "{case}"
                );
                assert_eq!(patch["status"]["conditions"][0]["status"], "True", "{case}");
                assert_eq!(patch["metadata"]["labels"][LIFECYCLE], "Normal", "{case}");
                let written: Value = serde_json::from_str(
                    patch["metadata"]["annotations"][STATE]
                        .as_str()
                        .unwrap_or_default(),
                )?;
                assert_eq!(
                    written["daemonContainerIDs"],
                    json!({ "app": new_id }),
                    "{case}: the new container's id, as the pod status names it"
                );
                assert_eq!(written["revision"], "web-2", "{case}: the state kept");
            }
        }
        Ok(())
    }

    /// The controller starts the next update with `InPlaceUpdateReady` False while the
    /// label and the state (with the ids the daemon recorded) still name the finished
    /// revision: that revision is not completed again, however long ago its completion was.
    /// The memory of a completion only keeps a snapshot from before it (the watch not
    /// having shown it yet) from being completed twice.
    #[test]
    fn a_finished_update_is_not_completed_again_when_the_next_one_begins()
    -> Result<(), serde_json::Error> {
        let old_id = container_id("u1", "app", 0);
        let before = pod("app:v1", "10", Some("True"), None)?;
        let patched = pod("app:v2", "12", Some("False"), Some(state(&old_id)))?;
        let sim = runtime(&before, &patched, 60_000);
        let done = completion(&patched, &sim, None, now())?;
        let Some(done) = done else {
            panic!("the update completes");
        };
        let mut completed_state: Value = serde_json::from_str(
            done["metadata"]["annotations"][STATE]
                .as_str()
                .unwrap_or_default(),
        )?;
        completed_state["lifecycleStateOnCompletion"] = Value::Null;
        // The next update's first write: the condition False, nothing else yet.
        let next_start = pod("app:v2", "20", Some("False"), Some(completed_state))?;
        let at = now().as_millisecond();
        let last = Completed {
            revision: revision_label(&patched),
            at,
        };
        assert_eq!(last.revision, "web-2");
        let other = Completed {
            revision: "web-1".into(),
            at,
        };
        let in_ms = |ms: i64| Timestamp::from_millisecond(at + ms).unwrap_or(now());
        // (case, the snapshot judged, the daemon's last completion, ms after it, writes)
        let cases: [(&str, &Pod, Option<&Completed>, i64, bool); 7] = [
            (
                "next update, nothing remembered",
                &next_start,
                None,
                0,
                false,
            ),
            (
                "next update, just completed",
                &next_start,
                Some(&last),
                0,
                false,
            ),
            (
                "next update, the memory is over",
                &next_start,
                Some(&last),
                COMPLETION_MEMORY,
                false,
            ),
            (
                "next update, another revision remembered",
                &next_start,
                Some(&other),
                0,
                false,
            ),
            (
                "a snapshot from before the completion",
                &patched,
                Some(&last),
                0,
                false,
            ),
            (
                "the same, within the memory",
                &patched,
                Some(&last),
                COMPLETION_MEMORY - 1,
                false,
            ),
            (
                "the same, the memory over: judged again",
                &patched,
                Some(&last),
                COMPLETION_MEMORY,
                true,
            ),
        ];
        for (case, pod, last, after, writes) in cases {
            let patch = completion(pod, &sim, last, in_ms(after))?;
            assert_eq!(patch.is_some(), writes, "{case}: {patch:?}");
        }
        Ok(())
    }

    /// A pod whose update was patched while the simulator still had the old container
    /// running on the new image's id (a retag) is judged by container id, not image: the
    /// same container is never the update.
    #[test]
    fn the_container_that_ran_at_the_patch_is_not_the_update() -> Result<(), serde_json::Error> {
        let old_id = container_id("u1", "app", 0);
        let before = pod("app:v2", "10", Some("True"), None)?;
        let patched = pod("app:v2", "12", Some("False"), Some(state(&old_id)))?;
        let sim = runtime(&before, &patched, 60_000);
        assert_eq!(
            sim.containers[0].container_id.as_deref(),
            Some(old_id.as_str())
        );
        assert!(matches!(decision(&patched, &sim), Decision::Wait(_)));
        assert_eq!(completion(&patched, &sim, None, now())?, None);
        Ok(())
    }

    /// The runtime view: ids without the runtime prefix, the running flag, the attempt and
    /// the image id of each created container; a container never created is not listed.
    #[test]
    fn the_runtime_view_lists_the_newest_created_containers() -> Result<(), serde_json::Error> {
        let before = pod("app:v1", "10", None, None)?;
        let cfg = SimConfig::default();
        let mut sim = PodSim::new(&view(&before), String::new(), String::new(), 0, &cfg);
        assert!(runtime_view(&sim).is_empty(), "nothing created yet");
        advance(&view(&before), &mut sim, 5_000, &cfg);
        let listed = runtime_view(&sim);
        assert_eq!(listed.len(), 1);
        let c = &listed[0];
        assert_eq!(
            format!("{RUNTIME}://{}", c.id),
            container_id("u1", "app", 0)
        );
        assert_eq!((c.name.as_str(), c.attempt, c.running), ("app", 0, true));
        assert_eq!(c.image_ref, image_id("app:v1"));
        assert_eq!(c.created_at, 200 * 1_000_000, "started at the start delay");
        assert_eq!(
            resolved_images(&before),
            BTreeMap::from([("app:v1".to_owned(), image_id("app:v1"))])
        );
        Ok(())
    }
}
