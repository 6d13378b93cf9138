#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use inplace_proto::CloneSetCondition;
use serde_json::{Value, json};

use super::*;
use crate::fixtures::{Fixture, PodBuilder, cloneset, pod, t};

fn revisions() -> RevisionPlan {
    RevisionPlan {
        update_revision: "demo-new".into(),
        current_revision: "demo-old".into(),
        collision_count: 2,
        ..RevisionPlan::default()
    }
}

fn run(f: &Fixture) -> (CloneSetStatus, Option<Duration>) {
    compute(&f.ctx(), &revisions())
}

fn fixture(spec: Value, pods: Vec<PodBuilder>) -> Fixture {
    Fixture::new(cloneset(spec), pods)
}

fn progressing_of(status: &CloneSetStatus) -> Option<&CloneSetCondition> {
    status.conditions.iter().find(|c| c.type_ == "Progressing")
}

#[test]
fn counters_follow_the_documented_definitions() {
    let mut f = fixture(
        json!({"replicas": 6, "minReadySeconds": 30}),
        vec![
            pod("demo-a", "demo-new"),                     // updated, available
            pod("demo-b", "demo-new").ready_since(t(990)), // ready, not yet available
            pod("demo-c", "demo-old").lifecycle("PreparingNormal"), // ready, not Normal
            pod("demo-d", "demo-old").in_place_ready(false), // in-place update running
            pod("demo-e", "demo-new").not_ready(),         // updated, not ready
            pod("demo-f", "new").no_lifecycle(),           // short hash, no state: available
            pod("demo-g", "demo-new").terminating(),       // not counted
        ],
    );
    f.resolved.partition = 2;
    let (status, requeue) = run(&f);
    assert_eq!(status.replicas, 6);
    assert_eq!(status.ready_replicas, 4);
    assert_eq!(status.available_replicas, 2);
    assert_eq!(status.updated_replicas, 4);
    assert_eq!(status.updated_ready_replicas, 3);
    assert_eq!(status.updated_available_replicas, Some(2));
    assert_eq!(status.expected_updated_replicas, Some(4));
    assert_eq!(status.current_revision.as_deref(), Some("demo-old"));
    assert_eq!(status.update_revision.as_deref(), Some("demo-new"));
    assert_eq!(status.collision_count, Some(2));
    assert_eq!(status.label_selector.as_deref(), Some("app=demo"));
    assert_eq!(status.observed_generation, Some(3));
    // demo-b becomes available at t(990) + 30 s; now is t(1000).
    assert_eq!(requeue, Some(Duration::from_secs(20)));
}

#[test]
fn current_revision_advances_once_every_pod_is_updated_and_the_count_equals_replicas() {
    let all_updated_not_ready = fixture(
        json!({"replicas": 2}),
        vec![
            pod("demo-a", "demo-new"),
            pod("demo-b", "demo-new").not_ready(),
        ],
    );
    assert_eq!(
        run(&all_updated_not_ready).0.current_revision.as_deref(),
        Some("demo-new")
    );

    let one_old = fixture(
        json!({"replicas": 2}),
        vec![pod("demo-a", "demo-new"), pod("demo-b", "demo-old")],
    );
    assert_eq!(
        run(&one_old).0.current_revision.as_deref(),
        Some("demo-old")
    );

    let surge_left = fixture(
        json!({"replicas": 1}),
        vec![pod("demo-a", "demo-new"), pod("demo-b", "demo-new")],
    );
    assert_eq!(
        run(&surge_left).0.current_revision.as_deref(),
        Some("demo-old")
    );
}

fn cond(status: &str, reason: &str, updated: i64, transition: i64) -> CloneSetCondition {
    CloneSetCondition {
        type_: "Progressing".into(),
        status: status.into(),
        last_transition_time: Some(Time(t(transition))),
        last_update_time: Some(Time(t(updated))),
        reason: Some(reason.into()),
        message: Some(String::new()),
    }
}

fn with_old_status(mut f: Fixture, old: CloneSetStatus) -> Fixture {
    f.cloneset.status = Some(old);
    f
}

