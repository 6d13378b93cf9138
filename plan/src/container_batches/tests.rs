#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::ContainerStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use super::*;

fn template(annotations: Value, containers: Value) -> Map<String, Value> {
    json!({"metadata": {"annotations": annotations}, "spec": {"containers": containers}})
        .as_object()
        .unwrap()
        .clone()
}

fn images(names: &[&str]) -> InPlaceUpdateGrace {
    InPlaceUpdateGrace {
        revision: "cs-2".into(),
        container_images: names
            .iter()
            .map(|n| ((*n).to_owned(), format!("{n}:v2")))
            .collect(),
        ..InPlaceUpdateGrace::default()
    }
}

fn label_meta(key: &str, value: &str) -> ObjectMeta {
    ObjectMeta {
        labels: Some([(key.to_owned(), value.to_owned())].into()),
        ..ObjectMeta::default()
    }
}

#[test]
fn ordered_annotation_gives_the_first_container_the_highest_priority() {
    let t = template(
        json!({"apps.kruise.io/container-launch-priority": "Ordered"}),
        json!([{"name": "sidecar"}, {"name": "main"}, {"name": "log"}]),
    );
    assert_eq!(
        launch_priorities(&t),
        [
            ("sidecar".to_owned(), Some(0)),
            ("main".to_owned(), Some(-1)),
            ("log".to_owned(), Some(-2))
        ]
    );
}

/// The reference's pod webhook: `Ordered` ranks every container by position and ignores
/// `KRUISE_CONTAINER_PRIORITY`; a barrier env (what the webhook wrote, e.g. in a template
/// copied from a pod) is read as it stands.
#[test]
fn ordered_ranks_by_position_and_a_barrier_env_is_read_as_written() {
    let t = template(
        json!({"apps.kruise.io/container-launch-priority": "Ordered"}),
        json!([
            {"name": "a", "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": "-5"}]},
            {"name": "b", "env": [{"name": "KRUISE_CONTAINER_BARRIER",
                "valueFrom": {"configMapKeyRef": {"name": "x-barrier", "key": "p_100"}}}]},
            {"name": "c", "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": "not a number"}]},
        ]),
    );
    assert_eq!(
        launch_priorities(&t),
        [
            ("a".to_owned(), Some(0)),
            ("b".to_owned(), Some(100)),
            ("c".to_owned(), Some(-2))
        ]
    );
    let plain = template(json!({}), json!([{"name": "a"}]));
    assert_eq!(launch_priorities(&plain), [("a".to_owned(), None)]);
}

/// With `KRUISE_CONTAINER_PRIORITY` on any container, a container without it has priority
/// 0 (the reference's webhook gives every container a barrier): `=10` on one container
/// puts it in a batch of its own, before the other.
#[test]
fn a_container_without_the_priority_env_has_priority_zero_once_any_container_has_one() {
    let t = template(
        json!({}),
        json!([
            {"name": "app"},
            {"name": "sidecar", "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": "10"}]},
            {"name": "bad", "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": "x"}]},
            {"name": "low", "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": " -1 "}]},
        ]),
    );
    let priorities = launch_priorities(&t);
    assert_eq!(
        priorities,
        [
            ("app".to_owned(), Some(0)),
            ("sidecar".to_owned(), Some(10)),
            ("bad".to_owned(), Some(0)),
            ("low".to_owned(), Some(-1)),
        ]
    );
    let first = split(&images(&["app", "sidecar", "bad", "low"]), &priorities);
    assert_eq!(first.containers, ["sidecar"]);
    let mut state = InPlaceUpdateState::default();
    first.record_in(&mut state);
    let second = split(&remaining(&state), &priorities);
    assert_eq!(second.containers, ["app", "bad"]);
    second.record_in(&mut state);
    let third = split(&remaining(&state), &priorities);
    assert_eq!(third.containers, ["low"]);
    assert!(!third.has_next());
}

