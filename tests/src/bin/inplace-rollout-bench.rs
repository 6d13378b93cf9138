//! inplace-rollout-bench: the controller's figures on the test bed's simulated nodes.
//!
//! * `rollout`: a CloneSet of `--pods` pods (InPlaceIfPossible, `--max-unavailable`) on
//!   `--nodes` simulated nodes changes its image; total rollout time against the
//!   theoretical minimum (batches × per-pod in-place latency). Target ≤ 1.2×.
//! * `memory`: `--fleet-pods` pods in `--fleet-clonesets` CloneSets on `--fleet-nodes`
//!   nodes; the controller's RSS (VmRSS, VmHWM) and CPU (utime + stime). Target ≤ 64 MiB.
//! * `startup`: with that fleet, the controller is stopped, one CloneSet is scaled by +1,
//!   the controller is started again: time until its first write (a new pod, a CloneSet
//!   status) is seen through a watch. Target ≤ 5 s.
//! * `fleet`: `memory` then `startup` on one fleet (what `all` runs after `rollout`).
//!
//! * `versus-deployment`: on the same `--nodes` simulated nodes, a CloneSet in-place image
//!   rollout of `--pods` pods, then a Deployment rolling update (kube-controller-manager)
//!   of as many pods with the same template, `maxUnavailable` and per-pod delays
//!   (`maxSurge: 0`, and the simulator's start delay = its update delay); prints
//!   `versus-deployment: in-place X s, deployment Y s, speed-up R` and the API writes of
//!   each (the API server's `apiserver_request_total`, and pod writes by writer from a
//!   watch). Not part of `all`.
//!
//! * `predownload`: `--predownload-pods` pods on as many simulated nodes, each pull of an
//!   image a node does not hold taking `--pull-delay`, maxUnavailable
//!   `--predownload-max-unavailable`; the same CloneSet rolls out a new image three times,
//!   one after another in one run: with image pre-download off, with pre-download pulling
//!   by node name (`--predownload-update-order=false`, how this controller pulled before),
//!   and with pulls in update order (the default; OpenKruise too sorts the pods by the
//!   CloneSet's update order). Prints `predownload: off X s, by node name Y s,
//!   update-ordered Z s` and per leg the pods that found their image on the node and the
//!   nodes pre-download pulled on. Not part of `all`.
//!
//! * `per-pod`: on the bed's real kubelet (`INPLACE_NODE_NAME`, images
//!   `INPLACE_TEST_IMAGE_V1`/`_V2`), one pod's image changed in place (patch → the new
//!   container Ready) against the same pod deleted and recreated with the other image
//!   (delete → the replacement Ready), `--per-pod-rounds` of each, alternating; prints
//!   the medians and their ratio. Not part of `all`; needs neither the controller nor the
//!   simulator.
//!
//! It measures and prints; it exits 0 whether or not the targets are met, and non-zero
//! only when a measurement could not be made (the controller died, a timeout).
//!
//! ```text
//! cargo build --release -p inplace-controller --bin inplace-controller
//! cargo build --release -p inplace-tests --bin inplace-nodesim --bin inplace-rollout-bench
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   $CARGO_TARGET_DIR/release/inplace-rollout-bench --scenario all
//! # quick: --pods 200 --fleet-pods 1000 --fleet-nodes 20
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use futures::{StreamExt, TryStreamExt};
use inplace_proto::cloneset::CloneSet;
use inplace_tests::bed::{
    Sim, client, cloneset_settled as settled, cloneset_status_line as status_line,
    delete_namespace_and_wait, namespace, pod_condition, pod_ready, suffix,
};
use inplace_tests::benchcalc::{self, Summary, Usage};
use inplace_tests::nodesim::duration::parse_flag;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::json;

#[path = "inplace-rollout-bench/predownload.rs"]
mod predownload;

const TARGET_RATIO: f64 = 1.2;
const IMAGE_OLD: &str = "bench.invalid/inplace/app:v1";
const IMAGE_NEW: &str = "bench.invalid/inplace/app:v2";
const REVISION_LABEL: &str = "controller-revision-hash";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Rollout,
    Memory,
    Startup,
    /// `memory` then `startup` on one fleet (one creation of the pods for both figures).
    Fleet,
    /// The in-place rollout against a Deployment rolling update on the same nodes.
    VersusDeployment,
    /// One pod on the real kubelet: in-place image change against delete-and-recreate.
    PerPod,
    /// Rollouts whose image pulls dominate: pre-download off, by node name, in update order.
    Predownload,
    All,
}

/// The inplace controller's rollout, memory and start-up figures on simulated nodes.
#[derive(Debug, Parser)]
#[command(name = "inplace-rollout-bench", version)]
struct Args {
    /// What to measure (memory and startup share one fleet of pods).
    #[arg(long, value_enum, default_value = "all")]
    scenario: Scenario,
    /// Pods of the rollout CloneSet.
    #[arg(long, default_value_t = 1000)]
    pods: u32,
    /// Simulated nodes of the rollout scenario.
    #[arg(long, default_value_t = 50)]
    nodes: usize,
    /// updateStrategy.maxUnavailable of the rollout CloneSet.
    #[arg(long, default_value = "20%")]
    max_unavailable: String,
    /// Simulator: from a changed image to the new container running.
    #[arg(long, default_value = "2s")]
    update_delay: String,
    /// Simulator: from a container running to it being ready.
    #[arg(long, default_value = "1s")]
    ready_delay: String,
    /// Pods cached for the memory and startup scenarios.
    #[arg(long, default_value_t = 10_000)]
    fleet_pods: u32,
    /// Simulated nodes of the memory and startup scenarios (110 pods each at most).
    #[arg(long, default_value_t = 150)]
    fleet_nodes: usize,
    /// CloneSets the fleet is split over.
    #[arg(long, default_value_t = 10)]
    fleet_clonesets: u32,
    /// Seconds of idle sampling of the controller's RSS and CPU once the fleet is Ready.
    #[arg(long, default_value_t = 30)]
    idle_secs: u64,
    /// Longest wait for any one phase (creation of the fleet included), seconds.
    #[arg(long, default_value_t = 1200)]
    timeout_secs: u64,
    /// The controller binary (default: `inplace-controller` beside this program).
    #[arg(
        long,
        env = "INPLACE_CONTROLLER_BIN",
        default_value_os_t = beside_me("inplace-controller")
    )]
    controller_bin: PathBuf,
    /// The simulator binary (default: `inplace-nodesim` beside this program).
    #[arg(
        long,
        env = "INPLACE_NODESIM_BIN",
        default_value_os_t = beside_me("inplace-nodesim")
    )]
    nodesim_bin: PathBuf,
    /// More flags for the controller (repeatable), e.g. `--controller-arg=--workers=4`.
    #[arg(long = "controller-arg", allow_hyphen_values = true)]
    controller_args: Vec<String>,
    /// `per-pod`: measurements of each kind (in place, delete-and-recreate).
    #[arg(long, default_value_t = 10)]
    per_pod_rounds: usize,
    /// `predownload`: pods of the CloneSet, one simulated node each.
    #[arg(long, default_value_t = 40)]
    predownload_pods: u32,
    /// `predownload`: updateStrategy.maxUnavailable.
    #[arg(long, default_value_t = 4)]
    predownload_max_unavailable: u32,
    /// `predownload`: apps.kruise.io/image-predownload-parallelism of the CloneSet.
    #[arg(long, default_value_t = 4)]
    predownload_parallelism: u32,
    /// `predownload`: the simulator's pull time of an image a node does not hold.
    #[arg(long, default_value = "4s")]
    pull_delay: String,
    /// RUST_LOG of the controller.
    #[arg(long, default_value = "info")]
    controller_log: String,
}

/// The figures, printed as they come and again together at the end.
#[derive(Debug, Default)]
struct Report {
    lines: Vec<String>,
}

impl Report {
    fn add(&mut self, line: impl Into<String>) {
        let line = line.into();
        println!("{line}");
        self.lines.push(line);
    }
}

