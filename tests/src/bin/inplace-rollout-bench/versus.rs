//! `--scenario versus-deployment`: the same rollout done by kube-controller-manager.

use super::*;

type Counters = std::collections::BTreeMap<benchcalc::RequestKey, f64>;

/// The API server's write counters (`apiserver_request_total`), summed by verb/resource:
/// all of them, the refused ones and the 409 conflicts.
pub(super) async fn write_counters(client: &Client) -> Result<[Counters; 3]> {
    let req = kube::core::Request::new("")
        .get("metrics", &kube::api::GetParams::default())
        .context("building the /metrics request")?;
    let text = client
        .request_text(req)
        .await
        .context("reading the API server's /metrics")?;
    Ok([
        benchcalc::write_requests(&text),
        benchcalc::refused_write_requests(&text),
        benchcalc::conflict_write_requests(&text),
    ])
}

/// Pod writes by writer, from a pod watch: only counted while `counting`.
#[derive(Debug, Default)]
pub(super) struct WriteWatch {
    pub(super) synced: bool,
    pub(super) counting: bool,
    pub(super) facts: HashMap<String, benchcalc::PodFacts>,
    pub(super) writes: benchcalc::PodWrites,
    /// Counted events that changed a pod's status ([`benchcalc::status_changed`]).
    pub(super) status_changes: u64,
    pub(super) last_event: Option<Instant>,
    /// When counting started (the rollout's start), and each pod's way out of service
    /// and back ([`benchcalc::pace`]).
    pub(super) started: Option<Instant>,
    pub(super) pace: benchcalc::pace::PodPace,
}

