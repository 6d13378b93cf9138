//! Pure arithmetic of `inplace-rollout-bench`: budgets and batches, the theoretical
//! minimum of a rollout, percentiles, rollout milestones, /proc figures of a child
//! process and the target verdicts. No I/O here; unit tested.

pub mod cpu;
pub mod pace;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

pub use crate::nodesim::procstat::{cpu_seconds, rss_kib};

/// `maxUnavailable` ("20%" or "200") scaled to `total` pods the way a CloneSet without
/// maxSurge does: a percentage rounds down, and the budget is at least one pod.
pub fn max_unavailable(total: u32, value: &str) -> Result<u32, String> {
    let value = value.trim();
    let n = match value.strip_suffix('%') {
        Some(pct) => {
            let pct: u64 = pct
                .trim()
                .parse()
                .map_err(|_| format!("bad percentage {value:?}"))?;
            if pct > 100 {
                return Err(format!("percentage over 100: {value:?}"));
            }
            u64::from(total) * pct / 100
        }
        None => value
            .parse::<u64>()
            .map_err(|_| format!("bad count {value:?}"))?,
    };
    let n = u32::try_from(n.min(u64::from(total))).unwrap_or(total);
    Ok(n.max(1))
}

/// How many waves of at most `per_batch` pods update `total` pods: ceil(total / per_batch).
pub fn batches(total: u32, per_batch: u32) -> u32 {
    if total == 0 {
        return 0;
    }
    total.div_ceil(per_batch.max(1))
}

/// The fastest possible rollout: every wave takes exactly one per-pod latency.
pub fn theoretical_min(batches: u32, per_pod: Duration) -> Duration {
    per_pod * batches
}

/// `actual / minimum` (infinite when the minimum is zero).
pub fn ratio(actual: Duration, minimum: Duration) -> f64 {
    if minimum.is_zero() {
        return f64::INFINITY;
    }
    actual.as_secs_f64() / minimum.as_secs_f64()
}

/// The median of `times`, which it sorts (the mean of the middle two for an even count);
/// zero for none.
pub fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    let mid = times.len() / 2;
    match times.len() {
        0 => Duration::ZERO,
        n if n.is_multiple_of(2) => (times[mid - 1] + times[mid]) / 2,
        _ => times[mid],
    }
}

/// `times` in seconds with two decimals, separated by spaces.
pub fn secs_list(times: &[Duration]) -> String {
    times
        .iter()
        .map(|t| format!("{:.2}", t.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Nearest-rank percentile (`q` in 0..=1) of an ascending slice.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let q = q.clamp(0.0, 1.0);
    // Rank ceil(q * n), 1-based; q = 0 is the minimum.
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.max(1) - 1).copied()
}

/// min / p50 / p90 / p99 / max of a sample (seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(mut values: Vec<f64>) -> Option<Summary> {
        values.retain(|v| v.is_finite());
        values.sort_by(f64::total_cmp);
        Some(Summary {
            n: values.len(),
            min: *values.first()?,
            p50: percentile(&values, 0.5)?,
            p90: percentile(&values, 0.9)?,
            p99: percentile(&values, 0.99)?,
            max: *values.last()?,
        })
    }

    pub fn line(&self) -> String {
        format!(
            "n={} min={:.2}s p50={:.2}s p90={:.2}s p99={:.2}s max={:.2}s",
            self.n, self.min, self.p50, self.p90, self.p99, self.max
        )
    }
}

/// The moments (seconds after the start) at which every `step`-th pod finished, and the
/// last one: `finished` are the pods' finishing times, in any order.
pub fn milestones(finished: &[f64], step: usize) -> Vec<(usize, f64)> {
    let mut sorted: Vec<f64> = finished.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let step = step.max(1);
    let mut out: Vec<(usize, f64)> = sorted
        .iter()
        .enumerate()
        .filter(|(i, _)| (i + 1) % step == 0)
        .map(|(i, t)| (i + 1, *t))
        .collect();
    if let Some(last) = sorted.last()
        && out.last().is_none_or(|(n, _)| *n != sorted.len())
    {
        out.push((sorted.len(), *last));
    }
    out
}

/// A `Vm…:` line of /proc/<pid>/status in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Resident memory and CPU time of a process, from the text of its /proc files.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    pub rss_kib: u64,
    /// Peak resident memory (VmHWM).
    pub hwm_kib: u64,
    /// utime + stime, seconds.
    pub cpu_s: f64,
}

impl Usage {
    pub fn parse(status: &str, stat: &str) -> Option<Usage> {
        Some(Usage {
            rss_kib: status_kib(status, "VmRSS")?,
            hwm_kib: status_kib(status, "VmHWM")?,
            cpu_s: cpu_seconds(stat)?,
        })
    }

    pub fn rss_mib(&self) -> f64 {
        self.rss_kib as f64 / 1024.0
    }

    pub fn hwm_mib(&self) -> f64 {
        self.hwm_kib as f64 / 1024.0
    }
}

