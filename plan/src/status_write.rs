//! The CloneSet status write: a write of no action, sent after the steps whatever became
//! of them, through the `status` subresource; and the Warning events of the planner's
//! problems.
//!
//! The status is the planner's, plus the failure conditions of this reconcile:
//! `FailedScale` / `FailedUpdate` are True while the planner reports a problem of that
//! kind or an action of that kind failed, and are removed otherwise
//! ([`status::apply_problems`]). Nothing is written when the status is unchanged.
//!
//! We own the whole status object, so a JSON merge patch of `.status` is used, with every
//! field we no longer set explicitly nulled (the conditions list is written whole).
//!
//! The patch carries the resourceVersion of the CloneSet the status was decided from: a
//! merge patch with `metadata.resourceVersion` is conditional, so when the CloneSet changed
//! meanwhile (a spec edit, another writer of the status, the controller's watch lagging
//! behind) the API server answers 409 Conflict instead of writing a status decided from an
//! older object; the controller then decides again from the newer object (OpenKruise
//! re-reads the CloneSet and writes the status it had computed over it).
//!
//! The planner decides the write over the CloneSet as read; the controller moves it over
//! the status its own last write left while its cache does not show that write yet
//! ([`StatusWrite::over`]): a write over the cache's version would be refused for a change
//! that was its own.

use std::fmt::Display;

use inplace_proto::{CloneSet, CloneSetStatus, keys};
use k8s_openapi::jiff::Timestamp;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value, json};

use crate::model::PlanProblem;
use crate::outcome::Outcome;
use crate::sending::StepEvent;
use crate::status;

/// The status write of one reconcile, decided over the status read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusWrite {
    pub namespace: String,
    /// The CloneSet whose `status` subresource is written.
    pub name: String,
    /// The CloneSet's `metadata.generation`: the `observedGeneration` written.
    pub generation: Option<i64>,
    /// The status written over: the patch nulls the fields only it has, condition times
    /// are kept from it, and a status equal to it is not written.
    pub previous: Option<CloneSetStatus>,
    /// The precondition: the CloneSet version the status is decided from.
    pub resource_version: Option<String>,
    /// The status to write: the planner's; `None` for a CloneSet the planner cannot work
    /// with, whose status is left as it was (its `FailedScale` condition excepted).
    pub status: Option<CloneSetStatus>,
    /// The planner's problems: each a failure condition, and a Warning event when new.
    pub problems: Vec<PlanProblem>,
    /// When the write was decided: the time of new conditions in what
    /// `kubectl inplace plan` shows (the controller gives its write time).
    pub decided_at: Timestamp,
}

impl StatusWrite {
    /// The write of the planner's `status` and `problems` over `cs` as read, at `now`.
    pub fn planned(
        cs: &CloneSet,
        status: CloneSetStatus,
        problems: Vec<PlanProblem>,
        now: Timestamp,
    ) -> Self {
        Self {
            namespace: cs.metadata.namespace.clone().unwrap_or_default(),
            name: cs.metadata.name.clone().unwrap_or_default(),
            generation: cs.metadata.generation,
            previous: cs.status.clone(),
            resource_version: cs.metadata.resource_version.clone(),
            status: Some(status),
            problems,
            decided_at: now,
        }
    }

    /// The write reporting a CloneSet the planner cannot work with (`message` says why):
    /// `FailedScale` True with reason [`crate::validate::REASON`], the status observed at
    /// the CloneSet's generation and otherwise left as it was.
    pub fn invalid(cs: &CloneSet, message: &str, now: Timestamp) -> Self {
        let problem = PlanProblem {
            condition: keys::CONDITION_FAILED_SCALE,
            reason: crate::validate::REASON.into(),
            message: message.to_owned(),
        };
        Self {
            status: None,
            ..Self::planned(cs, CloneSetStatus::default(), vec![problem], now)
        }
    }

    /// This write moved over `previous`, the status the controller's own last write left at
    /// `resource_version`.
    pub fn over(&self, previous: CloneSetStatus, resource_version: String) -> Self {
        Self {
            previous: Some(previous),
            resource_version: Some(resource_version),
            ..self.clone()
        }
    }

