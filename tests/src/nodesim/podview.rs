//! Reading a Kubernetes Pod into the model's terms. Pure.

use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::api::core::v1::{Pod, PodStatus};

use super::fault::{FAULT_ANNOTATION, FaultError, GlobalFaults};
use super::model::{ContainerSpec, Gate, Ms, ObservedContainer, PodView};
use super::render::OWNED_CONDITIONS;

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

/// A digest of the part of a pod's status the simulated kubelet writes
/// ([`super::render::pod_status`]): phase, host and pod IPs, start time, the status,
/// reason and message of its conditions ([`OWNED_CONDITIONS`]) and the (init) container
/// statuses. Two snapshots with the same digest agree on everything the simulator wrote;
/// what others write (other conditions, `qosClass`, the conditions' times) is left out,
/// as the kubelet's status manager leaves it out when it compares its status with the API
/// server's (`isPodStatusByKubeletEqual`). Both sides of a comparison come from the API
/// server (a patch response, a watch event), so they are in the same normal form.
pub fn owned_status_digest(status: Option<&PodStatus>) -> u64 {
    let mut h = DefaultHasher::new();
    let Some(s) = status else {
        return h.finish();
    };
    s.phase.hash(&mut h);
    s.host_ip.hash(&mut h);
    s.pod_ip.hash(&mut h);
    for ip in s.pod_ips.iter().flatten() {
        ip.ip.hash(&mut h);
    }
    s.start_time
        .as_ref()
        .map(|t| t.0.as_millisecond())
        .hash(&mut h);
    let mut conditions: Vec<(&str, &str, Option<&str>, Option<&str>)> = s
        .conditions
        .iter()
        .flatten()
        .filter(|c| OWNED_CONDITIONS.contains(&c.type_.as_str()))
        .map(|c| {
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_deref(),
                c.message.as_deref(),
            )
        })
        .collect();
    conditions.sort_unstable();
    conditions.hash(&mut h);
    for list in [&s.container_statuses, &s.init_container_statuses] {
        let list = list.as_deref().unwrap_or_default();
        list.len().hash(&mut h);
        for cs in list {
            serde_json::to_string(cs).unwrap_or_default().hash(&mut h);
        }
    }
    h.finish()
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

    /// A named edit of a pod status (as JSON).
    type Edit<'a> = (&'a str, &'a dyn Fn(&mut serde_json::Value));

    #[test]
    fn the_owned_status_digest_sees_only_what_the_simulator_writes() -> Result<(), serde_json::Error>
    {
        let base = json!({
            "phase": "Running", "hostIP": "10.199.0.1", "podIP": "10.200.0.9",
            "podIPs": [{ "ip": "10.200.0.9" }], "startTime": "2024-01-01T00:00:00Z",
            "qosClass": "BestEffort",
            "conditions": [
                { "type": "Initialized", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z" },
                { "type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:01Z" },
                { "type": "ContainersReady", "status": "True", "lastTransitionTime": "2024-01-01T00:00:01Z" },
                { "type": "PodScheduled", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z" }
            ],
            "containerStatuses": [{
                "name": "a", "image": "app:1", "imageID": "sim-image@sha256:00",
                "containerID": "sim://x", "restartCount": 0, "started": true, "ready": true,
                "state": { "running": { "startedAt": "2024-01-01T00:00:01Z" } }, "lastState": {}
            }]
        });
        let digest = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut v = base.clone();
            edit(&mut v);
            serde_json::from_value::<PodStatus>(v).map(|s| owned_status_digest(Some(&s)))
        };
        let same = digest(&|_| {})?;
        assert_ne!(same, owned_status_digest(None));
        let others: [Edit; 5] = [
            ("qosClass", &|v| v["qosClass"] = json!("Burstable")),
            ("another writer's condition", &|v| {
                if let Some(cs) = v["conditions"].as_array_mut() {
                    cs.push(json!({ "type": "InPlaceUpdateReady", "status": "False" }));
                }
            }),
            ("PodScheduled", &|v| {
                v["conditions"][3]["status"] = json!("False")
            }),
            ("a transition time", &|v| {
                v["conditions"][1]["lastTransitionTime"] = json!("2024-01-01T00:09:00Z");
            }),
            ("the order of the conditions", &|v| {
                if let Some(cs) = v["conditions"].as_array_mut() {
                    cs.reverse();
                }
            }),
        ];
        for (what, edit) in others {
            assert_eq!(digest(edit)?, same, "{what} is not the simulator's");
        }
        let owned: [Edit; 6] = [
            ("Ready False (MarkPodsNotReady)", &|v| {
                v["conditions"][1]["status"] = json!("False")
            }),
            ("a reason", &|v| {
                v["conditions"][2]["reason"] = json!("ContainersNotReady")
            }),
            ("a message", &|v| v["conditions"][0]["message"] = json!("m")),
            ("Ready gone", &|v| {
                if let Some(cs) = v["conditions"].as_array_mut() {
                    cs.remove(1);
                }
            }),
            ("a container's readiness", &|v| {
                v["containerStatuses"][0]["ready"] = json!(false)
            }),
            ("the phase", &|v| v["phase"] = json!("Pending")),
        ];
        for (what, edit) in owned {
            assert_ne!(digest(edit)?, same, "{what} is the simulator's");
        }
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
