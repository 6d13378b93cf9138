//! The image puller: turns the node's NodeImage spec into CRI pulls through a bounded
//! worker pool and publishes the resulting NodeImage status.
//!
//! Concurrency: at most `max_concurrent` PullImage RPCs on the node, and one at a time
//! per image name (tags of one repository share layers; pulling them side by side would
//! fetch the shared blobs twice). A task holds neither limit while it backs off.
//!
//! The puller does no API I/O of its own: it reads NodeImage snapshots from a `watch`
//! channel and publishes the status on another; [`crate::kube_io`] wires both to the API
//! server. That keeps it testable against a real containerd without a cluster.

pub mod auth;
pub mod keyring;
pub mod plan;
pub mod provider;
pub mod provider_exec;
pub mod stall;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_cri::v1::{AuthConfig, PodSandboxConfig, PodSandboxMetadata};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::AbortHandle;

use crate::api::{
    ImageTagStatus, NodeImageSpec, NodeImageStatus, ReferenceObject, SandboxConfig, TagPhase,
};
use crate::cri::CriClient;
use crate::metrics::Metrics;
use plan::{Start, TagKey};

/// Reads a Secret's data: `Ok(None)` when it does not exist.
pub type SecretFetcher = Arc<
    dyn Fn(String, String) -> BoxFuture<'static, Result<Option<BTreeMap<String, Vec<u8>>>, String>>
        + Send
        + Sync,
>;

/// A fetcher for setups without secrets.
pub fn no_secrets() -> SecretFetcher {
    Arc::new(|_, _| Box::pin(async { Ok(None) }))
}

/// The NodeImage parts the puller needs: spec, and the status last read from the API, with
/// the resourceVersion they were read at (the status writer's precondition).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub spec: NodeImageSpec,
    pub status: NodeImageStatus,
    pub resource_version: Option<String>,
}

#[derive(Clone, Debug)]
pub struct PullerConfig {
    /// Node-wide cap on concurrent PullImage calls.
    pub max_concurrent: usize,
    /// An attempt that fetches nothing for this long is cancelled (see [`stall`]);
    /// `None`: only the per-attempt timeout ends it.
    pub stall_window: Option<Duration>,
}

/// Reads the runtime's active content ingests (see [`stall`]); `None` when it cannot.
pub type ProgressProbe = Arc<dyn Fn() -> BoxFuture<'static, Option<stall::Ingests>> + Send + Sync>;

/// The probe of containerd's content store on `socket` (the CRI socket: containerd serves
/// its own API on it too), in the CRI namespace; each call waits at most `timeout`.
/// Another runtime (CRI-O) has no such service: every sample is `None`.
pub fn containerd_progress(socket: std::path::PathBuf, timeout: Duration) -> ProgressProbe {
    Arc::new(move || {
        let socket = socket.clone();
        Box::pin(async move {
            match tokio::time::timeout(timeout, list_ingests(&socket)).await {
                Ok(Ok(i)) => Some(i),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "content store ingests not readable");
                    None
                }
                Err(_) => None,
            }
        })
    })
}

