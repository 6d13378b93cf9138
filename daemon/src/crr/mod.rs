//! ContainerRecreateRequest handling on the node: one active CRR per pod at a time,
//! preStop then CRI StopContainer for each named container, progress from CRI polling.
//!
//! Success of a recreated container: a new instance (id differs from the request's
//! `statusContext`) runs for `minStartedSeconds`, and, when the manager's snapshot
//! annotation knows that instance, it is ready.

pub mod decide;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use inplace_proto::keys;
use k8s_cri::v1::ContainerState;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, Patch};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use crate::api::{ContainerRecreateRequest, ContainerRecreateRequestStatus, ProbeHandler};
use crate::apiserver::{Health, patch_params, watch_into_store};
use crate::cri::{CriClient, CriError};
use crate::inplace::{self, ExecError};
use crate::metrics::{Metrics, PhaseLabel};
use crate::pod_cache::PodCache;
use decide::{Instance, Kill};

/// Watches the active CRRs of `node` into `writer`, poking `notify` on every change.
pub async fn watch_crrs(
    api: Api<ContainerRecreateRequest>,
    node: String,
    writer: reflector::store::Writer<ContainerRecreateRequest>,
    notify: Arc<Notify>,
    health: Arc<Health>,
) {
    let selector: kube::core::Selector = [
        (keys::CRR_NODE_NAME_LABEL.to_owned(), node),
        (keys::CRR_ACTIVE_LABEL.to_owned(), "true".to_owned()),
    ]
    .into_iter()
    .collect();
    let cfg = watcher::Config::default().labels_from(&selector);
    watch_into_store(api, cfg, "CRR", writer, &notify, &health.crr_synced).await;
}

/// A status write of the handler: the request's version it was made over (as the watch
/// showed it), the version it left, and the status written.
#[derive(Clone, Debug)]
struct Written {
    before: String,
    after: String,
    status: ContainerRecreateRequestStatus,
}

/// Conflicts of one sync after which it gives up until the next round: each is followed by
/// a fresh read and a new decision.
const CONFLICT_REREADS: u32 = 3;

