//! `--scenario predownload`: one CloneSet, one pod per simulated node, rolled out three
//! times in one run (see the crate documentation): image pre-download off, pulling by
//! node name, pulling in update order. Each leg moves to an image no node holds yet, so
//! every leg starts from the same state: nothing pulled.

use inplace_proto::nodeimage::NodeImage;
use inplace_tests::bed::delete_node_images;

use super::{
    Api, Arc, Args, Client, CloneSet, Controller, Duration, HashMap, Instant, Mutex, Patch,
    PatchParams, Pod, PostParams, Report, Result, Sim, StreamExt, WatchStreamExt,
    app_container_status, cleanup, cloneset, json, millis, namespace, progress, secs, settled,
    spec_image, status_line, suffix, wait_settled, watcher, with_sim_daemon,
};

const IMAGE_NAME: &str = "bench.invalid/inplace/app";
const GATE_OFF: &str = "--feature-gates=PreDownloadImageForInPlaceUpdate=false";
const GATE_ON: &str = "--feature-gates=PreDownloadImageForInPlaceUpdate=true";

/// One rollout: its name in the output, the image tag it moves to, the controller's flags.
struct Leg {
    name: &'static str,
    tag: &'static str,
    flags: &'static [&'static str],
}

const LEGS: [Leg; 3] = [
    Leg {
        name: "off",
        tag: "pd-off",
        flags: &[GATE_OFF],
    },
    Leg {
        name: "by node name",
        tag: "pd-by-name",
        flags: &[GATE_ON, "--predownload-update-order=false"],
    },
    Leg {
        name: "update-ordered",
        tag: "pd-update-ordered",
        flags: &[GATE_ON, "--predownload-update-order=true"],
    },
];

/// What one leg measured.
struct Figures {
    total: Duration,
    /// Pods whose new container ran sooner than one pull after their spec changed.
    found: usize,
    pods: usize,
    /// Simulated nodes whose NodeImage lists the leg's tag (pre-download pulled there).
    prepulled: usize,
}

/// Per pod (uid): when its spec and its running container reached the leg's image.
#[derive(Debug, Default)]
struct LegWatch {
    synced: bool,
    spec: HashMap<String, Instant>,
    running: HashMap<String, Instant>,
}

fn spawn_leg_watch(
    api: Api<Pod>,
    image: String,
    seen: Arc<Mutex<LegWatch>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(ev) = stream.next().await {
            let now = Instant::now();
            let Ok(mut w) = seen.lock() else {
                return;
            };
            match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    let Some(uid) = p.metadata.uid.clone() else {
                        continue;
                    };
                    if spec_image(&p) == Some(image.as_str()) {
                        w.spec.entry(uid.clone()).or_insert(now);
                    }
                    if app_container_status(&p).is_some_and(|c| c.image == image) {
                        w.running.entry(uid).or_insert(now);
                    }
                }
                Ok(watcher::Event::InitDone) => w.synced = true,
                Ok(_) => {}
                Err(e) => progress(format!("pod watch: {e}")),
            }
        }
    })
}

pub async fn run(args: &Args, client: &Client, report: &mut Report) -> Result<()> {
    let group = format!("ipb-p-{}", suffix());
    let pull = millis(&args.pull_delay)?;
    let nodes = args.predownload_pods as usize;
    progress(format!(
        "predownload: {nodes} pods on {nodes} simulated nodes ({group}-*), pull delay {pull:?}, maxUnavailable {}, parallelism {}",
        args.predownload_max_unavailable, args.predownload_parallelism
    ));
    let pull_flag = format!("{}ms", pull.as_millis());
    let mut sim = Sim::start(
        &args.nodesim_bin,
        &group,
        nodes,
        &with_sim_daemon(
            args,
            &[
                "--update-delay",
                "500ms",
                "--ready-delay",
                "500ms",
                "--max-grace",
                "1s",
                "--pull-delay",
                &pull_flag,
                "--stats-interval",
                "30s",
            ],
        ),
    )?;
    let result = legs(args, client, &sim, &group, pull, report).await;
    cleanup(client, &group, &mut sim).await;
    delete_node_images(client, &sim.prefix).await;
    result
}

/// Simulated nodes whose NodeImage lists `tag` of the bench image.
async fn nodes_listing(client: &Client, prefix: &str, tag: &str) -> Result<usize> {
    let api: Api<NodeImage> = Api::all(client.clone());
    let list = api.list(&kube::api::ListParams::default()).await?;
    Ok(list
        .items
        .iter()
        .filter(|ni| {
            ni.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .filter(|ni| {
            ni.spec
                .images
                .get(IMAGE_NAME)
                .is_some_and(|i| i.tags.iter().any(|t| t.tag == tag))
        })
        .count())
}

/// The CloneSet: one pod per node (required anti-affinity on the host name), the
/// pre-download parallelism annotation.
fn predownload_cloneset(args: &Args, sim: &Sim) -> Result<CloneSet> {
    let mut cs = cloneset(
        "bench",
        sim,
        args.predownload_pods,
        &format!("{IMAGE_NAME}:v1"),
        &args.predownload_max_unavailable.to_string(),
    )?;
    cs.metadata.annotations = Some(
        [(
            "apps.kruise.io/image-predownload-parallelism".to_owned(),
            args.predownload_parallelism.to_string(),
        )]
        .into(),
    );
    let mut template = serde_json::to_value(&cs.spec.template)?;
    template["spec"]["affinity"] = json!({"podAntiAffinity": {
    "requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"app": "bench"}},
        "topologyKey": "kubernetes.io/hostname",
    }]}});
    cs.spec.template = serde_json::from_value(template)?;
    Ok(cs)
}

