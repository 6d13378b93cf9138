//! Carries out a [`Plan`]: ControllerRevisions, pods, PVCs, in-place updates, lifecycle
//! labels, `podsToDelete` pruning.
//!
//! Rules:
//! - every write is recorded as an expectation before the next plan may run;
//! - deletes carry a UID precondition, spec patches a resourceVersion precondition, so a
//!   decision made on a stale cache fails (409) instead of hitting the wrong object;
//! - pod conditions are written by strategic merge patch on `pods/status` (conditions merge
//!   by type, so the kubelet's own conditions are never overwritten);
//! - consecutive actions of one kind form a phase; a phase runs with bounded parallelism
//!   (creates in slow-start batches 1, 2, 4, …); the first phase with a failure ends the
//!   step, and the failure is reported (event, condition, retry with backoff).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use inplace_proto::{
    CloneSet, InPlaceUpdateContainerStatus, InPlaceUpdateGrace, InPlaceUpdateState, LifecycleState,
    keys,
};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::error::{Error, is_already_exists, is_conflict, is_not_found};
use crate::events::Note;
use crate::expectations::Expectation;
use crate::metrics::CloneSetLabels;
use crate::plan::not_ready::{NOT_READY_USER_AGENT, NotReadyMessage, kruise_pod_ready};
use crate::plan::{Action, DeleteReason, Plan, UpdateMethod, container_batches};
use crate::runtime::{Context, key_of};
use crate::watch::Owned;

/// The CloneSet condition a failed action is reported under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    Scale,
    Update,
}

impl FailureKind {
    pub fn condition(self) -> &'static str {
        match self {
            Self::Scale => keys::CONDITION_FAILED_SCALE,
            Self::Update => keys::CONDITION_FAILED_UPDATE,
        }
    }
}

/// One failed action.
#[derive(Debug)]
pub struct Failure {
    pub kind: FailureKind,
    pub error: Error,
}

/// What happened while acting.
#[derive(Debug, Default)]
pub struct Outcome {
    pub attempted: usize,
    pub failures: Vec<Failure>,
    /// Actions not attempted because an earlier phase failed.
    pub skipped: usize,
}

impl Outcome {
    /// The error to hand to the retry policy, if anything failed.
    pub fn into_error(self) -> Option<Error> {
        let total = self.attempted;
        let failed = self.failures.len();
        let first = self.failures.into_iter().next()?;
        if failed == 1 {
            return Some(first.error);
        }
        Some(Error::Actions {
            failed,
            total,
            first: Box::new(first.error),
        })
    }
}

/// Everything one execution needs.
struct Actor<'a> {
    ctx: &'a Context,
    cs: &'a CloneSet,
    plan: &'a Plan,
    owned: &'a Owned,
    key: String,
    ns: String,
    cs_ref: ObjectReference,
    labels: CloneSetLabels,
    pods: BTreeMap<&'a str, &'a Pod>,
    revisions_ok: AtomicBool,
}

fn now_time() -> Time {
    Time(Timestamp::now())
}

fn now_rfc3339() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn pod_ref(pod: &Pod) -> ObjectReference {
    pod.object_ref(&())
}

/// Which phase an action belongs to (consecutive actions of one phase run together).
///
/// The refresh actions of a pod (apply a held update, complete an in-place update, move
/// its lifecycle state) come pod by pod in a plan (`complete a, lifecycle a, complete b,
/// …`); as separate kinds they made one-action phases, i.e. one API call at a time for
/// hundreds of pods. They form one phase, run pod-parallel with each pod's actions in
/// plan order ([`by_pod`]).
fn phase_of(action: &Action) -> &'static str {
    match action {
        Action::Create { .. } => "create",
        Action::Delete { .. } => "delete",
        Action::Update { .. } => "update",
        Action::Lifecycle { .. }
        | Action::CompleteInPlaceUpdate { .. }
        | Action::ApplyGracedUpdate { .. }
        | Action::ApplyNextContainerBatch { .. }
        | Action::ReportInPlaceStall { .. } => "refresh",
        Action::SetTemplateHash { .. } => "template_hash",
        Action::DeletePvc { .. } => "delete_pvc",
        Action::PrunePodsToDelete { .. } => "prune",
        Action::ReownPvcToPod { .. } => "reown",
    }
}

/// The pod an action writes, if it is a per-pod action.
fn pod_of(action: &Action) -> Option<&str> {
    match action {
        Action::Delete { pod, .. }
        | Action::Update { pod, .. }
        | Action::Lifecycle { pod, .. }
        | Action::CompleteInPlaceUpdate { pod }
        | Action::ApplyGracedUpdate { pod }
        | Action::ApplyNextContainerBatch { pod }
        | Action::ReportInPlaceStall { pod, .. }
        | Action::SetTemplateHash { pod, .. } => Some(pod),
        Action::ReownPvcToPod { pod, .. } => Some(pod),
        Action::Create { .. } | Action::DeletePvc { .. } | Action::PrunePodsToDelete { .. } => None,
    }
}

/// The actions of a phase in chains: one per pod (its actions in plan order), one per
/// action without a pod; chains in order of first appearance.
fn by_pod<'b>(phase: &[&'b Action]) -> Vec<Vec<&'b Action>> {
    let mut chains: Vec<Vec<&Action>> = Vec::new();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for action in phase {
        match pod_of(action) {
            Some(pod) => match index.get(pod) {
                Some(&i) => chains[i].push(action),
                None => {
                    index.insert(pod, chains.len());
                    chains.push(vec![action]);
                }
            },
            None => chains.push(vec![action]),
        }
    }
    chains
}

fn failure_kind(action: &Action) -> FailureKind {
    match action {
        Action::Create { .. }
        | Action::Delete { .. }
        | Action::DeletePvc { .. }
        | Action::PrunePodsToDelete { .. }
        | Action::ReownPvcToPod { .. } => FailureKind::Scale,
        _ => FailureKind::Update,
    }
}

/// Carries out `plan` for `cs`.
pub async fn execute(ctx: &Context, cs: &CloneSet, owned: &Owned, plan: &Plan) -> Outcome {
    let ns = cs.namespace().unwrap_or_default();
    let actor = Actor {
        ctx,
        cs,
        plan,
        owned,
        key: key_of(cs),
        cs_ref: cs.object_ref(&()),
        labels: CloneSetLabels::new(&ns, &cs.name_any()),
        pods: owned
            .pods
            .iter()
            .filter_map(|p| p.metadata.name.as_deref().map(|n| (n, p)))
            .collect(),
        ns,
        revisions_ok: AtomicBool::new(true),
    };
    actor.run().await
}