fn progress(msg: impl AsRef<str>) {
    eprintln!("bench: {}", msg.as_ref());
}

// ---------------------------------------------------------------------------------------
// The controller child process.

#[derive(Debug)]
struct Controller {
    child: Option<Child>,
    pid: u32,
    log: PathBuf,
    started: Instant,
}

impl Controller {
    fn start(args: &Args, ns: &str, tag: &str) -> Result<Controller> {
        Self::start_with(args, ns, tag, &[])
    }

    /// [`Controller::start`] with more flags after `--controller-arg`s.
    fn start_with(args: &Args, ns: &str, tag: &str, extra: &[&str]) -> Result<Controller> {
        let log = std::env::temp_dir().join(format!("inplace-rollout-bench-{ns}-{tag}.log"));
        let file = std::fs::File::create(&log).with_context(|| format!("{}", log.display()))?;
        let kubeconfig = inplace_tests::bed::kubeconfig_path()?;
        let started = Instant::now();
        let child = Command::new(&args.controller_bin)
            .args(["--kubeconfig", &kubeconfig, "--namespace", ns])
            .args(["--metrics-addr", "127.0.0.1:0", "--leader-elect", "false"])
            .args(&args.controller_args)
            .args(extra)
            .env("RUST_LOG", &args.controller_log)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", args.controller_bin.display()))?;
        let pid = child.id();
        progress(format!(
            "controller pid {pid} for namespace {ns}, log {}",
            log.display()
        ));
        Ok(Controller {
            child: Some(child),
            pid,
            log,
            started,
        })
    }

    fn usage(&self) -> Option<Usage> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        Usage::parse(&status, &stat)
    }

    /// Fails (with the log's tail) when the process has exited.
    fn check_alive(&mut self) -> Result<()> {
        let Some(child) = self.child.as_mut() else {
            bail!("the controller is not running");
        };
        if let Some(status) = child.try_wait()? {
            self.child = None;
            bail!(
                "the controller exited ({status}); log {}:\n{}",
                self.log.display(),
                self.tail(40)
            );
        }
        Ok(())
    }

    fn tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Warnings and errors of the log (at most `n`, the last ones).
    fn problems(&self, n: usize) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let found: Vec<String> = text
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR ") || l.contains("panicked"))
            .map(str::to_owned)
            .collect();
        found[found.len().saturating_sub(n)..].to_vec()
    }

    /// SIGTERM and wait (SIGKILL after 30 s).
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        progress("controller ignored SIGTERM for 30 s: killing it");
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------------------
// CloneSets.

fn cloneset(name: &str, sim: &Sim, replicas: u32, image: &str, max_unav: &str) -> Result<CloneSet> {
    let max_unav = match max_unav.trim().parse::<i64>() {
        Ok(n) => json!(n),
        Err(_) => json!(max_unav.trim()),
    };
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": {
                    "nodeSelector": sim.selector(),
                    "tolerations": sim.tolerations(),
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{ "name": "app", "image": image }],
                },
            },
            "updateStrategy": { "type": "InPlaceIfPossible", "maxUnavailable": max_unav },
        },
    }))?)
}

/// What [`wait_settled`] records of a fleet while it waits: the controller's sampled RSS
/// peak and, per CloneSet (in the order of its `names`), when its status first counted a
/// pod and when it settled, from the start of the wait.
#[derive(Debug, Default)]
struct FleetWatch {
    rss_peak_mib: f64,
    first_pod: Vec<Option<Duration>>,
    settled: Vec<Option<Duration>>,
}

impl FleetWatch {
    fn saw(&mut self, i: usize, has_pods: bool, settled: bool, at: Duration) {
        for (list, seen) in [
            (&mut self.first_pod, has_pods),
            (&mut self.settled, settled),
        ] {
            if list.len() <= i {
                list.resize(i + 1, None);
            }
            if seen && list[i].is_none() {
                list[i] = Some(at);
            }
        }
    }

    /// `first..last s (last: name)` of `times`, or what is missing.
    fn spread(times: &[Option<Duration>], names: &[(String, u32)]) -> String {
        let seen: Vec<(Duration, &str)> = times
            .iter()
            .zip(names)
            .filter_map(|(t, (name, _))| t.map(|t| (t, name.as_str())))
            .collect();
        let first = seen.iter().map(|(t, _)| *t).min();
        match (first, seen.iter().max_by_key(|(t, _)| *t)) {
            (Some(first), Some((last, name))) if seen.len() == names.len() => {
                format!("{:.1}-{:.1} s (last: {name})", secs(first), secs(*last))
            }
            _ => format!("{} of {} only", seen.len(), names.len()),
        }
    }
}

/// Polls the CloneSets until all are [`settled`]; returns the time it took.
async fn wait_settled(
    api: &Api<CloneSet>,
    names: &[(String, u32)],
    ctrl: &mut Controller,
    timeout: Duration,
    every: Duration,
    mut fleet: Option<&mut FleetWatch>,
) -> Result<Duration> {
    let t0 = Instant::now();
    let mut last_print = Instant::now();
    loop {
        ctrl.check_alive()?;
        if let Some(u) = ctrl.usage()
            && let Some(fleet) = fleet.as_deref_mut()
        {
            fleet.rss_peak_mib = fleet.rss_peak_mib.max(u.rss_mib());
        }
        let mut all = true;
        let (mut ready, mut total, mut lines) = (0i64, 0i64, Vec::new());
        for (i, (name, want)) in names.iter().enumerate() {
            match api.get_opt(name).await {
                Ok(Some(cs)) => {
                    let done = settled(&cs, *want);
                    all &= done;
                    let replicas = cs.status.as_ref().map_or(0, |s| s.replicas);
                    if let Some(fleet) = fleet.as_deref_mut() {
                        fleet.saw(i, replicas > 0, done, t0.elapsed());
                    }
                    if let Some(s) = cs.status.as_ref() {
                        ready += i64::from(s.updated_ready_replicas);
                        total += i64::from(s.replicas);
                    }
                    if lines.len() < 2 {
                        lines.push(format!("{name}: {}", status_line(&cs)));
                    }
                }
                Ok(None) => bail!("CloneSet {name} disappeared"),
                Err(e) => {
                    all = false;
                    lines.push(format!("{name}: {e}"));
                }
            }
        }
        if all {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > timeout {
            bail!(
                "timed out after {timeout:?}: {ready} updated+ready of {total} pods; {}\ncontroller log tail:\n{}",
                lines.join("; "),
                ctrl.tail(30)
            );
        }
        if last_print.elapsed() > Duration::from_secs(20) {
            last_print = Instant::now();
            let started = fleet.as_deref().map_or(String::new(), |f| {
                format!(
                    "; CloneSets with pods {} of {}",
                    f.first_pod.iter().flatten().count(),
                    names.len()
                )
            });
            progress(format!(
                "{:>6.1}s: {total} pods, {ready} updated and ready{started}; {}",
                t0.elapsed().as_secs_f64(),
                lines.join("; ")
            ));
        }
        tokio::time::sleep(every).await;
    }
}

// ---------------------------------------------------------------------------------------
// Rollout: per-pod timeline from a pod watch.

#[derive(Debug, Default, Clone)]
struct PodRec {
    name: String,
    spec_new: Option<Instant>,
    gate_false: Option<Instant>,
    container_ready_new: Option<Instant>,
    ready_new: Option<Instant>,
    is_new: bool,
    ready: bool,
    deleting: bool,
    revision: String,
}

#[derive(Debug, Default)]
struct Tracker {
    synced: bool,
    pods: HashMap<String, PodRec>,
    /// Only counted once `counting` is set (from the patch on).
    counting: bool,
    max_unavailable_seen: usize,
    desired: usize,
    deleted_during: usize,
}

fn app_container_status(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "app")
}

fn spec_image(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "app")?
        .image
        .as_deref()
}

