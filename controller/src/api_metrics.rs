//! Requests to the API server, counted by verb and answer, as a tower layer on the kube
//! client (so every reconciler, the status writer and the event sink are counted without
//! each of them knowing): `inplace_api_requests_total{verb, code}` and, for everything but
//! watches (which stay open by design), `inplace_api_request_duration_seconds{verb}`.
//! `code` is the HTTP status, `fenced` for a write the leadership fence refused, `error`
//! when no answer came.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::http::{Method, Request, Response};
use futures::future::BoxFuture;
use tower::{Layer, Service};

use crate::fence::{FencedWrite, WriteOutlivedLease};
use crate::metrics::Metrics;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The verb of a request as the metrics name it: the lower-case HTTP method, and `watch`
/// for a GET that opens a watch.
pub fn verb(method: &Method, query: Option<&str>) -> String {
    if inplace_proto::request_timeout::is_watch(method, query) {
        "watch".to_owned()
    } else {
        method.as_str().to_ascii_lowercase()
    }
}

/// The `code` label of a failed request.
pub fn error_code(e: &BoxError) -> &'static str {
    if e.downcast_ref::<FencedWrite>().is_some() {
        "fenced"
    } else if e.downcast_ref::<WriteOutlivedLease>().is_some() {
        "lease-deadline"
    } else {
        "error"
    }
}

#[derive(Clone, Debug)]
pub struct ApiMetricsLayer(pub Arc<Metrics>);

impl<S> Layer<S> for ApiMetricsLayer {
    type Service = ApiMetrics<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ApiMetrics {
            inner,
            metrics: self.0.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ApiMetrics<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B, R> Service<Request<B>> for ApiMetrics<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<R>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<R>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let verb = verb(req.method(), req.uri().query());
        let metrics = self.metrics.clone();
        let started = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = fut.await.map_err(Into::into);
            let code = match &result {
                Ok(response) => response.status().as_u16().to_string(),
                Err(e) => error_code(e).to_owned(),
            };
            metrics.record_api_request(&verb, &code, started.elapsed());
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use axum::http::StatusCode;
    use tower::ServiceExt;

    #[test]
    fn refused_and_abandoned_writes_have_codes_of_their_own() {
        let fenced: BoxError = Box::new(FencedWrite {
            method: Method::PATCH,
            path: "/api/v1/namespaces/ns/pods/p".into(),
            since: std::time::Duration::from_secs(20),
        });
        let outlived: BoxError = Box::new(WriteOutlivedLease {
            method: Method::DELETE,
            path: "/api/v1/namespaces/ns/pods/p".into(),
            deadline: std::time::Duration::from_secs(3),
        });
        let other: BoxError = "connection reset".into();
        assert_eq!(error_code(&fenced), "fenced");
        assert_eq!(error_code(&outlived), "lease-deadline");
        assert_eq!(error_code(&other), "error");
    }

    #[test]
    fn verbs() {
        for (method, query, want) in [
            (Method::GET, None, "get"),
            (Method::GET, Some("labelSelector=a%3Db"), "get"),
            (Method::GET, Some("watch=true&resourceVersion=5"), "watch"),
            (Method::GET, Some("resourceVersion=5&watch=1"), "watch"),
            (Method::GET, Some("watch=false"), "get"),
            (Method::PATCH, None, "patch"),
            (Method::POST, Some("watch=true"), "post"),
            (Method::DELETE, None, "delete"),
        ] {
            assert_eq!(verb(&method, query), want, "{method} {query:?}");
        }
    }

    #[tokio::test]
    async fn requests_are_counted_by_verb_and_answer() -> Result<(), BoxError> {
        let metrics = Arc::new(Metrics::new());
        let answers = [StatusCode::OK, StatusCode::CONFLICT, StatusCode::OK];
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let server = tower::service_fn(move |_req: Request<String>| {
            let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let status = answers[i % answers.len()];
            async move { Response::builder().status(status).body(String::new()) }
        });
        let svc = ApiMetricsLayer(metrics.clone()).layer(server);
        for (method, uri) in [
            (Method::PATCH, "/api/v1/namespaces/ns/pods/p"),
            (Method::PATCH, "/api/v1/namespaces/ns/pods/p"),
            (Method::GET, "/api/v1/pods?watch=true"),
        ] {
            let req = Request::builder()
                .method(method)
                .uri(uri)
                .body(String::new())?;
            svc.clone().oneshot(req).await?;
        }
        let text = metrics.encode()?;
        assert!(
            text.contains("inplace_api_requests_total{verb=\"patch\",code=\"200\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("inplace_api_requests_total{verb=\"patch\",code=\"409\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("inplace_api_requests_total{verb=\"watch\",code=\"200\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("inplace_api_request_duration_seconds_count{verb=\"patch\"} 2"),
            "{text}"
        );
        assert!(
            !text.contains("inplace_api_request_duration_seconds_count{verb=\"watch\"}"),
            "{text}"
        );
        Ok(())
    }
}
