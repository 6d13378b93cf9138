#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use inplace_proto::{Lifecycle, LifecycleHook, LifecycleState};
use serde_json::json;

use super::*;
use crate::fixtures::PlanForms;
use crate::fixtures::{Fixture, cloneset, pod, t};
use inplace_proto::inplace_contract::image_with_default_tag;

fn hook(labels: &[(&str, &str)], finalizers: &[&str], mark: bool) -> LifecycleHook {
    LifecycleHook {
        labels_handler: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        finalizers_handler: finalizers.iter().map(|f| (*f).to_owned()).collect(),
        mark_pod_not_ready: mark,
    }
}

#[test]
fn hook_matches_a_pod_carrying_any_hook_label_with_the_same_value_or_any_finalizer() {
    let h = hook(
        &[("block", "true"), ("other", "x")],
        &["example.io/blocker"],
        false,
    );
    let cases = [
        (pod("p", "r").facts(), false, "nothing of the hook"),
        (
            pod("p", "r").label("block", "true").facts(),
            true,
            "one label",
        ),
        (
            pod("p", "r").label("block", "false").facts(),
            false,
            "label with another value",
        ),
        (
            pod("p", "r").finalizer("example.io/blocker").facts(),
            true,
            "the finalizer",
        ),
        (
            pod("p", "r").finalizer("example.io/other").facts(),
            false,
            "another finalizer",
        ),
    ];
    for (p, want, what) in cases {
        assert_eq!(hook_matches(Some(&h), &p), want, "{what}");
    }
    assert!(!hook_matches(
        None,
        &pod("p", "r").label("block", "true").facts()
    ));
}

#[test]
fn hook_all_present_needs_every_label_and_finalizer() {
    let h = hook(&[("block", "true")], &["example.io/blocker"], false);
    let partial = pod("p", "r").label("block", "true").facts();
    let all = pod("p", "r")
        .label("block", "true")
        .finalizer("example.io/blocker")
        .facts();
    assert!(!hook_all_present(Some(&h), &partial));
    assert!(hook_all_present(Some(&h), &all));
    assert!(
        !hook_all_present(None, &all),
        "no hook is never all present"
    );
}

fn with_lifecycle(l: Lifecycle) -> Option<Lifecycle> {
    Some(l)
}

#[test]
fn preparing_normal_becomes_normal_once_scheduled_without_a_pre_normal_hook() {
    let scheduled = pod("p", "r").lifecycle("PreparingNormal").facts();
    let unscheduled = pod("p", "r")
        .lifecycle("PreparingNormal")
        .unscheduled()
        .facts();
    assert!(preparing_normal_done(None, &scheduled));
    assert!(!preparing_normal_done(None, &unscheduled));
}

#[test]
fn preparing_normal_waits_until_the_pre_normal_hook_is_satisfied() {
    let l = with_lifecycle(Lifecycle {
        pre_normal: Some(hook(&[], &["example.io/unready-blocker"], false)),
        ..Lifecycle::default()
    });
    let without = pod("p", "r").lifecycle("PreparingNormal").facts();
    let with = pod("p", "r")
        .lifecycle("PreparingNormal")
        .finalizer("example.io/unready-blocker")
        .facts();
    assert!(!preparing_normal_done(l.as_ref(), &without));
    assert!(preparing_normal_done(l.as_ref(), &with));
}

#[test]
fn finished_in_place_update_goes_to_updated_while_the_hook_is_not_back_else_normal() {
    let l = with_lifecycle(Lifecycle {
        in_place_update: Some(hook(&[("ready-for-traffic", "true")], &[], false)),
        ..Lifecycle::default()
    });
    let hook_removed = pod("p", "r").facts();
    let hook_back = pod("p", "r").label("ready-for-traffic", "true").facts();
    assert_eq!(
        state_after_in_place(l.as_ref(), &hook_removed),
        LifecycleState::Updated
    );
    assert_eq!(
        state_after_in_place(l.as_ref(), &hook_back),
        LifecycleState::Normal
    );
    assert_eq!(
        state_after_in_place(None, &hook_removed),
        LifecycleState::Normal
    );
    assert!(!updated_done(l.as_ref(), &hook_removed));
    assert!(updated_done(l.as_ref(), &hook_back));
    assert!(updated_done(None, &hook_removed));
}

