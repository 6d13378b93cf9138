//! `--scenario versus-deployment-real`: a CloneSet updated in place by the installed
//! product against a Deployment rolling the same change, on the bed's real node (real
//! kubelet, containerd, images from the bed's registry), one after the other in one run.
//!
//! Shapes (`--shape`): `plain` (the app alone, its new image on the node), `sidecars` (an
//! init container and two sidecars that take seconds to become ready and to drain; only
//! the app's image changes), `pull` (the new image, `--pull-mb` MB that no node holds,
//! served through a token-bucket proxy of `--pull-mbit` Mbit/s in front of the registry;
//! the CloneSet with image pre-download, the image removed from the node between legs).

use std::io::Write as _;
use std::process::Output;

use inplace_proto::imagepulljob::ImagePullJob;
use k8s_openapi::api::core::v1::Event;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// The smallest requests the scheduler still accounts, so that ~30 pods (and the ones
/// terminating beside them) fit on the bed's one node.
fn tiny() -> serde_json::Value {
    json!({ "requests": { "cpu": "1m", "memory": "4Mi" } })
}

/// The test app's container (`/app/run`: busybox httpd on `port`), Ready once it serves.
fn app_container(name: &str, image: &str, port: u16) -> serde_json::Value {
    json!({
        "name": name,
        "image": image,
        "env": [{ "name": "PORT", "value": port.to_string() }],
        "resources": tiny(),
        "readinessProbe": { "httpGet": { "path": "/healthz", "port": port }, "periodSeconds": 1 },
    })
}

/// A sidecar made from the test image: ready only `ready_after` seconds after it starts
/// (a mesh proxy loading its configuration), and `drain` seconds to stop (a preStop hook,
/// as a proxy drains connections or a log agent flushes).
fn sidecar(name: &str, image: &str, port: u16, ready_after: u32, drain: u32) -> serde_json::Value {
    let mut c = app_container(name, image, port);
    c["readinessProbe"]["initialDelaySeconds"] = json!(ready_after);
    c["lifecycle"] = json!({ "preStop": { "exec": { "command": ["sleep", drain.to_string()] } } });
    c
}

/// The pod template both workloads share (labels `app=<app>`), on the real node.
pub(super) fn real_template(
    shape: Shape,
    app: &str,
    node: &str,
    image: &str,
    side_image: &str,
) -> serde_json::Value {
    let mut spec = json!({
        "nodeSelector": { "kubernetes.io/hostname": node },
        "terminationGracePeriodSeconds": 30,
        "containers": [app_container("app", image, 8080)],
    });
    if shape == Shape::Sidecars {
        spec["initContainers"] = json!([{
            "name": "init",
            "image": side_image,
            "command": ["sh", "-c", "sleep 1"],
            "resources": tiny(),
        }]);
        if let Some(list) = spec["containers"].as_array_mut() {
            list.push(sidecar("mesh", side_image, 8081, 3, 3));
            list.push(sidecar("log-agent", side_image, 8082, 2, 2));
        }
    }
    json!({ "metadata": { "labels": { "app": app } }, "spec": spec })
}

/// When each step of one pod's life was first seen through the watch.
#[derive(Debug, Default, Clone)]
pub(super) struct Timeline {
    /// In the first listing (the pods before the rollout).
    pub(super) existing: bool,
    pub(super) seen: Option<Instant>,
    pub(super) scheduled: Option<Instant>,
    /// The pod has an IP: its sandbox is up.
    pub(super) ip: Option<Instant>,
    /// Every init container terminated.
    pub(super) init_done: Option<Instant>,
    /// Every container running.
    pub(super) running: Option<Instant>,
    pub(super) ready: Option<Instant>,
    pub(super) deleting: Option<Instant>,
    pub(super) gone: Option<Instant>,
    /// The app container's spec image became the new one (an in-place update began).
    pub(super) new_image: Option<Instant>,
    /// The pod Ready with the app container running the new image.
    pub(super) new_image_ready: Option<Instant>,
    /// After `new_image`: the app container not running or not ready (the kubelet stopping it).
    pub(super) app_stopped: Option<Instant>,
    /// After `new_image`: the app container running the new image.
    pub(super) app_running_new: Option<Instant>,
    /// After `new_image`: the app container running the new image and ready (its readiness
    /// probe passed), which the pod's Ready waits for as it waits for the gate.
    pub(super) app_ready_new: Option<Instant>,
    /// After `new_image`: the `InPlaceUpdateReady` readiness gate False, then True again.
    pub(super) gate_false: Option<Instant>,
    pub(super) gate_true: Option<Instant>,
}

