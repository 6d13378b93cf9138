//! inplace-faults: the fault-injection suite on the test bed's simulated nodes.
//!
//! Each run (one seed) starts a controller scoped to a namespace of its own (with its
//! ImagePullJob and ContainerRecreateRequest controllers and image pre-download on; the
//! NodeImage lifecycle needs every namespace and stays off), reaching the API server only
//! through a fault proxy ([`inplace_tests::faults::proxy`]), creates a CloneSet on
//! simulated nodes and waits until it is settled (faults off), then turns the faults on,
//! changes the CloneSet (the seed's scenario, up to 50 pods), SIGKILLs and restarts the
//! controller at the seed's points of the fault window, cuts the API server off for
//! 30-60 s in some runs (unless `--no-outages`) and restarts the bed's API server in
//! others (unless `--no-apiserver-restarts`), turns the faults off and waits until the CloneSet has converged
//! and its ImagePullJobs are gone. The invariants of
//! [`inplace_tests::faults::invariants`] are checked on every pod and PVC event of a
//! direct watch throughout; not converging within `--converge-secs` of the faults
//! stopping is a violation too. Runs are independent (namespace, controller, proxy), so
//! `--parallel` of them share the bed at once; all share one simulator.
//!
//! The seed fixes the scenario, its parameters, the fault window, the kill points and the
//! proxy's stream of decisions; which request gets which decision still depends on the
//! timing of the controller's requests, so a replay (`--seed N`) repeats the run's plan,
//! not its exact interleaving.
//!
//! ```text
//! cargo build -p inplace-controller --bin inplace-controller
//! cargo build -p inplace-tests --bin inplace-nodesim --bin inplace-faults
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   $CARGO_TARGET_DIR/debug/inplace-faults --runs 200 --parallel 4
//! ```
//! Prints one line per run, then `faults: runs=… faults_injected=… kills=…
//! invariant_violations=…` and the seed of every failed run, and last `faults: R runs,
//! F faults injected, V violations` (F counts the proxies' faults, the node faults and the
//! SIGKILLs); exits non-zero if any run failed.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod daemon;
mod process;

use anyhow::{Context, Result, bail};
use clap::Parser;
use futures::StreamExt;
use inplace_proto::cloneset::CloneSet;
use inplace_proto::imagepulljob::ImagePullJob;
use inplace_tests::bed::{
    Sim, client, cloneset_settled, cloneset_status_line, delete_namespace_and_wait,
    delete_node_images, namespace, pod_ready, suffix,
};
use inplace_tests::faults::figures::{Figures, RunOutcome};
use inplace_tests::faults::injection::{Fault, Rates};
use inplace_tests::faults::invariants::{Bounds, Checker, PodSnap, PvcSnap};
use inplace_tests::faults::plane_restarts::RestartClock;
use inplace_tests::faults::proxy::{FaultProxy, Record};
use inplace_tests::faults::records::{self, PodLedger};
use inplace_tests::faults::rng::Rng;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use process::Process;
use serde_json::json;

const IMAGE_V1: &str = "faults.invalid/inplace/app:v1";
const IMAGE_V2: &str = "faults.invalid/inplace/app:v2";
const REVISION_LABEL: &str = "controller-revision-hash";

