//! The daemon scenario: an in-place rollout on the bed's real node, with the node daemon
//! (the build tree's `inplace-daemon`, a host process for the node `inplace-node-0` on
//! the bed's containerd) and the controller each behind a fault proxy of its own, both
//! SIGKILLed and restarted at seeded points.
//!
//! A run creates a CloneSet of 2–3 pods on the real node (the bed's test image v1 from its
//! local registry, a readiness probe, an env entry that reads the template label `tier`),
//! waits until it is settled, takes the baseline of [`InPlaceChecker`], turns both proxies'
//! faults on for 8–14 s while it makes the seed's change (image v1→v2; v1→v2 and `tier`
//! a→b; or only `tier` a→b, which only the daemon can complete: the kubelet does not
//! restart a container for an env that reads metadata), kills the daemon at 1–2 points
//! and the controller at 0–1, in some runs freezes the daemon's API connection (a
//! partition that keeps it open: requests and watch events held, then let through late)
//! for 3 s to past kube's 295 s watch idle bound, turns the faults off once it thawed
//! and waits until every update ended
//! ([`ending::judge`]): done, or, in the runs whose seed chose an image the registry does
//! not have (`daemon-image-missing`), failed with a condition saying why.
//!
//! Only one daemon may serve a node, so these runs go one at a time, after the
//! controller runs, and only when no other `inplace-daemon` runs on the machine.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use inplace_daemon::cri::{CriClient, CriError};
use inplace_proto::cloneset::CloneSet;
use inplace_proto::crr::{ContainerRecreateRequest, CrrPhase};
use inplace_proto::nodeimage::NodeImage;
use inplace_tests::bed::{delete_namespace_and_wait, namespace, suffix};
use inplace_tests::faults::bed_containerd::{BedContainerd, not_serving_yet};
use inplace_tests::faults::cri_proxy::CriProxy;
use inplace_tests::faults::ending::{self, Expected, PodEnding, Verdict};
use inplace_tests::faults::figures::{RunOutcome, STEP_KILL_PREFIX};
use inplace_tests::faults::inplace::{ContainerSnap, InPlaceChecker, InPlaceSnap, UpdateStep};
use inplace_tests::faults::invariants::{Bounds, Checker, PodSnap};
use inplace_tests::faults::proxy::FaultProxy;
use inplace_tests::faults::pull_proxy::PullProxy;
use inplace_tests::faults::records;
use inplace_tests::faults::rng::Rng;
use inplace_tests::faults::runtime_view::{self, CriContainer, Expect, HeldImage, TagStatus};
use k8s_cri::v1::ContainerState;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use super::process::Process;
use super::{Shared, check_records, count_requests, feed, keep_records, wait_converged};

/// The bed's real node (tests/testbed).
pub const NODE: &str = "inplace-node-0";
const CONTAINER: &str = "app";

fn image(version: &str) -> String {
    let var = format!("INPLACE_TEST_IMAGE_{}", version.to_uppercase());
    std::env::var(var).unwrap_or_else(|_| format!("127.0.0.1:5000/inplace-test/app:{version}"))
}

/// A tag of the test image's repository that the bed's registry does not have.
fn missing_image() -> String {
    let v1 = image("v1");
    let repo = v1.rsplit_once(':').map_or(v1.as_str(), |(r, _)| r);
    format!("{repo}:{MISSING_TAG}")
}

const MISSING_TAG: &str = "not-in-the-registry";

/// Of the runs that change the image, those whose new image does not exist.
const MISSING_IMAGE_PER_MILLE: u64 = 400;

/// What the change does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Image,
    ImageAndEnv,
    Env,
    /// No change of the CloneSet: a ContainerRecreateRequest for the first pod's
    /// container (the other pods are outside it).
    Recreate,
    /// No change of the CloneSet: an image pre-downloaded through the node's NodeImage
    /// (as an ImagePullJob has the daemon do), from the registry through a proxy that
    /// cuts pulls halfway; no container is touched.
    PreDownload,
    /// Image v1 → a tag the registry does not have: the update cannot succeed and must
    /// end failed, saying why ([`Expected::Failed`]).
    MissingImage,
}

/// Who is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Daemon,
    Controller,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonPlan {
    replicas: u32,
    change: Change,
    window: Duration,
    /// (offset in the window, downtime, who), in order.
    kills: Vec<(Duration, Duration, Who)>,
    /// The bed's containerd stopped at (offset in the window) for (downtime).
    containerd_restart: Option<(Duration, Duration)>,
    /// The daemon SIGKILLed when the first pod reaches this step of its update (seen on
    /// the unfaulted watch, [`InPlaceChecker::step`]), restarted after (downtime).
    step_kill: Option<(UpdateStep, Duration)>,
    /// The daemon's API proxy frozen at (offset in the window) for (length): its
    /// requests and watch events held, its connections kept open, then all let through.
    api_freeze: Option<(Duration, Duration)>,
}

/// Of the runs, those whose daemon meets a frozen API connection.
const FREEZE_PER_MILLE: u64 = 400;
/// The daemon's bound on an unanswered request ([`inplace_proto::request_timeout`]) and
/// kube's on a silent watch: the freezes are drawn below the first, between the two, and
/// (rarely: each costs minutes) past the second.
const REQUEST_TIMEOUT: Duration = inplace_proto::request_timeout::DEFAULT_REQUEST_TIMEOUT;
const WATCH_IDLE_BOUND: Duration = Duration::from_secs(295);

