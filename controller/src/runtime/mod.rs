//! The CloneSet reconciler: watches → snapshot → plan → apply → status.
//!
//! One `kube::runtime::Controller` over CloneSets, fed by the shared pod / PVC /
//! ControllerRevision / node watches of [`crate::watch`]. A reconcile:
//! 1. waits for the caches to be synced;
//! 2. skips planning while earlier writes are not observed yet ([`crate::expectations`]);
//! 3. builds the [`Snapshot`](crate::plan::Snapshot) from the stores and asks the planner;
//! 4. carries the plan out ([`apply`]) and writes the status ([`status_writer`]).
//!
//! The modules import downwards only: this loop imports the writers, the writers import
//! [`context`] (what they share), and `context` imports none of them but the ImagePullJob
//! cache it holds ([`predownload_jobs`], read into the snapshot).

pub mod apply;
pub mod context;
pub mod last_write;
pub mod predownload_jobs;
pub mod status_writer;

pub use context::{Context, Settings, key_of};

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use inplace_proto::CloneSet;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt};
use tracing::{Instrument, debug, info, info_span, trace, warn};

use crate::discovery::ServerCapabilities;
use crate::error::Error;
use crate::events::EventSink;
use crate::expectations::Expectations;
use crate::metrics::{CloneSetLabels, ErrorLabels, ExpectationLabels, Metrics};
use crate::plan::sending::RETRY_SET_ASIDE;
use crate::plan::status_write::StatusWrite;
use crate::server::Health;
use crate::watch::Stores;

/// The span of one reconcile: every line logged in it names the CloneSet
/// (`cloneset=namespace/name`; a field of the `span` object in JSON logs).
pub fn reconcile_span(namespace: &str, name: &str) -> tracing::Span {
    info_span!("reconcile", cloneset = %format_args!("{namespace}/{name}"))
}

/// How long a reconcile waits for the caches' first list before it fails (and is retried
/// with backoff; `/readyz` says the same meanwhile). Two minutes, as controller-runtime's
/// `CacheSyncTimeout`: 100,000 pods took 30 s on the bed, over the 30 s this was before,
/// so every restart there logged the CloneSets due as failed.
const CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs one reconcile of `cs`, once the caches have listed and it has a worker
/// ([`crate::turns`]).
pub async fn reconcile(cs: Arc<CloneSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    // The caches first, holding no worker: 100,000 pods took 30 s to list on the bed, and
    // the CloneSets due meanwhile would sit on every worker.
    let mut synced = ctx.synced.clone();
    if !matches!(
        tokio::time::timeout(CACHE_SYNC_TIMEOUT, synced.wait_for(|s| *s)).await,
        Ok(Ok(_))
    ) {
        return Err(Error::CacheNotReady("pods/pvcs/revisions/nodes"));
    }
    // Waiting for a worker is time in the queue (`inplace_workqueue_*`), not reconciling.
    // Every CloneSet that falls due waits here: the reconcile's own state (about 9 KB) is
    // allocated only once it has its worker.
    let Some(_turn) = ctx.turns.take().await else {
        debug!(cloneset = %key_of(&cs), "stopping: the reconcile waiting for a worker is not started");
        return Ok(Action::await_change());
    };
    Box::pin(reconcile_now(cs, &ctx)).await
}

async fn reconcile_now(cs: Arc<CloneSet>, ctx: &Context) -> Result<Action, Error> {
    let key = key_of(&cs);
    let span = reconcile_span(&cs.namespace().unwrap_or_default(), &cs.name_any());
    let started = Instant::now();
    ctx.metrics.queue_start(&key, started);
    let result = reconcile_inner(&cs, ctx, &key).instrument(span).await;
    crate::metrics::observe(&ctx.metrics, started.elapsed());
    let labels = CloneSetLabels::new(&cs.namespace().unwrap_or_default(), &cs.name_any());
    ctx.metrics.reconciles.get_or_create(&labels).inc();
    let gone = ctx
        .stores
        .clonesets
        .get(&kube::runtime::reflector::ObjectRef::from_obj(cs.as_ref()))
        .is_none();
    if gone {
        // Deleted while it was reconciled: the series just written go with it.
        ctx.metrics.forget(&labels);
        ctx.status_writes.forget(&cs.uid().unwrap_or_default());
        seen_pods_to_delete(ctx, &cs).forget();
    }
    let result = end_of_deleted(result, gone);
    if result.is_ok() {
        ctx.failures().remove(&key);
    }
    result
}

