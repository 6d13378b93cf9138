#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::{CachedPod, PodPlacement};

/// A pod as the API server sends it, with fields the cache drops (managed fields, env,
/// volumes, probes, tolerations, lastState, IPs...) and every field it keeps.
fn api_pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-abcde",
            "generateName": "web-",
            "namespace": "ns1",
            "uid": "u-1",
            "resourceVersion": "42",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": "2026-01-01T00:10:00Z",
            "deletionGracePeriodSeconds": 30,
            "labels": {"app": "web", "apps.kruise.io/cloneset-instance-id": "abcde"},
            "annotations": {"apps.kruise.io/inplace-update-state": "{\"revision\":\"r2\"}"},
            "finalizers": ["example.io/hold"],
            "ownerReferences": [{
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web",
                "uid": "cs-1", "controller": true, "blockOwnerDeletion": true
            }],
            "managedFields": [{"manager": "kubelet", "operation": "Update",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]
        },
        "spec": {
            "nodeName": "node-1",
            "nodeSelector": {"zone": "a"},
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "volumes": [{"name": "v", "emptyDir": {}}],
            "containers": [{
                "name": "main",
                "image": "nginx:1",
                "imagePullPolicy": "IfNotPresent",
                "env": [{"name": "A", "value": "1"}],
                "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                "readinessProbe": {"httpGet": {"path": "/", "port": 80}},
                "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "64Mi"}},
                "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]
            }, {
                "name": "side",
                "image": "busybox:1",
                "restartPolicy": "Always"
            }]
        },
        "status": {
            "phase": "Running",
            "hostIP": "10.0.0.1",
            "podIP": "10.1.0.1",
            "podIPs": [{"ip": "10.1.0.1"}],
            "qosClass": "Burstable",
            "startTime": "2026-01-01T00:00:01Z",
            "resize": "InProgress",
            "conditions": [
                {"type": "Ready", "status": "True", "lastProbeTime": null,
                 "lastTransitionTime": "2026-01-01T00:00:05Z"},
                {"type": "InPlaceUpdateReady", "status": "False", "reason": "StartInPlaceUpdate",
                 "message": "m", "lastTransitionTime": "2026-01-01T00:00:06Z"}
            ],
            "containerStatuses": [{
                "name": "main",
                "image": "nginx:1",
                "imageID": "docker.io/library/nginx@sha256:1",
                "containerID": "containerd://c1",
                "ready": true,
                "restartCount": 2,
                "started": true,
                "state": {"running": {"startedAt": "2026-01-01T00:00:02Z"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
                "resources": {"requests": {"cpu": "100m"}}
            }]
        }
    })
}

/// The same pod reduced by hand to what the cache promises to keep.
fn expected(full: &Pod) -> Pod {
    let spec = full.spec.clone().unwrap_or_default();
    let status = full.status.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            managed_fields: None,
            generate_name: None,
            ..full.metadata.clone()
        },
        spec: Some(PodSpec {
            node_name: spec.node_name,
            readiness_gates: spec.readiness_gates,
            containers: spec
                .containers
                .into_iter()
                .map(|c| Container {
                    name: c.name,
                    image: c.image,
                    resources: c.resources,
                    resize_policy: c.resize_policy,
                    restart_policy: c.restart_policy,
                    ..Container::default()
                })
                .collect(),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: status.phase,
            conditions: status.conditions,
            start_time: status.start_time,
            resize: status.resize,
            container_statuses: status.container_statuses.map(|cs| {
                cs.into_iter()
                    .map(|c| ContainerStatus {
                        last_state: None,
                        ..c
                    })
                    .collect()
            }),
            ..PodStatus::default()
        }),
    }
}

#[test]
fn cached_pod_keeps_every_field_the_controller_reads() {
    let full: Pod = serde_json::from_value(api_pod()).unwrap();
    let cached: CachedPod = serde_json::from_value(api_pod()).unwrap();
    let pod = cached.to_pod();
    assert_eq!(pod, expected(&full));
    // spot checks of what the planner and the act layer look at
    assert_eq!(
        pod.metadata.finalizers,
        Some(vec!["example.io/hold".into()])
    );
    assert!(pod.metadata.deletion_timestamp.is_some());
    let statuses = pod.status.and_then(|s| s.container_statuses).unwrap();
    assert_eq!(statuses[0].image_id, "docker.io/library/nginx@sha256:1");
    assert_eq!(statuses[0].restart_count, 2);
    let containers = pod.spec.map(|s| s.containers).unwrap();
    assert_eq!(containers.len(), 2);
    assert!(containers[0].env.is_none() && containers[0].readiness_probe.is_none());
}

#[test]
fn cached_pod_drops_what_nobody_reads() {
    let cached: CachedPod = serde_json::from_value(api_pod()).unwrap();
    let pod = cached.to_pod();
    assert!(pod.metadata.managed_fields.is_none());
    let spec = pod.spec.unwrap();
    assert!(spec.volumes.is_none() && spec.tolerations.is_none() && spec.node_selector.is_none());
    let status = pod.status.unwrap();
    assert!(status.pod_ip.is_none() && status.qos_class.is_none());
    assert!(status.container_statuses.unwrap()[0].last_state.is_none());
}