impl Actor<'_> {
    fn pod_api(&self) -> Api<Pod> {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    fn pvc_api(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    fn revision_api(&self) -> Api<ControllerRevision> {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    /// An untyped API for kind `K`, for objects built as raw JSON.
    fn dyn_api<K: Resource<DynamicType = ()>>(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.ctx.client.clone(),
            &self.ns,
            &ApiResource::erase::<K>(&()),
        )
    }

    fn cs_api(&self) -> Api<CloneSet> {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    fn pp(&self) -> PatchParams {
        PatchParams {
            field_manager: Some(self.ctx.settings.field_manager.clone()),
            ..PatchParams::default()
        }
    }

    fn expect(&self, e: Expectation) {
        self.ctx.expectations.expect(&self.key, e);
    }

    fn event(
        &self,
        related: Option<ObjectReference>,
        warning: bool,
        reason: &str,
        action: &str,
        message: String,
    ) {
        if warning {
            warn!(reason, %message, "event");
        } else {
            info!(reason, %message, "event");
        }
        self.ctx.events.send(Note {
            regarding: self.cs_ref.clone(),
            related,
            warning,
            reason: reason.to_owned(),
            action: action.to_owned(),
            message,
        });
    }

    fn pod(&self, name: &str) -> Result<&Pod, Error> {
        self.pods
            .get(name)
            .copied()
            .ok_or_else(|| Error::NotCached(format!("pod {}/{name}", self.ns)))
    }

    async fn run(&self) -> Outcome {
        let mut outcome = Outcome::default();
        if let Err(err) = self.write_revisions().await {
            self.revisions_ok.store(false, Ordering::Relaxed);
            outcome.attempted += 1;
            outcome.failures.push(Failure {
                kind: FailureKind::Update,
                error: err,
            });
            outcome.skipped = self.plan.actions.len();
            return outcome;
        }
        self.init_pod_conditions(&mut outcome).await;

        let mut phases: Vec<Vec<&Action>> = Vec::new();
        for action in &self.plan.actions {
            match phases.last_mut() {
                Some(last) if last.first().map(|a| phase_of(a)) == Some(phase_of(action)) => {
                    last.push(action);
                }
                _ => phases.push(vec![action]),
            }
        }
        let mut failed = false;
        for phase in phases {
            if failed {
                outcome.skipped += phase.len();
                continue;
            }
            let results = if phase
                .first()
                .is_some_and(|a| matches!(a, Action::Create { .. }))
            {
                self.run_slow_start(&phase).await
            } else {
                let futs: Vec<_> = by_pod(&phase)
                    .into_iter()
                    .map(|chain| self.act_chain(chain))
                    .collect();
                bounded(futs, self.ctx.settings.api_parallelism)
                    .await
                    .into_iter()
                    .flatten()
                    .collect()
            };
            outcome.attempted += results.len();
            outcome.skipped += phase.len() - results.len();
            for (action, result) in results {
                if let Err(error) = result {
                    failed = true;
                    outcome.failures.push(Failure {
                        kind: failure_kind(action),
                        error,
                    });
                }
            }
        }
        if self.revisions_ok.load(Ordering::Relaxed)
            && !failed
            && let Err(err) = self.delete_old_revisions().await
        {
            outcome.failures.push(Failure {
                kind: FailureKind::Update,
                error: err,
            });
        }
        outcome
    }

    /// Creates in batches of 1, 2, 4, … and stops after the first batch with a failure.
    async fn run_slow_start<'b>(
        &self,
        phase: &[&'b Action],
    ) -> Vec<(&'b Action, Result<(), Error>)> {
        let mut results = Vec::new();
        let mut batch = 1usize;
        let mut i = 0usize;
        while i < phase.len() {
            let end = (i + batch).min(phase.len());
            let futs: Vec<_> = phase[i..end].iter().map(|a| self.act_tagged(a)).collect();
            let part = bounded(futs, self.ctx.settings.api_parallelism).await;
            let failed = part.iter().any(|(_, r)| r.is_err());
            results.extend(part);
            if failed {
                break;
            }
            i = end;
            batch = batch.saturating_mul(2);
        }
        results
    }

    async fn act_tagged<'b>(&self, action: &'b Action) -> (&'b Action, Result<(), Error>) {
        (action, self.act(action).await)
    }

    /// Runs the actions of one pod in order; after a failure the rest are not attempted
    /// (not returned).
    async fn act_chain<'b>(&self, chain: Vec<&'b Action>) -> Vec<(&'b Action, Result<(), Error>)> {
        let mut out = Vec::with_capacity(chain.len());
        for action in chain {
            let result = self.act(action).await;
            let failed = result.is_err();
            out.push((action, result));
            if failed {
                break;
            }
        }
        out
    }

    async fn act(&self, action: &Action) -> Result<(), Error> {
        debug!(?action, "acting");
        match action {
            Action::Create {
                revision,
                instance_id,
            } => self.create_pod(revision, instance_id).await,
            Action::Delete { pod, reason } => self.delete_pod(pod, *reason).await,
            Action::Update {
                pod,
                method: UpdateMethod::Recreate,
                revision,
            } => self.recreate(pod, revision).await,
            Action::Update {
                pod,
                method: UpdateMethod::InPlace,
                revision,
            } => self.update_in_place(pod, revision).await,
            Action::Lifecycle {
                pod,
                from,
                to,
                mark_not_ready,
            } => self.lifecycle(pod, *from, *to, *mark_not_ready).await,
            Action::CompleteInPlaceUpdate { pod } => self.complete_in_place(pod).await,
            Action::ApplyGracedUpdate { pod } => self.apply_graced(pod).await,
            Action::DeletePvc { pvc } => self.delete_pvc(pvc).await,
            Action::PrunePodsToDelete { names } => self.prune_pods_to_delete(names).await,
            Action::ReownPvcToPod { pvc, pod } => self.reown_pvc(pvc, pod).await,
            Action::SetTemplateHash { pod, hash } => self.set_template_hash(pod, hash).await,
            Action::ApplyNextContainerBatch { pod } => self.apply_next_batch(pod).await,
            Action::ReportInPlaceStall {
                pod,
                reason,
                message,
            } => self.report_in_place_stall(pod, reason, message).await,
        }
    }

    // ---------- revisions ----------

    async fn write_revisions(&self) -> Result<(), Error> {
        let api = self.revision_api();
        if let Some(rev) = &self.plan.revisions.create {
            let name = rev.name_any();
            match api.create(&PostParams::default(), rev).await {
                Ok(_) => info!(revision = %name, "created ControllerRevision"),
                Err(e) if is_already_exists(&e) => {
                    debug!(revision = %name, "ControllerRevision already exists")
                }
                Err(e) => return Err(Error::kube(format!("create revision {name}"), e)),
            }
            self.expect(Expectation::RevisionCreated { name });
        }
        if let Some(rev) = &self.plan.revisions.bump {
            let name = rev.name_any();
            let patch = json!({
                "metadata": {"resourceVersion": rev.resource_version()},
                "revision": rev.revision,
            });
            let written = api
                .patch(&name, &self.pp(), &Patch::Merge(&patch))
                .await
                .map_err(|e| Error::kube(format!("bump revision {name}"), e))?;
            self.expect(Expectation::RevisionUpdated {
                name,
                resource_version: written.resource_version().unwrap_or_default(),
            });
        }
        Ok(())
    }

    async fn delete_old_revisions(&self) -> Result<(), Error> {
        let api = self.revision_api();
        for name in &self.plan.revisions.delete {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => debug!(revision = %name, "deleted old ControllerRevision"),
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(Error::kube(format!("delete revision {name}"), e)),
            }
            self.expect(Expectation::RevisionDeleted { name: name.clone() });
        }
        Ok(())
    }

    // ---------- pod conditions the reference sets outside the plan ----------

    /// Pods created with the `InPlaceUpdateReady` (or `KruisePodReady`) readiness gate get
    /// the condition True as soon as no in-place update is running on them; without it the
    /// kubelet would never report them Ready. (The reference's in-place `Refresh` and its
    /// pod-readiness controller do this.) Pods the plan completes itself are left to it.
    async fn init_pod_conditions(&self, outcome: &mut Outcome) {
        let planned: BTreeSet<&str> = self
            .plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::CompleteInPlaceUpdate { pod } => Some(pod.as_str()),
                _ => None,
            })
            .collect();
        let updating: BTreeSet<&str> = self
            .plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Update { pod, .. } | Action::ApplyGracedUpdate { pod } => {
                    Some(pod.as_str())
                }
                _ => None,
            })
            .collect();
        let mut todo = Vec::new();
        for pod in &self.owned.pods {
            let name = pod.name_any();
            if planned.contains(name.as_str())
                || updating.contains(name.as_str())
                || pod.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let conditions = gate_conditions_to_set(pod, updating.contains(name.as_str()));
            if !conditions.is_empty() {
                todo.push((pod, conditions));
            }
        }
        if todo.is_empty() {
            return;
        }
        let now = now_time();
        let futs: Vec<_> = todo
            .into_iter()
            .map(|(pod, conditions)| {
                let conds: Vec<Value> = conditions
                    .iter()
                    .map(|t| json!({"type": t, "status": "True", "lastTransitionTime": now}))
                    .collect();
                self.patch_pod_status(pod, json!({ "conditions": conds }), true)
            })
            .collect();
        let results = bounded(futs, self.ctx.settings.api_parallelism).await;
        for r in results {
            outcome.attempted += 1;
            match r {
                Ok(()) => {}
                Err(e) if e.status_code() == Some(409) => {}
                Err(error) => outcome.failures.push(Failure {
                    kind: FailureKind::Update,
                    error,
                }),
            }
        }
    }

    /// Strategic merge patch of `pods/status`. With `pinned`, the patch only applies to the
    /// pod version we planned from (resourceVersion precondition).
    async fn patch_pod_status(&self, pod: &Pod, status: Value, pinned: bool) -> Result<(), Error> {
        let name = pod.name_any();
        let mut body = json!({ "status": status });
        if pinned {
            body["metadata"] = json!({"resourceVersion": pod.resource_version()});
        }
        let written = self
            .pod_api()
            .patch_status(&name, &self.pp(), &Patch::Strategic(body))
            .await
            .map_err(|e| Error::kube(format!("patch status of pod {name}"), e))?;
        self.expect(Expectation::PodUpdated {
            name,
            uid: written.uid().unwrap_or_default(),
            resource_version: written.resource_version().unwrap_or_default(),
        });
        Ok(())
    }

    /// Strategic merge patch of a pod; with `pinned`, only of the pod version we planned
    /// from (resourceVersion precondition), for patches whose content depends on it.
    async fn patch_pod(
        &self,
        pod: &Pod,
        mut body: Value,
        what: &str,
        pinned: bool,
    ) -> Result<Pod, Error> {
        let name = pod.name_any();
        if pinned {
            body["metadata"]["resourceVersion"] = json!(pod.resource_version());
        }
        let written = self
            .pod_api()
            .patch(&name, &self.pp(), &Patch::Strategic(body))
            .await
            .map_err(|e| Error::kube(format!("{what} pod {name}"), e))?;
        self.expect(Expectation::PodUpdated {
            name,
            uid: written.uid().unwrap_or_default(),
            resource_version: written.resource_version().unwrap_or_default(),
        });
        Ok(written)
    }

    // ---------- create / delete ----------

    async fn create_pod(&self, revision: &str, instance_id: &str) -> Result<(), Error> {
        let cs_name = self.cs.name_any();
        let pod_name = format!("{cs_name}-{instance_id}");
        let result = self
            .create_pod_inner(revision, instance_id, &pod_name)
            .await;
        match &result {
            Ok(()) => {
                self.ctx
                    .metrics
                    .pods_created
                    .get_or_create(&self.labels)
                    .inc();
                self.event(
                    Some(ObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: Some(pod_name.clone()),
                        namespace: Some(self.ns.clone()),
                        ..ObjectReference::default()
                    }),
                    false,
                    keys::events::SUCCESSFUL_CREATE,
                    "Create",
                    format!("succeed to create pod {pod_name}"),
                );
            }
            Err(err) if err.status_code() == Some(409) => {
                debug!(pod = %pod_name, %err, "create deferred");
            }
            Err(err) => self.event(
                None,
                true,
                keys::events::FAILED_CREATE,
                "Create",
                format!("failed to create pod {pod_name}: {err}"),
            ),
        }
        result
    }

    async fn create_pod_inner(
        &self,
        revision: &str,
        instance_id: &str,
        pod_name: &str,
    ) -> Result<(), Error> {
        let template = crate::plan::revision::template_for(
            self.cs,
            &self.owned.revisions,
            &self.plan.revisions.update_revision,
            revision,
        )
        .ok_or_else(|| Error::NotCached(format!("template of revision {revision}")))?;
        let short = self.ctx.settings.plan_options.short_hash;
        let now = Timestamp::now();
        // Raw JSON all the way to the server: template fields unknown to k8s-openapi survive.
        let pod =
            crate::plan::build::pod_json(self.cs, &template, revision, instance_id, short, now);
        let pvcs = crate::plan::build::pvcs_json(self.cs, instance_id);
        let existing: BTreeSet<&str> = self
            .owned
            .pvcs
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        let pp = PostParams {
            field_manager: Some(self.ctx.settings.field_manager.clone()),
            ..PostParams::default()
        };
        for pvc in pvcs {
            let pvc = dynamic(pvc, "PVC")?;
            let name = pvc.name_any();
            if existing.contains(name.as_str()) {
                continue;
            }
            match self
                .dyn_api::<PersistentVolumeClaim>()
                .create(&pp, &pvc)
                .await
            {
                Ok(_) => debug!(pvc = %name, "created PVC"),
                Err(e) if is_already_exists(&e) => {}
                Err(e) => return Err(Error::kube(format!("create PVC {name}"), e)),
            }
            self.expect(Expectation::PvcCreated { name });
        }
        match self
            .dyn_api::<Pod>()
            .create(&pp, &dynamic(pod, "pod")?)
            .await
        {
            Ok(_) => {}
            // A pod of that name we know of (the previous one of this instance, still
            // terminating): not created; retried with backoff until the name is free.
            Err(e) if is_already_exists(&e) && self.pods.contains_key(pod_name) => {
                return Err(Error::kube(
                    format!(
                        "create pod {pod_name} (the previous pod of the instance is still there)"
                    ),
                    e,
                ));
            }
            Err(e) if is_already_exists(&e) => {
                debug!(pod = %pod_name, "pod already exists (cache behind)");
                self.expect(Expectation::PodCreated {
                    name: pod_name.to_owned(),
                });
                return Err(Error::kube(
                    format!("create pod {pod_name} (cache behind)"),
                    e,
                ));
            }
            Err(e) => return Err(Error::kube(format!("create pod {pod_name}"), e)),
        }
        self.expect(Expectation::PodCreated {
            name: pod_name.to_owned(),
        });
        Ok(())
    }

    async fn delete_pod(&self, name: &str, reason: DeleteReason) -> Result<(), Error> {
        let Ok(pod) = self.pod(name) else {
            debug!(pod = %name, "pod to delete is already gone");
            return Ok(());
        };
        let uid = pod.uid().unwrap_or_default();
        let dp = delete_only_uid(&uid);
        match self.pod_api().delete(name, &dp).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) || is_conflict(&e) => {
                debug!(pod = %name, "pod already gone or replaced");
            }
            Err(e) => {
                let err = Error::kube(format!("delete pod {name}"), e);
                self.event(
                    Some(pod_ref(pod)),
                    true,
                    keys::events::FAILED_DELETE,
                    "Delete",
                    format!("failed to delete pod {name}: {err}"),
                );
                return Err(err);
            }
        }
        self.expect(Expectation::PodDeleted {
            name: name.to_owned(),
            uid,
        });
        self.ctx
            .metrics
            .pods_deleted
            .get_or_create(&self.labels)
            .inc();
        self.event(
            Some(pod_ref(pod)),
            false,
            keys::events::SUCCESSFUL_DELETE,
            "Delete",
            format!("succeed to delete pod {name} ({reason:?})"),
        );
        // The pod's PVCs go with it, unless another live pod of the same instance uses them.
        if let Some(id) = pod.labels().get(keys::INSTANCE_ID_LABEL) {
            let reused = self.owned.pods.iter().any(|p| {
                p.uid() != pod.uid()
                    && p.metadata.deletion_timestamp.is_none()
                    && p.labels().get(keys::INSTANCE_ID_LABEL) == Some(id)
            });
            if !reused {
                for pvc in self
                    .owned
                    .pvcs
                    .iter()
                    .filter(|p| p.labels().get(keys::INSTANCE_ID_LABEL) == Some(id))
                {
                    self.delete_pvc(&pvc.name_any()).await?;
                }
            }
        }
        Ok(())
    }

    async fn delete_pvc(&self, name: &str) -> Result<(), Error> {
        let Some(pvc) = self
            .owned
            .pvcs
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
        else {
            return Ok(());
        };
        if pvc.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let uid = pvc.uid().unwrap_or_default();
        let dp = delete_only_uid(&uid);
        match self.pvc_api().delete(name, &dp).await {
            Ok(_) => debug!(pvc = %name, "deleted PVC"),
            Err(e) if is_not_found(&e) || is_conflict(&e) => {}
            Err(e) => return Err(Error::kube(format!("delete PVC {name}"), e)),
        }
        self.expect(Expectation::PvcDeleted {
            name: name.to_owned(),
            uid,
        });
        Ok(())
    }

    async fn reown_pvc(&self, name: &str, pod_name: &str) -> Result<(), Error> {
        let Some(pvc) = self
            .owned
            .pvcs
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
        else {
            return Ok(());
        };
        let pod = self.pod(pod_name)?;
        let cs_uid = self.cs.uid().unwrap_or_default();
        let mut refs: Vec<Value> = pvc
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.uid != cs_uid)
            .map(|o| serde_json::to_value(o).unwrap_or(Value::Null))
            .filter(|v| !v.is_null())
            .collect();
        refs.push(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod_name,
            "uid": pod.uid(),
            "controller": true,
            "blockOwnerDeletion": true,
        }));
        let body = json!({
            "metadata": {"resourceVersion": pvc.resource_version(), "ownerReferences": refs}
        });
        self.pvc_api()
            .patch(name, &self.pp(), &Patch::Merge(&body))
            .await
            .map_err(|e| Error::kube(format!("hand PVC {name} to pod {pod_name}"), e))?;
        Ok(())
    }

    async fn prune_pods_to_delete(&self, names: &[String]) -> Result<(), Error> {
        let Some(current) = self
            .cs
            .spec
            .scale_strategy
            .as_ref()
            .map(|s| s.pods_to_delete.clone())
        else {
            return Ok(());
        };
        let drop: BTreeSet<&str> = names.iter().map(String::as_str).collect();
        let kept: Vec<&String> = current
            .iter()
            .filter(|n| !drop.contains(n.as_str()))
            .collect();
        if kept.len() == current.len() {
            return Ok(());
        }
        // Pinned to the CloneSet version we planned from: a concurrent edit of the list by
        // the user wins (409 → retry with a fresh cache).
        let body = json!({
            "metadata": {"resourceVersion": self.cs.resource_version()},
            "spec": {"scaleStrategy": {"podsToDelete": kept}},
        });
        self.cs_api()
            .patch(&self.cs.name_any(), &self.pp(), &Patch::Merge(&body))
            .await
            .map_err(|e| Error::kube("prune spec.scaleStrategy.podsToDelete", e))?;
        info!(removed = ?names, "pruned podsToDelete");
        Ok(())
    }

    // ---------- updates ----------

    fn revision_labels(&self, revision: &str) -> Value {
        let hash = crate::plan::revision::short_hash(revision);
        let label = if self.ctx.settings.plan_options.short_hash {
            hash.to_owned()
        } else {
            revision.to_owned()
        };
        json!({ keys::REVISION_LABEL: label, keys::POD_TEMPLATE_HASH_LABEL: hash })
    }

    async fn recreate(&self, name: &str, revision: &str) -> Result<(), Error> {
        let pod = self.pod(name)?;
        let body = json!({"metadata": {"labels": {keys::SPECIFIED_DELETE_LABEL: "true"}}});
        match self.patch_pod(pod, body, "mark for recreate", false).await {
            Ok(_) => {
                self.ctx
                    .metrics
                    .pods_recreated
                    .get_or_create(&self.labels)
                    .inc();
                self.event(
                    Some(pod_ref(pod)),
                    false,
                    keys::events::SUCCESSFUL_UPDATE_POD_RECREATE,
                    "Recreate",
                    format!("successfully patch pod {name} specified-delete for update(revision {revision})"),
                );
                Ok(())
            }
            Err(err) => {
                self.event(
                    Some(pod_ref(pod)),
                    true,
                    keys::events::FAILED_UPDATE_POD_RECREATE,
                    "Recreate",
                    format!("failed to patch pod {name} specified-delete for update(revision {revision}): {err}"),
                );
                Err(err)
            }
        }
    }

    /// The in-place update spec moving `pod` to `revision`, from the planner's decision
    /// (`plan::inplace`), in the shape of the reference's `UpdateSpec` (which is also what
    /// the grace annotation holds).
    fn in_place_spec(&self, pod: &Pod, revision: &str) -> Result<InPlaceUpdateGrace, Error> {
        let decision = crate::plan::inplace::decide_for_revisions(
            self.cs,
            &self.owned.revisions,
            &self.plan.revisions.update_revision,
            pod.labels().get(keys::REVISION_LABEL).map(String::as_str),
            revision,
            &self.ctx.settings.plan_options,
        );
        let change = match decision {
            crate::plan::inplace::InPlaceDecision::InPlace(change) => change,
            crate::plan::inplace::InPlaceDecision::Recreate { reason }
            | crate::plan::inplace::InPlaceDecision::Refused { reason } => {
                return Err(Error::InPlaceRefused {
                    pod: pod.name_any(),
                    reason,
                });
            }
        };
        let grace = self
            .cs
            .spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.in_place_update_strategy.as_ref())
            .and_then(|s| s.grace_period_seconds)
            .unwrap_or(0);
        spec_from_change(&change, revision, grace)
    }

    async fn update_in_place(&self, name: &str, revision: &str) -> Result<(), Error> {
        let pod = self.pod(name)?;
        let result = self.update_in_place_inner(pod, revision).await;
        match &result {
            Ok(()) => {
                self.ctx
                    .metrics
                    .pods_updated_in_place
                    .get_or_create(&self.labels)
                    .inc();
                self.event(
                    Some(pod_ref(pod)),
                    false,
                    keys::events::SUCCESSFUL_UPDATE_POD_IN_PLACE,
                    "UpdateInPlace",
                    format!("successfully update pod {name} in-place(revision {revision})"),
                );
            }
            Err(err) => self.event(
                Some(pod_ref(pod)),
                true,
                keys::events::FAILED_UPDATE_POD_IN_PLACE,
                "UpdateInPlace",
                format!("failed to update pod {name} in-place(revision {revision}): {err}"),
            ),
        }
        result
    }

    async fn update_in_place_inner(&self, pod: &Pod, revision: &str) -> Result<(), Error> {
        let spec = self.in_place_spec(pod, revision)?;
        let resources_only = spec.container_images.is_empty()
            && spec.meta_data_patch.is_empty()
            && spec.restart_containers.is_empty()
            && !spec.container_resources.is_empty();
        let gated = has_gate(pod, keys::INPLACE_UPDATE_READY_CONDITION) && !resources_only;
        // 1. Not ready first, so endpoints drop the pod before its containers restart.
        //    Both writes are pinned to a pod version we checked; on a conflict (the
        //    kubelet/simulator wrote the pod's status meanwhile) the pod is read again and,
        //    if the decision still holds for it, the write is retried at once instead of
        //    failing the reconcile and waiting out a backoff.
        let mut pinned_pod = pod.clone();
        if gated {
            let (_, written) = self
                .retry_on_conflict(pod, pinned_pod, false, |p| async move {
                    self.set_update_not_ready(&p).await
                })
                .await?;
            pinned_pod = written;
        }
        // 2. One patch: revision labels, lifecycle Updating, state, and the spec itself
        //    (or, during a grace period, the held spec).
        let state = InPlaceUpdateState {
            revision: revision.to_owned(),
            update_timestamp: Some(now_time()),
            update_env_from_metadata: spec.update_env_from_metadata,
            update_images: !spec.container_images.is_empty(),
            update_resources: !spec.container_resources.is_empty(),
            ..InPlaceUpdateState::default()
        };
        let mut body = json!({"metadata": {
            "labels": self.revision_labels(revision),
            "annotations": {
                keys::LIFECYCLE_TIMESTAMP_ANNOTATION: now_rfc3339(),
                keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY: Value::Null,
            },
        }});
        body["metadata"]["labels"][keys::LIFECYCLE_STATE_LABEL] =
            json!(LifecycleState::Updating.as_str());
        if spec.grace_seconds > 0 {
            body["metadata"]["annotations"][keys::INPLACE_UPDATE_STATE_ANNOTATION] =
                json!(encode(&state, "in-place state")?);
            body["metadata"]["annotations"][keys::INPLACE_UPDATE_GRACE_ANNOTATION] =
                json!(encode(&spec, "in-place grace")?);
        }
        let (pinned_pod, _) = self
            .retry_on_conflict(pod, pinned_pod, gated, |p| {
                let mut body = body.clone();
                let built = if spec.grace_seconds == 0 {
                    self.apply_spec(&p, &spec, state.clone(), &mut body)
                } else {
                    Ok(())
                };
                async move {
                    built?;
                    self.patch_pod(&p, body, "update in place", true).await
                }
            })
            .await?;
        self.resize(&pinned_pod, &spec).await
    }

    /// Runs `write` pinned to `pinned`; on a 409 the pod is read again and, if the decision
    /// made from `planned` still holds for it ([`Self::reread_for_update`]), the write is
    /// retried at once, at most [`CONFLICT_RETRIES`] times. Returns the pod version the
    /// successful write was pinned to, and its result.
    async fn retry_on_conflict<T, F, Fut>(
        &self,
        planned: &Pod,
        mut pinned: Pod,
        gate_set: bool,
        mut write: F,
    ) -> Result<(Pod, T), Error>
    where
        F: FnMut(Pod) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let mut attempt = 0;
        loop {
            match write(pinned.clone()).await {
                Ok(out) => return Ok((pinned, out)),
                Err(err) if err.status_code() == Some(409) && attempt < CONFLICT_RETRIES => {
                    attempt += 1;
                    pinned = self.reread_for_update(planned, gate_set, err).await?;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Sets `InPlaceUpdateReady` (and `Ready`) False on `pod`, pinned to its
    /// resourceVersion; returns the pod as written.
    async fn set_update_not_ready(&self, pod: &Pod) -> Result<Pod, Error> {
        let now = now_time();
        let name = pod.name_any();
        let written = self
            .pod_api()
            .patch_status(
                &name,
                &self.pp(),
                &Patch::Strategic(json!({
                    "metadata": {"resourceVersion": pod.resource_version()},
                    "status": {"conditions": [
                        {"type": keys::INPLACE_UPDATE_READY_CONDITION, "status": "False",
                         "reason": keys::START_INPLACE_UPDATE_REASON, "message": null,
                         "lastTransitionTime": now},
                        {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady",
                         "message": format!("the status of pod readiness gate \"{}\" is not \"True\", but False", keys::INPLACE_UPDATE_READY_CONDITION),
                         "lastTransitionTime": now},
                    ]}
                })),
            )
            .await
            .map_err(|e| {
                Error::kube(
                    format!(
                        "set {} False on pod {name}",
                        keys::INPLACE_UPDATE_READY_CONDITION
                    ),
                    e,
                )
            })?;
        // Recorded like every pod write: the next plan must see the condition False.
        self.expect(Expectation::PodUpdated {
            name,
            uid: written.uid().unwrap_or_default(),
            resource_version: written.resource_version().unwrap_or_default(),
        });
        Ok(written)
    }

    /// After a conflict on a write to `planned`: the pod as the API server has it now, if
    /// the in-place decision made from `planned` still holds for it
    /// ([`still_updatable`]); otherwise `conflict` (the reconcile fails and re-plans).
    async fn reread_for_update(
        &self,
        planned: &Pod,
        gate_set: bool,
        conflict: Error,
    ) -> Result<Pod, Error> {
        let name = planned.name_any();
        let fresh = self
            .pod_api()
            .get(&name)
            .await
            .map_err(|e| Error::kube(format!("read pod {name} after a conflict"), e))?;
        match still_updatable(planned, &fresh, gate_set) {
            Ok(()) => {
                debug!(pod = %name, rv = ?fresh.resource_version(), "conflict: pod re-read, decision still holds, retrying");
                Ok(fresh)
            }
            Err(why) => {
                debug!(pod = %name, %why, "conflict: the pod changed, not retrying");
                Err(conflict)
            }
        }
    }

    /// Adds the held `spec` to `body` (the reference's `PatchSpecToPod`): container images,
    /// metadata, `lastContainerStatuses`, the state annotation; removes the grace annotation.
    fn apply_spec(
        &self,
        pod: &Pod,
        spec: &InPlaceUpdateGrace,
        mut state: InPlaceUpdateState,
        body: &mut Value,
    ) -> Result<(), Error> {
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or(&[]);
        // Container launch priority: only the first batch now, the rest in the state.
        let priorities = crate::plan::revision::template_for(
            self.cs,
            &self.owned.revisions,
            &self.plan.revisions.update_revision,
            &spec.revision,
        )
        .map(|t| container_batches::launch_priorities(&t.0.0))
        .unwrap_or_default();
        let split = container_batches::split(spec, &priorities);
        split.record_in(&mut state);
        let spec = &split.now;
        let changed: BTreeSet<&String> = split.containers.iter().collect();
        // `lastContainerStatuses`, as the reference records it: the containers whose image
        // changes (with the id of the container running now: the kubelet replaces it) and
        // those resized (no restart: no id). A container whose only change is metadata its
        // env reads is not recorded; the daemon restarts it (`updateEnvFromMetadata`).
        // A container restarted with an unchanged spec (`restartContainers`) is recorded
        // with the id of the container running now, like an image change: the daemon stops
        // that one, and the update is done once another one runs.
        for name in &changed {
            let restarted = spec.container_images.contains_key(*name)
                || spec.restart_containers.iter().any(|r| r == *name);
            if !restarted && !spec.container_resources.contains_key(*name) {
                continue;
            }
            let status = statuses.iter().find(|s| &&s.name == name);
            let container_id = status
                .and_then(|s| s.container_id.clone())
                .filter(|_| restarted)
                .unwrap_or_default();
            state.last_container_statuses.insert(
                (*name).clone(),
                InPlaceUpdateContainerStatus {
                    image_id: status.map(|s| s.image_id.clone()).unwrap_or_default(),
                    container_id,
                    resources: None,
                },
            );
        }
        for name in &spec.restart_containers {
            if !state.restart_containers.contains(name) {
                state.restart_containers.push(name.clone());
            }
        }
        if !changed.is_empty() {
            state
                .container_batches_record
                .push(inplace_proto::ContainerBatch {
                    timestamp: now_time(),
                    containers: changed.iter().map(|s| (*s).clone()).collect(),
                });
        }
        let containers: Vec<Value> = spec
            .container_images
            .iter()
            .map(|(name, image)| {
                let mut c = json!({"name": name, "image": image});
                if let Some(r) = spec.container_resources.get(name)
                    && self.write_resources_to_spec()
                {
                    c["resources"] = serde_json::to_value(r).unwrap_or(Value::Null);
                }
                c
            })
            .collect();
        if !containers.is_empty() {
            body["spec"] = json!({ "containers": containers });
        }
        if !spec.meta_data_patch.is_empty() {
            let meta: Value =
                serde_json::from_str(&spec.meta_data_patch).map_err(|source| Error::Encode {
                    what: "metaDataPatch of the in-place spec".into(),
                    source,
                })?;
            let meta = meta.get("metadata").cloned().unwrap_or(meta);
            for field in ["labels", "annotations"] {
                if let Some(map) = meta.get(field).and_then(Value::as_object) {
                    for (k, v) in map {
                        // Our own bookkeeping keys win over template metadata.
                        if body["metadata"][field].get(k).is_none() {
                            body["metadata"][field][k] = v.clone();
                        }
                    }
                }
            }
        }
        // Labels / annotations read by the env of this batch's containers (kept out of
        // metaDataPatch so that later batches' containers are not restarted early).
        for meta in spec.container_ref_metadata.values() {
            for (field, map) in [("labels", &meta.labels), ("annotations", &meta.annotations)] {
                for (k, v) in map.iter().flatten() {
                    if body["metadata"][field].get(k).is_none() {
                        body["metadata"][field][k] = json!(v);
                    }
                }
            }
        }
        body["metadata"]["annotations"][keys::INPLACE_UPDATE_STATE_ANNOTATION] =
            json!(encode(&state, "in-place state")?);
        body["metadata"]["annotations"][keys::INPLACE_UPDATE_GRACE_ANNOTATION] = Value::Null;
        body["metadata"]["annotations"][keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY] = Value::Null;
        Ok(())
    }

    /// Resources go into the pod spec only where the server accepts spec changes of them
    /// and has no `pods/resize` subresource.
    fn write_resources_to_spec(&self) -> bool {
        !self.ctx.caps.pod_resize && self.ctx.settings.plan_options.in_place_vertical_scaling
    }

    /// cpu/memory changes through `pods/resize`, where the server serves it.
    async fn resize(&self, pod: &Pod, spec: &InPlaceUpdateGrace) -> Result<(), Error> {
        if spec.container_resources.is_empty() || spec.grace_seconds > 0 {
            return Ok(());
        }
        if !self.ctx.caps.pod_resize {
            if !self.write_resources_to_spec() {
                warn!(pod = %pod.name_any(), "server has no pods/resize: resources not changed in place");
            }
            return Ok(());
        }
        let containers: Vec<Value> = spec
            .container_resources
            .iter()
            .map(|(name, r)| json!({"name": name, "resources": r}))
            .collect();
        let name = pod.name_any();
        let req = kube::core::Request::new(format!("/api/v1/namespaces/{}/pods", self.ns));
        let patch = Patch::Strategic(json!({"spec": {"containers": containers}}));
        let http = req
            .patch_subresource("resize", &name, &self.pp(), &patch)
            .map_err(|e| Error::kube(format!("resize pod {name}"), kube::Error::BuildRequest(e)))?;
        let written: Pod = self
            .ctx
            .client
            .request(http)
            .await
            .map_err(|e| Error::kube(format!("resize pod {name}"), e))?;
        self.expect(Expectation::PodUpdated {
            name,
            uid: written.uid().unwrap_or_default(),
            resource_version: written.resource_version().unwrap_or_default(),
        });
        Ok(())
    }

    async fn apply_graced(&self, name: &str) -> Result<(), Error> {
        let pod = self.pod(name)?;
        let annotations = pod.annotations();
        let raw = annotations
            .get(keys::INPLACE_UPDATE_GRACE_ANNOTATION)
            .or_else(|| annotations.get(keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY))
            .ok_or_else(|| Error::AnnotationMissing {
                pod: name.to_owned(),
                what: "grace annotation",
            })?;
        let spec: InPlaceUpdateGrace =
            serde_json::from_str(raw).map_err(|source| Error::Encode {
                what: format!("grace annotation of pod {name}"),
                source,
            })?;
        let on_revision = pod
            .labels()
            .get(keys::REVISION_LABEL)
            .is_some_and(|l| crate::plan::revision_matches(l, &spec.revision));
        let mut body = json!({"metadata": {"annotations": {}}});
        if on_revision {
            let state = InPlaceUpdateState::from_annotations(annotations)
                .and_then(Result::ok)
                .unwrap_or_else(|| InPlaceUpdateState {
                    revision: spec.revision.clone(),
                    update_timestamp: Some(now_time()),
                    update_images: !spec.container_images.is_empty(),
                    update_resources: !spec.container_resources.is_empty(),
                    update_env_from_metadata: spec.update_env_from_metadata,
                    ..InPlaceUpdateState::default()
                });
            self.apply_spec(pod, &spec, state, &mut body)?;
        } else {
            // The pod moved to another revision meanwhile: drop the held update.
            body["metadata"]["annotations"][keys::INPLACE_UPDATE_GRACE_ANNOTATION] = Value::Null;
            body["metadata"]["annotations"][keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY] =
                Value::Null;
        }
        let written = self
            .patch_pod(pod, body, "apply held in-place update of", true)
            .await?;
        if on_revision {
            self.resize(
                &written,
                &InPlaceUpdateGrace {
                    grace_seconds: 0,
                    ..spec
                },
            )
            .await?;
            info!(pod = %name, "grace period over, in-place update applied");
        }
        Ok(())
    }

    /// The next container batch of an in-place update (`plan::container_batches`): what
    /// the state still holds is split again by priority and patched like the first batch,
    /// pinned to the pod version whose readiness was judged.
    async fn apply_next_batch(&self, name: &str) -> Result<(), Error> {
        let pod = self.pod(name)?;
        let state = InPlaceUpdateState::from_annotations(pod.annotations())
            .ok_or_else(|| Error::AnnotationMissing {
                pod: name.to_owned(),
                what: "in-place state",
            })?
            .map_err(|source| Error::Encode {
                what: format!("in-place state of pod {name}"),
                source,
            })?;
        let spec = container_batches::remaining(&state);
        let mut body = json!({"metadata": {"labels": {}, "annotations": {}}});
        self.apply_spec(pod, &spec, state, &mut body)?;
        let written = self
            .patch_pod(pod, body, "apply the next container batch of", true)
            .await?;
        self.resize(&written, &spec).await?;
        info!(pod = %name, "next container batch of the in-place update applied");
        Ok(())
    }

    /// Back-fills `pod-template-hash` on a pod made before the label existed.
    async fn set_template_hash(&self, name: &str, hash: &str) -> Result<(), Error> {
        let pod = self.pod(name)?;
        let body = json!({"metadata": {"labels": {keys::POD_TEMPLATE_HASH_LABEL: hash}}});
        self.patch_pod(pod, body, "label", false).await?;
        Ok(())
    }

    async fn complete_in_place(&self, name: &str) -> Result<(), Error> {
        let pod = self.pod(name)?;
        if !has_gate(pod, keys::INPLACE_UPDATE_READY_CONDITION) {
            return Ok(());
        }
        let now = now_time();
        // Reason and message (a stall report) belong to the False condition: removed.
        let status = json!({"conditions": [
            {"type": keys::INPLACE_UPDATE_READY_CONDITION, "status": "True", "lastTransitionTime": now,
             "reason": null, "message": null}
        ]});
        match self.patch_pod_status(pod, status, true).await {
            // Only for the pod version we checked: a newer one is judged again next time.
            Err(e) if e.status_code() == Some(409) => Ok(()),
            other => other,
        }
    }

    /// Writes what a stalled in-place update waits for on the pod's `InPlaceUpdateReady`
    /// condition (status stays False; pinned to the pod version judged, so a pod that moved
    /// on meanwhile is judged again) and records a Warning event on the pod.
    async fn report_in_place_stall(
        &self,
        name: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), Error> {
        let pod = self.pod(name)?;
        let status = json!({"conditions": [{
            "type": keys::INPLACE_UPDATE_READY_CONDITION, "status": "False",
            "reason": reason, "message": message,
        }]});
        match self.patch_pod_status(pod, status, true).await {
            Err(e) if e.status_code() == Some(409) => return Ok(()),
            other => other?,
        }
        warn!(pod = %name, reason, %message, "in-place update stalled");
        self.ctx.events.send(Note {
            regarding: pod_ref(pod),
            related: Some(self.cs_ref.clone()),
            warning: true,
            reason: reason.to_owned(),
            action: "UpdateInPlace".to_owned(),
            message: message.to_owned(),
        });
        Ok(())
    }

    async fn lifecycle(
        &self,
        name: &str,
        from: Option<LifecycleState>,
        to: LifecycleState,
        mark_not_ready: Option<bool>,
    ) -> Result<(), Error> {
        let pod = self.pod(name)?;
        if let Some(add) = mark_not_ready {
            let key = if to == LifecycleState::PreparingDelete
                || from == Some(LifecycleState::PreparingDelete)
            {
                keys::PRE_DELETE_HOOK_KEY
            } else {
                keys::PRE_UPDATE_HOOK_KEY
            };
            self.set_not_ready_key(pod, key, add).await?;
        }
        let mut body = json!({"metadata": {
            "labels": {keys::LIFECYCLE_STATE_LABEL: to.as_str()},
            "annotations": {keys::LIFECYCLE_TIMESTAMP_ANNOTATION: now_rfc3339()},
        }});
        if to == LifecycleState::PreparingUpdate && from == Some(LifecycleState::Updated) {
            // Back to PreparingUpdate for another update: the hook is put back on the pod
            // (reference `UpdatePodLifecycleWithHandler`).
            if let Some(hook) = self
                .cs
                .spec
                .lifecycle
                .as_ref()
                .and_then(|l| l.in_place_update.as_ref())
            {
                for (k, v) in &hook.labels_handler {
                    body["metadata"]["labels"][k] = json!(v);
                }
                if !hook.finalizers_handler.is_empty() {
                    body["metadata"]["finalizers"] = json!(hook.finalizers_handler);
                }
            }
        }
        let pod_labels = pod.labels();
        if pod_labels
            .get(keys::LIFECYCLE_STATE_LABEL)
            .map(String::as_str)
            == Some(to.as_str())
            && body["metadata"].get("finalizers").is_none()
        {
            return Ok(());
        }
        self.patch_pod(pod, body, "set lifecycle of", false).await?;
        debug!(pod = %name, ?from, to = %to, "lifecycle state changed");
        Ok(())
    }

    /// Adds or removes our key in the `KruisePodReady` condition's message list (only on
    /// pods with that readiness gate, like the reference).
    async fn set_not_ready_key(&self, pod: &Pod, key: &str, add: bool) -> Result<(), Error> {
        if !has_gate(pod, keys::KRUISE_POD_READY_CONDITION) {
            return Ok(());
        }
        let ours = NotReadyMessage {
            user_agent: NOT_READY_USER_AGENT.into(),
            key: key.into(),
        };
        let Some((status, message)) = kruise_pod_ready(pod, &ours, add) else {
            return Ok(());
        };
        self.patch_pod_status(
            pod,
            json!({"conditions": [{
                "type": keys::KRUISE_POD_READY_CONDITION,
                "status": status,
                "message": message,
                "lastTransitionTime": now_time(),
            }]}),
            false,
        )
        .await
    }
}

/// The reference's `UpdateSpec` for a planner [`InPlaceChange`](crate::plan::inplace::InPlaceChange):
/// images and resources by container, labels/annotations as a strategic merge patch
/// (`null` removes a key).
pub fn spec_from_change(
    change: &crate::plan::inplace::InPlaceChange,
    revision: &str,
    grace_seconds: i32,
) -> Result<InPlaceUpdateGrace, Error> {
    // Keys that a container's env reads are written with that container's batch
    // (`containerRefMetadata`), as the reference does; removals stay in the patch.
    let per_container = |field: &str, key: &str| {
        change.env_from_metadata.values().any(|m| {
            let map = if field == "labels" {
                &m.labels
            } else {
                &m.annotations
            };
            map.as_ref().is_some_and(|m| m.contains_key(key))
        })
    };
    let mut meta = serde_json::Map::new();
    for (field, entries) in [
        ("labels", &change.labels),
        ("annotations", &change.annotations),
    ] {
        let map: serde_json::Map<String, Value> = entries
            .iter()
            .filter(|(k, _)| !per_container(field, k))
            .map(|(k, v)| (k.clone(), v.as_ref().map_or(Value::Null, |v| json!(v))))
            .collect();
        if map.is_empty() {
            continue;
        }
        meta.insert(field.to_owned(), Value::Object(map));
    }
    let meta_data_patch = if meta.is_empty() {
        String::new()
    } else {
        encode(&json!({ "metadata": meta }), "metaDataPatch")?
    };
    Ok(InPlaceUpdateGrace {
        revision: revision.to_owned(),
        container_images: change.images.clone(),
        container_resources: change.resources.clone(),
        container_ref_metadata: change.env_from_metadata.clone(),
        update_env_from_metadata: !change.env_from_metadata.is_empty(),
        restart_containers: change.restarts.iter().cloned().collect(),
        meta_data_patch,
        grace_seconds,
        ..InPlaceUpdateGrace::default()
    })
}

/// Runs `futs` with at most `limit` in flight; results in completion order.
async fn bounded<F: std::future::Future>(futs: Vec<F>, limit: usize) -> Vec<F::Output> {
    let mut pending = futs.into_iter();
    let mut running = futures::stream::FuturesUnordered::new();
    for f in pending.by_ref().take(limit.max(1)) {
        running.push(f);
    }
    let mut out = Vec::new();
    while let Some(r) = running.next().await {
        out.push(r);
        if let Some(f) = pending.next() {
            running.push(f);
        }
    }
    out
}

/// A raw JSON object as a [`DynamicObject`] (every field kept).
fn dynamic(value: Value, what: &str) -> Result<DynamicObject, Error> {
    serde_json::from_value(value).map_err(|source| Error::Encode {
        what: format!("{what} built by the planner"),
        source,
    })
}

fn encode<T: serde::Serialize>(value: &T, what: &str) -> Result<String, Error> {
    serde_json::to_string(value).map_err(|source| Error::Encode {
        what: what.to_owned(),
        source,
    })
}

/// Whether the pod has a readiness gate of this condition type.
pub fn has_gate(pod: &Pod, condition: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.condition_type == condition))
}

