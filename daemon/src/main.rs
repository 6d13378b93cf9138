//! `inplace-daemon`: one per node. See the crate docs and `daemon/README.md`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use inplace_daemon::api::{ContainerRecreateRequest, NodeImage};
use inplace_daemon::apiserver::{self, Health};
use inplace_daemon::cri::{self, CriClient};
use inplace_daemon::inplace::{self, Executor};
use inplace_daemon::kube_io::{self, RateLimiter};
use inplace_daemon::logging::{self, LogFormat};
use inplace_daemon::metrics::Metrics;
use inplace_daemon::pod_cache::PodCache;
use inplace_daemon::puller::provider_exec::CredentialProviders;
use inplace_daemon::puller::{Puller, PullerConfig};
use inplace_daemon::recorder::EventRecorder;
use inplace_daemon::{containerd_events, crr, server};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector;
use tokio::sync::{Notify, watch};

#[derive(Debug, Parser)]
#[command(
    name = "inplace-daemon",
    version,
    about = "inplace node daemon: image pre-download, in-place update completion, container recreate requests"
)]
struct Args {
    /// This node's name (only its NodeImage, pods and CRRs are watched).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// CRI endpoint (`unix:///path` or `/path`); default: the first of containerd.sock,
    /// containerd/containerd.sock, crio.sock, crio/crio.sock found under /run, /var/run.
    #[arg(long, env = "CRI_ENDPOINT")]
    cri_endpoint: Option<String>,
    /// Node-wide cap on concurrent image pulls.
    #[arg(long, default_value_t = 2)]
    max_concurrent_pulls: usize,
    /// An image pull attempt that fetches no new bytes for this long (seconds) is
    /// cancelled and counted as a failed attempt, freeing its pull slot (containerd only:
    /// progress is read from its content store); 0 turns this off.
    #[arg(long, default_value_t = inplace_daemon::puller::stall::DEFAULT_STALL_WINDOW.as_secs())]
    pull_stall_timeout_seconds: u64,
    /// Address of /healthz and /metrics.
    #[arg(long, default_value = "0.0.0.0:10231")]
    addr: SocketAddr,
    /// Seconds an API request (other than a watch) may go unanswered before it fails and
    /// is retried (kube's client has no such bound).
    #[arg(long, default_value_t = inplace_proto::request_timeout::DEFAULT_REQUEST_TIMEOUT.as_secs())]
    api_request_timeout: u64,
    /// Timeout of every CRI call but PullImage (seconds).
    #[arg(long, default_value_t = 5)]
    runtime_timeout_seconds: u64,
    /// NodeImage status writes per second (token bucket refill).
    #[arg(long, default_value_t = 1.0)]
    status_qps: f64,
    /// NodeImage status write burst.
    #[arg(long, default_value_t = 5)]
    status_burst: u32,
    /// How often pods in an in-place update (and active CRRs) are re-checked through CRI (ms).
    #[arg(long, default_value_t = 500)]
    poll_interval_ms: u64,
    /// Apply cpu/memory in-place resizes through CRI UpdateContainerResources when the
    /// runtime's limits differ from the pod spec (for kubelets without `pods/resize`;
    /// see daemon/README.md for the caveats). Off: resizes are only verified.
    #[arg(long)]
    apply_resize_via_cri: bool,
    /// The only namespace whose Secrets (pull secrets, mirrored there by the controller)
    /// are read; the DaemonSet sets it to its own namespace. Unset: any namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    secrets_namespace: Option<String>,
    /// Log lines as `text` or as `json` (one object per line, with the span naming the pod,
    /// ContainerRecreateRequest or image worked on); the level comes from RUST_LOG.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "INPLACE_LOG_FORMAT")]
    log_format: LogFormat,
    /// The kubelet's `CredentialProviderConfig` (YAML or JSON): image credential provider
    /// plugins asked for images no pull secret has credentials of. Needs
    /// --image-credential-provider-bin-dir; unset (the default): no providers.
    #[arg(long, requires = "image_credential_provider_bin_dir")]
    image_credential_provider_config: Option<std::path::PathBuf>,
    /// The directory of the credential provider plugin binaries (each named as its
    /// provider), as the kubelet's flag of the same name.
    #[arg(long, requires = "image_credential_provider_config")]
    image_credential_provider_bin_dir: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    logging::init(args.log_format, "info")?;
    let socket = cri::resolve_endpoint(
        args.cri_endpoint.as_deref(),
        &cri::DEFAULT_SOCKET_DIRS,
        cri::is_socket,
    )?;
    let cri = CriClient::new(&socket, Duration::from_secs(args.runtime_timeout_seconds))?;
    let runtime_name = match cri.version().await {
        Ok(v) => {
            tracing::info!(socket = %socket.display(), runtime = %v.runtime_name, version = %v.runtime_version, "CRI runtime");
            v.runtime_name
        }
        Err(e) => {
            tracing::warn!(socket = %socket.display(), error = %e, "CRI runtime not answering yet");
            "containerd".to_string()
        }
    };
    let config = kube::Config::infer()
        .await
        .context("cannot build a Kubernetes client (in-cluster or KUBECONFIG)")?;
    let client = apiserver::client(config, Duration::from_secs(args.api_request_timeout.max(1)))
        .context("cannot build a Kubernetes client (in-cluster or KUBECONFIG)")?;

    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::new(&mut registry);
    let health = Arc::new(Health::default());
    let poll = Duration::from_millis(args.poll_interval_ms.max(50));
    let node = args.node_name.clone();
    // Kubernetes Events: restarts and CRR outcomes on the pod, failed pulls on the NodeImage.
    let recorder = EventRecorder::start(client.clone(), &node);