#[test]
fn nulls_and_missing_parts_are_empty() {
    let cases = [
        json!({"metadata": {"name": "p"}}),
        json!({"metadata": {"name": "p"}, "spec": null, "status": null}),
        json!({"metadata": {"name": "p", "labels": null}, "spec": {"containers": null}}),
        json!({"metadata": {"name": "p"}, "status": {"containerStatuses": [{"name": "c"}]}}),
    ];
    for case in cases {
        let cached: CachedPod = serde_json::from_value(case.clone()).unwrap();
        assert_eq!(cached.metadata.name.as_deref(), Some("p"), "{case}");
        let pod = cached.to_pod();
        assert!(pod.spec.is_some_and(|s| s.containers.is_empty()), "{case}");
    }
}

#[test]
fn placement_keeps_namespace_labels_node_and_phase() {
    let placed: PodPlacement = serde_json::from_value(api_pod()).unwrap();
    assert_eq!(placed.node_name(), Some("node-1"));
    let pod = placed.to_pod();
    assert_eq!(pod.metadata.namespace.as_deref(), Some("ns1"));
    assert_eq!(pod.metadata.name.as_deref(), Some("web-abcde"));
    assert_eq!(
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str),
        Some("web")
    );
    assert!(pod.metadata.deletion_timestamp.is_some());
    assert!(pod.metadata.annotations.is_none() && pod.metadata.managed_fields.is_none());
    assert_eq!(
        pod.spec.and_then(|s| s.node_name).as_deref(),
        Some("node-1")
    );
    assert_eq!(pod.status.and_then(|s| s.phase).as_deref(), Some("Running"));
}

#[test]
fn the_kube_resource_is_the_pods_one() {
    use k8s_openapi::Resource;
    assert_eq!(CachedPod::KIND, "Pod");
    assert_eq!(CachedPod::URL_PATH_SEGMENT, "pods");
    assert_eq!(CachedPod::API_VERSION, "v1");
    assert_eq!(PodPlacement::URL_PATH_SEGMENT, "pods");
    assert_eq!(PodPlacement::GROUP, "");
}

/// Memory of 10,000 realistic pods in the cached form against stripped `Pod`s. Run with
/// `--ignored --nocapture`; RSS-based, so only meaningful in its own process.
#[test]
#[ignore]
fn memory_of_ten_thousand_pods() {
    fn rss_mib() -> f64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        s.lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    }
    // INPLACE_SAMPLE_POD: a pod's JSON (e.g. `kubectl get pod -o json`) instead of `api_pod`.
    let json = std::env::var("INPLACE_SAMPLE_POD")
        .ok()
        .and_then(|p| std::fs::read(p).ok())
        .unwrap_or_else(|| serde_json::to_vec(&api_pod()).unwrap());
    let before = rss_mib();
    let cached: Vec<std::sync::Arc<CachedPod>> = (0..10_000)
        .map(|i| {
            let mut p: CachedPod = serde_json::from_slice(&json).unwrap();
            p.metadata.name = Some(format!("p-{i}"));
            std::sync::Arc::new(p)
        })
        .collect();
    let mid = rss_mib();
    eprintln!(
        "sizes: CachedPod {} Pod {}",
        size_of::<CachedPod>(),
        size_of::<Pod>()
    );
    let stripped: Vec<std::sync::Arc<Pod>> = (0..10_000)
        .map(|i| {
            let mut p: Pod = serde_json::from_slice(&json).unwrap();
            p.metadata.name = Some(format!("p-{i}"));
            strip_pod(&mut p);
            std::sync::Arc::new(p)
        })
        .collect();
    let after = rss_mib();
    eprintln!(
        "10k pods: cached {:.1} MiB, stripped Pod {:.1} MiB",
        mid - before,
        after - mid
    );
    assert_eq!(cached.len(), stripped.len());
}

/// Drops what neither the planner nor the act layer reads from a full `Pod`: managed
/// fields, volumes, tolerations, and per container env, mounts, probes, commands and
/// ports. The watches store [`CachedPod`]s instead (4x smaller for 10,000 pods); this
/// stripped `Pod` is the memory test's baseline.
fn strip_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    if let Some(spec) = pod.spec.as_mut() {
        spec.volumes = None;
        spec.tolerations = None;
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            c.env = None;
            c.env_from = None;
            c.volume_mounts = None;
            c.liveness_probe = None;
            c.readiness_probe = None;
            c.startup_probe = None;
            c.command = None;
            c.args = None;
            c.ports = None;
            c.lifecycle = None;
            c.security_context = None;
        }
    }
    if let Some(status) = pod.status.as_mut() {
        for c in status.container_statuses.iter_mut().flatten() {
            c.last_state = None;
        }
    }
}
