#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The pre-download steps of whole plans: what the snapshot holds, what is written, and
//! what is said about each step once sent.

use std::sync::Arc;

use inplace_proto::{CloneSet, CloneSetStatus, keys};
use k8s_openapi::api::apps::v1::ControllerRevision;
use serde_json::{Value, json};

use super::*;
use crate::action_write::Target;
use crate::cached::CachedPod;
use crate::fixtures::{PlanForms, cloneset, pod, revision, snapshot};
use crate::model::{PlanOptions, PreDownloadInput, Snapshot};
use crate::sending::{self, PhaseRun, Sent};

const OLD: &str = "demo-old";

/// Four pods of `demo-old` (nginx:1) on nodes n-a … n-d, the template at nginx:2,
/// InPlaceIfPossible with partition 1, the status on the update revision.
struct World {
    cs: CloneSet,
    pods: Vec<Arc<CachedPod>>,
    revisions: Vec<ControllerRevision>,
    jobs: Vec<ImagePullJob>,
    options: PlanOptions,
    update_order: bool,
}

impl World {
    fn new(spec: Value) -> Self {
        let mut base = json!({"replicas": 4,
            "updateStrategy": {"type": "InPlaceIfPossible", "partition": 1}});
        crate::fixtures::merge(&mut base, spec);
        let mut cs = cloneset(base);
        let update = crate::revision::new_revision(&cs, 2, 0);
        cs.status = Some(CloneSetStatus {
            current_revision: Some(OLD.into()),
            update_revision: update.metadata.name.clone(),
            ..Default::default()
        });
        let old = revision(
            OLD,
            json!({"metadata": {"labels": {"app": "demo"}},
                   "spec": {"containers": [{"name": "main", "image": "nginx:1"}]}}),
        );
        let pods = ["a", "b", "c", "d"]
            .iter()
            .map(|n| {
                let node = format!("n-{n}");
                pod(&format!("demo-{n}"), OLD)
                    .raw(move |v| v["spec"]["nodeName"] = json!(node))
                    .cached()
            })
            .collect();
        Self {
            cs,
            pods,
            revisions: vec![old, update],
            jobs: Vec::new(),
            options: PlanOptions {
                pre_download_image: true,
                ..PlanOptions::default()
            },
            update_order: true,
        }
    }

    fn update_revision(&self) -> String {
        self.revisions[1].metadata.name.clone().unwrap()
    }

    fn label_update(&mut self, key: &str) {
        let labels = self.revisions[1].metadata.labels.get_or_insert_default();
        labels.insert(key.into(), "true".into());
    }

    /// The plan's steps, with pre-download running (`on`) or not.
    fn steps(&self, on: bool) -> Vec<Step> {
        let plan = crate::plan(Snapshot {
            pre_download: on.then_some(PreDownloadInput {
                jobs: &self.jobs,
                update_order: self.update_order,
            }),
            ..snapshot(&self.cs, &self.pods, &self.revisions, &self.options)
        })
        .unwrap();
        plan.steps
    }

    /// The steps of pre-download among the plan's (they come first).
    fn pre_download_steps(&self, on: bool) -> Vec<Step> {
        let steps = self.steps(on);
        let n = steps
            .iter()
            .take_while(|s| sending::phase_of(&s.action) == "predownload")
            .count();
        assert!(
            steps[n..]
                .iter()
                .all(|s| sending::phase_of(&s.action) != "predownload"),
            "pre-download steps come first: {steps:?}"
        );
        steps[..n].to_vec()
    }
}

/// An ImagePullJob `name` controlled by the CloneSet.
fn job(name: &str) -> ImagePullJob {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "ImagePullJob",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                "name": "demo", "uid": "cs-uid", "controller": true}]},
        "spec": {"image": "nginx:2"},
    }))
    .unwrap()
}

fn label_patch(step: &Step) -> (&str, &Value) {
    match &step.write {
        Ok(StepWrite::Object(Write::Patch(p))) => {
            assert_eq!(p.target, Target::ControllerRevision);
            assert_eq!(p.resource_version, None);
            (p.name.as_str(), &p.patch)
        }
        other => panic!("not a revision patch: {other:?}"),
    }
}