#[test]
fn mark_pod_not_ready_sets_the_key_entering_preparing_states_and_clears_it_after_update() {
    use LifecycleState::*;
    let marking = Lifecycle {
        pre_delete: Some(hook(&[], &["f"], true)),
        in_place_update: Some(hook(&[], &["f"], true)),
        pre_normal: None,
    };
    let not_marking = Lifecycle {
        pre_delete: Some(hook(&[], &["f"], false)),
        in_place_update: Some(hook(&[], &["f"], false)),
        pre_normal: None,
    };
    let cases = [
        (Some(Normal), PreparingDelete, Some(true)),
        (Some(Normal), PreparingUpdate, Some(true)),
        (Some(Updated), PreparingUpdate, Some(true)),
        (Some(Updating), Updated, Some(false)),
        (Some(Updating), Normal, Some(false)),
        (Some(PreparingUpdate), Normal, Some(false)),
        (Some(Updated), Normal, None),
        (Some(PreparingNormal), Normal, None),
        (None, Updating, None),
    ];
    for (from, to, want) in cases {
        assert_eq!(
            mark_not_ready(Some(&marking), from, to),
            want,
            "{from:?} -> {to:?}"
        );
        assert_eq!(
            mark_not_ready(Some(&not_marking), from, to),
            None,
            "{from:?} -> {to:?}"
        );
    }
    assert_eq!(mark_not_ready(None, Some(Normal), PreparingDelete), None);
}

fn state(revision: &str, image_id: &str) -> serde_json::Value {
    json!({
        "revision": revision,
        "updateTimestamp": t(900).to_string(),
        "lastContainerStatuses": {"main": {"imageID": image_id}},
        "updateImages": true,
    })
}

#[test]
fn in_place_update_completes_when_the_image_id_changed() {
    let p = pod("p", "demo-new")
        .spec_image("nginx:2")
        .status_image("nginx:2", "sha-2")
        .in_place_state(&state("demo-new", "sha-1"))
        .facts();
    assert_eq!(in_place_progress(&p), InPlaceProgress::Completed);
}

#[test]
fn in_place_update_with_the_same_image_id_completes_only_if_the_status_image_is_the_spec_image() {
    // Same image ID (the new tag points at the same image): the status image decides.
    let same_image = pod("p", "demo-new")
        .spec_image("nginx:2")
        .status_image("nginx:2", "sha-1")
        .in_place_state(&state("demo-new", "sha-1"))
        .facts();
    assert_eq!(in_place_progress(&same_image), InPlaceProgress::Completed);
    let old_image = pod("p", "demo-new")
        .spec_image("nginx:2")
        .status_image("nginx:1", "sha-1")
        .in_place_state(&state("demo-new", "sha-1"))
        .facts();
    assert!(matches!(
        in_place_progress(&old_image),
        InPlaceProgress::Waiting(_)
    ));
}

/// The kubelet on containerd reports a Docker Hub short name fully qualified: a retag of
/// `nginx` (same image ID) completes once the status names `docker.io/library/nginx:2`,
/// and `localhost:5000/app` keeps its port as a host, not a tag.
#[test]
fn the_status_image_is_compared_with_the_spec_image_normalised() {
    let progress = |spec: &str, status: &str| {
        in_place_progress(
            &pod("p", "demo-new")
                .spec_image(spec)
                .status_image(status, "sha-1")
                .in_place_state(&state("demo-new", "sha-1"))
                .facts(),
        )
    };
    for (spec, status, done) in [
        ("nginx:2", "docker.io/library/nginx:2", true),
        ("nginx", "docker.io/library/nginx:latest", true),
        ("library/nginx:2", "docker.io/library/nginx:2", true),
        ("docker.io/library/nginx:2", "nginx:2", true),
        ("nginx:2", "docker.io/library/nginx:1", false),
        ("nginx:2", "docker.io/other/nginx:2", false),
        ("localhost:5000/app", "localhost:5000/app:latest", true),
        ("localhost:5000/app:v2", "localhost:5000/app:v1", false),
    ] {
        let got = progress(spec, status);
        assert_eq!(
            got == InPlaceProgress::Completed,
            done,
            "spec {spec}, status {status}: {got:?}"
        );
    }
}