async fn list_ingests(socket: &std::path::Path) -> Result<stall::Ingests, String> {
    use containerd_client::services::v1::ListStatusesRequest;
    use containerd_client::services::v1::content_client::ContentClient;
    let channel = containerd_client::connect(socket)
        .await
        .map_err(|e| e.to_string())?;
    let mut req = tonic::Request::new(ListStatusesRequest { filters: vec![] });
    req.metadata_mut().insert(
        "containerd-namespace",
        tonic::metadata::MetadataValue::from_static(crate::containerd_events::CRI_NAMESPACE),
    );
    let statuses = ContentClient::new(channel)
        .list_statuses(req)
        .await
        .map_err(|e| format!("{}: {}", e.code(), e.message()))?
        .into_inner()
        .statuses;
    Ok(statuses.into_iter().map(|s| (s.r#ref, s.offset)).collect())
}

#[derive(Debug)]
struct TagEvent {
    key: TagKey,
    version: i64,
    status: ImageTagStatus,
}

struct Shared {
    cri: CriClient,
    global: Semaphore,
    repo_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    secrets: SecretFetcher,
    metrics: Metrics,
    /// The stall window and the probe that samples progress.
    stall: Option<(Duration, ProgressProbe)>,
}

impl Shared {
    fn repo_lock(&self, image: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self
            .repo_locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.entry(image.to_string()).or_default().clone()
    }
}

/// The puller's state, owned by its [`Puller::run`] loop.
pub struct Puller {
    shared: Arc<Shared>,
    spec: NodeImageSpec,
    live: BTreeMap<TagKey, ImageTagStatus>,
    running: BTreeMap<TagKey, (i64, AbortHandle)>,
    events_tx: mpsc::UnboundedSender<TagEvent>,
    events_rx: mpsc::UnboundedReceiver<TagEvent>,
    status_tx: watch::Sender<NodeImageStatus>,
    /// Kubernetes Events of failed pulls, on the NodeImage of `node`.
    recorder: crate::recorder::EventRecorder,
    node: String,
    /// The kubelet's credential providers, for images no pull secret has credentials of.
    providers: Option<Arc<provider_exec::CredentialProviders>>,
}

impl std::fmt::Debug for Puller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Puller")
            .field("running", &self.running.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

impl Puller {
    /// A puller and the receiver of the status it publishes.
    pub fn new(
        cri: CriClient,
        config: PullerConfig,
        secrets: SecretFetcher,
        metrics: Metrics,
    ) -> (Self, watch::Receiver<NodeImageStatus>) {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (status_tx, status_rx) = watch::channel(NodeImageStatus::default());
        let probe = containerd_progress(cri.socket().to_path_buf(), Duration::from_secs(5));
        let shared = Arc::new(Shared {
            cri,
            global: Semaphore::new(config.max_concurrent.max(1)),
            repo_locks: Mutex::default(),
            secrets,
            metrics,
            stall: config
                .stall_window
                .filter(|w| !w.is_zero())
                .map(|w| (w, probe)),
        });
        (
            Self {
                shared,
                spec: NodeImageSpec::default(),
                live: BTreeMap::new(),
                running: BTreeMap::new(),
                events_tx,
                events_rx,
                status_tx,
                recorder: crate::recorder::EventRecorder::disabled(),
                node: String::new(),
                providers: None,
            },
            status_rx,
        )
    }

    /// Records a Warning event on `node`'s NodeImage for every pull that fails.
    pub fn with_events(mut self, recorder: crate::recorder::EventRecorder, node: &str) -> Self {
        self.recorder = recorder;
        self.node = node.to_owned();
        self
    }

    /// Asks the kubelet's credential providers for images no pull secret has
    /// credentials of.
    pub fn with_credential_providers(
        mut self,
        providers: Arc<provider_exec::CredentialProviders>,
    ) -> Self {
        self.providers = Some(providers);
        self
    }

    /// Follows `snapshots` (None = the NodeImage does not exist) until the sender drops.
    pub async fn run(mut self, mut snapshots: watch::Receiver<Option<Snapshot>>) {
        let first = snapshots.borrow_and_update().clone();
        self.apply(first);
        loop {
            tokio::select! {
                changed = snapshots.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let s = snapshots.borrow_and_update().clone();
                    self.apply(s);
                }
                Some(ev) = self.events_rx.recv() => {
                    self.on_event(ev);
                    while let Ok(ev) = self.events_rx.try_recv() {
                        self.on_event(ev);
                    }
                    self.publish();
                }
            }
        }
        for (_, (_, h)) in std::mem::take(&mut self.running) {
            h.abort();
        }
    }

    fn on_event(&mut self, ev: TagEvent) {
        let Some((version, _)) = self.running.get(&ev.key) else {
            return;
        };
        if *version != ev.version {
            return;
        }
        if ev.status.phase.is_finished() {
            self.running.remove(&ev.key);
            if ev.status.phase == TagPhase::Failed {
                self.recorder.record(crate::recorder::pull_failed_note(
                    &self.node,
                    &ev.key.to_string(),
                    &ev.status.message,
                ));
            }
        }
        self.live.insert(ev.key, ev.status);
    }

    fn publish(&self) {
        let s = plan::aggregate(&self.spec, &self.live);
        self.status_tx.send_if_modified(|cur| {
            if *cur == s {
                false
            } else {
                *cur = s;
                true
            }
        });
    }

    fn apply(&mut self, snapshot: Option<Snapshot>) {
        let Snapshot { spec, status, .. } = snapshot.unwrap_or_default();
        // statuses reported before (e.g. by a previous daemon) are adopted for tags this
        // process has no state of; its own state is never older than what it wrote
        for (image, st) in &status.image_statuses {
            for t in &st.tags {
                self.live
                    .entry(TagKey::new(image, &t.tag))
                    .or_insert_with(|| t.clone());
            }
        }
        let mut known = NodeImageStatus::default();
        for (k, st) in &self.live {
            known
                .image_statuses
                .entry(k.image.clone())
                .or_default()
                .tags
                .push(st.clone());
        }
        let running: BTreeMap<TagKey, i64> = self
            .running
            .iter()
            .map(|(k, (v, _))| (k.clone(), *v))
            .collect();
        let plan = plan::reconcile(&spec, &known, &running);
        for key in &plan.cancel {
            if let Some((_, h)) = self.running.remove(key) {
                tracing::info!(image = %key, "pull cancelled: the tag left the spec or changed version");
                h.abort();
            }
        }
        for start in plan.start {
            let (pull_secrets, sandbox) = spec
                .images
                .get(&start.key.image)
                .map(|i| (i.pull_secrets.clone(), i.sandbox_config.clone()))
                .unwrap_or_default();
            let initial = initial_status(&start);
            self.live.insert(start.key.clone(), initial.clone());
            let key = start.key.clone();
            let version = start.version;
            let span = crate::logging::pull_span(&key.to_string());
            let h = tokio::spawn(tracing::Instrument::instrument(
                pull_task(
                    self.shared.clone(),
                    start,
                    initial,
                    pull_secrets,
                    self.providers.clone(),
                    sandbox,
                    self.events_tx.clone(),
                ),
                span,
            ));
            self.running.insert(key, (version, h.abort_handle()));
        }
        self.live.retain(|k, _| {
            spec.images
                .get(&k.image)
                .is_some_and(|i| i.tags.iter().any(|t| t.tag == k.tag))
        });
        self.spec = spec;
        self.publish();
    }
}

fn initial_status(start: &Start) -> ImageTagStatus {
    let mut st = start.resume.clone().unwrap_or_default();
    st.tag = start.key.tag.clone();
    st.version = start.version;
    if st.start_time.is_none() {
        st.phase = TagPhase::Waiting;
    }
    st.progress = 0;
    st.completion_time = None;
    st
}

fn sandbox_for(sandbox: Option<SandboxConfig>) -> PodSandboxConfig {
    let sb = sandbox.unwrap_or_default();
    let mut annotations: HashMap<String, String> = sb.annotations.into_iter().collect();
    annotations.insert(
        inplace_proto::keys::PULLING_IMAGE_BY_ANNOTATION.into(),
        "inplace-daemon".into(),
    );
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: "inplace-daemon-pull".into(),
            namespace: "inplace-daemon".into(),
            ..Default::default()
        }),
        labels: sb.labels.into_iter().collect(),
        annotations,
        ..Default::default()
    }
}