    /// The problems of this reconcile: the planner's, then one per failed action of
    /// `outcome` (their condition is the action's kind, `FailedScale` or `FailedUpdate`;
    /// no reason; the error's text as message).
    pub fn failures<E: Display>(&self, outcome: &Outcome<E>) -> Vec<PlanProblem> {
        let mut out = self.problems.clone();
        out.extend(outcome.failures.iter().map(|f| PlanProblem {
            condition: f.kind.condition(),
            reason: String::new(),
            message: f.error.to_string(),
        }));
        out
    }

    /// The status written: the planner's (or the one read), with `observedGeneration`, and
    /// the failure conditions rebuilt from `failures` at `now` by the planner's own rule
    /// ([`status::apply_problems`]).
    pub fn status_with(&self, failures: &[PlanProblem], now: Timestamp) -> CloneSetStatus {
        let previous = self.previous.clone().unwrap_or_default();
        let mut status = match &self.status {
            Some(status) => status.clone(),
            None => CloneSetStatus {
                observed_generation: self.generation,
                ..previous.clone()
            },
        };
        if status.observed_generation.is_none() {
            status.observed_generation = self.generation;
        }
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

    /// The merge patch writing `status` over [`Self::previous`], conditional on
    /// [`Self::resource_version`]; `None` when `status` is the one read.
    pub fn body(&self, status: &CloneSetStatus) -> Result<Option<Value>, serde_json::Error> {
        if self.previous.as_ref() == Some(status) {
            return Ok(None);
        }
        let rv = self.resource_version.as_deref();
        merge_patch(self.previous.as_ref(), status, rv).map(Some)
    }

    /// The patch sent when no step fails, decided at [`Self::decided_at`] (what
    /// `kubectl inplace plan` shows); `None` when the status is unchanged.
    pub fn patch_when_no_step_fails(&self) -> Result<Option<Value>, serde_json::Error> {
        let failures = self.failures(&Outcome::<String>::default());
        self.body(&self.status_with(&failures, self.decided_at))
    }

    /// The Warning events of the planner's problems that are new: no failure condition
    /// read says the same (action failures had theirs when they happened). Regarding the
    /// CloneSet; the problem's reason (its condition when it has none), its condition as
    /// the action.
    pub fn events(&self) -> Vec<StepEvent> {
        let read = self
            .previous
            .as_ref()
            .map_or(&[][..], |s| &s.conditions[..]);
        self.problems
            .iter()
            .filter(|p| {
                !read.iter().any(|c| {
                    c.type_ == p.condition
                        && c.status == "True"
                        && c.message.as_deref() == Some(&p.message)
                })
            })
            .map(|p| StepEvent {
                regarding_pod: false,
                pod: None,
                warning: true,
                reason: if p.reason.is_empty() {
                    p.condition.to_owned()
                } else {
                    p.reason.clone()
                },
                action: p.condition,
                message: p.message.clone(),
            })
            .collect()
    }
}

/// A JSON merge patch turning `old` into `new`: `new` whole, with fields only `old` has set
/// to null; conditional on `resource_version` (the CloneSet's, as read) when given.
pub fn merge_patch(
    old: Option<&CloneSetStatus>,
    new: &CloneSetStatus,
    resource_version: Option<&str>,
) -> Result<Value, serde_json::Error> {
    let mut new_v = serde_json::to_value(new)?;
    let old_v = old
        .map(serde_json::to_value)
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

/// Shown as the write the controller sends when no action fails: the `status`
/// subresource of the CloneSet `name`, the precondition, the merge patch (`null`: the
/// status is unchanged, nothing is written) and the problems' `events`.
impl Serialize for StatusWrite {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Shown<'a> {
            target: &'static str,
            name: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            resource_version: Option<&'a str>,
            patch: Option<Value>,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            events: Vec<StepEvent>,
        }
        let patch = self.patch_when_no_step_fails();
        Shown {
            target: "cloneSetStatus",
            name: &self.name,
            resource_version: self.resource_version.as_deref(),
            patch: patch.map_err(serde::ser::Error::custom)?,
            events: self.events(),
        }
        .serialize(serializer)
    }
}

#[cfg(test)]
mod tests;