#[test]
fn no_step_without_pre_download_or_with_the_gate_off() {
    let mut w = World::new(json!({}));
    w.jobs = vec![job("demo-old-main")];
    // Not running (gate off, ImagePullJobs not served, cache not synced): nothing.
    assert!(w.pre_download_steps(false).is_empty());
    // Running but the gate off (the plugin without --pre-download-image): nothing,
    // neither jobs nor their cleanup once the revisions converged.
    w.options.pre_download_image = false;
    assert!(w.pre_download_steps(true).is_empty());
    let update = w.update_revision();
    w.cs.status.as_mut().unwrap().current_revision = Some(update);
    assert!(w.pre_download_steps(true).is_empty());
    // The pods' own steps are planned as ever.
    assert!(!w.steps(true).is_empty());
}

#[test]
fn a_new_update_revision_creates_its_jobs_then_labels_it_created() {
    let w = World::new(json!({}));
    let update = w.update_revision();
    let steps = w.pre_download_steps(true);
    let job_name = format!("{update}-main");
    assert_eq!(
        steps.iter().map(|s| s.action.clone()).collect::<Vec<_>>(),
        vec![
            Action::CreateImagePullJob {
                job: job_name.clone(),
                image: "nginx:2".into()
            },
            Action::LabelPreDownloadRevision {
                revision: update.clone(),
                ignored: None
            },
        ]
    );
    // The create holds the job's body: the decision's, with the pods' nodes.
    let Ok(StepWrite::Object(Write::CreateImagePullJob { job })) = &steps[0].write else {
        panic!("not a create: {:?}", steps[0].write);
    };
    assert_eq!(job.metadata.name.as_deref(), Some(job_name.as_str()));
    assert_eq!(job.spec.image, "nginx:2");
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        ("cs-uid", Some(true))
    );
    // Every old pod's node, in the planner's update order (the order itself is
    // `predownload::update_node_order`'s, tested there).
    let order = job.metadata.annotations.as_ref().unwrap();
    let mut nodes: Vec<&str> = order[keys::PREDOWNLOAD_NODE_ORDER_ANNOTATION]
        .split(',')
        .collect();
    nodes.sort_unstable();
    assert_eq!(nodes, ["n-a", "n-b", "n-c", "n-d"]);

    let (name, patch) = label_patch(&steps[1]);
    assert_eq!(name, update);
    assert_eq!(
        patch,
        &json!({"metadata": {"labels": {keys::PRE_PREDOWNLOAD_CREATED_LABEL: "true"}}})
    );
    // One after the other, so that the label follows every create that succeeded.
    assert_eq!(sending::run_of(&steps[0].action), PhaseRun::Sequential);
    assert_eq!(sending::phases(&steps).len(), 1);
}

#[test]
fn jobs_without_update_order_and_jobs_that_exist_already() {
    let mut w = World::new(json!({}));
    w.update_order = false;
    let update = w.update_revision();
    w.jobs = vec![job(&format!("{update}-main"))];
    let steps = w.pre_download_steps(true);
    assert_eq!(steps.len(), 2, "{steps:?}");
    // In the cache already: nothing to write, and the label still follows.
    assert_eq!(
        steps[0].write,
        Ok(StepWrite::Nothing {
            why: "the ImagePullJob exists already"
        })
    );
    assert!(matches!(
        steps[1].action,
        Action::LabelPreDownloadRevision { ignored: None, .. }
    ));
    // A job made without the update order carries none.
    w.jobs.clear();
    let steps = w.pre_download_steps(true);
    let Ok(StepWrite::Object(Write::CreateImagePullJob { job })) = &steps[0].write else {
        panic!("not a create: {:?}", steps[0].write);
    };
    assert_eq!(job.metadata.annotations, None);
}

#[test]
fn skip_reasons_label_the_revision_ignored_and_create_nothing() {
    // (spec merged over the base, reason shown)
    let cases = [
        (json!({"replicas": 3}), "replicas 3 <= 3"),
        (
            json!({"updateStrategy": {"type": "ReCreate"}}),
            "update type is ReCreate",
        ),
        (
            json!({"updateStrategy": {"partition": 0, "maxUnavailable": "100%"}}),
            "partition 0 and maxUnavailable 4 >= replicas 4",
        ),
    ];
    for (spec, reason) in cases {
        let w = World::new(spec.clone());
        let update = w.update_revision();
        let steps = w.pre_download_steps(true);
        assert_eq!(
            steps.iter().map(|s| s.action.clone()).collect::<Vec<_>>(),
            vec![Action::LabelPreDownloadRevision {
                revision: update.clone(),
                ignored: Some(reason.into())
            }],
            "{spec}"
        );
        let (name, patch) = label_patch(&steps[0]);
        assert_eq!(name, update);
        assert_eq!(
            patch,
            &json!({"metadata": {"labels": {keys::IMAGE_PREDOWNLOAD_IGNORED_LABEL: "true"}}})
        );
    }
}

