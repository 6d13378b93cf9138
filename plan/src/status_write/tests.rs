#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::outcome::Failure;
use crate::sending::FailureKind;
use inplace_proto::CloneSetCondition;

fn cs_with(conditions: Vec<CloneSetCondition>) -> CloneSet {
    let mut cs = CloneSet::new("demo", inplace_proto::CloneSetSpec::default());
    cs.metadata.generation = Some(3);
    cs.status = Some(CloneSetStatus {
        conditions,
        ..CloneSetStatus::default()
    });
    cs
}

/// The write of `problems` over `cs`, the planner's status left empty.
fn write_of(cs: &CloneSet, problems: Vec<PlanProblem>) -> StatusWrite {
    StatusWrite::planned(
        cs,
        CloneSetStatus::default(),
        problems,
        Timestamp::UNIX_EPOCH,
    )
}

fn in_place_only() -> PlanProblem {
    PlanProblem {
        condition: keys::CONDITION_FAILED_UPDATE,
        reason: "InPlaceOnly".into(),
        message: "can not update in-place".into(),
    }
}

#[test]
fn problems_become_conditions_and_go_away() {
    let cs = cs_with(vec![]);
    let write = write_of(&cs, vec![in_place_only()]);
    let f = write.failures(&Outcome::<String>::default());
    let t = Timestamp::UNIX_EPOCH;
    let s = write.status_with(&f, t);
    assert_eq!(s.observed_generation, Some(3));
    assert_eq!(s.conditions.len(), 1);
    assert_eq!(s.conditions[0].type_, keys::CONDITION_FAILED_UPDATE);
    assert_eq!(s.conditions[0].status, "True");

    // An action failure has no reason: the field is left out, not written empty.
    let outcome = Outcome {
        attempted: 1,
        failures: vec![Failure {
            kind: FailureKind::Update,
            error: "pod demo-a not found in the cache".to_owned(),
        }],
        skipped: 0,
        conflicts_passed: 0,
        set_aside: Vec::new(),
    };
    let no_problems = write_of(&cs, Vec::new());
    let f_act = no_problems.failures(&outcome);
    let s_act = no_problems.status_with(&f_act, t);
    assert_eq!(s_act.conditions.len(), 1);
    assert_eq!(s_act.conditions[0].reason, None);
    assert!(
        !serde_json::to_string(&s_act)
            .unwrap_or_default()
            .contains("\"reason\"")
    );

    // Same problem again: times kept, so the status is unchanged and not rewritten.
    let cs2 = cs_with(s.conditions.clone());
    let write2 = write_of(&cs2, vec![in_place_only()]);
    let s2 = write2.status_with(&f, Timestamp::from_second(100).unwrap_or(t));
    assert_eq!(s2.conditions, s.conditions);

    // Problem gone: the condition is removed.
    let s3 = write_of(&cs2, Vec::new()).status_with(&[], t);
    assert!(s3.conditions.is_empty());
}

#[test]
fn merge_patch_nulls_dropped_fields() -> Result<(), serde_json::Error> {
    let old = CloneSetStatus {
        current_revision: Some("a".into()),
        conditions: vec![CloneSetCondition {
            type_: "Progressing".into(),
            status: "True".into(),
            ..CloneSetCondition::default()
        }],
        ..CloneSetStatus::default()
    };
    let new = CloneSetStatus {
        replicas: 2,
        ..CloneSetStatus::default()
    };
    let p = merge_patch(Some(&old), &new, None)?;
    assert_eq!(p["status"]["replicas"], json!(2));
    assert_eq!(p["status"]["currentRevision"], Value::Null);
    assert_eq!(p["status"]["conditions"], Value::Null);
    assert_eq!(p.get("metadata"), None);
    Ok(())
}

#[test]
fn the_status_write_is_conditional_on_the_version_read() -> Result<(), serde_json::Error> {
    let new = CloneSetStatus {
        replicas: 2,
        ..CloneSetStatus::default()
    };
    let p = merge_patch(None, &new, Some("4711"))?;
    assert_eq!(p["metadata"], json!({"resourceVersion": "4711"}));
    assert_eq!(p["status"]["replicas"], json!(2));
    // nothing else of the metadata is written
    assert_eq!(p.as_object().map(|o| o.len()), Some(2));
    Ok(())
}

#[test]
fn the_body_is_the_patch_over_the_status_read_and_none_when_unchanged() {
    let mut cs = cs_with(vec![]);
    cs.metadata.resource_version = Some("17".into());
    let planned = CloneSetStatus {
        replicas: 2,
        observed_generation: Some(3),
        ..CloneSetStatus::default()
    };
    let write = StatusWrite::planned(&cs, planned.clone(), Vec::new(), Timestamp::UNIX_EPOCH);
    let status = write.status_with(&[], Timestamp::UNIX_EPOCH);
    assert_eq!(status, planned);
    let body = write
        .body(&status)
        .unwrap()
        .expect("a changed status is written");
    assert_eq!(
        body,
        merge_patch(cs.status.as_ref(), &planned, Some("17")).unwrap()
    );

    // Over a status equal to it: nothing to write.
    let same = write.over(planned.clone(), "18".into());
    assert_eq!(same.body(&status).unwrap(), None);
}

