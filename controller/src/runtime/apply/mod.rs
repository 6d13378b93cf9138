//! Carries out a [`Plan`]: ControllerRevisions, pods, PVCs, in-place updates, lifecycle
//! labels, `podsToDelete` pruning.
//!
//! Rules:
//! - every write is recorded as an expectation before the next plan may run;
//! - deletes carry a UID precondition, spec patches a resourceVersion precondition, so a
//!   decision made on a stale cache fails (409) instead of hitting the wrong object;
//! - pod conditions are written by strategic merge patch on `pods/status` (conditions merge
//!   by type, so the kubelet's own conditions are never overwritten);
//! - consecutive steps of one kind form a phase; a phase runs with bounded parallelism
//!   (creates in slow-start batches 1, 2, 4, …); the first phase with a failure ends the
//!   step, and the failure is reported (event, condition, retry with backoff).
//!
//! Each step of the plan holds its action's write ([`crate::plan::step`]); the applier
//! sends it as it is (a step whose write could not be planned fails with its typed error).
//!
//! This module runs the phases and holds what every write shares (the APIs, patch helpers,
//! expectations, events); the writes themselves are in:
//! - `revisions`: ControllerRevisions;
//! - `writes`: the planned writes of the other actions ([`crate::plan::action_write`])
//!   sent by one path: `pod-template-hash`, `podsToDelete` pruning, PVC deletion and
//!   hand-over, `InPlaceUpdateReady` completion and stall reports, and the steps taken
//!   before a plan ([`execute_steps`]): the deletion-protection finalizer and the
//!   adoption and release of pods;
//! - `pods`: create (from the plan's recipe), delete, recreate, with their events;
//! - `inplace`: the in-place writes the plan made (start, held update, next batch,
//!   resize); `conflict`: their guarded retry after a conflict;
//! - `conditions`: readiness-gate conditions; `lifecycle`: the lifecycle state.

mod conditions;
mod conflict;
mod inplace;
mod lifecycle;
mod pods;
mod revisions;
#[cfg(test)]
mod tests;
mod writes;

pub use crate::plan::inplace_write::{spec_from_change, still_updatable};
pub use crate::plan::pod_conditions::has_gate;

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures::StreamExt;
use inplace_proto::{CloneSet, keys};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;
use tracing::{debug, info, warn};

use crate::error::Error;
use crate::events::Note;
use crate::expectations::Expectation;
use crate::metrics::CloneSetLabels;
use crate::plan::{Action, Plan, Step, StepWrite, UpdateMethod};
use crate::runtime::context::{Context, key_of};
use crate::watch::{CachedPod, Owned};

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
    /// Writes answered 409 that were not failures: the pod is judged again from its newer
    /// version. That version's watch event normally triggers the next reconcile; the
    /// reconcile is requeued soon as well, in case no event comes.
    pub conflicts_passed: usize,
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
    /// The cached pods by name; [`Actor::pod`] builds the full pod of one it writes.
    pods: BTreeMap<&'a str, &'a CachedPod>,
    revisions_ok: AtomicBool,
    /// [`Outcome::conflicts_passed`] so far.
    conflicts_passed: AtomicUsize,
    left: LeftVersions,
}

/// Per pod name: the resourceVersion our last write of this execution left on the pod. A
/// later write of the same pod in the same execution is pinned to it (the cached pod's
/// version is outdated by our own write).
#[derive(Debug, Default)]
struct LeftVersions(Mutex<HashMap<String, String>>);

impl LeftVersions {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes what a pod write left (from its expectation).
    fn record(&self, written: &Expectation) {
        if let Expectation::PodUpdated {
            name,
            resource_version,
            ..
        } = written
            && !resource_version.is_empty()
        {
            self.map().insert(name.clone(), resource_version.clone());
        }
    }

    /// The version a write of `pod` is pinned to: what our last write of it left, else the
    /// cached pod's own.
    fn pin_for(&self, pod: &Pod) -> Option<String> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        self.map()
            .get(name)
            .cloned()
            .or_else(|| pod.resource_version())
    }
}

fn now_time() -> Time {
    Time(Timestamp::now())
}

fn now_rfc3339() -> String {
    inplace_proto::LifecycleState::timestamp(Timestamp::now())
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
        // Written one at a time in plan order, the first failure ending the reconcile
        // ([`Actor::run_steps`]).
        Action::AddFinalizer { .. }
        | Action::RemoveFinalizer { .. }
        | Action::HoldDeletion { .. } => "finalizer",
        Action::AdoptPod { .. } | Action::ReleasePod { .. } => "claim",
    }
}

/// Whether the steps of a phase run one after the other, the first failure ending it.
fn sequential(phase: &str) -> bool {
    matches!(phase, "finalizer" | "claim")
}