#[test]
fn the_highest_priority_goes_first_and_containers_without_priority_go_with_it() {
    let priorities = vec![
        ("sidecar".to_owned(), Some(10)),
        ("plain".to_owned(), None),
        ("main".to_owned(), Some(1)),
        ("also-main".to_owned(), Some(1)),
    ];
    let first = split(
        &images(&["sidecar", "plain", "main", "also-main"]),
        &priorities,
    );
    assert_eq!(first.containers, ["plain", "sidecar"]);
    assert_eq!(first.now.container_images.len(), 2);
    assert_eq!(
        first.next_images.keys().collect::<Vec<_>>(),
        ["also-main", "main"]
    );
    assert!(first.has_next());

    let mut state = InPlaceUpdateState {
        revision: "cs-2".into(),
        ..InPlaceUpdateState::default()
    };
    first.record_in(&mut state);
    assert_eq!(
        state
            .pre_check_before_next
            .as_ref()
            .unwrap()
            .containers_required_ready,
        ["plain", "sidecar"]
    );
    // The next batch: both priority-1 containers together, nothing left after.
    let second = split(&remaining(&state), &priorities);
    assert_eq!(second.containers, ["also-main", "main"]);
    assert!(!second.has_next());
    second.record_in(&mut state);
    assert!(state.pre_check_before_next.is_none());
    assert!(state.next_container_images.is_empty());
}

#[test]
fn unchanged_containers_do_not_hold_a_batch() {
    // Only the low-priority container changes: it goes at once.
    let priorities = vec![
        ("sidecar".to_owned(), Some(10)),
        ("main".to_owned(), Some(1)),
    ];
    let s = split(&images(&["main"]), &priorities);
    assert_eq!(s.containers, ["main"]);
    assert!(!s.has_next());
}

#[test]
fn containers_reading_the_same_changed_key_share_a_batch() {
    let priorities = vec![
        ("a".to_owned(), Some(3)),
        ("b".to_owned(), Some(2)),
        ("c".to_owned(), Some(1)),
    ];
    let mut spec = images(&["a"]);
    spec.container_ref_metadata
        .insert("a".into(), label_meta("tier", "web"));
    spec.container_ref_metadata
        .insert("b".into(), label_meta("tier", "web"));
    spec.container_ref_metadata
        .insert("c".into(), label_meta("zone", "z1"));
    let s = split(&spec, &priorities);
    assert_eq!(s.containers, ["a", "b"]);
    assert!(s.now.update_env_from_metadata);
    assert_eq!(s.next_ref_metadata.keys().collect::<Vec<_>>(), ["c"]);
}

#[test]
fn the_next_batch_waits_for_every_required_container_to_be_ready() {
    let state = InPlaceUpdateState {
        revision: "cs-2".into(),
        next_container_images: [("main".to_owned(), "main:v2".to_owned())].into(),
        pre_check_before_next: Some(inplace_proto::PreCheckBeforeNext {
            containers_required_ready: vec!["sidecar".into()],
        }),
        ..InPlaceUpdateState::default()
    };
    let status = |name: &str, ready: bool| ContainerStatus {
        name: name.into(),
        ready,
        started: Some(true),
        state: Some(k8s_openapi::api::core::v1::ContainerState {
            running: Some(Default::default()),
            ..Default::default()
        }),
        ..ContainerStatus::default()
    };
    assert_eq!(
        next_batch(&state, &[status("sidecar", false), status("main", true)]),
        NextBatch::Waiting(vec!["sidecar".into()])
    );
    assert_eq!(
        next_batch(&state, &[status("main", true)]),
        NextBatch::Waiting(vec!["sidecar".into()])
    );
    assert_eq!(
        next_batch(&state, &[status("sidecar", true)]),
        NextBatch::Due
    );
    // Ready but not running (a status the kubelet has not rewritten yet), or running and
    // ready with its startup probe / postStart hook not done: not started yet.
    let not_running = ContainerStatus {
        state: None,
        ..status("sidecar", true)
    };
    assert_eq!(
        next_batch(&state, &[not_running]),
        NextBatch::Waiting(vec!["sidecar".into()])
    );
    let not_started = ContainerStatus {
        started: Some(false),
        ..status("sidecar", true)
    };
    assert_eq!(
        next_batch(&state, &[not_started]),
        NextBatch::Waiting(vec!["sidecar".into()])
    );
    let done = InPlaceUpdateState::default();
    assert_eq!(next_batch::<ContainerStatus>(&done, &[]), NextBatch::None);
}

