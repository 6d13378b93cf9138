//! The containerd event stream (containerd API, not CRI: CRI `GetContainerEvents` is
//! unimplemented in containerd 1.6). Task starts/exits and image creations wake the
//! in-place executor and the CRR handler at once instead of at their next poll; the
//! polling stays as the fallback (CRI-O, or while the stream is down). The stream is
//! re-subscribed with backoff after containerd restarts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use containerd_client::services::v1::SubscribeRequest;
use containerd_client::services::v1::events_client::EventsClient;
use tokio::sync::Notify;

/// The CRI plugin's containerd namespace.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// Subscription filters: task start/exit and image create in the CRI namespace.
pub fn filters() -> Vec<String> {
    [
        "/tasks/start",
        "/tasks/exit",
        "/tasks/delete",
        "/images/create",
        "/images/update",
    ]
    .iter()
    .map(|t| format!("namespace=={CRI_NAMESPACE},topic==\"{t}\""))
    .collect()
}

/// Whether an event of `topic` should wake the executors.
pub fn wakes(topic: &str) -> bool {
    topic.starts_with("/tasks/") || topic.starts_with("/images/")
}

/// Delay before re-subscribing after `failures` consecutive failures.
pub fn resubscribe_delay(failures: u32) -> Duration {
    use backon::BackoffBuilder as _;
    let max = Duration::from_secs(30);
    // Past 6 doublings every delay is the maximum; the bound keeps `nth` short.
    backon::ExponentialBuilder::default()
        .with_jitter()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(max)
        .with_factor(2.0)
        .without_max_times()
        .build()
        .nth(failures.min(7) as usize)
        .unwrap_or(max)
}

/// Follows containerd's events on `socket` forever, notifying every sink on a
/// relevant event; `on_event` sees each topic (metrics, tests).
pub async fn follow(
    socket: PathBuf,
    sinks: Vec<Arc<Notify>>,
    on_event: impl Fn(&str) + Send + 'static,
) {
    let mut failures = 0u32;
    loop {
        match subscribe_once(&socket, &sinks, &on_event, &mut failures).await {
            Ok(()) => tracing::warn!("containerd event stream ended; re-subscribing"),
            Err(e) => {
                if failures == 0 {
                    tracing::warn!(error = %e, "containerd event stream unavailable; polling only until it is back");
                }
            }
        }
        failures = failures.saturating_add(1);
        tokio::time::sleep(resubscribe_delay(failures)).await;
    }
}

async fn subscribe_once(
    socket: &PathBuf,
    sinks: &[Arc<Notify>],
    on_event: &impl Fn(&str),
    failures: &mut u32,
) -> Result<(), String> {
    let channel = containerd_client::connect(socket)
        .await
        .map_err(|e| e.to_string())?;
    let mut client = EventsClient::new(channel);
    let mut stream = client
        .subscribe(SubscribeRequest { filters: filters() })
        .await
        .map_err(|e| format!("{}: {}", e.code(), e.message()))?
        .into_inner();
    if *failures > 0 {
        tracing::info!("containerd event stream re-subscribed");
    }
    *failures = 0;
    // containerd may drop events while we were away: wake everyone once
    for s in sinks {
        s.notify_one();
    }
    loop {
        match stream.message().await {
            Ok(Some(env)) => {
                on_event(&env.topic);
                if wakes(&env.topic) {
                    for s in sinks {
                        s.notify_one();
                    }
                }
            }
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("{}: {}", e.code(), e.message())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics() {
        assert!(wakes("/tasks/exit"));
        assert!(wakes("/images/create"));
        assert!(!wakes("/snapshot/prepare"));
        assert_eq!(filters()[1], "namespace==k8s.io,topic==\"/tasks/exit\"");
    }

    /// Doubling from half a second to half a minute, each delay with up to as much again
    /// of jitter (so that the daemons of many nodes do not come back in step).
    #[test]
    fn backoff() {
        let base = [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000];
        for (f, b) in base.into_iter().enumerate() {
            let got = resubscribe_delay(f as u32).as_millis() as u64;
            assert!(
                got >= b && got <= 2 * b,
                "failure {f}: {got} ms, base {b} ms"
            );
        }
        let spread: std::collections::BTreeSet<Duration> =
            (0..50).map(|_| resubscribe_delay(3)).collect();
        assert!(spread.len() > 1, "no jitter: {spread:?}");
    }
}
