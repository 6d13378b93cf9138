#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::*;
use crate::fixtures::PlanForms;
use crate::fixtures::{pod, t};
use crate::inplace_progress::in_place_progress;

const DEADLINE: Duration = Duration::from_secs(60);

/// A pod on `cs-2` whose container `main` was patched to `nginx:2` at t(100) (its old
/// container `containerd://main-1` recorded) and has not been restarted yet.
fn updating() -> crate::fixtures::PodBuilder {
    pod("p", "cs-2")
        .lifecycle("Updating")
        .in_place_ready(false)
        .spec_image("nginx:2")
        .in_place_state(&json!({
            "revision": "cs-2",
            "updateTimestamp": t(100).to_string(),
            "updateImages": true,
            "lastContainerStatuses": {"main": {"imageID": "sha-1", "containerID": "containerd://main-1"}},
        }))
}

fn judge(p: &crate::fixtures::PodBuilder, now: i64) -> StallCheck {
    let facts = p.clone().facts();
    let state = facts.in_place_state.clone().unwrap();
    check(&facts, &state, &in_place_progress(&facts), DEADLINE, t(now))
}

#[test]
fn within_the_deadline_the_pod_is_judged_again_when_it_runs_out() {
    assert_eq!(
        judge(&updating(), 130),
        StallCheck {
            report: None,
            recheck_after: Some(Duration::from_secs(30)),
        }
    );
}

#[test]
fn past_the_deadline_the_report_says_what_the_update_waits_for() {
    let c = judge(&updating(), 160);
    let (reason, message) = c.report.unwrap();
    assert_eq!(reason, keys::INPLACE_UPDATE_STALLED_REASON);
    assert_eq!(
        message,
        "in-place update to revision cs-2 not completed within 60s; waiting for container main to restart with the new spec"
    );
    // The message is the same later: a lasting stall is reported once.
    assert_eq!(judge(&updating(), 500).report.unwrap().1, message);
}

#[test]
fn a_failing_container_is_reported_at_once_with_the_kubelets_words() {
    let failing = updating().raw(|v| {
        v["status"]["containerStatuses"][0]["state"] = json!({"waiting": {
            "reason": "ImagePullBackOff", "message": "Back-off pulling image \"nginx:2\""}});
    });
    let c = judge(&failing, 101);
    assert_eq!(
        c.report,
        Some((
            keys::INPLACE_UPDATE_FAILED_REASON,
            "in-place update to revision cs-2 failed: container main: ImagePullBackOff: Back-off pulling image \"nginx:2\"".to_owned()
        ))
    );
    // A container merely being created is no failure.
    let creating = updating().raw(|v| {
        v["status"]["containerStatuses"][0]["state"] =
            json!({"waiting": {"reason": "ContainerCreating"}});
    });
    assert_eq!(judge(&creating, 101).report, None);
}

#[test]
fn completed_held_and_stateless_updates_are_never_reported() {
    let done = updating().raw(|v| {
        v["status"]["containerStatuses"][0]["containerID"] = json!("containerd://main-2");
    });
    assert_eq!(judge(&done, 1000), StallCheck::default());
    let held = updating().grace(&json!({"revision": "cs-2", "graceSeconds": 3600}));
    assert_eq!(judge(&held, 1000), StallCheck::default());
}

#[test]
fn a_later_batch_runs_its_deadline_from_the_batch_start_and_names_the_containers_awaited() {
    let batches = pod("p", "cs-2")
        .lifecycle("Updating")
        .in_place_ready(false)
        .raw(|v| {
            v["status"]["containerStatuses"][0]["containerID"] = json!("containerd://main-2");
            v["status"]["containerStatuses"][0]["ready"] = json!(false);
        })
        .in_place_state(&json!({
            "revision": "cs-2",
            "updateTimestamp": t(100).to_string(),
            "lastContainerStatuses": {"main": {"imageID": "sha-1", "containerID": "containerd://main-1"}},
            "nextContainerImages": {"sidecar": "busybox:2"},
            "preCheckBeforeNext": {"containersRequiredReady": ["main"]},
            "containerBatchesRecord": [{"timestamp": t(200).to_string(), "containers": ["main"]}],
        }));
    assert_eq!(
        judge(&batches, 230).recheck_after,
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        judge(&batches, 260).report.unwrap().1,
        "in-place update to revision cs-2 not completed within 60s; waiting for container main to be running and Ready before the next container batch"
    );
}

