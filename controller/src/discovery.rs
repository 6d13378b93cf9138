//! What the API server offers, found out at start instead of assumed.
//!
//! The test bed runs Kubernetes v1.20 (no `pods/resize`, no CEL); current clusters serve
//! `pods/resize`. The controller reads the server version and the core resource list once.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder, Retryable as _};
use kube::Client;
use tracing::warn;

/// Capabilities of the API server that change what the controller may do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerCapabilities {
    /// `gitVersion` as reported by `/version`.
    pub git_version: String,
    pub major: u32,
    pub minor: u32,
    /// The `pods/resize` subresource is served (in-place cpu/memory changes go through it).
    pub pod_resize: bool,
    /// `events.k8s.io/v1` is served (the event recorder needs it).
    pub events_v1: bool,
    /// `coordination.k8s.io/v1` is served (leader election needs it).
    pub leases_v1: bool,
}

impl ServerCapabilities {
    /// Whether the server is at least `major.minor`.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

/// Parses the leading digits of a version component ("20+" → 20).
pub fn parse_version_part(raw: &str) -> u32 {
    let digits: String = raw.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or(0)
}

/// Asks the server for its version and the resources we care about.
pub async fn discover(client: &Client) -> Result<ServerCapabilities, kube::Error> {
    let info = client.apiserver_version().await?;
    let core = client.list_core_api_resources("v1").await?;
    let pod_resize = core.resources.iter().any(|r| r.name == "pods/resize");
    let groups = client.list_api_groups().await?;
    let serves = |group: &str, version: &str| {
        groups
            .groups
            .iter()
            .any(|g| g.name == group && g.versions.iter().any(|v| v.version == version))
    };
    Ok(ServerCapabilities {
        git_version: info.git_version.clone(),
        major: parse_version_part(&info.major),
        minor: parse_version_part(&info.minor),
        pod_resize,
        events_v1: serves("events.k8s.io", "v1"),
        leases_v1: serves("coordination.k8s.io", "v1"),
    })
}

/// The retry schedule of discovery at start: 0.5 s doubling to 10 s, with jitter, 12
/// retries (about a minute and a half in all). A start that meets an overloaded or
/// restarting API server (429, 500, a cut connection) waits for it instead of exiting
/// into a crash loop; one that never gets an answer still exits with the last error.
pub fn startup_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(10))
        .with_max_times(12)
        .with_jitter()
}

/// [`discover`], retried on every failure by `backoff`; `on_retry` hears each failure
/// and the delay before the next attempt.
pub async fn discover_retrying(
    client: &Client,
    backoff: impl BackoffBuilder,
    on_retry: impl FnMut(&kube::Error, Duration),
) -> Result<ServerCapabilities, kube::Error> {
    (|| discover(client)).retry(backoff).notify(on_retry).await
}

