use super::*;

use axum::http::StatusCode;
use bytes::Bytes;
use http_body_util::Full;
use tower::ServiceExt;

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn margin_is_a_fifth_of_the_lease_within_bounds() {
    for (lease, margin) in [
        (15, Duration::from_secs(3)),
        (60, Duration::from_secs(12)),
        (4, SECOND),
        (2, SECOND),
        (1, Duration::from_millis(500)),
    ] {
        let lease = Duration::from_secs(lease);
        assert_eq!(default_margin(lease), margin, "lease {lease:?}");
        assert!(validity(lease, default_margin(lease)) < lease);
    }
    assert_eq!(validity(SECOND, 2 * SECOND), Duration::ZERO);
}

/// (seconds after the renewal was sent, writes allowed) for a 10 s validity.
#[test]
fn writes_are_allowed_only_within_the_validity_of_the_last_renewal() {
    let fence = Fence::enforced(10 * SECOND);
    let t0 = Instant::now();
    assert_eq!(
        fence.check(t0),
        Err(Duration::MAX),
        "closed before any renewal"
    );
    fence.renewed(t0);
    for (after, allowed) in [(0, true), (5, true), (9, true), (10, false), (60, false)] {
        let verdict = fence.check(t0 + after * SECOND);
        assert_eq!(verdict.is_ok(), allowed, "{after} s after the renewal");
        if let Err(since) = verdict {
            assert_eq!(since, after * SECOND);
        }
    }
    // A later renewal extends it; an older one (a slow response) never shortens it.
    fence.renewed(t0 + 8 * SECOND);
    fence.renewed(t0 + 2 * SECOND);
    assert!(fence.check(t0 + 17 * SECOND).is_ok());
    assert!(fence.check(t0 + 18 * SECOND).is_err());
}

#[test]
fn without_election_nothing_is_fenced() {
    let fence = Fence::unenforced();
    assert_eq!(fence.check(Instant::now() + 3600 * SECOND), Ok(()));
}

#[test]
fn writes_and_lease_paths() {
    for (method, write) in [
        (Method::GET, false),
        (Method::HEAD, false),
        (Method::OPTIONS, false),
        (Method::POST, true),
        (Method::PUT, true),
        (Method::PATCH, true),
        (Method::DELETE, true),
    ] {
        assert_eq!(is_write(&method), write, "{method}");
    }
    for (path, lease) in [
        (
            "/apis/coordination.k8s.io/v1/namespaces/inplace-system/leases/inplace-controller",
            true,
        ),
        ("/api/v1/namespaces/default/pods/web-1", false),
        (
            "/apis/apps.kruise.io/v1alpha1/namespaces/leases/clonesets/x",
            false,
        ),
    ] {
        assert_eq!(is_lease(path), lease, "{path}");
    }
}

/// An API server stand-in answering every request with `status`, counting the calls.
fn server(
    status: StatusCode,
    calls: Arc<AtomicU64>,
) -> impl Service<
    Request<String>,
    Response = Response<String>,
    Error = BoxError,
    Future = BoxFuture<'static, Result<Response<String>, BoxError>>,
> + Clone {
    tower::service_fn(move |_req: Request<String>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let response = Response::builder()
            .status(status)
            .body(String::new())
            .map_err(|e| Box::new(e) as BoxError);
        Box::pin(async move { response }) as BoxFuture<'static, _>
    })
}

fn request(method: Method, path: &str) -> Request<String> {
    Request::builder()
        .method(method)
        .uri(path)
        .body(String::new())
        .unwrap_or_default()
}

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/ctl";
const POD: &str = "/api/v1/namespaces/ns/pods/web-1";

#[tokio::test]
async fn the_gate_refuses_writes_while_closed_and_lets_reads_through() -> Result<(), BoxError> {
    let fence = Fence::enforced(10 * SECOND);
    let calls = Arc::new(AtomicU64::new(0));
    let gate = WriteGateLayer(fence.clone()).layer(server(StatusCode::OK, calls.clone()));

    let read = gate.clone().oneshot(request(Method::GET, POD)).await?;
    assert_eq!(read.status(), StatusCode::OK);
    for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
        let refused = gate.clone().oneshot(request(method.clone(), POD)).await;
        let err = refused.err().ok_or("a write went through a closed fence")?;
        let fenced = err
            .downcast_ref::<FencedWrite>()
            .ok_or("not a FencedWrite")?;
        assert_eq!(fenced.method, method);
        assert_eq!(fenced.path, POD);
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the read reached the server"
    );

    fence.renewed(Instant::now());
    let write = gate.clone().oneshot(request(Method::PATCH, POD)).await?;
    assert_eq!(write.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    Ok(())
}

