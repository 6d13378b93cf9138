//! The pod side of the simulated kubelet: one watch on every bound pod, one task that
//! owns the state of every pod of the simulated nodes and a single timer heap, and
//! status patches and final deletes issued by short tasks under a semaphore.
//!
//! Consistency: a status patch that reports the pod Ready carries the
//! `metadata.resourceVersion` of the pod snapshot it was computed from, so the API server
//! rejects (409) a Ready computed from a stale view (say, a readiness-gate condition
//! another writer just turned False); the engine then waits for the newer snapshot, which
//! the watch is bound to deliver. A status that reports the pod not Ready is not pinned:
//! no newer pod version can make "not Ready" wrong for longer than it takes the watch to
//! deliver it (the engine then writes again), and pinning it made every such write that
//! raced a controller write to the same pod (the in-place spec patch right after
//! `InPlaceUpdateReady=False`) fail and go out twice.
//!
//! Repair: a status the API server accepted can still be changed by another writer
//! afterwards, with nothing changing on the simulator's side: the v1.20 node lifecycle
//! controller sets `Ready=False` on every pod of a node whose heartbeats are late
//! (`MarkPodsNotReady`, again on every update of such a pod while the node is not Ready),
//! and no later write of the simulator restores it when its own view has not moved. Like
//! the kubelet's status manager (`syncBatch` every 10 s, `needsReconcile`), the engine
//! keeps a digest of the part of the status it writes, as the API server returned it
//! after the last accepted patch and as the latest snapshot has it, and every
//! `status_resync` writes the status again where the two differ. Nothing is written while
//! they agree.
//!
//! The node daemon: unless `daemon` is off (`--no-daemon`), each pod in an in-place
//! update gets the daemon's completion ([`super::daemon`]) once the simulated runtime runs
//! its updated containers: one `pods/status` strategic merge patch with the daemon's field
//! manager, pinned to the snapshot judged; a 409 waits for a newer snapshot, as the daemon
//! does. The completion and the simulated kubelet's status patch of one pod are never in
//! flight together (either would make the other's resourceVersion stale): the completion
//! goes first, and the status that follows it reports the pod Ready at once when its
//! containers are (the readiness gate is True by then).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use inplace_daemon::inplace::decide;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::MissedTickBehavior;

use super::daemon;
use super::fault::GlobalFaults;
use super::images::ImageStores;
use super::ippool::{IpPool, node_ip};
use super::model::{Ms, PodSim, PodView, SimConfig, advance, advance_with};
use super::podview::{
    is_terminal, node_index, observed_from_pod, owned_status_digest, rv_newer, view_from_pod,
};
use super::render;
use super::stats::Stats;

/// The field manager of the simulator's writes.
pub const FIELD_MANAGER: &str = "inplace-nodesim";

/// What the pod engine needs to know.
#[derive(Debug, Clone)]
pub struct PodsConfig {
    pub sim: SimConfig,
    pub node_prefix: String,
    pub node_count: usize,
    pub faults: GlobalFaults,
    /// Status patches and deletes in flight at most.
    pub max_inflight: usize,
    /// Wait before retrying a write that failed for another reason than a conflict.
    pub retry_after: Ms,
    /// Period of the status resync: a pod whose status in the API server no longer
    /// agrees with the one last written there (another writer changed it) gets it again
    /// (the kubelet's status manager: 10 s). 0: never.
    pub status_resync: Ms,
    /// The nodes' image stores (`--pull-delay`): a changed image is pulled first.
    /// `None`: images are on every node at once.
    pub images: Option<Arc<Mutex<ImageStores>>>,
    /// The nodes run the node daemon's in-place completion ([`super::daemon`]); off, the
    /// controller completes every in-place update itself (its path without a daemon).
    pub daemon: bool,
}

/// Now, in milliseconds since the Unix epoch.
/// How long until the earliest item of a due-time heap (an hour when it is empty; nothing
/// when it is overdue): the sleep of the simulator's event loops.
pub fn until_next_due<T: Ord>(heap: &BinaryHeap<Reverse<(Ms, T)>>, now: Ms) -> Duration {
    heap.peek()
        .map_or(Duration::from_secs(3600), |Reverse((due, _))| {
            Duration::from_millis(u64::try_from(due - now).unwrap_or(0))
        })
}