fn rolling(spec: Value) -> Fixture {
    let mut s = json!({"replicas": 2, "progressDeadlineSeconds": 600});
    crate::fixtures::merge(&mut s, spec);
    fixture(
        s,
        vec![pod("demo-a", "demo-new"), pod("demo-b", "demo-old")],
    )
}

fn old_status(updated: i32, condition: Option<CloneSetCondition>) -> CloneSetStatus {
    CloneSetStatus {
        replicas: 2,
        ready_replicas: 2,
        available_replicas: 2,
        updated_replicas: updated,
        updated_ready_replicas: updated,
        updated_available_replicas: Some(updated),
        expected_updated_replicas: Some(2),
        update_revision: Some("demo-new".into()),
        current_revision: Some("demo-old".into()),
        conditions: condition.into_iter().collect(),
        ..CloneSetStatus::default()
    }
}

#[test]
fn progressing_is_absent_without_a_deadline_or_with_max_int32() {
    for spec in [json!({}), json!({"progressDeadlineSeconds": 2147483647})] {
        let f = with_old_status(
            fixture(spec, vec![pod("demo-a", "demo-old")]),
            old_status(0, Some(cond("True", "CloneSetUpdated", 0, 0))),
        );
        assert_eq!(progressing_of(&run(&f).0), None);
    }
}

#[test]
fn a_fresh_rollout_is_progressing_with_a_requeue_one_second_after_the_deadline() {
    let f = rolling(json!({}));
    let (status, requeue) = run(&f);
    let c = progressing_of(&status).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("True", Some("CloneSetUpdated"))
    );
    assert_eq!(c.last_update_time, Some(Time(t(1000))));
    assert_eq!(requeue, Some(Duration::from_secs(601)));
}

#[test]
fn without_progress_the_clock_keeps_running_and_the_deadline_passes() {
    let within = with_old_status(
        rolling(json!({})),
        old_status(1, Some(cond("True", "CloneSetUpdated", 500, 500))),
    );
    let (status, requeue) = run(&within);
    let c = progressing_of(&status).unwrap();
    assert_eq!(c.last_update_time, Some(Time(t(500))));
    assert_eq!(requeue, Some(Duration::from_secs(101)));

    let past = with_old_status(
        rolling(json!({})),
        old_status(1, Some(cond("True", "CloneSetUpdated", 300, 300))),
    );
    let (status, _) = run(&past);
    let c = progressing_of(&status).unwrap();
    assert_eq!(c.status, "False");
    assert_eq!(c.reason.as_deref(), Some("ProgressDeadlineExceeded"));
    assert_eq!(c.last_transition_time, Some(Time(t(1000))));
}

#[test]
fn progress_moves_last_update_time_and_keeps_last_transition_time() {
    // One more pod updated since the last status.
    let f = with_old_status(
        rolling(json!({})),
        old_status(0, Some(cond("True", "CloneSetUpdated", 300, 100))),
    );
    let (status, _) = run(&f);
    let c = progressing_of(&status).unwrap();
    assert_eq!(c.reason.as_deref(), Some("CloneSetUpdated"));
    assert_eq!(c.last_update_time, Some(Time(t(1000))));
    assert_eq!(c.last_transition_time, Some(Time(t(100))));
}

#[test]
fn deadline_exceeded_is_sticky_until_a_new_revision_or_completion() {
    let exceeded = Some(cond("False", "ProgressDeadlineExceeded", 300, 300));
    // Progress after the deadline does not clear it.
    let f = with_old_status(rolling(json!({})), old_status(0, exceeded.clone()));
    let c = progressing_of(&run(&f).0).cloned().unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("False", Some("ProgressDeadlineExceeded"))
    );
    assert_eq!(c.last_transition_time, Some(Time(t(300))));

    // A new update revision starts a new clock.
    let mut old = old_status(0, exceeded.clone());
    old.update_revision = Some("demo-older".into());
    let f = with_old_status(rolling(json!({})), old);
    let c = progressing_of(&run(&f).0).cloned().unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("True", Some("CloneSetUpdated"))
    );
    assert_eq!(c.last_transition_time, Some(Time(t(1000))));

    // Completion makes it Available.
    let done = with_old_status(
        fixture(
            json!({"replicas": 1, "progressDeadlineSeconds": 600}),
            vec![pod("demo-a", "demo-new")],
        ),
        old_status(0, exceeded),
    );
    let c = progressing_of(&run(&done).0).cloned().unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("True", Some("CloneSetAvailable"))
    );
}

