//! CloneSets: the bench's CloneSet, the fleet watch, waiting until settled.

use super::*;

pub(super) fn cloneset(
    name: &str,
    sim: &Sim,
    replicas: u32,
    image: &str,
    max_unav: &str,
) -> Result<CloneSet> {
    let max_unav = match max_unav.trim().parse::<i64>() {
        Ok(n) => json!(n),
        Err(_) => json!(max_unav.trim()),
    };
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": {
                    "nodeSelector": sim.selector(),
                    "tolerations": sim.tolerations(),
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{ "name": "app", "image": image }],
                },
            },
            "updateStrategy": { "type": "InPlaceIfPossible", "maxUnavailable": max_unav },
        },
    }))?)
}

/// What [`wait_settled`] records of a fleet while it waits: the controller's sampled RSS
/// peak and, per CloneSet (in the order of its `names`), when its status first counted a
/// pod and when it settled, from the start of the wait.
#[derive(Debug, Default)]
pub(super) struct FleetWatch {
    pub(super) rss_peak_mib: f64,
    pub(super) first_pod: Vec<Option<Duration>>,
    pub(super) settled: Vec<Option<Duration>>,
}

impl FleetWatch {
    pub(super) fn saw(&mut self, i: usize, has_pods: bool, settled: bool, at: Duration) {
        for (list, seen) in [
            (&mut self.first_pod, has_pods),
            (&mut self.settled, settled),
        ] {
            if list.len() <= i {
                list.resize(i + 1, None);
            }
            if seen && list[i].is_none() {
                list[i] = Some(at);
            }
        }
    }

    /// `first..last s (last: name)` of `times`, or what is missing.
    pub(super) fn spread(times: &[Option<Duration>], names: &[(String, u32)]) -> String {
        let seen: Vec<(Duration, &str)> = times
            .iter()
            .zip(names)
            .filter_map(|(t, (name, _))| t.map(|t| (t, name.as_str())))
            .collect();
        let first = seen.iter().map(|(t, _)| *t).min();
        match (first, seen.iter().max_by_key(|(t, _)| *t)) {
            (Some(first), Some((last, name))) if seen.len() == names.len() => {
                format!("{:.1}-{:.1} s (last: {name})", secs(first), secs(*last))
            }
            _ => format!("{} of {} only", seen.len(), names.len()),
        }
    }
}

/// Polls the CloneSets until all are [`settled`]; returns the time it took.
pub(super) async fn wait_settled(
    api: &Api<CloneSet>,
    names: &[(String, u32)],
    ctrl: &mut Controller,
    timeout: Duration,
    every: Duration,
    mut fleet: Option<&mut FleetWatch>,
) -> Result<Duration> {
    let t0 = Instant::now();
    let mut last_print = Instant::now();
    loop {
        ctrl.check_alive()?;
        if let Some(u) = ctrl.usage()
            && let Some(fleet) = fleet.as_deref_mut()
        {
            fleet.rss_peak_mib = fleet.rss_peak_mib.max(u.rss_mib());
        }
        let mut all = true;
        let (mut ready, mut total, mut lines) = (0i64, 0i64, Vec::new());
        for (i, (name, want)) in names.iter().enumerate() {
            match api.get_opt(name).await {
                Ok(Some(cs)) => {
                    let done = settled(&cs, *want);
                    all &= done;
                    let replicas = cs.status.as_ref().map_or(0, |s| s.replicas);
                    if let Some(fleet) = fleet.as_deref_mut() {
                        fleet.saw(i, replicas > 0, done, t0.elapsed());
                    }
                    if let Some(s) = cs.status.as_ref() {
                        ready += i64::from(s.updated_ready_replicas);
                        total += i64::from(s.replicas);
                    }
                    if lines.len() < 2 {
                        lines.push(format!("{name}: {}", status_line(&cs)));
                    }
                }
                Ok(None) => bail!("CloneSet {name} disappeared"),
                Err(e) => {
                    all = false;
                    lines.push(format!("{name}: {e}"));
                }
            }
        }
        if all {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > timeout {
            bail!(
                "timed out after {timeout:?}: {ready} updated+ready of {total} pods; {}\ncontroller log tail:\n{}",
                lines.join("; "),
                ctrl.tail(30)
            );
        }
        if last_print.elapsed() > Duration::from_secs(20) {
            last_print = Instant::now();
            let started = fleet.as_deref().map_or(String::new(), |f| {
                format!(
                    "; CloneSets with pods {} of {}",
                    f.first_pod.iter().flatten().count(),
                    names.len()
                )
            });
            progress(format!(
                "{:>6.1}s: {total} pods, {ready} updated and ready{started}; {}",
                t0.elapsed().as_secs_f64(),
                lines.join("; ")
            ));
        }
        tokio::time::sleep(every).await;
    }
}