/// The merge patch of a request's status (the daemon owns it whole), conditional on the
/// resourceVersion the status was decided from: when the request changed meanwhile (the
/// controller deactivated or completed it, the watch lagging behind), the API server
/// answers 409 and the request is read again and decided anew.
pub fn status_patch(
    status: &ContainerRecreateRequestStatus,
    resource_version: Option<&str>,
) -> serde_json::Value {
    let mut body = serde_json::json!({ "status": status });
    if let Some(rv) = resource_version {
        body["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    body
}

pub struct CrrHandler {
    crrs: Store<ContainerRecreateRequest>,
    notify: Arc<Notify>,
    poll: Duration,
    worker: Worker,
}

/// What the sync of one pod's active request needs. Shared by the syncs of different
/// pods, which run at once: one pod's long preStop or grace period holds up no other pod.
struct Worker {
    cri: CriClient,
    client: kube::Client,
    pods: PodCache,
    metrics: Metrics,
    /// Per CRR uid: our last status write. While the watch cache still shows the object as
    /// it was before that write, the written status (and the version it left) is the base
    /// (else a kill already done would be forgotten, and the next write refused).
    written: std::sync::Mutex<HashMap<String, Written>>,
    /// Kubernetes Events of the requests' outcomes, on their pods.
    recorder: crate::recorder::EventRecorder,
}

/// A pod's requests: `(namespace, pod name)`.
type PodKey = (String, String);

/// The back-off of each pod whose last sync failed.
type Retries = std::sync::Mutex<HashMap<PodKey, crate::inplace::Retry>>;

fn lock_retries(r: &Retries) -> std::sync::MutexGuard<'_, HashMap<PodKey, crate::inplace::Retry>> {
    r.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The requests to sync now, one per pod: the first unfinished one in run order, for each
/// pod whose previous sync has ended (`busy` lists the pods whose sync still runs). The
/// requests of one pod so run one after another, those of different pods at once.
fn next_per_pod(
    crrs: Vec<Arc<ContainerRecreateRequest>>,
    busy: &std::collections::HashSet<PodKey>,
) -> Vec<(PodKey, Arc<ContainerRecreateRequest>)> {
    let mut by_pod: BTreeMap<PodKey, Vec<Arc<ContainerRecreateRequest>>> = BTreeMap::new();
    for c in crrs {
        let ns = c.metadata.namespace.clone().unwrap_or_default();
        by_pod
            .entry((ns, c.spec.pod_name.clone()))
            .or_default()
            .push(c);
    }
    by_pod
        .into_iter()
        .filter(|(key, _)| !busy.contains(key))
        .filter_map(|(key, mut list)| {
            list.sort_by_key(|c| c.run_order_key());
            let active = list.into_iter().find(|c| !c.is_completed())?;
            Some((key, active))
        })
        .collect()
}

impl CrrHandler {
    pub fn new(
        cri: CriClient,
        client: kube::Client,
        crrs: Store<ContainerRecreateRequest>,
        pods: PodCache,
        notify: Arc<Notify>,
        metrics: Metrics,
        poll: Duration,
    ) -> Self {
        Self {
            crrs,
            notify,
            poll,
            worker: Worker {
                cri,
                client,
                pods,
                metrics,
                written: std::sync::Mutex::new(HashMap::new()),
                recorder: crate::recorder::EventRecorder::disabled(),
            },
        }
    }

    /// Records an event on the pod when a request completes.
    pub fn with_events(mut self, recorder: crate::recorder::EventRecorder) -> Self {
        self.worker.recorder = recorder;
        self
    }

    /// Each round (a watch event, or every poll interval) starts a sync of the active
    /// request of every pod whose previous sync has ended ([`next_per_pod`]); syncs of
    /// different pods run concurrently.
    pub async fn run(self) {
        // Every decision reads the pod: a pod missing from a cache not yet filled (a daemon
        // just started, its first list still coming) is not a pod that has gone. (A cache
        // whose writer is gone never fills: then there is nothing to wait for.)
        self.worker.pods.wait_filled().await;
        let worker = Arc::new(self.worker);
        let mut running: HashMap<PodKey, tokio::task::JoinHandle<()>> = HashMap::new();
        // pods whose last sync failed: tried again after an exponential back-off with
        // jitter, or at once when their active request changed
        let retries: Arc<Retries> = Arc::default();
        loop {
            tokio::select! {
                _ = self.notify.notified() => {}
                _ = tokio::time::sleep(self.poll) => {}
            }
            running.retain(|_, h| !h.is_finished());
            let all = self.crrs.state();
            let live: std::collections::HashSet<String> =
                all.iter().filter_map(|c| c.metadata.uid.clone()).collect();
            worker.written().retain(|uid, _| live.contains(uid));
            let busy = running.keys().cloned().collect();
            lock_retries(&retries).retain(|(ns, pod), _| {
                all.iter().any(|c| {
                    c.metadata.namespace.as_deref() == Some(ns.as_str()) && &c.spec.pod_name == pod
                })
            });
            for ((ns, pod), active) in next_per_pod(all, &busy) {
                let version = active.metadata.resource_version.clone().unwrap_or_default();
                if lock_retries(&retries)
                    .get(&(ns.clone(), pod.clone()))
                    .is_some_and(|r| r.waiting(&version))
                {
                    continue;
                }
                let span = crate::logging::crr_span(
                    &ns,
                    active.metadata.name.as_deref().unwrap_or_default(),
                    &pod,
                );
                let w = worker.clone();
                let key = (ns.clone(), pod.clone());
                let retries = retries.clone();
                let task = async move {
                    let key = (ns, pod);
                    match w.sync(&key.0, &key.1, &active).await {
                        Ok(()) => {
                            lock_retries(&retries).remove(&key);
                        }
                        Err(e) => {
                            let delay = lock_retries(&retries)
                                .entry(key)
                                .or_insert_with(|| crate::inplace::Retry::new(&version))
                                .failed(&version);
                            tracing::warn!(crr = ?active.metadata.name, error = %e, retry_in = ?delay, "CRR sync failed");
                        }
                    }
                };
                running.insert(
                    key,
                    tokio::spawn(tracing::Instrument::instrument(task, span)),
                );
            }
        }
    }
}

impl Worker {
    fn written(&self) -> std::sync::MutexGuard<'_, HashMap<String, Written>> {
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn instances(&self, uid: &str) -> Result<HashMap<String, Instance>, ExecError> {
        let mut newest: HashMap<String, inplace::decide::RuntimeContainer> = HashMap::new();
        for c in inplace::runtime_containers(&self.cri, uid).await? {
            let keep = newest
                .get(&c.name)
                .is_none_or(|o| (c.attempt, c.created_at) > (o.attempt, o.created_at));
            if keep {
                newest.insert(c.name.clone(), c);
            }
        }
        let mut out = HashMap::new();
        for (name, c) in newest {
            let st = self.cri.container_status(&c.id).await?;
            out.insert(
                name,
                Instance {
                    id: c.id,
                    running: st.state == ContainerState::ContainerRunning as i32,
                    started_at: st.started_at,
                },
            );
        }
        Ok(out)
    }

    async fn sync(
        &self,
        ns: &str,
        pod_name: &str,
        stored: &ContainerRecreateRequest,
    ) -> Result<(), ExecError> {
        let crr_uid = stored.metadata.uid.clone().unwrap_or_default();
        let mut base = stored.clone();
        let last = self.written().get(&crr_uid).cloned();
        if let Some(w) = last
            && stored.metadata.resource_version.as_ref() == Some(&w.before)
        {
            base.status = Some(w.status);
            base.metadata.resource_version = Some(w.after);
        }
        let pod = self.pods.store().get(&ObjectRef::new(pod_name).within(ns));
        let uid = pod.as_ref().and_then(|p| p.metadata.uid.clone());
        let pod_grace = pod
            .as_ref()
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        let pod_pre_stop = |name: &str| {
            let c = pod
                .as_ref()?
                .spec
                .as_ref()?
                .containers
                .iter()
                .find(|c| c.name == name)?;
            let h = c.lifecycle.as_ref()?.pre_stop.as_ref()?;
            Some(crate::api::ProbeHandler {
                exec: h.exec.clone(),
                http_get: h.http_get.clone(),
                tcp_socket: h.tcp_socket.clone(),
            })
        };
        let api: Api<ContainerRecreateRequest> = Api::namespaced(self.client.clone(), ns);
        let name = stored.metadata.name.clone().unwrap_or_default();
        // The stop done in this sync and its result: a decision made again after a
        // conflict that names the same container instance records it rather than stop it
        // a second time.
        let mut stopped: Option<(Kill, Result<(), String>)> = None;
        let mut conflicts = 0;
        loop {
            let crr = &base;
            let instances = match &uid {
                Some(u) => self.instances(u).await?,
                None => HashMap::new(),
            };
            let now = k8s_openapi::jiff::Timestamp::now();
            let mut step = decide::step(
                crr,
                uid.as_deref(),
                &|n| instances.get(n).cloned(),
                &pod_pre_stop,
                pod_grace,
                now,
            );
            if let Some(k) = step.kill.take() {
                let r = match &stopped {
                    Some((done, r)) if done.id == k.id && done.container == k.container => {
                        r.clone()
                    }
                    _ => {
                        let r = match self.kill(crr, pod.as_deref(), &k).await {
                            Ok(()) => Ok(()),
                            Err(KillError::Failed(m)) => Err(m),
                            Err(KillError::Unknown(e)) => {
                                // Not recorded: the next sync judges again from the
                                // runtime (the instance stopped, or still running and
                                // stopped then), with backoff.
                                tracing::warn!(crr = ?crr.metadata.name, container = %k.container, error = %e, "stopping the container for recreate: outcome unknown; judging again from the runtime");
                                return Err(e.into());
                            }
                        };
                        if let Err(m) = &r {
                            tracing::warn!(crr = ?crr.metadata.name, container = %k.container, error = %m, "recreate failed");
                        } else {
                            tracing::info!(crr = ?crr.metadata.name, container = %k.container, id = %k.id, "container stopped for recreate");
                            self.metrics
                                .restarts
                                .get_or_create(&crate::metrics::ReasonLabel {
                                    reason: "crr".into(),
                                })
                                .inc();
                        }
                        stopped = Some((k.clone(), r.clone()));
                        r
                    }
                };
                decide::record_kill(&mut step.status, &k.container, r);
            }
            if crr.status.as_ref() == Some(&step.status) {
                return Ok(());
            }
            let patch = status_patch(&step.status, crr.metadata.resource_version.as_deref());
            match api
                .patch_status(&name, &patch_params(), &Patch::Merge(&patch))
                .await
            {
                Ok(written) => {
                    if crr.status.as_ref().map(|s| s.phase) != Some(step.status.phase) {
                        self.metrics
                            .crr_phases
                            .get_or_create(&PhaseLabel {
                                phase: step.status.phase.as_str().into(),
                            })
                            .inc();
                        tracing::info!(crr = ?crr.metadata.name, phase = step.status.phase.as_str(), message = %step.status.message, "CRR phase");
                    }
                    if let Some(note) = pod.as_deref().and_then(|p| {
                        crate::recorder::crr_outcome_note(crr, p, crr.status.as_ref(), &step.status)
                    }) {
                        self.recorder.record(note);
                    }
                    self.written().insert(
                        crr_uid,
                        Written {
                            before: stored.metadata.resource_version.clone().unwrap_or_default(),
                            after: written.metadata.resource_version.unwrap_or_default(),
                            status: step.status,
                        },
                    );
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 && conflicts < CONFLICT_REREADS => {
                    conflicts += 1;
                    self.metrics
                        .status_writes
                        .get_or_create(&Metrics::result("conflict"))
                        .inc();
                    tracing::info!(
                        crr = %name,
                        rv = ?crr.metadata.resource_version,
                        "the request changed since it was read: reading it again and deciding anew"
                    );
                    match api.get_opt(&name).await? {
                        Some(fresh)
                            if fresh.metadata.uid == stored.metadata.uid
                                && decide::is_active(&fresh) =>
                        {
                            base = fresh;
                        }
                        // gone, replaced, or no longer this node's to run
                        _ => return Ok(()),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Stops the container `k` for request `crr`: its preStop hook first, within the grace
    /// period, then CRI StopContainer with what is left of it (at least 2 s). A hook that
    /// fails or runs out of time does not fail the stop, as in the kubelet's
    /// `KillContainer` that OpenKruise's daemon calls: a failure is a Warning event on the
    /// pod, a time-out a log line.
    async fn kill(
        &self,
        crr: &ContainerRecreateRequest,
        pod: Option<&Pod>,
        k: &Kill,
    ) -> Result<(), KillError> {
        let grace = Duration::from_secs(u64::try_from(k.grace_seconds).unwrap_or(2).max(2));
        let mut left = grace;
        if let Some(h) = &k.pre_stop {
            let t0 = tokio::time::Instant::now();
            match run_pre_stop(&self.cri, pod, &k.id, h, grace).await {
                Ok(()) => {}
                Err(PreStopError::TimedOut(after)) => {
                    tracing::info!(crr = ?crr.metadata.name, container = %k.container, ?after, "preStop hook did not finish within the grace period; stopping the container");
                }
                Err(PreStopError::Failed(m)) => {
                    tracing::warn!(crr = ?crr.metadata.name, container = %k.container, error = %m, "preStop hook failed; stopping the container all the same");
                    if let Some(p) = pod {
                        self.recorder.record(crate::recorder::pre_stop_failed_note(
                            crr,
                            p,
                            &k.container,
                            &m,
                        ));
                    }
                }
            }
            left = grace
                .saturating_sub(t0.elapsed())
                .max(Duration::from_secs(2));
        }
        self.cri
            .stop_container(&k.id, left)
            .await
            .map_err(KillError::of_stop)
    }
}

/// Why a container was not stopped for its request.
#[derive(Debug)]
enum KillError {
    /// Recorded as the container's failure: the runtime refused the stop.
    Failed(String),
    /// The runtime was not reached or its answer was lost ([`CriError::outcome_unknown`]):
    /// whether the container stopped is not known. Not a failure of the request: it is
    /// judged again from the runtime, and a stop names the instance, so a second one never
    /// stops a newer container.
    Unknown(CriError),
}

impl KillError {
    fn of_stop(e: CriError) -> Self {
        if e.outcome_unknown() {
            Self::Unknown(e)
        } else {
            Self::Failed(e.runtime_message())
        }
    }
}

fn port_of(p: &IntOrString, pod: Option<&Pod>) -> Option<u16> {
    match p {
        IntOrString::Int(i) => u16::try_from(*i).ok(),
        IntOrString::String(name) => pod?
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|cp| cp.name.as_deref() == Some(name))
            .and_then(|cp| u16::try_from(cp.container_port).ok()),
    }
}

/// Why a preStop hook did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreStopError {
    /// The hook ran and failed (or could not be run), saying why.
    Failed(String),
    /// The hook did not finish within its limit.
    TimedOut(Duration),
}

/// Runs a preStop hook of the pod's spec within `limit`: exec through CRI ExecSync,
/// httpGet and tcpSocket against the pod IP (or the hook's host, as the kubelet does: it is
/// the pod's own spec). A pod without an IP fails the hook rather than have the node's own
/// loopback reached.
pub async fn run_pre_stop(
    cri: &CriClient,
    pod: Option<&Pod>,
    id: &str,
    h: &ProbeHandler,
    limit: Duration,
) -> Result<(), PreStopError> {
    let pod_ip = pod
        .and_then(|p| p.status.as_ref())
        .and_then(|s| s.pod_ip.clone())
        .filter(|ip| !ip.is_empty());
    if let Some(e) = &h.exec {
        let r = cri
            .exec_sync(id, e.command.clone().unwrap_or_default(), limit)
            .await
            .map_err(|e| match e {
                CriError::Timeout { .. } => PreStopError::TimedOut(limit),
                e if e.code() == Some(tonic::Code::DeadlineExceeded) => {
                    PreStopError::TimedOut(limit)
                }
                e => PreStopError::Failed(format!("preStop exec: {}", e.runtime_message())),
            })?;
        if r.exit_code != 0 {
            return Err(PreStopError::Failed(format!(
                "preStop exec exited {}: {}",
                r.exit_code,
                String::from_utf8_lossy(&r.stderr).trim()
            )));
        }
        return Ok(());
    }
    let fut = async {
        if let Some(g) = &h.http_get {
            let port = port_of(&g.port, pod).ok_or("preStop httpGet: unknown port")?;
            let host = g
                .host
                .clone()
                .or(pod_ip.clone())
                .ok_or("preStop httpGet: the pod has no IP")?;
            let mut s = tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| format!("preStop httpGet: {e}"))?;
            let req = format!(
                "GET {} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: inplace-daemon\r\n\r\n",
                g.path.as_deref().unwrap_or("/")
            );
            s.write_all(req.as_bytes())
                .await
                .map_err(|e| format!("preStop httpGet: {e}"))?;
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf).await;
            let head = String::from_utf8_lossy(&buf);
            let code: u16 = head
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            if !(200..400).contains(&code) {
                return Err(format!("preStop httpGet answered {code}"));
            }
            return Ok(());
        }
        if let Some(t) = &h.tcp_socket {
            let port = port_of(&t.port, pod).ok_or("preStop tcpSocket: unknown port")?;
            let host = t
                .host
                .clone()
                .or(pod_ip.clone())
                .ok_or("preStop tcpSocket: the pod has no IP")?;
            tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| format!("preStop tcpSocket: {e}"))?;
        }
        Ok(())
    };
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| PreStopError::TimedOut(limit))?
        .map_err(PreStopError::Failed)
}

impl std::fmt::Debug for CrrHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrrHandler")
            .field("cri", &self.worker.cri)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CrrPhase;

    /// The instants of the status writes, over a minute of paused time with a 100 ms poll,
    /// of a handler (a CRI nobody serves, an API server refusing every write with 500)
    /// given one request whose pod is not in the pod cache, filled or not yet.
    async fn writes_for_a_request_of_a_missing_pod(
        pod_cache_filled: bool,
    ) -> Vec<tokio::time::Instant> {
        let patches: Arc<std::sync::Mutex<Vec<tokio::time::Instant>>> = Arc::default();
        let client = crate::kube_io::failing_client(patches.clone());
        let (crrs, mut crr_writer) = kube::runtime::reflector::store();
        let mut c = (*req("ns", "r1", "gone", "2026-01-01T00:00:00Z", None)).clone();
        c.metadata.uid = Some("u1".into());
        c.metadata.resource_version = Some("1".into());
        crr_writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(c));
        let (pods, mut pod_writer) = kube::runtime::reflector::store();
        if pod_cache_filled {
            pod_writer.apply_watcher_event(&kube::runtime::watcher::Event::Init);
            pod_writer.apply_watcher_event(&kube::runtime::watcher::Event::InitDone);
        }
        let cri = CriClient::new(
            std::path::Path::new("/nonexistent.sock"),
            Duration::from_secs(1),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let handler = CrrHandler::new(
            cri,
            client,
            crrs,
            PodCache::new(pods),
            Arc::new(Notify::new()),
            Metrics::unregistered(),
            Duration::from_millis(100),
        );
        let task = tokio::spawn(handler.run());
        tokio::time::sleep(Duration::from_secs(60)).await;
        task.abort();
        // (the writer lives to here: a dropped one would let an unfilled cache count)
        drop(pod_writer);
        patches.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// A daemon that has not filled its pod cache yet (just started, its first list still
    /// coming) does not take a pod missing from it for a pod that has gone: nothing is
    /// written until the cache is filled.
    #[tokio::test(start_paused = true)]
    async fn a_pod_missing_from_an_unfilled_cache_is_not_gone() {
        let at = writes_for_a_request_of_a_missing_pod(false).await;
        assert!(at.is_empty(), "{} status writes", at.len());
    }

    /// A request whose status write the API server keeps refusing (500) is synced again
    /// with exponential back-off and jitter, not at every poll: over a minute with a
    /// 100 ms poll, about eight writes instead of six hundred.
    #[tokio::test(start_paused = true)]
    async fn a_failing_sync_is_retried_with_back_off_not_every_poll() {
        // The pod cache is filled, without the request's pod: it has gone.
        let at = writes_for_a_request_of_a_missing_pod(true).await;
        let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            (5..=12).contains(&at.len()),
            "{} writes: {gaps:?}",
            at.len()
        );
        assert!(
            gaps.last().is_some_and(|g| *g >= Duration::from_secs(8)),
            "{gaps:?}"
        );
    }

    fn req(
        ns: &str,
        name: &str,
        pod: &str,
        created: &str,
        phase: Option<&str>,
    ) -> Arc<ContainerRecreateRequest> {
        let mut v = serde_json::json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
            "spec": {"podName": pod, "containers": [{"name": "a"}]}
        });
        if let Some(p) = phase {
            v["status"] = serde_json::json!({"phase": p});
        }
        Arc::new(serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}")))
    }

    fn names(next: &[(PodKey, Arc<ContainerRecreateRequest>)]) -> Vec<(String, String)> {
        next.iter()
            .map(|((_, pod), c)| (pod.clone(), c.metadata.name.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn one_request_per_pod_runs_and_pods_run_side_by_side() {
        let t = |s: u32| format!("2026-01-01T00:00:{s:02}Z");
        let all = vec![
            req("ns", "a2", "pa", &t(2), None),
            req("ns", "a1", "pa", &t(1), None),
            req("ns", "a0", "pa", &t(0), Some("Completed")),
            req("ns", "b1", "pb", &t(3), Some("Recreating")),
            req("other", "c1", "pa", &t(4), None),
        ];
        let none = std::collections::HashSet::new();
        // every pod at once (the same pod name in another namespace is another pod), each
        // with its first unfinished request in run order
        assert_eq!(
            names(&next_per_pod(all.clone(), &none)),
            vec![
                ("pa".into(), "a1".into()),
                ("pb".into(), "b1".into()),
                ("pa".into(), "c1".into()),
            ]
        );
        // a pod whose sync still runs gets no second one: its requests stay in order
        let busy = std::collections::HashSet::from([("ns".to_owned(), "pa".to_owned())]);
        assert_eq!(
            names(&next_per_pod(all.clone(), &busy)),
            vec![("pb".into(), "b1".into()), ("pa".into(), "c1".into())]
        );
        // a Recreating request goes before an older Pending one of its pod
        let mixed = vec![
            req("ns", "old", "pa", &t(0), Some("Pending")),
            req("ns", "running", "pa", &t(5), Some("Recreating")),
        ];
        assert_eq!(
            names(&next_per_pod(mixed, &none)),
            vec![("pa".into(), "running".into())]
        );
        // nothing unfinished: nothing to run
        let done = vec![req("ns", "a0", "pa", &t(0), Some("Completed"))];
        assert!(next_per_pod(done, &none).is_empty());
    }

    /// A stop whose outcome is unknown (a transport error while the runtime restarts) is
    /// not the container's failure: only what the runtime itself answered is recorded.
    #[test]
    fn only_a_stop_the_runtime_refused_is_recorded_as_failed() {
        let rpc = |status| CriError::Rpc {
            op: "StopContainer",
            status,
        };
        let cut = tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "transport error",
        )));
        assert!(matches!(
            KillError::of_stop(rpc(cut)),
            KillError::Unknown(_)
        ));
        assert!(matches!(
            KillError::of_stop(rpc(tonic::Status::unavailable("connection refused"))),
            KillError::Unknown(_)
        ));
        match KillError::of_stop(rpc(tonic::Status::unknown("failed to stop container"))) {
            KillError::Failed(m) => assert_eq!(m, "Unknown: failed to stop container"),
            other => panic!("recorded as failed, not {other:?}"),
        }
    }

    #[test]
    fn the_status_write_is_conditional_on_the_version_decided_from() {
        let status = ContainerRecreateRequestStatus {
            phase: CrrPhase::Recreating,
            ..ContainerRecreateRequestStatus::default()
        };
        let body = status_patch(&status, Some("77"));
        assert_eq!(
            body["metadata"],
            serde_json::json!({"resourceVersion": "77"})
        );
        assert_eq!(body["status"]["phase"], "Recreating");
        assert_eq!(body.as_object().map(|o| o.len()), Some(2));
        assert_eq!(status_patch(&status, None).get("metadata"), None);
    }
}