/// The length of a freeze, from `rng`: 3–25 s (answered late, before the daemon's
/// request timeout), 31–60 s (its requests time out, its watches stay silent), and in
/// one freeze of 20, 296–320 s (its watches pass kube's idle bound too).
fn freeze_length(rng: &mut Rng) -> Duration {
    let secs = |d: Duration| d.as_secs();
    Duration::from_secs(match rng.below(20) {
        0 => rng.range(secs(WATCH_IDLE_BOUND) + 1, secs(WATCH_IDLE_BOUND) + 25),
        1..=6 => rng.range(secs(REQUEST_TIMEOUT) + 1, 60),
        _ => rng.range(3, secs(REQUEST_TIMEOUT) - 5),
    })
}

impl DaemonPlan {
    /// The plan of `seed` and the generators of the controller's and the daemon's API
    /// proxies and of the CRI proxy.
    pub fn of(seed: u64) -> (DaemonPlan, [Rng; 4]) {
        // Another stream than the controller scenarios' plan of the same seed.
        let mut rng = Rng::new(seed ^ 0xdae3_0000_0000_0000);
        let replicas = u32::try_from(rng.range(2, 3)).unwrap_or(2);
        let change = [
            Change::Image,
            Change::ImageAndEnv,
            Change::Env,
            Change::Recreate,
            Change::PreDownload,
        ][usize::try_from(rng.below(5)).unwrap_or(0)];
        let window = Duration::from_millis(rng.range(8000, 14_000));
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(8000);
        let mut kills = Vec::new();
        for _ in 0..rng.range(1, 2) {
            let at = Duration::from_millis(rng.below(window_ms));
            kills.push((at, Duration::from_millis(rng.range(0, 2000)), Who::Daemon));
        }
        if rng.chance(500) {
            let at = Duration::from_millis(rng.below(window_ms));
            kills.push((
                at,
                Duration::from_millis(rng.range(0, 1500)),
                Who::Controller,
            ));
        }
        kills.sort_by_key(|k| k.0);
        let ctl_rng = rng.fork(1);
        let daemon_rng = rng.fork(2);
        // The node faults from streams of their own (the plans above stay as they were).
        let mut node = rng.fork(3);
        let containerd_restart = node.chance(500).then(|| {
            (
                Duration::from_millis(node.below(window_ms)),
                Duration::from_millis(node.range(500, 4000)),
            )
        });
        let step_kill = node.chance(700).then(|| {
            (
                UpdateStep::ALL[usize::try_from(node.below(3)).unwrap_or(0)],
                Duration::from_millis(node.range(0, 2000)),
            )
        });
        let cri_rng = node.fork(4);
        let pull_rng = node.fork(5);
        // Later additions from a stream of their own (the draws above stay as they were).
        let mut later = node.fork(6);
        let change = match change {
            Change::Image | Change::ImageAndEnv if later.chance(MISSING_IMAGE_PER_MILLE) => {
                Change::MissingImage
            }
            c => c,
        };
        let api_freeze = later.chance(FREEZE_PER_MILLE).then(|| {
            (
                Duration::from_millis(later.below(window_ms)),
                freeze_length(&mut later),
            )
        });
        (
            DaemonPlan {
                replicas,
                change,
                window,
                kills,
                containerd_restart,
                step_kill,
                api_freeze,
            },
            [ctl_rng, daemon_rng, cri_rng, pull_rng],
        )
    }

    fn image_changes(&self) -> bool {
        matches!(
            self.change,
            Change::Image | Change::ImageAndEnv | Change::MissingImage
        )
    }

    /// How the run's in-place updates must end (`None`: the run changes no revision).
    fn expected(&self) -> Option<Expected> {
        match self.change {
            Change::Image | Change::ImageAndEnv | Change::Env => Some(Expected::Done),
            Change::MissingImage => Some(Expected::Failed),
            Change::Recreate | Change::PreDownload => None,
        }
    }

    fn env_changes(&self) -> bool {
        matches!(self.change, Change::Env | Change::ImageAndEnv)
    }

    pub fn scenario(&self) -> &'static str {
        match self.change {
            Change::Image => "daemon-image",
            Change::ImageAndEnv => "daemon-image-env",
            Change::Env => "daemon-env",
            Change::Recreate => "daemon-crr",
            Change::PreDownload => "daemon-pull",
            Change::MissingImage => "daemon-image-missing",
        }
    }
}

fn template_container(image: &str) -> serde_json::Value {
    json!({
        "name": CONTAINER,
        "image": image,
        "env": [
            { "name": "PORT", "value": "8080" },
            { "name": "TIER", "valueFrom": { "fieldRef": { "fieldPath": "metadata.labels['tier']" } } },
        ],
        "readinessProbe": { "httpGet": { "path": "/version", "port": 8080 }, "periodSeconds": 1 },
    })
}

fn cloneset(name: &str, replicas: u32) -> Result<CloneSet> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name, "tier": "a" } },
                "spec": {
                    "nodeSelector": { "inplace.testbed/real": "true" },
                    "terminationGracePeriodSeconds": 2,
                    "containers": [template_container(&image("v1"))],
                },
            },
            "updateStrategy": { "type": "InPlaceIfPossible", "maxUnavailable": 1, "maxSurge": 0 },
        },
    }))?)
}

/// A pod outside the update, on the same node and image: containerd must not touch it.
const BYSTANDER: &str = "bystander";

fn bystander() -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": BYSTANDER, "labels": { "app": BYSTANDER } },
        "spec": {
            "nodeSelector": { "inplace.testbed/real": "true" },
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": CONTAINER,
                "image": image("v1"),
                "env": [{ "name": "PORT", "value": "8080" }],
                "readinessProbe": { "httpGet": { "path": "/version", "port": 8080 }, "periodSeconds": 1 },
            }],
        },
    }))?)
}

/// The bed's registry (tests/testbed/lib.sh).
const REGISTRY: &str = "127.0.0.1:5000";
const PULL_TAG: &str = "v3";