/// The targets of a fleet of cached pods (issue 15 item 6).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FleetTargets {
    /// Controller RSS, steady and peak, MiB.
    pub rss_mib: f64,
    /// Restart to the first action, seconds.
    pub startup_s: f64,
}

/// Up to 10,000 pods: RSS ≤ 64 MiB and restart to first action ≤ 5 s; above, toward
/// 100,000 pods, the reference's memory limit (512 MiB) and 10 s.
pub fn fleet_targets(pods: u32) -> FleetTargets {
    if pods <= 10_000 {
        FleetTargets {
            rss_mib: 64.0,
            startup_s: 5.0,
        }
    } else {
        FleetTargets {
            rss_mib: 512.0,
            startup_s: 10.0,
        }
    }
}

/// CPU share (1.0 = one core) of `cpu_s` CPU seconds spent over `wall`.
pub fn cpu_share(cpu_s: f64, wall: Duration) -> f64 {
    if wall.is_zero() {
        return 0.0;
    }
    cpu_s / wall.as_secs_f64()
}

/// "met" / "NOT met" for `value <= limit`.
pub fn verdict(value: f64, limit: f64) -> &'static str {
    if value.is_finite() && value <= limit {
        "met"
    } else {
        "NOT met"
    }
}

/// Splits `total` pods over `sets` CloneSets as evenly as possible (the first ones get
/// the remainder).
pub fn split(total: u32, sets: u32) -> Vec<u32> {
    let sets = sets.max(1);
    let (base, rem) = (total / sets, total % sets);
    (0..sets).map(|i| base + u32::from(i < rem)).collect()
}

/// `deployment / in_place`: how many times faster the in-place rollout was (infinite when
/// the in-place time is zero).
pub fn speedup(in_place: Duration, deployment: Duration) -> f64 {
    ratio(deployment, in_place)
}

/// The headline of `--scenario versus-deployment`.
pub fn versus_line(in_place: Duration, deployment: Duration) -> String {
    format!(
        "versus-deployment: in-place {:.2} s, deployment {:.2} s, speed-up {:.2}",
        in_place.as_secs_f64(),
        deployment.as_secs_f64(),
        speedup(in_place, deployment)
    )
}

/// Verbs of `apiserver_request_total` that write.
pub const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "DELETE",
    "DELETECOLLECTION",
    "APPLY",
];

/// (verb, resource, subresource) of a request counter.
pub type RequestKey = (String, String, String);

/// The labels of one Prometheus sample line `name{k="v",...} value`: `None` when the line
/// is not a sample of `name`.
fn sample<'a>(line: &'a str, name: &str) -> Option<(BTreeMap<&'a str, String>, f64)> {
    let rest = line.strip_prefix(name)?;
    let (labels, value) = match rest.strip_prefix('{') {
        Some(r) => {
            let end = r.rfind('}')?;
            (&r[..end], &r[end + 1..])
        }
        None if rest.starts_with(' ') => ("", rest),
        None => return None,
    };
    let value: f64 = value.split_whitespace().next()?.parse().ok()?;
    let mut out = BTreeMap::new();
    let mut s = labels;
    while !s.is_empty() {
        let (key, r) = s.split_once("=\"")?;
        let mut val = String::new();
        let mut chars = r.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => val.push('\n'),
                    Some((_, e)) => val.push(e),
                    None => return None,
                },
                '"' => {
                    end = Some(i);
                    break;
                }
                c => val.push(c),
            }
        }
        let end = end?;
        out.insert(key.trim_start_matches(',').trim(), val);
        s = r[end + 1..].trim_start_matches(',');
    }
    Some((out, value))
}

/// The API server's write requests so far, summed by (verb, resource, subresource) over
/// response codes, groups and scopes, from the text of its `/metrics`.
pub fn write_requests(metrics: &str) -> BTreeMap<RequestKey, f64> {
    write_requests_where(metrics, |_| true)
}

/// [`write_requests`] the API server refused (a response code other than 2xx: 409
/// conflicts, 422, 429, 5xx): each one is a write its client has to decide and send again.
pub fn refused_write_requests(metrics: &str) -> BTreeMap<RequestKey, f64> {
    write_requests_where(metrics, |code| !code.starts_with('2'))
}

/// [`write_requests`] answered with a response code `keep` accepts.
fn write_requests_where(metrics: &str, keep: impl Fn(&str) -> bool) -> BTreeMap<RequestKey, f64> {
    let mut out = BTreeMap::new();
    for line in metrics.lines() {
        let Some((labels, value)) = sample(line, "apiserver_request_total") else {
            continue;
        };
        let verb = labels.get("verb").cloned().unwrap_or_default();
        if !WRITE_VERBS.contains(&verb.as_str()) {
            continue;
        }
        if !keep(labels.get("code").map_or("", String::as_str)) {
            continue;
        }
        let key = (
            verb,
            labels.get("resource").cloned().unwrap_or_default(),
            labels.get("subresource").cloned().unwrap_or_default(),
        );
        *out.entry(key).or_insert(0.0) += value;
    }
    out
}

