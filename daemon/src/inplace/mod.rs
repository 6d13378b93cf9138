//! The in-place executor: watches the pods of its node and, for pods in an in-place
//! update, checks through CRI that the updated containers run the new image, restarts
//! containers whose environment comes from changed metadata, and marks the pod
//! `InPlaceUpdateReady=True`.
//!
//! Container changes are seen by polling CRI (`--poll-interval`) for pods in an update
//! only; pod changes by the watch. Pods not in an update cost nothing and their
//! containers are never touched.
//!
//! Completion is one write: the container ids, into the state annotation under
//! [`decide::STATE_CONTAINER_IDS_KEY`] (`<runtime>://<id>` per container name), and the
//! condition, as a strategic merge patch of `pods/status` (conditions merge by type)
//! pinned to the resourceVersion of the pod judged, so that a concurrent controller write
//! wins and a stale cache never marks a pod ready in the middle of a newer update
//! (OpenKruise issue 2276). Every write of the daemon goes through `pods/status`: the
//! subresource keeps the spec but writes metadata, so the daemon is never allowed to
//! change a pod's spec.

pub mod decide;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use inplace_proto::{InPlaceUpdateState, keys};
use k8s_cri::v1::{Container, ContainerState};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch};
use kube::runtime::reflector;
use kube::runtime::watcher::{self};
use tokio::sync::Notify;

use crate::apiserver::{Health, RETRY_MAX, patch_params, retry_backoff, watch_into_store};
use crate::cri::{CriClient, CriError};
use crate::metrics::{Metrics, ReasonLabel};
use crate::pod_cache::PodCache;
use crate::resize;
use decide::{Decision, RuntimeContainer};

/// How long a written completion suppresses re-completing the same pod revision (while
/// the watch may still show the pod from before it).
pub const COMPLETION_MEMORY: Duration = Duration::from_secs(30);

