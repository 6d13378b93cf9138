//! The totals of many fault runs, printed at the end.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::injection::Fault;

/// What one run did and found.
#[derive(Debug, Clone, Default)]
pub struct RunOutcome {
    pub seed: u64,
    pub scenario: String,
    /// Requests the proxy forwarded or failed.
    pub requests: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<Fault, u64>,
    /// Controller processes SIGKILLed (and restarted).
    pub kills: u64,
    /// Daemon processes SIGKILLed (and restarted).
    pub daemon_kills: u64,
    /// Outages of the API server (every connection cut for 30-60 s) and restarts of it.
    pub outages: u64,
    pub apiserver_restarts: u64,
    /// Node faults injected (node suite), by kind: the CRI proxy's, containerd restarts.
    pub node_faults: BTreeMap<String, u64>,
    /// In-place completions (`InPlaceUpdateReady=True` on the new revision) checked
    /// against the pod's containers.
    pub completions_checked: u64,
    /// The controller exited by itself (exit status and its last error line); the runner
    /// restarted it, as a kubelet would.
    pub crashes: Vec<String>,
    /// Violations found on the watches ([`super::invariants`]).
    pub violations: Vec<String>,
    /// Violations found in the proxy's record ([`super::records`]).
    pub record_violations: Vec<String>,
    /// Writes of a killed process applied after its kill (held by the proxy's latency).
    pub applied_after_kill: u64,
    /// Pods the controller created and deleted (applied writes).
    pub pods_created: u64,
    pub pods_deleted: u64,
    /// What the checks saw: the most live pods and its bound, the fewest available pods
    /// (with those down by the node) once the CloneSet had settled and its floor, the most
    /// pods down by the node at once ([`super::invariants::PodSnap::down_by_node`]).
    pub peak_pods: usize,
    pub max_pods: usize,
    pub least_available: Option<usize>,
    pub min_available: usize,
    pub most_down_by_node: usize,
    /// The run could not be carried out (the bed, a timeout in its setup): not a verdict
    /// on the controller, but not a pass either.
    pub error: Option<String>,
    pub seconds: f64,
}

impl RunOutcome {
    pub fn failed(&self) -> bool {
        !self.violations.is_empty() || !self.record_violations.is_empty() || self.error.is_some()
    }
}

/// The node-fault key prefix of the daemon's kills at an observed step of an update.
pub const STEP_KILL_PREFIX: &str = "daemon-kill-at-";

/// The figures of a whole invocation.
#[derive(Debug, Default)]
pub struct Figures {
    pub runs: u64,
    pub requests: u64,
    pub faults: BTreeMap<Fault, u64>,
    pub kills: u64,
    pub daemon_kills: u64,
    pub outages: u64,
    pub apiserver_restarts: u64,
    pub node_faults: BTreeMap<String, u64>,
    pub completions_checked: u64,
    pub crashes: u64,
    /// Invariant violations, from the watches and from the records.
    pub violations: u64,
    pub record_violations: u64,
    pub applied_after_kill: u64,
    pub pods_created: u64,
    pub pods_deleted: u64,
    pub errors: u64,
    pub by_scenario: BTreeMap<String, u64>,
    /// (seed, scenario, first reason) of every failed run.
    pub failed: Vec<(u64, String, String)>,
    pub seconds: f64,
}

impl Figures {
    pub fn add(&mut self, o: &RunOutcome) {
        self.runs += 1;
        self.requests += o.requests;
        for (f, n) in &o.faults {
            *self.faults.entry(*f).or_insert(0) += n;
        }
        self.kills += o.kills;
        self.daemon_kills += o.daemon_kills;
        self.outages += o.outages;
        self.apiserver_restarts += o.apiserver_restarts;
        for (f, n) in &o.node_faults {
            *self.node_faults.entry(f.clone()).or_insert(0) += n;
        }
        self.completions_checked += o.completions_checked;
        self.crashes += o.crashes.len() as u64;
        self.violations += o.violations.len() as u64;
        self.record_violations += o.record_violations.len() as u64;
        self.applied_after_kill += o.applied_after_kill;
        self.pods_created += o.pods_created;
        self.pods_deleted += o.pods_deleted;
        self.errors += u64::from(o.error.is_some());
        *self.by_scenario.entry(o.scenario.clone()).or_insert(0) += 1;
        self.seconds += o.seconds;
        if o.failed() {
            let why = o
                .violations
                .first()
                .or(o.record_violations.first())
                .cloned()
                .or_else(|| o.error.clone())
                .unwrap_or_default();
            self.failed.push((o.seed, o.scenario.clone(), why));
        }
    }

    pub fn faults_total(&self) -> u64 {
        self.faults.values().sum()
    }

    /// Every fault injected: the API proxies' and the node faults, and the SIGKILLs. A
    /// kill at an observed step (`daemon-kill-at-…`) is one of the daemon's kills, shown
    /// apart by step: counted once.
    pub fn all_faults(&self) -> u64 {
        let node: u64 = self
            .node_faults
            .iter()
            .filter(|(k, _)| !k.starts_with(STEP_KILL_PREFIX))
            .map(|(_, n)| n)
            .sum();
        self.faults_total() + node + self.kills + self.daemon_kills
    }

    /// Invariant violations, from the watches and from the records.
    pub fn all_violations(&self) -> u64 {
        self.violations + self.record_violations
    }

