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
    /// New metrics, registered in `registry` under the `inplace_daemon` prefix, and the
    /// standard (unprefixed) process metrics.
    pub fn new(registry: &mut Registry) -> Self {
        registry.register_collector(Box::new(inplace_proto::process_metrics::ProcessCollector));
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
            "Status writes to the API server: NodeImage writes by result (ok, error); conflict: a NodeImage or ContainerRecreateRequest status write refused by its resourceVersion precondition",
            m.status_writes.clone(),
        );
        r.register(
            "runtime_events",
            "containerd events received (they wake the image puller and the in-place executor)",
            m.runtime_events.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every metric the daemon updates is exported (one was once incremented and never
    /// registered).
    /// The shipped dashboard and alert rules use only metrics the daemon exports (the
    /// controller's are checked by its tests).
    #[test]
    fn the_dashboard_and_alerts_use_only_exported_metrics() -> Result<(), std::fmt::Error> {
        let exported = inplace_proto::monitoring::sample_names(&every_family_touched()?);
        let missing = inplace_proto::monitoring::missing(&exported, "inplace_daemon_", None);
        assert!(
            missing.is_empty(),
            "not exported: {missing:?}\nexported: {exported:?}"
        );
        Ok(())
    }

    #[test]
    fn every_metric_is_exported() -> Result<(), std::fmt::Error> {
        let text = every_family_touched()?;
        for name in [
            "inplace_daemon_image_pulls_in_flight 1",
            "inplace_daemon_image_pulls_total{result=\"ok\"} 1",
            "inplace_daemon_image_pull_duration_seconds_count{result=\"ok\"} 1",
            "inplace_daemon_image_pull_retries_total 1",
            "inplace_daemon_container_restarts_total{reason=\"crr\"} 1",
            "inplace_daemon_inplace_updates_completed_total 1",
            "inplace_daemon_crr_phase_transitions_total{phase=\"Completed\"} 1",
            "inplace_daemon_status_writes_total{result=\"ok\"} 1",
            "inplace_daemon_runtime_events_total 1",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
        Ok(())
    }

    #[test]
    fn the_standard_process_metrics_are_exported() -> Result<(), std::fmt::Error> {
        let text = every_family_touched()?;
        for family in [
            "process_cpu_seconds counter",
            "process_resident_memory_bytes gauge",
            "process_virtual_memory_bytes gauge",
            "process_start_time_seconds gauge",
            "process_open_fds gauge",
            "process_max_fds gauge",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family}\n")),
                "{family} missing from:\n{text}"
            );
        }
        Ok(())
    }

    /// The exposition with one series in every family.
    fn every_family_touched() -> Result<String, std::fmt::Error> {
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        m.pulls_in_flight.set(1);
        m.pulls.get_or_create(&Metrics::result("ok")).inc();
        m.pull_duration
            .get_or_create(&Metrics::result("ok"))
            .observe(1.0);
        m.pull_retries.inc();
        m.restarts
            .get_or_create(&ReasonLabel {
                reason: "crr".into(),
            })
            .inc();
        m.inplace_completed.inc();
        m.crr_phases
            .get_or_create(&PhaseLabel {
                phase: "Completed".into(),
            })
            .inc();
        m.status_writes.get_or_create(&Metrics::result("ok")).inc();
        m.runtime_events.inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
        Ok(text)
    }
}
