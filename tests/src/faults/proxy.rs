//! The fault proxy: a plain-HTTP listener on loopback for the controller (its kubeconfig
//! says `server: http://127.0.0.1:PORT`, without credentials) that forwards every request
//! with a `kube::Client` built from the bed's kubeconfig (which holds TLS and the
//! credentials) and injects the faults [`super::injection::decide`] picks while faults are on.
//! Bodies are streamed, so watches work through it. Every request is recorded (method,
//! path, status, injected fault).
//!
//! "Reset" here is the proxy closing the controller's connection without an answer: the
//! controller's HTTP client sees the connection end in the middle of the exchange.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

use super::injection::{Decision, Fault, Rates, RequestKind, decide};
use super::rng::Rng;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// One request the proxy forwarded or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Milliseconds since the proxy started, when the request arrived.
    pub at_ms: u64,
    /// When its answer was decided (forwarded and answered upstream, or failed here).
    pub done_ms: u64,
    /// The client connection it came on (numbered from 1 in order of opening) and when
    /// that connection was opened: a process's requests come on its own connections.
    pub conn: u64,
    pub conn_opened_ms: u64,
    pub method: String,
    pub path: String,
    pub kind: RequestKind,
    /// The status the client got; 0 when the connection was cut.
    pub status: u16,
    /// The API server's status when the request was forwarded (`None`: it was not), which
    /// says whether a write was applied even when the client got a fault instead.
    pub upstream: Option<u16>,
    pub fault: Option<Fault>,
    pub delay_ms: u64,
    /// `metadata.name` of the request's body (the name of a created object).
    pub body_name: Option<String>,
    /// The body pins the write: `metadata.resourceVersion`, or `preconditions` with a
    /// uid or resourceVersion (a delete).
    pub precondition: bool,
}

/// What the record keeps of a request's body.
fn body_facts(body: &[u8]) -> (Option<String>, bool) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return (None, false);
    };
    let name = v["metadata"]["name"].as_str().map(str::to_owned);
    let pinned = !v["metadata"]["resourceVersion"].is_null()
        || !v["preconditions"]["resourceVersion"].is_null()
        || !v["preconditions"]["uid"].is_null();
    (name, pinned)
}

struct State {
    client: kube::Client,
    rates: Rates,
    rng: Mutex<Rng>,
    enabled: AtomicBool,
    records: Mutex<Vec<Record>>,
    started: Instant,
    connections: std::sync::atomic::AtomicU64,
    /// Requests received and not answered yet (a record is written only once answered),
    /// by number: what a process that went silent was waiting for.
    in_flight: Mutex<std::collections::BTreeMap<u64, String>>,
    requests: std::sync::atomic::AtomicU64,
}

/// A request in [`State::in_flight`] until dropped (answered, or its connection closed).
struct InFlight<'a> {
    state: &'a State,
    id: u64,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.state.in_flight.lock() {
            m.remove(&self.id);
        }
    }
}

impl State {
    fn record(&self, r: Record) {
        if let Ok(mut rs) = self.records.lock() {
            rs.push(r);
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn decide(&self, kind: RequestKind) -> Decision {
        if !self.enabled.load(Ordering::SeqCst) {
            return Decision::PASS;
        }
        match self.rng.lock() {
            Ok(mut rng) => decide(&self.rates, kind, &mut rng),
            Err(_) => Decision::PASS,
        }
    }
}

/// A running fault proxy; stops (with every connection through it) on drop.
pub struct FaultProxy {
    pub addr: SocketAddr,
    state: Arc<State>,
    _shutdown: watch::Sender<bool>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .finish()
    }
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards with `client`; faults start off.
    pub async fn start(client: kube::Client, rates: Rates, rng: Rng) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            client,
            rates,
            rng: Mutex::new(rng),
            enabled: AtomicBool::new(false),
            records: Mutex::new(Vec::new()),
            started: Instant::now(),
            connections: std::sync::atomic::AtomicU64::new(0),
            in_flight: Mutex::new(std::collections::BTreeMap::new()),
            requests: std::sync::atomic::AtomicU64::new(0),
        });
        let (tx, rx) = watch::channel(false);
        tokio::spawn(accept_loop(listener, state.clone(), rx));
        Ok(FaultProxy {
            addr,
            state,
            _shutdown: tx,
        })
    }

    /// Turns fault injection on or off (requests already decided keep their fault).
    pub fn set_faults(&self, on: bool) {
        self.state.enabled.store(on, Ordering::SeqCst);
    }

    /// Milliseconds since the proxy started (the clock of [`Record::at_ms`]).
    pub fn now_ms(&self) -> u64 {
        self.state.now_ms()
    }

    /// The requests received and not answered yet (`at_ms connection method path`).
    pub fn in_flight(&self) -> Vec<String> {
        self.state
            .in_flight
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn records(&self) -> Vec<Record> {
        self.state
            .records
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// A kubeconfig that reaches the API server through this proxy.
    pub fn kubeconfig(&self, namespace: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fault-proxy\n  cluster:\n    server: http://{}\nusers:\n- name: none\n  user: {{}}\ncontexts:\n- name: fault-proxy\n  context:\n    cluster: fault-proxy\n    user: none\n    namespace: {namespace}\ncurrent-context: fault-proxy\n",
            self.addr
        )
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, shutdown: watch::Receiver<bool>) {
    loop {
        let mut stop = shutdown.clone();
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(_) => continue,
            },
            _ = stop.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let conn = Conn {
            id: state.connections.fetch_add(1, Ordering::SeqCst) + 1,
            opened_ms: state.now_ms(),
        };
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let cut = Arc::new(Notify::new());
            let svc = {
                let cut = cut.clone();
                service_fn(move |req| handle(state.clone(), cut.clone(), conn, req))
            };
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
            // Dropping the connection's future closes the socket, whatever it was doing.
            tokio::select! {
                _ = conn => {}
                _ = cut.notified() => {}
                _ = stop.changed() => {}
            }
        });
    }
}