impl Timeline {
    fn saw(&mut self, p: &Pod, new_image: &str, now: Instant) {
        let first = |slot: &mut Option<Instant>, cond: bool| {
            if cond && slot.is_none() {
                *slot = Some(now);
            }
        };
        first(&mut self.seen, true);
        let spec = p.spec.as_ref();
        let status = p.status.as_ref();
        first(
            &mut self.scheduled,
            spec.and_then(|s| s.node_name.as_ref()).is_some(),
        );
        first(
            &mut self.ip,
            status
                .and_then(|s| s.pod_ip.as_deref())
                .is_some_and(|ip| !ip.is_empty()),
        );
        let inits = status.and_then(|s| s.init_container_statuses.as_deref());
        first(
            &mut self.init_done,
            inits.is_some_and(|l| {
                !l.is_empty()
                    && l.iter().all(|c| {
                        c.state
                            .as_ref()
                            .and_then(|s| s.terminated.as_ref())
                            .is_some_and(|t| t.exit_code == 0)
                    })
            }),
        );
        let containers = status.and_then(|s| s.container_statuses.as_deref());
        first(
            &mut self.running,
            containers.is_some_and(|l| {
                !l.is_empty()
                    && l.iter()
                        .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
            }),
        );
        let ready = pod_ready(p);
        first(&mut self.ready, ready);
        first(&mut self.deleting, p.metadata.deletion_timestamp.is_some());
        first(&mut self.new_image, spec_image(p) == Some(new_image));
        let app_new_ready = app_container_status(p).is_some_and(|c| {
            c.ready && c.image == new_image && c.state.as_ref().is_some_and(|s| s.running.is_some())
        });
        first(
            &mut self.new_image_ready,
            self.new_image.is_some() && ready && app_new_ready,
        );
        if self.new_image.is_none() {
            return;
        }
        let app = app_container_status(p);
        let app_running = |c: &k8s_openapi::api::core::v1::ContainerStatus| {
            c.state.as_ref().is_some_and(|s| s.running.is_some())
        };
        first(
            &mut self.app_stopped,
            app.is_some_and(|c| !c.ready || !app_running(c)),
        );
        first(
            &mut self.app_running_new,
            app.is_some_and(|c| c.image == new_image && app_running(c)),
        );
        first(
            &mut self.app_ready_new,
            app.is_some_and(|c| c.image == new_image && app_running(c) && c.ready),
        );
        let gate = pod_condition(p, "InPlaceUpdateReady");
        first(&mut self.gate_false, gate.as_deref() == Some("False"));
        let gate_was_false = self.gate_false.is_some();
        first(
            &mut self.gate_true,
            gate_was_false && gate.as_deref() == Some("True"),
        );
    }
}

/// Where an in-place update's time goes: the median time from the new image in the spec to
/// each later step, as the watch saw them.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct InPlaceSteps {
    pub(super) gate_false: Option<f64>,
    pub(super) stopped: Option<f64>,
    pub(super) running_new: Option<f64>,
    pub(super) app_ready: Option<f64>,
    pub(super) gate_true: Option<f64>,
    pub(super) ready: Option<f64>,
}

impl InPlaceSteps {
    pub(super) fn of(pods: &[Timeline]) -> InPlaceSteps {
        let from_spec = |step: fn(&Timeline) -> Option<Instant>| {
            let v: Vec<f64> = pods
                .iter()
                .filter_map(|t| span(t.new_image, step(t)))
                .collect();
            median_of(&v)
        };
        InPlaceSteps {
            gate_false: from_spec(|t| t.gate_false),
            stopped: from_spec(|t| t.app_stopped),
            running_new: from_spec(|t| t.app_running_new),
            app_ready: from_spec(|t| t.app_ready_new),
            gate_true: from_spec(|t| t.gate_true),
            ready: from_spec(|t| t.new_image_ready),
        }
    }
}

/// Seconds from `a` to `b`, when both happened (and in that order).
fn span(a: Option<Instant>, b: Option<Instant>) -> Option<f64> {
    let (a, b) = (a?, b?);
    b.checked_duration_since(a).map(|d| d.as_secs_f64())
}

/// The median of `values` (None when empty).
pub(super) fn median_of(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    benchcalc::percentile(&v, 0.5)
}

/// Per-pod costs of one leg pair, medians in seconds (None: not measured in this shape).
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Costs {
    /// A new pod: scheduled -> its IP (the sandbox and its network).
    pub(super) sandbox: Option<f64>,
    /// IP -> every init container done.
    pub(super) init: Option<f64>,
    /// IP (or init done) -> every container running (with the image pull, if any).
    pub(super) start: Option<f64>,
    /// Every container running -> the pod Ready (readiness probes, slow sidecars).
    pub(super) ready: Option<f64>,
    /// An old pod: deletion seen -> gone (preStop hooks, SIGTERM, the sandbox's teardown).
    pub(super) drain: Option<f64>,
    /// A new pod: first seen -> Ready.
    pub(super) new_pod: Option<f64>,
    /// An in-place update: the new image in the spec -> the pod Ready on it.
    pub(super) restart: Option<f64>,
    /// The kubelet's pull of the new image (its event "Successfully pulled image ... in").
    pub(super) pull: Option<f64>,
}