/// The result of a reconcile of a CloneSet that is gone from the store by its end: a
/// failure (a write to the deleted object or its pods answered NotFound) has nothing left
/// to retry, so the reconcile ends without an error and nothing is requeued.
fn end_of_deleted(result: Result<Action, Error>, gone: bool) -> Result<Action, Error> {
    match result {
        Err(err) if gone => {
            debug!(error = %err, "CloneSet deleted during its reconcile; not retried");
            Ok(Action::await_change())
        }
        other => other,
    }
}

/// How [`run`] (and the ImagePullJob and ContainerRecreateRequest controllers) log one
/// result of a controller's stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamOutcome {
    Reconciled,
    /// A reconcile was due (a requeue, a change of one of its pods) for an object that is
    /// no longer in the store: deleted, nothing to do. Not an error.
    Gone,
    Failed,
}

impl StreamOutcome {
    pub(crate) fn of<T, E: 'static, Q: 'static>(
        result: &Result<T, kube::runtime::controller::Error<E, Q>>,
    ) -> Self {
        match result {
            Ok(_) => Self::Reconciled,
            Err(kube::runtime::controller::Error::ObjectNotFound(_)) => Self::Gone,
            Err(_) => Self::Failed,
        }
    }
}

/// Drains the results of one of the binary's other controllers (ImagePullJob,
/// ImageListPullJob, ContainerRecreateRequest, launch priority): an object gone before its
/// reconcile is nothing to do; a failure was logged by the controller's error policy, and
/// is noted here only at debug level.
pub(crate) async fn drain_results<S, T, E, Q>(results: S, what: &'static str)
where
    S: futures::Stream<Item = Result<T, kube::runtime::controller::Error<E, Q>>>,
    E: std::error::Error + 'static,
    Q: std::error::Error + 'static,
{
    results
        .for_each(|r| async move {
            match (StreamOutcome::of(&r), r) {
                (StreamOutcome::Gone, Err(e)) => {
                    tracing::trace!(error = %e, "deleted; nothing to do");
                }
                (_, Err(e)) => tracing::debug!(error = %e, "{what} reconcile"),
                (_, Ok(_)) => {}
            }
        })
        .await;
}

async fn reconcile_inner(cs: &CloneSet, ctx: &Context, key: &str) -> Result<Action, Error> {
    ctx.metrics
        .cached_pods
        .set(i64::try_from(ctx.stores.pods.len()).unwrap_or(i64::MAX));

    let ns = cs.namespace().unwrap_or_default();
    if let Some(step) = crate::plan::protection::planned(cs, ctx.settings.deletion_protection) {
        // A held deletion writes nothing and goes on; a finalizer written ends the
        // reconcile: plan on the object that carries the change.
        let writes = !matches!(step.action, crate::plan::Action::HoldDeletion { .. });
        send_steps(ctx, cs, &crate::watch::Owned::default(), vec![step]).await?;
        if writes {
            return Ok(Action::requeue(Duration::from_millis(200)));
        }
    }
    if cs.metadata.deletion_timestamp.is_some() {
        // Pods, PVCs and revisions carry owner references: the garbage collector removes them.
        ctx.expectations.forget(key);
        ctx.status_writes.forget(&cs.uid().unwrap_or_default());
        seen_pods_to_delete(ctx, cs).forget();
        ctx.metrics
            .forget(&CloneSetLabels::new(&ns, &cs.name_any()));
        return Ok(Action::await_change());
    }

    let check = ctx.expectations.check(key, &ctx.stores.view(&ns));
    for kind in &check.expired {
        warn!(
            kind,
            "expectation timed out; planning from the cache as it is"
        );
        ctx.metrics
            .expectation_timeouts
            .get_or_create(&ExpectationLabels {
                kind: (*kind).to_owned(),
            })
            .inc();
    }
    if !check.satisfied() {
        debug!(
            unobserved = check.unobserved,
            "waiting for our writes to be observed"
        );
        ctx.metrics
            .reconciles_skipped_expectations
            .get_or_create(&CloneSetLabels::new(&ns, &cs.name_any()))
            .inc();
        let wait = check
            .next_deadline
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(5));
        return Ok(Action::requeue(wait.max(Duration::from_millis(200))));
    }

    let violations = crate::plan::validate::cloneset(cs);
    if !violations.is_empty() {
        // What the CRD's CEL rules (dropped by servers before 1.25) or the reference's
        // webhook refuse is reported, and nothing is done for this CloneSet: e.g. a
        // template outside its own selector would make pods that never belong to it.
        let message = crate::plan::validate::summary(&violations);
        report_invalid(ctx, cs, &message).await?;
        return Ok(Action::requeue(ctx.settings.resync));
    }
    let owned = ctx.stores.owned(cs);
    let claims = crate::plan::claim::steps(cs, &claim_candidates(&ctx.stores, cs, &owned));
    if !claims.is_empty() {
        // Adopted / released pods change what the CloneSet owns: plan once the cache
        // shows them with their new owner (each write is expected).
        send_steps(ctx, cs, &owned, claims).await?;
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let seen = seen_pods_to_delete(ctx, cs).update(&owned.pods);
    let jobs = ctx.predownload.as_ref().and_then(|pd| pd.jobs_of(cs));
    let snapshot = crate::plan::Snapshot {
        cloneset: cs,
        pods: &owned.pods,
        pvcs: &owned.pvcs,
        revisions: &owned.revisions,
        nodes: &owned.nodes,
        now: k8s_openapi::jiff::Timestamp::now(),
        options: &ctx.settings.plan_options,
        pods_to_delete_seen: &seen,
        pre_download: jobs.as_deref().map(|jobs| crate::plan::PreDownloadInput {
            jobs,
            update_order: ctx.settings.predownload_update_order,
        }),
    };
    let plan = match run_planner(snapshot) {
        Ok(plan) => plan,
        Err(Error::Plan(err)) => {
            // An invalid CloneSet is reported, not retried: its next change triggers us.
            report_invalid(ctx, cs, &err.to_string()).await?;
            return Ok(Action::requeue(ctx.settings.resync));
        }
        Err(other) => return Err(other),
    };
    debug!(
        actions = plan.steps.len(),
        problems = plan.problems.len(),
        update_revision = %plan.revisions.update_revision,
        "planned"
    );

    let sending = Instant::now();
    let outcome = apply::execute(ctx, cs, &owned, &plan).await;
    let sent_in = sending.elapsed();
    status_writer::write(ctx, cs, &plan.status_write, &outcome).await?;
    // The pace of a rollout is read from these (`inplace-rollout-bench`'s pace line).
    debug!(
        steps = plan.steps.len(),
        sent_ms = sent_in.as_millis(),
        status_ms = (sending.elapsed() - sent_in).as_millis(),
        "sent"
    );
    for error in &outcome.set_aside {
        // As OpenKruise, a failed pre-download write does not fail the reconcile.
        warn!(%error, "image pre-download write failed; trying again soon");
    }
    let set_aside_retry = (!outcome.set_aside.is_empty()).then_some(RETRY_SET_ASIDE);
    let conflicts_passed = outcome.conflicts_passed;
    if let Some(err) = outcome.into_error() {
        return Err(err);
    }
    let requeue = match (plan.requeue_after, set_aside_retry) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(Action::requeue(next_reconcile(
        ctx.settings.resync,
        requeue,
        conflicts_passed,
    )))
}

/// The memory of `cs`'s `podsToDelete` names seen matching a pod.
struct SeenPodsToDelete<'c> {
    ctx: &'c Context,
    cs: &'c CloneSet,
}

