//! Fenced leadership: a leader that has not renewed its Lease for long enough stops
//! writing before another replica can take the Lease over.
//!
//! The Lease is renewed by `kube-lease-manager` on a client of its own; that client carries
//! [`RenewalObserver`], which notes the moment each successful write of the Lease was
//! *sent* (the renewal time the other replicas compare against was taken no earlier), when
//! the Lease it was answered with names this replica as its holder. (The manager renews
//! with a patch of `renewTime` alone, without precondition: a renewal delayed in the
//! network past a takeover lands on the new holder's Lease and succeeds; it must not
//! reopen the fence of the replica that sent it.) The
//! client the reconcilers write through carries [`WriteGate`], which refuses every
//! mutating request (POST, PUT, PATCH, DELETE) once [`Fence::valid_until`] has passed:
//! `sent + lease duration − margin`, the margin absorbing clock skew between replicas and
//! the time a request spends in flight. A partitioned leader therefore goes quiet on its
//! own, before the Lease expires for the others; when it reaches the API server again it
//! either renews (nobody took over: the gate opens) or finds another holder and exits.
//!
//! A write let through still must not outlive the validity it was let through in: a
//! request held for 30 s by a slow network or API server would otherwise land long after
//! another replica took over. So each write carries a deadline of what remains of the
//! validity when it is sent: as the API server's `timeout` parameter (the server gives up
//! on a request it cannot finish by then), and on the client (the write fails with
//! [`WriteOutlivedLease`] and its answer, if any comes later, is never acted on). What no
//! deadline can cover is a request delayed *before* it reaches the server; for those the
//! writes' preconditions (resourceVersion, UID) are the guard.
//!
//! Without leader election the fence is always open and writes have no such deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::{Method, Request, Response};
use futures::future::BoxFuture;
use tower::{Layer, Service};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A write refused because this replica's leadership is no longer known to be valid.
#[derive(Debug, thiserror::Error)]
#[error(
    "{method} {path} refused: the leader lease was last renewed {since:?} ago, longer than it may act on (fenced until the lease is renewed)"
)]
pub struct FencedWrite {
    pub method: Method,
    pub path: String,
    pub since: Duration,
}

/// A write let through the fence that had no answer within what remained of the
/// leadership's validity when it was sent.
#[derive(Debug, thiserror::Error)]
#[error(
    "{method} {path}: no answer within the {deadline:?} left of the leader lease's validity; abandoned (it may or may not have been applied)"
)]
pub struct WriteOutlivedLease {
    pub method: Method,
    pub path: String,
    pub deadline: Duration,
}

/// How long after a renewal was sent this replica may still write: the lease duration
/// less the margin, and never less than nothing.
pub fn validity(lease_duration: Duration, margin: Duration) -> Duration {
    lease_duration.saturating_sub(margin)
}

/// The margin kept between the end of our validity and the lease's expiry for others: a
/// fifth of the duration, at least one second, at most half the duration.
pub fn default_margin(lease_duration: Duration) -> Duration {
    (lease_duration / 5)
        .max(Duration::from_secs(1))
        .min(lease_duration / 2)
}

