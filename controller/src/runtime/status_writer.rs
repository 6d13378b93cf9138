//! Writes the CloneSet status through the `status` subresource.
//!
//! The status is the planner's, plus the failure conditions of this reconcile:
//! `FailedScale` / `FailedUpdate` are True while the planner reports a problem of that
//! kind or an action of that kind failed, and are removed otherwise. A new or changed
//! failure also gets a Warning event. Nothing is written when the status is unchanged.
//!
//! We own the whole status object, so a JSON merge patch of `.status` is used, with every
//! field we no longer set explicitly nulled (the conditions list is written whole).
//!
//! The patch carries the resourceVersion of the CloneSet the status was decided from: a
//! merge patch with `metadata.resourceVersion` is conditional, so when the CloneSet changed
//! meanwhile (a spec edit, another writer of the status, our own watch lagging behind) the
//! API server answers 409 Conflict instead of writing a status decided from an older
//! object. The reconcile then fails with [`RetryClass::Stale`](crate::error::RetryClass)
//! and runs again, promptly and quietly, from the newer object (OpenKruise re-reads the
//! CloneSet and writes the status it had computed over it; here the status is decided
//! again).
//!
//! The version written over is the cache's, or the one our own last status write left
//! while the cache does not show that write yet ([`super::last_write`]): the cache often
//! lags behind our previous write, and a write over its version would be refused for a
//! change that was our own.

use std::borrow::Cow;

use inplace_proto::{CloneSet, CloneSetStatus, keys};
use k8s_openapi::jiff::Timestamp;
use kube::api::Patch;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Map, Value, json};
use tracing::debug;

use crate::error::Error;
use crate::events::Note;
use crate::metrics::CloneSetLabels;
use crate::plan::{Plan, PlanProblem, status};
use crate::runtime::apply::Outcome;
use crate::runtime::context::Context;

/// The problems of this reconcile: the planner's, then one per failed action (their
/// condition is the action's kind, `FailedScale` or `FailedUpdate`).
pub fn failures(plan: &Plan, outcome: &Outcome) -> Vec<PlanProblem> {
    let mut out = plan.problems.clone();
    out.extend(outcome.failures.iter().map(|f| PlanProblem {
        condition: f.kind.condition(),
        reason: String::new(),
        message: f.error.to_string(),
    }));
    out
}

/// The status to write: the planner's, with the failure conditions rebuilt from
/// `failures` by the planner's own rule ([`status::apply_problems`]).
pub fn desired_status(
    cs: &CloneSet,
    plan: &Plan,
    failures: &[PlanProblem],
    now: Timestamp,
) -> CloneSetStatus {
    let mut status = plan.status.clone();
    if status.observed_generation.is_none() {
        status.observed_generation = cs.metadata.generation;
    }
    let previous = cs.status.clone().unwrap_or_default();
    status::apply_problems(&mut status, failures, &previous, now);
    // An empty reason/message is left out, like the reference's `omitempty`: the v1.20
    // API server validates `"reason": ""` in a CRD status as null and refuses the whole
    // status write (a failed action, whose problem has no reason, then also failed the
    // status and stalled the CloneSet behind a backoff).
    for c in &mut status.conditions {
        if c.reason.as_deref() == Some("") {
            c.reason = None;
        }
        if c.message.as_deref() == Some("") {
            c.message = None;
        }
    }
    status
}

/// A JSON merge patch turning `old` into `new`: `new` whole, with fields only `old` has set
/// to null; conditional on `resource_version` (the CloneSet's, as read) when given.
pub fn merge_patch(
    old: Option<&CloneSetStatus>,
    new: &CloneSetStatus,
    resource_version: Option<&str>,
) -> Result<Value, Error> {
    let enc = |s: &CloneSetStatus| {
        serde_json::to_value(s).map_err(|source| Error::Encode {
            what: "CloneSet status".into(),
            source,
        })
    };
    let mut new_v = enc(new)?;
    let old_v = old
        .map(enc)
        .transpose()?
        .unwrap_or(Value::Object(Map::new()));
    if let (Some(n), Some(o)) = (new_v.as_object_mut(), old_v.as_object()) {
        for key in o.keys() {
            if !n.contains_key(key) {
                n.insert(key.clone(), Value::Null);
            }
        }
    }
    let mut body = json!({ "status": new_v });
    if let Some(rv) = resource_version {
        body["metadata"] = json!({ "resourceVersion": rv });
    }
    Ok(body)
}

/// `cs` as the status writer decides from it: with the status our own last write left
/// when the cache does not show that write yet; and the resourceVersion to write over.
fn based<'c>(ctx: &Context, cs: &'c CloneSet) -> (Cow<'c, CloneSet>, Option<String>) {
    let cached = cs.resource_version();
    let uid = cs.uid().unwrap_or_default();
    match ctx.status_writes.base(&uid, cached.as_deref()) {
        Some((status, rv)) => {
            let mut ours = cs.clone();
            ours.status = Some(status);
            (Cow::Owned(ours), Some(rv))
        }
        None => (Cow::Borrowed(cs), cached),
    }
}