#[test]
fn over_moves_the_base_and_the_precondition_only() {
    let mut cs = cs_with(vec![]);
    cs.metadata.resource_version = Some("17".into());
    let write = write_of(&cs, vec![in_place_only()]);
    let ours = CloneSetStatus {
        replicas: 5,
        ..CloneSetStatus::default()
    };
    let moved = write.over(ours.clone(), "18".into());
    assert_eq!(moved.previous, Some(ours));
    assert_eq!(moved.resource_version.as_deref(), Some("18"));
    assert_eq!(moved.status, write.status);
    assert_eq!(moved.problems, write.problems);
    assert_eq!(moved.generation, write.generation);
}

#[test]
fn an_invalid_cloneset_keeps_its_status_with_failed_scale() {
    let mut cs = cs_with(vec![]);
    cs.metadata.generation = Some(7);
    if let Some(s) = cs.status.as_mut() {
        s.replicas = 4;
        s.observed_generation = Some(6);
    }
    let write = StatusWrite::invalid(&cs, "selector does not match", Timestamp::UNIX_EPOCH);
    let failures = write.failures(&Outcome::<String>::default());
    let s = write.status_with(&failures, Timestamp::UNIX_EPOCH);
    assert_eq!(s.replicas, 4);
    assert_eq!(s.observed_generation, Some(7));
    assert_eq!(s.conditions.len(), 1);
    assert_eq!(s.conditions[0].type_, keys::CONDITION_FAILED_SCALE);
    assert_eq!(
        s.conditions[0].reason.as_deref(),
        Some(crate::validate::REASON)
    );
    assert_eq!(
        s.conditions[0].message.as_deref(),
        Some("selector does not match")
    );

    // Moved over our own last write: that status is the one kept.
    let ours = CloneSetStatus {
        replicas: 9,
        ..CloneSetStatus::default()
    };
    let s = write
        .over(ours, "8".into())
        .status_with(&failures, Timestamp::UNIX_EPOCH);
    assert_eq!(s.replicas, 9);
    assert_eq!(s.observed_generation, Some(7));
}

#[test]
fn a_problem_gets_an_event_until_a_condition_read_says_the_same() {
    let cs = cs_with(vec![]);
    let nameless = PlanProblem {
        condition: keys::CONDITION_FAILED_SCALE,
        reason: String::new(),
        message: "pods not found".into(),
    };
    let write = write_of(&cs, vec![in_place_only(), nameless]);
    let events = write.events();
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0],
        StepEvent {
            regarding_pod: false,
            pod: None,
            warning: true,
            reason: "InPlaceOnly".into(),
            action: keys::CONDITION_FAILED_UPDATE,
            message: "can not update in-place".into(),
        }
    );
    // No reason: the condition is the event's reason.
    assert_eq!(events[1].reason, keys::CONDITION_FAILED_SCALE);

    // Once written, the same problem is no new event; a changed message is.
    let failures = write.failures(&Outcome::<String>::default());
    let written = write.status_with(&failures, Timestamp::UNIX_EPOCH);
    let again = write.over(written.clone(), "2".into());
    assert!(again.events().is_empty());
    let changed = PlanProblem {
        message: "can not update in-place: image".into(),
        ..in_place_only()
    };
    let next = StatusWrite {
        problems: vec![changed],
        ..again
    };
    assert_eq!(next.events().len(), 1);
    // A condition read that is False is no report of the problem.
    let mut read_false = written;
    for c in &mut read_false.conditions {
        c.status = "False".into();
    }
    assert_eq!(write.over(read_false, "3".into()).events().len(), 2);
}

#[test]
fn shown_as_the_write_sent_when_no_action_fails() {
    let mut cs = cs_with(vec![]);
    cs.metadata.namespace = Some("ns".into());
    cs.metadata.resource_version = Some("17".into());
    let write = write_of(&cs, vec![in_place_only()]);
    let shown = serde_json::to_value(&write).unwrap();
    let failures = write.failures(&Outcome::<String>::default());
    let status = write.status_with(&failures, Timestamp::UNIX_EPOCH);
    assert_eq!(shown["target"], "cloneSetStatus");
    assert_eq!(shown["name"], "demo");
    assert_eq!(shown["resourceVersion"], "17");
    assert_eq!(shown["patch"], write.body(&status).unwrap().unwrap());
    assert_eq!(shown["events"][0]["reason"], "InPlaceOnly");

    // Unchanged: the patch is null, and no event.
    let quiet = write_of(&cs_with(vec![]), Vec::new());
    let quiet = quiet.over(quiet.status_with(&[], Timestamp::UNIX_EPOCH), "1".into());
    let shown = serde_json::to_value(&quiet).unwrap();
    assert_eq!(shown["patch"], Value::Null);
    assert_eq!(shown.get("events"), None);
}