/// The pre-download of a run: the bed's test image v3 named by the pull proxy's address,
/// in the node's NodeImage spec.
struct PreDownload {
    /// `127.0.0.1:PORT/inplace-test/app`.
    name: String,
    /// containerd's registry host directory for the proxy (plain HTTP, as the bed's own).
    hosts_dir: std::path::PathBuf,
    socket: std::path::PathBuf,
    /// The run created the NodeImage (else it only added its image to the spec).
    created: Mutex<bool>,
}

impl PreDownload {
    fn new(bed: &std::path::Path, port: u16) -> PreDownload {
        let host = format!("127.0.0.1:{port}");
        PreDownload {
            name: format!("{host}/inplace-test/app"),
            hosts_dir: bed.join("containerd/certs.d").join(&host),
            socket: bed.join("containerd/containerd.sock"),
            created: Mutex::new(false),
        }
    }

    fn reference(&self) -> String {
        format!("{}:{PULL_TAG}", self.name)
    }

    /// Every image of containerd (all names: `name:tag`, `name@digest`, the config id)
    /// whose manifest is v3's, removed with `ctr images rm --sync` (its blobs then
    /// collected, but for the base layer v1 shares): the next pull fetches them again.
    fn remove_v3(&self) -> Result<()> {
        let head = std::process::Command::new("curl")
            .args([
                "-fsSI",
                "-H",
                "Accept: application/vnd.oci.image.manifest.v1+json",
            ])
            .arg(format!(
                "http://{REGISTRY}/v2/inplace-test/app/manifests/{PULL_TAG}"
            ))
            .output()?;
        let head = String::from_utf8_lossy(&head.stdout);
        let digest = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("docker-content-digest")
                    .then(|| v.trim().to_owned())
            })
            .context("the registry named no digest for v3")?;
        let ctr = |args: &[&str]| {
            std::process::Command::new("ctr")
                .arg("-a")
                .arg(&self.socket)
                .args(["-n", "k8s.io", "images"])
                .args(args)
                .stderr(std::process::Stdio::null())
                .output()
        };
        let listed = ctr(&["ls"])?;
        let refs: Vec<String> = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .filter_map(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                (cols.get(2) == Some(&digest.as_str())).then(|| cols[0].to_owned())
            })
            .collect();
        if !refs.is_empty() {
            let mut args = vec!["rm", "--sync"];
            args.extend(refs.iter().map(String::as_str));
            ctr(&args)?;
        }
        Ok(())
    }

    /// Makes the pull a real one (v3 removed from containerd, so its blobs are fetched
    /// through the proxy), then asks the daemon for it.
    async fn begin(&self, node_images: &Api<NodeImage>) -> Result<()> {
        std::fs::create_dir_all(&self.hosts_dir)?;
        let host = self
            .name
            .split('/')
            .next()
            .context("image name without a host")?;
        std::fs::write(
            self.hosts_dir.join("hosts.toml"),
            format!(
                "server = \"http://{host}\"\n\n[host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n"
            ),
        )?;
        self.remove_v3()?;
        let spec = json!({ "images": { &self.name: { "tags": [{
            "tag": PULL_TAG,
            "version": 1,
            "pullPolicy": { "backoffLimit": 30, "timeoutSeconds": 60 },
        }]}}});
        if node_images.get_opt(NODE).await?.is_none() {
            let ni: NodeImage = serde_json::from_value(json!({
                "apiVersion": "apps.kruise.io/v1alpha1",
                "kind": "NodeImage",
                "metadata": { "name": NODE },
                "spec": spec,
            }))?;
            node_images.create(&PostParams::default(), &ni).await?;
            if let Ok(mut c) = self.created.lock() {
                *c = true;
            }
        } else {
            node_images
                .patch(
                    NODE,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({ "spec": spec })),
                )
                .await?;
        }
        Ok(())
    }

    /// Waits until the tag's status is Succeeded or Failed (at most `secs`); the last
    /// status seen.
    async fn wait_ended(
        &self,
        node_images: &Api<NodeImage>,
        secs: u64,
    ) -> Result<Option<TagStatus>> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let st = node_images.get_opt(NODE).await?.and_then(|ni| {
                let tags = ni.status?.image_statuses.get(&self.name)?.tags.clone();
                tags.into_iter()
                    .find(|t| t.tag == PULL_TAG)
                    .map(|t| TagStatus {
                        phase: format!("{:?}", t.phase), // the variants are the API's names
                        image_id: t.image_id,
                        message: t.message,
                    })
            });
            let ended = st
                .as_ref()
                .is_some_and(|t| t.phase == "Succeeded" || t.phase == "Failed");
            if ended || Instant::now() > deadline {
                return Ok(st);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Takes the image out of the NodeImage (or the NodeImage away, if the run made it),
    /// out of containerd, and the proxy's host directory away.
    async fn end(&self, node_images: &Api<NodeImage>) -> Result<()> {
        let created = self.created.lock().map(|c| *c).unwrap_or(false);
        if created {
            node_images
                .delete(NODE, &kube::api::DeleteParams::default())
                .await?;
        } else {
            node_images
                .patch(
                    NODE,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({ "spec": { "images": { &self.name: null } } })),
                )
                .await?;
        }
        self.remove_v3()?;
        std::fs::remove_dir_all(&self.hosts_dir)?;
        Ok(())
    }
}

const RECREATE: &str = "recreate";

fn recreate_request(pod: &str) -> Result<ContainerRecreateRequest> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": { "name": RECREATE },
        "spec": {
            "podName": pod,
            "containers": [{ "name": CONTAINER }],
            "strategy": { "failurePolicy": "Fail", "minStartedSeconds": 1 },
        },
    }))?)
}