/// An API server stand-in answering every request with `status` and the Lease `body`.
type LeaseAnswer = Response<Full<Bytes>>;

fn lease_server(
    status: StatusCode,
    body: &'static str,
) -> impl Service<
    Request<String>,
    Response = LeaseAnswer,
    Error = BoxError,
    Future = BoxFuture<'static, Result<LeaseAnswer, BoxError>>,
> + Clone {
    tower::service_fn(move |_req: Request<String>| {
        let response = Response::builder()
            .status(status)
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .map_err(|e| Box::new(e) as BoxError);
        Box::pin(async move { response }) as BoxFuture<'static, _>
    })
}

const OURS: &str = r#"{"kind":"Lease","spec":{"holderIdentity":"ctl-1","renewTime":"2026-11-28T17:00:00.000000Z"}}"#;
const THEIRS: &str = r#"{"kind":"Lease","spec":{"holderIdentity":"ctl-2","renewTime":"2026-11-28T17:00:00.000000Z"}}"#;

#[tokio::test]
async fn only_successful_writes_of_a_lease_we_hold_renew() -> Result<(), BoxError> {
    let cases = [
        // (method, path, answer, lease answered, renews)
        (Method::PATCH, LEASE, StatusCode::OK, OURS, true),
        (Method::POST, LEASE, StatusCode::CREATED, OURS, true),
        // a renewal delayed past a takeover: it lands on the new holder's Lease
        (Method::PATCH, LEASE, StatusCode::OK, THEIRS, false),
        (Method::PATCH, LEASE, StatusCode::OK, "not json", false),
        (Method::PATCH, LEASE, StatusCode::CONFLICT, OURS, false),
        (
            Method::PATCH,
            LEASE,
            StatusCode::INTERNAL_SERVER_ERROR,
            OURS,
            false,
        ),
        (Method::GET, LEASE, StatusCode::OK, OURS, false),
        (Method::PATCH, POD, StatusCode::OK, OURS, false),
    ];
    for (method, path, answer, lease, renews) in cases {
        let fence = Fence::enforced(10 * SECOND);
        let observer = RenewalObserverLayer {
            fence: fence.clone(),
            identity: "ctl-1".into(),
        }
        .layer(lease_server(answer, lease));
        let before = Instant::now();
        let response = observer.oneshot(request(method.clone(), path)).await?;
        assert_eq!(response.status(), answer);
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await?
            .to_bytes();
        assert_eq!(body, lease.as_bytes(), "the answer is handed on whole");
        assert_eq!(
            fence.last_renewal().is_some(),
            renews,
            "{method} {path} answered {answer} with {lease}"
        );
        if let Some(sent) = fence.last_renewal() {
            assert!(
                sent >= before && sent <= Instant::now(),
                "the time it was sent"
            );
        }
    }
    Ok(())
}