/// CRI label with the pod UID (set by the kubelet on every container).
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// CRI label with the container name.
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Cri(#[from] CriError),
    #[error("API: {0}")]
    Kube(#[from] kube::Error),
    #[error("state annotation: {0}")]
    Json(#[from] serde_json::Error),
}

/// Watches the pods bound to `node` into `writer`, poking `notify` on every change.
pub async fn watch_pods(
    api: Api<Pod>,
    node: String,
    writer: reflector::store::Writer<Pod>,
    notify: Arc<Notify>,
    health: Arc<Health>,
) {
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    watch_into_store(api, cfg, "pod", writer, &notify, &health.pods_synced).await;
}

/// Lists the runtime containers of a pod.
pub async fn runtime_containers(
    cri: &CriClient,
    uid: &str,
) -> Result<Vec<RuntimeContainer>, CriError> {
    let list = cri
        .list_containers(HashMap::from([(
            POD_UID_LABEL.to_string(),
            uid.to_string(),
        )]))
        .await?;
    Ok(list.into_iter().map(runtime_container).collect())
}

fn runtime_container(c: Container) -> RuntimeContainer {
    let meta = c.metadata.unwrap_or_default();
    RuntimeContainer {
        name: c
            .labels
            .get(CONTAINER_NAME_LABEL)
            .cloned()
            .unwrap_or(meta.name),
        attempt: meta.attempt,
        running: c.state == ContainerState::ContainerRunning as i32,
        created_at: c.created_at,
        image_ref: c.image_ref,
        image: c.image.map(|i| i.image).unwrap_or_default(),
        reported_image: None,
        id: c.id,
        env: None,
    }
}

/// What one round of the executor reads from the runtime once for every pod it syncs: on a
/// node with many pods in an update, one listing and one image lookup per image instead of
/// one per pod keeps a round short, and a round's length is how late a restarted container
/// is seen.
#[derive(Default)]
pub(crate) struct Round {
    /// The node's containers by pod uid; `None` when the listing failed (each pod then asks
    /// for its own, and fails on its own).
    containers: Option<HashMap<String, Vec<RuntimeContainer>>>,
    /// Image → its id on the node (`None`: not there, or the lookup failed this round).
    images: HashMap<String, Option<String>>,
}

/// The node's containers by the uid of their pod (the kubelet's label); the runtime's
/// own containers, which have none, are left out.
fn by_pod(list: Vec<Container>) -> HashMap<String, Vec<RuntimeContainer>> {
    let mut by_pod: HashMap<String, Vec<RuntimeContainer>> = HashMap::new();
    for c in list {
        if let Some(uid) = c.labels.get(POD_UID_LABEL).cloned() {
            by_pod.entry(uid).or_default().push(runtime_container(c));
        }
    }
    by_pod
}

impl Round {
    async fn read(cri: &CriClient) -> Self {
        let containers = match cri.list_containers(HashMap::new()).await {
            Ok(list) => Some(by_pod(list)),
            Err(e) => {
                tracing::debug!(error = %e, "cannot list the node's containers; listing per pod");
                None
            }
        };
        Self {
            containers,
            images: HashMap::new(),
        }
    }

    async fn containers_of(
        &mut self,
        cri: &CriClient,
        uid: &str,
    ) -> Result<Vec<RuntimeContainer>, CriError> {
        match self.containers.as_mut() {
            Some(by_pod) => Ok(by_pod.remove(uid).unwrap_or_default()),
            None => runtime_containers(cri, uid).await,
        }
    }
}

pub struct Executor {
    pub cri: CriClient,
    pub client: kube::Client,
    /// The node's pods (shared with the CRR handler).
    pub pods: PodCache,
    pub notify: Arc<Notify>,
    pub metrics: Metrics,
    /// Prefix of recorded container ids (`containerd`).
    pub runtime_name: String,
    pub poll: Duration,
    /// `--apply-resize-via-cri`.
    pub apply_resize: bool,
    /// Kubernetes Events of the restarts it makes, on the pod.
    pub recorder: crate::recorder::EventRecorder,
    last: HashMap<String, Decision>,
    /// uid → (revision, when) of completions written: the watch cache may show the pod
    /// with the condition still False for a moment (or the kubelet's status writes may
    /// interleave with the daemon's), which must not complete the same update twice.
    completed: HashMap<String, (String, std::time::Instant)>,
    /// (uid, container) → (revision, env-from-metadata restarts made for it): bounds the
    /// restarts when the kubelet keeps starting the container with stale values.
    restarts: HashMap<(String, String), (String, u32)>,
    /// Runtime container id → when it was first found running with stale metadata env.
    stale_since: HashMap<String, std::time::Instant>,
    /// uid → back-off of a pod whose last sync failed.
    retry_after: HashMap<String, Retry>,
    /// (uid, revision, container batches applied) → when this daemon saw that batch
    /// appear (node clock, ns), `None` for one already there at its start: the node-clock
    /// anchor of the env-from-metadata decision (see [`decide::NodeClock`]).
    batch_seen: HashMap<(String, String, usize), Option<i64>>,
    /// Set after the first pass over the synced pod cache: a batch first seen later
    /// appeared while the daemon was watching.
    watching: bool,
}

/// How long a container found with stale metadata env is left running before the daemon
/// stops it (see [`Executor::sync_pod`]).
const ENV_SETTLE: Duration = Duration::from_secs(1);

/// When a pod whose sync failed is tried again: exponential back-off with jitter, from
/// half a second up to [`RETRY_MAX`], per pod.
#[derive(Debug)]
pub(crate) struct Retry {
    backoff: backon::ExponentialBackoff,
    /// The object version that failed; a newer one is tried at once.
    version: String,
    not_before: tokio::time::Instant,
}

impl Retry {
    /// The first failure of `version`: nothing to wait for yet.
    pub(crate) fn new(version: &str) -> Self {
        Self {
            backoff: retry_backoff(),
            version: version.to_owned(),
            not_before: tokio::time::Instant::now(),
        }
    }

    /// Another failure, of `version`: the next delay, which it returns.
    pub(crate) fn failed(&mut self, version: &str) -> Duration {
        let delay = self.backoff.next().unwrap_or(RETRY_MAX);
        version.clone_into(&mut self.version);
        self.not_before = tokio::time::Instant::now() + delay;
        delay
    }

    /// Whether `version` must still wait out the back-off (a newer version need not).
    pub(crate) fn waiting(&self, version: &str) -> bool {
        self.version == version && tokio::time::Instant::now() < self.not_before
    }
}

/// Env-from-metadata restarts of one container for one revision at most.
const MAX_ENV_RESTARTS: u32 = 3;

impl Executor {
    pub fn new(
        cri: CriClient,
        client: kube::Client,
        pods: PodCache,
        notify: Arc<Notify>,
        metrics: Metrics,
        runtime_name: String,
        poll: Duration,
    ) -> Self {
        Self {
            cri,
            client,
            pods,
            notify,
            metrics,
            runtime_name,
            poll,
            apply_resize: false,
            recorder: crate::recorder::EventRecorder::disabled(),
            last: HashMap::new(),
            completed: Default::default(),
            restarts: HashMap::new(),
            stale_since: HashMap::new(),
            retry_after: HashMap::new(),
            batch_seen: HashMap::new(),
            watching: false,
        }
    }

    pub async fn run(mut self) {
        // Until the pod cache has synced, every pod would look new to `batch_seen`.
        if !self.pods.wait_filled().await {
            tracing::warn!("pod watch ended before the cache synced");
        }
        let mut first_pass = true;
        loop {
            if first_pass {
                first_pass = false;
            } else {
                self.watching = true;
                tokio::select! {
                    _ = self.notify.notified() => {}
                    _ = tokio::time::sleep(self.poll) => {}
                }
            }
            let pods: Vec<Arc<Pod>> = self
                .pods
                .store()
                .state()
                .into_iter()
                .filter(|p| decide::in_update(p))
                .collect();
            self.last
                .retain(|uid, _| pods.iter().any(|p| p.metadata.uid.as_deref() == Some(uid)));
            self.restarts
                .retain(|(uid, _), _| pods.iter().any(|p| p.metadata.uid.as_deref() == Some(uid)));
            self.stale_since
                .retain(|_, at| at.elapsed() < COMPLETION_MEMORY);
            self.completed
                .retain(|_, (_, at)| at.elapsed() < COMPLETION_MEMORY);
            self.retry_after
                .retain(|uid, _| pods.iter().any(|p| p.metadata.uid.as_deref() == Some(uid)));
            self.batch_seen.retain(|(uid, _, _), _| {
                pods.iter().any(|p| p.metadata.uid.as_deref() == Some(uid))
            });
            if pods.is_empty() {
                continue;
            }
            let mut round = Round::read(&self.cri).await;
            for pod in pods {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                let version = pod.metadata.resource_version.clone().unwrap_or_default();
                // A pod whose last sync failed waits out its back-off, unless it changed
                // meanwhile (a conflict is answered by the newer version at once).
                if self
                    .retry_after
                    .get(&uid)
                    .is_some_and(|r| r.waiting(&version))
                {
                    continue;
                }
                let span = crate::logging::pod_span(
                    pod.metadata.namespace.as_deref().unwrap_or_default(),
                    pod.metadata.name.as_deref().unwrap_or_default(),
                );
                match tracing::Instrument::instrument(self.sync_pod(&pod, &mut round), span).await {
                    Ok(_) => {
                        self.retry_after.remove(&uid);
                    }
                    Err(e) => {
                        let delay = self
                            .retry_after
                            .entry(uid)
                            .or_insert_with(|| Retry::new(&version))
                            .failed(&version);
                        tracing::warn!(pod = %pod_name(&pod), error = %e, retry_in = ?delay, "in-place sync failed");
                    }
                }
            }
        }
    }

    /// Limits applied to the newest instance of each container a resize changes.
    async fn observe_resized(
        &self,
        state: &InPlaceUpdateState,
        runtime: &[RuntimeContainer],
    ) -> BTreeMap<String, resize::Limits> {
        let mut out = BTreeMap::new();
        for name in decide::resized_containers(state) {
            let Some(rc) = decide::newest(runtime, &name) else {
                continue;
            };
            match resize::observe(&self.cri, &rc.id).await {
                Ok((l, _)) => {
                    out.insert(name, l);
                }
                Err(e) => {
                    tracing::debug!(container = %name, error = %e, "cannot observe resources")
                }
            }
        }
        out
    }

    /// Fills in the env of the newest instance of each container whose env reads pod
    /// metadata, for an update that changes such env (`updateEnvFromMetadata`). A runtime
    /// that does not report it leaves `env` empty (the decision then falls back to times).
    async fn read_metadata_env(
        &self,
        pod: &Pod,
        state: &InPlaceUpdateState,
        runtime: &mut [RuntimeContainer],
    ) {
        if !state.update_env_from_metadata {
            return;
        }
        let readers = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .filter(|c| decide::env_from_metadata(c));
        for c in readers {
            let Some(id) = decide::newest(runtime, &c.name).map(|rc| rc.id.clone()) else {
                continue;
            };
            let env = match self.cri.container_status_verbose(&id).await {
                Ok((_, info)) => decide::env_from_verbose_info(&info),
                Err(e) => {
                    tracing::debug!(container = %c.name, error = %e, "cannot read container env");
                    None
                }
            };
            if let Some(rc) = runtime.iter_mut().find(|rc| rc.id == id) {
                rc.env = env;
            }
        }
    }

    /// Fills in the image and image id the kubelet reports for the newest instance of each
    /// updated container whose old container id the state does not record (a state written
    /// by OpenKruise): the in-place contract then judges by images, and must see them as
    /// the controller sees them in the pod status. A failed read leaves the runtime's
    /// listing: containerd lists the image id where the kubelet reports the repo digest (if
    /// the image has one), so the container then counts as updated once it runs the spec
    /// image's id, which `decide` checks first.
    async fn read_reported_images(
        &self,
        state: &InPlaceUpdateState,
        runtime: &mut [RuntimeContainer],
    ) {
        let unrecorded = state
            .last_container_statuses
            .iter()
            .filter(|(_, before)| before.container_id.is_empty());
        for (name, _) in unrecorded {
            let Some(id) = decide::newest(runtime, name).map(|rc| rc.id.clone()) else {
                continue;
            };
            match self.cri.container_status(&id).await {
                Ok(st) => {
                    let image = st.image.map(|i| i.image).unwrap_or_default();
                    if let Some(rc) = runtime.iter_mut().find(|rc| rc.id == id) {
                        rc.reported_image = Some((image, st.image_ref));
                    }
                }
                Err(e) => {
                    tracing::debug!(container = %name, error = %e, "cannot read container status")
                }
            }
        }
    }

    /// The image id on the node of each image of `pod`'s containers, looked up once a round.
    async fn resolve_images(&self, pod: &Pod, round: &mut Round) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
            let Some(image) = c.image.as_ref() else {
                continue;
            };
            if !round.images.contains_key(image) {
                let id = match self.cri.image_status(image).await {
                    Ok(img) => img.map(|i| i.id),
                    Err(e) => {
                        tracing::debug!(image, error = %e, "ImageStatus failed");
                        None
                    }
                };
                round.images.insert(image.clone(), id);
            }
            if let Some(Some(id)) = round.images.get(image) {
                out.insert(image.clone(), id.clone());
            }
        }
        out
    }

    /// Evaluates one pod and acts on the decision.
    pub(crate) async fn sync_pod(
        &mut self,
        pod: &Pod,
        round: &mut Round,
    ) -> Result<Decision, ExecError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let revision = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::REVISION_LABEL))
            .cloned()
            .unwrap_or_default();
        // first, so that a batch is anchored when first seen even if this sync fails
        let clock = self.node_clock(pod, &uid, &revision);
        if self
            .completed
            .get(&uid)
            .is_some_and(|(r, at)| *r == revision && at.elapsed() < COMPLETION_MEMORY)
        {
            return Ok(Decision::Wait(
                "completion written; waiting for the watch".into(),
            ));
        }
        let mut runtime = round.containers_of(&self.cri, &uid).await?;
        // Read once: for what is asked of the runtime first, then for the decision.
        let state = decide::state_of(pod);
        let readable = state.as_ref().and_then(|s| s.as_ref().ok());
        if let Some(state) = readable {
            self.read_metadata_env(pod, state, &mut runtime).await;
            self.read_reported_images(state, &mut runtime).await;
        }
        let resolved = self.resolve_images(pod, round).await;
        let observed = match readable {
            Some(state) => self.observe_resized(state, &runtime).await,
            None => BTreeMap::new(),
        };
        let mut d = decide::decide_with_state(
            pod,
            state.as_ref(),
            &runtime,
            &resolved,
            &observed,
            self.apply_resize,
            clock,
        );
        if let Decision::Restart { container, id } = &d {
            // First seen stale now: give the kubelet a moment to see the new metadata
            // before the container is stopped (the poll comes back to it). Stopped at once,
            // the kubelet may start it again from its not yet updated copy of the pod (seen
            // on the bed within 0.7 s), and the container has to be restarted twice.
            let first_seen = *self
                .stale_since
                .entry(id.clone())
                .or_insert_with(std::time::Instant::now);
            if first_seen.elapsed() < ENV_SETTLE {
                d = Decision::Wait(format!(
                    "{container} reads changed metadata; restarting it once the kubelet has seen the change"
                ));
            }
        }
        if let Decision::Restart { container, .. } = &d {
            let key = (uid.clone(), container.clone());
            let count = self
                .restarts
                .entry(key)
                .or_insert_with(|| (revision.clone(), 0));
            if count.0 != revision {
                *count = (revision.clone(), 0);
            }
            if count.1 >= MAX_ENV_RESTARTS {
                d = Decision::Wait(format!(
                    "{container} restarted {MAX_ENV_RESTARTS} times for revision {revision} and still runs with env that differs from the pod's metadata; not restarting it again"
                ));
            } else {
                count.1 += 1;
            }
        }
        if self.last.get(&uid) != Some(&d) {
            tracing::info!(pod = %pod_name(pod), decision = ?d, "in-place update");
            self.last.insert(uid.clone(), d.clone());
        }
        match &d {
            Decision::Restart { container, id } => {
                // Decided without the container's env (runtime does not report it): record
                // the container stopped, so that its successor is judged by id, not by
                // comparing clocks.
                if runtime.iter().any(|rc| &rc.id == id && rc.env.is_none()) {
                    self.record_env_stopped(pod, container, id).await?;
                }
                self.stop_for_restart(
                    pod,
                    container,
                    id,
                    &revision,
                    "env-from-metadata",
                    "its env reads pod metadata that changed",
                )
                .await?;
            }
            Decision::RestartRequested { container, id } => {
                self.stop_for_restart(
                    pod,
                    container,
                    id,
                    &revision,
                    "restart",
                    "a restart was requested (kubectl inplace rollout restart)",
                )
                .await?;
            }
            Decision::Resize {
                container,
                id,
                target,
            } => {
                let report = resize::apply(&self.cri, id, target).await;
                match report {
                    Ok(r) => {
                        tracing::info!(pod = %pod_name(pod), container, report = %r, "resized through CRI")
                    }
                    Err(e) => {
                        tracing::warn!(pod = %pod_name(pod), container, error = %e, "resize through CRI failed")
                    }
                }
            }
            Decision::Complete(ids) => {
                self.complete(pod, ids).await?;
                self.completed
                    .insert(uid.clone(), (revision, std::time::Instant::now()));
            }
            Decision::EnvChecked { batch, readers } => {
                self.record_env_checked(pod, *batch, readers).await?;
            }
            Decision::NotInUpdate | Decision::Wait(_) | Decision::Invalid(_) => {}
        }
        Ok(d)
    }

    /// The node-clock facts of `pod`'s current container batch: when this daemon saw it
    /// appear, recorded the first time it is asked about it.
    fn node_clock(&mut self, pod: &Pod, uid: &str, revision: &str) -> decide::NodeClock {
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let Some(Ok(state)) = InPlaceUpdateState::from_annotations(&annotations) else {
            return decide::NodeClock::default();
        };
        let key = (
            uid.to_owned(),
            revision.to_owned(),
            state.container_batches_record.len(),
        );
        let watching = self.watching;
        let seen = *self.batch_seen.entry(key).or_insert_with(|| {
            watching.then(|| {
                i64::try_from(k8s_openapi::jiff::Timestamp::now().as_nanosecond())
                    .unwrap_or(i64::MAX)
            })
        });
        decide::NodeClock {
            batch_seen_at: seen,
        }
    }

    /// Records in the state annotation that container `container` (runtime id `id`) is
    /// stopped for an env-from-metadata restart, unless it says so already.
    async fn record_env_stopped(
        &self,
        pod: &Pod,
        container: &str,
        id: &str,
    ) -> Result<(), ExecError> {
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let Some(Ok(state)) = InPlaceUpdateState::from_annotations(&annotations) else {
            return Ok(());
        };
        if let Some(s) = decide::state_with_env_stopped(&state, container, id)? {
            self.write_state(pod, s).await?;
        }
        Ok(())
    }

    /// Stops container `container` (runtime id `id`) so that the kubelet starts it again
    /// in place, with the pod's own grace period (2–30 s); records the event on the pod
    /// and counts the restart under `reason`. `why` says what asked for it.
    async fn stop_for_restart(
        &self,
        pod: &Pod,
        container: &str,
        id: &str,
        revision: &str,
        reason: &str,
        why: &str,
    ) -> Result<(), ExecError> {
        let grace = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .and_then(|g| u64::try_from(g).ok())
            .unwrap_or(30)
            .clamp(2, 30);
        tracing::info!(pod = %pod_name(pod), container, id, why, "stopping container so the kubelet restarts it");
        self.cri
            .stop_container(id, Duration::from_secs(grace))
            .await?;
        self.recorder.record(crate::recorder::restart_note(
            pod, container, id, why, revision,
        ));
        self.metrics
            .restarts
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .inc();
        Ok(())
    }

    /// Records `daemonEnvChecked` for `batch` in the state annotation, unless it says so
    /// already.
    async fn record_env_checked(
        &self,
        pod: &Pod,
        batch: usize,
        readers: &BTreeMap<String, String>,
    ) -> Result<(), ExecError> {
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let Some(Ok(mut state)) = InPlaceUpdateState::from_annotations(&annotations) else {
            return Ok(());
        };
        let checked = inplace_proto::EnvChecked {
            batch,
            containers: self.full_ids(readers),
        };
        if state.daemon_env_checked.as_ref() == Some(&checked) {
            return Ok(());
        }
        state.daemon_env_checked = Some(checked);
        self.write_state(pod, serde_json::to_string(&state)?)
            .await?;
        tracing::info!(pod = %pod_name(pod), batch, "env of metadata readers checked for this container batch");
        Ok(())
    }

    /// `<runtime>://<id>` for each container (name → id), as the pod status writes ids.
    fn full_ids(&self, ids: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        ids.iter()
            .map(|(n, id)| (n.clone(), format!("{}://{id}", self.runtime_name)))
            .collect()
    }

    /// Writes `state` (JSON) into the pod's in-place state annotation, under the key the
    /// pod has: through the `pods/status` subresource (which writes metadata too, but never
    /// the spec, so the daemon needs no `pods: patch`), pinned to the pod's
    /// resourceVersion, so that a concurrent controller write wins and the pod is judged
    /// again.
    async fn write_state(&self, pod: &Pod, state: String) -> Result<Pod, ExecError> {
        let patch = decide::state_patch(pod, state);
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        Ok(Api::<Pod>::namespaced(self.client.clone(), &ns)
            .patch_status(&name, &patch_params(), &Patch::Merge(&patch))
            .await?)
    }

    /// Writes the completion: the container ids into the state annotation (when not there
    /// yet) and `InPlaceUpdateReady=True`, in one strategic merge patch of `pods/status`
    /// (conditions merge by type) pinned to the resourceVersion of the pod judged here: on
    /// a conflict the pod is judged again from the watch, so a stale cache never marks a
    /// pod ready in the middle of a newer update.
    async fn complete(&self, pod: &Pod, ids: &BTreeMap<String, String>) -> Result<(), ExecError> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let full = self.full_ids(ids);
        let patch = decide::completion_patch(pod, &full, k8s_openapi::jiff::Timestamp::now())?;
        api.patch_status(&name, &patch_params(), &Patch::Strategic(&patch))
            .await?;
        self.metrics.inplace_completed.inc();
        tracing::info!(pod = %format!("{ns}/{name}"), containers = ?full, "InPlaceUpdateReady=True");
        Ok(())
    }
}

