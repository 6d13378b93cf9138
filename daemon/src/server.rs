//! `/healthz` and `/metrics`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::apiserver::Health;

#[derive(Clone, Debug)]
struct AppState {
    health: Arc<Health>,
    registry: Arc<Registry>,
}

async fn healthz(State(s): State<AppState>) -> impl IntoResponse {
    match s.health.check() {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    let mut out = String::new();
    match prometheus_client::encoding::text::encode(&mut out, &s.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            out,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            e.to_string(),
        ),
    }
}

/// The HTTP app.
pub fn router(health: Arc<Health>, registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(AppState { health, registry })
}

/// Serves until the listener fails.
pub async fn serve(
    listener: tokio::net::TcpListener,
    health: Arc<Health>,
    registry: Arc<Registry>,
) -> std::io::Result<()> {
    axum::serve(listener, router(health, registry)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use std::sync::atomic::Ordering;
    use tower::ServiceExt;

    async fn get(app: Router, path: &str) -> (StatusCode, String) {
        let r = app
            .oneshot(Request::get(path).body(Body::empty()).unwrap_or_default())
            .await
            .unwrap_or_else(|e| match e {});
        let status = r.status();
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn healthz_is_ok_only_when_synced_and_the_runtime_answers() {
        let health = Arc::new(Health::default());
        let mut reg = Registry::default();
        let m = crate::metrics::Metrics::new(&mut reg);
        m.pulls_in_flight.set(3);
        let reg = Arc::new(reg);
        let (code, body) = get(router(health.clone(), reg.clone()), "/healthz").await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body.contains("NodeImage watch not synced"), "{body}");
        for f in [
            &health.node_image_synced,
            &health.pods_synced,
            &health.crr_synced,
        ] {
            f.store(true, Ordering::Relaxed);
        }
        if let Ok(mut e) = health.runtime_error.lock() {
            *e = "connection refused".into();
        }
        let (code, body) = get(router(health.clone(), reg.clone()), "/healthz").await;
        assert_eq!(
            (code, body.as_str()),
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "container runtime not answering: connection refused"
            )
        );
        health.runtime_ok.store(true, Ordering::Relaxed);
        assert_eq!(
            get(router(health.clone(), reg.clone()), "/healthz").await,
            (StatusCode::OK, "ok".into())
        );
        let (code, body) = get(router(health, reg), "/metrics").await;
        assert_eq!(code, StatusCode::OK);
        assert!(
            body.contains("inplace_daemon_image_pulls_in_flight 3"),
            "{body}"
        );
    }
}