/// The steps of a phase in chains: one per pod (its steps in plan order), one per step
/// without a pod; chains in order of first appearance.
fn by_pod<'b>(phase: &[&'b Step]) -> Vec<Vec<&'b Step>> {
    let mut chains: Vec<Vec<&Step>> = Vec::new();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for action in phase {
        match action.pod() {
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
    Actor::new(ctx, cs, owned, plan).run().await
}

/// Sends the steps of `plan` alone: no revisions, no readiness-gate conditions. For the
/// steps a reconcile takes instead of planning (the deletion-protection finalizer, the
/// adoption and release of pods: [`crate::plan::protection::planned`],
/// [`crate::plan::claim::steps`]).
pub async fn execute_steps(ctx: &Context, cs: &CloneSet, owned: &Owned, plan: &Plan) -> Outcome {
    let actor = Actor::new(ctx, cs, owned, plan);
    let mut outcome = Outcome::default();
    actor.run_steps(&mut outcome).await;
    outcome.conflicts_passed = actor.conflicts_passed.load(Ordering::Relaxed);
    outcome
}

impl<'a> Actor<'a> {
    fn new(ctx: &'a Context, cs: &'a CloneSet, owned: &'a Owned, plan: &'a Plan) -> Self {
        let ns = cs.namespace().unwrap_or_default();
        Actor {
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
                .filter_map(|p| p.metadata.name.as_deref().map(|n| (n, &**p)))
                .collect(),
            ns,
            revisions_ok: AtomicBool::new(true),
            conflicts_passed: AtomicUsize::new(0),
            left: LeftVersions::default(),
        }
    }
}

impl Actor<'_> {
    /// The API of kind `K` in the CloneSet's namespace.
    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
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

    fn pp(&self) -> PatchParams {
        PatchParams {
            field_manager: Some(self.ctx.settings.field_manager.clone()),
            ..PatchParams::default()
        }
    }

    fn expect(&self, e: Expectation) {
        self.left.record(&e);
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

    /// The full pod `name` (built from its cached form) for a write to it.
    fn pod(&self, name: &str) -> Result<Pod, Error> {
        self.pods
            .get(name)
            .map(|p| p.to_pod())
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
            outcome.skipped = self.plan.steps.len();
            return outcome;
        }
        self.init_pod_conditions(&mut outcome).await;
        let failed = self.run_steps(&mut outcome).await;
        if self.revisions_ok.load(Ordering::Relaxed)
            && !failed
            && let Err(err) = self.delete_old_revisions().await
        {
            outcome.failures.push(Failure {
                kind: FailureKind::Update,
                error: err,
            });
        }
        outcome.conflicts_passed = self.conflicts_passed.load(Ordering::Relaxed);
        outcome
    }

    /// Runs the plan's steps phase by phase; whether one failed.
    async fn run_steps(&self, outcome: &mut Outcome) -> bool {
        let mut phases: Vec<Vec<&Step>> = Vec::new();
        for step in &self.plan.steps {
            match phases.last_mut() {
                Some(last)
                    if last.first().map(|s| phase_of(&s.action))
                        == Some(phase_of(&step.action)) =>
                {
                    last.push(step);
                }
                _ => phases.push(vec![step]),
            }
        }
        let mut failed = false;
        for phase in phases {
            if failed {
                outcome.skipped += phase.len();
                continue;
            }
            let kind = phase.first().map(|s| phase_of(&s.action));
            let results = if phase
                .first()
                .is_some_and(|s| matches!(s.action, Action::Create { .. }))
            {
                self.run_slow_start(&phase).await
            } else if kind.is_some_and(sequential) {
                self.act_chain(phase.clone()).await
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
            for (step, result) in results {
                if let Err(error) = result {
                    failed = true;
                    outcome.failures.push(Failure {
                        kind: failure_kind(&step.action),
                        error,
                    });
                }
            }
        }
        failed
    }

    /// A write answered 409 is let pass (see [`Outcome::conflicts_passed`]).
    fn pass_conflict(&self) {
        self.conflicts_passed.fetch_add(1, Ordering::Relaxed);
    }

    /// The result of a write pinned to the version judged: a 409 is no failure (the object
    /// is judged again from its newer version) and is let pass. Whether it was written.
    fn written_or_passed(&self, result: Result<(), Error>) -> Result<bool, Error> {
        match result {
            Ok(()) => Ok(true),
            Err(e) if e.is_conflict() => {
                self.pass_conflict();
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Creates in batches of 1, 2, 4, … and stops after the first batch with a failure.
    async fn run_slow_start<'b>(&self, phase: &[&'b Step]) -> Vec<(&'b Step, Result<(), Error>)> {
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

    async fn act_tagged<'b>(&self, step: &'b Step) -> (&'b Step, Result<(), Error>) {
        (step, self.act_boxed(step).await)
    }

    /// [`Actor::act`] on the heap. The future of `act` holds the state of every API call
    /// an action may make (several KiB); a phase builds the futures of all its actions
    /// before [`bounded`] starts the first 16, so inlined, a 1,000-pod phase held ~4 MiB
    /// per reconcile of futures not yet started (the largest transient allocation while
    /// creating 10,000 pods, found with heaptrack). Boxed, a future not yet started holds
    /// its arguments only, and the action's state is allocated when it runs.
    async fn act_boxed(&self, step: &Step) -> Result<(), Error> {
        Box::pin(self.act(step)).await
    }

    /// Runs the steps of one pod in order; after a failure the rest are not attempted
    /// (not returned).
    async fn act_chain<'b>(&self, chain: Vec<&'b Step>) -> Vec<(&'b Step, Result<(), Error>)> {
        let mut out = Vec::with_capacity(chain.len());
        for action in chain {
            let result = self.act_boxed(action).await;
            let failed = result.is_err();
            out.push((action, result));
            if failed {
                break;
            }
        }
        out
    }

    /// Sends the write `step` holds, with what goes around it (events, metrics); a write
    /// the planner could not make fails the step with its typed error.
    async fn act(&self, step: &Step) -> Result<(), Error> {
        let action = &step.action;
        debug!(?action, "acting");
        let write = step.write.as_ref().map_err(|e| Error::from(e.clone()));
        match (action, write) {
            (
                Action::Update {
                    pod,
                    method: UpdateMethod::InPlace,
                    revision,
                },
                write,
            ) => self.update_in_place(pod, revision, action, write).await,
            (_, Err(err)) => Err(err),
            (Action::HoldDeletion { message }, _) => {
                self.ctx.events.send(Note {
                    regarding: self.cs_ref.clone(),
                    related: None,
                    warning: true,
                    reason: crate::plan::protection::REASON_HELD.to_owned(),
                    action: "Delete".to_owned(),
                    message: message.clone(),
                });
                info!(%message, "deletion held");
                Ok(())
            }
            (_, Ok(StepWrite::Nothing { why })) => {
                debug!(?action, why, "nothing to write");
                Ok(())
            }
            (Action::Lifecycle { pod, .. }, Ok(StepWrite::Lifecycle(write))) => {
                self.lifecycle(pod, write, action).await
            }
            (Action::CompleteInPlaceUpdate { pod }, Ok(StepWrite::Completion(write))) => {
                self.complete_in_place(pod, write).await
            }
            (
                Action::ApplyGracedUpdate { pod } | Action::ApplyNextContainerBatch { pod },
                Ok(StepWrite::InPlace(write)),
            ) => self.apply_planned(pod, write).await,
            (_, Ok(StepWrite::Object(write))) => self.act_planned(action, write).await,
            (_, Ok(other)) => Err(mismatch(action, other)),
        }
    }

    /// The one pod write: a strategic merge patch of pod `name`, or of its `pods/status`
    /// (conditions merge by type), sent as it is (a precondition is in `body`); the pod
    /// written is expected at the version the server answered. `what` names the write in
    /// its error.
    async fn send_pod_patch(
        &self,
        name: &str,
        status: bool,
        body: Value,
        what: impl FnOnce() -> String,
    ) -> Result<Pod, Error> {
        let (api, pp, patch) = (self.api::<Pod>(), self.pp(), Patch::Strategic(body));
        let sent = if status {
            api.patch_status(name, &pp, &patch).await
        } else {
            api.patch(name, &pp, &patch).await
        };
        let written = sent.map_err(|e| Error::kube(what(), e))?;
        self.expect_written(name, &written);
        Ok(written)
    }

    /// Records the pod `written` (as the server answered a write of pod `name`).
    fn expect_written(&self, name: &str, written: &Pod) {
        self.expect(Expectation::PodUpdated {
            name: name.to_owned(),
            uid: written.uid().unwrap_or_default(),
            resource_version: written.resource_version().unwrap_or_default(),
        });
    }

    /// [`Self::send_pod_patch`] of the `pods/status` of pod `name`.
    async fn patch_pod_status_body(&self, name: &str, body: Value) -> Result<(), Error> {
        self.send_pod_patch(name, true, body, || format!("patch status of pod {name}"))
            .await
            .map(drop)
    }
}

/// A step whose write is not of its action's kind (a plan made wrong by hand).
fn mismatch(action: &Action, write: &StepWrite) -> Error {
    Error::NotCached(format!("a write of {action:?} (the plan has {write:?})"))
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
