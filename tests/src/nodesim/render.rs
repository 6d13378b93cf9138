//! The pod status the simulated kubelet reports, as the body of a strategic merge patch
//! of the `status` subresource. Pure.
//!
//! `status.conditions` merges by `type` under a strategic merge patch, so the patch only
//! names the conditions the kubelet owns (Initialized, ContainersReady, Ready) and leaves
//! every other condition (PodScheduled, InPlaceUpdateReady, …) as it is. Fields of those
//! conditions that have no value are sent as `null`, which deletes them (otherwise an old
//! `reason` would survive a later patch). `containerStatuses` has no merge key and is
//! replaced as a whole.

use serde_json::{Value, json};

use super::model::{
    CState, Cond, ContainerSim, Ms, PodSim, PodView, Terminated, container_id, image_id,
};

/// The pod conditions the simulated kubelet writes (every other condition is someone
/// else's and is never sent).
pub const OWNED_CONDITIONS: [&str; 3] = ["Initialized", "Ready", "ContainersReady"];

/// RFC 3339 with second precision, as the API server stores `metav1.Time`.
pub fn time(ms: Ms) -> String {
    let secs = ms.div_euclid(1000);
    match chrono::DateTime::from_timestamp(secs, 0) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => "1970-01-01T00:00:00Z".to_owned(),
    }
}

/// RFC 3339 with microseconds, as `metav1.MicroTime` (Lease renew times).
pub fn micro_time(ms: Ms) -> String {
    let secs = ms.div_euclid(1000);
    let nanos = (ms.rem_euclid(1000) * 1_000_000) as u32;
    match chrono::DateTime::from_timestamp(secs, nanos) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        None => "1970-01-01T00:00:00.000000Z".to_owned(),
    }
}

fn condition(kind: &str, cond: &Cond) -> Value {
    json!({
        "type": kind,
        "status": if cond.status { "True" } else { "False" },
        "lastProbeTime": null,
        "lastTransitionTime": time(cond.since),
        "reason": cond.reason,
        "message": cond.message,
    })
}

fn terminated(t: &Terminated) -> Value {
    json!({
        "terminated": {
            "exitCode": t.exit_code,
            "reason": t.reason,
            "startedAt": time(t.started_at),
            "finishedAt": time(t.finished_at),
            "containerID": t.container_id,
        }
    })
}

fn waiting(reason: &str, message: Option<String>) -> Value {
    match message {
        Some(m) => json!({ "waiting": { "reason": reason, "message": m } }),
        None => json!({ "waiting": { "reason": reason } }),
    }
}

fn container_status(c: &ContainerSim) -> Value {
    let (state, started) = match &c.state {
        CState::Creating { .. } => (waiting("ContainerCreating", None), false),
        CState::PullFailed { image, backoff, .. } => {
            let reason = if *backoff {
                "ImagePullBackOff"
            } else {
                "ErrImagePull"
            };
            let message = if *backoff {
                format!("Back-off pulling image \"{image}\"")
            } else {
                format!(
                    "rpc error: code = NotFound desc = failed to pull and unpack image \"{image}\": simulated pull failure"
                )
            };
            (waiting(reason, Some(message)), false)
        }
        CState::Running { since, .. } => {
            (json!({ "running": { "startedAt": time(*since) } }), true)
        }
        CState::BackOff { .. } => {
            let message = format!(
                "back-off restarting failed container {} (simulated crash loop)",
                c.name
            );
            (waiting("CrashLoopBackOff", Some(message)), false)
        }
    };
    let mut status = json!({
        "name": c.name,
        "image": c.image,
        "imageID": c.image_id.as_deref().unwrap_or(""),
        "restartCount": c.restart_count,
        "started": started,
        "ready": c.ready,
        "state": state,
        "lastState": c.last_terminated.as_ref().map_or_else(|| json!({}), terminated),
    });
    if let (Some(id), Some(obj)) = (&c.container_id, status.as_object_mut()) {
        obj.insert("containerID".into(), Value::String(id.clone()));
    }
    status
}

