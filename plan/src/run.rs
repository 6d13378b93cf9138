//! [`plan`]: one reconcile of one CloneSet, from a [`Snapshot`] to a [`Plan`] (the order is
//! described in the module doc of [`super`]).

use std::time::Duration;

use super::model::{PlanContext, PodFacts, Snapshot};
use super::output::Plan;
use super::revision::RevisionError;
use super::selector::{Selector, SelectorError};
use super::status_write::StatusWrite;
use super::{
    action_write, diffs, housekeeping, inplace_write, pod_conditions, predownload_steps, revision,
    scale, status, step, update,
};

/// Input the planner cannot work with. Everything else (odd percents, pods in odd states)
/// is planned around, never a panic.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// `spec.selector` is not a valid label selector.
    #[error("spec.selector: {0}")]
    Selector(#[from] SelectorError),
    /// `spec.template` does not have the shape of a PodTemplateSpec.
    #[error("spec.template: {0}")]
    Template(String),
    /// No ControllerRevision name could be found.
    #[error("revisions: {0}")]
    Revision(#[from] RevisionError),
}

fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What the writes of the steps of a plan over `ctx` are planned from
/// ([`step::plan_steps`]).
pub fn write_inputs<'c>(
    ctx: &'c PlanContext<'_>,
) -> (
    inplace_write::WriteInputs<'c>,
    action_write::ActionInputs<'c>,
) {
    let snapshot = &ctx.snapshot;
    (
        inplace_write::WriteInputs {
            cloneset: snapshot.cloneset,
            revisions: snapshot.revisions,
            update_revision: &ctx.update_revision,
            options: snapshot.options,
            now: snapshot.now,
        },
        action_write::ActionInputs {
            cloneset: snapshot.cloneset,
            pods: snapshot.pods,
            pvcs: snapshot.pvcs,
            revisions: snapshot.revisions,
            update_revision: &ctx.update_revision,
            short_hash: snapshot.options.short_hash,
        },
    )
}

