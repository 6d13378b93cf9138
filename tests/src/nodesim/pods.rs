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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, watch};

use super::fault::GlobalFaults;
use super::images::ImageStores;
use super::ippool::{IpPool, node_ip};
use super::model::{Ms, PodSim, PodView, SimConfig, advance, advance_with};
use super::podview::{is_terminal, node_index, observed_from_pod, rv_newer, view_from_pod};
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
    /// The nodes' image stores (`--pull-delay`): a changed image is pulled first.
    /// `None`: images are on every node at once.
    pub images: Option<Arc<Mutex<ImageStores>>>,
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
    /// (hash, resourceVersion) of the status patch in flight.
    inflight: Option<(u64, String)>,
    /// The resourceVersion a patch was rejected at: wait for a newer snapshot.
    conflict_rv: Option<String>,
    deleting: Deleting,
    due: Option<Ms>,
    counted_ready: bool,
}

enum Done {
    Status {
        id: u64,
        hash: u64,
        result: Result<Box<Pod>, kube::Error>,
    },
    Delete {
        id: u64,
        result: Result<(), kube::Error>,
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
        loop {
            let now = now_ms();
            let sleep_for = until_next_due(&engine.heap, now);
            tokio::select! {
                ev = events.next() => match ev {
                    Some(Ok(ev)) => engine.on_event(ev),
                    Some(Err(e)) => tracing::warn!("pod watch: {e}"),
                    None => break,
                },
                Some(done) = done_rx.recv() => engine.on_done(done),
                () = tokio::time::sleep(sleep_for) => engine.run_due(),
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
        let rv = pod.metadata.resource_version.clone().unwrap_or_default();
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let key = (ns.clone(), name.clone());
        if let Some(&id) = self.by_key.get(&key) {
            let same_uid = self.pods.get(&id).is_some_and(|e| e.sim.uid == uid);
            if same_uid {
                let Some(e) = self.pods.get_mut(&id) else {
                    return;
                };
                if !rv_newer(&rv, &e.rv) {
                    return;
                }
                let (view, _) = view_from_pod(pod, &self.cfg.faults);
                e.view = view;
                e.rv = rv;
                self.touch(id);
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
                PodSim::new(&view, ip, host_ip, now, &self.cfg.sim)
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        self.pods.insert(
            id,
            Entry {
                namespace: ns.clone(),
                name: name.clone(),
                node: node.to_owned(),
                rv,
                view,
                sim,
                written: 0,
                inflight: None,
                conflict_rv: None,
                deleting: Deleting::No,
                due: None,
                counted_ready: false,
            },
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
        self.maybe_write(id);
    }

    fn maybe_write(&mut self, id: u64) {
        let Some(e) = self.pods.get_mut(&id) else {
            return;
        };
        if e.view.deletion_grace.is_some() {
            return;
        }
        if e.inflight.is_some() {
            // Re-evaluated when the patch in flight completes.
            return;
        }
        if e.conflict_rv.as_ref() == Some(&e.rv) {
            return;
        }
        let status = render::pod_status(&e.view, &e.sim);
        let hash = hash_value(&status);
        if hash == e.written {
            return;
        }
        e.inflight = Some((hash, e.rv.clone()));
        let patch = if e.sim.ready.status {
            json!({ "metadata": { "resourceVersion": e.rv }, "status": status })
        } else {
            json!({ "status": status })
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &e.namespace);
        let name = e.name.clone();
        let sem = self.sem.clone();
        let tx = self.done_tx.clone();
        tokio::spawn(async move {
            let result = match sem.acquire_owned().await {
                Ok(_permit) => {
                    let pp = PatchParams {
                        field_manager: Some(FIELD_MANAGER.into()),
                        ..PatchParams::default()
                    };
                    api.patch_status(&name, &pp, &Patch::Strategic(patch))
                        .await
                        .map(Box::new)
                }
                Err(_) => return,
            };
            let _ = tx.send(Done::Status { id, hash, result });
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
            Done::Status { id, hash, result } => {
                if result.is_ok() {
                    Stats::inc(&self.stats.status_writes);
                }
                let Some(e) = self.pods.get_mut(&id) else {
                    return;
                };
                let Some((_, sent_rv)) = e.inflight.take() else {
                    return;
                };
                match result {
                    Ok(pod) => {
                        e.written = hash;
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
