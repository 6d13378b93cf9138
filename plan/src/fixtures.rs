//! Test fixtures of the update side (lifecycle, inplace, update, status): the pod and
//! CloneSet builders of `inplace-testkit`, the planner's forms of a built pod
//! ([`PlanForms`]), and a [`Fixture`] that owns a snapshot and lends a [`PlanContext`].
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use inplace_proto::CloneSet;
pub use inplace_testkit::pods::{PodBuilder, cloneset, merge, pod, revision, t};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use super::model::{PlanContext, PlanOptions, PodFacts, Resolved, Snapshot};
use crate::cached::CachedPod;

/// A built pod in the forms the planner reads.
pub trait PlanForms {
    /// The built pod in the cached form the planner reads.
    fn cached(self) -> Arc<CachedPod>;
    /// The facts of the built pod, which is leaked so that the facts (which borrow from
    /// it) can outlive this call: a few test pods for the whole test run.
    fn facts(self) -> PodFacts<'static>;
}

impl PlanForms for PodBuilder {
    fn cached(self) -> Arc<CachedPod> {
        cached(&self.build())
    }

    fn facts(self) -> PodFacts<'static> {
        PodFacts::from_pod(Box::leak(Box::new(self.cached())), &BTreeSet::new())
    }
}

/// `pod` in the cached form the planner reads (as the watch would cache it).
pub fn cached(pod: &Pod) -> Arc<CachedPod> {
    Arc::new(CachedPod::from_pod(pod).expect("a pod converts to its cached form"))
}

/// The facts of `pods` as a plan reads them (none in `podsToDelete`): what the writers
/// find the pods their actions name in.
pub fn facts_of(pods: &[Arc<CachedPod>]) -> Vec<PodFacts<'_>> {
    pods.iter()
        .map(|p| PodFacts::from_pod(p, &BTreeSet::new()))
        .collect()
}

/// The planner's input of `cloneset` with `pods`, `revisions` and `options` at t(1000):
/// no PVC, node, `podsToDelete` name seen before, or pre-download.
pub fn snapshot<'a>(
    cloneset: &'a CloneSet,
    pods: &'a [Arc<CachedPod>],
    revisions: &'a [ControllerRevision],
    options: &'a PlanOptions,
) -> Snapshot<'a> {
    Snapshot {
        cloneset,
        pods,
        pvcs: &[],
        revisions,
        nodes: &[],
        now: t(1000),
        options,
        pods_to_delete_seen: &crate::pods_to_delete::NO_NAMES,
        pre_download: None,
    }
}

/// Owns everything a [`PlanContext`] borrows.
#[derive(Debug)]
pub struct Fixture {
    pub cloneset: CloneSet,
    pub pods: Vec<Arc<CachedPod>>,
    pub revisions: Vec<ControllerRevision>,
    pub options: PlanOptions,
    pub now: Timestamp,
    pub update_revision: String,
    pub current_revision: String,
    pub resolved: Resolved,
}

impl Fixture {
    /// Update revision `demo-new`, current `demo-old`, now = t(1000).
    pub fn new(cloneset: CloneSet, pods: Vec<PodBuilder>) -> Self {
        let replicas = cloneset.replicas();
        Self {
            cloneset,
            pods: pods.into_iter().map(PodBuilder::cached).collect(),
            revisions: Vec::new(),
            options: PlanOptions::default(),
            now: t(1000),
            update_revision: "demo-new".to_owned(),
            current_revision: "demo-old".to_owned(),
            resolved: Resolved {
                replicas,
                max_unavailable: 1,
                scale_max_unavailable: i32::MAX,
                ..Resolved::default()
            },
        }
    }

    /// The planner's input: the CloneSet, pods, revisions and options, at `now`.
    pub fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            now: self.now,
            ..snapshot(&self.cloneset, &self.pods, &self.revisions, &self.options)
        }
    }

    pub fn ctx(&self) -> PlanContext<'_> {
        let pods_to_delete: BTreeSet<&str> = self
            .cloneset
            .spec
            .scale_strategy
            .iter()
            .flat_map(|s| s.pods_to_delete.iter().map(String::as_str))
            .collect();
        PlanContext {
            snapshot: self.snapshot(),
            pods: self
                .pods
                .iter()
                .map(|p| PodFacts::from_pod(p, &pods_to_delete))
                .collect(),
            update_revision: self.update_revision.clone(),
            current_revision: self.current_revision.clone(),
            resolved: self.resolved,
        }
    }
}
