//! Image pre-download for in-place update as plan steps: [`predownload::decide`]'s
//! decision for the snapshot's ImagePullJobs, each write whole.
//!
//! - A new update revision: one [`Action::CreateImagePullJob`] per job, with the job's
//!   body (already in the snapshot: nothing to write), then one
//!   [`Action::LabelPreDownloadRevision`], the merge patch of the revision's label
//!   `apps.kruise.io/pre-predownload-created`. The steps run one after the other and the
//!   first failure ends them ([`crate::sending::run_of`]), so the label is sent only once
//!   every create succeeded: a revision left unlabelled is tried again.
//! - A revision skipped: the label `apps.kruise.io/image-predownload-ignored` alone, the
//!   reason in the action.
//! - Converged revisions: one [`Action::DeleteImagePullJob`] per job the CloneSet
//!   controls, each only of the UID the snapshot holds.
//!
//! None of these fails the CloneSet's reconcile (OpenKruise logs them): a failure asks
//! for the next reconcile soon instead ([`crate::sending::fails_reconcile`]).

use inplace_proto::imagepulljob::ImagePullJob;
use serde_json::json;

use super::action_write::{Patch, Target, Write};
use super::model::{Action, PlanContext};
use super::predownload::{self, Decision, Input};
use super::step::{Step, StepWrite, WriteError};

/// The pre-download steps of the plan over `ctx` (none where pre-download does not run,
/// [`crate::Snapshot::pre_download`]).
pub fn steps(ctx: &PlanContext<'_>) -> Vec<Step> {
    let Some(input) = ctx.snapshot.pre_download else {
        return Vec::new();
    };
    let mut decision = predownload::decide(&Input {
        cloneset: ctx.cloneset(),
        update_revision: &ctx.update_revision,
        current_revision: &ctx.current_revision,
        revisions: ctx.snapshot.revisions,
        jobs: input.jobs,
        options: ctx.options(),
    });
    if input.update_order && matches!(decision, Decision::Create { .. }) {
        predownload::with_node_order(&mut decision, &predownload::update_node_order(ctx));
    }
    of_decision(decision, input.jobs)
}

/// The steps of `decision`; `jobs` are the ImagePullJobs the CloneSet controls.
pub fn of_decision(decision: Decision, jobs: &[ImagePullJob]) -> Vec<Step> {
    let named = |name: &str| {
        jobs.iter()
            .find(|j| j.metadata.name.as_deref() == Some(name))
    };
    let label = predownload::revision_label(&decision).map(|(revision, key)| Step {
        action: Action::LabelPreDownloadRevision {
            revision: revision.to_owned(),
            ignored: match &decision {
                Decision::Ignore { reason, .. } => Some(reason.to_string()),
                _ => None,
            },
        },
        write: Ok(StepWrite::Object(Write::Patch(Patch {
            target: Target::ControllerRevision,
            name: revision.to_owned(),
            resource_version: None,
            patch: json!({"metadata": {"labels": {key: "true"}}}),
            stamp_conditions: false,
        }))),
    });
    let mut steps: Vec<Step> = match decision {
        Decision::Nothing(_) | Decision::Ignore { .. } => Vec::new(),
        Decision::Create { jobs: new, .. } => new
            .into_iter()
            .map(|job| {
                let name = job.metadata.name.clone().unwrap_or_default();
                let image = job.spec.image.clone();
                let write = match named(&name) {
                    Some(_) => StepWrite::Nothing {
                        why: "the ImagePullJob exists already",
                    },
                    None => StepWrite::Object(Write::CreateImagePullJob { job: Box::new(job) }),
                };
                Step {
                    action: Action::CreateImagePullJob { job: name, image },
                    write: Ok(write),
                }
            })
            .collect(),
        Decision::Delete { jobs: names } => names
            .into_iter()
            .map(|name| {
                let uid = named(&name).and_then(|j| j.metadata.uid.clone());
                let write = match uid {
                    Some(uid) => Ok(StepWrite::Object(Write::DeleteImagePullJob {
                        job: name.clone(),
                        uid,
                    })),
                    None => Err(WriteError::NotCached(format!("ImagePullJob {name}"))),
                };
                Step {
                    action: Action::DeleteImagePullJob { job: name },
                    write,
                }
            })
            .collect(),
    };
    steps.extend(label);
    steps
}

#[cfg(test)]
mod tests;
