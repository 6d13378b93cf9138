#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use super::*;

fn cloneset() -> CloneSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": "demo", "namespace": "default", "uid": "u1"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "demo"}},
            "template": {"metadata": {"labels": {"app": "demo"}},
                "spec": {"containers": [
                    {"name": "main", "image": "reg/app:v2"},
                    {"name": "side", "image": "reg/side:v1"}]}},
        },
        "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 2,
            "updatedReadyReplicas": 1, "updateRevision": "demo-new", "currentRevision": "demo-old"}
    }))
    .unwrap()
}

fn owner() -> Value {
    json!([{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "demo",
            "uid": "u1", "controller": true}])
}

fn revision(name: &str, number: i64, image: &str) -> ControllerRevision {
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": owner()},
        "revision": number,
        "data": {"spec": {"template": {"$patch": "replace",
            "metadata": {"labels": {"app": "demo"}},
            "spec": {"containers": [
                {"name": "main", "image": image},
                {"name": "side", "image": "reg/side:v1"}]}}}}
    }))
    .unwrap()
}

/// A pod on `revision` with its Ready and InPlaceUpdateReady conditions, the state
/// annotation `state` (if any), and container statuses (name, container id, restarts).
fn pod(
    name: &str,
    revision: &str,
    ready: bool,
    in_place_ready: Option<bool>,
    state: Option<Value>,
    containers: &[(&str, &str, i32)],
) -> Pod {
    let word = |b: bool| if b { "True" } else { "False" };
    let mut conditions = vec![json!({"type": "Ready", "status": word(ready)})];
    if let Some(r) = in_place_ready {
        conditions.push(json!({"type": "InPlaceUpdateReady", "status": word(r)}));
    }
    let mut annotations = json!({});
    if let Some(s) = state {
        annotations["apps.kruise.io/inplace-update-state"] = json!(s.to_string());
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": owner(), "annotations": annotations,
            "labels": {"app": "demo", "controller-revision-hash": revision,
                       "lifecycle.apps.kruise.io/state": "Normal"}},
        "spec": {"nodeName": "n1", "containers": [
            {"name": "main", "image": "reg/app:v2"}, {"name": "side", "image": "reg/side:v1"}]},
        "status": {"conditions": conditions, "containerStatuses": containers.iter().map(|(n, id, r)| json!({
            "name": n, "containerID": id, "restartCount": r, "ready": ready,
            "image": "", "imageID": ""})).collect::<Vec<_>>()}
    }))
    .unwrap()
}

fn node_image(pulling: &[(&str, &str, &str, i32)]) -> NodeImage {
    let mut statuses = serde_json::Map::new();
    for (image, tag, phase, progress) in pulling {
        statuses.insert(
            (*image).to_owned(),
            json!({"tags": [{"tag": tag, "phase": phase, "progress": progress}]}),
        );
    }
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
        "metadata": {"name": "n1"},
        "spec": {},
        "status": {"desired": 1, "imageStatuses": statuses}
    }))
    .unwrap()
}

fn restart_state(revision: &str) -> Value {
    json!({"revision": revision, "restartContainers": ["main", "side"],
        "lastContainerStatuses": {
            "main": {"containerID": "containerd://m0"},
            "side": {"containerID": "containerd://s0"}}})
}

fn sample() -> View {
    let pods = vec![
        // Updated and done.
        pod(
            "demo-c",
            "demo-new",
            true,
            Some(true),
            Some(restart_state("demo-new")),
            &[
                ("main", "containerd://m1", 1),
                ("side", "containerd://s1", 1),
            ],
        ),
        // Updating: main restarted, side not yet.
        pod(
            "demo-b",
            "demo-new",
            false,
            Some(false),
            Some(restart_state("demo-new")),
            &[
                ("main", "containerd://m1", 1),
                ("side", "containerd://s0", 0),
            ],
        ),
        // Not started; its node pulls the new image.
        pod(
            "demo-a",
            "demo-old",
            true,
            Some(true),
            None,
            &[
                ("main", "containerd://m0", 0),
                ("side", "containerd://s0", 0),
            ],
        ),
    ];
    let revisions = vec![
        revision("demo-new", 2, "reg/app:v2"),
        revision("demo-old", 1, "reg/app:v1"),
    ];
    let images = vec![node_image(&[
        ("reg/app", "v2", "Pulling", 40),
        ("reg/side", "v1", "Succeeded", 100),
    ])];
    build(&cloneset(), &pods, &revisions, &images)
}

