//! `inplace-controller`: the CloneSet controller (`apps.kruise.io/v1alpha1`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use inplace_controller::api_metrics::ApiMetricsLayer;
use inplace_controller::discovery;
use inplace_controller::events::EventSink;
use inplace_controller::feature_gates::FeatureGates;
use inplace_controller::fence::{self, Fence, RenewalObserverLayer, WriteGateLayer};
use inplace_controller::imagepulljob;
use inplace_controller::leader::{Election, LeaseConfig};
use inplace_controller::logging::{self, LogFormat};
use inplace_controller::metrics::Metrics;
use inplace_controller::plan::PlanOptions;
use inplace_controller::request_timeout::{DEFAULT_REQUEST_TIMEOUT, RequestTimeoutLayer};
use inplace_controller::runtime::{self, Settings};
use inplace_controller::server::{Health, Phase};
use inplace_controller::watch::Scope;
use kube::Client;
use kube::client::ClientBuilder;
use tracing::{info, warn};

#[derive(Debug, Parser)]
#[command(
    name = "inplace-controller",
    version,
    about = "The inplace CloneSet controller"
)]
struct Args {
    /// Kubeconfig to use (default: in-cluster config, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long, env = "INPLACE_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Manage CloneSets of this namespace only (default: all namespaces).
    #[arg(long, env = "INPLACE_NAMESPACE")]
    namespace: Option<String>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080", env = "INPLACE_METRICS_ADDR")]
    metrics_addr: SocketAddr,
    /// Elect a leader on a coordination.k8s.io/v1 Lease before reconciling.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    #[arg(long, default_value = "inplace-controller")]
    lease_name: String,
    /// Namespace of the Lease (default: $POD_NAMESPACE, then --namespace, then "default").
    #[arg(long)]
    lease_namespace: Option<String>,
    /// Lease validity in seconds after the last renewal.
    #[arg(long, default_value_t = 15)]
    lease_duration: u64,
    /// Identity in the Lease (default: $POD_NAME or host name, plus a random suffix).
    #[arg(long)]
    identity: Option<String>,
    /// CloneSets reconciled concurrently; the ones waiting are taken in the order they fell
    /// due, like the reference's work queue (a busy CloneSet does not starve the others).
    #[arg(long, default_value_t = 3)]
    workers: u16,
    /// Seconds after which an unobserved write is given up on.
    #[arg(long, default_value_t = 300)]
    expectation_timeout: u64,
    /// Seconds an API request (other than a watch) may go unanswered before it fails and
    /// the reconcile that made it is requeued (kube's client has no such bound).
    #[arg(long, default_value_t = DEFAULT_REQUEST_TIMEOUT.as_secs())]
    api_request_timeout: u64,
    /// Concurrent API calls per action phase of one CloneSet.
    #[arg(long, default_value_t = inplace_controller::runtime::context::DEFAULT_API_PARALLELISM)]
    api_parallelism: usize,
    /// Feature gates, e.g. `CloneSetPartitionRollback=true,CloneSetShortHash=true`.
    #[arg(long, default_value = "")]
    feature_gates: String,
    /// Do not count PreparingDelete pods in replicas, for every CloneSet.
    #[arg(long)]
    cloneset_scaling_exclude_preparing_delete: bool,
    /// Run the ImagePullJob controller (NodeImage tags, job status) next to the CloneSet one.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "INPLACE_IMAGEPULLJOB_CONTROLLER")]
    imagepulljob_controller: bool,
    /// Run the NodeImage lifecycle (a NodeImage per Ready node, owned by it; NodeImages of
    /// deleted nodes removed; tags of deleted jobs and past their TTL dropped; tags a node
    /// never answers for failed). Only without --namespace: it must see every job.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "INPLACE_NODEIMAGE_LIFECYCLE")]
    nodeimage_lifecycle: bool,
    /// Image pre-download pulls on the nodes of the pods that update next first (the
    /// CloneSet's update order, recorded on the jobs it creates); false: by node name.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "INPLACE_PREDOWNLOAD_UPDATE_ORDER")]
    predownload_update_order: bool,
    /// ImagePullJobs reconciled concurrently (the waiting ones in the order they fell due).
    #[arg(long, default_value_t = 2)]
    imagepulljob_workers: u16,
    /// Run the ContainerRecreateRequest controller (what OpenKruise's CRR webhook and
    /// manager do: labels, statusContext, one active request per pod, not-ready, deadline,
    /// TTL) next to the CloneSet one.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "INPLACE_CRR_CONTROLLER")]
    crr_controller: bool,
    /// Namespace the pull secrets of ImagePullJobs are mirrored into, the only one whose
    /// Secrets the daemon reads (default: $POD_NAMESPACE; neither: NodeImages name the
    /// jobs' own Secrets).
    #[arg(long, env = "INPLACE_SECRETS_NAMESPACE")]
    secrets_namespace: Option<String>,
    /// Log lines as `text` or as `json` (one object per line, with the span naming the
    /// object being reconciled); the level comes from RUST_LOG.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "INPLACE_LOG_FORMAT")]
    log_format: LogFormat,
}