/// Seeded fault-injection runs of the controller on simulated nodes.
#[derive(Debug, Parser)]
#[command(name = "inplace-faults", version)]
struct Args {
    /// Run only this seed (a replay of a failed run).
    #[arg(long)]
    seed: Option<u64>,
    /// The first seed of `--runs` consecutive seeds.
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    #[arg(long, default_value_t = 4)]
    runs: u64,
    /// Runs at once (each has its own namespace, controller and proxy).
    #[arg(long, default_value_t = 2)]
    parallel: usize,
    /// Simulated nodes shared by all runs.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// The longest wait for the CloneSet to settle before the faults (no faults on).
    #[arg(long, default_value_t = 90)]
    setup_secs: u64,
    /// The bound on convergence once the faults stopped.
    #[arg(long, default_value_t = 120)]
    converge_secs: u64,
    /// The controller binary (default: `inplace-controller` beside this program).
    #[arg(long, env = "INPLACE_CONTROLLER_BIN")]
    controller_bin: Option<PathBuf>,
    /// The simulator binary (default: `inplace-nodesim` beside this program).
    #[arg(long, env = "INPLACE_NODESIM_BIN")]
    nodesim_bin: Option<PathBuf>,
    /// Start no run after this many seconds (to split a long run into chunks of bed
    /// time); the seeds not run are counted.
    #[arg(long)]
    time_budget_secs: Option<u64>,
    /// RUST_LOG of the controllers.
    #[arg(long, default_value = "info")]
    controller_log: String,
    /// Where the controllers' logs go (kept only for failed runs).
    #[arg(long, default_value = "/var/tmp/logs/faults")]
    log_dir: PathBuf,
    /// Runs of the daemon scenario (`daemon.rs`: the real node, one at a time, after the
    /// controller runs), from seed `--daemon-first-seed`.
    #[arg(long, default_value_t = 0)]
    daemon_runs: u64,
    #[arg(long, default_value_t = 1)]
    daemon_first_seed: u64,
    /// Run only this seed of the daemon scenario (a replay); with `--runs 0` nothing else.
    #[arg(long)]
    daemon_seed: Option<u64>,
    /// The daemon binary (default: `inplace-daemon` beside this program).
    #[arg(long, env = "INPLACE_DAEMON_BIN")]
    daemon_bin: Option<PathBuf>,
    /// Restart the bed's API server in the runs whose plan has it (tests/testbed/restart;
    /// root): every run at that moment, and the simulator, see it go away. On unless
    /// `--no-apiserver-restarts`.
    #[arg(long = "no-apiserver-restarts", action = clap::ArgAction::SetFalse)]
    apiserver_restarts: bool,
    /// Cut the controller off from the API server for 30-60 s in the runs whose plan has
    /// an outage. On unless `--no-outages`.
    #[arg(long = "no-outages", action = clap::ArgAction::SetFalse)]
    outages: bool,
    /// Answer some lists that ask for a cached answer (`resourceVersion=0` or
    /// `resourceVersionMatch=NotOlderThan`) with an earlier answer; a consistent list is
    /// never stale. On unless `--no-stale-lists`.
    #[arg(long = "no-stale-lists", action = clap::ArgAction::SetFalse)]
    stale_lists: bool,
    /// The test bed's directory (its containerd socket, for the daemon).
    #[arg(
        long,
        env = "INPLACE_TESTBED_DIR",
        default_value = "/var/tmp/inplace-testbed"
    )]
    bed_dir: PathBuf,
}

fn beside_me(name: &str) -> Result<PathBuf> {
    let me = std::env::current_exe()?;
    Ok(me.parent().context("program directory")?.join(name))
}

// ---------------------------------------------------------------------------------------
// Scenarios.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    ScaleUp,
    ScaleDown,
    RolloutMaxUnavailable,
    RolloutMaxSurge,
    Pvc,
    /// A rollout of 20-50 pods, a fifth of them unavailable at a time.
    LargeRollout,
}

impl Scenario {
    const ALL: [Scenario; 6] = [
        Scenario::ScaleUp,
        Scenario::ScaleDown,
        Scenario::RolloutMaxUnavailable,
        Scenario::RolloutMaxSurge,
        Scenario::Pvc,
        Scenario::LargeRollout,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::ScaleUp => "scale-up",
            Scenario::ScaleDown => "scale-down",
            Scenario::RolloutMaxUnavailable => "rollout-max-unavailable",
            Scenario::RolloutMaxSurge => "rollout-max-surge",
            Scenario::Pvc => "pvc",
            Scenario::LargeRollout => "large-rollout",
        }
    }
}

/// What a run does: from `initial` pods on v1 to `target` pods on v1 or v2.
#[derive(Debug, Clone, Copy)]
struct Plan {
    scenario: Scenario,
    initial: u32,
    target: u32,
    max_unavailable: u32,
    max_surge: u32,
    new_image: bool,
    pvc: bool,
    window: Duration,
    /// (offset in the window, downtime) of each controller kill.
    kills: [Option<(Duration, Duration)>; 2],
    /// (offset in the window, length) of an outage of the API server, 30-60 s.
    outage: Option<(Duration, Duration)>,
    /// Offset in the window of a restart of the bed's API server (with
    /// `--apiserver-restarts`).
    restart: Option<Duration>,
}

/// What happens at a point of a run's fault window.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// The controller SIGKILLed, started again after this long.
    Kill(Duration),
    /// The proxy cut off from the API server for this long.
    Outage(Duration),
    /// The bed's API server restarted.
    Restart,
}

impl Plan {
    /// The window's events in order of their offsets (outages and restarts only when
    /// asked for).
    fn events(&self, outages: bool, restarts: bool) -> Vec<(Duration, Event)> {
        let mut events: Vec<(Duration, Event)> = self
            .kills
            .iter()
            .flatten()
            .map(|(at, down)| (*at, Event::Kill(*down)))
            .chain(
                self.outage
                    .filter(|_| outages)
                    .map(|(at, len)| (at, Event::Outage(len))),
            )
            .chain(
                self.restart
                    .filter(|_| restarts)
                    .map(|at| (at, Event::Restart)),
            )
            .collect();
        events.sort_by_key(|(at, _)| *at);
        events
    }

    /// How long the faults stay on: the window, or to the end of an outage past it.
    fn faults_for(&self, outages: bool) -> Duration {
        self.outage
            .filter(|_| outages)
            .map_or(self.window, |(at, len)| self.window.max(at + len))
    }
}

