//! The fault proxy: a plain-HTTP listener on loopback for the controller (its kubeconfig
//! says `server: http://127.0.0.1:PORT`, without credentials) that forwards every request
//! with a `kube::Client` built from the bed's kubeconfig (which holds TLS and the
//! credentials) and injects the faults [`super::injection::decide`] picks while faults are on.
//! Bodies are streamed, so watches work through it. Every request is recorded (method,
//! path, status, injected fault).
//!
//! "Reset" here is the proxy closing the controller's connection without an answer: the
//! controller's HTTP client sees the connection end in the middle of the exchange. An
//! outage ([`FaultProxy::outage`]) cuts every open connection, watches included, and
//! every request until it ends: an API server gone for that long. A freeze
//! ([`FaultProxy::freeze`]) is the partition that keeps connections open: every request
//! arriving is held before it is forwarded, every answer and every watch event held
//! before it is passed on, no connection closed, until the thaw lets it all through (a
//! client that gave up meanwhile has its request applied late, or not at all if its
//! connection closed first).
//!
//! For stale lists the proxy keeps the last few answers of each list request (by path and
//! query) and may answer a later one with the oldest of them.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// How many earlier answers of one list request are kept for stale lists.
const KEPT_LISTS: usize = 3;

/// An earlier answer of a list request: its content type and body.
#[derive(Clone)]
struct ListAnswer {
    content_type: Option<hyper::header::HeaderValue>,
    body: Bytes,
}

struct State {
    client: kube::Client,
    rates: Rates,
    rng: Mutex<Rng>,
    enabled: AtomicBool,
    /// The proxy's clock (ms) until which every request is refused (0: no outage).
    outage_until_ms: AtomicU64,
    /// Bumped at an outage's start: every open connection closes.
    cut_all: watch::Sender<u64>,
    /// While true, requests, answers and watch events are held (connections stay open).
    frozen: watch::Sender<bool>,
    /// Requests a freeze held before forwarding.
    held_requests: AtomicU64,
    /// The last [`KEPT_LISTS`] answers of each list request, oldest first.
    lists: Mutex<HashMap<String, VecDeque<ListAnswer>>>,
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

    /// Records `rec` as answered now with `status`.
    fn finish(&self, mut rec: Record, status: u16) {
        rec.status = status;
        rec.done_ms = self.now_ms();
        self.record(rec);
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Returns once no freeze holds the proxy.
    async fn thawed(&self) {
        if !*self.frozen.borrow() {
            return;
        }
        let mut rx = self.frozen.subscribe();
        let _ = rx.wait_for(|frozen| !frozen).await;
    }

    fn in_outage(&self) -> bool {
        self.now_ms() < self.outage_until_ms.load(Ordering::SeqCst)
    }

    /// The oldest kept answer of the list request `target`.
    fn stale_list(&self, target: &str) -> Option<ListAnswer> {
        let lists = self.lists.lock().ok()?;
        lists.get(target)?.front().cloned()
    }

    fn keep_list(&self, target: &str, answer: ListAnswer) {
        if let Ok(mut lists) = self.lists.lock() {
            let kept = lists.entry(target.to_owned()).or_default();
            if kept.len() == KEPT_LISTS {
                kept.pop_front();
            }
            kept.push_back(answer);
        }
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
            outage_until_ms: AtomicU64::new(0),
            cut_all: watch::channel(0).0,
            frozen: watch::channel(false).0,
            held_requests: AtomicU64::new(0),
            lists: Mutex::new(HashMap::new()),
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

    /// An outage from now for `length`: every open connection is closed at once and every
    /// request until its end is refused (the connection closed, recorded as
    /// [`Fault::Outage`]), whether faults are on or not.
    pub fn outage(&self, length: Duration) {
        let until = self
            .now_ms()
            .saturating_add(u64::try_from(length.as_millis()).unwrap_or(u64::MAX));
        self.state.outage_until_ms.store(until, Ordering::SeqCst);
        self.state.cut_all.send_modify(|n| *n += 1);
    }

    /// Freezes the proxy until [`Self::thaw`]: requests (also on new connections) are held
    /// before they are forwarded, answers and watch events before they are passed on,
    /// and every connection stays open; whether faults are on or not.
    pub fn freeze(&self) {
        self.state.frozen.send_replace(true);
    }

    /// Ends a freeze: what it held goes through, late.
    pub fn thaw(&self) {
        self.state.frozen.send_replace(false);
    }

    /// A freeze from `after` from now, for `length` (a task to await, or to abort: the
    /// proxy is then thawed by [`Self::thaw`] or its drop).
    pub fn freeze_later(&self, after: Duration, length: Duration) -> tokio::task::JoinHandle<()> {
        let state = self.state.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            state.frozen.send_replace(true);
            tokio::time::sleep(length).await;
            state.frozen.send_replace(false);
        })
    }