/// Reads the referenced secrets and, when none has credentials for the image, asks the
/// credential providers; problems become notes reported if the pull fails.
async fn resolve_auth(
    shared: &Shared,
    reference: &str,
    secrets: &[ReferenceObject],
    providers: Option<&provider_exec::CredentialProviders>,
) -> (Vec<AuthConfig>, Vec<String>) {
    let mut creds = Vec::new();
    let mut notes = Vec::new();
    for s in secrets {
        let name = format!("{}/{}", s.namespace, s.name);
        match (shared.secrets)(s.namespace.clone(), s.name.clone()).await {
            Ok(Some(data)) => match auth::credentials_for(reference, &name, &data) {
                Ok(c) => {
                    tracing::info!(secret = %name, credentials = c.len(), "pull secret read");
                    creds.extend(c);
                }
                Err(e) => notes.push(e.to_string()),
            },
            Ok(None) => notes.push(format!("pull secret {name} not found")),
            Err(e) => notes.push(format!("pull secret {name}: {e}")),
        }
    }
    if creds.is_empty()
        && let Some(p) = providers
    {
        let (c, errors) = p.credentials(&auth::repository_of(reference)).await;
        if !c.is_empty() {
            tracing::info!(
                credentials = c.len(),
                "credentials from the credential providers"
            );
        }
        creds.extend(c);
        notes.extend(errors);
    }
    (creds, notes)
}