/// Whether `method` changes state on the API server.
pub fn is_write(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// Whether `path` addresses a Lease (what the election writes).
pub fn is_lease(path: &str) -> bool {
    path.starts_with("/apis/coordination.k8s.io/") && path.contains("/leases/")
}

#[derive(Debug)]
struct State {
    /// The zero of the instants below (nanoseconds since `base`; 0: never renewed).
    base: Instant,
    last_renewal_sent: AtomicU64,
    validity: Duration,
    /// false: no election, never fenced.
    enforced: bool,
    /// Whether the last gate decision let writes through (to log the change once).
    open: AtomicBool,
}

/// Shared between the renewal observer and the write gate.
#[derive(Clone, Debug)]
pub struct Fence(Arc<State>);

impl Fence {
    /// A fence that never closes (no leader election).
    pub fn unenforced() -> Self {
        Self::new(Duration::MAX, false)
    }

    /// A fence closed until the first renewal, then open for `validity` after each.
    pub fn enforced(validity: Duration) -> Self {
        Self::new(validity, true)
    }

    fn new(validity: Duration, enforced: bool) -> Self {
        Self(Arc::new(State {
            base: Instant::now(),
            last_renewal_sent: AtomicU64::new(0),
            validity,
            enforced,
            open: AtomicBool::new(true),
        }))
    }

    /// A write of the Lease sent at `sent` succeeded.
    pub fn renewed(&self, sent: Instant) {
        let nanos = sent.saturating_duration_since(self.0.base).as_nanos();
        // +1 so that a renewal at `base` itself is not "never".
        let value = u64::try_from(nanos).unwrap_or(u64::MAX - 1) + 1;
        self.0.last_renewal_sent.fetch_max(value, Ordering::AcqRel);
    }

    /// The instant of the last successful renewal's sending, if any.
    pub fn last_renewal(&self) -> Option<Instant> {
        match self.0.last_renewal_sent.load(Ordering::Acquire) {
            0 => None,
            n => Some(self.0.base + Duration::from_nanos(n - 1)),
        }
    }

    /// Whether a write may be sent at `now`: `Err(time since the last renewal)` if not
    /// (`Duration::MAX` when never renewed).
    pub fn check(&self, now: Instant) -> Result<(), Duration> {
        if !self.0.enforced {
            return Ok(());
        }
        match self.last_renewal() {
            Some(t) if now.saturating_duration_since(t) < self.0.validity => Ok(()),
            Some(t) => Err(now.saturating_duration_since(t)),
            None => Err(Duration::MAX),
        }
    }

    /// What remains at `now` of the validity: `Ok(None)` without election (no bound),
    /// `Ok(Some(left))` while open, `Err(time since the last renewal)` when closed.
    pub fn remaining(&self, now: Instant) -> Result<Option<Duration>, Duration> {
        if !self.0.enforced {
            return Ok(None);
        }
        self.check(now)?;
        let left = self.last_renewal().map_or(Duration::ZERO, |t| {
            (t + self.0.validity).saturating_duration_since(now)
        });
        Ok(Some(left))
    }

    /// Records whether the gate is open now; true when that changed.
    fn note(&self, open: bool) -> bool {
        self.0.open.swap(open, Ordering::AcqRel) != open
    }
}

/// The holder the Lease `answer` (the JSON body of a successful Lease write) names: the
/// write was a renewal of ours only when that is our identity.
pub fn holder(answer: &[u8]) -> Option<String> {
    let lease = serde_json::from_slice::<serde_json::Value>(answer).ok()?;
    lease["spec"]["holderIdentity"].as_str().map(str::to_owned)
}

/// A response body made of bytes read whole (the Lease a renewal was answered with, handed
/// on after the observer read it).
pub trait FromBytes {
    fn from_bytes(bytes: bytes::Bytes) -> Self;
}

/// The body type kube's client stack carries.
type DynBody = dyn http_body::Body<Data = bytes::Bytes, Error = BoxError> + Send + Unpin;

impl FromBytes for Box<DynBody> {
    fn from_bytes(bytes: bytes::Bytes) -> Self {
        use http_body_util::BodyExt;
        Box::new(http_body_util::Full::new(bytes).map_err(|never| match never {}))
    }
}

impl FromBytes for http_body_util::Full<bytes::Bytes> {
    fn from_bytes(bytes: bytes::Bytes) -> Self {
        Self::new(bytes)
    }
}

/// Layer for the election's client: notes in the fence the successful Lease writes answered
/// with a Lease held by `identity`.
#[derive(Clone, Debug)]
pub struct RenewalObserverLayer {
    pub fence: Fence,
    pub identity: String,
}

impl<S> Layer<S> for RenewalObserverLayer {
    type Service = RenewalObserver<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RenewalObserver {
            inner,
            fence: self.fence.clone(),
            identity: Arc::from(self.identity.as_str()),
        }
    }
}

#[derive(Clone, Debug)]
pub struct RenewalObserver<S> {
    inner: S,
    fence: Fence,
    identity: Arc<str>,
}