/// With the old container's id recorded, a new container is the restart, whatever image ID
/// or name the runtime reports: a retag (same image ID) whose status still names the old
/// tag completes once the kubelet started the new container, and not before even when the
/// status already names the new tag.
#[test]
fn with_the_old_container_id_recorded_a_new_container_id_completes_the_update() {
    let retag = |status_image: &str, container_id: &str| {
        pod("p", "demo-new")
            .spec_image("app:v1-retag")
            .status_image(status_image, "sha-1")
            .container_id(container_id)
            .in_place_state(&json!({
                "revision": "demo-new",
                "lastContainerStatuses": {"main": {"imageID": "sha-1", "containerID": "containerd://main-1"}},
            }))
            .facts()
    };
    assert_eq!(
        in_place_progress(&retag("app:v1", "containerd://main-2")),
        InPlaceProgress::Completed
    );
    assert!(matches!(
        in_place_progress(&retag("app:v1-retag", "containerd://main-1")),
        InPlaceProgress::Waiting(m) if m == "container main to restart with the new spec"
    ));
    // The kubelet's words are in the reason while it cannot start the new container.
    let pulling = pod("p", "demo-new")
        .raw(|v| {
            v["status"]["containerStatuses"][0]["state"] =
                json!({"waiting": {"reason": "ErrImagePull", "message": "not found"}});
        })
        .in_place_state(&json!({
            "revision": "demo-new",
            "lastContainerStatuses": {"main": {"imageID": "sha-1", "containerID": "containerd://main-1"}},
        }))
        .facts();
    assert!(matches!(
        in_place_progress(&pulling),
        InPlaceProgress::Waiting(m) if m.ends_with("(ErrImagePull: not found)")
    ));
}

#[test]
fn untagged_spec_images_compare_as_latest() {
    let p = pod("p", "demo-new")
        .spec_image("nginx")
        .status_image("nginx:latest", "sha-1")
        .in_place_state(&state("demo-new", "sha-1"))
        .facts();
    assert_eq!(in_place_progress(&p), InPlaceProgress::Completed);
    assert_eq!(image_with_default_tag("nginx"), "nginx:latest");
    assert_eq!(
        image_with_default_tag("reg:5000/nginx"),
        "reg:5000/nginx:latest"
    );
    assert_eq!(image_with_default_tag("nginx:1"), "nginx:1");
    assert_eq!(image_with_default_tag("nginx@sha256:ab"), "nginx@sha256:ab");
}

#[test]
fn in_place_update_is_not_complete_while_a_recorded_container_is_missing_from_the_status() {
    let p = pod("p", "demo-new")
        .status_image("nginx:2", "sha-2")
        .in_place_state(&json!({
            "revision": "demo-new",
            "lastContainerStatuses": {"main": {"imageID": "sha-1"}, "sidecar": {"imageID": "s-1"}},
        }))
        .facts();
    assert!(matches!(in_place_progress(&p), InPlaceProgress::Waiting(m) if m.contains("sidecar")));
}

#[test]
fn in_place_update_is_not_complete_during_grace_or_with_pending_batches_or_env_from_metadata() {
    let grace = pod("p", "demo-new")
        .in_place_state(&state("demo-new", "sha-0"))
        .grace(&json!({"revision": "demo-new", "graceSeconds": 30}))
        .facts();
    assert_eq!(in_place_progress(&grace), InPlaceProgress::GracePending);
    let batches = pod("p", "demo-new")
        .in_place_state(&json!({
            "revision": "demo-new",
            "nextContainerImages": {"sidecar": "busybox:2"},
        }))
        .facts();
    assert_eq!(
        in_place_progress(&batches),
        InPlaceProgress::NextBatchPending
    );
    let env = pod("p", "demo-new")
        .in_place_ready(false)
        .in_place_state(&json!({"revision": "demo-new", "updateEnvFromMetadata": true}))
        .facts();
    assert_eq!(in_place_progress(&env), InPlaceProgress::AwaitingDaemon);
    assert_eq!(
        in_place_progress(&pod("p", "r").facts()),
        InPlaceProgress::NoState
    );
}