/// The `status` of the pod (not wrapped in `{"status": …}`).
pub fn pod_status(view: &PodView, sim: &PodSim) -> Value {
    let init_statuses: Vec<Value> = view
        .init_containers
        .iter()
        .map(|ic| {
            json!({
                "name": ic.name,
                "image": ic.image,
                "imageID": image_id(&ic.image),
                "containerID": container_id(&view.uid, &format!("init/{}", ic.name), 0),
                "restartCount": 0,
                "ready": true,
                "state": { "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": time(sim.start_time),
                    "finishedAt": time(sim.start_time),
                    "containerID": container_id(&view.uid, &format!("init/{}", ic.name), 0),
                } },
                "lastState": {},
            })
        })
        .collect();
    let initialized = Cond {
        status: true,
        since: sim.start_time,
        reason: None,
        message: None,
    };
    let mut status = json!({
        "phase": if sim.running() { "Running" } else { "Pending" },
        "hostIP": sim.host_ip,
        "podIP": sim.pod_ip,
        "podIPs": [{ "ip": sim.pod_ip }],
        "startTime": time(sim.start_time),
        "conditions": [
            condition(OWNED_CONDITIONS[0], &initialized),
            condition(OWNED_CONDITIONS[1], &sim.ready),
            condition(OWNED_CONDITIONS[2], &sim.containers_ready),
        ],
        "containerStatuses": sim.containers.iter().map(container_status).collect::<Vec<_>>(),
    });
    if !init_statuses.is_empty()
        && let Some(obj) = status.as_object_mut()
    {
        obj.insert("initContainerStatuses".into(), Value::Array(init_statuses));
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodesim::model::{ContainerSpec, Gate, SimConfig, advance};

    fn setup() -> (PodView, PodSim, SimConfig) {
        let cfg = SimConfig {
            start_delay: 1_000,
            ready_delay: 1_000,
            ..SimConfig::default()
        };
        let view = PodView {
            uid: "u1".into(),
            containers: vec![ContainerSpec {
                name: "app".into(),
                image: "reg/app:v1".into(),
            }],
            init_containers: vec![ContainerSpec {
                name: "init".into(),
                image: "reg/init:v1".into(),
            }],
            gates: vec![Gate {
                condition_type: "InPlaceUpdateReady".into(),
                status: Some("True".into()),
            }],
            ..PodView::default()
        };
        let sim = PodSim::new(
            &view,
            "10.200.0.7".into(),
            "10.199.0.1".into(),
            1_700_000_000_000,
            &cfg,
        );
        (view, sim, cfg)
    }

    fn cond<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
        status["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == kind)
    }

    #[test]
    fn pending_then_ready() {
        let (view, mut sim, cfg) = setup();
        let t0 = sim.start_time;
        advance(&view, &mut sim, t0, &cfg);
        let s = pod_status(&view, &sim);
        assert_eq!(s["phase"], "Pending");
        assert_eq!(s["podIP"], "10.200.0.7");
        assert_eq!(s["podIPs"][0]["ip"], "10.200.0.7");
        assert_eq!(s["hostIP"], "10.199.0.1");
        assert_eq!(s["startTime"], "2023-11-14T22:13:20Z");
        assert_eq!(
            s["containerStatuses"][0]["state"]["waiting"]["reason"],
            "ContainerCreating"
        );
        assert!(s["containerStatuses"][0].get("containerID").is_none());
        assert_eq!(
            s["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        let ready = cond(&s, "Ready");
        assert_eq!(ready.map(|c| c["status"].clone()), Some(json!("False")));
        assert_eq!(
            ready.map(|c| c["reason"].clone()),
            Some(json!("ContainersNotReady"))
        );

        advance(&view, &mut sim, t0 + 2_000, &cfg);
        let s = pod_status(&view, &sim);
        assert_eq!(s["phase"], "Running");
        let c = &s["containerStatuses"][0];
        assert_eq!(c["ready"], true);
        assert_eq!(c["started"], true);
        assert_eq!(c["imageID"], json!(image_id("reg/app:v1")));
        assert!(
            c["containerID"]
                .as_str()
                .is_some_and(|id| id.starts_with("sim://"))
        );
        assert_eq!(c["state"]["running"]["startedAt"], "2023-11-14T22:13:21Z");
        let ready = cond(&s, "Ready");
        assert_eq!(ready.map(|c| c["status"].clone()), Some(json!("True")));
        // Explicit nulls delete stale reason/message fields under a strategic merge.
        assert_eq!(ready.map(|c| c["reason"].clone()), Some(Value::Null));
        assert!(
            cond(&s, "InPlaceUpdateReady").is_none(),
            "others' conditions are never sent"
        );
        assert!(cond(&s, "PodScheduled").is_none());
    }

    #[test]
    fn render_is_deterministic() {
        let (view, mut sim, cfg) = setup();
        let t = sim.start_time + 5_000;
        advance(&view, &mut sim, t, &cfg);
        assert_eq!(pod_status(&view, &sim), pod_status(&view, &sim.clone()));
    }

    #[test]
    fn times() {
        assert_eq!(time(0), "1970-01-01T00:00:00Z");
        assert_eq!(time(1_999), "1970-01-01T00:00:01Z");
        assert_eq!(micro_time(1_234), "1970-01-01T00:00:01.234000Z");
    }
}