impl Tracker {
    fn observe(&mut self, pod: &Pod, now: Instant) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let rec = self.pods.entry(uid).or_default();
        rec.name = pod.metadata.name.clone().unwrap_or_default();
        rec.is_new = spec_image(pod) == Some(IMAGE_NEW);
        rec.ready = pod_ready(pod);
        rec.deleting = pod.metadata.deletion_timestamp.is_some();
        rec.revision = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(REVISION_LABEL))
            .cloned()
            .unwrap_or_default();
        if rec.is_new && rec.spec_new.is_none() {
            rec.spec_new = Some(now);
        }
        if rec.gate_false.is_none()
            && pod_condition(pod, "InPlaceUpdateReady").as_deref() == Some("False")
        {
            rec.gate_false = Some(now);
        }
        let cs = app_container_status(pod);
        if rec.is_new
            && rec.container_ready_new.is_none()
            && cs.is_some_and(|c| c.ready && c.image == IMAGE_NEW)
        {
            rec.container_ready_new = Some(now);
        }
        if rec.is_new && rec.ready && rec.ready_new.is_none() && rec.container_ready_new.is_some() {
            rec.ready_new = Some(now);
        }
        self.count();
    }

    fn forget(&mut self, pod: &Pod) {
        if let Some(uid) = pod.metadata.uid.as_ref()
            && self.pods.remove(uid).is_some()
            && self.counting
        {
            self.deleted_during += 1;
        }
        self.count();
    }

    fn count(&mut self) {
        if !self.counting {
            return;
        }
        let live = self.pods.values().filter(|p| !p.deleting).count();
        let ready = self
            .pods
            .values()
            .filter(|p| !p.deleting && p.ready)
            .count();
        let unavailable = self.desired.saturating_sub(ready.min(live));
        self.max_unavailable_seen = self.max_unavailable_seen.max(unavailable);
    }

    /// Pods on the new image, Ready, labelled with `revision`.
    fn done(&self, revision: &str) -> usize {
        self.pods
            .values()
            .filter(|p| !p.deleting && p.is_new && p.ready && p.revision == revision)
            .count()
    }
}

fn spawn_pod_tracker(api: Api<Pod>, tracker: Arc<Mutex<Tracker>>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(ev) = stream.next().await {
            let now = Instant::now();
            let Ok(mut t) = tracker.lock() else {
                return;
            };
            match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => t.observe(&p, now),
                Ok(watcher::Event::Delete(p)) => t.forget(&p),
                Ok(watcher::Event::InitDone) => t.synced = true,
                Ok(watcher::Event::Init) => {}
                Err(e) => progress(format!("pod watch: {e}")),
            }
        }
    })
}

/// CPU seconds the bed's kube-apiserver has used so far (user + system), from its pid file
/// under `$INPLACE_TESTBED_DIR` (default `/var/tmp/inplace-testbed`); None when unreadable.
fn apiserver_cpu_s() -> Option<f64> {
    let dir =
        std::env::var("INPLACE_TESTBED_DIR").unwrap_or_else(|_| "/var/tmp/inplace-testbed".into());
    let pid = std::fs::read_to_string(format!("{dir}/pids/kube-apiserver.pid")).ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).ok()?;
    benchcalc::cpu_seconds(&stat)
}

/// The machine's load averages (1, 5, 15 min), printed with the resource figures: the
/// machine is shared, so a figure counts only next to the load it was measured under.
fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".to_owned(),
        |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn millis(input: &str) -> Result<Duration> {
    let ms = parse_flag(input).map_err(|e| anyhow::anyhow!("{input:?}: {e}"))?;
    Ok(Duration::from_millis(u64::try_from(ms.max(0)).unwrap_or(0)))
}

async fn rollout(args: &Args, client: &Client, report: &mut Report) -> Result<()> {
    let group = format!("ipb-r-{}", suffix());
    let update_delay = millis(&args.update_delay)?;
    let ready_delay = millis(&args.ready_delay)?;
    let p = args.pods;
    progress(format!(
        "rollout: {p} pods on {} simulated nodes ({group}-*), update-delay {:?}, ready-delay {:?}",
        args.nodes, update_delay, ready_delay
    ));
    let mut sim = Sim::start(
        &args.nodesim_bin,
        &group,
        args.nodes,
        &[
            "--update-delay",
            &format!("{}ms", update_delay.as_millis()),
            "--ready-delay",
            &format!("{}ms", ready_delay.as_millis()),
            "--max-grace",
            "1s",
            "--stats-interval",
            "30s",
        ],
    )?;
    let result = rollout_in(
        args,
        client,
        &sim,
        &group,
        update_delay,
        ready_delay,
        report,
    )
    .await;
    cleanup(client, &group, &mut sim).await;
    result
}