#[test]
fn resize_completes_when_status_resources_equal_spec_by_value() {
    let with_resources = |status_cpu: &str| {
        pod("p", "demo-new")
            .in_place_state(&json!({"revision": "demo-new", "updateResources": true}))
            .raw(|v| {
                v["spec"]["containers"][0]["resources"] =
                    json!({"requests": {"cpu": "1", "memory": "1Gi"}});
                v["status"]["containerStatuses"][0]["resources"] =
                    json!({"requests": {"cpu": status_cpu, "memory": "1024Mi"}});
            })
            .facts()
    };
    assert_eq!(
        in_place_progress(&with_resources("1000m")),
        InPlaceProgress::Completed
    );
    assert!(matches!(
        in_place_progress(&with_resources("500m")),
        InPlaceProgress::Waiting(_)
    ));
}

fn fixture(spec: serde_json::Value, pods: Vec<crate::fixtures::PodBuilder>) -> Fixture {
    Fixture::new(cloneset(spec), pods)
}

#[test]
fn refresh_completes_an_in_place_update_whose_containers_run_the_new_image() {
    let f = fixture(
        json!({}),
        vec![
            pod("demo-a", "demo-new")
                .lifecycle("Updating")
                .spec_image("nginx:2")
                .status_image("nginx:2", "sha-2")
                .in_place_ready(false)
                .in_place_state(&state("demo-new", "sha-1")),
        ],
    );
    let r = refresh(&f.ctx());
    assert_eq!(
        r.actions,
        vec![
            Action::CompleteInPlaceUpdate {
                pod: "demo-a".into()
            },
            Action::Lifecycle {
                pod: "demo-a".into(),
                from: Some(LifecycleState::Updating),
                to: LifecycleState::Normal,
                mark_not_ready: None,
            },
        ]
    );
}

#[test]
fn refresh_does_not_complete_an_update_for_a_state_of_another_revision() {
    // The applier turned InPlaceUpdateReady False but has not patched the spec yet: the
    // state still describes the previous update.
    let f = fixture(
        json!({}),
        vec![
            pod("demo-a", "demo-old")
                .status_image("nginx:1", "sha-1")
                .in_place_ready(false)
                .in_place_state(&state("demo-older", "sha-0")),
        ],
    );
    assert_eq!(refresh(&f.ctx()).actions, vec![]);
}

#[test]
fn refresh_waits_while_the_containers_still_run_the_old_image() {
    let f = fixture(
        json!({}),
        vec![
            pod("demo-a", "demo-new")
                .lifecycle("Updating")
                .spec_image("nginx:2")
                .status_image("nginx:1", "sha-1")
                .in_place_ready(false)
                .in_place_state(&state("demo-new", "sha-1")),
        ],
    );
    let r = refresh(&f.ctx());
    assert_eq!(r.actions, vec![]);
    assert_eq!(r.problems, vec![]);
    // Updated at t(900), now t(1000): judged again when the default deadline runs out.
    assert_eq!(r.requeue_after, Some(Duration::from_secs(200)));
}

