//! inplace-nodesim: registers N simulated nodes and plays the kubelet for the pods bound
//! to them. See `inplace_tests::nodesim`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use inplace_tests::nodesim::costs::{Calibration, ShapeCosts};
use inplace_tests::nodesim::duration::parse_flag;
use inplace_tests::nodesim::fault::{Faults, GlobalFaults};
use inplace_tests::nodesim::images::ImageStores;
use inplace_tests::nodesim::model::SimConfig;
use inplace_tests::nodesim::nodeimages::{self, NodeImagesConfig};
use inplace_tests::nodesim::nodes::{NodeConfig, Nodes, Taint};
use inplace_tests::nodesim::pods::{self, PodsConfig};
use inplace_tests::nodesim::stats::Stats;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Simulated Kubernetes nodes: N Nodes with heartbeats and Leases, and a kubelet
/// stand-in for every pod bound to them (Pending → Running → Ready, in-place restarts on
/// image changes, readiness gates, graceful deletion, injected faults), and the node
/// daemon's completion of in-place updates (unless `--no-daemon`).
#[derive(Debug, Parser)]
#[command(name = "inplace-nodesim", version)]
struct Args {
    /// Admin kubeconfig of the cluster.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: std::path::PathBuf,
    /// Number of nodes.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// Node names are <prefix><index>.
    #[arg(long, default_value = "sim-node-")]
    name_prefix: String,
    /// Extra node label KEY=VALUE (repeatable).
    #[arg(long = "node-label", value_name = "KEY=VALUE")]
    node_labels: Vec<String>,
    /// Node taint KEY[=VALUE]:EFFECT (repeatable; none by default).
    #[arg(long = "node-taint", value_name = "KEY[=VALUE]:EFFECT")]
    node_taints: Vec<Taint>,
    /// Node capacity and allocatable: CPU.
    #[arg(long, default_value = "32")]
    cpu: String,
    /// Node capacity and allocatable: memory.
    #[arg(long, default_value = "128Gi")]
    memory: String,
    /// Node capacity and allocatable: pods.
    #[arg(long, default_value_t = 110)]
    max_pods: u32,
    /// From first sight of a pod to its containers running.
    #[arg(long, default_value = "200ms", value_parser = parse_flag)]
    start_delay: i64,
    /// From a container starting to it being ready.
    #[arg(long, default_value = "500ms", value_parser = parse_flag)]
    ready_delay: i64,
    /// From seeing a changed container image to the new container running.
    #[arg(long, default_value = "1s", value_parser = parse_flag)]
    update_delay: i64,
    /// Longest wait between seeing a deletion and the final delete (min with the pod's grace period).
    #[arg(long, default_value = "2s", value_parser = parse_flag)]
    max_grace: i64,
    /// How long a crash-looping container runs before it exits.
    #[arg(long, default_value = "1s", value_parser = parse_flag)]
    crash_run: i64,
    /// First CrashLoopBackOff wait (doubles per crash up to --crash-backoff-max).
    #[arg(long, default_value = "10s", value_parser = parse_flag)]
    crash_backoff: i64,
    #[arg(long, default_value = "5m", value_parser = parse_flag)]
    crash_backoff_max: i64,
    /// Pull time of an image a node does not hold (0: every image is on every node). With
    /// it, a container whose image changes in place waits for the pull, and the
    /// NodeImages of the simulated nodes are answered (pulled, then reported Succeeded).
    #[arg(long, default_value = "0s", value_parser = parse_flag)]
    pull_delay: i64,
    /// Per-pod costs measured on the real kubelet (the JSON object, or the output of
    /// `inplace-rollout-bench --scenario versus-deployment-real` with its `... costs: {...}`
    /// lines): they replace --start-delay, --ready-delay, --update-delay and --pull-delay
    /// where measured, and add the sandbox, init containers and drains (see
    /// `inplace_tests::nodesim::costs`).
    #[arg(long, value_name = "FILE")]
    calibration: Option<std::path::PathBuf>,
    /// The shape to take from --calibration (default: the last object in it).
    #[arg(long, value_name = "SHAPE", requires = "calibration")]
    calibration_shape: Option<String>,
    /// ErrImagePull becomes ImagePullBackOff after this long.
    #[arg(long, default_value = "5s", value_parser = parse_flag)]
    pull_backoff_after: i64,
    /// Fault for every pod without a sim.inplace.dev/fault annotation:
    /// image-pull-failure[=TEXT], crash-loop, slow-start=DURATION (comma-separated).
    #[arg(long, default_value = "none")]
    fault: String,
    /// Share of pods (0..1, by UID hash) that get --fault.
    #[arg(long, default_value_t = 1.0)]
    fault_ratio: f64,
    /// Period of the status resync (the kubelet's status manager: 10s): a pod whose status
    /// in the API server was changed by another writer since the simulator's last write
    /// (the node lifecycle controller's Ready=False, say) gets its status again. 0: never.
    #[arg(long, default_value = "10s", value_parser = parse_flag)]
    status_resync: i64,
    /// Pod status patches and deletes in flight at most.
    #[arg(long, default_value_t = 32)]
    max_inflight: usize,
    /// Node API calls (leases, heartbeats, registration) in flight at most.
    #[arg(long, default_value_t = 16)]
    node_max_inflight: usize,
    /// Lease renewal period per node.
    #[arg(long, default_value = "10s", value_parser = parse_flag)]
    lease_interval: i64,
    /// Node status heartbeat period per node.
    #[arg(long, default_value = "1m", value_parser = parse_flag)]
    node_status_interval: i64,
    /// Period of the report line on stderr.
    #[arg(long, default_value = "30s", value_parser = parse_flag)]
    stats_interval: i64,
    /// Leave out the node daemon's in-place completion (`inplace_tests::nodesim::daemon`):
    /// the controller then completes every in-place update itself, as on nodes without
    /// the daemon.
    #[arg(long)]
    no_daemon: bool,
    /// Delete the simulated nodes (and their Leases) on SIGTERM/SIGINT.
    #[arg(long)]
    delete_nodes_on_exit: bool,
}

