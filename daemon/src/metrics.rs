//! Prometheus metrics of the daemon.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: String,
}

/// All metrics; cheap to clone (every metric is an `Arc` inside).
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Pull RPCs in flight right now.
    pub pulls_in_flight: Gauge,
    /// Finished pull tasks by result (succeeded / failed).
    pub pulls: Family<ResultLabel, Counter>,
    /// Duration of finished pull tasks (seconds, all attempts).
    pub pull_duration: Family<ResultLabel, Histogram>,
    /// Pull attempts that were retried.
    pub pull_retries: Counter,
    /// Containers the daemon stopped so that the kubelet restarts them, by reason.
    pub restarts: Family<ReasonLabel, Counter>,
    /// Pods marked InPlaceUpdateReady=True.
    pub inplace_completed: Counter,
    /// CRR phase transitions written, by phase.
    pub crr_phases: Family<PhaseLabel, Counter>,
    /// Status writes to the API by result.
    pub status_writes: Family<ResultLabel, Counter>,
    /// containerd events received.
    pub runtime_events: Counter,
}

fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.05, 2.0, 14))
}

impl Metrics {
    /// New metrics, registered in `registry` under the `inplace_daemon` prefix.
    pub fn new(registry: &mut Registry) -> Self {
        let m = Self {
            pulls_in_flight: Gauge::default(),
            pulls: Family::default(),
            pull_duration: Family::new_with_constructor(duration_histogram),
            pull_retries: Counter::default(),
            restarts: Family::default(),
            inplace_completed: Counter::default(),
            crr_phases: Family::default(),
            status_writes: Family::default(),
            runtime_events: Counter::default(),
        };
        let r = registry.sub_registry_with_prefix("inplace_daemon");
        r.register(
            "image_pulls_in_flight",
            "Image pull RPCs in flight",
            m.pulls_in_flight.clone(),
        );
        r.register("image_pulls", "Finished image pull tasks", m.pulls.clone());
        r.register(
            "image_pull_duration_seconds",
            "Duration of finished image pull tasks",
            m.pull_duration.clone(),
        );
        r.register(
            "image_pull_retries",
            "Image pull attempts retried",
            m.pull_retries.clone(),
        );
        r.register(
            "container_restarts",
            "Containers stopped by the daemon for the kubelet to restart",
            m.restarts.clone(),
        );
        r.register(
            "inplace_updates_completed",
            "Pods marked InPlaceUpdateReady=True",
            m.inplace_completed.clone(),
        );
        r.register(
            "crr_phase_transitions",
            "ContainerRecreateRequest phases written",
            m.crr_phases.clone(),
        );
        r.register(
            "status_writes",
            "Status writes to the API server",
            m.status_writes.clone(),
        );
        m
    }

    /// Metrics not exposed anywhere (tests, benchmarks).
    pub fn unregistered() -> Self {
        Self::new(&mut Registry::default())
    }

    pub fn result(r: &str) -> ResultLabel {
        ResultLabel { result: r.into() }
    }
}
