//! Reading a Kubernetes Pod into the model's terms. Pure.

use k8s_openapi::api::core::v1::Pod;

use super::fault::{FAULT_ANNOTATION, FaultError, GlobalFaults};
use super::model::{ContainerSpec, Gate, Ms, ObservedContainer, PodView};

/// The index of a simulated node named `<prefix><index>` (no leading zeros), if
/// `node_name` is one of the `count` nodes of this simulator.
pub fn node_index(prefix: &str, count: usize, node_name: &str) -> Option<usize> {
    let suffix = node_name.strip_prefix(prefix)?;
    let i: usize = suffix.parse().ok()?;
    (i < count && i.to_string() == suffix).then_some(i)
}

/// Whether resourceVersion `new` is newer than `old`. Resource versions are opaque, but
/// every etcd-backed API server issues increasing integers; anything else counts as newer.
pub fn rv_newer(new: &str, old: &str) -> bool {
    match (new.parse::<u64>(), old.parse::<u64>()) {
        (Ok(n), Ok(o)) => n > o,
        _ => new != old,
    }
}

fn containers(list: &[k8s_openapi::api::core::v1::Container]) -> Vec<ContainerSpec> {
    list.iter()
        .map(|c| ContainerSpec {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
        })
        .collect()
}

/// The model's view of a pod. A fault annotation that does not parse is returned as the
/// error (the pod then gets the global faults).
pub fn view_from_pod(pod: &Pod, faults: &GlobalFaults) -> (PodView, Option<FaultError>) {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let annotation = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(FAULT_ANNOTATION))
        .map(String::as_str);
    let (faults, fault_error) = faults.for_pod(&uid, annotation);
    let spec = pod.spec.as_ref();
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    let gates = spec
        .and_then(|s| s.readiness_gates.as_ref())
        .map(|gates| {
            gates
                .iter()
                .map(|g| Gate {
                    condition_type: g.condition_type.clone(),
                    status: conditions
                        .and_then(|cs| cs.iter().find(|c| c.type_ == g.condition_type))
                        .map(|c| c.status.clone()),
                })
                .collect()
        })
        .unwrap_or_default();
    let deletion_grace = pod.metadata.deletion_timestamp.as_ref().map(|_| {
        pod.metadata
            .deletion_grace_period_seconds
            .unwrap_or(0)
            .max(0)
            * 1000
    });
    let view = PodView {
        uid,
        containers: spec.map(|s| containers(&s.containers)).unwrap_or_default(),
        init_containers: spec
            .and_then(|s| s.init_containers.as_deref())
            .map(containers)
            .unwrap_or_default(),
        gates,
        faults,
        deletion_grace,
    };
    (view, fault_error)
}

/// What an earlier run of the simulator wrote into the pod's status: (pod IP, start
/// time, containers). `None` when the pod has no IP yet (never simulated).
pub fn observed_from_pod(pod: &Pod) -> Option<(String, Option<Ms>, Vec<ObservedContainer>)> {
    let status = pod.status.as_ref()?;
    let ip = status.pod_ip.clone().filter(|ip| !ip.is_empty())?;
    let start = status.start_time.as_ref().map(|t| t.0.as_millisecond());
    let observed = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|cs| {
            Some(ObservedContainer {
                name: cs.name.clone(),
                image: cs.image.clone(),
                image_id: cs.image_id.clone(),
                container_id: cs.container_id.clone()?,
                restart_count: u32::try_from(cs.restart_count).unwrap_or(0),
                running_since: cs
                    .state
                    .as_ref()
                    .and_then(|s| s.running.as_ref())
                    .map(|r| r.started_at.as_ref().map_or(0, |t| t.0.as_millisecond())),
                ready: cs.ready,
            })
        })
        .collect();
    Some((ip, start, observed))
}

/// Terminal pods (Succeeded/Failed) are not simulated.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Result<Pod, serde_json::Error> {
        serde_json::from_value(v)
    }

    #[test]
    fn node_names() {
        assert_eq!(node_index("sim-node-", 10, "sim-node-3"), Some(3));
        assert_eq!(node_index("sim-node-", 10, "sim-node-10"), None);
        assert_eq!(node_index("sim-node-", 10, "sim-node-03"), None);
        assert_eq!(node_index("sim-node-", 10, "real-node"), None);
        assert_eq!(node_index("sim-node-", 10, "sim-node-"), None);
    }

    #[test]
    fn resource_versions() {
        assert!(rv_newer("10", "9"));
        assert!(!rv_newer("9", "10"));
        assert!(!rv_newer("10", "10"));
        assert!(rv_newer("b", "a"));
        assert!(rv_newer("5", ""));
    }

    #[test]
    fn view_reads_gates_faults_and_deletion() -> Result<(), serde_json::Error> {
        let p = pod(json!({
            "metadata": {
                "name": "p", "namespace": "n", "uid": "u1",
                "annotations": { "sim.inplace.dev/fault": "slow-start=2s" },
                "deletionTimestamp": "2024-01-01T00:00:30Z",
                "deletionGracePeriodSeconds": 30
            },
            "spec": {
                "nodeName": "sim-node-0",
                "initContainers": [{ "name": "i", "image": "init:1" }],
                "containers": [{ "name": "a", "image": "app:1" }, { "name": "b", "image": "side:1" }],
                "readinessGates": [{ "conditionType": "InPlaceUpdateReady" }, { "conditionType": "Other" }]
            },
            "status": { "conditions": [
                { "type": "InPlaceUpdateReady", "status": "False" },
                { "type": "PodScheduled", "status": "True" }
            ] }
        }))?;
        let (v, err) = view_from_pod(&p, &GlobalFaults::default());
        assert!(err.is_none());
        assert_eq!(v.uid, "u1");
        assert_eq!(v.containers.len(), 2);
        assert_eq!(v.containers[1].image, "side:1");
        assert_eq!(v.init_containers[0].name, "i");
        assert_eq!(v.gates[0].status.as_deref(), Some("False"));
        assert_eq!(v.gates[1].status, None);
        assert_eq!(v.faults.slow_start, 2_000);
        assert_eq!(v.deletion_grace, Some(30_000));
        assert!(observed_from_pod(&p).is_none());
        Ok(())
    }

    #[test]
    fn observed_status() -> Result<(), serde_json::Error> {
        let p = pod(json!({
            "metadata": { "name": "p", "uid": "u" },
            "spec": { "containers": [{ "name": "a", "image": "app:1" }] },
            "status": {
                "phase": "Running",
                "podIP": "10.200.0.9",
                "startTime": "2024-01-01T00:00:00Z",
                "containerStatuses": [{
                    "name": "a", "image": "app:1", "imageID": "sim-image@sha256:00",
                    "containerID": "sim://x", "restartCount": 2, "ready": true,
                    "state": { "running": { "startedAt": "2024-01-01T00:00:01Z" } }
                }]
            }
        }))?;
        let (ip, start, obs) = observed_from_pod(&p).unwrap_or_default();
        assert_eq!(ip, "10.200.0.9");
        assert_eq!(start, Some(1_704_067_200_000));
        assert_eq!(obs.len(), 1);
        assert_eq!(obs[0].running_since, Some(1_704_067_201_000));
        assert_eq!(obs[0].restart_count, 2);
        assert!(!is_terminal(&p));
        Ok(())
    }
}
