//! The Prometheus metrics of the controller (served by [`crate::server`]).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels naming one CloneSet.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloneSetLabels {
    pub namespace: String,
    pub cloneset: String,
}

impl CloneSetLabels {
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            cloneset: name.to_owned(),
        }
    }
}

/// Labels of a reconcile error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub reason: String,
}

/// Labels of an expectation that timed out.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExpectationLabels {
    pub kind: String,
}

/// Labels of a request to the API server.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiRequestLabels {
    pub verb: String,
    pub code: String,
}

/// Labels of a request's duration.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiVerbLabels {
    pub verb: String,
}

/// Labels of `inplace_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildInfoLabels {
    pub version: String,
    pub revision: String,
}

type DurationFamily = Family<ApiVerbLabels, Histogram, fn() -> Histogram>;

fn api_duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.002, 2.0, 14))
}

/// The `revision` label of `inplace_build_info`: the git revision the build was given
/// (`INPLACE_GIT_REVISION` at compile time, set by `deploy/images/build` and the
/// Containerfile), or `unknown`.
pub fn build_revision(given: Option<&'static str>) -> &'static str {
    match given.map(str::trim) {
        Some(r) if !r.is_empty() => r,
        _ => "unknown",
    }
}

/// Every metric the controller exports.
#[derive(Debug)]
pub struct Metrics {
    pub reconciles: Family<CloneSetLabels, Counter>,
    pub reconcile_duration: Histogram,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconciles_skipped_expectations: Family<CloneSetLabels, Counter>,
    pub pods_created: Family<CloneSetLabels, Counter>,
    pub pods_deleted: Family<CloneSetLabels, Counter>,
    pub pods_updated_in_place: Family<CloneSetLabels, Counter>,
    pub pods_recreated: Family<CloneSetLabels, Counter>,
    pub expectation_timeouts: Family<ExpectationLabels, Counter>,
    pub rollout_replicas: Family<CloneSetLabels, Gauge>,
    pub rollout_updated_replicas: Family<CloneSetLabels, Gauge>,
    pub rollout_updated_ready_replicas: Family<CloneSetLabels, Gauge>,
    pub rollout_expected_updated_replicas: Family<CloneSetLabels, Gauge>,
    pub leader: Gauge,
    pub cached_pods: Gauge,
    pub api_requests: Family<ApiRequestLabels, Counter>,
    pub api_request_duration: DurationFamily,
    pub build_info: Family<BuildInfoLabels, Gauge>,
    /// CloneSets waiting for a reconcile (see [`Metrics::queue_add`]).
    pub workqueue_depth: Gauge,
    /// From a CloneSet's first trigger to the start of its reconcile.
    pub workqueue_queue_duration: Histogram,
    /// `namespace/name` → when its oldest unanswered trigger came.
    waiting: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The family a pod write of the plan counts in ([`crate::plan::sending::report`]).
    pub fn pods_counter(
        &self,
        counter: crate::plan::sending::Counter,
    ) -> &Family<CloneSetLabels, Counter> {
        use crate::plan::sending::Counter as Pods;
        match counter {
            Pods::PodsCreated => &self.pods_created,
            Pods::PodsDeleted => &self.pods_deleted,
            Pods::PodsRecreated => &self.pods_recreated,
            Pods::PodsUpdatedInPlace => &self.pods_updated_in_place,
        }
    }

    pub fn new() -> Self {
        // The standard process metrics are unprefixed; everything else is `inplace_`.
        let mut root = Registry::default();
        root.register_collector(Box::new(inplace_proto::process_metrics::ProcessCollector));
        let registry = root.sub_registry_with_prefix("inplace");
        let reconciles = Family::<CloneSetLabels, Counter>::default();
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconciles_skipped_expectations = Family::<CloneSetLabels, Counter>::default();
        let pods_created = Family::<CloneSetLabels, Counter>::default();
        let pods_deleted = Family::<CloneSetLabels, Counter>::default();
        let pods_updated_in_place = Family::<CloneSetLabels, Counter>::default();
        let pods_recreated = Family::<CloneSetLabels, Counter>::default();
        let expectation_timeouts = Family::<ExpectationLabels, Counter>::default();
        let rollout_replicas = Family::<CloneSetLabels, Gauge>::default();
        let rollout_updated_replicas = Family::<CloneSetLabels, Gauge>::default();
        let rollout_updated_ready_replicas = Family::<CloneSetLabels, Gauge>::default();
        let rollout_expected_updated_replicas = Family::<CloneSetLabels, Gauge>::default();
        let leader = Gauge::default();
        let cached_pods = Gauge::default();
        let api_requests = Family::<ApiRequestLabels, Counter>::default();
        let api_request_duration: DurationFamily =
            Family::new_with_constructor(api_duration_histogram);
        let build_info = Family::<BuildInfoLabels, Gauge>::default();
        let workqueue_depth = Gauge::default();
        let workqueue_queue_duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        build_info
            .get_or_create(&BuildInfoLabels {
                version: env!("CARGO_PKG_VERSION").to_owned(),
                revision: build_revision(option_env!("INPLACE_GIT_REVISION")).to_owned(),
            })
            .set(1);
        registry.register(
            "api_requests",
            "Requests to the API server by verb and answer (HTTP status, `fenced`: refused by the leadership fence, `error`: no answer)",
            api_requests.clone(),
        );
        registry.register(
            "api_request_duration_seconds",
            "Duration of requests to the API server by verb (watches not counted)",
            api_request_duration.clone(),
        );
        registry.register(
            "build_info",
            "1, labelled with the version and the source revision of the binary",
            build_info.clone(),
        );
        registry.register(
            "workqueue_depth",
            "CloneSets triggered (by a change of the CloneSet or of a pod it owns) whose reconcile has not started yet",
            workqueue_depth.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "Time a triggered CloneSet waited until its reconcile started",
            workqueue_queue_duration.clone(),
        );
        registry.register("reconciles", "CloneSet reconciles run", reconciles.clone());
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one CloneSet reconcile",
            reconcile_duration.clone(),
        );
        registry.register(
            "reconcile_errors",
            "CloneSet reconciles that failed, by reason",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconciles_waiting_expectations",
            "Reconciles skipped because earlier writes were not observed yet",
            reconciles_skipped_expectations.clone(),
        );
        registry.register("pods_created", "Pods created", pods_created.clone());
        registry.register("pods_deleted", "Pods deleted", pods_deleted.clone());
        registry.register(
            "pods_updated_in_place",
            "Pods whose in-place update was applied",
            pods_updated_in_place.clone(),
        );
        registry.register(
            "pods_recreated",
            "Pods marked for recreation by an update",
            pods_recreated.clone(),
        );
        registry.register(
            "expectation_timeouts",
            "Expectations dropped because the cache never observed them",
            expectation_timeouts.clone(),
        );
        registry.register(
            "cloneset_replicas",
            "status.replicas of the CloneSet",
            rollout_replicas.clone(),
        );
        registry.register(
            "cloneset_updated_replicas",
            "status.updatedReplicas of the CloneSet (rollout progress)",
            rollout_updated_replicas.clone(),
        );
        registry.register(
            "cloneset_updated_ready_replicas",
            "status.updatedReadyReplicas of the CloneSet",
            rollout_updated_ready_replicas.clone(),
        );
        registry.register(
            "cloneset_expected_updated_replicas",
            "status.expectedUpdatedReplicas of the CloneSet (rollout target)",
            rollout_expected_updated_replicas.clone(),
        );
        registry.register(
            "leader",
            "1 while this instance holds the leader lease",
            leader.clone(),
        );
        registry.register(
            "cached_pods",
            "Pods in the controller's cache",
            cached_pods.clone(),
        );
        Self {
            reconciles,
            reconcile_duration,
            reconcile_errors,
            reconciles_skipped_expectations,
            pods_created,
            pods_deleted,
            pods_updated_in_place,
            pods_recreated,
            expectation_timeouts,
            rollout_replicas,
            rollout_updated_replicas,
            rollout_updated_ready_replicas,
            rollout_expected_updated_replicas,
            leader,
            cached_pods,
            api_requests,
            api_request_duration,
            build_info,
            workqueue_depth,
            workqueue_queue_duration,
            waiting: std::sync::Mutex::default(),
            registry: root,
        }
    }

    fn waiting(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, std::time::Instant>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The CloneSet `key` was triggered at `at` (client-go's workqueue `Add`): it counts
    /// in the depth until its reconcile starts; a second trigger before that is the same
    /// item, as in the reconciler's queue.
    pub fn queue_add(&self, key: &str, at: std::time::Instant) {
        let mut waiting = self.waiting();
        waiting.entry(key.to_owned()).or_insert(at);
        self.workqueue_depth
            .set(i64::try_from(waiting.len()).unwrap_or(i64::MAX));
    }

    /// The reconcile of `key` starts at `at`: it leaves the queue, and the time it waited
    /// since its first trigger is observed. A reconcile nobody triggered (a requeue after
    /// a delay) observes nothing.
    pub fn queue_start(&self, key: &str, at: std::time::Instant) {
        let mut waiting = self.waiting();
        if let Some(since) = waiting.remove(key) {
            self.workqueue_queue_duration
                .observe(at.saturating_duration_since(since).as_secs_f64());
        }
        self.workqueue_depth
            .set(i64::try_from(waiting.len()).unwrap_or(i64::MAX));
    }

    /// `key` was deleted: it will not be reconciled.
    pub fn queue_drop(&self, key: &str) {
        let mut waiting = self.waiting();
        waiting.remove(key);
        self.workqueue_depth
            .set(i64::try_from(waiting.len()).unwrap_or(i64::MAX));
    }

    /// Counts one request to the API server (its duration too unless it is a watch).
    pub fn record_api_request(&self, verb: &str, code: &str, took: Duration) {
        self.api_requests
            .get_or_create(&ApiRequestLabels {
                verb: verb.to_owned(),
                code: code.to_owned(),
            })
            .inc();
        if verb != "watch" {
            self.api_request_duration
                .get_or_create(&ApiVerbLabels {
                    verb: verb.to_owned(),
                })
                .observe(took.as_secs_f64());
        }
    }

    /// Text exposition of every metric.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// Records the rollout figures of a status just written.
    pub fn record_status(&self, labels: &CloneSetLabels, status: &inplace_proto::CloneSetStatus) {
        self.rollout_replicas
            .get_or_create(labels)
            .set(i64::from(status.replicas));
        self.rollout_updated_replicas
            .get_or_create(labels)
            .set(i64::from(status.updated_replicas));
        self.rollout_updated_ready_replicas
            .get_or_create(labels)
            .set(i64::from(status.updated_ready_replicas));
        self.rollout_expected_updated_replicas
            .get_or_create(labels)
            .set(i64::from(
                status.expected_updated_replicas.unwrap_or(status.replicas),
            ));
    }

    /// Drops every per-CloneSet series of a deleted CloneSet (counters too: a CloneSet
    /// created again under the same name starts from zero, as a restarted process would).
    pub fn forget(&self, labels: &CloneSetLabels) {
        for counters in self.per_cloneset_counters() {
            counters.remove(labels);
        }
        for gauges in self.per_cloneset_gauges() {
            gauges.remove(labels);
        }
    }

    /// The counter families with a series per CloneSet (all of them: [`Self::forget`]
    /// removes exactly these).
    fn per_cloneset_counters(&self) -> [&Family<CloneSetLabels, Counter>; 6] {
        [
            &self.reconciles,
            &self.reconciles_skipped_expectations,
            &self.pods_created,
            &self.pods_deleted,
            &self.pods_updated_in_place,
            &self.pods_recreated,
        ]
    }

    /// The gauge families with a series per CloneSet.
    fn per_cloneset_gauges(&self) -> [&Family<CloneSetLabels, Gauge>; 4] {
        [
            &self.rollout_replicas,
            &self.rollout_updated_replicas,
            &self.rollout_updated_ready_replicas,
            &self.rollout_expected_updated_replicas,
        ]
    }
}

/// Observes the duration of a reconcile.
pub fn observe(metrics: &Metrics, elapsed: Duration) {
    metrics.reconcile_duration.observe(elapsed.as_secs_f64());
}

#[cfg(test)]
mod tests;
