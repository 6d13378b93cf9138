//! API-server side of the puller: the NodeImage watch feeding [`crate::puller::Puller`],
//! the rate-limited status writer, and pull-secret reads.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch};
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use crate::api::{NodeImage, NodeImageStatus};
use crate::apiserver::{Health, RETRY_MAX, patch_params, retry_backoff, watch};
use crate::metrics::Metrics;
use crate::puller::{SecretFetcher, Snapshot, plan};

/// Watches the NodeImage named `node` and publishes it (None while it does not exist).
pub async fn watch_node_image(
    api: Api<NodeImage>,
    node: String,
    tx: watch::Sender<Option<Snapshot>>,
    health: Arc<Health>,
) {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={node}"));
    let mut init: Option<Option<NodeImage>> = None;
    let publish = |o: Option<NodeImage>| {
        let snap = o.map(|ni| Snapshot {
            spec: ni.spec,
            status: ni.status.unwrap_or_default(),
            resource_version: ni.metadata.resource_version,
        });
        tx.send_if_modified(|cur| {
            if *cur == snap {
                false
            } else {
                *cur = snap;
                true
            }
        });
    };
    watch(api, cfg, "NodeImage", |ev| match ev {
        Event::Init => init = Some(None),
        Event::InitApply(o) => init = Some(Some(o)),
        Event::InitDone => {
            publish(init.take().flatten());
            health.node_image_synced.store(true, Ordering::Relaxed);
        }
        Event::Apply(o) => publish(Some(o)),
        Event::Delete(_) => publish(None),
    })
    .await;
}

/// A token bucket: `burst` writes at once, then one per `1/qps` (governor's GCRA
/// limiter, on tokio's clock).
#[derive(Debug)]
pub struct RateLimiter {
    limiter: governor::RateLimiter<
        governor::state::NotKeyed,
        governor::state::InMemoryState,
        TokioClock,
        governor::middleware::NoOpMiddleware<governor::nanos::Nanos>,
    >,
    clock: TokioClock,
}

/// governor's clock on tokio's time, so that a paused test clock drives the limiter.
#[derive(Clone, Debug)]
struct TokioClock {
    start: tokio::time::Instant,
}

impl governor::clock::Clock for TokioClock {
    type Instant = governor::nanos::Nanos;

    fn now(&self) -> Self::Instant {
        self.start.elapsed().into()
    }
}

impl RateLimiter {
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = std::num::NonZeroU32::new(burst).unwrap_or(std::num::NonZeroU32::MIN);
        let period = Duration::from_secs_f64(1.0 / qps.max(0.01));
        let quota = governor::Quota::with_period(period)
            .unwrap_or_else(|| governor::Quota::per_second(std::num::NonZeroU32::MIN))
            .allow_burst(burst);
        let clock = TokioClock {
            start: tokio::time::Instant::now(),
        };
        Self {
            limiter: governor::RateLimiter::direct_with_clock(quota, clock.clone()),
            clock,
        }
    }

    pub async fn acquire(&mut self) {
        use governor::clock::Clock as _;
        while let Err(not_until) = self.limiter.check() {
            tokio::time::sleep(not_until.wait_time_from(self.clock.now())).await;
        }
    }
}

