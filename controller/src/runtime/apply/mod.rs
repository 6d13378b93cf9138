//! Sends a [`Plan`]: ControllerRevisions, the initial readiness-gate conditions, then the
//! steps, each as the plan holds its write ([`crate::plan::step`]). What is decided around
//! the sending (phases, failure conditions, which conflicts pass, events, counters, error
//! texts, what a refused write means, the tally) is the plan's ([`crate::plan::sending`],
//! [`crate::plan::resend`], [`crate::plan::outcome`]).
//!
//! Every write is recorded as an expectation before the next plan may run; deletes carry
//! a UID precondition, patches a resourceVersion one, so a decision made on a stale cache
//! fails (409) instead of hitting the wrong object; pod conditions go by strategic merge
//! patch on `pods/status` (merged by type, the kubelet's own never overwritten). Sends are
//! in `send`, `inplace` (with the re-read on 409), `conditions` and `revisions`.

mod conditions;
mod inplace;
mod revisions;
mod send;
#[cfg(test)]
pub(super) mod tests;

pub use crate::plan::sending::FailureKind;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use inplace_proto::CloneSet;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, Patch};
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;
use tracing::{debug, info, warn};

use crate::error::Error;
use crate::events::Note;
use crate::expectations::Expectation;
use crate::metrics::CloneSetLabels;
use crate::plan::outcome::{self, LeftVersions};
use crate::plan::sending::{self, Report, Sent};
use crate::plan::{Plan, Step};
use crate::runtime::context::{Context, key_of};
use crate::watch::{CachedPod, Owned};

/// What happened while sending a plan ([`crate::plan::outcome`]).
pub type Outcome = outcome::Outcome<Error>;
/// One failed write.
pub type Failure = outcome::Failure<Error>;

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
    /// The cached pods by name ([`Actor::cached`]).
    pods: BTreeMap<&'a str, &'a CachedPod>,
    /// [`Outcome::conflicts_passed`] so far.
    conflicts_passed: AtomicUsize,
    left: LeftVersions,
}

fn now_time() -> Time {
    Time(Timestamp::now())
}

fn now_rfc3339() -> String {
    inplace_proto::LifecycleState::timestamp(Timestamp::now())
}