    /// The printed report: one `faults:` line of totals, then one line per failed seed.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let kinds: Vec<String> = Fault::ALL
            .iter()
            .map(|f| format!("{f}={}", self.faults.get(f).copied().unwrap_or(0)))
            .collect();
        let scenarios: Vec<String> = self
            .by_scenario
            .iter()
            .map(|(s, n)| format!("{s}={n}"))
            .collect();
        let _ = writeln!(
            out,
            "faults: runs={} requests={} faults_injected={} ({}) kills={} crashes={} invariant_violations={} (watch={} records={}) run_errors={} failed_runs={}",
            self.runs,
            self.requests,
            self.faults_total(),
            kinds.join(" "),
            self.kills,
            self.crashes,
            self.violations + self.record_violations,
            self.violations,
            self.record_violations,
            self.errors,
            self.failed.len(),
        );
        let _ = writeln!(out, "faults: scenarios: {}", scenarios.join(" "));
        let _ = writeln!(
            out,
            "faults: pods created={} deleted={}; writes applied after their sender was killed={}",
            self.pods_created, self.pods_deleted, self.applied_after_kill
        );
        if self.outages > 0 || self.apiserver_restarts > 0 {
            let _ = writeln!(
                out,
                "faults: API server outages={} (30-60 s each), API server restarts={}",
                self.outages, self.apiserver_restarts
            );
        }
        if self.daemon_kills > 0 || self.completions_checked > 0 {
            let _ = writeln!(
                out,
                "faults: daemon kills={}; in-place completions checked={}",
                self.daemon_kills, self.completions_checked
            );
        }
        if !self.node_faults.is_empty() {
            let kinds: Vec<String> = self
                .node_faults
                .iter()
                .map(|(f, n)| format!("{f}={n}"))
                .collect();
            let _ = writeln!(out, "faults: node faults injected: {}", kinds.join(" "));
        }
        for (seed, scenario, why) in &self.failed {
            let _ = writeln!(out, "faults: FAILED --seed {seed} ({scenario}): {why}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_and_failed_seeds() {
        let mut f = Figures::default();
        f.add(&RunOutcome {
            seed: 1,
            scenario: "scale-up".into(),
            requests: 100,
            faults: BTreeMap::from([(Fault::Conflict, 3), (Fault::WatchDrop, 2)]),
            kills: 1,
            crashes: vec!["exit status: 1: Error: discovering the API server".into()],
            seconds: 10.0,
            ..RunOutcome::default()
        });
        f.add(&RunOutcome {
            seed: 2,
            scenario: "pvc".into(),
            requests: 50,
            faults: BTreeMap::from([(Fault::Conflict, 1)]),
            violations: vec!["5 live pods > replicas + maxSurge = 4".into()],
            record_violations: vec!["PVC data-a deleted".into()],
            pods_created: 4,
            pods_deleted: 1,
            applied_after_kill: 2,
            ..RunOutcome::default()
        });
        f.add(&RunOutcome {
            seed: 3,
            scenario: "pvc".into(),
            error: Some("namespace: timed out".into()),
            ..RunOutcome::default()
        });
        let text = f.render();
        assert!(
            text.starts_with(
                "faults: runs=3 requests=150 faults_injected=6 (409=4 429=0 500=0 500-after-commit=0 reset=0 reset-after-commit=0 watch-drop=2 410-expired=0 stale-list=0 latency=0 outage=0) kills=1 crashes=1 invariant_violations=2 (watch=1 records=1) run_errors=1 failed_runs=2\n"
            ),
            "{text}"
        );
        assert!(text.contains("faults: scenarios: pvc=2 scale-up=1\n"));
        assert!(text.contains(
            "faults: pods created=4 deleted=1; writes applied after their sender was killed=2\n"
        ));
        assert!(
            text.contains("faults: FAILED --seed 2 (pvc): 5 live pods > replicas + maxSurge = 4\n")
        );
        assert!(text.contains("faults: FAILED --seed 3 (pvc): namespace: timed out\n"));
        assert!(!text.contains("daemon kills"), "{text}");
    }

    #[test]
    fn daemon_figures_and_a_run_failed_by_its_records() {
        let mut f = Figures::default();
        f.add(&RunOutcome {
            seed: 4,
            scenario: "daemon-env".into(),
            kills: 1,
            daemon_kills: 2,
            completions_checked: 3,
            record_violations: vec!["the daemon wrote PATCH /api/v1/namespaces/n/pods/p".into()],
            ..RunOutcome::default()
        });
        let text = f.render();
        assert!(text.contains("kills=1 crashes=0 invariant_violations=1 (watch=0 records=1)"));
        assert!(text.contains("faults: daemon kills=2; in-place completions checked=3\n"));
        assert!(text.contains(
            "faults: FAILED --seed 4 (daemon-env): the daemon wrote PATCH /api/v1/namespaces/n/pods/p\n"
        ));
    }

    #[test]
    fn all_faults_counts_a_step_kill_once() {
        let mut f = Figures::default();
        f.add(&RunOutcome {
            faults: BTreeMap::from([(Fault::Conflict, 2)]),
            kills: 1,
            daemon_kills: 3,
            node_faults: BTreeMap::from([
                ("cri-cut".to_owned(), 4),
                (format!("{STEP_KILL_PREFIX}begun"), 1),
            ]),
            ..RunOutcome::default()
        });
        // 2 API faults + 4 CRI cuts + 1 + 3 kills; the step kill is one of the 3.
        assert_eq!(f.all_faults(), 10);
    }
}