/// A stalled update is reported on the pod once (its condition then carries the report)
/// and on the CloneSet on every plan while it lasts.
#[test]
fn refresh_reports_an_update_past_its_deadline_once_on_the_pod_and_on_the_cloneset() {
    let stalled = || {
        pod("demo-a", "demo-new")
            .lifecycle("Updating")
            .spec_image("nginx:2")
            .status_image("nginx:1", "sha-1")
            .in_place_ready(false)
            .in_place_state(&state("demo-new", "sha-1"))
    };
    let spec = json!({"progressDeadlineSeconds": 60});
    let message = "in-place update to revision demo-new not completed within 60s; waiting for container main to restart with the new spec";
    let r = refresh(&fixture(spec.clone(), vec![stalled()]).ctx());
    assert_eq!(
        r.actions,
        vec![Action::ReportInPlaceStall {
            pod: "demo-a".into(),
            reason: keys::INPLACE_UPDATE_STALLED_REASON.into(),
            message: message.into(),
        }]
    );
    assert_eq!(
        r.problems,
        vec![PlanProblem {
            condition: keys::CONDITION_FAILED_UPDATE,
            reason: keys::INPLACE_UPDATE_STALLED_REASON.into(),
            message: format!("pod demo-a: {message}"),
        }]
    );
    let reported = stalled().raw(|v| {
        let c = v["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|c| c["type"] == keys::INPLACE_UPDATE_READY_CONDITION)
            .unwrap();
        c["reason"] = json!(keys::INPLACE_UPDATE_STALLED_REASON);
        c["message"] = json!(message);
    });
    let again = refresh(&fixture(spec, vec![reported]).ctx());
    assert_eq!(again.actions, vec![]);
    assert_eq!(again.problems, r.problems);
}

#[test]
fn the_cloneset_condition_names_a_few_stalled_pods_and_counts_the_rest() {
    let pods = (0..8)
        .map(|i| {
            pod(&format!("demo-{i}"), "demo-new")
                .lifecycle("Updating")
                .spec_image("nginx:2")
                .status_image("nginx:1", "sha-1")
                .in_place_ready(false)
                .in_place_state(&state("demo-new", "sha-1"))
        })
        .collect();
    let r = refresh(&fixture(json!({"progressDeadlineSeconds": 10}), pods).ctx());
    assert_eq!(r.problems.len(), 1);
    assert_eq!(r.problems[0].message.matches("pod demo-").count(), 5);
    assert!(r.problems[0].message.ends_with("; and 3 more pods"));
}

#[test]
fn refresh_moves_updating_pods_to_updated_while_the_in_place_hook_is_not_back() {
    let f = fixture(
        json!({"lifecycle": {"inPlaceUpdate": {"markPodNotReady": true,
            "finalizersHandler": ["example.io/unready-blocker"]}}}),
        vec![
            pod("demo-a", "demo-new")
                .lifecycle("Updating")
                .status_image("nginx:2", "sha-2")
                .in_place_state(&state("demo-new", "sha-1")),
        ],
    );
    assert_eq!(
        refresh(&f.ctx()).actions,
        vec![Action::Lifecycle {
            pod: "demo-a".into(),
            from: Some(LifecycleState::Updating),
            to: LifecycleState::Updated,
            mark_not_ready: Some(false),
        }]
    );
}

#[test]
fn refresh_moves_updated_pods_to_normal_once_the_hook_is_back() {
    let spec = json!({"lifecycle": {"inPlaceUpdate": {"finalizersHandler": ["example.io/b"]}}});
    let waiting = fixture(
        spec.clone(),
        vec![pod("demo-a", "demo-new").lifecycle("Updated")],
    );
    assert_eq!(refresh(&waiting.ctx()).actions, vec![]);
    let back = fixture(
        spec,
        vec![
            pod("demo-a", "demo-new")
                .lifecycle("Updated")
                .finalizer("example.io/b"),
        ],
    );
    assert_eq!(
        refresh(&back.ctx()).actions,
        vec![Action::Lifecycle {
            pod: "demo-a".into(),
            from: Some(LifecycleState::Updated),
            to: LifecycleState::Normal,
            mark_not_ready: None,
        }]
    );
}

#[test]
fn refresh_moves_a_preparing_update_pod_already_on_the_update_revision_out_of_the_update() {
    // Rolled back while waiting for the hook: the pod already runs the target.
    let f = fixture(
        json!({"lifecycle": {"inPlaceUpdate": {"labelsHandler": {"serving": "true"}}}}),
        vec![
            pod("demo-a", "demo-new").lifecycle("PreparingUpdate"),
            pod("demo-b", "demo-old").lifecycle("PreparingUpdate"),
        ],
    );
    assert_eq!(
        refresh(&f.ctx()).actions,
        vec![Action::Lifecycle {
            pod: "demo-a".into(),
            from: Some(LifecycleState::PreparingUpdate),
            to: LifecycleState::Updated,
            mark_not_ready: None,
        }]
    );
}

#[test]
fn refresh_moves_scheduled_preparing_normal_pods_to_normal_and_ignores_terminating_pods() {
    let f = fixture(
        json!({}),
        vec![
            pod("demo-a", "demo-new").lifecycle("PreparingNormal"),
            pod("demo-b", "demo-new")
                .lifecycle("PreparingNormal")
                .unscheduled(),
            pod("demo-c", "demo-new")
                .lifecycle("PreparingNormal")
                .terminating(),
        ],
    );
    let r = refresh(&f.ctx());
    assert_eq!(
        r.actions,
        vec![Action::Lifecycle {
            pod: "demo-a".into(),
            from: Some(LifecycleState::PreparingNormal),
            to: LifecycleState::Normal,
            mark_not_ready: None,
        }]
    );
}

fn graced(start: Option<i64>, lifecycle_ts: Option<i64>) -> crate::fixtures::PodBuilder {
    let mut st = json!({"revision": "demo-new"});
    if let Some(s) = start {
        st["updateTimestamp"] = json!(t(s).to_string());
    }
    let mut p = pod("demo-a", "demo-new")
        .lifecycle("Updating")
        .in_place_ready(false)
        .in_place_state(&st)
        .grace(&json!({"revision": "demo-new", "graceSeconds": 30, "containerImages": {"main": "nginx:2"}}));
    if let Some(ts) = lifecycle_ts {
        p = p.annotation("lifecycle.apps.kruise.io/timestamp", &t(ts).to_string());
    }
    p
}

#[test]
fn grace_period_holds_the_update_until_its_time_is_up_then_applies_it() {
    let now = t(1000);
    let cases = [
        (Some(980), None, GraceStatus::Wait(Duration::from_secs(10))),
        (Some(970), None, GraceStatus::Due),
        (None, Some(990), GraceStatus::Wait(Duration::from_secs(20))),
        (None, None, GraceStatus::Due),
    ];
    for (start, lifecycle_ts, want) in cases {
        let p = graced(start, lifecycle_ts).facts();
        assert_eq!(
            grace_status(&p, now),
            want,
            "start {start:?} lifecycle {lifecycle_ts:?}"
        );
    }
}

#[test]
fn grace_wait_rounds_up_to_whole_seconds_and_requeues() {
    let mut f = fixture(json!({}), vec![graced(Some(980), None)]);
    f.now = t(1000)
        .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(200))
        .unwrap();
    let r = refresh(&f.ctx());
    assert_eq!(r.actions, vec![]);
    assert_eq!(r.requeue_after, Some(Duration::from_secs(10)));
}

