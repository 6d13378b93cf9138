use super::*;

use axum::http::StatusCode;
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

#[tokio::test]
async fn only_successful_lease_writes_renew() -> Result<(), BoxError> {
    let calls = Arc::new(AtomicU64::new(0));
    let cases = [
        // (method, path, answer, renews)
        (Method::PATCH, LEASE, StatusCode::OK, true),
        (Method::POST, LEASE, StatusCode::CREATED, true),
        (Method::PATCH, LEASE, StatusCode::CONFLICT, false),
        (
            Method::PATCH,
            LEASE,
            StatusCode::INTERNAL_SERVER_ERROR,
            false,
        ),
        (Method::GET, LEASE, StatusCode::OK, false),
        (Method::PATCH, POD, StatusCode::OK, false),
    ];
    for (method, path, answer, renews) in cases {
        let fence = Fence::enforced(10 * SECOND);
        let observer = RenewalObserverLayer(fence.clone()).layer(server(answer, calls.clone()));
        let before = Instant::now();
        let response = observer.oneshot(request(method.clone(), path)).await?;
        assert_eq!(response.status(), answer);
        assert_eq!(
            fence.last_renewal().is_some(),
            renews,
            "{method} {path} answered {answer}"
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