impl Plan {
    fn of(seed: u64) -> (Plan, Rng) {
        let mut rng = Rng::new(seed);
        let scenario = Scenario::ALL[usize::try_from(rng.below(6)).unwrap_or(0)];
        let (initial, target, max_unavailable, max_surge, new_image, pvc) = match scenario {
            Scenario::ScaleUp => (
                2,
                u32::try_from(rng.range(4, 6)).unwrap_or(5),
                1,
                0,
                false,
                false,
            ),
            Scenario::ScaleDown => (
                u32::try_from(rng.range(4, 6)).unwrap_or(5),
                2,
                1,
                0,
                false,
                false,
            ),
            Scenario::RolloutMaxUnavailable => (
                4,
                4,
                u32::try_from(rng.range(1, 2)).unwrap_or(1),
                0,
                true,
                false,
            ),
            Scenario::RolloutMaxSurge => (4, 4, 0, 1, true, false),
            Scenario::Pvc => (3, 2, 1, 0, true, true),
            Scenario::LargeRollout => {
                let n = u32::try_from(rng.range(20, 50)).unwrap_or(30);
                (n, n, n / 5, 0, true, false)
            }
        };
        let window = Duration::from_millis(rng.range(6000, 12_000));
        let mut kills = [None, None];
        let n = rng.below(3);
        for k in kills.iter_mut().take(usize::try_from(n).unwrap_or(0)) {
            let at =
                Duration::from_millis(rng.below(u64::try_from(window.as_millis()).unwrap_or(6000)));
            let down = Duration::from_millis(rng.range(0, 1500));
            *k = Some((at, down));
        }
        kills.sort_by_key(|k| k.map(|(at, _)| at).unwrap_or(Duration::MAX));
        let proxy_rng = rng.fork(1);
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(6000);
        let outage = rng.chance(250).then(|| {
            (
                Duration::from_millis(rng.below(window_ms / 2)),
                Duration::from_millis(rng.range(30_000, 60_000)),
            )
        });
        let restart = rng
            .chance(200)
            .then(|| Duration::from_millis(rng.below(window_ms)));
        (
            Plan {
                scenario,
                initial,
                target,
                max_unavailable,
                max_surge,
                new_image,
                pvc,
                window,
                kills,
                outage,
                restart,
            },
            proxy_rng,
        )
    }
}

fn container(image: &str, pvc: bool) -> serde_json::Value {
    if pvc {
        json!({ "name": "app", "image": image, "volumeMounts": [{ "name": "data", "mountPath": "/data" }] })
    } else {
        json!({ "name": "app", "image": image })
    }
}

fn cloneset(name: &str, sim: &Sim, plan: &Plan, storage_class: &str) -> Result<CloneSet> {
    let mut cs = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": { "name": name },
        "spec": {
            "replicas": plan.initial,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": {
                    "nodeSelector": sim.selector(),
                    "tolerations": sim.tolerations(),
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container(IMAGE_V1, plan.pvc)],
                },
            },
            "updateStrategy": {
                "type": "InPlaceIfPossible",
                "maxUnavailable": plan.max_unavailable,
                "maxSurge": plan.max_surge,
            },
        },
    });
    if plan.pvc {
        cs["spec"]["volumeClaimTemplates"] = json!([{
            "metadata": { "name": "data" },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": storage_class,
                "resources": { "requests": { "storage": "1Gi" } },
            },
        }]);
    }
    Ok(serde_json::from_value(cs)?)
}

/// hostPath PersistentVolumes of the class `class` (the bed has no provisioner; the
/// simulator mounts nothing).
async fn make_pvs(client: &Client, class: &str, n: usize) -> Result<Vec<String>> {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("{class}-pv{i}");
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": {
                "capacity": { "storage": "1Gi" },
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": class,
                "hostPath": { "path": format!("/tmp/inplace-faults/{name}") },
            },
        }))?;
        match api.create(&PostParams::default(), &pv).await {
            // Made by an earlier attempt whose answer was lost (see [`answered`]).
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            r => {
                r?;
            }
        }
        names.push(name);
    }
    Ok(names)
}

// ---------------------------------------------------------------------------------------
// Watches feeding the checker.

/// Feeds every event of a watch of `api` to the checks `checker` through `apply`.
fn feed<K, S: Send + 'static>(
    api: Api<K>,
    checker: Arc<Mutex<S>>,
    apply: fn(&mut S, watcher::Event<K>),
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = events.next().await {
            let Ok(ev) = ev else { continue };
            let Ok(mut c) = checker.lock() else { return };
            apply(&mut c, ev);
        }
    })
}