#[test]
fn view_table() {
    insta::assert_snapshot!(table(&sample()));
}

#[test]
fn view_data() {
    let view = sample();
    assert_eq!(view.revisions.len(), 2);
    assert_eq!(
        (
            view.revisions[0].number,
            view.revisions[0].pods,
            view.revisions[0].current
        ),
        (1, 1, true)
    );
    assert_eq!(
        (
            view.revisions[1].number,
            view.revisions[1].pods,
            view.revisions[1].ready
        ),
        (2, 2, 1)
    );
    let progress: Vec<&str> = view.pods.iter().map(|p| p.in_place.as_str()).collect();
    assert_eq!(progress, ["-", "updating 1/2", "done"]);
    assert_eq!(view.pods[0].image_pulls, ["Pulling 40%", "Succeeded"]);
    let updated: Vec<bool> = view.pods.iter().map(|p| p.updated).collect();
    assert_eq!(updated, [false, true, true]);
    assert_eq!(view.pods[2].restarts, 2);
    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(json["pods"][1]["inPlace"], "updating 1/2");
    assert_eq!(json["status"]["updatedReady"], 1);
}

#[test]
fn in_place_progress_table() {
    let grace = {
        let mut p = pod("p", "demo-new", false, Some(false), None, &[]);
        p.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("apps.kruise.io/inplace-update-grace".into(), "{}".into());
        p
    };
    let next = {
        let mut s = restart_state("demo-new");
        s["nextContainerRestarts"] = json!(["side"]);
        s
    };
    let cases = [
        ("grace", grace, "grace period"),
        (
            "no state",
            pod("p", "demo-new", true, Some(true), None, &[]),
            "-",
        ),
        (
            "state of another revision",
            pod(
                "p",
                "demo-old",
                false,
                Some(false),
                Some(restart_state("demo-new")),
                &[],
            ),
            "-",
        ),
        (
            "nothing restarted yet, next batch pending",
            pod(
                "p",
                "demo-new",
                false,
                Some(false),
                Some(next),
                &[
                    ("main", "containerd://m0", 0),
                    ("side", "containerd://s0", 0),
                ],
            ),
            "updating 0/2, next batch pending",
        ),
        (
            "metadata only",
            pod(
                "p",
                "demo-new",
                false,
                Some(false),
                Some(json!({"revision": "demo-new"})),
                &[],
            ),
            "updating",
        ),
    ];
    for (case, p, want) in cases {
        assert_eq!(in_place_progress(&p), want, "{case}");
    }
}

#[test]
fn image_pull_reads_the_nodes_image_status() {
    let n = node_image(&[("reg/app", "v2", "Failed", 0)]);
    assert_eq!(image_pull(Some(&n), "reg/app:v2"), "Failed");
    assert_eq!(image_pull(Some(&n), "reg/app:v3"), "-");
    assert_eq!(image_pull(None, "reg/app:v2"), "-");
}

#[test]
fn frames_clear_the_screen_only_on_a_terminal() {
    assert_eq!(frame("x\n", true, true), "\x1b[H\x1b[2Jx\n");
    assert_eq!(frame("x\n", true, false), "\x1b[H\x1b[2Jx\n");
    assert_eq!(frame("x\n", false, true), "x\n");
    assert_eq!(frame("x\n", false, false), "\nx\n");
}