#[allow(clippy::too_many_lines)]
async fn rollout_in(
    args: &Args,
    client: &Client,
    sim: &Sim,
    ns: &str,
    update_delay: Duration,
    ready_delay: Duration,
    report: &mut Report,
) -> Result<()> {
    let p = args.pods;
    sim.wait_nodes_ready(client, Duration::from_secs(300))
        .await?;
    namespace(client, ns).await?;
    let mut ctrl = Controller::start(args, ns, "rollout")?;
    let api: Api<CloneSet> = Api::namespaced(client.clone(), ns);
    let cs = cloneset("bench", sim, p, IMAGE_OLD, &args.max_unavailable)?;
    api.create(&PostParams::default(), &cs).await?;
    let timeout = Duration::from_secs(args.timeout_secs);
    let names = [("bench".to_owned(), p)];
    let created = wait_settled(
        &api,
        &names,
        &mut ctrl,
        timeout,
        Duration::from_millis(500),
        None,
    )
    .await
    .context("creating the rollout CloneSet's pods")?;
    progress(format!("{p} pods Ready in {:.1}s", secs(created)));

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let tracker = Arc::new(Mutex::new(Tracker {
        desired: p as usize,
        ..Tracker::default()
    }));
    let task = spawn_pod_tracker(pods, tracker.clone());
    let synced = async {
        loop {
            if tracker.lock().map(|t| t.synced).unwrap_or(true) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), synced)
        .await
        .context("the pod watch did not sync")?;
    // Let the pods settle (the last Ready patches) before the clock starts.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mu = benchcalc::max_unavailable(p, &args.max_unavailable).map_err(anyhow::Error::msg)?;
    let cpu0 = ctrl.usage().map_or(0.0, |u| u.cpu_s);
    let apiserver_cpu0 = apiserver_cpu_s();
    if let Ok(mut t) = tracker.lock() {
        t.counting = true;
        t.count();
    }
    let patch = json!({ "spec": { "template": { "spec": {
        "containers": [{ "name": "app", "image": IMAGE_NEW }] } } } });
    let t0 = Instant::now();
    api.patch("bench", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;

    let mut status_done: Option<Duration> = None;
    let mut last_print = Instant::now();
    let mut rss_peak = 0.0f64;
    loop {
        ctrl.check_alive()?;
        if let Some(u) = ctrl.usage() {
            rss_peak = rss_peak.max(u.rss_mib());
        }
        let cs = api.get("bench").await?;
        let last_status = status_line(&cs);
        let rev = cs
            .status
            .as_ref()
            .and_then(|s| s.update_revision.clone())
            .unwrap_or_default();
        if status_done.is_none() && settled(&cs, p) {
            status_done = Some(t0.elapsed());
        }
        let pods_done = tracker.lock().map(|t| t.done(&rev)).unwrap_or(0);
        if status_done.is_some() && pods_done == p as usize {
            break;
        }
        if t0.elapsed() > Duration::from_secs(args.timeout_secs) {
            bail!(
                "rollout did not finish in {}s: {last_status}; {pods_done}/{p} pods new and Ready\ncontroller log tail:\n{}",
                args.timeout_secs,
                ctrl.tail(30)
            );
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            last_print = Instant::now();
            progress(format!(
                "{:>6.1}s: {last_status}; {pods_done} pods new and Ready",
                secs(t0.elapsed())
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let both_done = t0.elapsed();
    let total = status_done.unwrap_or(both_done);
    let cpu = ctrl.usage().map_or(0.0, |u| u.cpu_s) - cpu0;
    let apiserver_cpu = apiserver_cpu0.zip(apiserver_cpu_s()).map(|(a, b)| b - a);
    task.abort();

    let (recs, max_unav_seen, deleted) = {
        let t = tracker
            .lock()
            .map_err(|_| anyhow::anyhow!("tracker lock poisoned"))?;
        (
            t.pods.values().cloned().collect::<Vec<_>>(),
            t.max_unavailable_seen,
            t.deleted_during,
        )
    };
    let since = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
        (Some(a), Some(b)) if b >= a => Some(secs(b - a)),
        _ => None,
    };
    let sim_lat: Vec<f64> = recs
        .iter()
        .filter_map(|r| since(r.spec_new, r.container_ready_new))
        .collect();
    let pod_lat: Vec<f64> = recs
        .iter()
        .filter_map(|r| since(r.spec_new, r.ready_new))
        .collect();
    let gate_to_spec: Vec<f64> = recs
        .iter()
        .filter_map(|r| since(r.gate_false, r.spec_new))
        .collect();
    let finished: Vec<f64> = recs
        .iter()
        .filter_map(|r| r.ready_new.map(|t| secs(t.saturating_duration_since(t0))))
        .collect();
    let started: Vec<f64> = recs
        .iter()
        .filter_map(|r| r.spec_new.map(|t| secs(t.saturating_duration_since(t0))))
        .collect();

    let batches = benchcalc::batches(p, mu);
    let configured = update_delay + ready_delay;
    let min_cfg = benchcalc::theoretical_min(batches, configured);
    let sim_sum = Summary::of(sim_lat);
    let measured = sim_sum.map(|s| Duration::from_secs_f64(s.p50));
    let min_meas = measured.map(|m| benchcalc::theoretical_min(batches, m));
    let r_cfg = benchcalc::ratio(total, min_cfg);

    report.add(format!(
        "rollout: {p} pods on {} nodes, InPlaceIfPossible, maxUnavailable {} = {mu} pods -> {batches} batches",
        args.nodes, args.max_unavailable
    ));
    report.add(format!(
        "rollout: total {:.2}s (patch -> status updatedReadyReplicas=={p}, all on the update revision; pods seen done at {:.2}s)",
        secs(total),
        secs(both_done)
    ));
    report.add(format!(
        "rollout: per-pod latency configured (--update-delay {} + --ready-delay {}) = {:.2}s",
        args.update_delay,
        args.ready_delay,
        secs(configured)
    ));
    if let Some(s) = sim_sum {
        report.add(format!(
            "rollout: per-pod latency measured, spec patch -> container ready on new image (simulator): {}",
            s.line()
        ));
    }
    if let Some(s) = Summary::of(pod_lat) {
        report.add(format!(
            "rollout: per-pod latency measured, spec patch -> pod Ready (incl. controller's InPlaceUpdateReady=True): {}",
            s.line()
        ));
    }
    if let Some(s) = Summary::of(gate_to_spec) {
        report.add(format!(
            "rollout: InPlaceUpdateReady=False -> spec patch (controller): {}",
            s.line()
        ));
    }
    if let Some(s) = Summary::of(started) {
        report.add(format!(
            "rollout: spec patches seen after the CloneSet patch: first {:.2}s, last {:.2}s",
            s.min, s.max
        ));
    }
    let ms = benchcalc::milestones(&finished, mu as usize);
    let mut line = String::from("rollout: pods done by");
    for (n, t) in &ms {
        let _ = write!(line, " {n}@{t:.2}s");
    }
    report.add(line);
    report.add(format!(
        "rollout: theoretical minimum {batches} x {:.2}s = {:.2}s (configured) -> ratio {r_cfg:.2}x, target <= {TARGET_RATIO}x: {}",
        secs(configured),
        secs(min_cfg),
        benchcalc::verdict(r_cfg, TARGET_RATIO)
    ));
    if let (Some(m), Some(min)) = (measured, min_meas) {
        let r = benchcalc::ratio(total, min);
        report.add(format!(
            "rollout: theoretical minimum {batches} x {:.2}s = {:.2}s (measured p50) -> ratio {r:.2}x, target <= {TARGET_RATIO}x: {}",
            secs(m),
            secs(min),
            benchcalc::verdict(r, TARGET_RATIO)
        ));
    }
    report.add(format!(
        "rollout: max unavailable seen {max_unav_seen} (budget {mu}); pods deleted during the rollout {deleted}; controller CPU {cpu:.2}s, RSS peak {rss_peak:.1} MiB"
    ));
    match apiserver_cpu {
        Some(a) => report.add(format!(
            "rollout: kube-apiserver CPU {a:.2}s over the rollout's {:.2}s ({:.0}% of a core; {} cores); load avg {}",
            secs(both_done),
            100.0 * benchcalc::cpu_share(a, both_done),
            std::thread::available_parallelism().map_or(0, usize::from),
            load_avg()
        )),
        None => report.add(
            "rollout: kube-apiserver CPU unknown (no readable $INPLACE_TESTBED_DIR/pids/kube-apiserver.pid)"
                .to_owned(),
        ),
    }
    for l in ctrl.problems(5) {
        report.add(format!("rollout: controller log: {l}"));
    }
    ctrl.stop();
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Versus a Deployment: the same rollout done by kube-controller-manager.

/// The API server's write counters (`apiserver_request_total`), summed by verb/resource.
async fn write_counters(
    client: &Client,
) -> Result<std::collections::BTreeMap<benchcalc::RequestKey, f64>> {
    let req = kube::core::Request::new("")
        .get("metrics", &kube::api::GetParams::default())
        .context("building the /metrics request")?;
    let text = client
        .request_text(req)
        .await
        .context("reading the API server's /metrics")?;
    Ok(benchcalc::write_requests(&text))
}

/// Pod writes by writer, from a pod watch: only counted while `counting`.
#[derive(Debug, Default)]
struct WriteWatch {
    synced: bool,
    counting: bool,
    facts: HashMap<String, benchcalc::PodFacts>,
    writes: benchcalc::PodWrites,
    last_event: Option<Instant>,
}

impl WriteWatch {
    fn apply(&mut self, pod: &Pod, init: bool, now: Instant) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let new = benchcalc::PodFacts::of(pod);
        let old = self.facts.insert(uid, new.clone());
        if !init && self.counting {
            self.writes
                .add(benchcalc::pod_writer(old.as_ref(), Some(&new)));
        }
        self.last_event = Some(now);
    }

    fn delete(&mut self, pod: &Pod, now: Instant) {
        let Some(uid) = pod.metadata.uid.as_ref() else {
            return;
        };
        let old = self.facts.remove(uid);
        if self.counting {
            self.writes.add(benchcalc::pod_writer(old.as_ref(), None));
        }
        self.last_event = Some(now);
    }
}

fn spawn_write_watch(
    api: Api<Pod>,
    app: &str,
    w: Arc<Mutex<WriteWatch>>,
) -> tokio::task::JoinHandle<()> {
    let cfg = watcher::Config::default().labels(&format!("app={app}"));
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, cfg).default_backoff());
        while let Some(ev) = stream.next().await {
            let now = Instant::now();
            let Ok(mut w) = w.lock() else {
                return;
            };
            match ev {
                Ok(watcher::Event::Apply(p)) => w.apply(&p, false, now),
                Ok(watcher::Event::InitApply(p)) => w.apply(&p, true, now),
                Ok(watcher::Event::Delete(p)) => w.delete(&p, now),
                Ok(watcher::Event::InitDone) => w.synced = true,
                Ok(watcher::Event::Init) => {}
                Err(e) => progress(format!("pod watch: {e}")),
            }
        }
    })
}