fn pod_name(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("cri", &self.cri)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed version waits out its back-off; a newer version of the object is tried
    /// at once; the delays grow.
    #[test]
    fn a_retry_holds_the_failed_version_only() {
        let mut r = Retry::new("1");
        assert!(!r.waiting("1"), "nothing failed yet");
        let first = r.failed("1");
        assert!(r.waiting("1"));
        assert!(!r.waiting("2"));
        let later: Vec<Duration> = (0..8).map(|_| r.failed("1")).collect();
        assert!(later[7] > first, "{first:?} then {later:?}");
    }

    /// One listing of the node serves each pod what a listing filtered by its uid would:
    /// its containers, every state, named by the kubelet's label.
    #[test]
    fn the_node_listing_is_split_by_pod() {
        let container = |id: &str, uid: Option<&str>, name: &str, running: bool| Container {
            id: id.into(),
            labels: uid
                .map(|u| {
                    HashMap::from([
                        (POD_UID_LABEL.to_owned(), u.to_owned()),
                        (CONTAINER_NAME_LABEL.to_owned(), name.to_owned()),
                    ])
                })
                .unwrap_or_default(),
            state: if running {
                ContainerState::ContainerRunning
            } else {
                ContainerState::ContainerExited
            } as i32,
            ..Default::default()
        };
        let by = by_pod(vec![
            container("a1", Some("pa"), "app", false),
            container("b1", Some("pb"), "app", true),
            container("a2", Some("pa"), "app", true),
            container("x", None, "", true),
        ]);
        let of = |uid: &str| -> Vec<(String, String, bool)> {
            by.get(uid)
                .map(|v| {
                    v.iter()
                        .map(|c| (c.id.clone(), c.name.clone(), c.running))
                        .collect()
                })
                .unwrap_or_default()
        };
        assert_eq!(
            of("pa"),
            [
                ("a1".into(), "app".into(), false),
                ("a2".into(), "app".into(), true)
            ]
        );
        assert_eq!(of("pb"), [("b1".into(), "app".into(), true)]);
        assert_eq!(by.len(), 2, "a container without a pod uid is no pod's");
    }
}