#[test]
fn refresh_applies_a_held_update_whose_grace_period_is_over() {
    let f = fixture(json!({}), vec![graced(Some(900), None)]);
    assert_eq!(
        refresh(&f.ctx()).actions,
        vec![Action::ApplyGracedUpdate {
            pod: "demo-a".into()
        }]
    );
}

#[test]
fn a_held_update_of_another_revision_is_due_so_the_act_layer_drops_it() {
    let p = graced(Some(999), None)
        .label("controller-revision-hash", "demo-other")
        .facts();
    assert_eq!(grace_status(&p, t(1000)), GraceStatus::Due);
}

#[test]
fn an_unreadable_grace_annotation_is_reported_not_applied() {
    let f = fixture(
        json!({}),
        vec![pod("demo-a", "demo-new").annotation("apps.kruise.io/inplace-update-grace", "{nope")],
    );
    let r = refresh(&f.ctx());
    assert_eq!(r.actions, vec![]);
    assert_eq!(r.problems.len(), 1);
    assert_eq!(r.problems[0].condition, "FailedUpdate");
}

/// Container launch priority (OpenKruise `pkg/util/inplaceupdate`): the next batch starts
/// when the previous batch's containers run their new image and are Ready; the update is not
/// complete before.
#[test]
fn refresh_starts_the_next_container_batch_once_the_previous_one_is_ready() {
    let batched = |ready: bool, status_image: &str, image_id: &str| {
        pod("demo-a", "demo-new")
            .lifecycle("Updating")
            .spec_image("nginx:2")
            .status_image(status_image, image_id)
            .raw(|p| p["status"]["containerStatuses"][0]["ready"] = json!(ready))
            .in_place_ready(false)
            .in_place_state(&json!({
                "revision": "demo-new",
                // Within the deadline: nothing is overdue yet.
                "updateTimestamp": t(900).to_string(),
                "lastContainerStatuses": {"main": {"imageID": "sha-1"}},
                "nextContainerImages": {"sidecar": "side:2"},
                "preCheckBeforeNext": {"containersRequiredReady": ["main"]},
            }))
    };
    let due = fixture(json!({}), vec![batched(true, "nginx:2", "sha-2")]);
    assert_eq!(
        refresh(&due.ctx()).actions,
        vec![Action::ApplyNextContainerBatch {
            pod: "demo-a".into()
        }]
    );
    // Not ready yet, or still the old container: wait.
    let not_ready = fixture(json!({}), vec![batched(false, "nginx:2", "sha-2")]);
    assert_eq!(refresh(&not_ready.ctx()).actions, vec![]);
    let old_container = fixture(json!({}), vec![batched(true, "nginx:1", "sha-1")]);
    assert_eq!(refresh(&old_container.ctx()).actions, vec![]);
}