fn seen_pods_to_delete<'c>(ctx: &'c Context, cs: &'c CloneSet) -> SeenPodsToDelete<'c> {
    SeenPodsToDelete { ctx, cs }
}

impl SeenPodsToDelete<'_> {
    /// The names seen before this reconcile; remembers those matching one of `pods` now
    /// (of the names still listed only).
    fn update(
        &self,
        pods: &[std::sync::Arc<crate::watch::CachedPod>],
    ) -> std::collections::BTreeSet<String> {
        let uid = self.cs.uid().unwrap_or_default();
        let listed = self
            .cs
            .spec
            .scale_strategy
            .as_ref()
            .map_or(&[][..], |s| s.pods_to_delete.as_slice());
        let mut memory = self
            .ctx
            .pods_to_delete_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = memory.get(&uid).cloned().unwrap_or_default();
        let present: std::collections::BTreeSet<&str> = if listed.is_empty() {
            std::collections::BTreeSet::new()
        } else {
            pods.iter()
                .map(|p| p.metadata.name.as_deref().unwrap_or_default())
                .collect()
        };
        let next = crate::plan::pods_to_delete::remember(listed, &present, &before);
        if next.is_empty() {
            memory.remove(&uid);
        } else {
            memory.insert(uid, next);
        }
        before
    }

    fn forget(&self) {
        self.ctx
            .pods_to_delete_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.cs.uid().unwrap_or_default());
    }
}