impl Costs {
    /// The new pods' and old pods' costs of a recreating leg.
    pub(super) fn of_recreate(pods: &[Timeline]) -> Costs {
        let new: Vec<&Timeline> = pods.iter().filter(|t| !t.existing).collect();
        let old = pods.iter().filter(|t| t.existing);
        let med = |v: Vec<f64>| median_of(&v);
        Costs {
            sandbox: med(new.iter().filter_map(|t| span(t.scheduled, t.ip)).collect()),
            init: med(new.iter().filter_map(|t| span(t.ip, t.init_done)).collect()),
            start: med(new
                .iter()
                .filter_map(|t| span(t.init_done.or(t.ip), t.running))
                .collect()),
            ready: med(new
                .iter()
                .filter_map(|t| span(t.running, t.ready))
                .collect()),
            drain: med(old.filter_map(|t| span(t.deleting, t.gone)).collect()),
            new_pod: med(new.iter().filter_map(|t| span(t.seen, t.ready)).collect()),
            restart: None,
            pull: None,
        }
    }

    /// The in-place updates' median.
    pub(super) fn of_in_place(pods: &[Timeline]) -> Option<f64> {
        let v: Vec<f64> = pods
            .iter()
            .filter_map(|t| span(t.new_image, t.new_image_ready))
            .collect();
        median_of(&v)
    }

    /// One JSON object, for the simulator's calibration (item 3 of issue 29).
    pub(super) fn json(&self, shape: Shape, pods: u32) -> serde_json::Value {
        let r = |v: Option<f64>| v.map(|s| (s * 1000.0).round() / 1000.0);
        json!({
            "shape": shape.name(),
            "pods": pods,
            "sandbox_s": r(self.sandbox),
            "init_s": r(self.init),
            "start_s": r(self.start),
            "ready_s": r(self.ready),
            "drain_s": r(self.drain),
            "new_pod_s": r(self.new_pod),
            "in_place_restart_s": r(self.restart),
            "pull_s": r(self.pull),
        })
    }
}

/// Seconds of a Go duration as the kubelet prints it (`1m2.5s`, `12.3s`, `950ms`, `1.2µs`).
pub(super) fn go_duration_secs(s: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "µs" | "us" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    Some(total)
}

/// The pull time in a kubelet event message `Successfully pulled image "X" in 12.3s`, when
/// the image is `image`.
pub(super) fn pulled_in(message: &str, image: &str) -> Option<f64> {
    let rest = message.strip_prefix("Successfully pulled image \"")?;
    let (name, rest) = rest.split_once('"')?;
    if name != image {
        return None;
    }
    go_duration_secs(rest.trim().strip_prefix("in ")?)
}

/// A token-bucket TCP proxy: every byte from the upstream (the registry) to the clients
/// shares one budget of `bytes_per_sec`, paced in 16 KiB chunks (no burst).
struct Throttle {
    next: tokio::sync::Mutex<tokio::time::Instant>,
    bytes_per_sec: f64,
}

impl Throttle {
    async fn pay(&self, n: usize) {
        let cost = Duration::from_secs_f64(n as f64 / self.bytes_per_sec);
        let until = {
            let mut next = self.next.lock().await;
            let start = (*next).max(tokio::time::Instant::now());
            *next = start + cost;
            *next
        };
        tokio::time::sleep_until(until).await;
    }
}

async fn proxy_conn(
    mut client: tokio::net::TcpStream,
    upstream: std::net::SocketAddr,
    throttle: Arc<Throttle>,
) -> std::io::Result<()> {
    let server = tokio::net::TcpStream::connect(upstream).await?;
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.into_split();
    let up = async {
        tokio::io::copy(&mut cr, &mut sw).await?;
        sw.shutdown().await
    };
    let down = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = sr.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            throttle.pay(n).await;
            cw.write_all(&buf[..n]).await?;
        }
        cw.shutdown().await
    };
    tokio::try_join!(up, down)?;
    Ok(())
}

/// Starts the proxy on `listen`; it runs until the task is aborted.
async fn start_proxy(
    listen: std::net::SocketAddr,
    upstream: std::net::SocketAddr,
    mbit: f64,
) -> Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding the registry proxy on {listen}"))?;
    let throttle = Arc::new(Throttle {
        next: tokio::sync::Mutex::new(tokio::time::Instant::now()),
        bytes_per_sec: mbit * 1e6 / 8.0,
    });
    Ok(tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let t = throttle.clone();
            tokio::spawn(async move {
                if let Err(e) = proxy_conn(conn, upstream, t).await {
                    progress(format!("registry proxy: {e}"));
                }
            });
        }
    }))
}