/// `after - before` for every counter that grew (a counter missing before counts from 0).
pub fn request_delta(
    before: &BTreeMap<RequestKey, f64>,
    after: &BTreeMap<RequestKey, f64>,
) -> BTreeMap<RequestKey, u64> {
    after
        .iter()
        .filter_map(|(k, a)| {
            let d = a - before.get(k).copied().unwrap_or(0.0);
            (d >= 0.5).then(|| (k.clone(), d.round() as u64))
        })
        .collect()
}

/// Sum of the deltas whose resource is `resource` (any verb and subresource).
pub fn requests_on(delta: &BTreeMap<RequestKey, u64>, resource: &str) -> u64 {
    delta
        .iter()
        .filter(|((_, r, _), _)| r == resource)
        .map(|(_, n)| n)
        .sum()
}

/// Sum of the deltas on `resource`/`subresource` (any verb).
pub fn requests_on_sub(delta: &BTreeMap<RequestKey, u64>, resource: &str, sub: &str) -> u64 {
    delta
        .iter()
        .filter(|((_, r, s), _)| r == resource && s == sub)
        .map(|(_, n)| n)
        .sum()
}

/// What a leg's pod writes cost beyond what they changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteWaste {
    /// `pods/status` writes the API server accepted.
    pub status_accepted: u64,
    /// Of those, the ones no watch event shows a status change for: the API server either
    /// stored nothing (no event) or only a new resourceVersion and managedFields.
    pub status_unchanged: u64,
    /// Pod writes (any subresource) the API server refused, by 409 conflict.
    pub pod_conflicts: u64,
    /// Pod writes refused for any reason (409 included).
    pub pod_refused: u64,
}

impl WriteWaste {
    /// From a leg's write request deltas (all, and refused; the 409 ones among those) and
    /// the number of pod watch events whose status changed ([`status_changed`]).
    pub fn of(
        all: &BTreeMap<RequestKey, u64>,
        refused: &BTreeMap<RequestKey, u64>,
        conflicts: &BTreeMap<RequestKey, u64>,
        status_changes: u64,
    ) -> WriteWaste {
        let status_accepted = requests_on_sub(all, "pods", "status")
            .saturating_sub(requests_on_sub(refused, "pods", "status"));
        WriteWaste {
            status_accepted,
            status_unchanged: status_accepted.saturating_sub(status_changes),
            pod_conflicts: requests_on(conflicts, "pods"),
            pod_refused: requests_on(refused, "pods"),
        }
    }

    /// `pods/status patches that changed nothing: N of M accepted; pod writes refused: R (409: C)`.
    pub fn line(&self) -> String {
        format!(
            "pods/status patches that changed nothing: {} of {} accepted; pod writes refused (retried or dropped): {} ({} of them 409 conflicts)",
            self.status_unchanged, self.status_accepted, self.pod_refused, self.pod_conflicts
        )
    }
}

/// [`write_requests`] answered 409 Conflict.
pub fn conflict_write_requests(metrics: &str) -> BTreeMap<RequestKey, f64> {
    write_requests_where(metrics, |code| code == "409")
}