/// A batch whose only change is metadata a container's env reads (the container is in the
/// batch record but not in `lastContainerStatuses`) holds the next batch until the daemon
/// recorded that container, as the status shows it now, checked for this batch.
#[test]
fn an_env_only_batch_waits_for_the_daemons_check_of_the_running_container() {
    let state = |checked: serde_json::Value| -> InPlaceUpdateState {
        serde_json::from_value(json!({
            "revision": "cs-2",
            "lastContainerStatuses": {"main": {"imageID": "sha-1"}},
            "nextContainerImages": {"late": "late:v2"},
            "containerBatchesRecord": [
                {"timestamp": "2026-01-01T00:00:00Z", "containers": ["main", "reader"]},
            ],
            "daemonEnvChecked": checked,
        }))
        .unwrap()
    };
    let statuses = [
        ContainerStatus {
            name: "main".into(),
            container_id: Some("containerd://m1".into()),
            ..ContainerStatus::default()
        },
        ContainerStatus {
            name: "reader".into(),
            container_id: Some("containerd://r2".into()),
            ..ContainerStatus::default()
        },
    ];
    assert_eq!(
        env_restarts_awaited(&state(serde_json::Value::Null), &statuses),
        ["reader"]
    );
    // Checked for an earlier batch, or another container than the one running now: still
    // awaited.
    let earlier = json!({"batch": 0, "containers": {"reader": "containerd://r2"}});
    assert_eq!(env_restarts_awaited(&state(earlier), &statuses), ["reader"]);
    let other = json!({"batch": 1, "containers": {"reader": "containerd://r1"}});
    assert_eq!(env_restarts_awaited(&state(other), &statuses), ["reader"]);
    let checked = json!({"batch": 1, "containers": {"reader": "containerd://r2"}});
    assert!(env_restarts_awaited(&state(checked), &statuses).is_empty());
}

/// `kubectl inplace rollout restart` with launch priorities: the restarts go in batches,
/// the highest priority first, and the state holds the rest as `nextContainerRestarts`.
#[test]
fn restarts_go_in_priority_batches() {
    let priorities = vec![
        ("sidecar".to_owned(), Some(10)),
        ("main".to_owned(), Some(1)),
        ("log".to_owned(), Some(1)),
    ];
    let spec = InPlaceUpdateGrace {
        revision: "cs-2".into(),
        restart_containers: vec!["log".into(), "main".into(), "sidecar".into()],
        ..InPlaceUpdateGrace::default()
    };
    let first = split(&spec, &priorities);
    assert_eq!(first.containers, ["sidecar"]);
    assert_eq!(first.now.restart_containers, ["sidecar"]);
    assert_eq!(first.next_restarts, ["log", "main"]);
    assert!(first.has_next());
    let mut state = InPlaceUpdateState {
        revision: "cs-2".into(),
        ..InPlaceUpdateState::default()
    };
    first.record_in(&mut state);
    assert!(state.has_next_batch());
    assert_eq!(state.next_container_restarts, ["log", "main"]);
    let ready = ContainerStatus {
        name: "sidecar".into(),
        ready: true,
        started: Some(true),
        state: Some(k8s_openapi::api::core::v1::ContainerState {
            running: Some(Default::default()),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(next_batch(&state, &[ready]), NextBatch::Due);
    let second = split(&remaining(&state), &priorities);
    assert_eq!(second.containers, ["log", "main"]);
    assert_eq!(second.now.restart_containers, ["log", "main"]);
    assert!(!second.has_next());
    second.record_in(&mut state);
    assert!(!state.has_next_batch());
    assert_eq!(next_batch::<ContainerStatus>(&state, &[]), NextBatch::None);
    // Without priorities every restart goes at once.
    let all = split(&spec, &[]);
    assert_eq!(all.containers, ["log", "main", "sidecar"]);
    assert!(!all.has_next());
}