fn feature_gates(args: &Args) -> anyhow::Result<FeatureGates> {
    let base = PlanOptions {
        exclude_preparing_delete: args.cloneset_scaling_exclude_preparing_delete,
        ..PlanOptions::default()
    };
    Ok(inplace_controller::feature_gates::parse(
        &args.feature_gates,
        base,
    )?)
}

/// The client the reconcilers use (its writes gated by `fence`) and the one the leader
/// election renews the Lease with (each successful renewal of a Lease held by `identity`
/// opens `fence` again).
/// Both count their requests (`inplace_api_requests_total`).
async fn clients(
    args: &Args,
    fence: &Fence,
    identity: &str,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<(Client, Client)> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    // A request nobody answers fails after this bound instead of holding its reconcile
    // (and with it every later reconcile of the object) forever.
    let timeout = RequestTimeoutLayer(Duration::from_secs(args.api_request_timeout.max(1)));
    // The last layer added is the outermost: the metrics see the gate's refusals and the
    // timeouts.
    let gated = ClientBuilder::try_from(config.clone())?
        .with_layer(&timeout)
        .with_layer(&WriteGateLayer(fence.clone()))
        .with_layer(&ApiMetricsLayer(metrics.clone()))
        .build();
    let election = ClientBuilder::try_from(config)?
        .with_layer(&timeout)
        .with_layer(&RenewalObserverLayer {
            fence: fence.clone(),
            identity: identity.to_owned(),
        })
        .with_layer(&ApiMetricsLayer(metrics.clone()))
        .build();
    Ok((gated, election))
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// jemalloc (see `inplace_controller::allocator`): it returns freed memory to the kernel
/// by itself, where glibc's malloc kept it resident.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How often the heap statistics are logged (debug level, `heap-stats` builds only).
#[cfg(all(not(target_env = "msvc"), feature = "heap-stats"))]
const HEAP_STATS_PERIOD: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    logging::init(args.log_format, "info,kube_lease_manager=warn")?;

    let gates = feature_gates(&args)?;
    gates.log_notes();
    let mut options = gates.plan;
    // Fenced leadership: with an election, no write leaves this process unless the Lease
    // was renewed recently enough that no other replica can hold it yet.
    let lease_duration = Duration::from_secs(args.lease_duration.max(2));
    let fence = if args.leader_elect {
        Fence::enforced(fence::validity(
            lease_duration,
            fence::default_margin(lease_duration),
        ))
    } else {
        Fence::unenforced()
    };
    let metrics = Arc::new(Metrics::new());
    let identity = args.identity.clone().unwrap_or_else(|| {
        let base = std::env::var("POD_NAME")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "inplace-controller".into());
        format!("{base}-{:08x}", rand::random::<u32>())
    });
    let (client, election_client) = clients(&args, &fence, &identity, &metrics)
        .await
        .context("connecting to the API server")?;
    let caps = discovery::discover_retrying(&client, discovery::startup_backoff(), |e, wait| {
        warn!(error = %e, retry_in = ?wait, "discovering the API server failed; retrying");
    })
    .await
    .context("discovering the API server")?;
    info!(
        version = %caps.git_version,
        pod_resize = caps.pod_resize,
        events_v1 = caps.events_v1,
        "API server discovered"
    );
    if options.in_place_vertical_scaling && !caps.pod_resize && !caps.at_least(1, 27) {
        warn!(
            version = %caps.git_version,
            "InPlaceWorkloadVerticalScaling requested but the server serves no pods/resize and \
             forbids resource changes in the pod spec: cpu/memory changes will recreate pods"
        );
        options.in_place_vertical_scaling = false;
    }
    // The planner decides where cpu/memory changes go from this capability.
    options.pod_resize = caps.pod_resize;

    if options.pre_download_image && !args.imagepulljob_controller {
        warn!(
            "PreDownloadImageForInPlaceUpdate creates ImagePullJobs, but --imagepulljob-controller=false: nothing will pull them here"
        );
    }

    #[cfg(not(target_env = "msvc"))]
    {
        use inplace_controller::allocator;
        match allocator::Settings::read() {
            Ok(s) => info!(
                malloc_conf = s.malloc_conf,
                narenas = s.narenas,
                background_thread = s.background_thread,
                dirty_decay_ms = s.dirty_decay_ms,
                muzzy_decay_ms = s.muzzy_decay_ms,
                "allocator: jemalloc"
            ),
            Err(e) => warn!(error = %e, "reading the jemalloc settings failed"),
        }
        #[cfg(feature = "heap-stats")]
        tokio::spawn(allocator::log_heap_stats(HEAP_STATS_PERIOD));
    }

    let health = Arc::new(Health::default());
    let (bound, _server) =
        inplace_controller::server::serve(args.metrics_addr, metrics.clone(), health.clone())
            .await
            .with_context(|| format!("binding {}", args.metrics_addr))?;
    info!(%bound, "serving /metrics, /healthz, /readyz");

    let scope = Scope {
        namespace: args.namespace.clone(),
    };

    let mut election = None;
    if args.leader_elect {
        let lease_ns = args
            .lease_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .or_else(|| args.namespace.clone())
            .unwrap_or_else(|| "default".into());
        let config = LeaseConfig {
            namespace: lease_ns,
            name: args.lease_name.clone(),
            identity: identity.clone(),
            duration: lease_duration,
            // Renew at half-life: the fence (validity = duration - margin) then has half the
            // duration less the margin to spare for a slow renewal before writes stop.
            grace: (lease_duration / 2).max(Duration::from_secs(1)),
        };
        info!(lease = %format!("{}/{}", config.namespace, config.name), %identity, "joining leader election");
        let mut e = Election::start(election_client, &config)
            .await
            .context("starting leader election")?;
        // In the election: this replica serves (and is Ready) as a standby.
        health.set_phase(Phase::Standby);
        tokio::select! {
            r = e.acquired() => r.context("leader election stopped")?,
            () = shutdown_signal() => {
                info!("shutdown before becoming leader");
                return Ok(());
            }
        }
        info!(%identity, "became leader");
        election = Some(e);
    }
    metrics.leader.set(1);
    // Ready again once the caches are synced (runtime::run).
    health.set_phase(Phase::Leading);

    let events = EventSink::start(client.clone(), Some(identity.clone()), 4096, caps.events_v1);
    let settings = Settings {
        scope,
        workers: args.workers.max(1),
        expectation_timeout: Duration::from_secs(args.expectation_timeout.max(1)),
        api_parallelism: args.api_parallelism.max(1),
        plan_options: options,
        event_handler_optimization: gates.event_handler_optimization,
        deletion_protection: gates.deletion_protection,
        predownload_update_order: args.predownload_update_order,
        ..Settings::default()
    };

    let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<()>();
    // Without an election the sender is kept to the end: the lease is never "lost".
    let mut _unelected_tx = None;
    if let Some(mut e) = election {
        tokio::spawn(async move {
            e.lost().await;
            let _ = lost_tx.send(());
        });
    } else {
        _unelected_tx = Some(lost_tx);
    }
    let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lost_flag = lost.clone();
    let stop = async move {
        tokio::select! {
            () = shutdown_signal() => info!("shutting down"),
            _ = lost_rx => {
                lost_flag.store(true, Ordering::Relaxed);
                warn!("leader lease lost, stopping");
            }
        }
    };
    let stop = futures::FutureExt::shared(stop);
    let imagepulljob = args.imagepulljob_controller.then(|| {
        tokio::spawn(imagepulljob::run(
            client.clone(),
            Scope {
                namespace: args.namespace.clone(),
            },
            args.imagepulljob_workers.max(1),
            args.secrets_namespace
                .clone()
                .or_else(|| std::env::var("POD_NAMESPACE").ok())
                .filter(|ns| !ns.is_empty()),
            stop.clone(),
        ))
    });
    // ImageListPullJobs make ImagePullJobs: they run with the controller that pulls those
    let imagelistpulljob = args.imagepulljob_controller.then(|| {
        tokio::spawn(imagepulljob::list::run(
            client.clone(),
            Scope {
                namespace: args.namespace.clone(),
            },
            events.clone(),
            stop.clone(),
        ))
    });
    let lifecycle = match (args.nodeimage_lifecycle, &args.namespace) {
        (true, None) => Some(tokio::spawn(imagepulljob::nodeimages::run(
            client.clone(),
            stop.clone(),
        ))),
        (true, Some(ns)) => {
            info!(namespace = %ns, "NodeImage lifecycle off: it needs every namespace's ImagePullJobs");
            None
        }
        (false, _) => None,
    };
    let crr = args.crr_controller.then(|| {
        tokio::spawn(inplace_controller::crr::run(
            client.clone(),
            Scope {
                namespace: args.namespace.clone(),
            },
            events.clone(),
            stop.clone(),
        ))
    });
    let launch_priority = tokio::spawn(inplace_controller::launch_priority::run(
        client.clone(),
        Scope {
            namespace: args.namespace.clone(),
        },
        stop.clone(),
    ));
    health.stopping.store(false, Ordering::Relaxed);
    runtime::run(
        client,
        caps,
        settings,
        events,
        metrics.clone(),
        health.clone(),
        stop,
    )
    .await;
    if let Some(task) = imagepulljob
        && let Err(e) = task.await
    {
        warn!(error = %e, "ImagePullJob controller task failed");
    }
    if let Some(task) = imagelistpulljob
        && let Err(e) = task.await
    {
        warn!(error = %e, "ImageListPullJob controller task failed");
    }
    if let Some(task) = crr
        && let Err(e) = task.await
    {
        warn!(error = %e, "ContainerRecreateRequest controller task failed");
    }
    if let Err(e) = launch_priority.await {
        warn!(error = %e, "container launch-priority task failed");
    }
    if let Some(task) = lifecycle
        && let Err(e) = task.await
    {
        warn!(error = %e, "NodeImage lifecycle task failed");
    }
    health.stopping.store(true, Ordering::Relaxed);
    metrics.leader.set(0);
    if lost.load(Ordering::Relaxed) {
        bail!("lost the leader lease");
    }
    Ok(())
}