/// Readiness-gate conditions to set True on `pod`:
/// - `KruisePodReady` when absent;
/// - `InPlaceUpdateReady` when no in-place update is held or running on the pod and the
///   condition is absent, or False from an update of ours whose spec patch never landed
///   (reason `StartInPlaceUpdate`, no state annotation) and `updating` is false (no
///   update of the pod is planned now).
pub fn gate_conditions_to_set(pod: &Pod, updating: bool) -> Vec<&'static str> {
    let conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[]);
    let find = |t: &str| conditions.iter().find(|c| c.type_ == t);
    let annotations = pod.annotations();
    let in_progress = [
        keys::INPLACE_UPDATE_STATE_ANNOTATION,
        keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY,
        keys::INPLACE_UPDATE_GRACE_ANNOTATION,
        keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY,
    ]
    .iter()
    .any(|k| annotations.contains_key(*k));
    let mut out = Vec::new();
    if has_gate(pod, keys::INPLACE_UPDATE_READY_CONDITION) && !in_progress {
        let set = match find(keys::INPLACE_UPDATE_READY_CONDITION) {
            None => true,
            Some(c) => {
                c.status != "True"
                    && c.reason.as_deref() == Some(keys::START_INPLACE_UPDATE_REASON)
                    && !updating
            }
        };
        if set {
            out.push(keys::INPLACE_UPDATE_READY_CONDITION);
        }
    }
    if has_gate(pod, keys::KRUISE_POD_READY_CONDITION)
        && find(keys::KRUISE_POD_READY_CONDITION).is_none()
    {
        out.push(keys::KRUISE_POD_READY_CONDITION);
    }
    out
}