pub fn now_ms() -> Ms {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deleting {
    No,
    InFlight,
    Sent,
}

#[derive(Debug)]
struct Entry {
    namespace: String,
    name: String,
    node: String,
    rv: String,
    view: PodView,
    sim: PodSim,
    /// Hash of the last status the API server accepted.
    written: u64,
    /// [`owned_status_digest`] of the pod the API server returned for that patch
    /// (`None`: nothing written yet).
    written_digest: Option<u64>,
    /// [`owned_status_digest`] of the latest snapshot.
    api_digest: u64,
    /// (hash, resourceVersion) of the status patch in flight.
    inflight: Option<(u64, String)>,
    /// The resourceVersion a patch was rejected at: wait for a newer snapshot.
    conflict_rv: Option<String>,
    deleting: Deleting,
    due: Option<Ms>,
    counted_ready: bool,
    /// The latest snapshot, kept while the pod is in an in-place update
    /// ([`decide::in_update`]): what the simulated daemon judges.
    in_update: Option<Box<Pod>>,
    /// The resourceVersion the daemon's completion in flight was pinned to.
    daemon_inflight: Option<String>,
    /// The daemon's latest completion of this pod ([`daemon::COMPLETION_MEMORY`]).
    daemon_completed: Option<daemon::Completed>,
    /// A completion that failed: (the resourceVersion it was pinned to, when it may be
    /// sent again at that version). A conflict waits for a newer snapshot (`Ms::MAX`), any
    /// other failure for `retry_after` or a newer snapshot.
    daemon_failed: Option<(String, Ms)>,
}

/// The snapshot the simulated daemon keeps of `pod`: the pod, while it is in an in-place
/// update.
fn in_update(pod: &Pod) -> Option<Box<Pod>> {
    decide::in_update(pod).then(|| Box::new(pod.clone()))
}

/// Why a status patch goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    /// The simulated state changed since the last accepted patch.
    Changed,
    /// Nothing changed here, but the API server's copy no longer agrees with the last
    /// accepted patch (the periodic resync).
    Resync,
}

impl Entry {
    /// The entry of `pod` (in `namespace`, named `name`, on `node`), first seen: simulated
    /// from `view` and `sim`, nothing written yet.
    fn new(
        pod: &Pod,
        namespace: String,
        name: String,
        node: &str,
        view: PodView,
        sim: PodSim,
    ) -> Self {
        Self {
            namespace,
            name,
            node: node.to_owned(),
            rv: pod.metadata.resource_version.clone().unwrap_or_default(),
            view,
            sim,
            written: 0,
            written_digest: None,
            api_digest: owned_status_digest(pod.status.as_ref()),
            inflight: None,
            conflict_rv: None,
            deleting: Deleting::No,
            due: None,
            counted_ready: false,
            in_update: in_update(pod),
            daemon_inflight: None,
            daemon_completed: None,
            daemon_failed: None,
        }
    }

    /// Takes a snapshot of the pod (same UID) if it is newer than the one held; tells
    /// whether it was.
    fn observe(&mut self, pod: &Pod, faults: &GlobalFaults) -> bool {
        let rv = pod.metadata.resource_version.as_deref().unwrap_or_default();
        if !rv_newer(rv, &self.rv) {
            return false;
        }
        self.view = view_from_pod(pod, faults).0;
        self.in_update = in_update(pod);
        self.rv = rv.to_owned();
        self.api_digest = owned_status_digest(pod.status.as_ref());
        true
    }

    /// The API server accepted the status of hash `hash` and returned `pod`.
    fn accepted(&mut self, hash: u64, pod: &Pod) {
        self.written = hash;
        self.written_digest = Some(owned_status_digest(pod.status.as_ref()));
    }

    /// The latest snapshot already shows the rendered `status` as far as the simulator
    /// owns it ([`owned_status_digest`]): the kubelet's status manager writes nothing then
    /// (`syncPod`: `isPodStatusByKubeletEqual` with the API server's copy), and neither
    /// does the simulator, whose patch would change nothing. A rendering the API server
    /// would store in another form (it does not parse, or its times carry fractions the
    /// server drops) never agrees: it is written, as before.
    fn api_agrees(&self, status: &Value) -> bool {
        serde_json::from_value::<k8s_openapi::api::core::v1::PodStatus>(status.clone())
            .is_ok_and(|s| owned_status_digest(Some(&s)) == self.api_digest)
    }

    /// The rendered status of hash `hash` is on the API server already (another writer
    /// put it there): taken as written, at the latest snapshot's digest.
    fn agreed(&mut self, hash: u64) {
        self.written = hash;
        self.written_digest = Some(self.api_digest);
    }

    /// The latest snapshot's status differs from the one the API server returned for
    /// the last accepted patch: another writer changed it since.
    fn drifted(&self) -> bool {
        self.written_digest
            .is_some_and(|digest| digest != self.api_digest)
    }

    /// A status patch may go out: the pod is not being deleted, no patch (the kubelet's
    /// or the daemon's) is in flight, and no conflict at this resourceVersion waits for a
    /// newer snapshot.
    fn may_write(&self) -> bool {
        self.view.deletion_grace.is_none()
            && self.inflight.is_none()
            && self.daemon_inflight.is_none()
            && self.conflict_rv.as_ref() != Some(&self.rv)
    }