#[test]
fn an_unreadable_state_on_a_pod_waiting_for_its_update_is_reported() {
    let f = fixture(
        json!({}),
        vec![
            pod("demo-a", "demo-new")
                .lifecycle("Updating")
                .in_place_ready(false)
                .annotation(keys::INPLACE_UPDATE_STATE_ANNOTATION, "{nope"),
        ],
    );
    let r = refresh(&f.ctx());
    assert!(
        r.actions.iter().any(|a| matches!(a,
            Action::ReportInPlaceStall { pod, reason, .. }
                if pod == "demo-a" && reason == keys::INPLACE_UPDATE_STATE_UNREADABLE_REASON
        )),
        "{:?}",
        r.actions
    );
    assert_eq!(r.problems.len(), 1);
    assert_eq!(
        r.problems[0].reason,
        keys::INPLACE_UPDATE_STATE_UNREADABLE_REASON
    );
}

#[test]
fn the_state_after_the_update_is_known_at_its_start_only_without_an_in_place_update_hook() {
    let in_place = |mark: bool| Lifecycle {
        in_place_update: Some(hook(&[("example.com/hook", "true")], &[], mark)),
        ..Lifecycle::default()
    };
    let pre_delete = Lifecycle {
        pre_delete: Some(hook(&[("example.com/hook", "true")], &[], true)),
        ..Lifecycle::default()
    };
    // (lifecycle, known at the start)
    let cases = [
        (None, Some(LifecycleState::Normal)),
        (Some(Lifecycle::default()), Some(LifecycleState::Normal)),
        (Some(pre_delete), Some(LifecycleState::Normal)),
        (Some(in_place(false)), None),
        (Some(in_place(true)), None),
    ];
    for (lifecycle, want) in cases {
        assert_eq!(
            state_on_completion_known_at_start(lifecycle.as_ref()),
            want,
            "{lifecycle:?}"
        );
        // What it names is what the refresh moves a completed pod to (the pod carrying
        // none of a hook's labels: the user's controller removed them).
        if let Some(state) = want {
            let p = pod("p", "demo-new").lifecycle("Updating").facts();
            assert_eq!(state_after_in_place(lifecycle.as_ref(), &p), state);
            assert_eq!(
                mark_not_ready(lifecycle.as_ref(), Some(LifecycleState::Updating), state),
                None
            );
        }
    }
}