    /// Requests a freeze held before forwarding them.
    pub fn held_requests(&self) -> u64 {
        self.state.held_requests.load(Ordering::SeqCst)
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
        let mut cut_all = state.cut_all.subscribe();
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
                _ = cut_all.changed() => {}
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

/// The API server's answer to a watch from a resourceVersion it no longer has: `200` with
/// one `ERROR` event carrying `410 Expired`, then the end of the stream.
fn expired_watch() -> Response<ProxyBody> {
    let event = json!({
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "too old resource version (410-expired injected by the fault proxy)",
            "reason": "Expired",
            "code": 410,
        },
    });
    list_response(ListAnswer {
        content_type: None,
        body: Bytes::from(format!("{event}\n")),
    })
}

/// A `200` answer with a whole body (a kept list, one just read, an expired watch's event);
/// JSON unless the answer says otherwise.
fn list_response(answer: ListAnswer) -> Response<ProxyBody> {
    let mut resp = Response::new(
        Full::new(answer.body)
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        answer
            .content_type
            .unwrap_or(hyper::header::HeaderValue::from_static("application/json")),
    );
    resp
}

/// Whether a read may be answered from a cache older than the latest write: the API server
/// serves `resourceVersion=0` and `resourceVersionMatch=NotOlderThan` from its watch cache.
fn allows_stale(target: &str) -> bool {
    target.split_once('?').is_some_and(|(_, q)| {
        q.split('&')
            .any(|kv| kv == "resourceVersion=0" || kv == "resourceVersionMatch=NotOlderThan")
    })
}

/// A JSON list (`kind` ending in `List`, with `items`).
fn is_list(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| {
        v["items"].is_array() && v["kind"].as_str().is_some_and(|k| k.ends_with("List"))
    })
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
    let arrived_ms = state.now_ms();
    // A freeze holds the request before anything is decided of it.
    if *state.frozen.borrow() {
        state.held_requests.fetch_add(1, Ordering::SeqCst);
    }
    state.thawed().await;
    let outage = state.in_outage();
    let d = if outage {
        Decision {
            fault: Some(Fault::Outage),
            ..Decision::PASS
        }
    } else {
        state.decide(kind)
    };
    let mut rec = Record {
        at_ms: arrived_ms,
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
            state.finish(rec, resp.status().as_u16());
            return Ok(resp);
        }
        Some(Fault::Reset | Fault::Outage) => {
            state.finish(rec, 0);
            cut.notify_one();
            return std::future::pending().await;
        }
        Some(Fault::WatchExpired) => {
            state.finish(rec, 200);
            return Ok(expired_watch());
        }
        // Only a list that asked for a cached answer (resourceVersion=0, or NotOlderThan) can
        // be older than an acknowledged write; a consistent list (no resourceVersion) cannot.
        Some(Fault::StaleList) => match allows_stale(&target)
            .then(|| state.stale_list(&target))
            .flatten()
        {
            Some(answer) => {
                state.finish(rec, 200);
                return Ok(list_response(answer));
            }
            // A consistent list, or no earlier answer to give: forwarded, and no fault but
            // the delay.
            None => rec.fault = (d.delay_ms > 0).then_some(Fault::Latency),
        },
        _ => {}
    }
    // Forwarded in a task of its own: a client that goes away now (a killed controller,
    // a cut connection) drops this future but not the request the API server already
    // has, so its outcome is still recorded. A lost record had shown a pod deleted by a
    // killed controller as deleted by nobody.
    let forwarded = tokio::spawn(forward(state.clone(), rec, d, kind, target, parts, body));
    match forwarded.await {
        Ok(Some(resp)) => Ok(resp),
        Ok(None) | Err(_) => {
            cut.notify_one();
            std::future::pending().await
        }
    }
}