/// Writes the puller's status into the NodeImage's status subresource: the whole status
/// as a merge patch (images that left are nulled), coalesced (only the latest status is
/// written) and rate-limited. Nothing is written while the NodeImage does not exist or
/// already carries exactly this status.
///
/// Each patch is conditional on the resourceVersion the stored status was read at (the
/// nulls are computed from it). When the NodeImage changed since (the controller's
/// lifecycle writes its status too, and the watch may lag behind), the API server answers
/// 409: the NodeImage is read again and the patch made anew from what it holds now and the
/// puller's latest status, never the refused body sent again.
pub async fn write_node_image_status(
    api: Api<NodeImage>,
    node: String,
    mut status_rx: watch::Receiver<NodeImageStatus>,
    snapshots: watch::Receiver<Option<Snapshot>>,
    mut limiter: RateLimiter,
    metrics: Metrics,
) {
    let mut retry = false;
    // After a conflict: the NodeImage's status and resourceVersion as read again from the
    // API server (newer than what the watch may show yet).
    let mut reread: Option<(NodeImageStatus, Option<String>)> = None;
    // Our last write: the resourceVersion it was made over, and the NodeImage's status and
    // resourceVersion it left. While the watch still shows the version before it, what it
    // left is the base (else the next patch would be refused for our own write).
    let mut written: Option<(Option<String>, NodeImageStatus, Option<String>)> = None;
    // failed writes and reads are retried with exponential back-off and jitter
    let mut backoff = retry_backoff();
    loop {
        if !retry && status_rx.changed().await.is_err() {
            return;
        }
        retry = false;
        limiter.acquire().await;
        let new = status_rx.borrow_and_update().clone();
        let (stored, rv) = match reread.take() {
            Some(fresh) => fresh,
            None => match &*snapshots.borrow() {
                None => continue,
                Some(s) => match &written {
                    Some((before, status, after)) if *before == s.resource_version => {
                        (status.clone(), after.clone())
                    }
                    _ => (s.status.clone(), s.resource_version.clone()),
                },
            },
        };
        if stored == new {
            continue;
        }
        let patch = match plan::status_patch(Some(&stored), &new, rv.as_deref()) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "cannot serialise NodeImage status");
                continue;
            }
        };
        match api
            .patch_status(&node, &patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(ni) => {
                backoff = retry_backoff();
                written = Some((
                    rv.clone(),
                    ni.status.unwrap_or_default(),
                    ni.metadata.resource_version,
                ));
                metrics
                    .status_writes
                    .get_or_create(&Metrics::result("ok"))
                    .inc();
                tracing::debug!(
                    desired = new.desired,
                    succeeded = new.succeeded,
                    failed = new.failed,
                    "NodeImage status written"
                );
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                metrics
                    .status_writes
                    .get_or_create(&Metrics::result("conflict"))
                    .inc();
                tracing::debug!(
                    rv = ?rv,
                    "NodeImage changed since it was read; reading it again"
                );
                match api.get_opt(&node).await {
                    Ok(Some(ni)) => {
                        reread =
                            Some((ni.status.unwrap_or_default(), ni.metadata.resource_version));
                        retry = true;
                    }
                    // gone: written again once it exists (the watch says so)
                    Ok(None) => {}
                    Err(e) => {
                        let delay = backoff.next().unwrap_or(RETRY_MAX);
                        tracing::warn!(error = %e, retry_in = ?delay, "reading the NodeImage after a conflict failed; retrying");
                        tokio::time::sleep(delay).await;
                        retry = true;
                    }
                }
            }
            Err(e) => {
                metrics
                    .status_writes
                    .get_or_create(&Metrics::result("error"))
                    .inc();
                let delay = backoff.next().unwrap_or(RETRY_MAX);
                tracing::warn!(error = %e, retry_in = ?delay, "NodeImage status write failed; retrying");
                tokio::time::sleep(delay).await;
                retry = true;
            }
        }
    }
}

/// Reads pull secrets through the API (namespace and name from the NodeImage).
///
/// With `only_namespace` (the controller's namespace, into which it mirrors the pull
/// secrets of ImagePullJobs), a Secret of any other namespace is not asked for: the
/// daemon's Role grants `get` there only.
pub fn secret_fetcher(client: kube::Client, only_namespace: Option<String>) -> SecretFetcher {
    Arc::new(move |ns: String, name: String| {
        let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let refused = outside(only_namespace.as_deref(), &ns, &name);
        Box::pin(async move {
            if let Some(why) = refused {
                return Err(why);
            }
            match api.get_opt(&name).await {
                Ok(Some(s)) => Ok(Some(
                    s.data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0))
                        .collect::<BTreeMap<_, _>>(),
                )),
                Ok(None) => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        })
    })
}

/// Why `namespace/name` is not read when the daemon reads Secrets of `only` alone.
pub fn outside(only: Option<&str>, namespace: &str, name: &str) -> Option<String> {
    match only {
        Some(only) if only != namespace => Some(format!(
            "pull secret {namespace}/{name} is outside {only}, the only namespace whose Secrets \
             the daemon reads (the controller mirrors the Secrets ImagePullJobs name into it)"
        )),
        _ => None,
    }
}

