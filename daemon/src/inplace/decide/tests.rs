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
        // The kubelet creates containers from the image id it resolved.
        image: image.into(),
        reported_image: None,
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
    let p =
        pod(json!({"metadata": {"annotations": {"apps.kruise.io/inplace-update-state": state}}}));
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
    let p =
        pod(json!({"metadata": {"annotations": {"apps.kruise.io/inplace-update-state": state}}}));
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

/// An update whose only change is the `x` label an env reader (`side`) reads.
const ENV_STATE: &str =
    r#"{"revision":"cs-2","updateTimestamp":"2026-01-01T00:00:10Z","updateEnvFromMetadata":true}"#;

fn env_pod() -> Pod {
    pod(json!({"metadata": {
            "labels": {"x": "new"},
            "annotations": {"apps.kruise.io/inplace-update-state": ENV_STATE}}}))
}

/// Env from metadata is judged by the value the running container was started with:
/// a pod that already carried the new value (patched by hand before the template
/// changed) still gets its container restarted, whatever the times say; a container
/// that runs with the pod's values is done.
#[test]
fn env_from_metadata_is_judged_by_the_running_containers_values() {
    let p = env_pod();
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
            "annotations": {"apps.kruise.io/inplace-update-state": ENV_STATE}}}));
    let empty = with_env(
        rc("s1", "side", 1, true, T10 + 60, "sha256:side"),
        &[("X", "")],
    );
    assert!(matches!(
        decide(&unlabelled, &[empty], &resolved()),
        Decision::Complete(_)
    ));
}

/// The daemon stopped an env reader itself: until the kubelet's pod status names the new
/// container, the kubelet may still report the old one as running and ready (its last
/// sync can predate the stop), and a True condition would make the pod Ready on that
/// stale status (seen on the bed: the CloneSet counted the pod updated and ready with
/// `restartCount` 0). The daemon waits for the kubelet; then it completes.
#[test]
fn completion_after_a_daemon_stop_waits_until_the_kubelet_reports_the_new_container() {
    let p = env_pod();
    let new = with_env(
        rc("s1", "side", 1, true, T10 + 5, "sha256:side"),
        &[("X", "new")],
    );
    let stale = reported(&p, &[rc("s0", "side", 0, true, T10 - 5, "sha256:side")]);
    assert_eq!(
        super::decide(&stale, std::slice::from_ref(&new), &resolved()),
        Decision::Wait("the kubelet does not report side's new container s1 yet".into())
    );
    assert!(matches!(
        super::decide(&p, std::slice::from_ref(&new), &resolved()),
        Decision::Wait(_)
    ));
    let synced = reported(&p, std::slice::from_ref(&new));
    assert_eq!(
        super::decide(&synced, &[new], &resolved()),
        Decision::Complete(BTreeMap::from([("side".into(), "s1".into())]))
    );
}

/// A container the kubelet restarted for a new image completes from the runtime's view,
/// before the kubelet's pod status names it: the kubelet stopped and started it within
/// one sync, and its next sync waits for a relist newer than that sync's end, which shows
/// the new container (so the True condition cannot meet the old container's status).
#[test]
fn an_image_change_completes_from_the_runtime_before_the_kubelet_reports_it() {
    let p = pod(json!({}));
    let new = rc("a1", "main", 1, true, T10 + 5, "sha256:new");
    let complete = Decision::Complete(BTreeMap::from([("main".into(), "a1".into())]));
    let stale = reported(&p, &[rc("a0", "main", 0, true, T10 - 5, "sha256:old")]);
    assert_eq!(
        super::decide(&stale, std::slice::from_ref(&new), &resolved()),
        complete
    );
    assert_eq!(
        super::decide(&p, std::slice::from_ref(&new), &resolved()),
        complete
    );
    // Not before the new container runs.
    let starting = rc("a1", "main", 1, false, T10 + 5, "sha256:new");
    assert_eq!(
        super::decide(&stale, &[starting], &resolved()),
        Decision::Wait("main not running yet".into())
    );
}