/// `POST pods/binding=200 PATCH pods/status=812 ...`, largest first.
pub fn delta_line(delta: &BTreeMap<RequestKey, u64>) -> String {
    let mut v: Vec<(&RequestKey, &u64)> = delta.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|((verb, res, sub), n)| {
            if sub.is_empty() {
                format!("{verb} {res}={n}")
            } else {
                format!("{verb} {res}/{sub}={n}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Pod conditions written by a workload controller, not by the kubelet.
pub const CONTROLLER_CONDITIONS: [&str; 2] = ["InPlaceUpdateReady", "KruisePodReady"];

/// What one pod watch event tells about who wrote it: the parts of a pod that different
/// writers own, each as comparable text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// Labels, annotations, finalizers and owner references.
    pub meta: String,
    /// The spec without `nodeName`.
    pub spec: String,
    pub node: Option<String>,
    pub deleting: bool,
    /// `metadata.deletionGracePeriodSeconds`.
    pub deletion_grace: Option<i64>,
    /// The keys of the in-place state annotation that only the node daemon writes
    /// ([`DAEMON_STATE_KEYS`]), as a JSON object; empty when the pod has none.
    pub daemon_state: String,
    /// The [`CONTROLLER_CONDITIONS`] of the status.
    pub controller_status: String,
    /// The rest of the status (the kubelet's part).
    pub kubelet_status: String,
}

impl PodFacts {
    pub fn of(pod: &Pod) -> PodFacts {
        let m = &pod.metadata;
        let meta = serde_json::json!([m.labels, m.annotations, m.finalizers, m.owner_references]);
        let (spec, node) = match pod.spec.as_ref() {
            Some(s) => {
                let mut s = s.clone();
                let node = s.node_name.take();
                (serde_json::to_string(&s).unwrap_or_default(), node)
            }
            None => (String::new(), None),
        };
        let (controller_status, kubelet_status) = match pod.status.as_ref() {
            Some(st) => {
                let mut st = st.clone();
                let conds = st.conditions.take().unwrap_or_default();
                let (ours, theirs): (Vec<_>, Vec<_>) = conds
                    .into_iter()
                    .partition(|c| CONTROLLER_CONDITIONS.contains(&c.type_.as_str()));
                st.conditions = Some(theirs);
                (
                    serde_json::to_string(&ours).unwrap_or_default(),
                    serde_json::to_string(&st).unwrap_or_default(),
                )
            }
            None => (String::new(), String::new()),
        };
        PodFacts {
            meta: meta.to_string(),
            spec,
            node,
            deleting: m.deletion_timestamp.is_some(),
            deletion_grace: m.deletion_grace_period_seconds,
            daemon_state: daemon_state(pod),
            controller_status,
            kubelet_status,
        }
    }
}

/// The keys of the in-place state annotation that only the node daemon writes: the
/// container ids its completion records, the containers it stopped for an env restart,
/// and `daemonEnvChecked` (the serde name of `InPlaceUpdateState::daemon_env_checked`).
pub const DAEMON_STATE_KEYS: [&str; 3] = [
    inplace_daemon::inplace::decide::STATE_CONTAINER_IDS_KEY,
    inplace_daemon::inplace::decide::STATE_ENV_STOPPED_KEY,
    "daemonEnvChecked",
];

/// [`DAEMON_STATE_KEYS`] of `pod`'s in-place state annotation, as a JSON object (empty
/// text when the pod has none of them, or no readable state).
fn daemon_state(pod: &Pod) -> String {
    use inplace_proto::keys;
    let Some(raw) = pod.metadata.annotations.as_ref().and_then(|a| {
        a.get(keys::INPLACE_UPDATE_STATE_ANNOTATION)
            .or_else(|| a.get(keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY))
    }) else {
        return String::new();
    };
    let Ok(serde_json::Value::Object(state)) = serde_json::from_str(raw) else {
        return String::new();
    };
    let ours: serde_json::Map<String, serde_json::Value> = DAEMON_STATE_KEYS
        .iter()
        .filter_map(|k| Some(((*k).to_owned(), state.get(*k)?.clone())))
        .collect();
    if ours.is_empty() {
        String::new()
    } else {
        serde_json::Value::Object(ours).to_string()
    }
}

/// Whether a pod watch event shows a change of the pod's status (the kubelet's part or
/// the workload controller's conditions): only a `pods/status` write changes the status,
/// so every accepted status write without such an event changed nothing. A creation and
/// the final deletion are no status writes.
pub fn status_changed(old: Option<&PodFacts>, new: Option<&PodFacts>) -> bool {
    match (old, new) {
        (Some(o), Some(n)) => {
            o.kubelet_status != n.kubelet_status || o.controller_status != n.controller_status
        }
        _ => false,
    }
}

/// Who made a pod write, judged by what it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PodWriter {
    /// The workload controller (inplace's CloneSet controller, or the ReplicaSet
    /// controller of kube-controller-manager): creation, deletion mark, spec, labels and
    /// annotations, its own pod conditions.
    Workload,
    /// The node daemon (`inplace-daemon`, or the simulated nodes' stand-in): a write that
    /// records its own keys in the in-place state ([`DAEMON_STATE_KEYS`]: the completion's
    /// container ids, with `InPlaceUpdateReady` True and the lifecycle label; the
    /// containers it stopped; `daemonEnvChecked`), through `pods/status`, never the spec.
    /// A completion whose ids were recorded already shows as the workload controller's.
    Daemon,
    /// kube-scheduler: the binding.
    Scheduler,
    /// The (simulated) kubelet: status, and the final delete after the grace period (a
    /// delete with grace 0 of a terminating pod shows as a modification that only lowers
    /// `deletionGracePeriodSeconds`, then as the deletion).
    Kubelet,
    /// A modification that changed none of the parts above (e.g. managedFields only).
    Unknown,
}

/// The writer of a watch event: `old` is the pod before (`None` for a creation), `new`
/// after (`None` for the final deletion).
pub fn pod_writer(old: Option<&PodFacts>, new: Option<&PodFacts>) -> PodWriter {
    let (old, new) = match (old, new) {
        (None, Some(_)) => return PodWriter::Workload,
        (_, None) => return PodWriter::Kubelet,
        (Some(o), Some(n)) => (o, n),
    };
    if old.node.is_none() && new.node.is_some() {
        PodWriter::Scheduler
    } else if old.deleting && new.deleting && new.deletion_grace != old.deletion_grace {
        PodWriter::Kubelet
    } else if new.spec == old.spec
        && new.deleting == old.deleting
        && !new.daemon_state.is_empty()
        && new.daemon_state != old.daemon_state
    {
        PodWriter::Daemon
    } else if new.deleting != old.deleting
        || new.meta != old.meta
        || new.spec != old.spec
        || new.controller_status != old.controller_status
    {
        PodWriter::Workload
    } else if new.kubelet_status != old.kubelet_status {
        PodWriter::Kubelet
    } else {
        PodWriter::Unknown
    }
}

/// Pod writes seen through a watch, by writer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodWrites {
    pub by: BTreeMap<PodWriter, u64>,
}

impl PodWrites {
    pub fn add(&mut self, w: PodWriter) {
        *self.by.entry(w).or_insert(0) += 1;
    }

    pub fn get(&self, w: PodWriter) -> u64 {
        self.by.get(&w).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.by.values().sum()
    }

    /// Writes per pod (`pods` = 0 gives 0).
    pub fn per_pod(&self, w: Option<PodWriter>, pods: u32) -> f64 {
        if pods == 0 {
            return 0.0;
        }
        let n = w.map_or_else(|| self.total(), |w| self.get(w));
        n as f64 / f64::from(pods)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_targets_are_the_10k_ones_up_to_10k_pods_then_the_references() {
        assert_eq!(fleet_targets(10_000).rss_mib, 64.0);
        assert_eq!(fleet_targets(10_000).startup_s, 5.0);
        assert_eq!(fleet_targets(10_001).rss_mib, 512.0);
        assert_eq!(fleet_targets(100_000).startup_s, 10.0);
    }

    #[test]
    fn medians_and_lists_of_times() {
        let ms = Duration::from_millis;
        let mut odd = [ms(3000), ms(1000), ms(2000)];
        assert_eq!(median(&mut odd), ms(2000));
        assert_eq!(secs_list(&odd), "1.00 2.00 3.00");
        let mut even = [ms(4000), ms(1000), ms(2000), ms(3000)];
        assert_eq!(median(&mut even), ms(2500));
        assert_eq!(median(&mut []), Duration::ZERO);
        assert_eq!(secs_list(&[]), "");
    }

    #[test]
    fn budgets_and_batches() {
        assert_eq!(max_unavailable(1000, "20%"), Ok(200));
        assert_eq!(max_unavailable(200, "20%"), Ok(40));
        assert_eq!(max_unavailable(7, "20%"), Ok(1)); // 1.4 rounds down
        assert_eq!(max_unavailable(3, "20%"), Ok(1)); // 0 → at least one
        assert_eq!(max_unavailable(10, "25"), Ok(10)); // a count is capped at the total
        assert_eq!(max_unavailable(10, " 3 "), Ok(3));
        assert!(max_unavailable(10, "x%").is_err());
        assert!(max_unavailable(10, "120%").is_err());
        assert!(max_unavailable(10, "-1").is_err());
        assert_eq!(batches(1000, 200), 5);
        assert_eq!(batches(1001, 200), 6);
        assert_eq!(batches(7, 1), 7);
        assert_eq!(batches(0, 200), 0);
        assert_eq!(batches(5, 0), 5);
    }

    #[test]
    fn minimum_and_ratio() {
        let min = theoretical_min(5, Duration::from_millis(3_000));
        assert_eq!(min, Duration::from_secs(15));
        assert!((ratio(Duration::from_secs(18), min) - 1.2).abs() < 1e-9);
        assert!(ratio(Duration::from_secs(1), Duration::ZERO).is_infinite());
        assert_eq!(verdict(1.2, 1.2), "met");
        assert_eq!(verdict(1.21, 1.2), "NOT met");
        assert_eq!(verdict(f64::INFINITY, 1.2), "NOT met");
        assert_eq!(verdict(f64::NAN, 1.2), "NOT met");
    }

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(50.0));
        assert_eq!(percentile(&v, 0.9), Some(90.0));
        assert_eq!(percentile(&v, 0.99), Some(99.0));
        assert_eq!(percentile(&v, 1.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[7.0], 0.5), Some(7.0));
        let s = Summary::of(vec![3.0, 1.0, f64::NAN, 2.0]);
        assert_eq!(
            s,
            Some(Summary {
                n: 3,
                min: 1.0,
                p50: 2.0,
                p90: 3.0,
                p99: 3.0,
                max: 3.0
            })
        );
        assert_eq!(Summary::of(vec![]), None);
        assert!(s.is_some_and(|s| s.line().contains("p50=2.00s")));
    }

    #[test]
    fn milestones_every_batch_and_the_last() {
        let t = [5.0, 1.0, 2.0, 4.0, 3.0];
        assert_eq!(milestones(&t, 2), vec![(2, 2.0), (4, 4.0), (5, 5.0)]);
        assert_eq!(milestones(&t, 5), vec![(5, 5.0)]);
        assert_eq!(milestones(&[], 5), vec![]);
        assert_eq!(milestones(&[1.0], 0), vec![(1, 1.0)]);
    }

    #[test]
    fn proc_text() {
        let status = "Name:\tinplace-contr\nVmPeak:\t 900000 kB\nVmHWM:\t   70000 kB\nVmRSS:\t   52224 kB\nVmRSSx: 1 kB\n";
        let stat = "77 (inplace-controller) S 1 77 77 0 -1 0 0 0 0 0 250 50 0 0 20 0 9 0 1 2 3";
        let u = Usage::parse(status, stat);
        assert_eq!(
            u,
            Some(Usage {
                rss_kib: 52_224,
                hwm_kib: 70_000,
                cpu_s: 3.0
            })
        );
        assert!(u.is_some_and(|u| (u.rss_mib() - 51.0).abs() < 1e-9));
        assert_eq!(status_kib(status, "VmPeak"), Some(900_000));
        assert_eq!(status_kib(status, "VmSwap"), None);
        assert_eq!(Usage::parse("Name: x\n", stat), None);
        assert!((cpu_share(3.0, Duration::from_secs(30)) - 0.1).abs() < 1e-9);
        assert_eq!(cpu_share(3.0, Duration::ZERO), 0.0);
    }

    #[test]
    fn splits_evenly() {
        assert_eq!(split(10_000, 10), vec![1000; 10]);
        assert_eq!(split(10, 3), vec![4, 3, 3]);
        assert_eq!(split(5, 0), vec![5]);
        assert_eq!(split(10, 3).iter().sum::<u32>(), 10);
    }

    #[test]
    fn speedup_and_headline() {
        let (a, b) = (Duration::from_secs(10), Duration::from_secs(55));
        assert!((speedup(a, b) - 5.5).abs() < 1e-9);
        assert!(speedup(Duration::ZERO, b).is_infinite());
        assert_eq!(
            versus_line(Duration::from_millis(15_250), Duration::from_millis(30_500)),
            "versus-deployment: in-place 15.25 s, deployment 30.50 s, speed-up 2.00"
        );
    }

    const METRICS: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="",contentType="application/json",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",contentType="application/vnd.kubernetes.protobuf",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 40
apiserver_request_total{code="409",component="apiserver",contentType="application/json",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 99
apiserver_request_total{code="200",component="apiserver",contentType="a\"b,c",dry_run="",group="apps",resource="replicasets",scope="resource",subresource="",verb="PUT",version="v1"} 3e0
apiserver_request_total_other{verb="POST",resource="pods"} 5
"#;

    #[test]
    fn write_requests_from_metrics() {
        let w = write_requests(METRICS);
        let key = |v: &str, r: &str, s: &str| (v.to_owned(), r.to_owned(), s.to_owned());
        assert_eq!(w.get(&key("POST", "pods", "binding")), Some(&10.0));
        assert_eq!(w.get(&key("PATCH", "pods", "status")), Some(&42.0)); // codes summed
        assert_eq!(w.get(&key("PUT", "replicasets", "")), Some(&3.0)); // escaped quote
        assert_eq!(w.get(&key("LIST", "pods", "")), None); // not a write
        assert_eq!(w.len(), 3); // the _other metric is not ours
        let mut after = w.clone();
        *after.entry(key("PATCH", "pods", "status")).or_default() += 8.0;
        after.insert(key("DELETE", "pods", ""), 4.0);
        let d = request_delta(&w, &after);
        assert_eq!(
            d.clone().into_iter().collect::<Vec<_>>(),
            vec![
                (key("DELETE", "pods", ""), 4),
                (key("PATCH", "pods", "status"), 8)
            ]
        );
        assert_eq!(requests_on(&d, "pods"), 12);
        assert_eq!(requests_on(&d, "replicasets"), 0);
        assert_eq!(delta_line(&d), "PATCH pods/status=8 DELETE pods=4");
        assert_eq!(delta_line(&BTreeMap::new()), "");
    }

    #[test]
    fn refused_and_conflicting_writes_by_code() {
        let key = |v: &str, r: &str, s: &str| (v.to_owned(), r.to_owned(), s.to_owned());
        let refused = refused_write_requests(METRICS);
        assert_eq!(
            refused.into_iter().collect::<Vec<_>>(),
            vec![(key("PATCH", "pods", "status"), 2.0)]
        );
        let conflicts = conflict_write_requests(METRICS);
        assert_eq!(conflicts.get(&key("PATCH", "pods", "status")), Some(&2.0));
        assert_eq!(conflicts.len(), 1);
        let more = METRICS.to_owned()
            + r#"apiserver_request_total{code="422",resource="pods",subresource="",verb="PATCH"} 5
apiserver_request_total{code="201",resource="pods",subresource="",verb="POST"} 6
"#;
        let refused = refused_write_requests(&more);
        assert_eq!(refused.get(&key("PATCH", "pods", "")), Some(&5.0));
        assert_eq!(refused.get(&key("POST", "pods", "")), None);
        assert_eq!(conflict_write_requests(&more).len(), 1);
    }

    #[test]
    fn waste_counts_accepted_status_writes_without_a_status_change() {
        let key = |v: &str, r: &str, s: &str| (v.to_owned(), r.to_owned(), s.to_owned());
        let all = BTreeMap::from([
            (key("PATCH", "pods", "status"), 100),
            (key("PUT", "pods", "status"), 5),
            (key("PATCH", "pods", ""), 40),
            (key("POST", "pods", "binding"), 10),
            (key("PUT", "replicasets", "status"), 9),
        ]);
        let refused = BTreeMap::from([
            (key("PATCH", "pods", "status"), 7),
            (key("PATCH", "pods", ""), 3),
            (key("PUT", "replicasets", "status"), 2),
        ]);
        let conflicts = BTreeMap::from([(key("PATCH", "pods", "status"), 6)]);
        assert_eq!(requests_on_sub(&all, "pods", "status"), 105);
        assert_eq!(requests_on_sub(&all, "pods", ""), 40);
        let w = WriteWaste::of(&all, &refused, &conflicts, 90);
        assert_eq!(
            w,
            WriteWaste {
                status_accepted: 98,
                status_unchanged: 8,
                pod_conflicts: 6,
                pod_refused: 10,
            }
        );
        assert_eq!(
            w.line(),
            "pods/status patches that changed nothing: 8 of 98 accepted; pod writes refused (retried or dropped): 10 (6 of them 409 conflicts)"
        );
        // More status changes than accepted writes (a watch never sees fewer writes than
        // there are; a relist can replay one): none unchanged, never negative.
        assert_eq!(
            WriteWaste::of(&all, &refused, &conflicts, 200).status_unchanged,
            0
        );
        assert_eq!(
            WriteWaste::of(&BTreeMap::new(), &BTreeMap::new(), &BTreeMap::new(), 0),
            WriteWaste::default()
        );
    }

    #[test]
    fn status_changes_seen_by_a_watch() -> Result<(), serde_json::Error> {
        let base = serde_json::json!({
            "metadata": { "name": "p", "resourceVersion": "1" },
            "spec": { "containers": [{ "name": "app", "image": "v1" }] },
            "status": { "phase": "Running",
                        "conditions": [{ "type": "Ready", "status": "True" }] },
        });
        let before = facts(&base)?;
        let mut v = base.clone();
        v["metadata"]["resourceVersion"] = "2".into();
        v["metadata"]["managedFields"] =
            serde_json::json!([{ "manager": "x", "operation": "Update" }]);
        let only_rv = facts(&v)?;
        let mut c = base.clone();
        c["status"]["conditions"] = serde_json::json!([
            { "type": "Ready", "status": "True" },
            { "type": "InPlaceUpdateReady", "status": "True" }]);
        let ours = facts(&c)?;
        let mut k = base.clone();
        k["status"]["conditions"][0]["status"] = "False".into();
        let kubelets = facts(&k)?;
        let mut l = base.clone();
        l["metadata"]["labels"] = serde_json::json!({ "a": "b" });
        let labelled = facts(&l)?;
        let mut sp = base.clone();
        sp["spec"]["containers"][0]["image"] = "v2".into();
        let spec = facts(&sp)?;
        let table = [
            (Some(&before), Some(&only_rv), false),
            (Some(&before), Some(&ours), true),
            (Some(&before), Some(&kubelets), true),
            (Some(&before), Some(&labelled), false),
            (Some(&before), Some(&spec), false),
            (None, Some(&before), false),
            (Some(&before), None, false),
        ];
        for (i, (old, new, want)) in table.into_iter().enumerate() {
            assert_eq!(status_changed(old, new), want, "case {i}");
        }
        Ok(())
    }

    fn facts(v: &serde_json::Value) -> Result<PodFacts, serde_json::Error> {
        Ok(PodFacts::of(&serde_json::from_value::<Pod>(v.clone())?))
    }

    #[test]
    fn pod_writers_by_what_changed() -> Result<(), serde_json::Error> {
        let base = serde_json::json!({
            "metadata": { "name": "p", "labels": { "app": "a" } },
            "spec": { "containers": [{ "name": "app", "image": "v1" }] },
            "status": { "phase": "Pending" },
        });
        let created = facts(&base)?;
        let mut v = base.clone();
        v["spec"]["nodeName"] = "n1".into();
        let bound = facts(&v)?;
        v["status"]["phase"] = "Running".into();
        v["status"]["conditions"] = serde_json::json!([{ "type": "Ready", "status": "True" }]);
        let running = facts(&v)?;
        let mut g = v.clone();
        g["status"]["conditions"] = serde_json::json!([
            { "type": "Ready", "status": "True" },
            { "type": "InPlaceUpdateReady", "status": "False" }]);
        let gated = facts(&g)?;
        let mut s = g.clone();
        s["spec"]["containers"][0]["image"] = "v2".into();
        let patched = facts(&s)?;
        let mut l = v.clone();
        l["metadata"]["labels"]["lifecycle"] = "Normal".into();
        let labelled = facts(&l)?;
        let mut d = v.clone();
        d["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        d["metadata"]["deletionGracePeriodSeconds"] = 1.into();
        let deleting = facts(&d)?;
        d["metadata"]["deletionGracePeriodSeconds"] = 0.into();
        let final_delete = facts(&d)?;
        let mut rv = v.clone();
        rv["metadata"]["resourceVersion"] = "7".into();
        let same = facts(&rv)?;
        use PodWriter::*;
        let table: [(Option<&PodFacts>, Option<&PodFacts>, PodWriter); 10] = [
            (None, Some(&created), Workload),
            (Some(&created), Some(&bound), Scheduler),
            (Some(&bound), Some(&running), Kubelet),
            (Some(&running), Some(&gated), Workload),
            (Some(&gated), Some(&patched), Workload),
            (Some(&running), Some(&labelled), Workload),
            (Some(&running), Some(&deleting), Workload),
            (Some(&deleting), Some(&final_delete), Kubelet),
            (Some(&deleting), None, Kubelet),
            (Some(&running), Some(&same), Unknown),
        ];
        for (i, (old, new, want)) in table.into_iter().enumerate() {
            assert_eq!(pod_writer(old, new), want, "case {i}");
        }
        let mut w = PodWrites::default();
        for x in [Workload, Workload, Kubelet, Scheduler] {
            w.add(x);
        }
        assert_eq!(w.total(), 4);
        assert_eq!(w.get(Unknown), 0);
        assert!((w.per_pod(Some(Workload), 2) - 1.0).abs() < 1e-9);
        assert!((w.per_pod(None, 2) - 2.0).abs() < 1e-9);
        assert_eq!(w.per_pod(None, 0), 0.0);
        Ok(())
    }

    /// The daemon's writes are told from the controller's by the daemon's own keys in the
    /// in-place state: its completion (the condition True, the lifecycle label and the
    /// container ids in one write) is the daemon's, the controller's completion without a
    /// daemon (the same condition and label, no ids) the controller's, and so is the next
    /// update's new state, which drops the ids.
    #[test]
    fn the_daemon_is_told_by_its_keys_in_the_state() -> Result<(), serde_json::Error> {
        const STATE: &str = "apps.kruise.io/inplace-update-state";
        let with_state = |image: &str, ready: &str, lifecycle: &str, state: serde_json::Value| {
            serde_json::json!({
                "metadata": {
                    "name": "p",
                    "labels": { "app": "a", "lifecycle.apps.kruise.io/state": lifecycle },
                    "annotations": { STATE: state.to_string() },
                },
                "spec": { "nodeName": "n1", "containers": [{ "name": "app", "image": image }] },
                "status": { "phase": "Running", "conditions": [
                    { "type": "Ready", "status": "False" },
                    { "type": "InPlaceUpdateReady", "status": ready }] },
            })
        };
        let started =
            serde_json::json!({ "revision": "r2", "lifecycleStateOnCompletion": "Normal" });
        let mut by_daemon = started.clone();
        by_daemon["daemonContainerIDs"] = serde_json::json!({ "app": "sim://2" });
        let mut env_checked = started.clone();
        env_checked["daemonEnvChecked"] = serde_json::json!({ "batch": 1, "containers": {} });
        let next = serde_json::json!({ "revision": "r3" });

        let updating = facts(&with_state("v2", "False", "Updating", started.clone()))?;
        let daemon_done = facts(&with_state("v2", "True", "Normal", by_daemon.clone()))?;
        let controller_done = facts(&with_state("v2", "True", "Normal", started.clone()))?;
        let daemon_checked = facts(&with_state("v2", "False", "Updating", env_checked))?;
        let next_update = facts(&with_state("v3", "False", "Updating", next.clone()))?;
        let next_metadata_only = facts(&with_state("v2", "False", "Updating", next))?;
        let mut kubelet = with_state("v2", "True", "Normal", by_daemon);
        kubelet["status"]["conditions"][0]["status"] = "True".into();
        let kubelet_ready = facts(&kubelet)?;
        assert!(
            updating.daemon_state.is_empty(),
            "the controller's state has no daemon key"
        );
        assert!(
            !daemon_done.daemon_state.contains("revision"),
            "only the daemon's keys"
        );

        use PodWriter::*;
        let table = [
            ("the daemon's completion", &updating, &daemon_done, Daemon),
            (
                "the controller's completion, no daemon",
                &updating,
                &controller_done,
                Workload,
            ),
            (
                "the daemon's daemonEnvChecked",
                &updating,
                &daemon_checked,
                Daemon,
            ),
            (
                "the next update's spec patch",
                &daemon_done,
                &next_update,
                Workload,
            ),
            (
                "a metadata-only update's new state",
                &daemon_done,
                &next_metadata_only,
                Workload,
            ),
            (
                "the kubelet's Ready after the completion",
                &daemon_done,
                &kubelet_ready,
                Kubelet,
            ),
        ];
        for (case, old, new, want) in table {
            assert_eq!(pod_writer(Some(old), Some(new)), want, "{case}");
        }
        let mut w = PodWrites::default();
        for x in [Workload, Workload, Daemon, Kubelet] {
            w.add(x);
        }
        assert_eq!(w.get(Daemon), 1);
        assert!((w.per_pod(Some(Daemon), 2) - 0.5).abs() < 1e-9);
        assert!((w.per_pod(None, 2) - 2.0).abs() < 1e-9);
        Ok(())
    }
}