/// Test support: a client whose API server answers every request with 500
/// (InternalError), recording when each PATCH arrived in `patches`.
#[cfg(test)]
pub(crate) fn failing_client(
    patches: Arc<std::sync::Mutex<Vec<tokio::time::Instant>>>,
) -> kube::Client {
    use axum::http::{Method, Request, Response};
    let server = tower::service_fn(move |req: Request<kube::client::Body>| {
        if req.method() == Method::PATCH
            && let Ok(mut p) = patches.lock()
        {
            p.push(tokio::time::Instant::now());
        }
        let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"boom","reason":"InternalError","code":500}"#;
        let response = Response::builder()
            .status(500)
            .header("content-type", "application/json")
            .body(body.to_owned());
        async move { response }
    });
    kube::Client::new(server, "default")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_read_only_in_the_mirror_namespace() {
        assert_eq!(outside(None, "team-a", "regcred"), None);
        assert_eq!(
            outside(Some("inplace-system"), "inplace-system", "team-a.regcred"),
            None
        );
        let why = outside(Some("inplace-system"), "team-a", "regcred").unwrap_or_default();
        assert!(
            why.contains("team-a/regcred is outside inplace-system"),
            "{why}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limiter_allows_a_burst_then_the_rate() {
        let mut l = RateLimiter::new(2.0, 3);
        let t0 = tokio::time::Instant::now();
        for _ in 0..3 {
            l.acquire().await;
        }
        assert_eq!(t0.elapsed(), Duration::ZERO, "burst is immediate");
        l.acquire().await;
        l.acquire().await;
        let e = t0.elapsed();
        assert!(
            e >= Duration::from_millis(999) && e <= Duration::from_millis(1001),
            "{e:?}"
        );
        // idle time refills up to the burst only
        tokio::time::sleep(Duration::from_secs(60)).await;
        let t1 = tokio::time::Instant::now();
        for _ in 0..3 {
            l.acquire().await;
        }
        assert_eq!(t1.elapsed(), Duration::ZERO);
        l.acquire().await;
        assert!(t1.elapsed() >= Duration::from_millis(499));
    }

    /// A NodeImage status write the API server keeps refusing (500) is retried with
    /// exponential back-off and jitter: about half a second at first, half a minute and
    /// more after seven failures, never every second forever.
    #[tokio::test(start_paused = true)]
    async fn failed_status_writes_back_off_exponentially() {
        let patches: Arc<std::sync::Mutex<Vec<tokio::time::Instant>>> = Arc::default();
        let api: Api<NodeImage> = Api::all(failing_client(patches.clone()));
        let (status_tx, status_rx) = watch::channel(NodeImageStatus::default());
        let (_snap_tx, snap_rx) = watch::channel(Some(Snapshot {
            resource_version: Some("1".into()),
            ..Snapshot::default()
        }));
        let writer = tokio::spawn(write_node_image_status(
            api,
            "node-a".into(),
            status_rx,
            snap_rx,
            RateLimiter::new(100.0, 100),
            Metrics::unregistered(),
        ));
        let _ = status_tx.send(NodeImageStatus {
            desired: 1,
            waiting: 1,
            ..NodeImageStatus::default()
        });
        let count = || patches.lock().map(|p| p.len()).unwrap_or_default();
        while count() < 8 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        writer.abort();
        let at = patches.lock().map(|p| p.clone()).unwrap_or_default();
        let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps[0] >= Duration::from_millis(450) && gaps[0] <= Duration::from_millis(1100),
            "{gaps:?}"
        );
        assert!(gaps[6] >= Duration::from_secs(29), "{gaps:?}");
        assert!(gaps.windows(2).all(|g| g[1] >= g[0] / 2), "{gaps:?}");
    }

    #[test]
    fn health_lists_what_is_missing() {
        let h = Health::default();
        let e = h.check().err().unwrap_or_default();
        assert!(e.contains("NodeImage watch not synced; pod watch not synced; ContainerRecreateRequest watch not synced; container runtime not answering"), "{e}");
    }
}
