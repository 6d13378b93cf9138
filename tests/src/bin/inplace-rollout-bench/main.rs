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
//! * `versus-deployment-real`: on the bed's real node, with the product installed
//!   (`tests/testbed/up --install`), a CloneSet of `--real-pods` pods updated in place
//!   against a Deployment rolling the same change (same template, maxUnavailable, maxSurge
//!   0), for `--shape plain|sidecars|pull`; prints `versus-deployment-real[SHAPE]:
//!   in-place X s, deployment Y s, speed-up R`, each leg's per-pod breakdown and a
//!   `costs:` JSON line (sandbox, init, start, ready, drain, pull, in-place restart). Not
//!   part of `all`; `pull` needs the gate PreDownloadImageForInPlaceUpdate on.
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

mod clonesets;
mod controller;
mod fleet;
mod per_pod;
mod predownload;
mod rollout;
mod shape;
mod versus;
mod versus_real;
mod versus_shape;

use clonesets::*;
use controller::*;
use fleet::*;
use per_pod::*;
use rollout::*;
use shape::Shape;
use versus::*;

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
    /// On the real node: the installed product's CloneSet in place against a Deployment.
    VersusDeploymentReal,
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
    /// The pod shape ([`shape`]). `versus-deployment-real`: default `plain`.
    /// `versus-deployment`: the shape whose real-node costs the simulator charges
    /// (`--calibration`); without it, the equal-cost comparison.
    #[arg(long, value_enum)]
    shape: Option<Shape>,
    /// `versus-deployment --shape`: the real node's per-pod costs, as
    /// `--scenario versus-deployment-real` prints them (`... costs: {...}` lines; the one
    /// of the shape is used).
    #[arg(long, value_name = "FILE")]
    calibration: Option<PathBuf>,
    /// `versus-deployment-real`: pods of each workload (all on the one real node).
    #[arg(long, default_value_t = 30)]
    real_pods: u32,
    /// `versus-deployment-real --shape pull`: megabytes of random data in the new image.
    #[arg(long, default_value_t = 100)]
    pull_mb: u32,
    /// `versus-deployment-real --shape pull`: the registry's bandwidth through the proxy, Mbit/s.
    #[arg(long, default_value_t = 80.0)]
    pull_mbit: f64,
    /// `versus-deployment-real --shape pull`: the proxy's port (beside the registry's address).
    #[arg(long, default_value_t = 5099)]
    pull_proxy_port: u16,
    /// RUST_LOG of the controller.
    #[arg(long, default_value = "info")]
    controller_log: String,
    /// `rollout`, `predownload`, `versus-deployment`: the simulated nodes run the node
    /// daemon's in-place completion, as every install runs the DaemonSet;
    /// `--sim-daemon=false` leaves it out (the simulator's `--no-daemon`: the controller
    /// completes every pod itself).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    sim_daemon: bool,
}

/// The simulator's flags `flags`, with `--no-daemon` when `--sim-daemon=false`.
fn with_sim_daemon<'a>(args: &Args, flags: &[&'a str]) -> Vec<&'a str> {
    let mut out = flags.to_vec();
    if !args.sim_daemon {
        out.push("--no-daemon");
    }
    out
}

/// How the simulated nodes complete in-place updates, for a report line.
fn sim_daemon_words(args: &Args) -> &'static str {
    if args.sim_daemon {
        "the simulated nodes run the node daemon's completion"
    } else {
        "no node daemon (--sim-daemon=false): the controller completes every pod"
    }
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
    if args.scenario == Scenario::VersusDeploymentReal {
        // The real kubelet and the installed product: neither a controller of ours nor the simulator.
        return versus_real::versus_real(args, &client, report)
            .await
            .inspect_err(|e| {
                report.add(format!(
                    "versus-deployment-real[{}]: FAILED: {e:#}",
                    args.shape.unwrap_or(Shape::Plain).name()
                ));
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