impl<S, B, R> Service<Request<B>> for RenewalObserver<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    R: http_body::Body<Data = bytes::Bytes> + FromBytes + Send + 'static,
    R::Error: Into<BoxError>,
{
    type Response = Response<R>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<R>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let renewal = is_write(req.method()) && is_lease(req.uri().path());
        let sent = Instant::now();
        let (fence, identity) = (self.fence.clone(), self.identity.clone());
        let fut = self.inner.call(req);
        Box::pin(async move {
            let response = fut.await.map_err(Into::into)?;
            if !(renewal && response.status().is_success()) {
                return Ok(response);
            }
            // A Lease is small: read it whole, judge it, hand it on.
            let (parts, body) = response.into_parts();
            let answer = http_body_util::BodyExt::collect(body)
                .await
                .map_err(Into::into)?
                .to_bytes();
            match holder(&answer) {
                Some(h) if *h == *identity => fence.renewed(sent),
                other => tracing::warn!(
                    holder = other.as_deref().unwrap_or("none"),
                    "a write of the leader lease succeeded but the lease it answered with is not held by this replica: not a renewal of ours"
                ),
            }
            Ok(Response::from_parts(parts, R::from_bytes(answer)))
        })
    }
}

/// Layer for the reconcilers' client: refuses writes while the fence is closed.
#[derive(Clone, Debug)]
pub struct WriteGateLayer(pub Fence);

impl<S> Layer<S> for WriteGateLayer {
    type Service = WriteGate<S>;
    fn layer(&self, inner: S) -> Self::Service {
        WriteGate {
            inner,
            fence: self.0.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct WriteGate<S> {
    inner: S,
    fence: Fence,
}

impl<S, B, R> Service<Request<B>> for WriteGate<S>
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

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let mut deadline = None;
        if is_write(req.method()) {
            let verdict = self.fence.remaining(Instant::now());
            if self.fence.note(verdict.is_ok()) {
                match verdict {
                    Ok(_) => tracing::warn!("leader lease renewed: writes allowed again"),
                    Err(since) => tracing::error!(
                        since = ?since,
                        "leader lease not renewed in time: refusing every write until it is (fenced)"
                    ),
                }
            }
            match verdict {
                Err(since) => {
                    let refused = FencedWrite {
                        method: req.method().clone(),
                        path: req.uri().path().to_owned(),
                        since,
                    };
                    return Box::pin(async move { Err(Box::new(refused) as BoxError) });
                }
                Ok(Some(left)) => {
                    if let Some(uri) = with_server_timeout(req.uri(), left) {
                        *req.uri_mut() = uri;
                    }
                    deadline = Some(WriteOutlivedLease {
                        method: req.method().clone(),
                        path: req.uri().path().to_owned(),
                        deadline: left,
                    });
                }
                Ok(None) => {}
            }
        }
        let fut = self.inner.call(req);
        Box::pin(async move {
            let Some(outlived) = deadline else {
                return fut.await.map_err(Into::into);
            };
            match tokio::time::timeout(outlived.deadline, fut).await {
                Ok(result) => result.map_err(Into::into),
                Err(_) => {
                    tracing::warn!(
                        method = %outlived.method,
                        path = %outlived.path,
                        deadline = ?outlived.deadline,
                        "write abandoned: no answer within what was left of the leader lease's validity (it may or may not have been applied)"
                    );
                    Err(Box::new(outlived) as BoxError)
                }
            }
        })
    }
}

/// `uri` with the API server's `timeout` parameter set to `left` (whole milliseconds, at
/// least one), unless it carries a shorter one already; `None` when it is kept as it is.
pub fn with_server_timeout(uri: &axum::http::Uri, left: Duration) -> Option<axum::http::Uri> {
    let millis = left.as_millis().max(1);
    let query = uri.query().unwrap_or_default();
    let mut pairs: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    if let Some(existing) = pairs.iter().position(|p| p.starts_with("timeout=")) {
        let shorter = pairs[existing]
            .strip_prefix("timeout=")
            .and_then(|v| humantime::parse_duration(v).ok())
            .is_some_and(|d| d <= left);
        if shorter {
            return None;
        }
        pairs.remove(existing);
    }
    let timeout = format!("timeout={millis}ms");
    pairs.push(&timeout);
    let path_and_query = format!("{}?{}", uri.path(), pairs.join("&"));
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = path_and_query.parse().ok();
    axum::http::Uri::from_parts(parts).ok()
}

#[cfg(test)]
mod tests;