    /// The daemon may judge the pod at `now`: it is in an update and not being deleted,
    /// no patch is in flight, and no completion that failed at this resourceVersion waits
    /// for a newer snapshot or its retry.
    fn may_complete(&self, now: Ms) -> bool {
        self.in_update.is_some()
            && self.view.deletion_grace.is_none()
            && self.inflight.is_none()
            && self.daemon_inflight.is_none()
            && self
                .daemon_failed
                .as_ref()
                .is_none_or(|(rv, retry_at)| *rv != self.rv || now >= *retry_at)
    }

    /// Whether the rendered status of hash `hash` must be written now: it differs from
    /// the last accepted one, or (`resync`: the periodic pass) the API server's copy was
    /// changed by another writer since.
    fn write_needed(&self, hash: u64, resync: bool) -> Option<Write> {
        if hash != self.written {
            Some(Write::Changed)
        } else if resync && self.drifted() {
            Some(Write::Resync)
        } else {
            None
        }
    }
}

enum Done {
    Status {
        id: u64,
        hash: u64,
        kind: Write,
        result: Result<Box<Pod>, kube::Error>,
    },
    Delete {
        id: u64,
        result: Result<(), kube::Error>,
    },
    Completion {
        id: u64,
        result: Result<Box<Pod>, kube::Error>,
    },
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == code)
}

fn hash_value(v: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    v.to_string().hash(&mut h);
    h.finish()
}

/// The pod engine: owns every simulated pod.
struct Engine {
    cfg: PodsConfig,
    client: Client,
    stats: Arc<Stats>,
    pods: HashMap<u64, Entry>,
    by_key: HashMap<(String, String), u64>,
    next_id: u64,
    heap: BinaryHeap<Reverse<(Ms, u64)>>,
    ips: IpPool,
    sem: Arc<Semaphore>,
    done_tx: mpsc::UnboundedSender<Done>,
    relist: Option<HashSet<(String, String)>>,
}

/// Watches the pods bound to the simulated nodes and plays their kubelet until
/// `shutdown` turns true.
pub async fn run(
    cfg: PodsConfig,
    client: Client,
    stats: Arc<Stats>,
    shutdown: watch::Receiver<bool>,
) {
    Engine::run(cfg, client, stats, shutdown).await;
}