#[test]
fn paused_stops_the_clock_and_resuming_restarts_it() {
    let paused = with_old_status(
        rolling(json!({"updateStrategy": {"paused": true}})),
        old_status(1, Some(cond("True", "CloneSetUpdated", 0, 0))),
    );
    let (status, requeue) = run(&paused);
    let c = progressing_of(&status).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("True", Some("CloneSetPaused"))
    );
    assert_eq!(requeue, None);

    // Resumed long after: no deadline exceeded, the clock starts now.
    let resumed = with_old_status(
        rolling(json!({})),
        old_status(1, Some(cond("True", "CloneSetPaused", 0, 0))),
    );
    let (status, requeue) = run(&resumed);
    let c = progressing_of(&status).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("True", Some("CloneSetUpdated"))
    );
    assert_eq!(c.message.as_deref(), Some("CloneSet is resumed"));
    assert_eq!(c.last_update_time, Some(Time(t(1000))));
    assert_eq!(c.last_transition_time, Some(Time(t(0))));
    assert_eq!(requeue, Some(Duration::from_secs(601)));
}

#[test]
fn reaching_the_partition_with_available_pods_is_partition_available() {
    let mut f = rolling(json!({}));
    f.resolved.partition = 1;
    let (status, requeue) = run(&f);
    let c = progressing_of(&status).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("True", Some("ProgressPartitionAvailable"))
    );
    assert_eq!(requeue, None);
}

#[test]
fn a_completed_rollout_is_available_and_keeps_its_time_while_it_stays() {
    let f = with_old_status(
        fixture(
            json!({"replicas": 1, "progressDeadlineSeconds": 600}),
            vec![pod("demo-a", "demo-new")],
        ),
        old_status(1, Some(cond("True", "CloneSetAvailable", 700, 50))),
    );
    let c = progressing_of(&run(&f).0).cloned().unwrap();
    assert_eq!(c.reason.as_deref(), Some("CloneSetAvailable"));
    assert_eq!(c.last_update_time, Some(Time(t(700))));
    assert_eq!(c.last_transition_time, Some(Time(t(50))));
}

#[test]
fn problems_become_failed_scale_and_failed_update_conditions() {
    let f = fixture(json!({}), vec![pod("demo-a", "demo-old")]);
    let (mut status, _) = run(&f);
    let previous = CloneSetStatus {
        conditions: vec![CloneSetCondition {
            type_: "FailedUpdate".into(),
            status: "True".into(),
            last_transition_time: Some(Time(t(10))),
            ..CloneSetCondition::default()
        }],
        ..CloneSetStatus::default()
    };
    let problems = [
        PlanProblem {
            condition: "FailedUpdate",
            reason: "CannotUpdateInPlace".into(),
            message: "pods demo-a cannot be updated in place".into(),
        },
        PlanProblem {
            condition: "FailedScale",
            reason: "ScaleUpLimited".into(),
            message: "limited".into(),
        },
    ];
    apply_problems(&mut status, &problems, &previous, t(1000));
    let update = status
        .conditions
        .iter()
        .find(|c| c.type_ == "FailedUpdate")
        .unwrap();
    assert_eq!(update.status, "True");
    assert_eq!(update.last_transition_time, Some(Time(t(10))));
    assert_eq!(
        update.message.as_deref(),
        Some("pods demo-a cannot be updated in place")
    );
    let scale = status
        .conditions
        .iter()
        .find(|c| c.type_ == "FailedScale")
        .unwrap();
    assert_eq!(scale.last_transition_time, Some(Time(t(1000))));

    apply_problems(&mut status, &[], &previous, t(1000));
    assert!(
        status
            .conditions
            .iter()
            .all(|c| !c.type_.starts_with("Failed"))
    );
}