fn parse_labels(raw: &[String]) -> Result<BTreeMap<String, String>> {
    raw.iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => bail!("--node-label wants KEY=VALUE, got {kv:?}"),
        })
        .collect()
}

async fn client(path: &std::path::Path) -> Result<Client> {
    let kubeconfig = Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    Client::try_from(config).context("building the API client")
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let faults = Faults::parse(&args.fault).context("--fault")?;
    if !(0.0..=1.0).contains(&args.fault_ratio) {
        bail!("--fault-ratio must be between 0 and 1");
    }
    let labels = parse_labels(&args.node_labels)?;
    let client = client(&args.kubeconfig).await?;
    let stats = Arc::new(Stats::default());
    let (stop_tx, stop_rx) = watch::channel(false);

    let sim = SimConfig {
        start_delay: args.start_delay,
        ready_delay: args.ready_delay,
        update_delay: args.update_delay,
        max_grace: args.max_grace,
        crash_run: args.crash_run,
        crash_backoff: args.crash_backoff,
        crash_backoff_max: args.crash_backoff_max,
        pull_backoff_after: args.pull_backoff_after,
        shape: ShapeCosts::default(),
    };
    let (sim, pull_delay) = match &args.calibration {
        None => (sim, args.pull_delay),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading --calibration {}", path.display()))?;
            let cal = Calibration::find(&text, args.calibration_shape.as_deref())
                .with_context(|| format!("--calibration {}", path.display()))?;
            let (sim, pull) = cal.apply(&sim);
            eprintln!("nodesim: calibration {cal:?}");
            (sim, pull.unwrap_or(args.pull_delay))
        }
    };
    let images =
        (pull_delay > 0).then(|| Arc::new(std::sync::Mutex::new(ImageStores::new(pull_delay))));
    let pods_cfg = PodsConfig {
        sim,
        node_prefix: args.name_prefix.clone(),
        node_count: args.nodes,
        faults: GlobalFaults {
            faults,
            ratio: args.fault_ratio,
        },
        max_inflight: args.max_inflight,
        retry_after: 1_000,
        status_resync: args.status_resync,
        images: images.clone(),
        daemon: !args.no_daemon,
    };
    if let Some(stores) = images {
        tokio::spawn(nodeimages::run(
            NodeImagesConfig {
                node_prefix: args.name_prefix.clone(),
                node_count: args.nodes,
                max_inflight: args.max_inflight,
            },
            client.clone(),
            stores,
            stats.clone(),
            stop_rx.clone(),
        ));
    }
    let pods_task = tokio::spawn(pods::run(
        pods_cfg,
        client.clone(),
        stats.clone(),
        stop_rx.clone(),
    ));

    let nodes = Nodes::new(
        client.clone(),
        NodeConfig {
            prefix: args.name_prefix.clone(),
            count: args.nodes,
            cpu: args.cpu.clone(),
            memory: args.memory.clone(),
            max_pods: args.max_pods,
            labels,
            taints: args.node_taints.clone(),
            lease_interval: args.lease_interval,
            lease_duration_seconds: 40,
            status_interval: args.node_status_interval,
            max_inflight: args.node_max_inflight,
        },
    );
    let mut sigterm = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("SIGINT handler")?;

    let t0 = Instant::now();
    tokio::select! {
        r = nodes.register(&stats) => r.context("registering the nodes")?,
        _ = sigterm.recv() => return finish(&stats, stop_tx, pods_task, None).await,
        _ = sigint.recv() => return finish(&stats, stop_tx, pods_task, None).await,
    }
    eprintln!(
        "nodesim: registered {} nodes ({}0..{}) in {:.1}s",
        args.nodes,
        args.name_prefix,
        args.nodes.saturating_sub(1),
        t0.elapsed().as_secs_f64()
    );
    let keep_alive = {
        let (nodes, stats, stop) = (nodes.clone(), stats.clone(), stop_rx.clone());
        tokio::spawn(async move { nodes.keep_alive(stats, stop).await })
    };
    let mut report = tokio::time::interval(Duration::from_millis(
        u64::try_from(args.stats_interval)
            .unwrap_or(30_000)
            .max(100),
    ));
    report.tick().await;
    loop {
        tokio::select! {
            _ = report.tick() => eprintln!("{}", stats.line()),
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
        }
    }
    let delete = args.delete_nodes_on_exit.then_some(nodes);
    let _ = stop_tx.send(true);
    let _ = keep_alive.await;
    finish(&stats, stop_tx, pods_task, delete).await
}

async fn finish(
    stats: &Stats,
    stop_tx: watch::Sender<bool>,
    pods_task: tokio::task::JoinHandle<()>,
    delete: Option<Nodes>,
) -> Result<()> {
    let _ = stop_tx.send(true);
    let _ = pods_task.await;
    eprintln!("{}", stats.line());
    if let Some(nodes) = delete {
        let n = nodes.delete_all().await;
        eprintln!("nodesim: deleted {n} nodes");
    }
    Ok(())
}