fn pod_event(c: &mut Checker, ev: watcher::Event<Pod>) {
    match ev {
        watcher::Event::Init => c.pods_relisting(),
        watcher::Event::InitApply(p) | watcher::Event::Apply(p) => c.pod_applied(PodSnap::of(&p)),
        watcher::Event::Delete(p) => c.pod_deleted(PodSnap::of(&p)),
        watcher::Event::InitDone => c.pods_listed(),
    }
}

fn pvc_event(c: &mut Checker, ev: watcher::Event<PersistentVolumeClaim>) {
    match ev {
        watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
            c.pvc_changed(PvcSnap::of(&p, false));
        }
        watcher::Event::Delete(p) => c.pvc_changed(PvcSnap::of(&p, true)),
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}

// ---------------------------------------------------------------------------------------
// Convergence.

/// Why the CloneSet is not yet converged on `want` pods of the update revision
/// (`None`: it is: status current and all pods live, Ready and on the update revision).
async fn not_converged(
    cs_api: &Api<CloneSet>,
    pods: &Api<Pod>,
    name: &str,
    want: u32,
) -> Result<Option<String>> {
    let cs = cs_api.get(name).await?;
    let Some(s) = cs.status.as_ref() else {
        return Ok(Some("no status".into()));
    };
    let line = cloneset_status_line(&cs);
    if !cloneset_settled(&cs, want) {
        return Ok(Some(line));
    }
    let list = pods.list(&ListParams::default()).await?;
    let live: Vec<&Pod> = list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let on_update = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(REVISION_LABEL))
            .is_some_and(|r| Some(r) == s.update_revision.as_ref())
    };
    let good = live.iter().filter(|p| pod_ready(p) && on_update(p)).count();
    if live.len() != want as usize || good != want as usize {
        return Ok(Some(format!(
            "{line}; {} live pods, {good} Ready on the update revision",
            live.len()
        )));
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------
// One run.

struct Shared {
    args: Args,
    client: Client,
    /// The simulator (only when there are controller runs).
    sim: Option<Sim>,
    controller_bin: PathBuf,
    daemon_bin: PathBuf,
}

async fn run(shared: &Shared, seed: u64) -> RunOutcome {
    let t0 = Instant::now();
    let (plan, proxy_rng) = Plan::of(seed);
    let mut out = RunOutcome {
        seed,
        scenario: plan.scenario.name().to_owned(),
        ..RunOutcome::default()
    };
    let ns = format!("flt-{seed}-{}", suffix());
    let log = shared.args.log_dir.join(format!("{ns}-controller.log"));
    let result = run_in(shared, seed, &plan, proxy_rng, &ns, &mut out, &log).await;
    if let Err(e) = result {
        out.error = Some(format!("{e:#}"));
    }
    // Clean up: the namespace (its pods go quickly on simulated nodes) and the PVs.
    if let Err(e) = delete_namespace_and_wait(&shared.client, &ns, Duration::from_secs(90)).await {
        eprintln!("faults: seed {seed}: namespace {ns} not emptied: {e:#}");
    }
    if plan.pvc {
        let pvs: Api<PersistentVolume> = Api::all(shared.client.clone());
        for i in 0..6 {
            let _ = pvs
                .delete(&format!("{ns}-pv{i}"), &DeleteParams::default())
                .await;
        }
    }
    if out.failed() {
        eprintln!(
            "faults: seed {seed}: controller log kept: {}",
            log.display()
        );
    } else {
        let _ = std::fs::remove_file(&log);
    }
    out.seconds = t0.elapsed().as_secs_f64();
    out
}

async fn run_in(
    shared: &Shared,
    seed: u64,
    plan: &Plan,
    proxy_rng: Rng,
    ns: &str,
    out: &mut RunOutcome,
    log: &Path,
) -> Result<()> {
    let client = &shared.client;
    answered("namespace", || namespace(client, ns)).await?;
    if plan.pvc {
        answered("PersistentVolumes", || make_pvs(client, ns, 6)).await?;
    }
    let proxy = FaultProxy::start(client.clone(), rates(&shared.args), proxy_rng).await?;
    let kubeconfig = shared.args.log_dir.join(format!("{ns}-kubeconfig"));
    std::fs::write(&kubeconfig, proxy.kubeconfig(ns))?;
    let bounds = Bounds {
        max_pods: (plan.initial.max(plan.target) + plan.max_surge) as usize,
        min_available: None,
    };
    let checker = Arc::new(Mutex::new(Checker::new(bounds)));
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    // The proxy's clock when each killed controller had been reaped.
    let mut kills_ms: Vec<u64> = Vec::new();
    let mut converged = false;
    let watches = [
        feed(pods.clone(), checker.clone(), pod_event),
        feed(
            Api::namespaced(client.clone(), ns),
            checker.clone(),
            pvc_event,
        ),
    ];
    let result = async {
        let mut ctl = Process::controller(
            &shared.controller_bin,
            &kubeconfig,
            ns,
            log,
            &shared.args.controller_log,
        )?;
        let name = "flt";
        let cs_api: Api<CloneSet> = Api::namespaced(client.clone(), ns);
        let cs = cloneset(name, shared.sim.as_ref().context("no simulator")?, plan, ns)?;
        answered("creating the CloneSet", || async {
            match cs_api.create(&PostParams::default(), &cs).await {
                // Ours: created by an attempt whose answer was lost to a restart.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                r => r.map(drop).map_err(anyhow::Error::from),
            }
        })
        .await?;
        wait_converged(
            &cs_api,
            &pods,
            name,
            plan.initial,
            shared.args.setup_secs,
            &mut [&mut ctl],
            &mut out.crashes,
        )
        .await
        .map_err(|e| anyhow::anyhow!("setup (no faults): {e}"))?;
        let min = plan
            .initial
            .min(plan.target)
            .saturating_sub(plan.max_unavailable) as usize;
        if let Ok(mut c) = checker.lock() {
            c.set_bounds(Bounds {
                min_available: Some(min),
                ..bounds
            });
        }

        // Faults on; the change; kills at the plan's points.
        proxy.set_faults(true);
        let started = Instant::now();
        let image = if plan.new_image { IMAGE_V2 } else { IMAGE_V1 };
        let patch = json!({ "spec": {
            "replicas": plan.target,
            "template": { "spec": { "containers": [container(image, plan.pvc)] } },
        }});
        answered("changing the CloneSet", || async {
            cs_api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(anyhow::Error::from)
        })
        .await?;
        let outages = shared.args.outages;
        for (at, event) in plan.events(outages, shared.args.apiserver_restarts) {
            tokio::time::sleep(at.saturating_sub(started.elapsed())).await;
            match event {
                Event::Kill(down) => {
                    out.crashes.extend(ctl.revive()?);
                    ctl.kill();
                    kills_ms.push(proxy.now_ms());
                    out.kills += 1;
                    tokio::time::sleep(down).await;
                    ctl.spawn()?;
                }
                Event::Outage(length) => {
                    proxy.outage(length);
                    out.outages += 1;
                }
                Event::Restart => {
                    restart_apiserver().await?;
                    out.apiserver_restarts += 1;
                }
            }
        }
        tokio::time::sleep(plan.faults_for(outages).saturating_sub(started.elapsed())).await;
        proxy.set_faults(false);

        // Faults off: convergence within the bound.
        match wait_converged(
            &cs_api,
            &pods,
            name,
            plan.target,
            shared.args.converge_secs,
            &mut [&mut ctl],
            &mut out.crashes,
        )
        .await
        {
            Ok(()) => converged = true,
            Err(e) => {
                out.violations.push(format!(
                    "not converged {} s after the faults stopped: {e}",
                    shared.args.converge_secs
                ));
            }
        }
        if converged && let Some(left) = jobs_left(client, ns).await? {
            out.violations.push(left);
        }
        Ok::<(), anyhow::Error>(())
    }
    .await;
    for w in &watches {
        w.abort();
    }
    if let Ok(mut c) = checker.lock() {
        let found = c.finish();
        out.violations.splice(0..0, found);
        out.peak_pods = c.peak_pods;
        out.least_available = c.least_available;
        out.most_down_by_node = c.most_down_by_node;
    }
    out.max_pods = bounds.max_pods;
    out.min_available = plan
        .initial
        .min(plan.target)
        .saturating_sub(plan.max_unavailable) as usize;
    let records = proxy.records();
    check_records(
        &records,
        &kills_ms,
        plan.target,
        bounds.max_pods,
        converged,
        out,
    );
    if out.failed() {
        keep_records(&shared.args.log_dir, ns, "requests", &proxy, seed);
    }
    let _ = std::fs::remove_file(&kubeconfig);
    result
}

/// The figures of a controller proxy's record and the invariants of
/// [`inplace_tests::faults::records`] over it.
fn check_records(
    records: &[Record],
    kills_ms: &[u64],
    target: u32,
    max_pods: usize,
    converged: bool,
    out: &mut RunOutcome,
) {
    count_requests(records, out);
    let (after, applied_after) = records::after_kills(records, kills_ms);
    out.record_violations.extend(after);
    out.applied_after_kill += applied_after;
    let ledger = PodLedger::of(records);
    out.record_violations
        .extend(ledger.violations(target as usize, max_pods, converged));
    out.pods_created += ledger.created.len() as u64;
    out.pods_deleted += ledger.deleted.len() as u64;
    // `<vct>-<cloneset>-<id>` of pod `<cloneset>-<id>` (plan/src/build.rs).
    out.record_violations
        .extend(records::pvc_deletes(records, |claim| {
            claim.strip_prefix("data-").map(str::to_owned)
        }));
}

/// Requests and faults (by kind) of a proxy's record, added to `out`.
fn count_requests(records: &[Record], out: &mut RunOutcome) {
    out.requests += records.len() as u64;
    for r in records {
        if let Some(f) = r.fault {
            *out.faults.entry(f).or_insert(0) += 1;
        }
        // A latency on top of another fault counts for both.
        if r.delay_ms > 0 && r.fault != Some(Fault::Latency) {
            *out.faults.entry(Fault::Latency).or_insert(0) += 1;
        }
    }
}

/// A failed run's proxy record, next to the processes' logs, for the diagnosis.
fn keep_records(dir: &Path, ns: &str, what: &str, proxy: &FaultProxy, seed: u64) {
    let file = dir.join(format!("{ns}-{what}.log"));
    let records = proxy.records();
    let mut text: String = records
        .iter()
        .map(|r| {
            format!(
                "{:>7} {:>7} c{:<3} {} {} -> {} (upstream {}) {}{}\n",
                r.at_ms,
                r.done_ms,
                r.conn,
                r.method,
                r.path,
                r.status,
                r.upstream.map_or_else(|| "-".to_owned(), |s| s.to_string()),
                r.fault.map_or("", Fault::name),
                r.body_name
                    .as_deref()
                    .map_or_else(String::new, |n| format!(" name={n}")),
            )
        })
        .collect();
    for r in proxy.in_flight() {
        text.push_str(&format!("NOT ANSWERED at the end: {r}\n"));
    }
    let _ = std::fs::write(&file, text);
    eprintln!(
        "faults: seed {seed}: requests recorded in {}",
        file.display()
    );
}

/// The CloneSet's pre-download ImagePullJobs are deleted once its revisions converged
/// (`controller/src/runtime/predownload_jobs.rs`): what is left 30 s after convergence.
async fn jobs_left(client: &Client, ns: &str) -> Result<Option<String>> {
    let jobs: Api<ImagePullJob> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let names: Vec<String> = answered("listing ImagePullJobs", || async {
            jobs.list(&ListParams::default())
                .await
                .map_err(anyhow::Error::from)
        })
        .await?
        .items
        .iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .filter_map(|j| j.metadata.name.clone())
        .collect();
        if names.is_empty() {
            return Ok(None);
        }
        if Instant::now() > deadline {
            return Ok(Some(format!(
                "ImagePullJobs left 30 s after the CloneSet converged: {}",
                names.join(", ")
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The proxies' fault rates: the defaults, without stale lists with `--no-stale-lists`.
fn rates(args: &Args) -> Rates {
    let all = Rates::default();
    Rates {
        stale_list: if args.stale_lists { all.stale_list } else { 0 },
        ..all
    }
}

/// `call`, retried while the bed's API server does not answer it (the connection refused
/// or cut, 5xx, 429) for up to 60 s: a restart of the API server (`--apiserver-restarts`,
/// by any run) lasts seconds, and must not fail the runs that meet it in their own set-up
/// or checks. (The controller under test meets it through its proxy, unretried.)
async fn answered<T, Fut>(what: &str, mut call: impl FnMut() -> Fut) -> Result<T>
where
    Fut: std::future::Future<Output = Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if unanswered(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.context(what.to_owned())),
        }
    }
}

/// The API server did not answer: no kube error of an answer, or one of 5xx or 429.
fn unanswered(e: &anyhow::Error) -> bool {
    e.chain().any(|c| match c.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(s)) => s.code >= 500 || s.code == 429,
        Some(_) => true,
        None => false,
    })
}

/// One restart of the bed's API server at a time: two runs whose restarts fall together
/// would otherwise both stop the same process and start two, one of which cannot bind
/// the port (`restart: kube-apiserver does not serve again`). The later one waits and
/// restarts it again.
static RESTARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The restarts of the bed's API server, for the bounds of the waits of every run.
static RESTARTS: std::sync::Mutex<RestartClock> = std::sync::Mutex::new(RestartClock::new());

/// A restart under way in [`RESTARTS`] until dropped (the script's failure included).
struct RestartUnderWay;

impl RestartUnderWay {
    fn begin() -> RestartUnderWay {
        if let Ok(mut c) = RESTARTS.lock() {
            c.begun();
        }
        RestartUnderWay
    }
}

impl Drop for RestartUnderWay {
    fn drop(&mut self) {
        if let Ok(mut c) = RESTARTS.lock() {
            c.ended(Instant::now());
        }
    }
}

/// Whether a wait of `bound` begun at `started` is over ([`RestartClock::wait_over`]).
fn wait_over(started: Instant, bound: Duration) -> bool {
    RESTARTS
        .lock()
        .map_or(true, |c| c.wait_over(Instant::now(), started, bound))
}

/// Restarts the bed's API server (tests/testbed/restart), waiting until it serves again.
async fn restart_apiserver() -> Result<()> {
    let _one_at_a_time = RESTARTING.lock().await;
    let _under_way = RestartUnderWay::begin();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("testbed/restart");
    let run = script.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(run)
            .arg("kube-apiserver")
            .output()
    })
    .await?
    .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} kube-apiserver failed: {}{}",
            script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Restarts each of `procs` that died, noting its crash in `crashes`; why one could not be.