/// How soon a conflict that was let pass is checked again when no watch event came first.
/// A real API server answers 409 to a pinned write only when the pod has a newer version,
/// whose event triggers the next reconcile; an injected 409 (the fault suite's proxy) or
/// a lost event has no such follow-up, and the next resync (5 minutes) is too late for a
/// rollout that waits on the pod.
pub const RECHECK_AFTER_CONFLICT: Duration = Duration::from_secs(2);

/// When a successful reconcile is due again: at the resync, sooner if the plan waits
/// for a moment (at least 100 ms off) or a write's conflict was let pass.
fn next_reconcile(
    resync: Duration,
    plan_requeue: Option<Duration>,
    conflicts_passed: usize,
) -> Duration {
    let mut next = resync;
    if let Some(after) = plan_requeue {
        next = next.min(after.max(Duration::from_millis(100)));
    }
    if conflicts_passed > 0 {
        next = next.min(RECHECK_AFTER_CONFLICT);
    }
    next
}

/// Sends `steps`, planned instead of a plan (the finalizer, the claims), through the
/// applier; their first failure is the reconcile's.
async fn send_steps(
    ctx: &Context,
    cs: &CloneSet,
    owned: &crate::watch::Owned,
    steps: Vec<crate::plan::Step>,
) -> Result<(), Error> {
    let plan = crate::plan::Plan {
        steps,
        ..crate::plan::Plan::default()
    };
    match apply::execute(ctx, cs, owned, &plan).await.into_error() {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

/// Pods of `cs`'s namespace that it may adopt (no controller) or must release (controlled
/// by it but left out of `owned`, i.e. no longer matching its selector).
fn claim_candidates(stores: &Stores, cs: &CloneSet, owned: &crate::watch::Owned) -> Vec<Pod> {
    let ns = cs.namespace().unwrap_or_default();
    let uid = cs.uid().unwrap_or_default();
    let kept: std::collections::BTreeSet<&str> = owned
        .pods
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    stores
        .pods
        .state_filter(|p| {
            let meta = &p.metadata;
            if meta.namespace.as_deref() != Some(ns.as_str()) {
                return false;
            }
            let controller = meta
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true));
            match controller {
                None => true,
                Some(o) => o.uid == uid && !kept.contains(meta.name.as_deref().unwrap_or_default()),
            }
        })
        .iter()
        .map(|p| p.to_pod())
        .collect()
}

/// Reports a CloneSet the planner cannot work with ([`StatusWrite::invalid`]).
async fn report_invalid(ctx: &Context, cs: &CloneSet, message: &str) -> Result<(), Error> {
    let write = StatusWrite::invalid(cs, message, k8s_openapi::jiff::Timestamp::now());
    status_writer::write(ctx, cs, &write, &apply::Outcome::default()).await
}

/// Calls the planner.
fn run_planner(snapshot: crate::plan::Snapshot<'_>) -> Result<crate::plan::Plan, Error> {
    crate::plan::plan(snapshot).map_err(Error::Plan)
}

/// Retry policy after a failed reconcile: per-CloneSet exponential backoff.
pub fn error_policy(cs: Arc<CloneSet>, err: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&cs);
    ctx.metrics
        .reconcile_errors
        .get_or_create(&ErrorLabels {
            reason: err.metric_label().to_owned(),
        })
        .inc();
    let attempts = {
        let mut failures = ctx.failures();
        let n = failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let delay = backoff(err.base_retry(), attempts, Duration::from_secs(300));
    if err.retry_class().quiet() {
        // A write refused by its precondition: counted above (reason "conflict"), and
        // decided again from the newer object.
        debug!(cloneset = %key, error = %err, attempts, retry_in = ?delay, "conflict: the object changed since it was read; deciding again");
    } else {
        warn!(cloneset = %key, error = %err, attempts, retry_in = ?delay, "reconcile failed");
    }
    Action::requeue(delay)
}

