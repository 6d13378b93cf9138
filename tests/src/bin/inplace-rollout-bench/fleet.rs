//! `--scenario memory|startup|fleet`: a fleet of pods.

use super::*;

pub(super) async fn fleet(args: &Args, client: &Client, report: &mut Report) -> Result<()> {
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
pub(super) async fn fleet_in(
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
pub(super) async fn idle_sample(
    ctrl: &mut Controller,
    wall: Duration,
) -> Result<((f64, f64), f64, Usage)> {
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
pub(super) fn first_event<K>(
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

pub(super) async fn startup(
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
pub(super) async fn cleanup(client: &Client, ns: &str, sim: &mut Sim) {
    progress(format!("cleanup: deleting namespace {ns}"));
    if let Err(e) = delete_namespace_and_wait(client, ns, Duration::from_secs(900)).await {
        progress(format!("cleanup: namespace {ns}: {e:#}"));
    }
    if let Err(e) = sim.stop() {
        progress(format!("cleanup: simulator: {e:#}"));
    }
}

pub(super) fn check_bin(path: &Path, build: &str) -> Result<()> {
    if !path.is_file() {
        bail!("{} not found: {build}", path.display());
    }
    Ok(())
}