/// Waits until the watch has synced and then seen no pod write for `quiet`.
async fn wait_quiet(w: &Arc<Mutex<WriteWatch>>, quiet: Duration, timeout: Duration) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let calm = w.lock().map_or(true, |w| {
            w.synced && w.last_event.is_none_or(|t| t.elapsed() >= quiet)
        });
        if calm {
            return Ok(());
        }
        if t0.elapsed() > timeout {
            bail!("pods kept changing for {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The pod template both workloads share (labels `app=<app>`).
fn versus_template(app: &str, sim: &Sim, image: &str) -> serde_json::Value {
    json!({
        "metadata": { "labels": { "app": app } },
        "spec": {
            "nodeSelector": sim.selector(),
            "tolerations": sim.tolerations(),
            "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "app", "image": image }],
        },
    })
}

fn deployment(
    name: &str,
    sim: &Sim,
    replicas: u32,
    image: &str,
    max_unav: &str,
) -> Result<Deployment> {
    let max_unav = match max_unav.trim().parse::<i64>() {
        Ok(n) => json!(n),
        Err(_) => json!(max_unav.trim()),
    };
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": versus_template(name, sim, image),
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": { "maxUnavailable": max_unav, "maxSurge": 0 },
            },
        },
    }))?)
}

/// All `want` pods are on the newest ReplicaSet and available, and the status is current.
fn deployment_done(d: &Deployment, want: u32) -> bool {
    let want = i32::try_from(want).unwrap_or(i32::MAX);
    let Some(s) = d.status.as_ref() else {
        return false;
    };
    s.observed_generation == d.metadata.generation
        && s.replicas == Some(want)
        && s.updated_replicas == Some(want)
        && s.ready_replicas == Some(want)
        && s.available_replicas == Some(want)
        && s.unavailable_replicas.unwrap_or(0) == 0
}

fn deployment_line(d: &Deployment) -> String {
    d.status.as_ref().map_or_else(
        || "no status".to_owned(),
        |s| {
            format!(
                "replicas={:?} updated={:?} ready={:?} available={:?} gen={:?}/{:?}",
                s.replicas,
                s.updated_replicas,
                s.ready_replicas,
                s.available_replicas,
                s.observed_generation,
                d.metadata.generation
            )
        },
    )
}

/// One rollout's measurement.
struct Leg {
    took: Duration,
    requests: std::collections::BTreeMap<benchcalc::RequestKey, u64>,
    writes: benchcalc::PodWrites,
}

async fn versus(args: &Args, client: &Client, report: &mut Report) -> Result<()> {
    let group = format!("ipb-v-{}", suffix());
    let update_delay = millis(&args.update_delay)?;
    let ready_delay = millis(&args.ready_delay)?;
    progress(format!(
        "versus-deployment: {} pods on {} simulated nodes ({group}-*), start/update delay {update_delay:?}, ready delay {ready_delay:?}",
        args.pods, args.nodes
    ));
    let delay = format!("{}ms", update_delay.as_millis());
    let ready = format!("{}ms", ready_delay.as_millis());
    let mut sim = Sim::start(
        &args.nodesim_bin,
        &group,
        args.nodes,
        &[
            "--start-delay",
            &delay,
            "--update-delay",
            &delay,
            "--ready-delay",
            &ready,
            "--max-grace",
            "1s",
            "--stats-interval",
            "30s",
        ],
    )?;
    let result = versus_in(args, client, &sim, &group, report).await;
    cleanup(client, &group, &mut sim).await;
    result
}