#[test]
fn the_holder_is_what_the_answered_lease_names() {
    for (answer, named) in [
        (OURS, Some("ctl-1")),
        (THEIRS, Some("ctl-2")),
        (r#"{"spec":{}}"#, None),
        (r#"{"spec":{"holderIdentity":null}}"#, None),
        ("", None),
    ] {
        assert_eq!(holder(answer.as_bytes()).as_deref(), named, "{answer}");
    }
}

/// (query before, time left, query after): the API server's `timeout` is what remains of
/// the validity, unless the request carries a shorter one already.
#[test]
fn a_write_carries_what_remains_of_the_validity_as_the_servers_timeout() {
    for (before, left_ms, after) in [
        ("", 4_321, "timeout=4321ms"),
        ("fieldManager=x", 2_000, "fieldManager=x&timeout=2000ms"),
        ("timeout=30s&dryRun=All", 1_500, "dryRun=All&timeout=1500ms"),
        ("timeout=500ms", 1_500, "timeout=500ms"),
        ("timeout=junk", 1_500, "timeout=1500ms"),
        ("", 0, "timeout=1ms"),
    ] {
        let uri: axum::http::Uri = if before.is_empty() {
            format!("https://api:6443{POD}").parse().unwrap_or_default()
        } else {
            format!("https://api:6443{POD}?{before}")
                .parse()
                .unwrap_or_default()
        };
        let got = with_server_timeout(&uri, Duration::from_millis(left_ms)).unwrap_or(uri);
        assert_eq!(
            got.query().unwrap_or_default(),
            after,
            "{before:?}, {left_ms} ms left"
        );
        assert_eq!(got.path(), POD);
        assert_eq!(got.authority().map(|a| a.as_str()), Some("api:6443"));
    }
}

/// An API server stand-in that answers reads at once and holds every write for `hold`,
/// recording the query each write arrived with.
fn slow_writes(
    hold: Duration,
    queries: Arc<std::sync::Mutex<Vec<String>>>,
) -> impl Service<
    Request<String>,
    Response = Response<String>,
    Error = BoxError,
    Future = BoxFuture<'static, Result<Response<String>, BoxError>>,
> + Clone {
    tower::service_fn(move |req: Request<String>| {
        let write = is_write(req.method());
        if write && let Ok(mut q) = queries.lock() {
            q.push(req.uri().query().unwrap_or_default().to_owned());
        }
        Box::pin(async move {
            if write {
                tokio::time::sleep(hold).await;
            }
            Response::builder()
                .status(StatusCode::OK)
                .body(String::new())
                .map_err(|e| Box::new(e) as BoxError)
        }) as BoxFuture<'static, _>
    })
}

#[tokio::test]
async fn a_write_without_an_answer_is_abandoned_when_the_validity_ends() -> Result<(), BoxError> {
    let validity = Duration::from_millis(400);
    let fence = Fence::enforced(validity);
    let queries = Arc::new(std::sync::Mutex::new(Vec::new()));
    let gate = WriteGateLayer(fence.clone()).layer(slow_writes(30 * SECOND, queries.clone()));
    fence.renewed(Instant::now());

    let started = Instant::now();
    let outcome = tokio::time::timeout(
        10 * SECOND,
        gate.clone().oneshot(request(Method::PATCH, POD)),
    )
    .await?;
    let waited = started.elapsed();
    let err = outcome
        .err()
        .ok_or("a write held past the validity succeeded")?;
    let outlived = err
        .downcast_ref::<WriteOutlivedLease>()
        .ok_or("not a WriteOutlivedLease")?;
    assert_eq!(outlived.method, Method::PATCH);
    assert_eq!(outlived.path, POD);
    assert!(outlived.deadline <= validity, "{:?}", outlived.deadline);
    assert!(
        waited < validity + SECOND,
        "abandoned at the end of the validity, not at the server's pace: {waited:?}"
    );
    let sent = queries.lock().map(|q| q.clone()).unwrap_or_default();
    let [query] = sent.as_slice() else {
        return Err(format!("one write reaches the server: {sent:?}").into());
    };
    let ms: u64 = query
        .strip_prefix("timeout=")
        .and_then(|v| v.strip_suffix("ms"))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no server timeout in {query:?}"))?;
    assert!(ms >= 1 && u128::from(ms) <= validity.as_millis(), "{ms} ms");

    // Reads are not bounded by the lease: one goes through at once, without a timeout.
    let read = gate.clone().oneshot(request(Method::GET, POD)).await?;
    assert_eq!(read.status(), StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn without_election_writes_have_no_lease_deadline() -> Result<(), BoxError> {
    let queries = Arc::new(std::sync::Mutex::new(Vec::new()));
    let gate = WriteGateLayer(Fence::unenforced())
        .layer(slow_writes(Duration::from_millis(50), queries.clone()));
    let answer = gate.oneshot(request(Method::DELETE, POD)).await?;
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(
        queries.lock().map(|q| q.clone()).unwrap_or_default(),
        vec![String::new()]
    );
    Ok(())
}

mod deadline {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The deadline a write gets is exactly what remains of the validity of the
        /// latest renewal when it is sent: sent + deadline is the end of the validity, so
        /// no write let through outlives it; past the end, writes are refused with the
        /// time since that renewal.
        #[test]
        fn a_write_never_outlives_the_validity_of_the_latest_renewal(
            validity_ms in 1u64..120_000,
            renewals_ms in proptest::collection::vec(0u64..120_000, 1..5),
            after_ms in 0u64..240_000,
        ) {
            let validity = Duration::from_millis(validity_ms);
            let fence = Fence::enforced(validity);
            let t0 = Instant::now();
            for r in &renewals_ms {
                fence.renewed(t0 + Duration::from_millis(*r));
            }
            let latest = t0 + Duration::from_millis(renewals_ms.iter().copied().max().unwrap_or(0));
            // a write is sent after the renewals it is judged by
            let now = latest + Duration::from_millis(after_ms);
            let end = latest + validity;
            match fence.remaining(now) {
                Ok(Some(left)) => {
                    prop_assert!(now < end);
                    prop_assert_eq!(now + left, end);
                    prop_assert!(left <= validity);
                }
                Ok(None) => prop_assert!(false, "an enforced fence bounds every write"),
                Err(since) => {
                    prop_assert!(now >= end);
                    prop_assert_eq!(since, Duration::from_millis(after_ms));
                }
            }
        }
    }
}