/// Sends the request upstream and records its outcome; the answer to give, or None when
/// the client's connection is to be cut.
async fn forward(
    state: Arc<State>,
    mut rec: Record,
    d: Decision,
    kind: RequestKind,
    target: String,
    parts: hyper::http::request::Parts,
    body: Bytes,
) -> Option<Response<ProxyBody>> {
    let mut out = hyper::Request::builder()
        .method(parts.method)
        .uri(target.as_str());
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            out = out.header(name, value);
        }
    }
    let out = match out.body(kube::client::Body::from(body)) {
        Ok(r) => r,
        Err(_) => return Some(status_response(Fault::InternalError)),
    };
    let upstream = match state.client.send(out).await {
        Ok(r) => r,
        Err(e) => {
            // Not injected: the bed itself failed. The client sees a 502.
            let mut resp = status_response(Fault::InternalError);
            *resp.status_mut() = hyper::StatusCode::BAD_GATEWAY;
            tracing::warn!(error = %e, path = %rec.path, "fault proxy: upstream request failed");
            rec.fault = None;
            state.finish(rec, 502);
            return Some(resp);
        }
    };
    let status = upstream.status().as_u16();
    rec.upstream = Some(status);
    // An answer that came during a freeze waits for the thaw.
    state.thawed().await;
    match d.fault {
        Some(Fault::InternalErrorAfterCommit) => {
            drop(upstream);
            state.finish(rec, 500);
            return Some(status_response(Fault::InternalError));
        }
        Some(Fault::ResetAfterCommit) => {
            drop(upstream);
            state.finish(rec, 0);
            return None;
        }
        _ => {}
    }
    let (parts, body) = upstream.into_parts();
    if kind == RequestKind::Read && status == 200 {
        // A read is answered whole, and a list's answer kept for stale lists.
        let Ok(collected) = body.collect().await else {
            state.finish(rec, 0);
            return None;
        };
        let answer = ListAnswer {
            content_type: parts.headers.get(hyper::header::CONTENT_TYPE).cloned(),
            body: collected.to_bytes(),
        };
        if is_list(&answer.body) {
            state.keep_list(&target, answer.clone());
        }
        state.thawed().await;
        let mut resp = list_response(answer);
        for (name, value) in &parts.headers {
            if !hop_by_hop(name) && name != hyper::header::CONTENT_TYPE {
                resp.headers_mut().append(name, value.clone());
            }
        }
        state.finish(rec, status);
        return Some(resp);
    }
    // Each chunk of a streamed answer (a watch's events) waits out a freeze.
    let held = {
        let state = state.clone();
        move |chunk| {
            let state = state.clone();
            async move {
                state.thawed().await;
                chunk
            }
        }
    };
    let body: ProxyBody = if d.fault == Some(Fault::WatchDrop) {
        let end = tokio::time::sleep(Duration::from_millis(d.drop_after_ms));
        let frames = body
            .into_data_stream()
            .take_until(end)
            .then(held)
            .map(|chunk| chunk.map(Frame::data).map_err(|e| Box::new(e) as BoxError));
        StreamBody::new(frames).boxed_unsync()
    } else {
        let frames = body
            .into_data_stream()
            .then(held)
            .map(|chunk| chunk.map(Frame::data).map_err(|e| Box::new(e) as BoxError));
        StreamBody::new(frames).boxed_unsync()
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = parts.status;
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            resp.headers_mut().append(name, value.clone());
        }
    }
    state.finish(rec, status);
    Some(resp)
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
            watch_expired: 0,
            stale_list: 0,
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

    /// A write the API server has is recorded with its outcome even when its client went
    /// away while it was forwarded (a controller killed in the middle of a delete): the
    /// record is what says which pods the controller deleted.
    #[tokio::test]
    async fn a_forwarded_write_is_recorded_when_its_client_goes_away() -> Result<(), BoxError> {
        // A slow API server: it answers 300 ms after the request.
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let svc = service_fn(|_req: Request<Incoming>| async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Ok::<_, Infallible>(Response::new(full("{}")))
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), svc));
            }
        });
        let mut rates = resets_only();
        rates.write_reset = 0;
        let proxy = FaultProxy::start(client_of(addr)?, rates, Rng::new(1)).await?;
        proxy.set_faults(true);
        let at = proxy.addr;
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let mut conn = std::net::TcpStream::connect(at)?;
            conn.write_all(
                b"DELETE /api/v1/namespaces/ns/pods/p HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n",
            )?;
            std::thread::sleep(Duration::from_millis(100));
            // The client is gone before the answer: the socket closes.
            conn.shutdown(std::net::Shutdown::Both)
        })
        .await??;
        let recorded = async {
            while proxy.records().is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), recorded).await?;
        let records = proxy.records();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0].method, "DELETE");
        assert_eq!(records[0].upstream, Some(200), "{records:?}");
        Ok(())
    }

    /// No fault but `field` (per mille): `watch_expired` or `stale_list`.
    fn only(field: &str) -> Rates {
        let mut r = resets_only();
        r.write_reset = 0;
        match field {
            "watch_expired" => r.watch_expired = 1000,
            _ => r.stale_list = 1000,
        }
        r
    }

    /// A stand-in API server: a list answers a `PodList` whose resourceVersion counts the
    /// lists answered; a watch answers one event and then stays open.
    async fn upstream() -> std::io::Result<(kube::Client, Arc<AtomicU64>)> {
        stand_in(
            || {
                let event = Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":{}}\n");
                let first =
                    futures::stream::once(async move { Ok::<_, BoxError>(Frame::data(event)) });
                StreamBody::new(first.chain(futures::stream::pending())).boxed_unsync()
            },
            |rv| {
                full(format!(
                    r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[]}}"#
                ))
            },
        )
        .await
    }

    /// A stand-in API server answering a watch with `watch()` and the `n`th list (from 1)
    /// with `list(n)`; the lists answered are counted in the returned counter.
    async fn stand_in(
        watch: fn() -> ProxyBody,
        list: fn(u64) -> ProxyBody,
    ) -> std::io::Result<(kube::Client, Arc<AtomicU64>)> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let lists = Arc::new(AtomicU64::new(0));
        let counted = lists.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counted = counted.clone();
                let svc = service_fn(move |req: Request<Incoming>| {
                    let body = if RequestKind::of("GET", req.uri().query()) == RequestKind::Watch {
                        watch()
                    } else {
                        list(counted.fetch_add(1, Ordering::SeqCst) + 1)
                    };
                    async move { Ok::<_, Infallible>(Response::new(body)) }
                });
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), svc));
            }
        });
        Ok((client_of(addr)?, lists))
    }

    /// A whole response body of `text`.
    fn full(text: impl Into<Bytes>) -> ProxyBody {
        Full::new(text.into())
            .map_err(|never| match never {})
            .boxed_unsync()
    }

    /// A kube client of the stand-in server at `addr`.
    fn client_of(addr: std::net::SocketAddr) -> std::io::Result<kube::Client> {
        let url = format!("http://{addr}")
            .parse()
            .map_err(std::io::Error::other)?;
        kube::Client::try_from(kube::Config::new(url)).map_err(std::io::Error::other)
    }

    /// One HTTP/1.1 GET of `target` on a new connection, read to its end (or to `wait`).
    async fn get(
        addr: SocketAddr,
        target: &'static str,
        wait: Duration,
    ) -> std::io::Result<String> {
        tokio::task::spawn_blocking(move || {
            let mut conn = std::net::TcpStream::connect(addr)?;
            conn.set_read_timeout(Some(wait))?;
            conn.write_all(
                format!("GET {target} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
            )?;
            let mut answer = Vec::new();
            conn.read_to_end(&mut answer)?;
            Ok(String::from_utf8_lossy(&answer).into_owned())
        })
        .await?
    }

    /// A watch decided `410-expired` is answered as the API server answers a watch from a
    /// resourceVersion it no longer has, and never reaches the API server.
    #[tokio::test]
    async fn an_expired_watch_gets_one_410_event_and_ends() -> Result<(), BoxError> {
        let (client, lists) = upstream().await?;
        let proxy = FaultProxy::start(client, only("watch_expired"), Rng::new(1)).await?;
        proxy.set_faults(true);
        let answer = get(
            proxy.addr,
            "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=7",
            Duration::from_secs(5),
        )
        .await?;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(r#""type":"ERROR""#), "{answer}");
        assert!(answer.contains(r#""code":410"#) && answer.contains(r#""reason":"Expired""#));
        assert_eq!(lists.load(Ordering::SeqCst), 0);
        let records = proxy.records();
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0].fault, Some(Fault::WatchExpired));
        assert_eq!(records[0].upstream, None);
        Ok(())
    }

    /// A stale list is the oldest kept answer of the same request; a list with none kept
    /// is forwarded (and recorded without a fault).
    #[tokio::test]
    async fn a_stale_list_repeats_an_earlier_answer() -> Result<(), BoxError> {
        let (client, lists) = upstream().await?;
        let proxy = FaultProxy::start(client, only("stale_list"), Rng::new(1)).await?;
        proxy.set_faults(true);
        let wait = Duration::from_secs(5);
        let cached = "/api/v1/namespaces/ns/pods?resourceVersion=0";
        let first = get(proxy.addr, cached, wait).await?;
        assert!(first.contains(r#""resourceVersion":"1""#), "{first}");
        let second = get(proxy.addr, cached, wait).await?;
        assert!(second.contains(r#""resourceVersion":"1""#), "{second}");
        // Another request's answers are its own.
        let other = get(
            proxy.addr,
            "/api/v1/namespaces/ns/pods?labelSelector=a&resourceVersion=0",
            wait,
        )
        .await?;
        assert!(other.contains(r#""resourceVersion":"2""#), "{other}");
        // A consistent list (no resourceVersion) is never stale, however often asked.
        for rv in ["3", "4"] {
            let fresh = get(proxy.addr, "/api/v1/namespaces/ns/pods", wait).await?;
            assert!(
                fresh.contains(&format!(r#""resourceVersion":"{rv}""#)),
                "{fresh}"
            );
        }
        assert_eq!(lists.load(Ordering::SeqCst), 4);
        let faults: Vec<_> = proxy
            .records()
            .iter()
            .map(|r| (r.fault, r.upstream))
            .collect();
        assert_eq!(
            faults,
            [
                (None, Some(200)),
                (Some(Fault::StaleList), None),
                (None, Some(200)),
                (None, Some(200)),
                (None, Some(200))
            ]
        );
        Ok(())
    }

    /// An outage closes a watch that was open, refuses what comes during it, and ends.
    #[tokio::test]
    async fn an_outage_cuts_open_watches_and_refuses_until_it_ends() -> Result<(), BoxError> {
        let (client, _) = upstream().await?;
        let proxy = Arc::new(FaultProxy::start(client, Rates::default(), Rng::new(1)).await?);
        // Faults off: only the outage acts.
        let watch = tokio::spawn(get(
            proxy.addr,
            "/api/v1/namespaces/ns/pods?watch=true",
            Duration::from_secs(20),
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let cut_at = Instant::now();
        proxy.outage(Duration::from_secs(2));
        // The open watch ends at once (a timeout would be an error here).
        let watched = watch.await??;
        assert!(
            cut_at.elapsed() < Duration::from_secs(2),
            "{:?}",
            cut_at.elapsed()
        );
        assert!(watched.contains("ADDED"), "{watched}");
        // During the outage: the connection closed, nothing answered.
        let refused = get(
            proxy.addr,
            "/api/v1/namespaces/ns/pods",
            Duration::from_secs(5),
        )
        .await;
        assert!(
            refused.as_deref().map_or(true, str::is_empty),
            "{refused:?}"
        );
        tokio::time::sleep(Duration::from_millis(2100).saturating_sub(cut_at.elapsed())).await;
        let after = get(
            proxy.addr,
            "/api/v1/namespaces/ns/pods",
            Duration::from_secs(5),
        )
        .await?;
        assert!(after.starts_with("HTTP/1.1 200"), "{after}");
        let faults: Vec<_> = proxy.records().iter().map(|r| r.fault).collect();
        assert!(faults.contains(&Some(Fault::Outage)), "{faults:?}");
        Ok(())
    }

    /// A stand-in API server whose watch sends one event at once and then one every
    /// 100 ms (numbered), and whose lists count themselves.
    async fn ticking_upstream() -> std::io::Result<(kube::Client, Arc<AtomicU64>)> {
        stand_in(
            || {
                let ticks = futures::stream::unfold(0u64, |n| async move {
                    if n > 0 {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    let event = format!("{{\"type\":\"MODIFIED\",\"n\":{n}}}\n");
                    Some((Ok::<_, BoxError>(Frame::data(Bytes::from(event))), n + 1))
                });
                StreamBody::new(ticks).boxed_unsync()
            },
            |_| full(&br#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}"#[..]),
        )
        .await
    }

    /// What `conn` gives within `wait`: bytes, `Some(empty)` at the end of the stream,
    /// `None` when nothing came (the connection open and silent).
    async fn read_for(conn: &mut tokio::net::TcpStream, wait: Duration) -> Option<Vec<u8>> {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 64 * 1024];
        match tokio::time::timeout(wait, conn.read(&mut buf)).await {
            Ok(Ok(n)) => Some(buf[..n].to_vec()),
            Ok(Err(_)) => Some(Vec::new()),
            Err(_) => None,
        }
    }

    /// A freeze keeps a watch's connection open and silent, holds a new request before
    /// the API server sees it, and the thaw lets both through: the events held, late.
    #[tokio::test]
    async fn a_freeze_holds_requests_and_watch_events_until_the_thaw() -> Result<(), BoxError> {
        use tokio::io::AsyncWriteExt;
        let (client, lists) = ticking_upstream().await?;
        let proxy = FaultProxy::start(client, Rates::default(), Rng::new(1)).await?;
        // Faults off: only the freeze acts.
        let mut watch = tokio::net::TcpStream::connect(proxy.addr).await?;
        watch
            .write_all(b"GET /api/v1/pods?watch=true HTTP/1.1\r\nhost: x\r\n\r\n")
            .await?;
        let first = read_for(&mut watch, Duration::from_secs(5))
            .await
            .ok_or("no answer to the watch")?;
        assert!(String::from_utf8_lossy(&first).contains("HTTP/1.1 200"));
        proxy.freeze();
        // Drain what passed the proxy before the freeze (bounded: a proxy that did not
        // freeze keeps sending).
        for _ in 0..10 {
            if read_for(&mut watch, Duration::from_millis(150))
                .await
                .is_none_or(|b| b.is_empty())
            {
                break;
            }
        }
        let frozen_at = Instant::now();
        // Silent and open: no byte, and no end of the stream, for a second.
        assert_eq!(read_for(&mut watch, Duration::from_secs(1)).await, None);
        // A request made during the freeze is held before forwarding.
        let list = tokio::spawn(get(proxy.addr, "/api/v1/pods", Duration::from_secs(10)));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!list.is_finished());
        assert_eq!(
            lists.load(Ordering::SeqCst),
            0,
            "forwarded during the freeze"
        );
        assert_eq!(proxy.held_requests(), 1);
        proxy.thaw();
        let listed = list.await??;
        assert!(listed.starts_with("HTTP/1.1 200"), "{listed}");
        assert_eq!(lists.load(Ordering::SeqCst), 1);
        // The watch goes on, with the events the freeze held.
        let after = read_for(&mut watch, Duration::from_secs(2))
            .await
            .ok_or("the watch stayed silent after the thaw")?;
        assert!(
            String::from_utf8_lossy(&after).contains("MODIFIED"),
            "{}",
            String::from_utf8_lossy(&after)
        );
        assert!(frozen_at.elapsed() >= Duration::from_millis(1500));
        let records = proxy.records();
        let held = records
            .iter()
            .find(|r| r.path == "/api/v1/pods" && r.kind == RequestKind::Read)
            .ok_or("the list not recorded")?;
        assert!(held.done_ms >= held.at_ms + 400, "{held:?}");
        Ok(())
    }

    /// `freeze_later` freezes after its delay and thaws after its length.
    #[tokio::test]
    async fn a_timed_freeze_thaws_by_itself() -> Result<(), BoxError> {
        let (client, lists) = ticking_upstream().await?;
        let proxy = FaultProxy::start(client, Rates::default(), Rng::new(1)).await?;
        let task = proxy.freeze_later(Duration::from_millis(100), Duration::from_millis(800));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        let answer = get(proxy.addr, "/api/v1/pods", Duration::from_secs(5)).await?;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(400) && waited < Duration::from_secs(3),
            "{waited:?}"
        );
        task.await?;
        assert_eq!(proxy.held_requests(), 1);
        assert_eq!(lists.load(Ordering::SeqCst), 1);
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