/// Waits until every in-place update of CloneSet `name` ended as `expected`
/// ([`ending::judge`]; a change expected done also needs the CloneSet's status settled on
/// `want` pods), at most `secs`, reviving `procs` that died; the UIDs of the pods in the
/// update, or the violations at the bound (or at once, an update ended otherwise than
/// expected).
#[allow(clippy::too_many_arguments)]
async fn wait_ended(
    cs_api: &Api<CloneSet>,
    pods: &Api<Pod>,
    name: &str,
    want: u32,
    expected: Expected,
    secs: u64,
    procs: &mut [&mut Process],
    crashes: &mut Vec<String>,
) -> std::result::Result<Vec<String>, Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        super::revive_all(procs, crashes).map_err(|e| vec![e])?;
        let at_bound = Instant::now() > deadline;
        let read = async {
            let settled = match expected {
                Expected::Done => super::not_converged(cs_api, pods, name, want).await?,
                Expected::Failed => None,
            };
            let revision = cs_api
                .get(name)
                .await?
                .status
                .and_then(|s| s.update_revision)
                .unwrap_or_default();
            let live: Vec<Pod> = pods
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            Ok::<_, anyhow::Error>((settled, revision, live))
        };
        let (settled, revision, live) = match read.await {
            Ok(r) => r,
            Err(e) if at_bound => return Err(vec![format!("reading the pods: {e:#}")]),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let endings: Vec<PodEnding> = live.iter().map(|p| PodEnding::of(p, &revision)).collect();
        let in_update = || {
            live.iter()
                .zip(&endings)
                .filter(|(_, e)| e.in_update)
                .filter_map(|(p, _)| p.metadata.uid.clone())
                .collect()
        };
        match (ending::judge(expected, &endings, at_bound), settled) {
            (Verdict::Ended, None) => return Ok(in_update()),
            (Verdict::Violations(mut v), settled) => {
                if let Some(line) = settled.filter(|_| at_bound) {
                    v.push(format!("not converged: {line}"));
                }
                return Err(v);
            }
            (Verdict::Ended | Verdict::Wait(_), Some(line)) if at_bound => {
                return Err(vec![format!("not converged: {line}")]);
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the request is completed with its container Succeeded (a request that
/// ends otherwise says why in its message).
async fn wait_recreated(crrs: &Api<ContainerRecreateRequest>, secs: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let crr = crrs.get(RECREATE).await?;
        if let Some(st) = &crr.status
            && st.phase == CrrPhase::Completed
        {
            let ok = st
                .container_recreate_states
                .iter()
                .all(|c| c.phase == CrrPhase::Succeeded);
            if ok && !st.container_recreate_states.is_empty() {
                return Ok(());
            }
            bail!(
                "completed, not succeeded: {:?} ({})",
                st.container_recreate_states,
                st.message
            );
        }
        if Instant::now() > deadline {
            bail!("still {:?}", crr.status);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until pod `name` is Ready; its UID.
async fn wait_ready(pods: &Api<Pod>, name: &str, limit: Duration) -> Result<String> {
    let deadline = Instant::now() + limit;
    loop {
        let p = pods.get(name).await?;
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready {
            return p.metadata.uid.context("a pod without a UID");
        }
        if Instant::now() > deadline {
            bail!("pod {name} not Ready within {} s", limit.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// How long the checker's reads of containerd wait for a containerd that is not serving
/// yet ([`not_serving_yet`]): a restart under way ends within 20 s, and its CRI plugin
/// loads within seconds of that.
const RUNTIME_WAIT: Duration = Duration::from_secs(60);

/// `read`, asked again every 500 ms for up to [`RUNTIME_WAIT`] while containerd is not
/// serving yet; any other error, or one past the wait, is returned with `what`.
async fn when_serving<T, F, Fut>(what: &str, mut read: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, CriError>>,
{
    let deadline = Instant::now() + RUNTIME_WAIT;
    loop {
        match read().await {
            Ok(v) => return Ok(v),
            Err(e) if not_serving_yet(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e).context(what.to_owned()),
        }
    }
}

/// The containers containerd holds for the pods of `namespaces` (CRI, every state), each
/// with the time its task started (`ContainerStatus`: `ListContainers` does not say).
async fn containerd_view(cri: &CriClient, namespaces: &[&str]) -> Result<Vec<CriContainer>> {
    let mut out = Vec::new();
    for ns in namespaces {
        let labels = HashMap::from([("io.kubernetes.pod.namespace".to_owned(), (*ns).to_owned())]);
        let listed = when_serving("listing containerd's containers", || {
            cri.list_containers(labels.clone())
        })
        .await?;
        for c in listed {
            let status = match when_serving("containerd's ContainerStatus", || {
                cri.container_status(&c.id)
            })
            .await
            {
                Ok(s) => s,
                // Removed between the list and the status (the kubelet's garbage
                // collection): not part of the view, as if listed a moment later.
                Err(e)
                    if e.downcast_ref::<CriError>().and_then(CriError::code)
                        == Some(tonic::Code::NotFound) =>
                {
                    continue;
                }
                Err(e) => return Err(e),
            };
            let label = |k: &str| c.labels.get(k).cloned().unwrap_or_default();
            let meta = c.metadata.clone().unwrap_or_default();
            out.push(CriContainer {
                id: c.id.clone(),
                pod_uid: label("io.kubernetes.pod.uid"),
                pod_name: label("io.kubernetes.pod.name"),
                name: meta.name,
                attempt: meta.attempt,
                created_at: c.created_at,
                started_at: status.started_at,
                running: c.state() == ContainerState::ContainerRunning,
            });
        }
    }
    Ok(out)
}

/// The watch's checks of a daemon run.
struct Checks {
    pods: Checker,
    inplace: InPlaceChecker,
    /// The update steps reached by some pod (bit `1 << step`).
    steps: tokio::sync::watch::Sender<u8>,
    /// A recreate run: the target pod's uid and its container before the request.
    recreate: Option<(String, ContainerSnap)>,
}

fn step_bit(s: UpdateStep) -> u8 {
    1 << (s as u8)
}

fn pod_event(c: &mut Checks, ev: watcher::Event<Pod>) {
    match ev {
        watcher::Event::Init => c.pods.pods_relisting(),
        watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
            let snap = InPlaceSnap::of(&p, CONTAINER);
            let step = match &c.recreate {
                Some((uid, before)) if *uid == snap.uid => {
                    InPlaceChecker::recreate_step(before, &snap)
                }
                Some(_) => None,
                None => c.inplace.step(&snap),
            };
            if let Some(step) = step {
                c.steps.send_if_modified(|seen| {
                    let new = *seen | step_bit(step);
                    std::mem::replace(seen, new) != new
                });
            }
            c.inplace.observe(&snap, now_ns());
            c.pods.pod_applied(PodSnap::of(&p));
        }
        watcher::Event::Delete(p) => c.pods.pod_deleted(PodSnap::of(&p)),
        watcher::Event::InitDone => c.pods.pods_listed(),
    }
}

/// Other `inplace-daemon` processes on this machine (one could serve the real node).
fn other_daemons() -> Vec<String> {
    std::process::Command::new("pgrep")
        .args(["-a", "-x", "inplace-daemon"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

pub async fn run(shared: &Shared, seed: u64) -> RunOutcome {
    let t0 = Instant::now();
    let (plan, rngs) = DaemonPlan::of(seed);
    let mut out = RunOutcome {
        seed,
        scenario: plan.scenario().to_owned(),
        ..RunOutcome::default()
    };
    let ns = format!("fltd-{seed}-{}", suffix());
    let logs = [
        shared.args.log_dir.join(format!("{ns}-controller.log")),
        shared.args.log_dir.join(format!("{ns}-daemon.log")),
    ];
    if let Err(e) = run_in(shared, seed, &plan, rngs, &ns, &mut out, &logs).await {
        out.error = Some(format!("{e:#}"));
    }
    // The pods on the real node take their grace period (2 s) to go.
    if let Err(e) = delete_namespace_and_wait(&shared.client, &ns, Duration::from_secs(120)).await {
        eprintln!("faults: seed {seed}: namespace {ns} not emptied: {e:#}");
    }
    for log in &logs {
        if out.failed() {
            eprintln!("faults: seed {seed}: log kept: {}", log.display());
        } else {
            let _ = std::fs::remove_file(log);
        }
    }
    out.seconds = t0.elapsed().as_secs_f64();
    out
}

async fn run_in(
    shared: &Shared,
    seed: u64,
    plan: &DaemonPlan,
    rngs: [Rng; 4],
    ns: &str,
    out: &mut RunOutcome,
    logs: &[std::path::PathBuf; 2],
) -> Result<()> {
    let others = other_daemons();
    if !others.is_empty() {
        bail!("another inplace-daemon runs on this machine (the product installed?): {others:?}");
    }
    let client = &shared.client;
    namespace(client, ns).await.context("namespace")?;
    let [ctl_rng, daemon_rng, cri_rng, pull_rng] = rngs;
    let pull_proxy = PullProxy::start(REGISTRY, pull_rng).await?;
    let pull = PreDownload::new(&shared.args.bed_dir, pull_proxy.port());
    let bystander_ns = format!("{ns}-by");
    namespace(client, &bystander_ns)
        .await
        .context("the bystander's namespace")?;
    let bed_socket = shared.args.bed_dir.join("containerd/containerd.sock");
    // Shared with the restart task; the lock makes the final check wait for a restart under
    // way (never two containerds).
    let containerd = Arc::new(Mutex::new(BedContainerd::find(&shared.args.bed_dir)?));
    let cri_proxy = CriProxy::start(
        &shared.args.log_dir.join(format!("{ns}-cri.sock")),
        &bed_socket,
        cri_rng,
    )?;
    // containerd's own view, on its socket (not through the proxy).
    let cri = CriClient::new(&bed_socket, Duration::from_secs(10))?;
    let ctl_proxy = FaultProxy::start(client.clone(), super::rates(&shared.args), ctl_rng).await?;
    let daemon_proxy =
        FaultProxy::start(client.clone(), super::rates(&shared.args), daemon_rng).await?;
    let ctl_kubeconfig = shared.args.log_dir.join(format!("{ns}-kubeconfig"));
    std::fs::write(&ctl_kubeconfig, ctl_proxy.kubeconfig(ns))?;
    let daemon_kubeconfig = shared.args.log_dir.join(format!("{ns}-daemon-kubeconfig"));
    std::fs::write(&daemon_kubeconfig, daemon_proxy.kubeconfig("default"))?;
    let replicas = plan.replicas as usize;
    let bounds = Bounds {
        max_pods: replicas,
        min_available: None,
    };
    let checks = Arc::new(Mutex::new(Checks {
        pods: Checker::new(bounds),
        inplace: InPlaceChecker::default(),
        steps: tokio::sync::watch::Sender::new(0),
        recreate: None,
    }));
    let mut steps_seen = checks
        .lock()
        .map_err(|_| anyhow::anyhow!("checks lock poisoned"))?
        .steps
        .subscribe();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let watch = feed(pods.clone(), checks.clone(), pod_event);
    let mut ctl_kills = Vec::new();
    let mut daemon_kills = Vec::new();
    let mut converged = false;
    // The containerd restart, while it is under way.
    let mut restart = None;
    // The freeze of the daemon's API connection, while it is under way.
    let mut freeze = None;
    let result = async {
        let cri_endpoint = cri_proxy.socket().to_path_buf();
        let mut daemon = Process::start(
            &shared.daemon_bin,
            [
                "--node-name",
                NODE,
                "--addr",
                "127.0.0.1:0",
                "--poll-interval-ms",
                "200",
                "--cri-endpoint",
            ]
            .into_iter()
            .map(OsString::from)
            .chain([cri_endpoint.into_os_string()])
            .collect(),
            vec![
                (
                    "KUBECONFIG".into(),
                    daemon_kubeconfig.clone().into_os_string(),
                ),
                ("RUST_LOG".into(), shared.args.controller_log.clone().into()),
            ],
            &logs[1],
        )?;
        let mut ctl = Process::controller(
            &shared.controller_bin,
            &ctl_kubeconfig,
            ns,
            &logs[0],
            &shared.args.controller_log,
        )?;
        let name = "fltd";
        let cs_api: Api<CloneSet> = Api::namespaced(client.clone(), ns);
        cs_api
            .create(&PostParams::default(), &cloneset(name, plan.replicas)?)
            .await
            .context("creating the CloneSet")?;
        let bystanders: Api<Pod> = Api::namespaced(client.clone(), &bystander_ns);
        bystanders
            .create(&PostParams::default(), &bystander()?)
            .await
            .context("creating the bystander pod")?;
        wait_converged(
            &cs_api,
            &pods,
            name,
            plan.replicas,
            shared.args.setup_secs,
            &mut [&mut ctl, &mut daemon],
            &mut out.crashes,
        )
        .await
        .map_err(|e| anyhow::anyhow!("setup (no faults): {e}"))?;
        let bystander_uid = wait_ready(&bystanders, BYSTANDER, Duration::from_secs(60))
            .await
            .context("setup (no faults): the bystander pod")?;
        let mut before: Vec<InPlaceSnap> = pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(|p| InPlaceSnap::of(p, CONTAINER))
            .collect();
        before.sort_by(|a, b| a.name.cmp(&b.name));
        // A recreate run's target: the first pod.
        let target = (plan.change == Change::Recreate)
            .then(|| before.first().cloned())
            .flatten();
        if let Ok(mut c) = checks.lock() {
            c.recreate = target
                .as_ref()
                .and_then(|t| Some((t.uid.clone(), t.container.clone()?)));
            // Also for a CRR or a pull: no revision changes, so no completion is judged,
            // but the pods at the end must be these ones.
            c.inplace.baseline(&before, plan.image_changes());
            c.pods.set_bounds(Bounds {
                min_available: Some(replicas - 1),
                ..bounds
            });
        }

        let mut expect: BTreeMap<String, Expect> = before
            .iter()
            .map(|p| match &target {
                // A failing update's pods are known once it ended (the rest stay untouched).
                _ if matches!(plan.change, Change::PreDownload | Change::MissingImage) => {
                    (p.uid.clone(), Expect::Untouched)
                }
                Some(t) if t.uid != p.uid => (p.uid.clone(), Expect::Untouched),
                _ => (p.uid.clone(), Expect::RestartedOnce),
            })
            .collect();
        expect.insert(bystander_uid, Expect::Untouched);
        let view_before = containerd_view(&cri, &[ns, &bystander_ns]).await?;

        let changed_at = now_ns();
        ctl_proxy.set_faults(true);
        daemon_proxy.set_faults(true);
        cri_proxy.set_faults(true);
        pull_proxy.set_faults(true);
        let started = Instant::now();
        freeze = plan
            .api_freeze
            .map(|(at, length)| daemon_proxy.freeze_later(at, length));
        restart = plan.containerd_restart.map(|(at, down)| {
            let containerd = containerd.clone();
            tokio::spawn(async move {
                tokio::time::sleep(at.saturating_sub(started.elapsed())).await;
                tokio::task::spawn_blocking(move || {
                    let mut c = containerd
                        .lock()
                        .map_err(|_| anyhow::anyhow!("containerd lock poisoned"))?;
                    let stopped = c.stop();
                    std::thread::sleep(down);
                    let started = if c.running() { Ok(()) } else { c.start() };
                    stopped.and(started).map_err(anyhow::Error::from)
                })
                .await
            })
        });
        let crrs: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), ns);
        let node_images: Api<NodeImage> = Api::all(client.clone());
        if plan.change == Change::PreDownload {
            pull.begin(&node_images).await?;
            if let Ok(c) = checks.lock() {
                c.steps.send_modify(|seen| *seen |= step_bit(UpdateStep::Begun));
            }
        } else if let Some(t) = &target {
            crrs.create(&PostParams::default(), &recreate_request(&t.name)?)
                .await
                .context("creating the ContainerRecreateRequest")?;
            // Its first step, the daemon taking it up, follows at once.
            if let Ok(c) = checks.lock() {
                c.steps.send_modify(|seen| *seen |= step_bit(UpdateStep::Begun));
            }
        } else {
            let image = match plan.change {
                Change::MissingImage => missing_image(),
                _ => image(if plan.image_changes() { "v2" } else { "v1" }),
            };
            let tier = if plan.env_changes() { "b" } else { "a" };
            let patch = json!({ "spec": { "template": {
                "metadata": { "labels": { "tier": tier } },
                "spec": { "containers": [template_container(&image)] },
            }}});
            cs_api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .context("changing the CloneSet")?;
        }
        // The timed kills, and the step kill when its step is seen (if ever: a step the
        // watch does not show, e.g. no event between the old container and the new one,
        // is counted as not reached).
        let mut timed = plan.kills.iter().peekable();
        let mut step_kill = plan.step_kill;
        loop {
            let next = timed.peek().map_or(plan.window, |k| k.0);
            let step_seen = async {
                match step_kill {
                    Some((step, _)) => steps_seen
                        .wait_for(|seen| seen & step_bit(step) != 0)
                        .await
                        .map(|_| ()),
                    None => std::future::pending().await,
                }
            };
            let (who, down) = tokio::select! {
                () = tokio::time::sleep(next.saturating_sub(started.elapsed())) => {
                    match timed.next() {
                        Some((_, down, who)) => (*who, *down),
                        None => break,
                    }
                }
                seen = step_seen => {
                    let Some((step, down)) = step_kill.take() else { continue };
                    if seen.is_ok() {
                        *out.node_faults.entry(format!("{STEP_KILL_PREFIX}{}", step.name())).or_default() += 1;
                    }
                    (Who::Daemon, down)
                }
            };
            let (p, proxy, kills) = match who {
                Who::Daemon => (&mut daemon, &daemon_proxy, &mut daemon_kills),
                Who::Controller => (&mut ctl, &ctl_proxy, &mut ctl_kills),
            };
            out.crashes.extend(p.revive()?);
            p.kill();
            kills.push(proxy.now_ms());
            tokio::time::sleep(down).await;
            p.spawn()?;
        }
        if let Some((step, _)) = step_kill {
            eprintln!(
                "faults: seed {seed}: step {} not seen in the window: no kill there",
                step.name()
            );
        }
        if let Some(restart) = restart.take() {
            restart.await??.context("restarting the bed's containerd")?;
            *out.node_faults
                .entry("containerd-restart".into())
                .or_default() += 1;
        }
        // The faults stop once the freeze thawed (the bound on the endings runs from
        // then).
        if let Some(f) = freeze.take() {
            f.await.context("the freeze of the daemon's API connection")?;
            *out.node_faults.entry("api-freeze".into()).or_default() += 1;
            eprintln!(
                "faults: seed {seed}: the daemon's API connection frozen {:?}: {} requests held",
                plan.api_freeze.map(|f| f.1).unwrap_or_default(),
                daemon_proxy.held_requests()
            );
        }
        ctl_proxy.set_faults(false);
        daemon_proxy.set_faults(false);
        cri_proxy.set_faults(false);
        pull_proxy.set_faults(false);

        let secs = shared.args.converge_secs;
        let procs = &mut [&mut ctl, &mut daemon];
        match plan.expected() {
            None => match wait_converged(&cs_api, &pods, name, plan.replicas, secs, procs, &mut out.crashes).await {
                Ok(()) => converged = true,
                Err(e) => out.violations.push(format!(
                    "not converged {secs} s after the faults stopped: {e}"
                )),
            },
            Some(expected) => match wait_ended(&cs_api, &pods, name, plan.replicas, expected, secs, procs, &mut out.crashes).await {
                Ok(in_update) => {
                    converged = true;
                    if expected == Expected::Failed {
                        for uid in in_update {
                            expect.insert(uid, Expect::StoppedNotReplaced);
                        }
                    }
                }
                Err(found) => out.violations.extend(found.into_iter().map(|v| {
                    format!("{v} (bound: {secs} s after the faults stopped)")
                })),
            },
        }
        if converged && plan.change == Change::PreDownload {
            let status = pull
                .wait_ended(&node_images, shared.args.converge_secs)
                .await?;
            let reference = pull.reference();
            let held = when_serving("containerd's ImageStatus", || cri.image_status(&reference))
                .await?
                .map(|i| HeldImage {
                    id: i.id,
                    repo_digests: i.repo_digests,
                });
            out.violations.extend(runtime_view::check_pulled(
                &pull.name,
                PULL_TAG,
                status.as_ref(),
                held.as_ref(),
            ));
        }
        let mut recreated = true;
        if converged
            && target.is_some()
            && let Err(e) = wait_recreated(&crrs, shared.args.converge_secs).await
        {
            recreated = false;
            out.violations.push(format!(
                "the ContainerRecreateRequest did not succeed within {} s after the faults stopped: {e:#}",
                shared.args.converge_secs
            ));
        }
        if converged && recreated {
            let view_after = containerd_view(&cri, &[ns, &bystander_ns]).await?;
            out.violations.extend(runtime_view::check(
                &view_before,
                &view_after,
                &expect,
                CONTAINER,
                changed_at,
            ));
            let claims = checks
                .lock()
                .map(|c| c.inplace.runtime_claims())
                .unwrap_or_default();
            out.violations.extend(runtime_view::check_claims(
                &view_before,
                &view_after,
                &claims,
                CONTAINER,
            ));
        }
        let after: Vec<InPlaceSnap> = pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(|p| InPlaceSnap::of(p, CONTAINER))
            .collect();
        Ok::<Vec<InPlaceSnap>, anyhow::Error>(after)
    }
    .await;
    watch.abort();
    *out.node_faults.entry("pull-cut".into()).or_default() += pull_proxy.cuts();
    if plan.change == Change::PreDownload
        && let Err(e) = pull.end(&Api::all(client.clone())).await
    {
        eprintln!("faults: seed {seed}: pre-download not cleaned up: {e:#}");
    }
    for (f, n) in cri_proxy.counts() {
        *out.node_faults.entry(f.name().into()).or_default() += n;
    }
    drop(cri_proxy);
    // The bed is left with its containerd running, whatever happened.
    // A run that ended early: a restart not begun is called off (one under way holds the
    // lock until containerd is back).
    if let Some(r) = restart {
        r.abort();
    }
    if let Some(f) = freeze {
        f.abort();
    }
    daemon_proxy.thaw();
    let restored = tokio::task::spawn_blocking(move || {
        let mut c = containerd
            .lock()
            .map_err(|_| anyhow::anyhow!("containerd lock poisoned"))?;
        if c.running() {
            Ok(())
        } else {
            c.start().map_err(anyhow::Error::from)
        }
    })
    .await;
    if let Err(e) = restored.map_err(anyhow::Error::from).and_then(|r| r) {
        out.error
            .get_or_insert(format!("the bed's containerd not started again: {e:#}"));
    }
    if let Err(e) = delete_namespace_and_wait(client, &bystander_ns, Duration::from_secs(120)).await
    {
        eprintln!("faults: seed {seed}: namespace {bystander_ns} not emptied: {e:#}");
    }
    if let Ok(mut c) = checks.lock() {
        let mut found = c.pods.finish();
        if let Ok(after) = &result {
            found.extend(c.inplace.finish(after));
        }
        out.violations.splice(0..0, found);
        out.completions_checked = c.inplace.completions_checked() as u64;
        out.peak_pods = c.pods.peak_pods;
        out.least_available = c.pods.least_available;
        out.most_down_by_node = c.pods.most_down_by_node;
    }
    out.max_pods = replicas;
    out.min_available = replicas - 1;
    out.kills = ctl_kills.len() as u64;
    out.daemon_kills = daemon_kills.len() as u64;
    let ctl_records = ctl_proxy.records();
    // In place: the controller creates the pods once and deletes none.
    check_records(
        &ctl_records,
        &ctl_kills,
        plan.replicas,
        replicas,
        converged,
        out,
    );
    let daemon_records = daemon_proxy.records();
    count_requests(&daemon_records, out);
    let (after, applied_after) = records::after_kills(&daemon_records, &daemon_kills);
    out.record_violations.extend(after);
    out.applied_after_kill += applied_after;
    out.record_violations
        .extend(records::daemon_pod_writes(&daemon_records));
    if out.failed() {
        keep_records(&shared.args.log_dir, ns, "requests", &ctl_proxy, seed);
        keep_records(
            &shared.args.log_dir,
            ns,
            "daemon-requests",
            &daemon_proxy,
            seed,
        );
    }
    let _ = std::fs::remove_file(&ctl_kubeconfig);
    let _ = std::fs::remove_file(&daemon_kubeconfig);
    result.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_plan_and_some_seeds_an_image_that_does_not_exist() {
        for seed in 1..200 {
            assert_eq!(
                DaemonPlan::of(seed).0,
                DaemonPlan::of(seed).0,
                "seed {seed}"
            );
        }
        let plans: Vec<DaemonPlan> = (1..=200).map(|s| DaemonPlan::of(s).0).collect();
        let missing: Vec<&DaemonPlan> = plans
            .iter()
            .filter(|p| p.change == Change::MissingImage)
            .collect();
        // Of the image changes (2 of the 5 changes), 40 %: about 16 % of the runs.
        assert!((16..=50).contains(&missing.len()), "{}", missing.len());
        for p in &missing {
            assert_eq!(p.expected(), Some(Expected::Failed));
            assert_eq!(p.scenario(), "daemon-image-missing");
            assert!(p.image_changes() && !p.env_changes());
        }
        // Every other change that moves the revision is expected done; a CRR or a pull
        // moves none.
        for p in plans.iter().filter(|p| p.change != Change::MissingImage) {
            let want = match p.change {
                Change::Recreate | Change::PreDownload => None,
                _ => Some(Expected::Done),
            };
            assert_eq!(p.expected(), want, "{p:?}");
        }
        assert!(
            plans.iter().any(|p| p.change == Change::Image),
            "a good image change is still drawn"
        );
        assert!(missing_image().ends_with(":not-in-the-registry"));
        assert_eq!(
            missing_image().rsplit_once(':').map(|(r, _)| r.to_owned()),
            image("v1").rsplit_once(':').map(|(r, _)| r.to_owned())
        );
    }

    #[test]
    fn some_seeds_freeze_the_daemons_api_connection_within_the_window() {
        let plans: Vec<DaemonPlan> = (1..=400).map(|s| DaemonPlan::of(s).0).collect();
        let freezes: Vec<(Duration, Duration, Duration)> = plans
            .iter()
            .filter_map(|p| p.api_freeze.map(|(at, len)| (p.window, at, len)))
            .collect();
        assert!((120..=200).contains(&freezes.len()), "{}", freezes.len());
        for (window, at, len) in &freezes {
            assert!(
                at < window,
                "a freeze begins in the window: {at:?} of {window:?}"
            );
            assert!(
                *len >= Duration::from_secs(3)
                    && *len <= WATCH_IDLE_BOUND + Duration::from_secs(25),
                "{len:?}"
            );
        }
        // Every class is drawn: answered late, past the request timeout, past the
        // watch's idle bound (rarely).
        let short = freezes.iter().filter(|f| f.2 < REQUEST_TIMEOUT).count();
        let timed_out = freezes
            .iter()
            .filter(|f| f.2 > REQUEST_TIMEOUT && f.2 < WATCH_IDLE_BOUND)
            .count();
        let idle = freezes.iter().filter(|f| f.2 > WATCH_IDLE_BOUND).count();
        assert!(
            short > timed_out && timed_out > idle && idle > 0,
            "{short} {timed_out} {idle}"
        );
        assert!(idle * 10 < freezes.len(), "{idle} of {}", freezes.len());
        // A freeze is drawn with every change, the failing one too.
        for change in [
            Change::Image,
            Change::Env,
            Change::Recreate,
            Change::PreDownload,
            Change::MissingImage,
        ] {
            assert!(
                plans
                    .iter()
                    .any(|p| p.change == change && p.api_freeze.is_some()),
                "{change:?}"
            );
        }
    }

    #[test]
    fn freeze_lengths_stay_in_their_classes() {
        let mut rng = Rng::new(5);
        for _ in 0..2000 {
            let len = freeze_length(&mut rng).as_secs();
            assert!(
                (3..=25).contains(&len) || (31..=60).contains(&len) || (296..=320).contains(&len),
                "{len}"
            );
        }
    }
}