async fn legs(
    args: &Args,
    client: &Client,
    sim: &Sim,
    ns: &str,
    pull: Duration,
    report: &mut Report,
) -> Result<()> {
    let p = args.predownload_pods;
    sim.wait_nodes_ready(client, Duration::from_secs(300))
        .await?;
    namespace(client, ns).await?;
    let api: Api<CloneSet> = Api::namespaced(client.clone(), ns);
    let timeout = Duration::from_secs(args.timeout_secs);
    let names = [("bench".to_owned(), p)];
    let mut figures = Vec::new();
    for (i, leg) in LEGS.iter().enumerate() {
        let mut ctrl = Controller::start_with(args, ns, leg.tag, leg.flags)?;
        if i == 0 {
            api.create(&PostParams::default(), &predownload_cloneset(args, sim)?)
                .await?;
            let took = wait_settled(
                &api,
                &names,
                &mut ctrl,
                timeout,
                Duration::from_millis(500),
                None,
            )
            .await?;
            progress(format!("predownload: {p} pods Ready in {:.1}s", secs(took)));
        }
        // the controller's caches (ImagePullJobs among them) list before the clock starts
        tokio::time::sleep(Duration::from_secs(3)).await;
        let image = format!("{IMAGE_NAME}:{}", leg.tag);
        let seen = Arc::new(Mutex::new(LegWatch::default()));
        let task = spawn_leg_watch(
            Api::namespaced(client.clone(), ns),
            image.clone(),
            seen.clone(),
        );
        while !seen.lock().map(|w| w.synced).unwrap_or(true) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let patch = json!({ "spec": { "template": { "spec": {
            "containers": [{ "name": "app", "image": image }] } } } });
        let t0 = Instant::now();
        api.patch("bench", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        // a status from before the patch is settled too: wait for the new revision
        loop {
            let cs = api.get("bench").await?;
            let moved = cs
                .status
                .as_ref()
                .is_some_and(|s| s.updated_replicas < s.replicas);
            if moved || t0.elapsed() > Duration::from_secs(10) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        wait_settled(
            &api,
            &names,
            &mut ctrl,
            timeout,
            Duration::from_millis(200),
            None,
        )
        .await?;
        let total = t0.elapsed();
        task.abort();
        let (found, pods) = {
            let w = seen
                .lock()
                .map_err(|_| anyhow::anyhow!("leg watch poisoned"))?;
            let found = w
                .spec
                .iter()
                .filter(|(uid, at)| {
                    w.running
                        .get(*uid)
                        .is_some_and(|r| r.duration_since(**at) < pull)
                })
                .count();
            (found, w.spec.len())
        };
        let prepulled = nodes_listing(client, &sim.prefix, leg.tag).await?;
        let cs = api.get("bench").await?;
        progress(format!(
            "predownload: {} done: {}",
            leg.name,
            status_line(&cs)
        ));
        if !settled(&cs, p) {
            anyhow::bail!("leg {} did not settle", leg.name);
        }
        report.add(format!(
            "predownload: {}: {:.2}s; {found}/{pods} pods found their image on the node (new container running < {:.1}s after the spec patch); pre-download pulled on {prepulled} nodes",
            leg.name,
            secs(total),
            secs(pull)
        ));
        for l in ctrl.problems(3) {
            report.add(format!("predownload: {}: controller log: {l}", leg.name));
        }
        ctrl.stop();
        figures.push(Figures {
            total,
            found,
            pods,
            prepulled,
        });
    }
    let [off, by_name, ordered] = figures.as_slice() else {
        anyhow::bail!("not every leg measured");
    };
    report.add(format!(
        "predownload: {p} pods, 1 per node, maxUnavailable {}, parallelism {}, pull {:.1}s: off {:.2} s, by node name {:.2} s, update-ordered {:.2} s (found on the node: {}/{}, {}/{}, {}/{}; nodes pre-pulled: {}, {}, {})",
        args.predownload_max_unavailable,
        args.predownload_parallelism,
        secs(pull),
        secs(off.total),
        secs(by_name.total),
        secs(ordered.total),
        off.found,
        off.pods,
        by_name.found,
        by_name.pods,
        ordered.found,
        ordered.pods,
        off.prepulled,
        by_name.prepulled,
        ordered.prepulled,
    ));
    Ok(())
}