/// Runs a command; its stdout, or an error with its stderr.
fn run_cmd(cmd: &mut Command) -> Result<String> {
    let out: Output = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The bed's containerd, through `ctr` in the CRI's namespace.
struct Node {
    socket: String,
}

impl Node {
    fn ctr(&self, args: &[&str]) -> Result<String> {
        run_cmd(
            Command::new("ctr")
                .args(["--address", &self.socket, "--namespace", "k8s.io"])
                .args(args),
        )
    }

    /// Removes every reference to the image `repo` (tag and digest names) and its ID
    /// (`config`), as the CRI's RemoveImage does, and waits for the garbage collection;
    /// then checks that the layer `layer` left the content store.
    fn remove_image(&self, repo: &str, config: &str, layer: &str) -> Result<()> {
        let names = self.ctr(&["images", "ls", "-q"])?;
        let mut refs: Vec<&str> = names
            .lines()
            .filter(|n| n.starts_with(&format!("{repo}:")) || n.starts_with(&format!("{repo}@")))
            .collect();
        if names.lines().any(|n| n == config) {
            refs.push(config);
        }
        if !refs.is_empty() {
            let mut args = vec!["images", "rm", "--sync"];
            args.extend(refs.iter().copied());
            self.ctr(&args)?;
        }
        if self
            .ctr(&["content", "ls", "-q"])?
            .lines()
            .any(|d| d == layer)
        {
            bail!(
                "the image's layer {layer} is still in containerd's content store after removing {repo}"
            );
        }
        Ok(())
    }
}

/// The new image of the `pull` shape: built, pushed, served slowly; removed at the end.
struct PullImage {
    /// What the pods run (through the proxy).
    image: String,
    repo: String,
    config: String,
    layer: String,
    node: Node,
    hosts_dir: PathBuf,
    proxy: tokio::task::JoinHandle<()>,
}

impl PullImage {
    async fn prepare(args: &Args, registry: &str, old: &str) -> Result<PullImage> {
        let bed = bed_env("INPLACE_TESTBED_DIR", "/var/tmp/inplace-testbed");
        let node = Node {
            socket: bed_env(
                "INPLACE_CRI_ENDPOINT",
                &format!("{bed}/containerd/containerd.sock"),
            )
            .trim_start_matches("unix://")
            .to_owned(),
        };
        let tag = format!("r{}", suffix());
        let pushed = format!("{registry}/inplace-test/pull:{tag}");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("testbed/mkpullimage");
        progress(format!(
            "pull: building {pushed} ({} MB of fresh random data on {old})",
            args.pull_mb
        ));
        let out = run_cmd(
            Command::new(&script)
                .arg(old)
                .arg(&pushed)
                .arg(args.pull_mb.to_string()),
        )?;
        let field = |key: &str| {
            out.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .map(str::to_owned)
                .with_context(|| format!("{} printed no {key}: {out}", script.display()))
        };
        let (config, layer) = (field("config=")?, field("layer=")?);
        let upstream: std::net::SocketAddr = registry
            .parse()
            .with_context(|| format!("the registry address {registry:?}"))?;
        let listen = std::net::SocketAddr::new(upstream.ip(), args.pull_proxy_port);
        let proxy = start_proxy(listen, upstream, args.pull_mbit).await?;
        // containerd (the kubelet's pulls and the daemon's) reaches the proxy over plain HTTP.
        let hosts_dir = PathBuf::from(format!("{bed}/containerd/certs.d/{listen}"));
        std::fs::create_dir_all(&hosts_dir)?;
        let mut f = std::fs::File::create(hosts_dir.join("hosts.toml"))?;
        write!(
            f,
            "server = \"http://{listen}\"\n\n[host.\"http://{listen}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n"
        )?;
        let repo = format!("{listen}/inplace-test/pull");
        Ok(PullImage {
            image: format!("{repo}:{tag}"),
            repo,
            config,
            layer,
            node,
            hosts_dir,
            proxy,
        })
    }

    fn remove_from_node(&self) -> Result<()> {
        self.node
            .remove_image(&self.repo, &self.config, &self.layer)
    }

    fn close(self) {
        self.proxy.abort();
        if let Err(e) = self.remove_from_node() {
            progress(format!("pull: cleanup: {e:#}"));
        }
        let _ = std::fs::remove_dir_all(&self.hosts_dir);
    }
}

/// Pod timelines of `app`, from a watch started before the leg.
/// Keeps the last version of every ImagePullJob of the watched namespace, by name, deleted
/// ones included.
fn spawn_job_watch(
    api: Api<ImagePullJob>,
    into: Arc<Mutex<HashMap<String, ImagePullJob>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let cfg = watcher::Config::default();
        let mut stream = std::pin::pin!(watcher(api, cfg).default_backoff());
        while let Some(ev) = stream.next().await {
            let Ok(watcher::Event::Apply(j) | watcher::Event::InitApply(j)) = ev else {
                continue;
            };
            if let (Some(name), Ok(mut map)) = (j.metadata.name.clone(), into.lock()) {
                map.insert(name, j);
            }
        }
    })
}

