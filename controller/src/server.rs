//! The controller's HTTP endpoints: `/metrics`, `/healthz` (and `/livez`) and `/readyz`,
//! and the liveness and readiness flags they answer from.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

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

#[cfg(test)]
mod tests;
