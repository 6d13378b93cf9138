//! A bound on how long one API request may go unanswered.
//!
//! kube's client has no response timeout by default (`Config::read_timeout` is `None`),
//! so a request the API server or the network never answers (a half-open connection, a
//! proxy that holds it) is awaited forever. Inside a reconcile that is worse than an
//! error: kube-runtime's `Controller` runs one reconcile per object at a time, so the
//! object's next reconcile (its error-policy requeue, or any watch event) waits for that
//! await too, and the object is never reconciled again. In the daemon, the patch that
//! reports an in-place update done would hold that update (and its node's next ones) the
//! same way. [`RequestTimeoutLayer`] fails such a request after a bound instead, so the
//! reconcile or the daemon's write returns an error and is retried. Both binaries' clients
//! carry it (`--api-request-timeout`).
//! Watches are exempt: they are meant to stay open (the watcher has its own idle timeout).

use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{Method, Request, Response};
use tower::{Layer, Service};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Whether a request is a watch (`GET …?watch=true`): long-running by design, so no bound
/// applies to it.
pub fn is_watch(method: &Method, query: Option<&str>) -> bool {
    *method == Method::GET
        && query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

/// A request that got no answer (response head) within the bound.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path}: no answer from the API server within {after:?}")]
pub struct RequestTimedOut {
    pub method: String,
    pub path: String,
    pub after: Duration,
}

/// The default bound: the API server itself ends a request that is not long-running
/// after 60 s (`--request-timeout`); half that is ample for the single-object reads and
/// writes a reconcile makes and for one page of a list.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Fails every request but a watch that has no answer within `0`.
#[derive(Clone, Copy, Debug)]
pub struct RequestTimeoutLayer(pub Duration);

impl<S> Layer<S> for RequestTimeoutLayer {
    type Service = RequestTimeout<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RequestTimeout {
            inner,
            after: self.0,
        }
    }
}

#[derive(Clone, Debug)]
pub struct RequestTimeout<S> {
    inner: S,
    after: Duration,
}

impl<S, B, R> Service<Request<B>> for RequestTimeout<S>
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
        let watch = is_watch(req.method(), req.uri().query());
        let timed_out = RequestTimedOut {
            method: req.method().as_str().to_owned(),
            path: req.uri().path().to_owned(),
            after: self.after,
        };
        let after = self.after;
        let fut = self.inner.call(req);
        if watch {
            return Box::pin(async move { fut.await.map_err(Into::into) });
        }
        Box::pin(async move {
            match tokio::time::timeout(after, fut).await {
                Ok(result) => result.map_err(Into::into),
                Err(_) => Err(Box::new(timed_out) as BoxError),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, Patch, PatchParams};
    use kube::client::ClientBuilder;
    use std::time::Instant;
    use tokio::net::TcpListener;

    /// A loopback "API server" that accepts connections and reads requests but never
    /// answers any (what a held or half-open connection looks like to the client).
    async fn silent_server() -> Result<(String, tokio::task::JoinHandle<()>), BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        Ok((format!("http://{addr}"), task))
    }

    fn client(url: &str, bound: Duration) -> Result<kube::Client, BoxError> {
        let config = kube::Config::new(url.parse()?);
        Ok(ClientBuilder::try_from(config)?
            .with_layer(&RequestTimeoutLayer(bound))
            .build())
    }

    #[tokio::test]
    async fn an_unanswered_write_fails_within_the_bound() -> Result<(), BoxError> {
        let (url, server) = silent_server().await?;
        let bound = Duration::from_millis(300);
        let pods: Api<Pod> = Api::namespaced(client(&url, bound)?, "ns");
        let started = Instant::now();
        let result = tokio::time::timeout(
            Duration::from_secs(10),
            pods.patch_status(
                "p",
                &PatchParams::default(),
                &Patch::Strategic(serde_json::json!({"status": {}})),
            ),
        )
        .await;
        let elapsed = started.elapsed();
        server.abort();
        let Ok(answer) = result else {
            return Err("the write was still awaited after 10 s".into());
        };
        let Err(err) = answer else {
            return Err("a server that never answers gave a pod".into());
        };
        assert!(elapsed >= bound, "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
        let kube::Error::Service(cause) = &err else {
            return Err(format!("not a failed request: {err:?}").into());
        };
        assert!(cause.downcast_ref::<RequestTimedOut>().is_some(), "{err:?}");
        Ok(())
    }

    #[tokio::test]
    async fn an_unanswered_read_fails_and_a_watch_is_left_open() -> Result<(), BoxError> {
        let (url, server) = silent_server().await?;
        let bound = Duration::from_millis(200);
        let pods: Api<Pod> = Api::namespaced(client(&url, bound)?, "ns");
        let read = tokio::time::timeout(Duration::from_secs(10), pods.get("p")).await;
        assert!(matches!(read, Ok(Err(_))), "{read:?}");

        // A watch that has not answered yet is still awaited well past the bound.
        let svc = RequestTimeoutLayer(bound).layer(tower::service_fn(|_req: Request<()>| {
            std::future::pending::<Result<Response<()>, BoxError>>()
        }));
        let watch =
            Request::get("/api/v1/namespaces/ns/pods?watch=true&resourceVersion=1").body(())?;
        let watched = tokio::time::timeout(bound * 4, tower::ServiceExt::oneshot(svc, watch)).await;
        assert!(watched.is_err(), "a watch was cut: {watched:?}");
        server.abort();
        Ok(())
    }

    #[tokio::test]
    async fn an_answer_within_the_bound_passes() -> Result<(), BoxError> {
        let svc = RequestTimeoutLayer(Duration::from_secs(5)).layer(tower::service_fn(
            |_req: Request<()>| async { Ok::<_, BoxError>(Response::new("ok")) },
        ));
        let resp = tower::ServiceExt::oneshot(svc, Request::get("/api/v1/pods").body(())?).await?;
        assert_eq!(*resp.body(), "ok");
        Ok(())
    }
}