/// Whether the server serves `resource` in `api_version` (`apps.kruise.io/v1beta1`), asked
/// by `backoff` like [`discover_retrying`]: an answer that is not one (429, 5xx, a cut or
/// refused connection) is asked again, never taken for "not served", so that one failed
/// request at start does not switch a feature off for the life of the process. A group the
/// server does not know (404) is an answer: not served.
pub async fn serves_retrying(
    client: &Client,
    api_version: &str,
    resource: &str,
    backoff: impl BackoffBuilder,
    on_retry: impl FnMut(&kube::Error, Duration),
) -> Result<bool, kube::Error> {
    (|| async {
        match client.list_api_group_resources(api_version).await {
            Ok(list) => Ok(list.resources.iter().any(|r| r.name == resource)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    })
    .retry(backoff)
    .notify(on_retry)
    .await
}

/// How long a feature whose API the server did not serve waits before asking again.
pub const NOT_SERVED_RECHECK: Duration = Duration::from_secs(15);

/// Whether the server serves `resource` in `api_version`, asked by the start schedule
/// ([`serves_retrying`] with [`startup_backoff`]); a server that never answers counts as
/// "not served", with a warning.
pub async fn serves(client: &Client, api_version: &str, resource: &str) -> bool {
    let asked = serves_retrying(
        client,
        api_version,
        resource,
        startup_backoff(),
        |e, retry_in| warn!(error = %e, ?retry_in, api_version, "cannot list the group's resources yet"),
    )
    .await;
    asked.unwrap_or_else(|e| {
        warn!(error = %e, api_version, "cannot list the group's resources");
        false
    })
}

/// Waits until the server serves `resource` in `api_version`, asking again every
/// [`NOT_SERVED_RECHECK`]; `feature` names what waits, in the one warning.
pub async fn wait_until_served(client: &Client, api_version: &str, resource: &str, feature: &str) {
    until_served(
        &format!("{resource}.{api_version}"),
        feature,
        || serves(client, api_version, resource),
        NOT_SERVED_RECHECK,
    )
    .await;
}

/// Asks `served` until it says yes, `recheck` apart; the number of "no" answers. A "no" is
/// not final: an API server that has just restarted answers 404 for a group until it has
/// loaded it (a CRD's group, and in its first seconds built-in ones too), and a feature
/// switched off for the life of the process would, e.g., leave the ImagePullJobs it
/// created behind or publish no event again.
async fn until_served<F, Fut>(
    resource: &str,
    feature: &str,
    mut served: F,
    recheck: Duration,
) -> u32
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut refused = 0;
    while !served().await {
        if refused == 0 {
            warn!(?recheck, resource, "not served: {feature} waits for it");
        }
        refused += 1;
        tokio::time::sleep(recheck).await;
    }
    if refused > 0 {
        tracing::info!(resource, refused, "served now: {feature} goes on");
    }
    refused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    #[allow(clippy::expect_used)]
    async fn discovery_that_fails_is_retried_by_the_schedule_then_gives_up() {
        // A port nothing listens on: every attempt fails to connect.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        let config = kube::Config::new(
            format!("http://127.0.0.1:{port}")
                .parse()
                .expect("a valid url"),
        );
        let client = Client::try_from(config).expect("a client");
        let schedule = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(1))
            .with_max_delay(Duration::from_millis(2))
            .with_max_times(3);
        let mut retries = 0;
        let result = discover_retrying(&client, schedule, |_, _| retries += 1).await;
        assert!(result.is_err(), "nothing answers");
        assert_eq!(retries, 3, "three retries after the first attempt");
    }

    /// A stand-in API server for `/apis/apps.kruise.io/v1beta1`: answers 500 to the first
    /// `failures` requests, then `status` with a list naming `imagepulljobs`.
    #[allow(clippy::expect_used)]
    async fn group_server(failures: usize, status: u16) -> Client {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let seen = Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new().fallback(move || {
            let seen = seen.clone();
            async move {
                let code = if seen.fetch_add(1, Ordering::SeqCst) < failures {
                    500
                } else {
                    status
                };
                let body = if code == 200 {
                    r#"{"kind":"APIResourceList","groupVersion":"apps.kruise.io/v1beta1","resources":[{"name":"imagepulljobs","singularName":"","namespaced":true,"kind":"ImagePullJob","verbs":["get"]}]}"#.to_owned()
                } else {
                    format!(r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","code":{code}}}"#)
                };
                (
                    axum::http::StatusCode::from_u16(code).expect("a status"),
                    [("content-type", "application/json")],
                    body,
                )
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        let config = kube::Config::new(format!("http://{addr}").parse().expect("a valid url"));
        Client::try_from(config).expect("a client")
    }

    fn fast() -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(1))
            .with_max_delay(Duration::from_millis(2))
            .with_max_times(5)
    }

    #[tokio::test]
    async fn a_failed_answer_is_asked_again_not_taken_for_not_served() {
        let client = group_server(2, 200).await;
        let mut retries = 0;
        let served = serves_retrying(
            &client,
            "apps.kruise.io/v1beta1",
            "imagepulljobs",
            fast(),
            |_, _| retries += 1,
        )
        .await;
        assert!(matches!(served, Ok(true)), "{served:?}");
        assert_eq!(retries, 2);
        // Served, but not the resource asked for.
        let other = serves_retrying(
            &client,
            "apps.kruise.io/v1beta1",
            "sidecarsets",
            fast(),
            |_, _| {},
        )
        .await;
        assert!(matches!(other, Ok(false)), "{other:?}");
    }

    #[tokio::test]
    async fn a_group_the_server_does_not_know_is_not_served_at_once() {
        let client = group_server(0, 404).await;
        let mut retries = 0;
        let served = serves_retrying(
            &client,
            "apps.kruise.io/v1beta1",
            "imagepulljobs",
            fast(),
            |_, _| retries += 1,
        )
        .await;
        assert!(matches!(served, Ok(false)), "{served:?}");
        assert_eq!(retries, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_feature_waits_for_the_server_to_serve_its_resource() {
        // A restarted API server answers 404 for a group until it has loaded it.
        let answers = [false, false, true, false];
        let asked = std::cell::Cell::new(0);
        let recheck = Duration::from_secs(15);
        let began = tokio::time::Instant::now();
        let refused = until_served(
            "imagepulljobs.apps.kruise.io/v1beta1",
            "image pre-download",
            || {
                let answer = answers[asked.get()];
                asked.set(asked.get() + 1);
                async move { answer }
            },
            recheck,
        )
        .await;
        assert_eq!(refused, 2, "two answers said not served");
        assert_eq!(asked.get(), 3, "asked until served, not after");
        assert_eq!(
            began.elapsed(),
            recheck * 2,
            "asked again {recheck:?} apart"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_serves_the_resource_is_asked_once() {
        let asked = std::cell::Cell::new(0);
        let began = tokio::time::Instant::now();
        let refused = until_served(
            "events.events.k8s.io/v1",
            "events",
            || {
                asked.set(asked.get() + 1);
                async { true }
            },
            NOT_SERVED_RECHECK,
        )
        .await;
        assert_eq!((refused, asked.get()), (0, 1));
        assert_eq!(began.elapsed(), Duration::ZERO);
    }

    #[test]
    fn the_startup_schedule_waits_about_a_minute_and_a_half_at_most() {
        let delays: Vec<Duration> = startup_backoff().build().collect();
        assert_eq!(delays.len(), 12);
        let total: Duration = delays.iter().sum();
        // Jitter adds up to 100% of each delay.
        assert!(
            total >= Duration::from_secs(60) && total <= Duration::from_secs(200),
            "{total:?}"
        );
    }

    #[test]
    fn version_parts_parse_like_kubectl() {
        assert_eq!(parse_version_part("20"), 20);
        assert_eq!(parse_version_part("20+"), 20);
        assert_eq!(parse_version_part(""), 0);
        let caps = ServerCapabilities {
            major: 1,
            minor: 20,
            ..Default::default()
        };
        assert!(caps.at_least(1, 20));
        assert!(!caps.at_least(1, 27));
    }
}
