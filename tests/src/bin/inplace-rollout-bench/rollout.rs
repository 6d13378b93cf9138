//! `--scenario rollout`: per-pod timeline from a pod watch.

use super::*;

#[derive(Debug, Default, Clone)]
pub(super) struct PodRec {
    pub(super) name: String,
    pub(super) spec_new: Option<Instant>,
    pub(super) gate_false: Option<Instant>,
    pub(super) container_ready_new: Option<Instant>,
    pub(super) ready_new: Option<Instant>,
    pub(super) is_new: bool,
    pub(super) ready: bool,
    pub(super) deleting: bool,
    pub(super) revision: String,
}

#[derive(Debug, Default)]
pub(super) struct Tracker {
    pub(super) synced: bool,
    pub(super) pods: HashMap<String, PodRec>,
    /// Only counted once `counting` is set (from the patch on).
    pub(super) counting: bool,
    pub(super) max_unavailable_seen: usize,
    pub(super) desired: usize,
    pub(super) deleted_during: usize,
}

pub(super) fn app_container_status(
    pod: &Pod,
) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "app")
}

pub(super) fn spec_image(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "app")?
        .image
        .as_deref()
}

impl Tracker {
    pub(super) fn observe(&mut self, pod: &Pod, now: Instant) {
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

    pub(super) fn forget(&mut self, pod: &Pod) {
        if let Some(uid) = pod.metadata.uid.as_ref()
            && self.pods.remove(uid).is_some()
            && self.counting
        {
            self.deleted_during += 1;
        }
        self.count();
    }

    pub(super) fn count(&mut self) {
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
    pub(super) fn done(&self, revision: &str) -> usize {
        self.pods
            .values()
            .filter(|p| !p.deleting && p.is_new && p.ready && p.revision == revision)
            .count()
    }
}

pub(super) fn spawn_pod_tracker(
    api: Api<Pod>,
    tracker: Arc<Mutex<Tracker>>,
) -> tokio::task::JoinHandle<()> {
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

/// The bed's directory: `$INPLACE_TESTBED_DIR`, default `/var/tmp/inplace-testbed`.
fn bed_dir() -> String {
    std::env::var("INPLACE_TESTBED_DIR").unwrap_or_else(|_| "/var/tmp/inplace-testbed".into())
}

/// The text of `/proc/PID/stat`, while process `pid` runs.
fn proc_stat(pid: impl std::fmt::Display) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()
}

/// The text of `/proc/PID/stat` of the bed's process `name`, from its pid file.
fn bed_process_stat(name: &str) -> Option<String> {
    let pid = std::fs::read_to_string(format!("{}/pids/{name}.pid", bed_dir())).ok()?;
    proc_stat(pid.trim())
}

/// CPU seconds the bed's kube-apiserver has used so far (user + system); None when
/// unreadable.
pub(super) fn apiserver_cpu_s() -> Option<f64> {
    benchcalc::cpu_seconds(&bed_process_stat("kube-apiserver")?)
}

/// The bed's processes whose CPU a leg reports, by their pid files' names.
const BED_PROCESSES: [&str; 6] = [
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "containerd",
];

/// A CPU reading of the machine, the bed's processes and `children` (the bench's own:
/// a controller, a node simulator), by name.
pub(super) fn cpu_sample(children: &[(&str, Option<u32>)]) -> benchcalc::cpu::CpuSample {
    let mut processes: Vec<(String, Option<String>)> = BED_PROCESSES
        .iter()
        .map(|name| ((*name).to_owned(), bed_process_stat(name)))
        .collect();
    processes.extend(
        children
            .iter()
            .map(|(name, pid)| ((*name).to_owned(), pid.and_then(proc_stat))),
    );
    let machine = std::fs::read_to_string("/proc/stat").ok();
    benchcalc::cpu::CpuSample::parse(machine.as_deref(), &processes)
}

/// The machine's load averages (1, 5, 15 min), printed with the resource figures: the
/// machine is shared, so a figure counts only next to the load it was measured under.
pub(super) fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".to_owned(),
        |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

pub(super) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

pub(super) fn millis(input: &str) -> Result<Duration> {
    let ms = parse_flag(input).map_err(|e| anyhow::anyhow!("{input:?}: {e}"))?;
    Ok(Duration::from_millis(u64::try_from(ms.max(0)).unwrap_or(0)))
}

pub(super) async fn rollout(args: &Args, client: &Client, report: &mut Report) -> Result<()> {
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
        &with_sim_daemon(
            args,
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
        ),
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
pub(super) async fn rollout_in(
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