fn spawn_timeline_watch(
    api: Api<Pod>,
    app: &str,
    new_image: String,
    into: Arc<Mutex<HashMap<String, Timeline>>>,
) -> tokio::task::JoinHandle<()> {
    let cfg = watcher::Config::default().labels(&format!("app={app}"));
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, cfg).default_backoff());
        while let Some(ev) = stream.next().await {
            let now = Instant::now();
            let Ok(mut map) = into.lock() else {
                return;
            };
            let mut saw = |p: &Pod, init: bool| {
                if let Some(uid) = p.metadata.uid.clone() {
                    let t = map.entry(uid).or_insert_with(|| Timeline {
                        existing: init,
                        ..Timeline::default()
                    });
                    t.saw(p, &new_image, now);
                }
            };
            match ev {
                Ok(watcher::Event::Apply(p)) => saw(&p, false),
                Ok(watcher::Event::InitApply(p)) => saw(&p, true),
                Ok(watcher::Event::Delete(p)) => {
                    if let Some(t) = p.metadata.uid.as_ref().and_then(|u| map.get_mut(u)) {
                        t.gone.get_or_insert(now);
                    }
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                Err(e) => progress(format!("timeline watch: {e}")),
            }
        }
    })
}

/// The kubelet's pull times of `image` in namespace `ns` (from its events).
async fn pull_times(client: &Client, ns: &str, image: &str) -> Result<Vec<f64>> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|e| pulled_in(e.message.as_deref()?, image))
        .collect())
}

/// `median X s (n N)` or `-`.
fn med_line(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |s| format!("{s:.2} s"))
}

pub(super) async fn versus_real(args: &Args, client: &Client, report: &mut Report) -> Result<()> {
    let ns = format!("ipb-r-{}", suffix());
    namespace(client, &ns).await?;
    let registry = bed_env("INPLACE_REGISTRY", "127.0.0.1:5000");
    let old = bed_env(
        "INPLACE_TEST_IMAGE_V1",
        &format!("{registry}/inplace-test/app:v1"),
    );
    let pull = if args.shape == Some(Shape::Pull) {
        match PullImage::prepare(args, &registry, &old).await {
            Ok(p) => Some(p),
            Err(e) => {
                inplace_tests::bed::delete_namespace(client, &ns).await;
                return Err(e);
            }
        }
    } else {
        None
    };
    let result = versus_real_in(args, client, &ns, &old, pull.as_ref(), report).await;
    if let Some(p) = pull {
        p.close();
    }
    if let Err(e) = delete_namespace_and_wait(client, &ns, Duration::from_secs(300)).await {
        report.add(format!("versus-deployment-real: cleanup: {e:#}"));
    }
    result
}