/// Plans the next reconcile step of `snapshot.cloneset`.
pub fn plan(snapshot: Snapshot<'_>) -> Result<Plan, PlanError> {
    let cloneset = snapshot.cloneset;
    Selector::parse(&cloneset.spec.selector)?;
    cloneset
        .spec
        .template
        .typed()
        .map_err(|e| PlanError::Template(e.to_string()))?;

    let pods = PodFacts::extract_all(&snapshot);
    let revisions = revision::plan_revisions(&snapshot, &pods)?;
    let resolved = diffs::resolve(cloneset);
    let ctx = PlanContext {
        snapshot,
        pods,
        update_revision: revisions.update_revision.clone(),
        current_revision: revisions.current_revision.clone(),
        resolved,
    };
    // The scale step and the update step judge "updated" differently only with
    // `PreparingUpdateAsUpdate`; the diffs reported are those of the step that ran.
    let update_diffs = diffs::calculate(&ctx, false);
    let scale_diffs = if ctx.options().preparing_update_as_update {
        diffs::calculate(&ctx, true)
    } else {
        update_diffs
    };
    let mut reported = update_diffs;
    let unmatched_deletes = super::pods_to_delete::check(&ctx, scale_diffs.scale_down);

    let mut actions = housekeeping::pvc_cleanup(&ctx);
    let mut problems = Vec::new();
    let mut requeue_after = None;
    if cloneset.metadata.deletion_timestamp.is_none() {
        let scale_actions = scale::plan_scale(&ctx, &scale_diffs);
        if scale_actions.is_empty() {
            let step = update::plan_update(&ctx, &update_diffs);
            actions.extend(step.actions);
            problems.extend(step.problems);
            requeue_after = step.requeue_after;
        } else {
            reported = scale_diffs;
            actions.extend(scale_actions);
        }
        // The update step names the refused pods; a scale step (or an update step with no
        // pod to move) says why no pod is made from the update revision. Checked first, so
        // that the templates are compared again only when the update step did not.
        if !problems
            .iter()
            .any(|p| p.reason == scale::REFUSED_IN_PLACE_ONLY)
            && let Some(reason) = scale::inplace_only_refusal(&ctx)
        {
            problems.push(super::model::PlanProblem {
                condition: inplace_proto::keys::CONDITION_FAILED_UPDATE,
                reason: scale::REFUSED_IN_PLACE_ONLY.to_owned(),
                message: format!(
                    "update strategy is InPlaceOnly but the template cannot be updated in place: {reason}; no pod is created from it until it is reverted or the strategy changed"
                ),
            });
        }
    }
    if cloneset.metadata.deletion_timestamp.is_none()
        && !unmatched_deletes.unmatched.not_found.is_empty()
    {
        problems.push(super::model::PlanProblem {
            condition: inplace_proto::keys::CONDITION_FAILED_SCALE,
            reason: super::pods_to_delete::REASON_NOT_FOUND.to_owned(),
            message: super::pods_to_delete::message(
                &unmatched_deletes.unmatched.not_found,
                unmatched_deletes.held,
            ),
        });
    }
    let (mut status, status_requeue) = status::compute(&ctx, &revisions);
    let previous = cloneset.status.clone().unwrap_or_default();
    status::apply_problems(&mut status, &problems, &previous, ctx.now());
    actions.extend(housekeeping::prune_pods_to_delete(
        &ctx,
        &unmatched_deletes.kept(),
    ));
    actions.extend(housekeeping::backfill_template_hash(&ctx));
    let pod_conditions = pod_conditions::initial(&ctx.pods, &actions);
    let (in_place_inputs, action_inputs) = write_inputs(&ctx);
    // Pre-download first, as OpenKruise writes its ImagePullJobs before it scales or
    // updates; their failures end no later phase ([`crate::sending::fails_reconcile`]).
    let mut steps = predownload_steps::steps(&ctx);
    steps.extend(step::plan_steps(
        &in_place_inputs,
        &action_inputs,
        &ctx.pods,
        actions,
    ));

    let status_write = StatusWrite::planned(cloneset, status.clone(), problems.clone(), ctx.now());
    Ok(Plan {
        resolved,
        diffs: reported,
        revisions,
        steps,
        pod_conditions,
        status,
        problems,
        status_write,
        requeue_after: earliest(requeue_after, status_requeue),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use inplace_proto::{CloneSet, keys};
    use k8s_openapi::api::apps::v1::ControllerRevision;
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::cached::CachedPod;
    use crate::fixtures::PlanForms;
    use crate::fixtures::{PodBuilder, cloneset, pod, snapshot, t};
    use crate::model::{Action, PlanOptions, UpdateMethod};

    struct World {
        cs: CloneSet,
        pods: Vec<Arc<CachedPod>>,
        revisions: Vec<ControllerRevision>,
        options: PlanOptions,
    }

    impl World {
        fn new(spec: Value, pods: Vec<PodBuilder>) -> Self {
            Self {
                cs: cloneset(spec),
                pods: pods.into_iter().map(PodBuilder::cached).collect(),
                revisions: Vec::new(),
                options: PlanOptions::default(),
            }
        }

        fn plan(&self) -> Result<Plan, PlanError> {
            plan(snapshot(
                &self.cs,
                &self.pods,
                &self.revisions,
                &self.options,
            ))
        }
    }

    /// The revision name the planner gives `cs`'s template.
    fn revision_of(cs: &CloneSet) -> String {
        revision::new_revision(cs, 1, 0).metadata.name.unwrap()
    }

    #[test]
    fn new_cloneset_creates_its_first_revision_and_all_pods() {
        let w = World::new(json!({"replicas": 3}), vec![]);
        let p = w.plan().unwrap();
        let rev = revision_of(&w.cs);
        assert_eq!(p.revisions.update_revision, rev);
        assert!(p.revisions.create.is_some());
        let creates = p
            .actions()
            .iter()
            .filter(|a| matches!(a, Action::Create { revision, .. } if *revision == rev))
            .count();
        assert_eq!(creates, 3);
    }

    #[test]
    fn in_place_only_refusal_becomes_a_failed_update_condition_in_the_planned_status() {
        // Docs: "With InPlaceOnly policy, user cannot modify any fields other than the
        // fields that supported to in-place update" -> refused, reported, nothing done.
        let mut w = World::new(
            json!({"replicas": 2, "updateStrategy": {"type": "InPlaceOnly"},
                   "template": {"metadata": {"labels": {"app": "demo"}},
                                "spec": {"containers": [{"name": "main", "image": "nginx:1",
                                                         "env": [{"name": "A", "value": "2"}]}]}}}),
            vec![pod("demo-a", "demo-old"), pod("demo-b", "demo-old")],
        );
        w.revisions = vec![crate::fixtures::revision(
            "demo-old",
            json!({"metadata": {"labels": {"app": "demo"}},
                   "spec": {"containers": [{"name": "main", "image": "nginx:1",
                                            "env": [{"name": "A", "value": "1"}]}]}}),
        )];
        w.cs.status = Some(inplace_proto::CloneSetStatus {
            current_revision: Some("demo-old".into()),
            ..Default::default()
        });
        let p = w.plan().unwrap();
        assert!(
            !p.actions()
                .iter()
                .any(|a| matches!(a, Action::Update { .. }))
        );
        let failed: Vec<_> = p
            .status
            .conditions
            .iter()
            .filter(|c| c.type_ == keys::CONDITION_FAILED_UPDATE)
            .collect();
        assert_eq!(failed.len(), 1, "{:?}", p.status.conditions);
        assert_eq!(failed[0].status, "True");
        assert!(failed[0].message.as_deref().unwrap_or("").contains("env"));
    }

    #[test]
    fn one_reconcile_scales_or_updates_never_both() {
        // One pod missing and every pod on an old revision: only the creation happens.
        let mut w = World::new(
            json!({"replicas": 3, "updateStrategy": {"type": "InPlaceIfPossible"}}),
            vec![pod("demo-a", "demo-old"), pod("demo-b", "demo-old")],
        );
        w.revisions = vec![crate::fixtures::revision(
            "demo-old",
            json!({"metadata": {"labels": {"app": "demo"}},
                   "spec": {"containers": [{"name": "main", "image": "nginx:1"}]}}),
        )];
        w.cs.status = Some(inplace_proto::CloneSetStatus {
            current_revision: Some("demo-old".into()),
            ..Default::default()
        });
        let p = w.plan().unwrap();
        assert!(
            p.actions()
                .iter()
                .all(|a| matches!(a, Action::Create { .. }))
        );
        assert_eq!(p.actions().len(), 1);
        // Once the count is right, the update step runs.
        w.pods.push(pod("demo-c", "demo-old").cached());
        let p = w.plan().unwrap();
        assert!(!p.actions().is_empty());
        assert!(p.actions().iter().all(|a| matches!(
            a,
            Action::Update {
                method: UpdateMethod::InPlace,
                ..
            }
        )));
    }

    #[test]
    fn deleting_cloneset_plans_no_pod_changes() {
        let mut w = World::new(json!({"replicas": 3}), vec![]);
        w.cs.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(1)));
        let p = w.plan().unwrap();
        assert!(p.actions().is_empty());
    }

    #[test]
    fn invalid_selector_and_template_are_errors_not_panics() {
        let mut w = World::new(json!({}), vec![]);
        w.cs.spec.selector.match_labels = Some([("bad key!".to_owned(), "x".to_owned())].into());
        assert!(matches!(w.plan(), Err(PlanError::Selector(_))));

        let mut w = World::new(json!({}), vec![]);
        w.cs.spec
            .template
            .0
            .0
            .insert("spec".into(), json!({"containers": "not a list"}));
        assert!(matches!(w.plan(), Err(PlanError::Template(_))));
    }

    #[test]
    fn pods_to_delete_of_gone_pods_are_pruned_alongside_the_step() {
        let w = World::new(
            json!({"replicas": 1, "scaleStrategy": {"podsToDelete": ["demo-gone"]}}),
            vec![pod("demo-a", "x").label(keys::REVISION_LABEL, "")],
        );
        let p = w.plan().unwrap();
        assert_eq!(
            p.actions().last(),
            Some(&Action::PrunePodsToDelete {
                names: vec!["demo-gone".into()]
            })
        );
    }
}