/// A client connection of the proxy.
#[derive(Debug, Clone, Copy)]
struct Conn {
    id: u64,
    opened_ms: u64,
}

/// The API server's error answer for an injected status.
fn status_response(fault: Fault) -> Response<ProxyBody> {
    let (code, reason, retry) = match fault {
        Fault::Conflict => (409, "Conflict", false),
        Fault::TooManyRequests => (429, "TooManyRequests", true),
        _ => (500, "InternalError", false),
    };
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("{fault} injected by the fault proxy"),
        "reason": reason,
        "code": code,
    });
    if retry {
        status["details"] = json!({ "retryAfterSeconds": 1 });
    }
    let mut resp = Response::new(
        Full::new(Bytes::from(status.to_string()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *resp.status_mut() = hyper::StatusCode::from_u16(code).unwrap_or_default();
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    if retry {
        resp.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            hyper::header::HeaderValue::from_static("1"),
        );
    }
    resp
}

/// Headers that belong to one connection, not to the request or answer.
fn hop_by_hop(name: &hyper::header::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "content-length"
            | "upgrade"
            | "te"
            | "trailer"
            | "proxy-authorization"
            | "proxy-connection"
            | "authorization"
    )
}

async fn handle(
    state: Arc<State>,
    cut: Arc<Notify>,
    conn: Conn,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| path.clone(), |pq| pq.as_str().to_owned());
    let kind = RequestKind::of(&method, req.uri().query());
    let d = state.decide(kind);
    let mut rec = Record {
        at_ms: state.now_ms(),
        done_ms: 0,
        conn: conn.id,
        conn_opened_ms: conn.opened_ms,
        method,
        path,
        kind,
        status: 0,
        upstream: None,
        fault: d.fault.or((d.delay_ms > 0).then_some(Fault::Latency)),
        delay_ms: d.delay_ms,
        body_name: None,
        precondition: false,
    };
    let id = state.requests.fetch_add(1, Ordering::SeqCst);
    if let Ok(mut m) = state.in_flight.lock() {
        m.insert(
            id,
            format!("{} c{} {} {}", rec.at_ms, rec.conn, rec.method, rec.path),
        );
    }
    let _in_flight = InFlight { state: &state, id };
    let record = |mut rec: Record, status: u16| {
        rec.status = status;
        rec.done_ms = state.now_ms();
        state.record(rec);
    };
    if d.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(d.delay_ms)).await;
    }
    let (parts, body) = req.into_parts();
    let Ok(collected) = body.collect().await else {
        // The client went away in the middle of its request (or sent a body that cannot
        // be read): the connection is closed, not left open with the request unanswered.
        cut.notify_one();
        return std::future::pending().await;
    };
    let body = collected.to_bytes();
    (rec.body_name, rec.precondition) = body_facts(&body);
    match d.fault {
        Some(f @ (Fault::Conflict | Fault::TooManyRequests | Fault::InternalError)) => {
            let resp = status_response(f);
            record(rec, resp.status().as_u16());
            return Ok(resp);
        }
        Some(Fault::Reset) => {
            record(rec, 0);
            cut.notify_one();
            return std::future::pending().await;
        }
        _ => {}
    }
    let mut out = hyper::Request::builder().method(parts.method).uri(target);
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            out = out.header(name, value);
        }
    }
    let out = match out.body(kube::client::Body::from(body)) {
        Ok(r) => r,
        Err(_) => return Ok(status_response(Fault::InternalError)),
    };
    let upstream = match state.client.send(out).await {
        Ok(r) => r,
        Err(e) => {
            // Not injected: the bed itself failed. The client sees a 502.
            let mut resp = status_response(Fault::InternalError);
            *resp.status_mut() = hyper::StatusCode::BAD_GATEWAY;
            tracing::warn!(error = %e, path = %rec.path, "fault proxy: upstream request failed");
            rec.fault = None;
            record(rec, 502);
            return Ok(resp);
        }
    };
    let status = upstream.status().as_u16();
    rec.upstream = Some(status);
    match d.fault {
        Some(Fault::InternalErrorAfterCommit) => {
            drop(upstream);
            record(rec, 500);
            return Ok(status_response(Fault::InternalError));
        }
        Some(Fault::ResetAfterCommit) => {
            drop(upstream);
            record(rec, 0);
            cut.notify_one();
            return std::future::pending().await;
        }
        _ => {}
    }
    let (parts, body) = upstream.into_parts();
    let body: ProxyBody = if d.fault == Some(Fault::WatchDrop) {
        let end = tokio::time::sleep(Duration::from_millis(d.drop_after_ms));
        let frames = body
            .into_data_stream()
            .take_until(end)
            .map(|chunk| chunk.map(Frame::data).map_err(|e| Box::new(e) as BoxError));
        StreamBody::new(frames).boxed_unsync()
    } else {
        body.map_err(|e| Box::new(e) as BoxError).boxed_unsync()
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = parts.status;
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            resp.headers_mut().append(name, value.clone());
        }
    }
    record(rec, status);
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::{Read, Write};

    /// Every write is cut before it is forwarded; nothing else happens.
    fn resets_only() -> Rates {
        Rates {
            write_conflict: 0,
            write_throttle: 0,
            write_error: 0,
            write_error_after_commit: 0,
            write_reset: 1000,
            write_reset_after_commit: 0,
            read_throttle: 0,
            read_error: 0,
            read_reset: 0,
            watch_drop: 0,
            watch_drop_max_ms: 500,
            latency: 0,
            latency_max_ms: 10,
        }
    }

    /// A "reset" closes the client's TCP connection: the client reads the end of the
    /// stream (or a reset) at once, instead of waiting on a connection held open.
    #[tokio::test]
    async fn a_reset_closes_the_connection() -> Result<(), BoxError> {
        // Never reached: a reset write is not forwarded.
        let upstream = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
        let proxy = FaultProxy::start(upstream, resets_only(), Rng::new(1)).await?;
        proxy.set_faults(true);
        let addr = proxy.addr;
        // A plain blocking client with a read timeout: it sees exactly what the socket does.
        let read = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
            let mut conn = std::net::TcpStream::connect(addr)?;
            conn.set_read_timeout(Some(Duration::from_secs(5)))?;
            conn.write_all(
                b"PATCH /api/v1/namespaces/ns/pods/p HTTP/1.1\r\nhost: x\r\ncontent-type: application/merge-patch+json\r\ncontent-length: 2\r\n\r\n{}",
            )?;
            let mut answer = Vec::new();
            conn.read_to_end(&mut answer).map(|_| answer)
        })
        .await?;
        match read {
            // The end of the stream, and nothing answered.
            Ok(answer) => assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer)),
            // A timeout means the connection was held open.
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
        }
        let records = proxy.records();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0].status, 0);
        assert_eq!(records[0].fault, Some(Fault::Reset));
        assert_eq!(records[0].upstream, None);
        assert!(proxy.in_flight().is_empty(), "{:?}", proxy.in_flight());
        Ok(())
    }

    #[test]
    fn body_facts_name_and_precondition() {
        assert_eq!(
            body_facts(br#"{"metadata":{"name":"flt-abc","labels":{}}}"#),
            (Some("flt-abc".into()), false)
        );
        assert_eq!(
            body_facts(br#"{"metadata":{"resourceVersion":"42"},"status":{}}"#),
            (None, true)
        );
        assert_eq!(
            body_facts(br#"{"kind":"DeleteOptions","preconditions":{"uid":"u-1"}}"#),
            (None, true)
        );
        assert_eq!(
            body_facts(br#"{"metadata":{"resourceVersion":null}}"#),
            (None, false)
        );
        assert_eq!(body_facts(b""), (None, false));
        assert_eq!(body_facts(b"[{\"op\":\"add\"}]"), (None, false));
    }
}