impl WriteWatch {
    pub(super) fn apply(&mut self, pod: &Pod, init: bool, now: Instant) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let new = benchcalc::PodFacts::of(pod);
        let old = self.facts.insert(uid, new.clone());
        match self.started {
            Some(t0) if !init => self
                .pace
                .during(pod, secs(now.saturating_duration_since(t0))),
            _ => self.pace.before(pod),
        }
        if !init && self.counting {
            self.writes
                .add(benchcalc::pod_writer(old.as_ref(), Some(&new)));
            if benchcalc::status_changed(old.as_ref(), Some(&new)) {
                self.status_changes += 1;
            }
        }
        self.last_event = Some(now);
    }

    pub(super) fn delete(&mut self, pod: &Pod, now: Instant) {
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

pub(super) fn spawn_write_watch(
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
pub(super) async fn wait_quiet(
    w: &Arc<Mutex<WriteWatch>>,
    quiet: Duration,
    timeout: Duration,
) -> Result<()> {
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
pub(super) fn versus_template(app: &str, sim: &Sim, image: &str) -> serde_json::Value {
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

pub(super) fn deployment(
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
pub(super) fn deployment_done(d: &Deployment, want: u32) -> bool {
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

pub(super) fn deployment_line(d: &Deployment) -> String {
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
pub(super) struct Leg {
    pub(super) took: Duration,
    pub(super) requests: std::collections::BTreeMap<benchcalc::RequestKey, u64>,
    pub(super) writes: benchcalc::PodWrites,
    pub(super) waste: benchcalc::WriteWaste,
    pub(super) pace: benchcalc::pace::Timeline,
    /// Where the CPU went from the start to done ([`benchcalc::cpu::cpu_line`]).
    pub(super) cpu: String,
}

pub(super) async fn versus(args: &Args, client: &Client, report: &mut Report) -> Result<()> {
    let group = format!("ipb-v-{}", suffix());
    let update_delay = millis(&args.update_delay)?;
    let ready_delay = millis(&args.ready_delay)?;
    progress(format!(
        "versus-deployment: {} pods on {} simulated nodes ({group}-*), start/update delay {update_delay:?}, ready delay {ready_delay:?}",
        args.pods, args.nodes
    ));
    let delay = format!("{}ms", update_delay.as_millis());
    let ready = format!("{}ms", ready_delay.as_millis());
    let flags: Vec<String> = match (args.shape, &args.calibration) {
        (None, _) => [
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
        ]
        .map(str::to_owned)
        .to_vec(),
        (Some(shape), Some(cal)) => versus_shape::sim_flags(args, shape, cal)?,
        (Some(shape), None) => bail!(
            "--shape {} wants --calibration FILE (the real node's costs: the output of --scenario versus-deployment-real)",
            shape.name()
        ),
    };
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut sim = Sim::start(
        &args.nodesim_bin,
        &group,
        args.nodes,
        &with_sim_daemon(args, &flags),
    )?;
    let result = versus_in(args, client, &sim, &group, report).await;
    cleanup(client, &group, &mut sim).await;
    result
}

/// Counts the pods of `app` until none is left.
pub(super) async fn wait_pods_gone(pods: &Api<Pod>, app: &str, timeout: Duration) -> Result<()> {
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
pub(super) enum Polled {
    Done,
    /// Not yet; the workload's status, for progress and the timeout.
    Waiting(String),
}

/// One leg of `versus-deployment`, the same for the CloneSet and the Deployment: once
/// the pod writes of `app` are quiet, counts them and the API write requests from `start`
/// (the image patch) until `poll` says the rollout is done (polled every 100 ms) and the
/// trailing writes are quiet again. The time is from `start` to the poll that saw it done;
/// the CPU of the machine, the bed's processes and `children` is read over the same span.
#[allow(clippy::too_many_arguments)]
pub(super) async fn run_leg(
    client: &Client,
    pods: &Api<Pod>,
    app: &str,
    name: &str,
    timeout: Duration,
    children: &[(&str, Option<u32>)],
    start: impl AsyncFnOnce() -> Result<()>,
    mut poll: impl AsyncFnMut() -> Result<Polled>,
) -> Result<Leg> {
    let quiet = Duration::from_secs(2);
    let ww = Arc::new(Mutex::new(WriteWatch::default()));
    let task = spawn_write_watch(pods.clone(), app, ww.clone());
    wait_quiet(&ww, quiet, Duration::from_secs(120)).await?;
    let before = write_counters(client).await?;
    let cpu0 = cpu_sample(children);
    let t0 = Instant::now();
    if let Ok(mut w) = ww.lock() {
        w.counting = true;
        w.started = Some(t0);
    }
    start().await?;
    let mut last_print = Instant::now();
    let (took, cpu1) = loop {
        let line = match poll().await? {
            Polled::Done => break (t0.elapsed(), cpu_sample(children)),
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
    let (writes, status_changes, pace) = ww
        .lock()
        .map(|w| (w.writes.clone(), w.status_changes, w.pace.timeline.clone()))
        .unwrap_or_default();
    let [all, refused, conflicts] =
        [0, 1, 2].map(|i| benchcalc::request_delta(&before[i], &after[i]));
    Ok(Leg {
        took,
        waste: benchcalc::WriteWaste::of(&all, &refused, &conflicts, status_changes),
        requests: all,
        writes,
        pace,
        cpu: benchcalc::cpu::cpu_line(
            &cpu0,
            &cpu1,
            secs(took),
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        ),
    })
}

#[allow(clippy::too_many_lines)]
pub(super) async fn versus_in(
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
    let shape = args.shape;
    let tag = shape.map_or_else(
        || "versus-deployment".to_owned(),
        |s| format!("versus-deployment[{}]", s.name()),
    );
    let template = |app: &str| match shape {
        None => versus_template(app, sim, IMAGE_OLD),
        Some(s) => versus_shape::shape_template(s, app, sim, IMAGE_OLD),
    };
    // A merge patch replaces the container list: every container of the shape goes in it.
    let patch_to = |image: &str| {
        let containers = match shape {
            None => json!([{ "name": "app", "image": image }]),
            Some(s) => versus_shape::containers(s, image),
        };
        json!({ "spec": { "template": { "spec": { "containers": containers } } } })
    };
    let image_patch = patch_to(IMAGE_NEW);

    // 1. The CloneSet, in place.
    let mut ctrl = Controller::start_with(
        args,
        ns,
        "versus",
        shape.map_or(&[], versus_shape::controller_flags),
    )?;
    let csapi: Api<CloneSet> = Api::namespaced(client.clone(), ns);
    let app = "inplace";
    let mut cs = cloneset(app, sim, p, IMAGE_OLD, &args.max_unavailable)?;
    // The same template as the Deployment's.
    cs.spec.template = serde_json::from_value(template(app))?;
    if let Some(s) = shape {
        versus_shape::annotate(&mut cs, s, p);
    }
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
        &[
            ("inplace-controller", Some(ctrl.pid)),
            ("inplace-nodesim", sim.pid()),
        ],
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
        report.add(format!("{tag}: controller log: {l}"));
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
    let mut d = deployment(app, sim, p, IMAGE_OLD, &args.max_unavailable)?;
    if shape.is_some() {
        d.spec.get_or_insert_default().template = serde_json::from_value(template(app))?;
    }
    dapi.create(&PostParams::default(), &d).await?;
    // With a shape, an image the in-place leg's pre-download did not pull.
    let deploy_patch = match shape {
        None => image_patch.clone(),
        Some(_) => patch_to(versus_shape::IMAGE_NEW_DEPLOY),
    };
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
        &[("inplace-nodesim", sim.pid())],
        async || {
            dapi.patch(app, &PatchParams::default(), &Patch::Merge(&deploy_patch))
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
    match (shape, &args.calibration) {
        (Some(s), Some(cal)) => {
            report.add(format!(
                "{tag}: {p} pods on {} simulated nodes, maxUnavailable {} = {mu} pods ({batches} batches), Deployment maxSurge 0, same template; simulator calibrated from {} (shape {}), unmeasured delays: start = update {}, ready {}; {}",
                args.nodes,
                args.max_unavailable,
                cal.display(),
                s.name(),
                args.update_delay,
                args.ready_delay,
                sim_daemon_words(args)
            ));
            report.add(versus_shape::shape_line(s, inplace.took, deploy.took));
        }
        _ => {
            report.add(format!(
                "versus-deployment: {p} pods on {} simulated nodes, maxUnavailable {} = {mu} pods ({batches} batches), Deployment maxSurge 0; simulator: start delay = update delay {}, ready delay {}; {}",
                args.nodes,
                args.max_unavailable,
                args.update_delay,
                args.ready_delay,
                sim_daemon_words(args)
            ));
            report.add(benchcalc::versus_line(inplace.took, deploy.took));
        }
    }
    for (name, leg, workload) in [
        ("in-place", &inplace, "inplace controller"),
        ("deployment", &deploy, "kube-controller-manager"),
    ] {
        use benchcalc::PodWriter as W;
        let w = &leg.writes;
        report.add(format!(
            "{tag}: {name} pod writes seen by a watch: {} ({:.2}/pod): {workload} {} ({:.2}/pod), daemon {} ({:.2}/pod), scheduler {}, simulated kubelet {} ({:.2}/pod), unattributed {}",
            w.total(),
            w.per_pod(None, p),
            w.get(W::Workload),
            w.per_pod(Some(W::Workload), p),
            w.get(W::Daemon),
            w.per_pod(Some(W::Daemon), p),
            w.get(W::Scheduler),
            w.get(W::Kubelet),
            w.per_pod(Some(W::Kubelet), p),
            w.get(W::Unknown)
        ));
        let pod_reqs = benchcalc::requests_on(&leg.requests, "pods");
        let all: u64 = leg.requests.values().sum();
        report.add(format!(
            "{tag}: {name} API write requests (apiserver_request_total, all clients): {all} in all, {pod_reqs} on pods ({:.2}/pod): {}",
            pod_reqs as f64 / f64::from(p.max(1)),
            benchcalc::delta_line(&leg.requests)
        ));
        report.add(format!("{tag}: {name} {}", leg.waste.line()));
        let budget = usize::try_from(mu).unwrap_or(usize::MAX);
        report.add(format!(
            "{tag}: {name} {}",
            leg.pace.line(budget, secs(leg.took))
        ));
        report.add(format!("{tag}: {name} {}", leg.cpu));
    }
    Ok(())
}