fn revive_all(procs: &mut [&mut Process], crashes: &mut Vec<String>) -> Result<(), String> {
    for p in procs.iter_mut() {
        match p.revive() {
            Ok(Some(crash)) => crashes.push(crash),
            Ok(None) => {}
            Err(e) => return Err(format!("restarting a process: {e:#}")),
        }
    }
    Ok(())
}

/// Waits until the CloneSet converged on `want` pods, at most `secs` of an undisturbed
/// API server: a restart of it (by any run) during the wait counts the bound again from
/// its end ([`wait_over`]).
async fn wait_converged(
    cs_api: &Api<CloneSet>,
    pods: &Api<Pod>,
    name: &str,
    want: u32,
    secs: u64,
    procs: &mut [&mut Process],
    crashes: &mut Vec<String>,
) -> std::result::Result<(), String> {
    let (started, bound) = (Instant::now(), Duration::from_secs(secs));
    loop {
        revive_all(procs, crashes)?;
        let last = match not_converged(cs_api, pods, name, want).await {
            Ok(None) => return Ok(()),
            Ok(Some(why)) => why,
            Err(e) => format!("{e:#}"),
        };
        if wait_over(started, bound) {
            return Err(last);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

// ---------------------------------------------------------------------------------------

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.log_dir)?;
    let bin = |given: &Option<PathBuf>, name: &str| -> Result<PathBuf> {
        let path = match given {
            Some(p) => p.clone(),
            None => beside_me(name)?,
        };
        if !path.exists() {
            bail!(
                "{} not found: build it first (see the program's documentation)",
                path.display()
            );
        }
        Ok(path)
    };
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.first_seed..args.first_seed.saturating_add(args.runs)).collect(),
    };
    let daemon_seeds: Vec<u64> = match args.daemon_seed {
        Some(s) => vec![s],
        None => (args.daemon_first_seed..args.daemon_first_seed.saturating_add(args.daemon_runs))
            .collect(),
    };
    let controller_bin = bin(&args.controller_bin, "inplace-controller")?;
    let daemon_bin = if daemon_seeds.is_empty() {
        PathBuf::new()
    } else {
        bin(&args.daemon_bin, "inplace-daemon")?
    };
    let client = client().await?;
    let sim = if seeds.is_empty() {
        None
    } else {
        let nodesim_bin = bin(&args.nodesim_bin, "inplace-nodesim")?;
        let group = format!("faults-{}", suffix());
        let sim = Sim::start(
            &nodesim_bin,
            &group,
            args.nodes,
            &[
                "--start-delay",
                "200ms",
                "--ready-delay",
                "300ms",
                "--update-delay",
                "500ms",
                "--max-grace",
                "1s",
                "--pull-delay",
                "300ms",
                "--stats-interval",
                "10m",
                // The controller completes each in-place update itself (its path without a
                // daemon), under the faults: the daemon's completion is the node suite's,
                // on the real daemon.
                "--no-daemon",
            ],
        )?;
        sim.wait_nodes_ready(&client, Duration::from_secs(60))
            .await?;
        Some(sim)
    };
    let parallel = args.parallel.max(1);
    let mut shared = Shared {
        args,
        client,
        sim,
        controller_bin,
        daemon_bin,
    };
    let t0 = Instant::now();
    let budget = shared.args.time_budget_secs.map(Duration::from_secs);
    let within_budget = || budget.is_none_or(|b| t0.elapsed() <= b);
    let mut not_started = 0u64;

    let mut figures = Figures::default();
    let mut runs = futures::stream::iter(seeds)
        .map(|seed| {
            let shared = &shared;
            async move {
                if !within_budget() {
                    return None;
                }
                Some(run(shared, seed).await)
            }
        })
        .buffer_unordered(parallel);
    while let Some(o) = runs.next().await {
        match o {
            Some(o) => report(&mut figures, &o),
            None => not_started += 1,
        }
    }
    drop(runs);
    if let Some(sim) = shared.sim.as_mut() {
        sim.stop()?;
        delete_node_images(&shared.client, &sim.prefix).await;
    }

    // The daemon scenario: one run at a time (one daemon per node).
    let mut daemon_figures = Figures::default();
    for seed in daemon_seeds {
        if !within_budget() {
            not_started += 1;
            continue;
        }
        let o = daemon::run(&shared, seed).await;
        report(&mut daemon_figures, &o);
    }

    if figures.runs > 0 {
        println!("faults: controller scenarios (simulated nodes):");
        print!("{}", figures.render());
    }
    if daemon_figures.runs > 0 {
        println!("faults: daemon scenario (the real node):");
        print!("{}", daemon_figures.render());
    }
    println!("faults: wall time {:.0}s", t0.elapsed().as_secs_f64());
    if not_started > 0 {
        println!("faults: {not_started} seeds not run (--time-budget-secs spent)");
    }
    let failed = figures.failed.len() + daemon_figures.failed.len();
    let errors = figures.errors + daemon_figures.errors;
    if errors > 0 {
        println!("faults: {errors} runs could not be carried out (see their errors above)");
    }
    // Last, the line tests/faults and CI read.
    println!(
        "faults: {} runs, {} faults injected, {} violations",
        figures.runs + daemon_figures.runs,
        figures.all_faults() + daemon_figures.all_faults(),
        figures.all_violations() + daemon_figures.all_violations(),
    );
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// Prints one run's line (and its crashes, violations, error) and adds it to `figures`.
fn report(figures: &mut Figures, o: &RunOutcome) {
    let faults: u64 = o.faults.values().sum();
    println!(
        "faults: seed {} {}: {} in {:.0}s ({} requests, {} faults, {} kills{}, {} crashes; \
         pods at most {} of {}, available at least {} of {}{})",
        o.seed,
        o.scenario,
        if o.failed() { "FAILED" } else { "ok" },
        o.seconds,
        o.requests,
        faults,
        o.kills,
        if o.daemon_kills > 0 {
            format!(" + {} of the daemon", o.daemon_kills)
        } else {
            String::new()
        },
        o.crashes.len(),
        o.peak_pods,
        o.max_pods,
        o.least_available
            .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        o.min_available,
        if o.most_down_by_node > 0 {
            format!(
                ", counting up to {} down by the node lifecycle controller",
                o.most_down_by_node
            )
        } else {
            String::new()
        },
    );
    for c in &o.crashes {
        println!("faults:   a process exited by itself (restarted): {c}");
    }
    for v in &o.violations {
        println!("faults:   violation (watch): {v}");
    }
    for v in &o.record_violations {
        println!("faults:   violation (records): {v}");
    }
    if let Some(e) = &o.error {
        println!("faults:   error: {e}");
    }
    figures.add(o);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over many seeds: every scenario and event kind occurs, within its bounds, and the
    /// events come in order, restarts only when asked for.
    #[test]
    fn plans_cover_every_scenario_and_event_within_bounds() {
        let mut scenarios = std::collections::BTreeSet::new();
        let (mut outages, mut restarts) = (0, 0);
        for seed in 1..=600 {
            let (plan, _) = Plan::of(seed);
            scenarios.insert(plan.scenario.name());
            if plan.scenario == Scenario::LargeRollout {
                assert!((20..=50).contains(&plan.target), "{plan:?}");
                assert_eq!(plan.max_unavailable, plan.target / 5);
            }
            if let Some((at, len)) = plan.outage {
                outages += 1;
                assert!(at < plan.window / 2, "{plan:?}");
                assert!((30..=60).contains(&len.as_secs()), "{plan:?}");
                assert!(plan.faults_for(true) >= at + len);
            } else {
                assert_eq!(plan.faults_for(true), plan.window);
            }
            assert_eq!(plan.faults_for(false), plan.window);
            let without = plan.events(false, false);
            assert!(
                !without
                    .iter()
                    .any(|(_, e)| matches!(e, Event::Restart | Event::Outage(_)))
            );
            let with = plan.events(true, true);
            restarts += with
                .iter()
                .filter(|(_, e)| matches!(e, Event::Restart))
                .count();
            assert!(with.windows(2).all(|w| w[0].0 <= w[1].0), "{with:?}");
            assert!(with.iter().all(|(at, _)| *at < plan.window), "{with:?}");
        }
        assert_eq!(scenarios.len(), Scenario::ALL.len(), "{scenarios:?}");
        assert!((100..200).contains(&outages), "{outages}");
        assert!((80..170).contains(&restarts), "{restarts}");
    }

    /// Stale lists, outages and API server restarts are on unless left out one by one.
    #[test]
    fn every_api_fault_is_on_by_default() {
        let on = |a: &Args| (a.stale_lists, a.outages, a.apiserver_restarts);
        let all = Args::try_parse_from(["inplace-faults"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(on(&all), (true, true, true));
        assert_eq!(rates(&all).stale_list, Rates::default().stale_list);
        let some = Args::try_parse_from(["inplace-faults", "--no-outages", "--no-stale-lists"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(on(&some), (false, false, true));
        assert_eq!(rates(&some).stale_list, 0);
        let none = Args::try_parse_from(["inplace-faults", "--no-apiserver-restarts"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(on(&none), (true, true, false));
    }
}