/// Writes the status of `cs` after acting on `plan`.
pub async fn write(
    ctx: &Context,
    cs: &CloneSet,
    plan: &Plan,
    outcome: &Outcome,
) -> Result<(), Error> {
    let (based, rv) = based(ctx, cs);
    let cs = based.as_ref();
    let failures = failures(plan, outcome);
    let status = desired_status(cs, plan, &failures, Timestamp::now());
    let labels = CloneSetLabels::new(&cs.namespace().unwrap_or_default(), &cs.name_any());
    ctx.metrics.record_status(&labels, &status);

    // Planner problems get an event when they appear or change (action failures already
    // had theirs when they happened).
    let previous = cs
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or(&[]);
    for p in &plan.problems {
        let seen = previous.iter().any(|c| {
            c.type_ == p.condition && c.status == "True" && c.message.as_deref() == Some(&p.message)
        });
        if !seen {
            ctx.events.send(Note {
                regarding: cs.object_ref(&()),
                related: None,
                warning: true,
                reason: if p.reason.is_empty() {
                    p.condition.to_owned()
                } else {
                    p.reason.clone()
                },
                action: p.condition.to_owned(),
                message: p.message.clone(),
            });
            tracing::warn!(condition = p.condition, reason = %p.reason, message = %p.message, "CloneSet problem");
        }
    }

    if cs.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let body = merge_patch(cs.status.as_ref(), &status, rv.as_deref())?;
    let api: Api<CloneSet> =
        Api::namespaced(ctx.client.clone(), &cs.namespace().unwrap_or_default());
    let written = api
        .patch_status(
            &cs.name_any(),
            &ctx.settings.patch_params(),
            &Patch::Merge(&body),
        )
        .await
        .map_err(|e| Error::kube("write CloneSet status", e))?;
    if let (Some(uid), Some(left)) = (cs.uid(), written.resource_version()) {
        ctx.status_writes.record(
            &uid,
            cs.resource_version().as_deref(),
            written.status.unwrap_or_default(),
            left,
        );
    }
    debug!(
        replicas = status.replicas,
        ready = status.ready_replicas,
        updated = status.updated_replicas,
        "status written"
    );
    Ok(())
}

/// Reports a CloneSet the planner cannot work with: `FailedScale` True with the reason,
/// the rest of the status left as it was, and a Warning event when the message is new.
pub async fn write_invalid(ctx: &Context, cs: &CloneSet, message: &str) -> Result<(), Error> {
    let (based, _) = based(ctx, cs);
    let mut status = based.status.clone().unwrap_or_default();
    status.observed_generation = cs.metadata.generation;
    let plan = Plan {
        status,
        problems: vec![PlanProblem {
            condition: keys::CONDITION_FAILED_SCALE,
            reason: crate::plan::validate::REASON.into(),
            message: message.to_owned(),
        }],
        ..Plan::default()
    };
    write(ctx, cs, &plan, &Outcome::default()).await
}

#[cfg(test)]
mod tests {
    use super::*;
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

    #[test]
    fn problems_become_conditions_and_go_away() {
        let cs = cs_with(vec![]);
        let plan = Plan {
            problems: vec![PlanProblem {
                condition: keys::CONDITION_FAILED_UPDATE,
                reason: "InPlaceOnly".into(),
                message: "can not update in-place".into(),
            }],
            ..Plan::default()
        };
        let f = failures(&plan, &Outcome::default());
        let t = Timestamp::UNIX_EPOCH;
        let s = desired_status(&cs, &plan, &f, t);
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(s.conditions[0].type_, keys::CONDITION_FAILED_UPDATE);
        assert_eq!(s.conditions[0].status, "True");

        // An action failure has no reason: the field is left out, not written empty.
        let outcome = Outcome {
            attempted: 1,
            failures: vec![crate::runtime::apply::Failure {
                kind: crate::runtime::apply::FailureKind::Update,
                error: Error::NotCached("pod demo-a".into()),
            }],
            skipped: 0,
            conflicts_passed: 0,
            set_aside: Vec::new(),
        };
        let f_act = failures(&Plan::default(), &outcome);
        let s_act = desired_status(&cs, &Plan::default(), &f_act, t);
        assert_eq!(s_act.conditions.len(), 1);
        assert_eq!(s_act.conditions[0].reason, None);
        assert!(
            !serde_json::to_string(&s_act)
                .unwrap_or_default()
                .contains("\"reason\"")
        );

        // Same problem again: times kept, so the status is unchanged and not rewritten.
        let cs2 = cs_with(s.conditions.clone());
        let s2 = desired_status(&cs2, &plan, &f, Timestamp::from_second(100).unwrap_or(t));
        assert_eq!(s2.conditions, s.conditions);

        // Problem gone: the condition is removed.
        let s3 = desired_status(&cs2, &Plan::default(), &[], t);
        assert!(s3.conditions.is_empty());
    }

    #[test]
    fn merge_patch_nulls_dropped_fields() -> Result<(), Error> {
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
    fn the_status_write_is_conditional_on_the_version_read() -> Result<(), Error> {
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
}
