//! The daemon's side of the API server, shared by its three loops (NodeImage, pods,
//! CRRs): the field manager and patch parameters of every write, the retry back-off,
//! the watch helpers, and what `/healthz` reports of them.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use inplace_proto::request_timeout::RequestTimeoutLayer;
use kube::Resource;
use kube::api::{Api, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

/// Field manager name of every write the daemon makes.
pub const FIELD_MANAGER: &str = "inplace-daemon";

/// Patch parameters of every daemon write (merge and strategic patches).
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// The daemon's API client for `config`: every request but a watch fails after
/// `request_timeout` unanswered (kube's client has no such bound, and a half-open
/// connection would hold the status patch that ends an in-place update for good).
/// Watches keep kube's own idle timeout.
pub fn client(
    config: kube::Config,
    request_timeout: Duration,
) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&RequestTimeoutLayer(request_timeout))
        .build())
}

/// What `/healthz` looks at.
#[derive(Debug, Default)]
pub struct Health {
    pub node_image_synced: AtomicBool,
    pub pods_synced: AtomicBool,
    pub crr_synced: AtomicBool,
    pub runtime_ok: AtomicBool,
    pub runtime_error: std::sync::Mutex<String>,
}

impl Health {
    /// `Ok` or the list of what is not ready.
    pub fn check(&self) -> Result<(), String> {
        let mut bad = Vec::new();
        for (flag, what) in [
            (&self.node_image_synced, "NodeImage watch not synced"),
            (&self.pods_synced, "pod watch not synced"),
            (
                &self.crr_synced,
                "ContainerRecreateRequest watch not synced",
            ),
        ] {
            if !flag.load(Ordering::Relaxed) {
                bad.push(what.to_string());
            }
        }
        if !self.runtime_ok.load(Ordering::Relaxed) {
            let e = self
                .runtime_error
                .lock()
                .map(|e| e.clone())
                .unwrap_or_default();
            bad.push(format!("container runtime not answering: {e}"));
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join("; "))
        }
    }
}

/// The longest wait between two tries of a failing pod.
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// Exponential back-off with jitter from half a second to [`RETRY_MAX`], never ending:
/// the daemon's retry of a failed pod sync, CRR sync or NodeImage status write.
pub fn retry_backoff() -> backon::ExponentialBackoff {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::default()
        .with_jitter()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(RETRY_MAX)
        .without_max_times()
        .build()
}

/// Runs the watch of `cfg` on `api` for good (kube's default back-off between failed
/// attempts), handing every event to `on_event` and logging every error as `what`'s.
pub async fn watch<K>(
    api: Api<K>,
    cfg: watcher::Config,
    what: &str,
    mut on_event: impl FnMut(Event<K>),
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(ev) => on_event(ev),
            Err(e) => tracing::warn!(error = %e, "{what} watch error (retrying)"),
        }
    }
}

/// [`watch`] into a reflector store: `synced` is set once the first list is in, and
/// `notify` poked after every change.
pub async fn watch_into_store<K>(
    api: Api<K>,
    cfg: watcher::Config,
    what: &str,
    mut writer: reflector::store::Writer<K>,
    notify: &Notify,
    synced: &AtomicBool,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    watch(api, cfg, what, |ev| {
        writer.apply_watcher_event(&ev);
        if matches!(ev, Event::InitDone) {
            synced.store(true, Ordering::Relaxed);
        }
        notify.notify_one();
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status patch on a connection the API server never answers (held, half-open)
    /// fails within the bound instead of holding the update it reports.
    #[tokio::test]
    async fn an_unanswered_status_patch_fails_within_the_bound()
    -> Result<(), Box<dyn std::error::Error>> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let bound = Duration::from_millis(300);
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(client(kube::Config::new(url.parse()?), bound)?, "ns");
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            pods.patch_status(
                "p",
                &patch_params(),
                &kube::api::Patch::Strategic(serde_json::json!({"status": {}})),
            ),
        )
        .await;
        server.abort();
        let Ok(Err(kube::Error::Service(cause))) = answer else {
            return Err(format!("not a timed-out request: {answer:?}").into());
        };
        assert!(
            cause
                .downcast_ref::<inplace_proto::request_timeout::RequestTimedOut>()
                .is_some(),
            "{cause:?}"
        );
        assert!(started.elapsed() >= bound && started.elapsed() < Duration::from_secs(5));
        Ok(())
    }

    /// A failing pod is tried again after half a second at first, backing off to about
    /// half a minute (with jitter), and never given up on.
    #[test]
    fn retries_back_off_from_half_a_second_to_half_a_minute_and_never_stop() {
        let delays: Vec<Duration> = retry_backoff().take(100).collect();
        assert_eq!(delays.len(), 100, "never gives up");
        assert!(delays[0] >= Duration::from_millis(500) && delays[0] <= Duration::from_secs(1));
        assert!(delays.iter().all(|d| *d >= Duration::from_millis(500)));
        assert!(delays.iter().all(|d| *d <= 2 * RETRY_MAX), "{delays:?}");
        assert!(delays[99] >= RETRY_MAX, "{:?}", delays[99]);
    }
}