    // runtime liveness for /healthz
    {
        let (cri, health) = (cri.clone(), health.clone());
        tokio::spawn(async move {
            loop {
                match cri.version().await {
                    Ok(_) => health.runtime_ok.store(true, Ordering::Relaxed),
                    Err(e) => {
                        health.runtime_ok.store(false, Ordering::Relaxed);
                        if let Ok(mut m) = health.runtime_error.lock() {
                            *m = e.to_string();
                        }
                    }
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        });
    }

    // image puller
    let ni_api: Api<NodeImage> = Api::all(client.clone());
    let (snap_tx, snap_rx) = watch::channel(None);
    let (puller, status_rx) = Puller::new(
        cri.clone(),
        PullerConfig {
            max_concurrent: args.max_concurrent_pulls,
            stall_window: Some(Duration::from_secs(args.pull_stall_timeout_seconds))
                .filter(|w| !w.is_zero()),
        },
        kube_io::secret_fetcher(client.clone(), args.secrets_namespace.clone()),
        metrics.clone(),
    );
    let mut puller = puller.with_events(recorder.clone(), &node);
    if let (Some(config), Some(bin_dir)) = (
        &args.image_credential_provider_config,
        &args.image_credential_provider_bin_dir,
    ) {
        let providers = CredentialProviders::load(config, bin_dir)?;
        tracing::info!(config = %config.display(), bin_dir = %bin_dir.display(), providers = ?providers.names(), "image credential providers");
        puller = puller.with_credential_providers(Arc::new(providers));
    }
    tokio::spawn(kube_io::watch_node_image(
        ni_api.clone(),
        node.clone(),
        snap_tx,
        health.clone(),
    ));
    tokio::spawn(kube_io::write_node_image_status(
        ni_api,
        node.clone(),
        status_rx,
        snap_rx.clone(),
        RateLimiter::new(args.status_qps, args.status_burst),
        metrics.clone(),
    ));
    tokio::spawn(puller.run(snap_rx));

    // pods: in-place executor
    let (store, writer) = reflector::store();
    let pods = PodCache::new(store);
    let notify = Arc::new(Notify::new());
    tokio::spawn(inplace::watch_pods(
        Api::<Pod>::all(client.clone()),
        node.clone(),
        writer,
        notify.clone(),
        health.clone(),
    ));
    let mut executor = Executor::new(
        cri.clone(),
        client.clone(),
        pods.clone(),
        notify.clone(),
        metrics.clone(),
        runtime_name.clone(),
        poll,
    );
    executor.apply_resize = args.apply_resize_via_cri;
    executor.recorder = recorder.clone();
    tokio::spawn(executor.run());

    // container recreate requests
    let (crr_store, crr_writer) = reflector::store();
    let crr_notify = Arc::new(Notify::new());
    tokio::spawn(crr::watch_crrs(
        Api::<ContainerRecreateRequest>::all(client.clone()),
        node.clone(),
        crr_writer,
        crr_notify.clone(),
        health.clone(),
    ));
    tokio::spawn(
        crr::CrrHandler::new(
            cri.clone(),
            client.clone(),
            crr_store,
            pods,
            crr_notify.clone(),
            metrics.clone(),
            poll,
        )
        .with_events(recorder.clone())
        .run(),
    );

    // containerd events wake both at once (polling stays the fallback)
    {
        let m = metrics.clone();
        tokio::spawn(containerd_events::follow(
            socket.clone(),
            vec![notify.clone(), crr_notify.clone()],
            move |_| {
                m.runtime_events.inc();
            },
        ));
    }

    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    tracing::info!(node = %node, addr = %args.addr, max_concurrent_pulls = args.max_concurrent_pulls, "inplace-daemon started");
    let registry = Arc::new(registry);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot install the SIGTERM handler")?;
    tokio::select! {
        r = server::serve(listener, health, registry) => r.context("HTTP server")?,
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; exiting"),
        _ = term.recv() => tracing::info!("SIGTERM; exiting"),
    }
    Ok(())
}