/// The imageID reported for a pulled image: its repo digest for this name when the
/// runtime has one, else `<name>@<runtime id>`.
async fn image_id(shared: &Shared, key: &TagKey, runtime_ref: &str) -> String {
    if let Ok(Some(img)) = shared.cri.image_status(&key.reference()).await {
        let prefix = format!("{}@", key.image);
        if let Some(d) = img.repo_digests.iter().find(|d| d.starts_with(&prefix)) {
            return d.clone();
        }
        return format!("{}@{}", key.image, img.id);
    }
    format!("{}@{}", key.image, runtime_ref)
}

fn elapsed_since(start: Option<&Time>) -> Duration {
    start
        .and_then(|t| {
            Duration::try_from(k8s_openapi::jiff::Timestamp::now().duration_since(t.0)).ok()
        })
        .unwrap_or_default()
}

async fn pull_task(
    shared: Arc<Shared>,
    start: Start,
    mut st: ImageTagStatus,
    secrets: Vec<ReferenceObject>,
    providers: Option<Arc<provider_exec::CredentialProviders>>,
    sandbox: Option<SandboxConfig>,
    tx: mpsc::UnboundedSender<TagEvent>,
) {
    let key = start.key.clone();
    let send = |st: &ImageTagStatus| {
        // the receiver only goes away when the puller stops
        let _ = tx.send(TagEvent {
            key: key.clone(),
            version: start.version,
            status: st.clone(),
        });
    };
    let t0 = Instant::now();
    let finish = |st: &mut ImageTagStatus, result: Result<String, String>| {
        st.completion_time = Some(now());
        match result {
            Ok(id) => {
                st.phase = TagPhase::Succeeded;
                st.progress = 100;
                st.image_id = id;
                st.message.clear();
            }
            Err(m) => {
                st.phase = TagPhase::Failed;
                st.message = m;
            }
        }
        let r = Metrics::result(if st.phase == TagPhase::Succeeded {
            "succeeded"
        } else {
            "failed"
        });
        shared.metrics.pulls.get_or_create(&r).inc();
        shared
            .metrics
            .pull_duration
            .get_or_create(&r)
            .observe(t0.elapsed().as_secs_f64());
    };
    send(&st);

    let reference = key.reference();
    if let Err(e) = auth::check_reference(&reference) {
        st.start_time.get_or_insert_with(now);
        finish(&mut st, Err(e.to_string()));
        tracing::warn!(image = %reference, error = %st.message, "pull failed");
        send(&st);
        return;
    }
    let (creds, notes) = resolve_auth(&shared, &reference, &secrets, providers.as_deref()).await;
    let sandbox = sandbox_for(sandbox);
    let repo_lock = shared.repo_lock(&key.image);
    let mut last_err = String::new();
    let mut attempts_made = 0;
    for attempt in 1..=start.params.attempts {
        let _repo = repo_lock.lock().await;
        let Ok(_permit) = shared.global.acquire().await else {
            return; // semaphore closed: shutting down
        };
        if st.phase != TagPhase::Pulling {
            st.phase = TagPhase::Pulling;
            st.start_time.get_or_insert_with(now);
            send(&st);
        }
        let Some(deadline) = start
            .params
            .attempt_deadline(elapsed_since(st.start_time.as_ref()))
        else {
            last_err = format!(
                "active deadline of {}s exceeded",
                start
                    .params
                    .active_deadline
                    .map(|d| d.as_secs())
                    .unwrap_or_default()
            );
            break;
        };
        if attempt == 1
            && !start.params.always
            && let Ok(Some(img)) = shared.cri.image_status(&reference).await
        {
            let id = image_id(&shared, &key, &img.id).await;
            finish(&mut st, Ok(id));
            tracing::info!(image = %reference, "already present (IfNotPresent)");
            send(&st);
            return;
        }
        attempts_made = attempt;
        shared.metrics.pulls_in_flight.inc();
        let attempt_start = Instant::now();
        let pull = async {
            // One deadline for the attempt, whichever credentials it tries: each call gets
            // what is left of it, so the call's own timeout ends an attempt the runtime
            // never answers, with the runtime call named in the message.
            let until = tokio::time::Instant::now() + deadline;
            let mut last = None;
            for c in creds.iter().cloned().map(Some).chain([None]) {
                // (the first call starts at once: the whole deadline, as its message says)
                let left = match last {
                    None => deadline,
                    Some(_) => until.saturating_duration_since(tokio::time::Instant::now()),
                };
                if left.is_zero() {
                    break;
                }
                match shared
                    .cri
                    .pull_image(&reference, c, Some(sandbox.clone()), left)
                    .await
                {
                    Ok(r) => return Outcome::Pulled(r),
                    Err(e) => last = Some(e),
                }
            }
            Outcome::Failed(last)
        };
        // Only a backstop: with the same length as the calls' own timeout, which of the two
        // ended an unanswered attempt depended on whether a millisecond tick fell between
        // their starts (the message changed under load).
        let pull = async {
            tokio::time::timeout(deadline + PULL_BACKSTOP_GRACE, pull)
                .await
                .unwrap_or(Outcome::TimedOut)
        };
        // Dropping the pull future cancels the RPC, and containerd the pull with it.
        let result = match &shared.stall {
            None => pull.await,
            Some((window, probe)) => tokio::select! {
                r = pull => r,
                idle = stalled(*window, probe) => Outcome::Stalled(idle),
            },
        };
        shared.metrics.pulls_in_flight.dec();
        match result {
            Outcome::Pulled(runtime_ref) => {
                let id = image_id(&shared, &key, &runtime_ref).await;
                finish(&mut st, Ok(id));
                tracing::info!(image = %reference, attempt, secs = attempt_start.elapsed().as_secs_f64(), "pulled");
                send(&st);
                return;
            }
            Outcome::Failed(e) => {
                let retry = e.as_ref().and_then(|e| e.code()) != Some(tonic::Code::InvalidArgument);
                last_err = e.map(|e| e.runtime_message()).unwrap_or_default();
                tracing::warn!(image = %reference, attempt, error = %last_err, "pull attempt failed");
                if !retry {
                    break;
                }
            }
            Outcome::TimedOut => {
                last_err = format!(
                    "pull did not finish within its {}s deadline",
                    deadline.as_secs_f64()
                );
                tracing::warn!(image = %reference, attempt, error = %last_err, "pull attempt timed out");
            }
            Outcome::Stalled(idle) => {
                // the slot is freed below; the retry follows the job's backoff
                last_err = stall::reason(idle, &auth::registry_of(&key.image));
                tracing::warn!(image = %reference, attempt, error = %last_err, "pull attempt cancelled: no progress");
                if attempt < start.params.attempts {
                    st.message = format!("attempt {attempt}: {last_err}; retrying");
                    send(&st);
                }
            }
        }
        drop(_permit);
        drop(_repo);
        if attempt < start.params.attempts {
            shared.metrics.pull_retries.inc();
            tokio::time::sleep(plan::backoff(attempt)).await;
        }
    }
    let mut msg = format!("{last_err} (after {attempts_made} attempt(s))");
    if !notes.is_empty() {
        msg.push_str("; ");
        msg.push_str(&notes.join("; "));
    }
    finish(&mut st, Err(msg));
    send(&st);
}

/// How long past an attempt's deadline the backstop around its runtime calls waits.
const PULL_BACKSTOP_GRACE: Duration = Duration::from_secs(1);

/// How one pull attempt ended.
enum Outcome {
    /// The runtime's image reference.
    Pulled(String),
    /// The runtime's error of the last credentials tried.
    Failed(Option<crate::cri::CriError>),
    /// The per-attempt deadline passed.
    TimedOut,
    /// No progress for this long (see [`stall`]).
    Stalled(Duration),
}

/// Resolves once the content store has shown no progress for `window` (see [`stall`]),
/// with the time it was idle; pending forever while it moves.
async fn stalled(window: Duration, probe: &ProgressProbe) -> Duration {
    let t0 = Instant::now();
    let mut watch = stall::StallWatch::new(window);
    let every = stall::sample_interval(window);
    loop {
        let sample = probe().await;
        if let stall::Verdict::Abort { idle } = watch.observe(t0.elapsed(), sample) {
            return idle;
        }
        tokio::time::sleep(every).await;
    }
}