/// Immediate retries of an in-place update write that hit a conflict (each after a fresh
/// read of the pod that still passes [`still_updatable`]).
const CONFLICT_RETRIES: u32 = 3;

/// Whether an in-place update planned from `planned` may be written to `fresh` (the pod as
/// the API server has it now), i.e. everything the decision and the patch content read
/// is unchanged: the same pod (UID), not terminating, on the same revision and lifecycle
/// state, every container on the same image ID (the state's `lastContainerStatuses`), and
/// with `gate_set`, `InPlaceUpdateReady` still False (the spec never changes on a pod the
/// endpoints still count as ready). What may differ: anything else the kubelet writes to
/// the status (Ready, probe times), which is why the version differs.
pub fn still_updatable(planned: &Pod, fresh: &Pod, gate_set: bool) -> Result<(), String> {
    if fresh.uid() != planned.uid() {
        return Err("the pod was replaced (other UID)".into());
    }
    if fresh.metadata.deletion_timestamp.is_some() {
        return Err("the pod is terminating".into());
    }
    for label in [keys::REVISION_LABEL, keys::LIFECYCLE_STATE_LABEL] {
        if fresh.labels().get(label) != planned.labels().get(label) {
            return Err(format!("label {label} changed"));
        }
    }
    let image_ids = |p: &Pod| -> BTreeMap<String, String> {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .map(|c| (c.name.clone(), c.image_id.clone()))
            .collect()
    };
    if image_ids(fresh) != image_ids(planned) {
        return Err("a container's image ID changed".into());
    }
    let images = |p: &Pod| -> Vec<(String, Option<String>)> {
        p.spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| (c.name.clone(), c.image.clone()))
            .collect()
    };
    if images(fresh) != images(planned) {
        return Err("a container's spec image changed".into());
    }
    if gate_set {
        let gate = fresh
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == keys::INPLACE_UPDATE_READY_CONDITION)
            });
        if gate.is_none_or(|c| c.status != "False") {
            return Err(format!(
                "{} is no longer False",
                keys::INPLACE_UPDATE_READY_CONDITION
            ));
        }
    }
    Ok(())
}