/// Counts the pods of `app` until none is left.
async fn wait_pods_gone(pods: &Api<Pod>, app: &str, timeout: Duration) -> Result<()> {
    let lp = ListParams::default().labels(&format!("app={app}"));
    let t0 = Instant::now();
    loop {
        let n = pods.list_metadata(&lp).await?.items.len();
        if n == 0 {
            return Ok(());
        }
        if t0.elapsed() > timeout {
            bail!("{n} pods of {app} still there after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One poll of a leg's rollout.
enum Polled {
    Done,
    /// Not yet; the workload's status, for progress and the timeout.
    Waiting(String),
}

/// One leg of `versus-deployment`, the same for the CloneSet and the Deployment: once
/// the pod writes of `app` are quiet, counts them and the API write requests from `start`
/// (the image patch) until `poll` says the rollout is done (polled every 100 ms) and the
/// trailing writes are quiet again. The time is from `start` to the poll that saw it done.
async fn run_leg(
    client: &Client,
    pods: &Api<Pod>,
    app: &str,
    name: &str,
    timeout: Duration,
    start: impl AsyncFnOnce() -> Result<()>,
    mut poll: impl AsyncFnMut() -> Result<Polled>,
) -> Result<Leg> {
    let quiet = Duration::from_secs(2);
    let ww = Arc::new(Mutex::new(WriteWatch::default()));
    let task = spawn_write_watch(pods.clone(), app, ww.clone());
    wait_quiet(&ww, quiet, Duration::from_secs(120)).await?;
    let before = write_counters(client).await?;
    if let Ok(mut w) = ww.lock() {
        w.counting = true;
    }
    let t0 = Instant::now();
    start().await?;
    let mut last_print = Instant::now();
    let took = loop {
        let line = match poll().await? {
            Polled::Done => break t0.elapsed(),
            Polled::Waiting(line) => line,
        };
        if t0.elapsed() > timeout {
            bail!("{name} rollout did not finish in {timeout:?}: {line}");
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            last_print = Instant::now();
            progress(format!("{name} {:>6.1}s: {line}", secs(t0.elapsed())));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Writes that trail the status (the last pods' lifecycle, the old pods' final
    // deletes) belong to the rollout too.
    wait_quiet(&ww, quiet, Duration::from_secs(120)).await?;
    let after = write_counters(client).await?;
    task.abort();
    let writes = ww.lock().map(|w| w.writes.clone()).unwrap_or_default();
    Ok(Leg {
        took,
        requests: benchcalc::request_delta(&before, &after),
        writes,
    })
}

#[allow(clippy::too_many_lines)]
async fn versus_in(
    args: &Args,
    client: &Client,
    sim: &Sim,
    ns: &str,
    report: &mut Report,
) -> Result<()> {
    let p = args.pods;
    let timeout = Duration::from_secs(args.timeout_secs);
    let mu = benchcalc::max_unavailable(p, &args.max_unavailable).map_err(anyhow::Error::msg)?;
    sim.wait_nodes_ready(client, Duration::from_secs(300))
        .await?;
    namespace(client, ns).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let image_patch = json!({ "spec": { "template": { "spec": {
        "containers": [{ "name": "app", "image": IMAGE_NEW }] } } } });

    // 1. The CloneSet, in place.
    let mut ctrl = Controller::start(args, ns, "versus")?;
    let csapi: Api<CloneSet> = Api::namespaced(client.clone(), ns);
    let app = "inplace";
    let mut cs = cloneset(app, sim, p, IMAGE_OLD, &args.max_unavailable)?;
    // The same template as the Deployment's.
    cs.spec.template = serde_json::from_value(versus_template(app, sim, IMAGE_OLD))?;
    csapi.create(&PostParams::default(), &cs).await?;
    let created = wait_settled(
        &csapi,
        &[(app.to_owned(), p)],
        &mut ctrl,
        timeout,
        Duration::from_millis(500),
        None,
    )
    .await
    .context("creating the CloneSet's pods")?;
    progress(format!("in-place: {p} pods Ready in {:.1}s", secs(created)));
    let inplace = run_leg(
        client,
        &pods,
        app,
        "in-place",
        timeout,
        async || {
            csapi
                .patch(app, &PatchParams::default(), &Patch::Merge(&image_patch))
                .await?;
            Ok(())
        },
        async || {
            ctrl.check_alive()?;
            let cs = csapi.get(app).await?;
            Ok(if settled(&cs, p) {
                Polled::Done
            } else {
                Polled::Waiting(status_line(&cs))
            })
        },
    )
    .await;
    let inplace = match inplace {
        Ok(leg) => leg,
        Err(e) => bail!("{e:#}\ncontroller log tail:\n{}", ctrl.tail(30)),
    };
    let cpu = ctrl.usage().map_or(0.0, |u| u.cpu_s);
    for l in ctrl.problems(5) {
        report.add(format!("versus-deployment: controller log: {l}"));
    }
    // Out of the way of the second leg: the CloneSet's pods deleted, the controller stopped.
    csapi
        .delete(app, &kube::api::DeleteParams::default())
        .await?;
    wait_pods_gone(&pods, app, timeout).await?;
    ctrl.stop();
    progress(format!(
        "in-place: {:.2}s; controller CPU {cpu:.1}s in all",
        secs(inplace.took)
    ));

    // 2. The Deployment, by kube-controller-manager.
    let dapi: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let app = "deploy";
    dapi.create(
        &PostParams::default(),
        &deployment(app, sim, p, IMAGE_OLD, &args.max_unavailable)?,
    )
    .await?;
    let t_create = Instant::now();
    loop {
        let d = dapi.get(app).await?;
        if deployment_done(&d, p) {
            break;
        }
        if t_create.elapsed() > timeout {
            bail!(
                "the Deployment's pods were not available in {timeout:?}: {}",
                deployment_line(&d)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    progress(format!(
        "deployment: {p} pods available in {:.1}s",
        secs(t_create.elapsed())
    ));
    let deploy = run_leg(
        client,
        &pods,
        app,
        "deployment",
        timeout,
        async || {
            dapi.patch(app, &PatchParams::default(), &Patch::Merge(&image_patch))
                .await?;
            Ok(())
        },
        async || {
            let d = dapi.get(app).await?;
            Ok(if deployment_done(&d, p) {
                Polled::Done
            } else {
                Polled::Waiting(deployment_line(&d))
            })
        },
    )
    .await?;

    let batches = benchcalc::batches(p, mu);
    report.add(format!(
        "versus-deployment: {p} pods on {} simulated nodes, maxUnavailable {} = {mu} pods ({batches} batches), Deployment maxSurge 0; simulator: start delay = update delay {}, ready delay {}",
        args.nodes, args.max_unavailable, args.update_delay, args.ready_delay
    ));
    report.add(benchcalc::versus_line(inplace.took, deploy.took));
    for (name, leg, workload) in [
        ("in-place", &inplace, "inplace controller"),
        ("deployment", &deploy, "kube-controller-manager"),
    ] {
        use benchcalc::PodWriter as W;
        let w = &leg.writes;
        report.add(format!(
            "versus-deployment: {name} pod writes seen by a watch: {} ({:.2}/pod): {workload} {} ({:.2}/pod), scheduler {}, simulated kubelet {} ({:.2}/pod), unattributed {}",
            w.total(),
            w.per_pod(None, p),
            w.get(W::Workload),
            w.per_pod(Some(W::Workload), p),
            w.get(W::Scheduler),
            w.get(W::Kubelet),
            w.per_pod(Some(W::Kubelet), p),
            w.get(W::Unknown)
        ));
        let pod_reqs = benchcalc::requests_on(&leg.requests, "pods");
        let all: u64 = leg.requests.values().sum();
        report.add(format!(
            "versus-deployment: {name} API write requests (apiserver_request_total, all clients): {all} in all, {pod_reqs} on pods ({:.2}/pod): {}",
            pod_reqs as f64 / f64::from(p.max(1)),
            benchcalc::delta_line(&leg.requests)
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Memory and startup: a fleet of pods.

async fn fleet(args: &Args, client: &Client, report: &mut Report) -> Result<()> {
    let group = format!("ipb-f-{}", suffix());
    if args.fleet_nodes * 110 < args.fleet_pods as usize {
        bail!(
            "{} nodes hold at most {} pods: raise --fleet-nodes",
            args.fleet_nodes,
            args.fleet_nodes * 110
        );
    }
    progress(format!(
        "fleet: {} pods in {} CloneSets on {} simulated nodes ({group}-*)",
        args.fleet_pods, args.fleet_clonesets, args.fleet_nodes
    ));
    let mut sim = Sim::start(
        &args.nodesim_bin,
        &group,
        args.fleet_nodes,
        &[
            "--max-grace",
            "1s",
            "--stats-interval",
            "30s",
            "--max-inflight",
            "64",
        ],
    )?;
    let result = fleet_in(args, client, &sim, &group, report).await;
    cleanup(client, &group, &mut sim).await;
    result
}

#[allow(clippy::too_many_lines)]
async fn fleet_in(
    args: &Args,
    client: &Client,
    sim: &Sim,
    ns: &str,
    report: &mut Report,
) -> Result<()> {
    let n = args.fleet_pods;
    let goal = benchcalc::fleet_targets(n);
    sim.wait_nodes_ready(client, Duration::from_secs(300))
        .await?;
    namespace(client, ns).await?;
    let mut ctrl = Controller::start(args, ns, "fleet")?;
    let api: Api<CloneSet> = Api::namespaced(client.clone(), ns);
    let names: Vec<(String, u32)> = benchcalc::split(n, args.fleet_clonesets)
        .into_iter()
        .enumerate()
        .map(|(i, r)| (format!("fleet-{i}"), r))
        .collect();
    let t0 = Instant::now();
    for (name, r) in &names {
        api.create(
            &PostParams::default(),
            &cloneset(name, sim, *r, IMAGE_OLD, "20%")?,
        )
        .await?;
    }
    let mut watch = FleetWatch::default();
    wait_settled(
        &api,
        &names,
        &mut ctrl,
        Duration::from_secs(args.timeout_secs),
        Duration::from_secs(3),
        Some(&mut watch),
    )
    .await
    .context("creating the fleet")?;
    let peak = watch.rss_peak_mib;
    let took = t0.elapsed();
    let at_ready = ctrl.usage();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods.list(&ListParams::default()).await?;
    let ready = list.items.iter().filter(|p| pod_ready(p)).count();
    report.add(format!(
        "fleet: {n} pods in {} CloneSets on {} nodes created and Ready in {:.1}s ({:.0} pods/s); pods listed {}, Ready {ready}",
        names.len(),
        args.fleet_nodes,
        secs(took),
        f64::from(n) / secs(took).max(1e-3),
        list.items.len()
    ));
    drop(list);
    // With the CloneSets taken in turn, they get their first pods close together and fill
    // up side by side; a CloneSet starved by the others shows as a late first pod.
    report.add(format!(
        "fleet: per CloneSet, first pod after {}; all its pods Ready after {}",
        FleetWatch::spread(&watch.first_pod, &names),
        FleetWatch::spread(&watch.settled, &names)
    ));
    if let Some(u) = at_ready {
        report.add(format!(
            "fleet: controller CPU while creating {:.1}s ({:.0}% of a core); RSS peak sampled {peak:.1} MiB, VmHWM {:.1} MiB; load avg {}",
            u.cpu_s,
            100.0 * benchcalc::cpu_share(u.cpu_s, took),
            u.hwm_mib(),
            load_avg()
        ));
    }

    let want_memory = matches!(
        args.scenario,
        Scenario::Memory | Scenario::Fleet | Scenario::All
    );
    let want_startup = matches!(
        args.scenario,
        Scenario::Startup | Scenario::Fleet | Scenario::All
    );
    if want_memory {
        let (rss, cpu_idle, end) =
            idle_sample(&mut ctrl, Duration::from_secs(args.idle_secs)).await?;
        let wall = Duration::from_secs(args.idle_secs);
        report.add(format!(
            "memory: controller with {n} pods cached, idle {}s: RSS {:.1} MiB (min {:.1} / max {:.1} sampled), VmHWM {:.1} MiB, CPU total {:.1}s, idle CPU {:.1}% of a core",
            args.idle_secs,
            end.rss_mib(),
            rss.0,
            rss.1,
            end.hwm_mib(),
            end.cpu_s,
            100.0 * benchcalc::cpu_share(cpu_idle, wall)
        ));
        report.add(format!(
            "memory: RSS {:.1} MiB, target <= {} MiB: {} (peak VmHWM {:.1} MiB: {}); load avg {}",
            end.rss_mib(),
            goal.rss_mib,
            benchcalc::verdict(end.rss_mib(), goal.rss_mib),
            end.hwm_mib(),
            benchcalc::verdict(end.hwm_mib(), goal.rss_mib),
            load_avg()
        ));
    }
    for l in ctrl.problems(5) {
        report.add(format!("fleet: controller log: {l}"));
    }
    if want_startup {
        ctrl.stop();
        startup(args, client, ns, &names, report).await?;
    }
    Ok(())
}

/// Samples RSS every second for `wall`: ((min, max) MiB, CPU seconds spent, last usage).
async fn idle_sample(ctrl: &mut Controller, wall: Duration) -> Result<((f64, f64), f64, Usage)> {
    let first = ctrl
        .usage()
        .context("reading the controller's /proc files")?;
    let t0 = Instant::now();
    let (mut lo, mut hi) = (first.rss_mib(), first.rss_mib());
    let mut last = first;
    while t0.elapsed() < wall {
        tokio::time::sleep(Duration::from_secs(1)).await;
        ctrl.check_alive()?;
        if let Some(u) = ctrl.usage() {
            lo = lo.min(u.rss_mib());
            hi = hi.max(u.rss_mib());
            last = u;
        }
    }
    Ok(((lo, hi), last.cpu_s - first.cpu_s, last))
}

/// The first event of `kind` ("ADDED", "MODIFIED") from a watch at `rv`.
fn first_event<K>(
    api: Api<K>,
    rv: String,
    kind: &'static str,
) -> tokio::task::JoinHandle<Option<(Instant, String)>>
where
    K: kube::Resource
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    tokio::spawn(async move {
        let mut rv = rv;
        loop {
            let stream = match api.watch(&WatchParams::default().timeout(290), &rv).await {
                Ok(s) => s,
                Err(e) => {
                    progress(format!("watch: {e}"));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let mut stream = std::pin::pin!(stream.into_stream());
            while let Some(ev) = stream.next().await {
                let now = Instant::now();
                let (what, obj) = match ev {
                    Ok(WatchEvent::Added(o)) => ("ADDED", o),
                    Ok(WatchEvent::Modified(o)) => ("MODIFIED", o),
                    Ok(WatchEvent::Deleted(o)) => ("DELETED", o),
                    Ok(WatchEvent::Bookmark(_)) => continue,
                    Ok(WatchEvent::Error(e)) => {
                        progress(format!("watch error: {e:?}"));
                        return None;
                    }
                    Err(e) => {
                        progress(format!("watch: {e}"));
                        break;
                    }
                };
                if let Some(v) = obj.meta().resource_version.clone() {
                    rv = v;
                }
                if what == kind {
                    return Some((now, obj.meta().name.clone().unwrap_or_default()));
                }
            }
        }
    })
}

async fn startup(
    args: &Args,
    client: &Client,
    ns: &str,
    names: &[(String, u32)],
    report: &mut Report,
) -> Result<()> {
    let n = args.fleet_pods;
    let goal = benchcalc::fleet_targets(n);
    let api: Api<CloneSet> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let Some((target, r)) = names.first().cloned() else {
        bail!("no CloneSet");
    };
    // The controller is stopped: ask for one more pod.
    api.patch(
        &target,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "replicas": r + 1 } })),
    )
    .await?;
    let rv_of = |l: Option<String>| l.context("list without a resourceVersion");
    let pod_rv = rv_of(
        pods.list_metadata(&ListParams::default().limit(1))
            .await?
            .metadata
            .resource_version,
    )?;
    let cs_rv = rv_of(
        api.list_metadata(&ListParams::default().limit(1))
            .await?
            .metadata
            .resource_version,
    )?;
    let mut first_pod = first_event(pods.clone(), pod_rv, "ADDED");
    let mut first_cs = first_event(api.clone(), cs_rv, "MODIFIED");
    // Give the watches a moment to be established before the clock starts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut ctrl = Controller::start(args, ns, "restart")?;
    let t0 = ctrl.started;
    let wait = Duration::from_secs(120);
    let pod_at = tokio::time::timeout(wait, &mut first_pod).await;
    let cs_at = tokio::time::timeout(Duration::from_secs(5), &mut first_cs).await;
    first_pod.abort();
    first_cs.abort();
    let after = |seen: Option<(Instant, String)>| {
        seen.map(|(t, name)| (secs(t.saturating_duration_since(t0)), name))
    };
    let pod_s = after(pod_at.ok().and_then(Result::ok).flatten());
    let cs_s = after(cs_at.ok().and_then(Result::ok).flatten());
    let first = match (&pod_s, &cs_s) {
        (Some(a), Some(b)) => Some(a.0.min(b.0)),
        (Some(a), None) | (None, Some(a)) => Some(a.0),
        (None, None) => None,
    };
    let describe = |x: &Option<(f64, String)>| {
        x.as_ref().map_or_else(
            || "not seen".to_owned(),
            |(t, name)| format!("{t:.2}s ({name})"),
        )
    };
    report.add(format!(
        "startup: controller restarted with {n} existing pods, {target} scaled {r} -> {}: first pod created {}, first CloneSet write {}",
        r + 1,
        describe(&pod_s),
        describe(&cs_s)
    ));
    match first {
        Some(t) => report.add(format!(
            "startup: first action {t:.2}s after the process started, target <= {} s: {}; load avg {}",
            goal.startup_s,
            benchcalc::verdict(t, goal.startup_s),
            load_avg()
        )),
        None => report.add(format!(
            "startup: no write seen within {}s, target <= {} s: NOT met\ncontroller log tail:\n{}",
            wait.as_secs(),
            goal.startup_s,
            ctrl.tail(30)
        )),
    }
    ctrl.check_alive()?;
    // The restarted process holds the whole cache without the creation's history.
    let names_after: Vec<(String, u32)> = names
        .iter()
        .map(|(name, want)| (name.clone(), if *name == target { want + 1 } else { *want }))
        .collect();
    match wait_settled(
        &api,
        &names_after,
        &mut ctrl,
        Duration::from_secs(120),
        Duration::from_secs(1),
        None,
    )
    .await
    {
        Ok(d) => progress(format!(
            "scaled CloneSet settled {:.1}s after the restart",
            secs(t0.elapsed()).max(secs(d))
        )),
        Err(e) => report.add(format!("startup: the scale-up did not settle: {e:#}")),
    }
    let settle = Duration::from_secs(args.idle_secs.min(30));
    let (rss, cpu_idle, end) = idle_sample(&mut ctrl, settle).await?;
    report.add(format!(
        "startup: restarted controller {:.0}s after start, {} pods cached: RSS {:.1} MiB (min {:.1} / max {:.1} over the last {}s), VmHWM {:.1} MiB, CPU since start {:.1}s, idle CPU {:.1}% of a core; load avg {}",
        secs(t0.elapsed()),
        n + 1,
        end.rss_mib(),
        rss.0,
        rss.1,
        settle.as_secs(),
        end.hwm_mib(),
        end.cpu_s,
        100.0 * benchcalc::cpu_share(cpu_idle, settle),
        load_avg()
    ));
    for l in ctrl.problems(5) {
        report.add(format!("startup: controller log: {l}"));
    }
    ctrl.stop();
    Ok(())
}

/// Deletes the namespace (the controller is already stopped) while the simulator still
/// runs to finish the pods, then stops the simulator, which deletes its nodes.
async fn cleanup(client: &Client, ns: &str, sim: &mut Sim) {
    progress(format!("cleanup: deleting namespace {ns}"));
    if let Err(e) = delete_namespace_and_wait(client, ns, Duration::from_secs(900)).await {
        progress(format!("cleanup: namespace {ns}: {e:#}"));
    }
    if let Err(e) = sim.stop() {
        progress(format!("cleanup: simulator: {e:#}"));
    }
}

fn check_bin(path: &Path, build: &str) -> Result<()> {
    if !path.is_file() {
        bail!("{} not found: {build}", path.display());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// per-pod: in place against delete-and-recreate on the real kubelet

/// The bed's variable `name`, or `default`.
fn bed_env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// The test app's pod on the real node (as `tests/testbed/selftest` runs it): Ready once
/// its HTTP readiness probe answers.
fn real_pod(name: &str, node: &str, image: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "per-pod"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "app",
                "image": image,
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
            }],
        },
    }))?)
}

/// The ID of the pod's container, when it runs and is ready (else None).
fn ready_container(p: &Pod) -> Option<String> {
    let status = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
    (status.ready && pod_ready(p))
        .then(|| status.container_id.clone())
        .flatten()
}

/// Waits (through a watch) until pod `name` is Ready with a ready container other than
/// `not`; returns that container's ID.
async fn wait_new_container(
    pods: &Api<Pod>,
    name: &str,
    not: Option<&str>,
    timeout: Duration,
) -> Result<String> {
    let cond = |p: Option<&Pod>| {
        p.and_then(ready_container)
            .is_some_and(|id| Some(id.as_str()) != not)
    };
    let pod = tokio::time::timeout(
        timeout,
        kube::runtime::wait::await_condition(pods.clone(), name, cond),
    )
    .await
    .with_context(|| format!("pod {name} not Ready with a new container in {timeout:?}"))??;
    pod.as_ref()
        .and_then(ready_container)
        .with_context(|| format!("pod {name} gone"))
}

async fn per_pod(args: &Args, client: &Client, report: &mut Report) -> Result<()> {
    let ns = format!("ipb-p-{}", suffix());
    namespace(client, &ns).await?;
    let result = per_pod_in(args, client, &ns, report).await;
    if let Err(e) = delete_namespace_and_wait(client, &ns, Duration::from_secs(120)).await {
        report.add(format!("per-pod: cleanup: {e:#}"));
    }
    result
}

async fn per_pod_in(args: &Args, client: &Client, ns: &str, report: &mut Report) -> Result<()> {
    let node = bed_env("INPLACE_NODE_NAME", "inplace-node-0");
    let images = [
        bed_env(
            "INPLACE_TEST_IMAGE_V1",
            "127.0.0.1:5000/inplace-test/app:v1",
        ),
        bed_env(
            "INPLACE_TEST_IMAGE_V2",
            "127.0.0.1:5000/inplace-test/app:v2",
        ),
    ];
    let timeout = Duration::from_secs(args.timeout_secs.min(300));
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut name = "app-0".to_owned();
    let mut image = 0;
    pods.create(
        &PostParams::default(),
        &real_pod(&name, &node, &images[image])?,
    )
    .await?;
    let mut container = wait_new_container(&pods, &name, None, timeout).await?;
    let (mut in_place, mut recreate) = (Vec::new(), Vec::new());
    for round in 0..args.per_pod_rounds {
        // In place: the image of the running pod changes; the kubelet restarts its container.
        image = 1 - image;
        let patch = json!({"spec": {"containers": [{"name": "app", "image": images[image]}]}});
        let t0 = Instant::now();
        pods.patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await?;
        // The pod is deleted next: its new container's ID is not needed.
        wait_new_container(&pods, &name, Some(&container), timeout).await?;
        in_place.push(t0.elapsed());
        // Delete and recreate: the pod goes, a replacement with the other image comes
        // (as a workload controller makes it once the old pod is terminating).
        image = 1 - image;
        let next = format!("app-{}", round + 1);
        let t0 = Instant::now();
        pods.delete(&name, &kube::api::DeleteParams::default())
            .await?;
        pods.create(
            &PostParams::default(),
            &real_pod(&next, &node, &images[image])?,
        )
        .await?;
        container = wait_new_container(&pods, &next, None, timeout).await?;
        recreate.push(t0.elapsed());
        progress(format!(
            "per-pod round {}: in place {:.2}s, delete-and-recreate {:.2}s",
            round + 1,
            secs(in_place[round]),
            secs(recreate[round])
        ));
        // The old pod is gone before the next round (not measured).
        wait_pods_gone_named(&pods, &name, timeout).await?;
        name = next;
    }
    let (a, b) = (
        benchcalc::median(&mut in_place),
        benchcalc::median(&mut recreate),
    );
    report.add(format!(
        "per-pod on the real kubelet ({node}), {} of each: in place (patch -> new container Ready) median {:.2}s [{}], delete-and-recreate (delete -> replacement Ready) median {:.2}s [{}], ratio {:.2}",
        args.per_pod_rounds,
        secs(a),
        benchcalc::secs_list(&in_place),
        secs(b),
        benchcalc::secs_list(&recreate),
        benchcalc::ratio(b, a),
    ));
    Ok(())
}

/// Waits until pod `name` no longer exists.
async fn wait_pods_gone_named(pods: &Api<Pod>, name: &str, timeout: Duration) -> Result<()> {
    tokio::time::timeout(
        timeout,
        kube::runtime::wait::await_condition(pods.clone(), name, |p: Option<&Pod>| p.is_none()),
    )
    .await
    .with_context(|| format!("pod {name} still there after {timeout:?}"))??;
    Ok(())
}

async fn run(args: &Args, report: &mut Report) -> Result<()> {
    inplace_tests::bed::kubeconfig_path().context(
        "set INPLACE_TESTBED_KUBECONFIG (e.g. /var/tmp/inplace-testbed/kubeconfig) to the bed's admin kubeconfig",
    )?;
    let client = client().await?;
    if args.scenario == Scenario::PerPod {
        // The real kubelet only: neither the controller nor the simulator.
        return per_pod(args, &client, report).await.inspect_err(|e| {
            report.add(format!("per-pod: FAILED: {e:#}"));
        });
    }
    check_bin(
        &args.controller_bin,
        "cargo build --release -p inplace-controller --bin inplace-controller",
    )?;
    check_bin(
        &args.nodesim_bin,
        "cargo build --release -p inplace-tests --bin inplace-nodesim",
    )?;
    let mut failures = Vec::new();
    if matches!(args.scenario, Scenario::Rollout | Scenario::All)
        && let Err(e) = rollout(args, &client, report).await
    {
        report.add(format!("rollout: FAILED: {e:#}"));
        failures.push("rollout");
    }
    if args.scenario == Scenario::Predownload
        && let Err(e) = predownload::run(args, &client, report).await
    {
        report.add(format!("predownload: FAILED: {e:#}"));
        failures.push("predownload");
    }
    if args.scenario == Scenario::VersusDeployment
        && let Err(e) = versus(args, &client, report).await
    {
        report.add(format!("versus-deployment: FAILED: {e:#}"));
        failures.push("versus-deployment");
    }
    if matches!(
        args.scenario,
        Scenario::Memory | Scenario::Startup | Scenario::Fleet | Scenario::All
    ) && let Err(e) = fleet(args, &client, report).await
    {
        report.add(format!("memory/startup: FAILED: {e:#}"));
        failures.push("memory/startup");
    }
    if !failures.is_empty() {
        bail!("not measured: {}", failures.join(", "));
    }
    Ok(())
}

/// `name` in the directory of this program (the target dir's `release/` or `debug/`, where
/// cargo built it beside the controller and the simulator); `name` alone if that is unknown.
fn beside_me(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|me| Some(me.parent()?.join(name)))
        .unwrap_or_else(|| PathBuf::from(name))
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut report = Report::default();
    let started = Instant::now();
    let result = tokio::select! {
        r = run(&args, &mut report) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted (namespaces and simulated nodes may be left over: ipb-*)")),
    };
    println!();
    println!(
        "== inplace-rollout-bench ({:?}, {:.0}s) ==",
        args.scenario,
        secs(started.elapsed())
    );
    for l in &report.lines {
        println!("{l}");
    }
    result
}