#[allow(clippy::too_many_lines)]
async fn versus_real_in(
    args: &Args,
    client: &Client,
    ns: &str,
    old: &str,
    pull: Option<&PullImage>,
    report: &mut Report,
) -> Result<()> {
    let shape = args.shape.unwrap_or(Shape::Plain);
    let tag = format!("versus-deployment-real[{}]", shape.name());
    let node = bed_env("INPLACE_NODE_NAME", "inplace-node-0");
    let registry = bed_env("INPLACE_REGISTRY", "127.0.0.1:5000");
    let side = bed_env(
        "INPLACE_TEST_IMAGE_V3",
        &format!("{registry}/inplace-test/app:v3"),
    );
    let new = match pull {
        Some(p) => p.image.clone(),
        None => bed_env(
            "INPLACE_TEST_IMAGE_V2",
            &format!("{registry}/inplace-test/app:v2"),
        ),
    };
    let p = args.real_pods;
    let timeout = Duration::from_secs(args.timeout_secs);
    let mu = benchcalc::max_unavailable(p, &args.max_unavailable).map_err(anyhow::Error::msg)?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    // Only the app's image, by position (a merge patch of `containers` would replace the
    // whole list and drop the sidecars, and a CloneSet takes no strategic merge patch);
    // the test op refuses the patch if the app is not where the template put it.
    let image_patch: json_patch::Patch = serde_json::from_value(json!([
        { "op": "test", "path": "/spec/template/spec/containers/0/name", "value": "app" },
        { "op": "replace", "path": "/spec/template/spec/containers/0/image", "value": new },
    ]))?;
    progress(format!(
        "{tag}: {p} pods on {node} (namespace {ns}), maxUnavailable {} = {mu}, app image {old} -> {new}",
        args.max_unavailable
    ));

    // 1. The CloneSet, in place, by the installed product.
    let csapi: Api<CloneSet> = Api::namespaced(client.clone(), ns);
    let app = "inplace";
    let mut cs: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": { "name": app, "labels": { "app": app } },
        "spec": {
            "replicas": p,
            "selector": { "matchLabels": { "app": app } },
            "template": real_template(shape, app, &node, old, &side),
            "updateStrategy": { "type": "InPlaceIfPossible", "maxUnavailable": mu },
        },
    }))?;
    if shape == Shape::Pull {
        // Pulls as wide as the rollout (the default is one node at a time: one node here).
        cs.metadata.annotations = Some(
            [(
                "apps.kruise.io/image-predownload-parallelism".to_owned(),
                mu.to_string(),
            )]
            .into(),
        );
    }
    csapi.create(&PostParams::default(), &cs).await?;
    let t_create = Instant::now();
    loop {
        let cs = csapi.get(app).await?;
        if settled(&cs, p) {
            break;
        }
        if t_create.elapsed() > timeout {
            bail!(
                "the CloneSet's pods were not Ready in {timeout:?}: {}",
                status_line(&cs)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    progress(format!(
        "{tag}: CloneSet: {p} pods Ready in {:.1}s",
        secs(t_create.elapsed())
    ));
    let lines = Arc::new(Mutex::new(HashMap::new()));
    let tw = spawn_timeline_watch(pods.clone(), app, new.clone(), lines.clone());
    // The ImagePullJobs as the leg sees them: the controller deletes a CloneSet's jobs once
    // its rollout is done, so a list after the leg finds none.
    let jobs_seen = Arc::new(Mutex::new(HashMap::new()));
    let jw = spawn_job_watch(Api::namespaced(client.clone(), ns), jobs_seen.clone());
    let inplace = run_leg(
        client,
        &pods,
        app,
        "in-place",
        timeout,
        &[],
        async || {
            csapi
                .patch(
                    app,
                    &PatchParams::default(),
                    &Patch::Json::<()>(image_patch.clone()),
                )
                .await?;
            Ok(())
        },
        async || {
            let cs = csapi.get(app).await?;
            Ok(if settled(&cs, p) {
                Polled::Done
            } else {
                Polled::Waiting(status_line(&cs))
            })
        },
    )
    .await?;
    tw.abort();
    jw.abort();
    let in_place_lines: Vec<Timeline> = lines
        .lock()
        .map(|m| m.values().cloned().collect())
        .unwrap_or_default();
    let recreated = in_place_lines.iter().filter(|t| !t.existing).count();
    let mut predownload = String::new();
    if shape == Shape::Pull {
        let seen: Vec<ImagePullJob> = jobs_seen
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        let Some(job) = seen.iter().find(|j| j.spec.image == new) else {
            bail!(
                "{tag}: the CloneSet created no ImagePullJob for {new}: turn image pre-download on (tests/testbed/set-gates PreDownloadImageForInPlaceUpdate=true)"
            );
        };
        predownload = job.status.as_ref().map_or_else(
            || "ImagePullJob without status".to_owned(),
            |s| {
                let took = match (&s.start_time, &s.completion_time) {
                    (Some(a), Some(b)) => format!(
                        "{} s (second resolution)",
                        b.0.as_second() - a.0.as_second()
                    ),
                    _ => "not completed".to_owned(),
                };
                format!(
                    "ImagePullJob {}: succeeded {} of {} nodes, start to completion {took}",
                    job.metadata.name.as_deref().unwrap_or("?"),
                    s.succeeded,
                    s.desired
                )
            },
        );
    }
    let in_place_pulls = pull_times(client, ns, &new).await?;
    csapi
        .delete(app, &kube::api::DeleteParams::default())
        .await?;
    wait_pods_gone(&pods, app, timeout).await?;
    progress(format!("{tag}: in-place {:.2}s", secs(inplace.took)));
    if let Some(pi) = pull {
        pi.remove_from_node()?;
        progress(format!("{tag}: {new} removed from the node"));
    }

    // 2. The Deployment, by kube-controller-manager: the same template and budget.
    let dapi: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let app = "deploy";
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": app, "labels": { "app": app } },
        "spec": {
            "replicas": p,
            "selector": { "matchLabels": { "app": app } },
            "template": real_template(shape, app, &node, old, &side),
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": { "maxUnavailable": mu, "maxSurge": 0 },
            },
        },
    }))?;
    dapi.create(&PostParams::default(), &d).await?;
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
        "{tag}: Deployment: {p} pods available in {:.1}s",
        secs(t_create.elapsed())
    ));
    let lines = Arc::new(Mutex::new(HashMap::new()));
    let tw = spawn_timeline_watch(pods.clone(), app, new.clone(), lines.clone());
    let deploy = run_leg(
        client,
        &pods,
        app,
        "deployment",
        timeout,
        &[],
        async || {
            dapi.patch(
                app,
                &PatchParams::default(),
                &Patch::Json::<()>(image_patch.clone()),
            )
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
    tw.abort();
    let deploy_lines: Vec<Timeline> = lines
        .lock()
        .map(|m| m.values().cloned().collect())
        .unwrap_or_default();
    let deploy_pulls = pull_times(client, ns, &new).await?;
    dapi.delete(app, &kube::api::DeleteParams::default())
        .await?;
    wait_pods_gone(&pods, app, timeout).await?;

    let batches = benchcalc::batches(p, mu);
    let conditions = match shape {
        Shape::Plain => "one container (the test app, readiness probe every 1 s), the new image on the node".to_owned(),
        Shape::Sidecars => "init container (1 s) + app + 2 sidecars (ready after 3 s / 2 s, preStop drain 3 s / 2 s); only the app's image changes".to_owned(),
        Shape::Pull => format!(
            "one container, new image +{} MB not on the node, registry through a {} Mbit/s token-bucket proxy; in place with image pre-download (removed from the node between legs)",
            args.pull_mb, args.pull_mbit
        ),
    };
    report.add(format!(
        "{tag} setup: {p} pods on the real node {node}, maxUnavailable {mu} ({batches} batches), Deployment maxSurge 0, same template; {conditions}"
    ));
    report.add(format!(
        "{tag}: in-place {:.2} s, deployment {:.2} s, speed-up {:.2}",
        secs(inplace.took),
        secs(deploy.took),
        benchcalc::speedup(inplace.took, deploy.took)
    ));
    let mut costs = Costs::of_recreate(&deploy_lines);
    costs.restart = Costs::of_in_place(&in_place_lines);
    let all_pulls: Vec<f64> = in_place_pulls
        .iter()
        .chain(&deploy_pulls)
        .copied()
        .collect();
    costs.pull = median_of(&deploy_pulls);
    report.add(format!(
        "{tag} in-place: median per pod, new image in the spec -> Ready on it {} ({} pods updated, {recreated} recreated); kubelet pulls {:?} s{}",
        med_line(costs.restart),
        in_place_lines.iter().filter(|t| t.new_image_ready.is_some()).count(),
        in_place_pulls,
        if predownload.is_empty() { String::new() } else { format!("; {predownload}") }
    ));
    let steps = InPlaceSteps::of(&in_place_lines);
    report.add(format!(
        "{tag} in-place steps: median from the new image in the spec to: readiness gate False {}, app container stopped {}, new container running {}, new container ready {}, readiness gate True {}, pod Ready {}",
        med_line(steps.gate_false),
        med_line(steps.stopped),
        med_line(steps.running_new),
        med_line(steps.app_ready),
        med_line(steps.gate_true),
        med_line(steps.ready),
    ));
    report.add(format!(
        "{tag} deployment: median per new pod created -> Ready {} = scheduled -> IP (sandbox) {} + init {} + containers running {} + Ready {}; old pod deleted -> gone (drain) {}; kubelet pulls {:?} s",
        med_line(costs.new_pod),
        med_line(costs.sandbox),
        med_line(costs.init),
        med_line(costs.start),
        med_line(costs.ready),
        med_line(costs.drain),
        deploy_pulls,
    ));
    // The controller and the daemon run as the bed's pods here: in the machine's figure.
    report.add(format!("{tag} in-place {}", inplace.cpu));
    report.add(format!("{tag} deployment {}", deploy.cpu));
    if shape == Shape::Pull && all_pulls.is_empty() {
        report.add(format!("{tag}: note: no kubelet pull event for {new}"));
    }
    report.add(format!("{tag} costs: {}", costs.json(shape, p)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_as_the_kubelet_prints_them() {
        for (s, want) in [
            ("12.5s", 12.5),
            ("1m2.5s", 62.5),
            ("950ms", 0.95),
            ("1h0m1s", 3601.0),
            ("3µs", 3e-6),
        ] {
            let got = go_duration_secs(s).unwrap_or(f64::NAN);
            assert!((got - want).abs() < 1e-9, "{s}: {got}");
        }
        assert_eq!(go_duration_secs(""), None);
        assert_eq!(go_duration_secs("12x"), None);
        assert_eq!(go_duration_secs("s"), None);
    }

    #[test]
    fn pull_events_of_the_image_only() {
        let m = "Successfully pulled image \"127.0.0.1:5099/inplace-test/pull:r1\" in 10.25s";
        assert_eq!(
            pulled_in(m, "127.0.0.1:5099/inplace-test/pull:r1"),
            Some(10.25)
        );
        assert_eq!(pulled_in(m, "127.0.0.1:5099/inplace-test/pull:r2"), None);
        assert_eq!(
            pulled_in("Container image \"x\" already present on machine", "x"),
            None
        );
    }

    #[test]
    fn recreate_costs_are_medians_of_each_step() {
        let t0 = Instant::now();
        let at = |ms: u64| Some(t0 + Duration::from_millis(ms));
        let new = |k: u64| Timeline {
            existing: false,
            seen: at(0),
            scheduled: at(10),
            ip: at(10 + 100 * k),
            init_done: None,
            running: at(10 + 100 * k + 300),
            ready: at(10 + 100 * k + 300 + 1000),
            ..Timeline::default()
        };
        let old = Timeline {
            existing: true,
            deleting: at(0),
            gone: at(2500),
            ..Timeline::default()
        };
        let c = Costs::of_recreate(&[new(1), new(2), new(3), old]);
        assert_eq!(c.sandbox.map(|s| (s * 1000.0).round()), Some(200.0));
        assert_eq!(c.init, None);
        assert_eq!(c.start.map(|s| (s * 1000.0).round()), Some(300.0));
        assert_eq!(c.ready.map(|s| (s * 1000.0).round()), Some(1000.0));
        assert_eq!(c.drain.map(|s| (s * 1000.0).round()), Some(2500.0));
        assert_eq!(c.new_pod.map(|s| (s * 1000.0).round()), Some(1510.0));
        let j = c.json(Shape::Plain, 3);
        assert_eq!(j["init_s"], serde_json::Value::Null);
        assert_eq!(j["drain_s"], json!(2.5));
    }

    #[test]
    fn the_sidecar_shape_changes_only_the_app_image() {
        let a = real_template(Shape::Sidecars, "x", "n", "img:v1", "img:v3");
        let b = real_template(Shape::Sidecars, "x", "n", "img:v2", "img:v3");
        let images = |t: &serde_json::Value| -> Vec<String> {
            t["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["image"].as_str().unwrap_or_default().to_owned())
                .collect()
        };
        assert_eq!(images(&a), ["img:v1", "img:v3", "img:v3"]);
        assert_eq!(images(&b), ["img:v2", "img:v3", "img:v3"]);
        assert_eq!(a["spec"]["initContainers"], b["spec"]["initContainers"]);
        assert_eq!(
            real_template(Shape::Plain, "x", "n", "i", "s")["spec"]["containers"]
                .as_array()
                .map(Vec::len),
            Some(1)
        );
    }

    /// A pod as the watch shows it during an in-place update of the app container.
    fn in_place_pod(spec_image: &str, app: (&str, bool, bool), gate: &str, ready: bool) -> Pod {
        let (image, running, app_ready) = app;
        let state = if running {
            json!({ "running": {} })
        } else {
            json!({ "waiting": { "reason": "ContainerCreating" } })
        };
        let status = |b: bool| if b { "True" } else { "False" };
        serde_json::from_value(json!({
            "metadata": { "name": "p" },
            "spec": { "containers": [{ "name": "app", "image": spec_image }] },
            "status": {
                "conditions": [
                    { "type": "InPlaceUpdateReady", "status": gate },
                    { "type": "Ready", "status": status(ready) },
                ],
                "containerStatuses": [{
                    "name": "app", "image": image, "imageID": "", "ready": app_ready,
                    "restartCount": 0, "state": state,
                }],
            },
        }))
        .unwrap_or_else(|e| panic!("a pod: {e}"))
    }

    #[test]
    fn the_steps_of_an_in_place_update_are_timed_from_the_new_spec() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let (old, new) = ("app:v1", "app:v2");
        let mut t = Timeline::default();
        // Before the update: nothing of it is timed, though the gate is True and the pod Ready.
        t.saw(
            &in_place_pod(old, (old, true, true), "True", true),
            new,
            at(0),
        );
        t.saw(
            &in_place_pod(old, (old, true, true), "False", false),
            new,
            at(100),
        );
        assert_eq!((t.gate_false, t.app_stopped), (None, None));
        // The controller's patch: the gate False and the new image in one write.
        t.saw(
            &in_place_pod(new, (old, true, true), "False", false),
            new,
            at(1000),
        );
        t.saw(
            &in_place_pod(new, (old, false, false), "False", false),
            new,
            at(1500),
        );
        t.saw(
            &in_place_pod(new, (new, true, false), "False", false),
            new,
            at(2500),
        );
        t.saw(
            &in_place_pod(new, (new, true, false), "True", false),
            new,
            at(2700),
        );
        t.saw(
            &in_place_pod(new, (new, true, true), "True", true),
            new,
            at(3000),
        );
        let s = InPlaceSteps::of(&[t]);
        let ms = |v: Option<f64>| v.map(|s| (s * 1000.0).round());
        assert_eq!(ms(s.gate_false), Some(0.0));
        assert_eq!(ms(s.stopped), Some(500.0));
        assert_eq!(ms(s.running_new), Some(1500.0));
        assert_eq!(ms(s.app_ready), Some(2000.0));
        assert_eq!(ms(s.gate_true), Some(1700.0));
        assert_eq!(ms(s.ready), Some(2000.0));
    }
}
