//! Prometheus metrics and the HTTP endpoints `/metrics`, `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

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
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("inplace");
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
            registry,
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
        for counters in [
            &self.reconciles,
            &self.reconciles_skipped_expectations,
            &self.pods_created,
            &self.pods_deleted,
            &self.pods_updated_in_place,
            &self.pods_recreated,
        ] {
            counters.remove(labels);
        }
        self.rollout_replicas.remove(labels);
        self.rollout_updated_replicas.remove(labels);
        self.rollout_updated_ready_replicas.remove(labels);
        self.rollout_expected_updated_replicas.remove(labels);
    }
}

/// Where a replica is in its life, for `/readyz`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Not yet talking to the API server / not yet in the leader election.
    #[default]
    Starting = 0,
    /// In the election, waiting for the lease: it serves (it can take over at once).
    Standby = 1,
    /// Holds the lease (or runs without an election) and reconciles.
    Leading = 2,
}

impl Phase {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Standby,
            2 => Self::Leading,
            _ => Self::Starting,
        }
    }
}

/// What `/readyz` answers: `(ready, reason)`.
///
/// Every replica that serves is ready, a standby included: a Deployment of N replicas
/// becomes Available, a rolling update proceeds and a PodDisruptionBudget counts the
/// standbys. Only the leader reconciles, and it is ready once its caches are synced.
pub fn readiness(phase: Phase, caches_synced: bool, stopping: bool) -> (bool, &'static str) {
    match (stopping, phase, caches_synced) {
        (true, _, _) => (false, "stopping"),
        (false, Phase::Starting, _) => (false, "starting: not in the leader election yet"),
        (false, Phase::Standby, _) => (true, "ok: standby, waiting for the leader lease"),
        (false, Phase::Leading, false) => (false, "leader: caches not synced"),
        (false, Phase::Leading, true) => (true, "ok: leader"),
    }
}

/// Liveness and readiness flags served on `/healthz` and `/readyz`.
#[derive(Debug, Default)]
pub struct Health {
    /// Every watch has listed its objects.
    pub caches_synced: AtomicBool,
    /// The process is shutting down.
    pub stopping: AtomicBool,
    phase: AtomicU8,
}

impl Health {
    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Relaxed))
    }

    /// [`readiness`] of the current flags.
    pub fn readiness(&self) -> (bool, &'static str) {
        readiness(
            self.phase(),
            self.caches_synced.load(Ordering::Relaxed),
            self.stopping.load(Ordering::Relaxed),
        )
    }
}

#[derive(Clone, Debug)]
struct HttpState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

async fn metrics_handler(State(state): State<HttpState>) -> impl IntoResponse {
    match state.metrics.encode() {
        Ok(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            "encoding failed".to_owned(),
        ),
    }
}

async fn healthz(State(state): State<HttpState>) -> impl IntoResponse {
    if state.health.stopping.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "stopping")
    } else {
        (StatusCode::OK, "ok")
    }
}

async fn readyz(State(state): State<HttpState>) -> impl IntoResponse {
    match state.health.readiness() {
        (true, reason) => (StatusCode::OK, reason),
        (false, reason) => (StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

/// The router serving the three endpoints.
pub fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/livez", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(HttpState { metrics, health })
}

/// Binds `addr` and serves the endpoints until the process ends.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), std::io::Error> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = router(metrics, health);
    let handle = tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            tracing::error!(%err, "metrics server stopped");
        }
    });
    Ok((bound, handle))
}

/// Observes the duration of a reconcile.
pub fn observe(metrics: &Metrics, elapsed: Duration) {
    metrics.reconcile_duration.observe(elapsed.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_registered_metrics() -> Result<(), std::fmt::Error> {
        let m = Metrics::new();
        let l = CloneSetLabels::new("ns", "demo");
        m.pods_created.get_or_create(&l).inc();
        m.expectation_timeouts
            .get_or_create(&ExpectationLabels {
                kind: "pod_create".into(),
            })
            .inc();
        let text = m.encode()?;
        assert!(text.contains("inplace_pods_created_total{namespace=\"ns\",cloneset=\"demo\"} 1"));
        assert!(text.contains("inplace_expectation_timeouts_total{kind=\"pod_create\"} 1"));
        assert!(text.contains("inplace_reconcile_duration_seconds_bucket"));
        Ok(())
    }

    #[test]
    fn a_deleted_clonesets_series_are_all_removed() -> Result<(), std::fmt::Error> {
        let m = Metrics::new();
        let gone = CloneSetLabels::new("ns", "gone");
        let kept = CloneSetLabels::new("ns", "kept");
        for l in [&gone, &kept] {
            for counters in [
                &m.reconciles,
                &m.reconciles_skipped_expectations,
                &m.pods_created,
                &m.pods_deleted,
                &m.pods_updated_in_place,
                &m.pods_recreated,
            ] {
                counters.get_or_create(l).inc();
            }
            m.rollout_replicas.get_or_create(l).set(1);
        }
        m.forget(&gone);
        let text = m.encode()?;
        assert!(!text.contains("cloneset=\"gone\""), "{text}");
        assert!(
            text.contains("inplace_pods_recreated_total{namespace=\"ns\",cloneset=\"kept\"} 1")
        );
        Ok(())
    }

    #[test]
    fn readiness_table() {
        use Phase::*;
        // (phase, caches synced, stopping) -> ready
        let table = [
            (Starting, false, false, false),
            (Starting, true, false, false),
            (Standby, false, false, true),
            (Standby, true, false, true),
            (Leading, false, false, false),
            (Leading, true, false, true),
            (Starting, false, true, false),
            (Standby, false, true, false),
            (Leading, true, true, false),
        ];
        for (phase, synced, stopping, want) in table {
            assert_eq!(
                readiness(phase, synced, stopping).0,
                want,
                "{phase:?} synced={synced} stopping={stopping}"
            );
        }
    }

    #[test]
    fn health_round_trips_the_phase() {
        let h = Health::default();
        assert_eq!(h.phase(), Phase::Starting);
        assert!(!h.readiness().0);
        h.set_phase(Phase::Standby);
        assert_eq!(
            h.readiness(),
            (true, "ok: standby, waiting for the leader lease")
        );
        h.set_phase(Phase::Leading);
        assert_eq!(h.readiness(), (false, "leader: caches not synced"));
        h.caches_synced.store(true, Ordering::Relaxed);
        assert_eq!(h.readiness(), (true, "ok: leader"));
        h.stopping.store(true, Ordering::Relaxed);
        assert_eq!(h.readiness(), (false, "stopping"));
    }

    #[tokio::test]
    async fn readyz_serves_the_phase() -> Result<(), Box<dyn std::error::Error>> {
        let health = Arc::new(Health::default());
        let (addr, server) = serve(
            "127.0.0.1:0".parse()?,
            Arc::new(Metrics::new()),
            health.clone(),
        )
        .await?;
        let get = |path: &'static str| async move {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let mut conn = tokio::net::TcpStream::connect(addr).await?;
            conn.write_all(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await?;
            let mut raw = String::new();
            conn.read_to_string(&mut raw).await?;
            Ok::<_, std::io::Error>(raw)
        };
        assert!(get("/readyz").await?.starts_with("HTTP/1.1 503"));
        health.set_phase(Phase::Standby);
        let standby = get("/readyz").await?;
        assert!(standby.starts_with("HTTP/1.1 200"), "{standby}");
        assert!(standby.contains("standby"), "{standby}");
        assert!(get("/healthz").await?.starts_with("HTTP/1.1 200"));
        server.abort();
        Ok(())
    }
}