/// The controller starts the next update of a pod the daemon completed: it writes
/// `InPlaceUpdateReady` False first, and the state (with the ids the daemon recorded)
/// still names the finished update until the spec patch. That update is not completed
/// again, however long ago the daemon completed it; a state whose recorded ids are not
/// the running containers' is judged as before.
#[test]
fn a_completed_update_is_not_completed_again_when_the_next_one_begins() {
    let with_ids = |recorded: &str| {
        let state = format!(
            r#"{{"revision":"cs-2","updateTimestamp":"2026-01-01T00:00:10Z","lastContainerStatuses":{{"main":{{"imageID":"reg/app@sha256:old"}}}},"updateImages":true,"daemonContainerIDs":{{"main":"{recorded}"}}}}"#
        );
        pod(json!({"metadata": {"annotations": {"apps.kruise.io/inplace-update-state": state}}}))
    };
    let running = [rc("a1", "main", 1, true, T10 + 5, "sha256:new")];
    assert_eq!(
        decide(&with_ids("containerd://a1"), &running, &resolved()),
        Decision::Wait(
            "the state's update is completed already; the next update's spec patch has not come yet"
                .into()
        )
    );
    assert_eq!(
        decide(&with_ids("containerd://a0"), &running, &resolved()),
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
        serde_json::from_value(json!({"labels": {"a": "1", "c": "3"}, "annotations": {"b": "2"}}))?;
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
                "unreadable in-place update state: key must be a string at line 1 column 2".into(),
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

/// The env-from-metadata decision when the runtime does not report container env, with
/// the node's clock ahead of, behind and equal to the controller's. The update is written
/// at controller time T10; the daemon, watching, sees it a second later (node clock:
/// T10 + 1 s + skew). Before the daemon's restart the container is stale whatever the
/// skew; after it, the successor of the recorded container is done whatever the skew.
/// The old rule (container time against the controller's time) is kept only where no
/// other fact exists, and gives the same answers with no skew.
#[test]
fn env_from_metadata_without_runtime_env_is_clock_skew_tolerant() {
    const S: i64 = 1_000_000_000;
    let state = |stopped: Option<&str>| {
        let mut s = json!({"revision": "cs-2", "updateTimestamp": "2026-01-01T00:00:10Z",
            "lastContainerStatuses": {}, "updateEnvFromMetadata": true});
        if let Some(id) = stopped {
            s[STATE_ENV_STOPPED_KEY] = json!({ "side": id });
        }
        pod(json!({"metadata": {
            "labels": {"x": "new"},
            "annotations": {"apps.kruise.io/inplace-update-state": s.to_string()}}}))
    };
    let restart = Decision::Restart {
        container: "side".into(),
        id: "s0".into(),
    };
    let done = Decision::Complete(BTreeMap::from([("side".into(), "s1".into())]));
    let waiting = Decision::Wait("side stopped, waiting for the kubelet to start it".into());
    for (skew_name, skew) in [
        ("no skew", 0),
        ("node 5 min ahead", 300 * S),
        ("node 5 min behind", -300 * S),
        ("node 1 h behind", -3600 * S),
    ] {
        let node = |true_time: i64| true_time + skew;
        let watching = NodeClock {
            batch_seen_at: Some(node(T10 + S)),
        };
        // created 30 s before the update (true time), the kubelet's restart 10 s after it
        let old = |running| rc("s0", "side", 0, running, node(T10 - 30 * S), "sha256:side");
        let new = rc("s1", "side", 1, true, node(T10 + 10 * S), "sha256:side");
        let cases = [
            (
                "old container, daemon watching",
                state(None),
                vec![old(true)],
                watching,
                restart.clone(),
            ),
            (
                "the container the daemon stopped is still the newest",
                state(Some("s0")),
                vec![old(false)],
                watching,
                waiting.clone(),
            ),
            (
                "the stopped container's successor, daemon watching",
                state(Some("s0")),
                vec![old(false), new.clone()],
                watching,
                done.clone(),
            ),
            (
                "the stopped container's successor, daemon restarted since",
                state(Some("s0")),
                vec![old(false), new.clone()],
                NodeClock::default(),
                done.clone(),
            ),
        ];
        for (name, p, rt, clock, want) in cases {
            let got = super::decide_on_node(
                &reported(&p, &rt),
                &rt,
                &resolved(),
                &BTreeMap::new(),
                false,
                clock,
            );
            assert_eq!(got, want, "{skew_name}: {name}");
        }
    }
    // Before this change, with the node 5 min ahead, the old container looked newer than
    // the update and was never restarted; 5 min behind, the successor looked older and
    // was restarted again. The old rule is what is left with no other fact:
    let ahead = rc("s0", "side", 0, true, T10 - 30 * S + 300 * S, "sha256:side");
    assert!(matches!(
        decide(&state(None), &[ahead], &resolved()),
        Decision::Complete(_)
    ));
    let behind = [
        rc("s0", "side", 0, false, T10 - 330 * S, "sha256:side"),
        rc("s1", "side", 1, true, T10 + 10 * S - 300 * S, "sha256:side"),
    ];
    assert!(matches!(
        decide(&state(None), &behind, &resolved()),
        Decision::Restart { .. }
    ));
    // ... and with the record of the stop, the successor is done.
    assert_eq!(decide(&state(Some("s0")), &behind, &resolved()), done);
}

/// The stop record is added to the state once, keeping everything else.
#[test]
fn the_env_stop_record_is_added_once_and_keeps_the_state() {
    let s: InPlaceUpdateState = serde_json::from_str(
        r#"{"revision":"cs-2","updateEnvFromMetadata":true,"futureKey":{"a":1}}"#,
    )
    .unwrap_or_default();
    let first = state_with_env_stopped(&s, "side", "s0")
        .ok()
        .flatten()
        .unwrap_or_default();
    let s1: InPlaceUpdateState = serde_json::from_str(&first).unwrap_or_default();
    assert_eq!(
        env_stopped_ids(&s1),
        BTreeMap::from([("side".to_string(), "s0".to_string())])
    );
    assert_eq!(s1.extra.get("futureKey"), Some(&json!({"a": 1})));
    assert!(s1.update_env_from_metadata);
    assert_eq!(state_with_env_stopped(&s1, "side", "s0").ok(), Some(None));
    let second = state_with_env_stopped(&s1, "side", "s2")
        .ok()
        .flatten()
        .unwrap_or_default();
    let s2: InPlaceUpdateState = serde_json::from_str(&second).unwrap_or_default();
    assert_eq!(env_stopped_ids(&s2)["side"], "s2");
}

/// The completion moves the lifecycle label only when the controller named the state at
/// the start, and only while the pod is still Updating; the rest of the write is as before.
#[test]
fn completion_moves_the_lifecycle_label_only_as_the_controller_said()
-> Result<(), serde_json::Error> {
    let ids = BTreeMap::from([("main".to_owned(), "containerd://a1".to_owned())]);
    let key = "apps.kruise.io/inplace-update-state";
    let named = |state: &str| {
        format!(
            r#"{{"revision":"cs-2","lifecycleStateOnCompletion":"{state}","daemonContainerIDs":{{"main":"containerd://a1"}}}}"#
        )
    };
    let unnamed = r#"{"revision":"cs-2","daemonContainerIDs":{"main":"containerd://a1"}}"#;
    // (case, state annotation, pod's lifecycle label, label the patch writes)
    let cases = [
        (
            "named Normal, pod Updating",
            named("Normal"),
            Some("Updating"),
            Some("Normal"),
        ),
        (
            "named Updated, pod Updating",
            named("Updated"),
            Some("Updating"),
            Some("Updated"),
        ),
        // an old state (the reference's, or an older controller's): as before
        ("no field", unnamed.to_owned(), Some("Updating"), None),
        (
            "a state this version does not know",
            named("Later"),
            Some("Updating"),
            None,
        ),
        // someone moved the label after the start: not ours to overwrite
        ("pod already Normal", named("Normal"), Some("Normal"), None),
        (
            "pod PreparingDelete",
            named("Normal"),
            Some("PreparingDelete"),
            None,
        ),
        ("pod without a lifecycle label", named("Normal"), None, None),
    ];
    for (case, state, label, want) in cases {
        let mut p = pod(json!({}));
        p.metadata.annotations = Some(BTreeMap::from([(key.to_owned(), state.clone())]));
        if let (Some(labels), Some(label)) = (p.metadata.labels.as_mut(), label) {
            labels.insert(
                "lifecycle.apps.kruise.io/state".to_owned(),
                label.to_owned(),
            );
        }
        p.metadata.resource_version = Some("42".into());
        let now = Timestamp::from_second(1_767_225_610).unwrap_or(Timestamp::UNIX_EPOCH);
        let patch = completion_patch(&p, &ids, now)?;
        assert_eq!(patch["metadata"]["resourceVersion"], "42", "{case}");
        assert_eq!(patch["status"], ready_patch(now)["status"], "{case}");
        let meta = &patch["metadata"];
        match want {
            Some(to) => {
                assert_eq!(
                    meta["labels"],
                    json!({"lifecycle.apps.kruise.io/state": to}),
                    "{case}"
                );
                assert_eq!(
                    meta["annotations"],
                    json!({"lifecycle.apps.kruise.io/timestamp": "2026-01-01T00:00:10Z"}),
                    "{case}: the ids were recorded already, so only the timestamp"
                );
            }
            None => {
                assert!(meta.get("labels").is_none(), "{case}");
                assert!(meta.get("annotations").is_none(), "{case}");
            }
        }
    }
    // The ids and the label in the same patch.
    let mut p =
        pod(json!({"metadata": {"labels": {"lifecycle.apps.kruise.io/state": "Updating"}}}));
    p.metadata.annotations = Some(BTreeMap::from([(
        key.to_owned(),
        r#"{"revision":"cs-2","lifecycleStateOnCompletion":"Normal"}"#.to_owned(),
    )]));
    let patch = completion_patch(&p, &ids, Timestamp::UNIX_EPOCH)?;
    assert_eq!(
        patch["metadata"]["labels"]["lifecycle.apps.kruise.io/state"],
        "Normal"
    );
    let annotations = patch["metadata"]["annotations"]
        .as_object()
        .map(|m| m.keys().cloned().collect::<Vec<_>>());
    assert_eq!(
        annotations,
        Some(vec![
            key.to_owned(),
            "lifecycle.apps.kruise.io/timestamp".to_owned()
        ])
    );
    Ok(())
}

/// With `CloneSetShortHash` the revision label holds only the hash while the state names
/// the full revision: the daemon judges such a pod exactly as one labelled with the full
/// name (it answered `NotInUpdate` for every such pod, and env-from-metadata updates hung).
#[test]
fn a_short_hash_label_is_the_states_revision() {
    let env_state = r#"{"revision":"cs-6fccd6cd9d","updateTimestamp":"2026-01-01T00:00:10Z","updateEnvFromMetadata":true}"#;
    let stale = with_env(
        rc("s0", "side", 0, true, T10 - 60, "sha256:side"),
        &[("X", "old")],
    );
    let fresh = with_env(
        rc("s1", "side", 1, true, T10 + 60, "sha256:side"),
        &[("X", "new")],
    );
    for label in ["cs-6fccd6cd9d", "6fccd6cd9d"] {
        let p = pod(json!({"metadata": {
                "labels": {"x": "new", "controller-revision-hash": label},
                "annotations": {"apps.kruise.io/inplace-update-state": env_state}}}));
        assert_eq!(
            decide(&p, std::slice::from_ref(&stale), &resolved()),
            Decision::Restart {
                container: "side".into(),
                id: "s0".into()
            },
            "{label}"
        );
        assert_eq!(
            decide(&p, std::slice::from_ref(&fresh), &resolved()),
            Decision::Complete(BTreeMap::from([("side".into(), "s1".into())])),
            "{label}"
        );
    }
    // Another revision's hash is not this update.
    let other = pod(json!({"metadata": {
            "labels": {"x": "new", "controller-revision-hash": "6fccd6cd9e"},
            "annotations": {"apps.kruise.io/inplace-update-state": env_state}}}));
    assert_eq!(decide(&other, &[stale], &resolved()), Decision::NotInUpdate);
}

mod one_verdict {
    use inplace_proto::InPlaceUpdateContainerStatus;
    use inplace_proto::inplace_contract::container_updated;
    use k8s_openapi::api::core::v1::ContainerStatus;
    use proptest::prelude::*;

    use super::*;

    fn image() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("reg/app:v1".to_owned()),
            Just("reg/app:v2".to_owned()),
            Just("reg/app".to_owned()),
            Just("127.0.0.1:5000/app:v2".to_owned()),
            Just("docker.io/library/app:latest".to_owned()),
        ]
    }

    fn image_id() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("reg/app@sha256:aa".to_owned()),
            Just("reg/app@sha256:bb".to_owned()),
            Just(String::new()),
        ]
    }

    proptest! {
        /// One container seen both ways: as the kubelet reports it in the pod status (the
        /// controller's view: `containerd://<id>`, the image's tag and repo digest) and as
        /// the daemon sees it through CRI (the bare id; the listing's image id, and the
        /// status's image and image id where it read them). The in-place contract gives
        /// both the same verdict, whether the state records the old container's id (our
        /// controller) or not (OpenKruise's).
        #[test]
        fn both_views_of_a_container_give_one_verdict(
            id in "[a-f0-9]{1,6}",
            old_id in prop_oneof![Just(String::new()), "[a-f0-9]{1,6}"],
            before_image_id in image_id(),
            status_image_id in image_id(),
            status_image in image(),
            spec_image in image(),
            listed in "sha256:[a-f0-9]{1,4}",
            read in any::<bool>(),
        ) {
            let before = InPlaceUpdateContainerStatus {
                image_id: before_image_id,
                container_id: if old_id.is_empty() { String::new() } else { format!("containerd://{old_id}") },
                resources: None,
            };
            let status = ContainerStatus {
                name: "main".into(),
                container_id: Some(format!("containerd://{id}")),
                image: status_image.clone(),
                image_id: status_image_id.clone(),
                ..Default::default()
            };
            // The daemon reads the reported image wherever the verdict depends on it.
            let read = read || old_id.is_empty();
            let mut runtime = rc(&id, "main", 1, true, T10, &listed);
            runtime.reported_image = read.then_some((status_image, status_image_id));
            prop_assert_eq!(
                container_updated(Some(&spec_image), &before, &status),
                container_updated(Some(&spec_image), &before, &runtime)
            );
        }
    }
}