/// Delete options that only delete the object with this UID: a replacement of the same
/// name (a new pod reusing the instance id) is never deleted by a stale decision.
fn delete_only_uid(uid: &str) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodReadinessGate, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod_with(gates: &[&str], conditions: &[&str], annotations: &[&str]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                annotations: Some(
                    annotations
                        .iter()
                        .map(|a| ((*a).to_owned(), "{}".to_owned()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                readiness_gates: Some(
                    gates
                        .iter()
                        .map(|g| PodReadinessGate {
                            condition_type: (*g).into(),
                        })
                        .collect(),
                ),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|c| PodCondition {
                            type_: (*c).into(),
                            status: "False".into(),
                            ..PodCondition::default()
                        })
                        .collect(),
                ),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn new_pods_get_their_gate_conditions() {
        let p = pod_with(&[keys::INPLACE_UPDATE_READY_CONDITION], &[], &[]);
        assert_eq!(
            gate_conditions_to_set(&p, false),
            vec![keys::INPLACE_UPDATE_READY_CONDITION]
        );
        let p = pod_with(
            &[keys::INPLACE_UPDATE_READY_CONDITION],
            &[keys::INPLACE_UPDATE_READY_CONDITION],
            &[],
        );
        assert!(gate_conditions_to_set(&p, false).is_empty());
        let p = pod_with(
            &[keys::INPLACE_UPDATE_READY_CONDITION],
            &[],
            &[keys::INPLACE_UPDATE_STATE_ANNOTATION],
        );
        assert!(gate_conditions_to_set(&p, false).is_empty());
        let p = pod_with(&[], &[], &[]);
        assert!(gate_conditions_to_set(&p, false).is_empty());
        let p = pod_with(&[keys::KRUISE_POD_READY_CONDITION], &[], &[]);
        assert_eq!(
            gate_conditions_to_set(&p, false),
            vec![keys::KRUISE_POD_READY_CONDITION]
        );
    }

    #[test]
    fn a_condition_left_false_by_a_failed_update_is_restored() {
        let mut p = pod_with(
            &[keys::INPLACE_UPDATE_READY_CONDITION],
            &[keys::INPLACE_UPDATE_READY_CONDITION],
            &[],
        );
        if let Some(c) = p
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .and_then(|c| c.first_mut())
        {
            c.reason = Some(keys::START_INPLACE_UPDATE_REASON.into());
        }
        assert_eq!(
            gate_conditions_to_set(&p, false),
            vec![keys::INPLACE_UPDATE_READY_CONDITION]
        );
        assert!(gate_conditions_to_set(&p, true).is_empty());
    }

    #[test]
    fn refresh_actions_run_as_one_phase_in_per_pod_chains() {
        let complete = |p: &str| Action::CompleteInPlaceUpdate { pod: p.into() };
        let normal = |p: &str| Action::Lifecycle {
            pod: p.into(),
            from: Some(LifecycleState::Updating),
            to: LifecycleState::Normal,
            mark_not_ready: None,
        };
        let actions = [
            complete("a"),
            normal("a"),
            complete("b"),
            normal("b"),
            Action::ApplyGracedUpdate { pod: "c".into() },
        ];
        assert!(actions.iter().all(|a| phase_of(a) == phase_of(&actions[0])));
        let phase: Vec<&Action> = actions.iter().collect();
        let chains = by_pod(&phase);
        assert_eq!(chains.len(), 3);
        assert_eq!(chains[0], vec![&actions[0], &actions[1]]);
        assert_eq!(chains[1], vec![&actions[2], &actions[3]]);
        assert_eq!(chains[2], vec![&actions[4]]);
        // Actions without a pod stay one chain each.
        let prune = Action::PrunePodsToDelete { names: vec![] };
        let pvc = Action::DeletePvc { pvc: "x".into() };
        assert_eq!(by_pod(&[&prune, &pvc]).len(), 2);
        assert_ne!(phase_of(&prune), phase_of(&actions[0]));
    }

    fn updatable_pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u1", "resourceVersion": "10",
                         "labels": {keys::REVISION_LABEL: "cs-old", keys::LIFECYCLE_STATE_LABEL: "Normal"}},
            "spec": {"containers": [{"name": "app", "image": "app:v1"}]},
            "status": {
                "conditions": [{"type": keys::INPLACE_UPDATE_READY_CONDITION, "status": "False"},
                               {"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "app", "image": "app:v1", "imageID": "sha-1",
                                       "ready": true, "restartCount": 0}],
            },
        }))
        .unwrap_or_default()
    }

    #[test]
    fn a_conflicting_write_is_retried_only_on_the_same_pod_and_revision() {
        let planned = updatable_pod();
        assert_eq!(planned.uid().as_deref(), Some("u1"));
        type Edit = fn(&mut Pod);
        let cases: Vec<(&str, Edit, bool, bool)> = vec![
            // (what changed, edit, gate_set, retry allowed)
            (
                "nothing but the version",
                |p| p.metadata.resource_version = Some("11".into()),
                true,
                true,
            ),
            (
                "the kubelet's Ready condition",
                |p| {
                    if let Some(c) = p.status.as_mut().and_then(|s| s.conditions.as_mut()) {
                        c[1].status = "False".into();
                    }
                },
                true,
                true,
            ),
            (
                "the UID (recreated)",
                |p| p.metadata.uid = Some("u2".into()),
                true,
                false,
            ),
            (
                "terminating",
                |p| {
                    p.metadata.deletion_timestamp = Some(now_time());
                },
                true,
                false,
            ),
            (
                "the revision",
                |p| {
                    p.metadata
                        .labels
                        .get_or_insert_default()
                        .insert(keys::REVISION_LABEL.into(), "cs-new".into());
                },
                true,
                false,
            ),
            (
                "the lifecycle state",
                |p| {
                    p.metadata
                        .labels
                        .get_or_insert_default()
                        .insert(keys::LIFECYCLE_STATE_LABEL.into(), "PreparingDelete".into());
                },
                true,
                false,
            ),
            (
                "the image ID",
                |p| {
                    if let Some(c) = p
                        .status
                        .as_mut()
                        .and_then(|s| s.container_statuses.as_mut())
                    {
                        c[0].image_id = "sha-2".into();
                    }
                },
                true,
                false,
            ),
            (
                "the spec image",
                |p| {
                    if let Some(s) = p.spec.as_mut() {
                        s.containers[0].image = Some("app:v9".into());
                    }
                },
                true,
                false,
            ),
            (
                "the gate turned True",
                |p| {
                    if let Some(c) = p.status.as_mut().and_then(|s| s.conditions.as_mut()) {
                        c[0].status = "True".into();
                    }
                },
                true,
                false,
            ),
            (
                "the gate True, not required",
                |p| {
                    if let Some(c) = p.status.as_mut().and_then(|s| s.conditions.as_mut()) {
                        c[0].status = "True".into();
                    }
                },
                false,
                true,
            ),
        ];
        for (what, edit, gate_set, allowed) in cases {
            let mut fresh = planned.clone();
            edit(&mut fresh);
            assert_eq!(
                still_updatable(&planned, &fresh, gate_set).is_ok(),
                allowed,
                "{what}"
            );
        }
    }

    #[test]
    fn spec_from_change_carries_the_restarts() -> Result<(), Error> {
        let mut change = crate::plan::inplace::InPlaceChange::default();
        change.annotations.insert(
            keys::RESTARTED_AT_ANNOTATION.into(),
            Some("2026-01-02T00:00:00Z".into()),
        );
        change.restarts = ["main".to_owned(), "side".to_owned()].into();
        let spec = spec_from_change(&change, "cs-abc", 0)?;
        assert_eq!(spec.restart_containers, ["main", "side"]);
        assert!(spec.container_images.is_empty());
        // The annotation itself goes onto the pod, as with Deployments.
        assert!(spec.meta_data_patch.contains(keys::RESTARTED_AT_ANNOTATION));
        Ok(())
    }

    #[test]
    fn spec_from_change_writes_a_metadata_patch() -> Result<(), Error> {
        let mut change = crate::plan::inplace::InPlaceChange::default();
        change.images.insert("app".into(), "img:v2".into());
        change.labels.insert("a".into(), Some("1".into()));
        change.annotations.insert("b".into(), None);
        let spec = spec_from_change(&change, "cs-abc", 5)?;
        assert_eq!(spec.container_images["app"], "img:v2");
        assert_eq!(spec.grace_seconds, 5);
        let meta: Value =
            serde_json::from_str(&spec.meta_data_patch).map_err(|source| Error::Encode {
                what: "test".into(),
                source,
            })?;
        assert_eq!(
            meta,
            json!({"metadata": {"labels": {"a": "1"}, "annotations": {"b": null}}})
        );
        Ok(())
    }

    #[test]
    fn not_ready_message_uses_reference_json() -> Result<(), serde_json::Error> {
        let m = NotReadyMessage {
            user_agent: "ContainerRecreateRequest".into(),
            key: "preparingDelete".into(),
        };
        assert_eq!(
            serde_json::to_string(&vec![m])?,
            r#"[{"userAgent":"ContainerRecreateRequest","key":"preparingDelete"}]"#
        );
        Ok(())
    }
}