/// `base · 2^(attempts-1)`, capped, with up to 10% jitter. The schedule is backon's
/// exponential backoff; the jitter is added here because backon's adds up to 100%.
pub fn backoff(base: Duration, attempts: u32, cap: Duration) -> Duration {
    use backon::BackoffBuilder as _;
    // Past 20 doublings every delay is the cap; the bound keeps `nth` short.
    let nth = attempts.saturating_sub(1).min(20) as usize;
    let raw = backon::ExponentialBuilder::default()
        .with_min_delay(base)
        .with_max_delay(cap)
        .with_factor(2.0)
        .without_max_times()
        .build()
        .nth(nth)
        .unwrap_or(cap)
        .min(cap);
    let jitter = rand::random::<f64>() * 0.1;
    raw.mul_f64(1.0 + jitter).min(cap)
}

/// Builds the controller and runs it until `shutdown` resolves.
pub async fn run(
    client: Client,
    caps: ServerCapabilities,
    settings: Settings,
    events: EventSink,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let cs_api = settings.scope.api::<CloneSet>(&client);
    let (part, streams) = crate::watch::secondary_watches(&client, &settings.scope);
    let pod_triggers = if settings.event_handler_optimization {
        crate::pod_events::filter_pod_triggers(streams.pods, part.pods.clone()).boxed()
    } else {
        streams.pods
    };
    let (cs_reader, cs_writer) = kube::runtime::reflector::store();
    // A pod's change queues its CloneSet (for inplace_workqueue_depth), if it exists: the
    // pods of a deleted CloneSet trigger nothing the controller runs.
    let queue_metrics = metrics.clone();
    let queued_clonesets = cs_reader.clone();
    let pod_triggers = pod_triggers.inspect(move |pod| {
        if let Ok(pod) = pod {
            let owner = pod.metadata.owner_references.iter().flatten().find(|o| {
                o.controller == Some(true)
                    && o.kind == "CloneSet"
                    && o.api_version.starts_with("apps.kruise.io/")
            });
            if let (Some(o), Some(ns)) = (owner, pod.metadata.namespace.as_deref())
                && queued_clonesets
                    .get(&kube::runtime::reflector::ObjectRef::new(&o.name).within(ns))
                    .is_some()
            {
                queue_metrics.queue_add(&format!("{ns}/{}", o.name), Instant::now());
            }
        }
    });
    // The CloneSet watch of the controller, with its events seen on the way: a change
    // queues the CloneSet, a deletion removes its metric series (a CloneSet without a
    // finalizer is gone before any reconcile could see its deletionTimestamp).
    let cs_metrics = metrics.clone();
    let clonesets = watcher(cs_api, watcher::Config::default())
        .backoff(crate::watch_backoff::relist())
        .reflect(cs_writer)
        .inspect(move |event| match event {
            Ok(watcher::Event::Apply(cs) | watcher::Event::InitApply(cs)) => {
                cs_metrics.queue_add(&key_of(cs), Instant::now());
            }
            Ok(watcher::Event::Delete(cs)) => {
                cs_metrics.queue_drop(&key_of(cs));
                cs_metrics.forget(&CloneSetLabels::new(
                    &cs.namespace().unwrap_or_default(),
                    &cs.name_any(),
                ));
            }
            _ => {}
        })
        .applied_objects();
    // No limit in the runner: `reconcile` takes its turn among `settings.workers` in the
    // order the CloneSets fell due (kube-runtime's limit is not fair: see `crate::turns`).
    let turns = Arc::new(crate::turns::Turns::new(settings.workers));
    let (predownload, job_triggers) = match predownload_jobs::PreDownloader::start(
        &client,
        &settings.scope,
        settings.plan_options.pre_download_image,
    ) {
        Some((cache, triggers)) => (Some(cache), Some(triggers)),
        None => (None, None),
    };
    let controller = Controller::for_stream(clonesets, cs_reader)
        .with_config(ControllerConfig::default().concurrency(0))
        // Every stream backs off by itself; a trigger pause would stop all of them for
        // one failing watch (see `watch_backoff`).
        .trigger_backoff(crate::watch_backoff::NoPause)
        .owns_stream(pod_triggers)
        .owns_stream(streams.pvcs)
        .owns_stream(streams.revisions)
        .watches_stream(streams.nodes, |_| std::iter::empty())
        .graceful_shutdown_on(turns.clone().close_after(shutdown));
    // A job's change queues the CloneSet that controls it: the job a CloneSet must delete
    // once converged may reach the cache after the CloneSet's last change.
    let controller = match job_triggers {
        Some(jobs) => controller.owns_stream(jobs),
        None => controller,
    };
    let stores = part.with_clonesets(controller.store());
    let (synced_tx, synced) = tokio::sync::watch::channel(false);
    let ctx = Arc::new(Context {
        predownload,
        client,
        stores,
        expectations: Expectations::new(settings.expectation_timeout),
        events,
        metrics,
        health,
        caps,
        settings,
        failures: Mutex::new(HashMap::new()),
        pods_to_delete_seen: Mutex::new(HashMap::new()),
        status_writes: last_write::LastWrites::default(),
        synced,
        turns,
    });
    {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            if ctx.stores.wait_ready().await.is_ok() {
                ctx.health.caches_synced.store(true, Ordering::Relaxed);
                synced_tx.send_replace(true);
                info!(
                    clonesets = ctx.stores.clonesets.len(),
                    pods = ctx.stores.pods.len(),
                    "caches synced"
                );
            }
        });
    }
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            match (StreamOutcome::of(&res), res) {
                (_, Ok((obj, _))) => debug!(cloneset = %obj, "reconciled"),
                (StreamOutcome::Gone, Err(err)) => trace!(%err, "CloneSet deleted; nothing to do"),
                (_, Err(err)) => debug!(%err, "reconcile error"),
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_reconcile_is_sooner_after_a_conflict_let_pass() {
        let resync = Duration::from_secs(300);
        let ms = Duration::from_millis;
        let table = [
            // (plan's requeue, conflicts let pass, next)
            (None, 0, resync),
            (Some(ms(5000)), 0, ms(5000)),
            (Some(ms(10)), 0, ms(100)),
            (None, 1, RECHECK_AFTER_CONFLICT),
            (None, 3, RECHECK_AFTER_CONFLICT),
            (Some(ms(500)), 1, ms(500)),
            (Some(ms(60_000)), 1, RECHECK_AFTER_CONFLICT),
        ];
        for (plan, passed, want) in table {
            assert_eq!(
                next_reconcile(resync, plan, passed),
                want,
                "{plan:?} {passed}"
            );
        }
        // A resync shorter than the recheck stays.
        assert_eq!(next_reconcile(ms(1000), None, 1), ms(1000));
    }

    #[test]
    fn a_deleted_cloneset_ends_its_reconcile_without_an_error() {
        let failed = || Err(Error::CacheNotReady("pods"));
        // Gone from the store: the failure is not retried.
        assert_eq!(
            end_of_deleted(failed(), true).ok(),
            Some(Action::await_change())
        );
        // Still there: the failure stands (error_policy retries it).
        assert!(end_of_deleted(failed(), false).is_err());
        // Success is kept as it is, gone or not.
        let requeue = Action::requeue(Duration::from_secs(3));
        for gone in [false, true] {
            assert_eq!(
                end_of_deleted(Ok(requeue.clone()), gone).ok(),
                Some(requeue.clone())
            );
        }
    }

    #[test]
    fn a_reconcile_due_for_a_deleted_cloneset_is_not_an_error() {
        use kube::runtime::controller::Error as ControllerError;
        use kube::runtime::reflector::ObjectRef;
        type Result = std::result::Result<(), ControllerError<Error, std::io::Error>>;

        let gone: Result = Err(ControllerError::ObjectNotFound(Box::new(
            ObjectRef::<CloneSet>::new("demo").within("ns").erase(),
        )));
        assert_eq!(StreamOutcome::of(&gone), StreamOutcome::Gone);
        let failed: Result = Err(ControllerError::ReconcilerFailed(
            Error::CacheNotReady("pods"),
            Box::new(ObjectRef::<CloneSet>::new("demo").within("ns").erase()),
        ));
        assert_eq!(StreamOutcome::of(&failed), StreamOutcome::Failed);
        let queue: Result = Err(ControllerError::QueueError(std::io::Error::other("watch")));
        assert_eq!(StreamOutcome::of(&queue), StreamOutcome::Failed);
        assert_eq!(
            StreamOutcome::of(&Result::Ok(())),
            StreamOutcome::Reconciled
        );
    }

    #[test]
    fn backoff_grows_and_caps() {
        let base = Duration::from_secs(1);
        let cap = Duration::from_secs(60);
        assert!(backoff(base, 1, cap) < Duration::from_millis(1101));
        assert!(backoff(base, 3, cap) >= Duration::from_secs(4));
        assert_eq!(backoff(base, 30, cap), cap);
    }
}