/// Carries out `plan` for `cs`. A plan of steps alone (the deletion-protection finalizer,
/// the adoption and release of pods: [`crate::plan::protection::planned`],
/// [`crate::plan::claim::steps`]) writes no revision and no readiness-gate condition.
pub async fn execute(ctx: &Context, cs: &CloneSet, owned: &Owned, plan: &Plan) -> Outcome {
    Actor::new(ctx, cs, owned, plan).run().await
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
            conflicts_passed: AtomicUsize::new(0),
            left: LeftVersions::default(),
        }
    }

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

    fn expect(&self, e: Expectation) {
        self.ctx.expectations.expect(&self.key, e);
    }

    /// The cached pod `name`, which a write to it needs.
    fn cached(&self, name: &str) -> Result<&CachedPod, Error> {
        let cached = self.pods.get(name).copied();
        cached.ok_or_else(|| Error::NotCached(format!("pod {}/{name}", self.ns)))
    }

    async fn run(&self) -> Outcome {
        if let Err(error) = self.write_revisions().await {
            return Outcome::revisions_failed(self.plan.steps.len(), error);
        }
        let mut outcome = Outcome::default();
        self.init_pod_conditions(&mut outcome).await;
        if !self.run_steps(&mut outcome).await
            && let Err(error) = self.delete_old_revisions().await
        {
            outcome.fail(FailureKind::Update, error);
        }
        outcome.conflicts_passed = self.conflicts_passed.load(Ordering::Relaxed);
        outcome
    }

    /// Runs the plan's steps phase by phase ([`sending::phases`]), each in its batches of
    /// chains ([`sending::batches`]); whether one failed (a failure set aside does not,
    /// [`sending::fails_reconcile`]).
    async fn run_steps(&self, outcome: &mut Outcome) -> bool {
        let mut failed = false;
        for phase in sending::phases(&self.plan.steps) {
            if failed {
                outcome.skipped += phase.len();
                continue;
            }
            let mut results = Vec::new();
            for batch in sending::batches(&phase) {
                let futs: Vec<_> = batch.into_iter().map(|c| self.act_chain(c)).collect();
                let sent = bounded(futs, self.ctx.settings.api_parallelism).await;
                let sent: Vec<_> = sent.into_iter().flatten().collect();
                let batch_failed = sent.iter().any(|(_, r)| r.is_err());
                results.extend(sent);
                if batch_failed {
                    break;
                }
            }
            let results =
                outcome.set_failures_aside(results, |s| !sending::fails_reconcile(&s.action));
            failed = outcome.tally(phase.len(), results, |s| FailureKind::of(&s.action));
        }
        failed
    }

    /// `result`, a 409 let pass (counted in [`Outcome::conflicts_passed`]).
    fn pass_if_conflict(&self, result: Result<(), Error>) -> Result<(), Error> {
        match result {
            Err(e) if e.is_conflict() => {
                self.conflicts_passed.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            other => other,
        }
    }

    /// Runs the steps of one chain in order; after a failure the rest are not attempted
    /// (not returned). Each [`Actor::act`] runs on the heap: its future holds the state
    /// of every API call a step may make (several KiB), and a phase builds the futures of
    /// all its chains before [`bounded`] starts the first; boxed, a future not yet started
    /// holds its arguments only.
    async fn act_chain<'b>(&self, chain: Vec<&'b Step>) -> Vec<(&'b Step, Result<(), Error>)> {
        let mut out = Vec::with_capacity(chain.len());
        for step in chain {
            let result = Box::pin(self.act(step)).await;
            let failed = result.is_err();
            out.push((step, result));
            if failed {
                break;
            }
        }
        out
    }

    /// Sends the write `step` holds ([`Actor::send`]; a write the planner could not make
    /// fails the step with its typed error), then says what the plan says about it
    /// ([`sending::report`]); then what follows it ([`sending::follow_ups`]).
    async fn act(&self, step: &Step) -> Result<(), Error> {
        let action = &step.action;
        debug!(?action, "acting");
        if let Some(pod) = sending::needs_cached_pod(action) {
            self.cached(pod)?;
        }
        let result = match &step.write {
            Err(e) => Err(Error::from(e.clone())),
            Ok(write) => self.send(action, write).await,
        };
        let failed = result
            .as_ref()
            .err()
            .map(|e| (e.is_conflict(), e.to_string()));
        let sent = Sent::of(action, step.write.is_ok(), failed);
        let result = match sent {
            Sent::Passed => self.pass_if_conflict(result),
            _ => result,
        };
        self.report(sending::report(step, &sent))?;
        if result.is_ok() {
            for pvc in sending::follow_ups(step) {
                self.delete_pvc(pvc).await?;
            }
        }
        result
    }

    /// Sends the event, counts the metric and logs the line of `report`. An event
    /// regarding a pod needs the pod cached.
    fn report(&self, report: Report) -> Result<(), Error> {
        if let Some(line) = report.log {
            info!("{line}");
        }
        if let Some(counter) = report.counter {
            let family = self.ctx.metrics.pods_counter(counter);
            family.get_or_create(&self.labels).inc();
        }
        let Some(e) = report.event else {
            return Ok(());
        };
        let cached = |name: &str| self.pods.get(name).map(|p| p.to_pod().object_ref(&()));
        let (regarding, related) = e
            .objects(&self.cs_ref, &self.ns, cached)
            .map_err(|name| Error::NotCached(format!("pod {}/{name}", self.ns)))?;
        if e.warning {
            warn!(reason = e.reason, message = %e.message, "event");
        } else {
            info!(reason = e.reason, message = %e.message, "event");
        }
        self.ctx.events.send(Note::of(e, regarding, related));
        Ok(())
    }

    /// The one pod write: a strategic merge patch of pod `name`, or of its subresource
    /// `sub` (`status`: conditions merge by type; `resize`), sent as it is (a precondition
    /// is in `body`); the pod written is expected at the version the server answered, and
    /// a later write of it in this execution pinned to that version. `what` names the write
    /// in its error.
    async fn send_pod_patch(
        &self,
        name: &str,
        sub: Option<&str>,
        body: Value,
        what: impl FnOnce() -> String,
    ) -> Result<Pod, Error> {
        let (api, pp) = (self.api::<Pod>(), self.ctx.settings.patch_params());
        let patch = Patch::Strategic(body);
        let sent = match sub {
            Some(sub) => api.patch_subresource(sub, name, &pp, &patch).await,
            None => api.patch(name, &pp, &patch).await,
        };
        let written = sent.map_err(|e| Error::kube(what(), e))?;
        let resource_version = written.resource_version().unwrap_or_default();
        self.left.record(name, &resource_version);
        self.expect(Expectation::PodUpdated {
            name: name.to_owned(),
            uid: written.uid().unwrap_or_default(),
            resource_version,
        });
        Ok(written)
    }

    /// [`Self::send_pod_patch`] of the `pods/status` of pod `name`.
    async fn patch_pod_status_body(&self, name: &str, body: Value) -> Result<(), Error> {
        let what = || format!("patch status of pod {name}");
        self.send_pod_patch(name, Some("status"), body, what)
            .await
            .map(drop)
    }
}

/// Runs `futs` with at most `limit` in flight; results in completion order.
async fn bounded<F: std::future::Future>(futs: Vec<F>, limit: usize) -> Vec<F::Output> {
    let running = futures::stream::iter(futs).buffer_unordered(limit.max(1));
    running.collect().await
}