impl Engine {
    async fn run(
        cfg: PodsConfig,
        client: Client,
        stats: Arc<Stats>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let (done_tx, mut done_rx) = mpsc::unbounded_channel();
        let mut engine = Engine {
            sem: Arc::new(Semaphore::new(cfg.max_inflight.max(1))),
            cfg,
            client: client.clone(),
            stats,
            pods: HashMap::new(),
            by_key: HashMap::new(),
            next_id: 0,
            heap: BinaryHeap::new(),
            ips: IpPool::new(),
            done_tx,
            relist: None,
        };
        let api: Api<Pod> = Api::all(client);
        let config = watcher::Config::default()
            .fields("spec.nodeName!=")
            .any_semantic();
        let mut events = std::pin::pin!(watcher(api, config).default_backoff());
        let mut resync = u64::try_from(engine.cfg.status_resync)
            .ok()
            .filter(|ms| *ms > 0)
            .map(|ms| {
                let mut every = tokio::time::interval(Duration::from_millis(ms));
                every.set_missed_tick_behavior(MissedTickBehavior::Delay);
                every
            });
        loop {
            let now = now_ms();
            let sleep_for = until_next_due(&engine.heap, now);
            let resync_tick = async {
                match resync.as_mut() {
                    Some(every) => {
                        every.tick().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                ev = events.next() => match ev {
                    Some(Ok(ev)) => engine.on_event(ev),
                    Some(Err(e)) => tracing::warn!("pod watch: {e}"),
                    None => break,
                },
                Some(done) = done_rx.recv() => engine.on_done(done),
                () = tokio::time::sleep(sleep_for) => engine.run_due(),
                () = resync_tick => engine.resync(),
                _ = shutdown.changed() => break,
            }
        }
    }

    fn on_event(&mut self, ev: watcher::Event<Pod>) {
        match ev {
            watcher::Event::Init => self.relist = Some(HashSet::new()),
            watcher::Event::InitApply(pod) => {
                if let Some(seen) = &mut self.relist
                    && let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name)
                {
                    seen.insert((ns.clone(), name.clone()));
                }
                self.apply(&pod);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relist.take() {
                    let gone: Vec<u64> = self
                        .by_key
                        .iter()
                        .filter(|(k, _)| !seen.contains(*k))
                        .map(|(_, id)| *id)
                        .collect();
                    for id in gone {
                        self.remove(id);
                    }
                }
            }
            watcher::Event::Apply(pod) => self.apply(&pod),
            watcher::Event::Delete(pod) => {
                if let (Some(ns), Some(name)) = (pod.metadata.namespace, pod.metadata.name)
                    && let Some(&id) = self.by_key.get(&(ns, name))
                {
                    self.remove(id);
                }
            }
        }
    }

    /// A new snapshot of a pod (from the watch or from a patch response).
    fn apply(&mut self, pod: &Pod) {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            return;
        };
        let Some(node_idx) = node_index(&self.cfg.node_prefix, self.cfg.node_count, node) else {
            return;
        };
        let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
            return;
        };
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let key = (ns.clone(), name.clone());
        if let Some(&id) = self.by_key.get(&key) {
            let same_uid = self.pods.get(&id).is_some_and(|e| e.sim.uid == uid);
            if same_uid {
                let Some(e) = self.pods.get_mut(&id) else {
                    return;
                };
                if e.observe(pod, &self.cfg.faults) {
                    self.touch(id);
                }
                return;
            }
            self.remove(id);
        }
        if is_terminal(pod) {
            return;
        }
        let (view, fault_error) = view_from_pod(pod, &self.cfg.faults);
        if let Some(err) = fault_error {
            tracing::warn!(pod = %format!("{ns}/{name}"), "ignoring the fault annotation: {err}");
        }
        let now = now_ms();
        let host_ip = node_ip(node_idx);
        let sim = match observed_from_pod(pod) {
            Some((ip, start, observed)) if self.ips.reserve(&ip) => PodSim::adopt(
                &view,
                ip,
                host_ip,
                start.unwrap_or(now),
                &observed,
                now,
                &self.cfg.sim,
            ),
            _ => {
                let Some(ip) = self.ips.allocate() else {
                    tracing::error!("pod IP pool exhausted; not simulating {ns}/{name}");
                    return;
                };
                match &self.cfg.images {
                    Some(stores) if self.cfg.sim.shape.new_pods_pull => {
                        let mut image_at = |image: &str, from: Ms| {
                            stores
                                .lock()
                                .map_or(from, |mut s| s.available_at(node, image, from))
                        };
                        PodSim::new_with(&view, ip, host_ip, now, &self.cfg.sim, &mut image_at)
                    }
                    _ => PodSim::new(&view, ip, host_ip, now, &self.cfg.sim),
                }
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        self.pods.insert(
            id,
            Entry::new(pod, ns.clone(), name.clone(), node, view, sim),
        );
        self.by_key.insert(key, id);
        Stats::add(&self.stats.pods, 1);
        self.touch(id);
    }

    fn remove(&mut self, id: u64) {
        if let Some(e) = self.pods.remove(&id) {
            self.by_key.remove(&(e.namespace, e.name));
            self.ips.release(&e.sim.pod_ip);
            Stats::add(&self.stats.pods, -1);
            if e.counted_ready {
                Stats::add(&self.stats.ready, -1);
            }
        }
    }

    fn run_due(&mut self) {
        let now = now_ms();
        while let Some(Reverse((due, id))) = self.heap.peek().copied() {
            if due > now {
                break;
            }
            self.heap.pop();
            match self.pods.get_mut(&id) {
                Some(e) if e.due == Some(due) => {
                    e.due = None;
                    self.touch(id);
                }
                _ => {}
            }
        }
    }

    fn schedule(&mut self, id: u64, at: Ms) {
        if let Some(e) = self.pods.get_mut(&id)
            && e.due.is_none_or(|d| at < d)
        {
            e.due = Some(at);
            self.heap.push(Reverse((at, id)));
        }
    }

    /// Advances the pod's simulation to now, then writes its status or deletes it as due.
    fn touch(&mut self, id: u64) {
        let now = now_ms();
        let Some(e) = self.pods.get_mut(&id) else {
            return;
        };
        let step = match &self.cfg.images {
            Some(stores) => {
                let node = e.node.as_str();
                let mut image_at = |image: &str| {
                    stores
                        .lock()
                        .map_or(now, |mut s| s.available_at(node, image, now))
                };
                advance_with(&e.view, &mut e.sim, now, &self.cfg.sim, &mut image_at)
            }
            None => advance(&e.view, &mut e.sim, now, &self.cfg.sim),
        };
        let ready = e.sim.ready.status && e.view.deletion_grace.is_none();
        if ready != e.counted_ready {
            e.counted_ready = ready;
            Stats::add(&self.stats.ready, if ready { 1 } else { -1 });
        }
        if step.delete {
            if e.deleting == Deleting::No {
                e.deleting = Deleting::InFlight;
                self.spawn_delete(id);
            }
            return;
        }
        if let Some(due) = step.next_due {
            self.schedule(id, due);
        }
        if !self.maybe_complete(id) {
            self.maybe_write(id, false);
        }
    }

    /// The simulated daemon: sends the completion of the pod's in-place update if its
    /// decision over the latest snapshot and the simulated runtime is to complete now.
    /// Tells whether a completion is in flight (the kubelet's status then waits for it).
    fn maybe_complete(&mut self, id: u64) -> bool {
        if !self.cfg.daemon {
            return false;
        }
        let Some(e) = self.pods.get_mut(&id) else {
            return false;
        };
        if e.daemon_inflight.is_some() {
            return true;
        }
        if !e.may_complete(now_ms()) {
            return false;
        }
        let Some(pod) = e.in_update.as_deref() else {
            return false;
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        let patch = match daemon::completion(pod, &e.sim, e.daemon_completed.as_ref(), now) {
            Ok(Some(patch)) => patch,
            Ok(None) => return false,
            Err(err) => {
                tracing::warn!("completion of {}/{}: {err}", e.namespace, e.name);
                return false;
            }
        };
        e.daemon_inflight = Some(e.rv.clone());
        let (namespace, name) = (e.namespace.clone(), e.name.clone());
        self.spawn_status_patch(
            &namespace,
            name,
            inplace_daemon::apiserver::patch_params(),
            patch,
            move |result| Done::Completion { id, result },
        );
        true
    }

    /// Sends `patch` to the pod's `pods/status` as a strategic merge patch with `params`,
    /// within the bound of writes in flight; `done` tells the engine the outcome.
    fn spawn_status_patch(
        &self,
        namespace: &str,
        name: String,
        params: PatchParams,
        patch: Value,
        done: impl FnOnce(Result<Box<Pod>, kube::Error>) -> Done + Send + 'static,
    ) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let sem = self.sem.clone();
        let tx = self.done_tx.clone();
        tokio::spawn(async move {
            let Ok(_permit) = sem.acquire_owned().await else {
                return;
            };
            let result = api
                .patch_status(&name, &params, &Patch::Strategic(patch))
                .await
                .map(Box::new);
            let _ = tx.send(done(result));
        });
    }

    /// The periodic pass of the kubelet's status manager (`syncBatch`): every pod whose
    /// status in the API server no longer agrees with the one last written there gets
    /// it again.
    fn resync(&mut self) {
        let drifted: Vec<u64> = self
            .pods
            .iter()
            .filter(|(_, e)| e.drifted())
            .map(|(&id, _)| id)
            .collect();
        for id in drifted {
            self.maybe_write(id, true);
        }
    }

    /// Writes the pod's status if it changed since the last accepted patch or, when
    /// `resync`, if another writer changed the API server's copy since. A patch in flight
    /// re-evaluates when it completes; a conflict waits for a newer snapshot.
    fn maybe_write(&mut self, id: u64, resync: bool) {
        let Some(e) = self.pods.get_mut(&id) else {
            return;
        };
        if !e.may_write() {
            return;
        }
        let status = render::pod_status(&e.view, &e.sim);
        let hash = hash_value(&status);
        let Some(kind) = e.write_needed(hash, resync) else {
            return;
        };
        if e.api_agrees(&status) {
            // Written by another (an in-place update's Ready False, written with its
            // gate): nothing to send, and nothing drifted.
            e.agreed(hash);
            return;
        }
        if kind == Write::Resync {
            tracing::debug!(
                "status of {}/{} changed by another writer at {}: writing it again",
                e.namespace,
                e.name,
                e.rv
            );
        }
        e.inflight = Some((hash, e.rv.clone()));
        let patch = if e.sim.ready.status {
            json!({ "metadata": { "resourceVersion": e.rv }, "status": status })
        } else {
            json!({ "status": status })
        };
        let (namespace, name) = (e.namespace.clone(), e.name.clone());
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        self.spawn_status_patch(&namespace, name, params, patch, move |result| {
            Done::Status {
                id,
                hash,
                kind,
                result,
            }
        });
    }

    fn spawn_delete(&mut self, id: u64) {
        let Some(e) = self.pods.get(&id) else {
            return;
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &e.namespace);
        let name = e.name.clone();
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(e.sim.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let sem = self.sem.clone();
        let tx = self.done_tx.clone();
        tokio::spawn(async move {
            let result = match sem.acquire_owned().await {
                Ok(_permit) => api.delete(&name, &dp).await.map(|_| ()),
                Err(_) => return,
            };
            let _ = tx.send(Done::Delete { id, result });
        });
    }

    fn on_done(&mut self, done: Done) {
        let retry = now_ms() + self.cfg.retry_after;
        match done {
            Done::Status {
                id,
                hash,
                kind,
                result,
            } => {
                if result.is_ok() {
                    Stats::inc(&self.stats.status_writes);
                    if kind == Write::Resync {
                        Stats::inc(&self.stats.resyncs);
                    }
                }
                let Some(e) = self.pods.get_mut(&id) else {
                    return;
                };
                let Some((_, sent_rv)) = e.inflight.take() else {
                    return;
                };
                match result {
                    Ok(pod) => {
                        e.accepted(hash, &pod);
                        self.apply(&pod);
                        self.touch(id);
                    }
                    Err(err) if is_status(&err, 409) => {
                        Stats::inc(&self.stats.conflicts);
                        let newer = e.rv != sent_rv;
                        e.conflict_rv = Some(sent_rv);
                        if newer {
                            self.touch(id);
                        }
                    }
                    Err(err) if is_status(&err, 404) => {}
                    Err(err) => {
                        Stats::inc(&self.stats.write_errors);
                        tracing::debug!("status of {}/{}: {err}", e.namespace, e.name);
                        self.schedule(id, retry);
                    }
                }
            }
            Done::Completion { id, result } => {
                match &result {
                    Ok(_) => Stats::inc(&self.stats.daemon_writes),
                    Err(err) if is_status(err, 409) => Stats::inc(&self.stats.daemon_conflicts),
                    Err(err) if is_status(err, 404) => {}
                    Err(_) => Stats::inc(&self.stats.write_errors),
                }
                let Some(e) = self.pods.get_mut(&id) else {
                    return;
                };
                let Some(sent_rv) = e.daemon_inflight.take() else {
                    return;
                };
                match result {
                    Ok(pod) => {
                        e.daemon_failed = None;
                        e.daemon_completed = Some(daemon::Completed {
                            revision: daemon::revision_label(&pod),
                            at: now_ms(),
                        });
                        self.apply(&pod);
                    }
                    // Judged on a stale snapshot: judged again on the next one, which the
                    // watch is bound to deliver (a pod gone: its deletion).
                    Err(err) if is_status(&err, 409) || is_status(&err, 404) => {
                        e.daemon_failed = Some((sent_rv, Ms::MAX));
                    }
                    Err(err) => {
                        tracing::debug!("completion of {}/{}: {err}", e.namespace, e.name);
                        e.daemon_failed = Some((sent_rv, retry));
                        self.schedule(id, retry);
                    }
                }
                // The kubelet's status held back for the completion goes now.
                self.touch(id);
            }
            Done::Delete { id, result } => {
                // Counted first: the watch may already have removed the pod.
                let retry_needed = match &result {
                    Ok(()) => {
                        Stats::inc(&self.stats.deletes);
                        false
                    }
                    Err(err) if is_status(err, 404) || is_status(err, 409) => false,
                    Err(_) => {
                        Stats::inc(&self.stats.write_errors);
                        true
                    }
                };
                let Some(e) = self.pods.get_mut(&id) else {
                    return;
                };
                if let Err(err) = &result {
                    tracing::debug!("delete of {}/{}: {err}", e.namespace, e.name);
                }
                if retry_needed {
                    e.deleting = Deleting::No;
                    self.schedule(id, retry);
                } else {
                    e.deleting = Deleting::Sent;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodesim::model::advance;

    fn pod_at(rv: &str) -> Result<Pod, serde_json::Error> {
        serde_json::from_value(json!({
            "metadata": { "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": rv },
            "spec": { "nodeName": "sim-node-0", "containers": [{ "name": "app", "image": "app:1" }] },
            "status": {
                "phase": "Pending",
                "qosClass": "BestEffort",
                "conditions": [{ "type": "PodScheduled", "status": "True",
                                 "lastTransitionTime": "2024-01-01T00:00:00Z" }]
            }
        }))
    }

    fn entry(pod: &Pod, now: Ms) -> Entry {
        let (view, _) = view_from_pod(pod, &GlobalFaults::default());
        let sim = PodSim::new(
            &view,
            "10.200.0.1".into(),
            "10.199.0.1".into(),
            now,
            &SimConfig::default(),
        );
        Entry::new(pod, "ns".into(), "p".into(), "sim-node-0", view, sim)
    }

    /// What the API server makes of a status patch (`patch` is `{"status": …}`) on `pod`:
    /// a strategic merge (conditions by type, `null` deletes a field; every other key
    /// replaced), stored at `rv` and read back in its normal form.
    fn server_patch(pod: &Pod, patch: &Value, rv: &str) -> Result<Pod, serde_json::Error> {
        let mut v = serde_json::to_value(pod)?;
        let mut status = v["status"].as_object().cloned().unwrap_or_default();
        for (key, new) in patch["status"].as_object().into_iter().flatten() {
            if key != "conditions" {
                status.insert(key.clone(), new.clone());
                continue;
            }
            let mut conditions = status
                .get("conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for c in new.as_array().into_iter().flatten() {
                let at = conditions.iter().position(|o| o["type"] == c["type"]);
                let target = match at {
                    Some(i) => &mut conditions[i],
                    None => {
                        conditions.push(json!({}));
                        let last = conditions.len() - 1;
                        &mut conditions[last]
                    }
                };
                for (k, field) in c.as_object().into_iter().flatten() {
                    if let Some(obj) = target.as_object_mut() {
                        if field.is_null() {
                            obj.remove(k);
                        } else {
                            obj.insert(k.clone(), field.clone());
                        }
                    }
                }
            }
            status.insert("conditions".into(), Value::Array(conditions));
        }
        v["status"] = Value::Object(status);
        v["metadata"]["resourceVersion"] = json!(rv);
        serde_json::from_value(v)
    }

    /// The engine's write decision for the entry's current state, and the patch body.
    fn rendered(e: &Entry) -> (u64, Value) {
        let status = render::pod_status(&e.view, &e.sim);
        (hash_value(&status), json!({ "status": status }))
    }

    /// An in-place update's controller writes Ready False with its gate False, as the
    /// kubelet would: the simulator's own Ready False then changes nothing, and it is not
    /// sent (it was: ~175 of 1,200 status patches of a 200-pod in-place rollout changed
    /// nothing). A rendering the server's copy does not show is sent.
    #[test]
    fn a_status_the_api_server_already_shows_is_not_written() -> Result<(), serde_json::Error> {
        let faults = GlobalFaults::default();
        let bound = pod_at("10")?;
        let mut e = entry(&bound, 0);
        advance(&e.view, &mut e.sim, 10_000, &SimConfig::default());
        let (hash, patch) = rendered(&e);
        assert!(
            !e.api_agrees(&patch["status"]),
            "Pending on the server: write"
        );
        let written = server_patch(&bound, &patch, "11")?;
        e.accepted(hash, &written);
        assert!(e.observe(&written, &faults));
        assert!(
            e.api_agrees(&patch["status"]),
            "the server shows what we wrote"
        );

        // The controller: the gate False and Ready False, as the kubelet would render it.
        let mut gated = written.clone();
        if let Some(spec) = gated.spec.as_mut() {
            spec.readiness_gates = Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
                condition_type: "InPlaceUpdateReady".into(),
            }]);
        }
        let gate_false = json!({ "status": { "conditions": [
            { "type": "InPlaceUpdateReady", "status": "False", "lastTransitionTime": "2024-01-01T00:00:20Z" }
        ] } });
        assert!(e.observe(&server_patch(&gated, &gate_false, "12")?, &faults));
        advance(&e.view, &mut e.sim, 20_000, &SimConfig::default());
        let (gated_hash, gated_patch) = rendered(&e);
        let ours = gated_patch["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(ours["status"], "False", "the gate is False: not Ready");
        let controller = json!({ "status": { "conditions": [
            { "type": "InPlaceUpdateReady", "status": "False", "lastTransitionTime": "2024-01-01T00:00:20Z" },
            { "type": "Ready", "status": "False", "reason": ours["reason"], "message": ours["message"],
              "lastTransitionTime": "2024-01-01T00:00:20Z" }
        ] } });
        assert!(
            !e.api_agrees(&gated_patch["status"]),
            "Ready still True there"
        );
        let by_controller = server_patch(&gated, &controller, "13")?;
        assert!(e.observe(&by_controller, &faults));
        assert_ne!(gated_hash, hash, "the simulator's rendering changed");
        assert_eq!(e.write_needed(gated_hash, false), Some(Write::Changed));
        assert!(
            e.api_agrees(&gated_patch["status"]),
            "but the server shows it already"
        );
        e.agreed(gated_hash);
        assert_eq!(e.write_needed(gated_hash, false), None);
        assert_eq!(
            e.write_needed(gated_hash, true),
            None,
            "and nothing drifted"
        );
        Ok(())
    }

    /// The failure of the 10,000-pod bench: the simulator's Ready write is accepted, the
    /// node lifecycle controller then sets Ready=False (MarkPodsNotReady), and nothing
    /// changes on the simulator's side. Without the resync the pod stayed not Ready for
    /// good; with it the status goes out again at the next pass, and only then.
    #[test]
    fn a_status_another_writer_changed_is_written_again_at_the_next_resync()
    -> Result<(), serde_json::Error> {
        let faults = GlobalFaults::default();
        let bound = pod_at("10")?;
        let mut e = entry(&bound, 0);
        advance(&e.view, &mut e.sim, 10_000, &SimConfig::default());
        assert!(e.sim.ready.status);
        assert!(e.may_write());
        let (hash, patch) = rendered(&e);
        assert_eq!(e.write_needed(hash, false), Some(Write::Changed));
        assert!(!e.drifted(), "nothing written yet: nothing to compare");

        // The patch is accepted; the response and then its watch event come in.
        let written = server_patch(&bound, &patch, "11")?;
        e.accepted(hash, &written);
        assert!(e.observe(&written, &faults));
        assert!(!e.observe(&written, &faults), "the same version twice");
        assert!(!e.drifted());
        assert_eq!(e.write_needed(hash, false), None);
        assert_eq!(e.write_needed(hash, true), None, "in sync: no resync write");

        // Another writer's condition and a new resourceVersion: still in sync.
        let gate = json!({ "status": { "conditions": [
            { "type": "InPlaceUpdateReady", "status": "True", "lastTransitionTime": "2024-01-01T00:00:09Z" }
        ] } });
        let other = server_patch(&written, &gate, "12")?;
        assert!(e.observe(&other, &faults));
        assert!(
            !e.drifted(),
            "another writer's condition is not the simulator's"
        );
        assert_eq!(e.write_needed(hash, true), None);

        // MarkPodsNotReady: Ready False, nothing else.
        let mark = json!({ "status": { "conditions": [
            { "type": "Ready", "status": "False", "lastTransitionTime": "2024-01-01T00:01:00Z" }
        ] } });
        let marked = server_patch(&other, &mark, "13")?;
        assert!(e.observe(&marked, &faults));
        let (same_hash, _) = rendered(&e);
        assert_eq!(same_hash, hash, "nothing changed on the simulator's side");
        assert!(e.drifted());
        assert_eq!(
            e.write_needed(hash, false),
            None,
            "not on the event itself: at the next resync, like the kubelet"
        );
        assert_eq!(e.write_needed(hash, true), Some(Write::Resync));
        assert!(
            !e.observe(&other, &faults),
            "an older snapshot delivered late changes nothing"
        );
        assert!(e.drifted());

        // No resync write while a patch is in flight or after a conflict at this version.
        e.inflight = Some((hash, e.rv.clone()));
        assert!(!e.may_write());
        e.inflight = None;
        e.conflict_rv = Some("13".into());
        assert!(!e.may_write());
        e.conflict_rv = None;

        // The resync write restores Ready: in sync again, quiet again.
        let repaired = server_patch(&marked, &patch, "14")?;
        e.accepted(hash, &repaired);
        assert!(e.observe(&repaired, &faults));
        assert!(!e.drifted());
        assert_eq!(e.write_needed(hash, true), None);
        let ready = repaired
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone());
        assert_eq!(ready.as_deref(), Some("True"));
        Ok(())
    }

    /// The simulated daemon judges a pod only while it is in an in-place update, and its
    /// completion and the kubelet's status are never in flight together; a completion
    /// refused at a resourceVersion waits for a newer snapshot (a conflict) or its retry
    /// time (another failure).
    #[test]
    fn the_daemon_judges_pods_in_update_one_write_at_a_time() -> Result<(), serde_json::Error> {
        let faults = GlobalFaults::default();
        let mut e = entry(&pod_at("10")?, 0);
        assert!(e.in_update.is_none(), "not in an update: nothing kept");
        assert!(!e.may_complete(0));

        let mut v = serde_json::to_value(pod_at("11")?)?;
        v["metadata"]["annotations"] =
            json!({ "apps.kruise.io/inplace-update-state": "{\"revision\":\"r2\"}" });
        v["status"]["conditions"] = json!([{ "type": "InPlaceUpdateReady", "status": "False" }]);
        let updating: Pod = serde_json::from_value(v.clone())?;
        assert!(e.observe(&updating, &faults));
        assert!(e.in_update.is_some(), "in an update: the snapshot kept");
        assert!(e.may_complete(0) && e.may_write());

        e.daemon_inflight = Some("11".into());
        assert!(
            !e.may_write(),
            "the kubelet waits for the completion in flight"
        );
        assert!(!e.may_complete(0), "one completion at a time");
        e.daemon_inflight = None;
        e.inflight = Some((1, "11".into()));
        assert!(
            !e.may_complete(0),
            "the completion waits for the kubelet's write"
        );
        e.inflight = None;

        e.daemon_failed = Some(("11".into(), Ms::MAX));
        assert!(
            !e.may_complete(i64::MAX - 1),
            "a conflict: not at this version"
        );
        assert!(e.may_write(), "the kubelet's status goes meanwhile");
        v["metadata"]["resourceVersion"] = "12".into();
        assert!(e.observe(&serde_json::from_value(v.clone())?, &faults));
        assert!(e.may_complete(0), "judged again on the newer snapshot");
        e.daemon_failed = Some(("12".into(), 5_000));
        assert!(
            !e.may_complete(4_999),
            "another failure: not before its retry"
        );
        assert!(e.may_complete(5_000));

        v["metadata"]["resourceVersion"] = "13".into();
        v["status"]["conditions"] = json!([{ "type": "InPlaceUpdateReady", "status": "True" }]);
        assert!(e.observe(&serde_json::from_value(v)?, &faults));
        assert!(e.in_update.is_none(), "completed: dropped");
        assert!(!e.may_complete(10_000));
        Ok(())
    }

    /// A deletion in progress is never written over, drifted or not.
    #[test]
    fn no_resync_write_while_the_pod_is_being_deleted() -> Result<(), serde_json::Error> {
        let mut e = entry(&pod_at("10")?, 0);
        e.written = 1;
        e.written_digest = Some(e.api_digest.wrapping_add(1));
        assert!(e.drifted() && e.may_write());
        e.view.deletion_grace = Some(30_000);
        assert!(!e.may_write());
        Ok(())
    }
}