#[test]
fn a_revision_handled_once_plans_nothing_more() {
    for key in [
        keys::PRE_PREDOWNLOAD_CREATED_LABEL,
        keys::IMAGE_PREDOWNLOAD_IGNORED_LABEL,
    ] {
        let mut w = World::new(json!({}));
        w.label_update(key);
        assert!(w.pre_download_steps(true).is_empty(), "{key}");
    }
}

#[test]
fn converged_revisions_delete_the_jobs_each_only_of_its_uid() {
    let mut w = World::new(json!({}));
    w.label_update(keys::PRE_PREDOWNLOAD_CREATED_LABEL);
    let update = w.update_revision();
    w.cs.status.as_mut().unwrap().current_revision = Some(update);
    w.jobs = vec![job("demo-x-main"), job("demo-x-side")];
    let steps = w.pre_download_steps(true);
    let writes: Vec<(&Action, &Result<StepWrite, WriteError>)> =
        steps.iter().map(|s| (&s.action, &s.write)).collect();
    assert_eq!(
        writes,
        vec![
            (
                &Action::DeleteImagePullJob {
                    job: "demo-x-main".into()
                },
                &Ok(StepWrite::Object(Write::DeleteImagePullJob {
                    job: "demo-x-main".into(),
                    uid: "uid-demo-x-main".into()
                }))
            ),
            (
                &Action::DeleteImagePullJob {
                    job: "demo-x-side".into()
                },
                &Ok(StepWrite::Object(Write::DeleteImagePullJob {
                    job: "demo-x-side".into(),
                    uid: "uid-demo-x-side".into()
                }))
            ),
        ]
    );
    // Nothing left: nothing planned.
    w.jobs.clear();
    assert!(w.pre_download_steps(true).is_empty());
}

#[test]
fn a_job_named_by_the_decision_but_not_held_is_a_write_error() {
    let steps = of_decision(
        Decision::Delete {
            jobs: vec!["gone".into()],
        },
        &[],
    );
    assert_eq!(
        steps[0].write,
        Err(WriteError::NotCached("ImagePullJob gone".into()))
    );
}

#[test]
fn pre_download_failures_are_set_aside_and_creates_are_reported_as_the_reference_does() {
    let w = World::new(json!({}));
    let update = w.update_revision();
    let steps = w.pre_download_steps(true);
    for s in &steps {
        assert!(!sending::fails_reconcile(&s.action), "{:?}", s.action);
    }
    assert!(sending::fails_reconcile(&Action::DeletePvc {
        pvc: "p".into()
    }));
    assert_eq!(sending::RETRY_SET_ASIDE, std::time::Duration::from_secs(5));

    let job = format!("{update}-main");
    let created = sending::report(&steps[0], &Sent::Written).event.unwrap();
    assert_eq!(
        (created.regarding_pod, created.pod, created.warning),
        (false, None, false)
    );
    assert_eq!(created.reason, keys::events::CREATED_IMAGE_PULL_JOB);
    assert_eq!(
        created.message,
        format!("created ImagePullJob {job} for image: nginx:2")
    );
    let failed = sending::report(&steps[0], &Sent::Failed("quota".into()))
        .event
        .unwrap();
    assert!(failed.warning);
    assert_eq!(failed.reason, keys::events::FAILED_CREATE_IMAGE_PULL_JOB);
    assert_eq!(
        failed.message,
        format!("failed to create ImagePullJob {job}: quota")
    );
    // A job that exists already is no news.
    let exists = Step {
        write: Ok(StepWrite::Nothing { why: "exists" }),
        ..steps[0].clone()
    };
    assert_eq!(sending::report(&exists, &Sent::Written), Default::default());
    // The label and the deletes are logged.
    let labelled = sending::report(&steps[1], &Sent::Written).log.unwrap();
    assert_eq!(
        labelled,
        format!("pre-download jobs in place for revision {update}")
    );
    assert_eq!(
        sending::patch_what(
            &steps[1].action,
            &match &steps[1].write {
                Ok(StepWrite::Object(Write::Patch(p))) => p.clone(),
                _ => unreachable!(),
            }
        ),
        format!("label ControllerRevision {update}")
    );
}