#[test]
fn waiting_for_the_daemon_names_the_node() {
    let env = pod("p", "cs-2")
        .lifecycle("Updating")
        .in_place_ready(false)
        .in_place_state(&json!({
            "revision": "cs-2",
            "updateTimestamp": t(100).to_string(),
            "updateEnvFromMetadata": true,
        }));
    assert_eq!(
        judge(&env, 200).report.unwrap().1,
        "in-place update to revision cs-2 not completed within 60s; waiting for the node daemon on node node-1 to restart the containers whose env reads changed labels or annotations"
    );
}

#[test]
fn the_deadline_is_progress_deadline_seconds_unless_unset_or_infinite() {
    assert_eq!(deadline(Some(30)), Duration::from_secs(30));
    assert_eq!(deadline(None), DEFAULT_IN_PLACE_DEADLINE);
    assert_eq!(deadline(Some(i32::MAX)), DEFAULT_IN_PLACE_DEADLINE);
    assert_eq!(deadline(Some(-1)), DEFAULT_IN_PLACE_DEADLINE);
}

/// Between batches, a container whose only change was a label its env reads waits for the
/// node daemon; the next batch is not applied and the wait is named.
#[test]
fn an_env_only_batch_waits_for_the_daemon_and_says_so() {
    // `main`'s batch changed only a label its env reads (it is not in lastContainerStatuses).
    let state = |checked: serde_json::Value| {
        json!({
            "revision": "cs-2",
            "updateTimestamp": t(100).to_string(),
            "updateEnvFromMetadata": true,
            "nextContainerImages": {"sidecar": "busybox:2"},
            "preCheckBeforeNext": {"containersRequiredReady": ["main"]},
            "containerBatchesRecord": [{"timestamp": t(100).to_string(), "containers": ["main"]}],
            "daemonEnvChecked": checked,
        })
    };
    let p = pod("p", "cs-2")
        .lifecycle("Updating")
        .in_place_ready(false)
        .in_place_state(&state(serde_json::Value::Null));
    assert_eq!(
        judge(&p, 200).report.unwrap().1,
        "in-place update to revision cs-2 not completed within 60s; waiting for the node daemon on node node-1 to restart container main (its env reads changed metadata) before the next container batch"
    );
    let f = crate::fixtures::Fixture::new(crate::fixtures::cloneset(json!({})), vec![p.clone()]);
    let refresh = crate::lifecycle::refresh(&f.ctx());
    assert!(
        !refresh
            .actions
            .iter()
            .any(|a| matches!(a, crate::Action::ApplyNextContainerBatch { .. })),
        "{:?}",
        refresh.actions
    );
    // Checked by the daemon for this batch, on the container running now: the next batch.
    let checked = p.in_place_state(&state(
        json!({"batch": 1, "containers": {"main": "containerd://main-1"}}),
    ));
    let f = crate::fixtures::Fixture::new(crate::fixtures::cloneset(json!({})), vec![checked]);
    assert!(
        crate::lifecycle::refresh(&f.ctx())
            .actions
            .iter()
            .any(|a| matches!(a, crate::Action::ApplyNextContainerBatch { .. }))
    );
}

proptest::proptest! {
    /// For any deadline and any time since the update: before the deadline the pod is
    /// judged again exactly when it runs out and nothing is reported; from the deadline on
    /// it is reported and not rechecked.
    #[test]
    fn reported_exactly_from_the_deadline_on(deadline_s in 0u64..100_000, elapsed in 0i64..200_000) {
        let p = updating();
        let facts = p.facts();
        let state = facts.in_place_state.clone().unwrap();
        let deadline = Duration::from_secs(deadline_s);
        let c = check(&facts, &state, &in_place_progress(&facts), deadline, t(100 + elapsed));
        let elapsed = elapsed.unsigned_abs();
        if elapsed < deadline_s {
            proptest::prop_assert_eq!(c.report, None);
            proptest::prop_assert_eq!(c.recheck_after, Some(Duration::from_secs(deadline_s - elapsed)));
        } else {
            proptest::prop_assert_eq!(c.report.map(|r| r.0), Some(keys::INPLACE_UPDATE_STALLED_REASON));
            proptest::prop_assert_eq!(c.recheck_after, None);
        }
    }
}
