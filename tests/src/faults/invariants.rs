//! The invariants of a fault run, checked on every pod and PVC event of a direct (not
//! faulted) watch of the run's namespace.
//!
//! Definitions:
//! - a pod is *live* when it has no `deletionTimestamp`;
//! - a pod is *available* when it is live and its `Ready` condition is `True` (the
//!   CloneSets of the runs have `minReadySeconds: 0`).
//!
//! Invariants:
//! 1. **Pods**: live pods ≤ [`Bounds::max_pods`] (the run's largest `replicas` plus
//!    `maxSurge`). A pod that the controller created twice (a create whose answer was lost)
//!    shows here.
//! 2. **Unavailable by our hand**: once the CloneSet was settled (all pods Ready), available
//!    pods plus pods [down by the node](PodSnap::down_by_node) ≥ [`Bounds::min_available`]
//!    (the run's smallest `replicas` minus `maxUnavailable`). On simulated nodes without
//!    simulated failures a Ready pod becomes unavailable when the controller deletes it or
//!    takes it out of service for an in-place update (its readiness gate), or when the
//!    node lifecycle controller marks it not Ready because its node's heartbeats were late
//!    (`MarkPodsNotReady`: a restart of the shared API server can keep the node Leases
//!    unseen past the 40 s grace). The first two are the controller's hand; the last is
//!    the fault's, and the pod is told apart by who wrote its `Ready` status. So
//!    unavailable-by-our-hand = `replicas` − available − down-by-the-node, and it must
//!    stay ≤ `maxUnavailable`.
//! 3. **No PVC of a live pod lost**: a PVC is not deleted (`deletionTimestamp` set, or
//!    gone) while a pod that mounts it is live. The two watches are not ordered with each
//!    other, so a PVC deleted while its pod looks live is held as a suspect until the pod's
//!    deletion is seen: the violation stands only if the pod was deleted after the PVC (by
//!    resourceVersion, etcd's global revision) or is still live at the end.
//!
//! A violation is counted once per episode: the first event that breaks an invariant that
//! held before.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};

/// What the checks need of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSnap {
    pub uid: String,
    pub name: String,
    pub live: bool,
    pub ready: bool,
    /// Not Ready because the node lifecycle controller said so: the `status` of its
    /// `Ready` condition is `False` as `kube-controller-manager` last wrote it
    /// ([`ready_marked_by_node`]).
    pub down_by_node: bool,
    /// PVCs it mounts.
    pub claims: Vec<String>,
    /// `metadata.resourceVersion` (etcd's revision on the bed).
    pub rv: u64,
}

impl PodSnap {
    pub fn of(p: &Pod) -> PodSnap {
        let claims = p
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .map(|vs| {
                vs.iter()
                    .filter_map(|v| Some(v.persistent_volume_claim.as_ref()?.claim_name.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let ready = crate::bed::pod_ready(p);
        PodSnap {
            uid: p.metadata.uid.clone().unwrap_or_default(),
            name: p.metadata.name.clone().unwrap_or_default(),
            live: p.metadata.deletion_timestamp.is_none(),
            ready,
            down_by_node: !ready && ready_marked_by_node(p),
            claims,
            rv: rv_of(p.metadata.resource_version.as_deref()),
        }
    }
}

/// The field manager of the v1.20 node lifecycle controller's pod writes.
const NODE_LIFECYCLE_MANAGER: &str = "kube-controller-manager";

/// Where the `status` of the `Ready` condition sits in a pod's `fieldsV1`.
const READY_STATUS_FIELD: &str = "/f:status/f:conditions/k:{\"type\":\"Ready\"}/f:status";

/// Whether the `status` of pod `p`'s `Ready` condition was last written by the node
/// lifecycle controller (`MarkPodsNotReady`, a `pods/status` update that sets only that
/// status). An update takes over the managed fields it changes, so the manager that
/// holds the field is the one that last changed it: the simulator's or kubelet's
/// `Ready=False` (a container restarting), the controller's (an in-place update's gate)
/// and the node lifecycle controller's are told apart.
pub fn ready_marked_by_node(p: &Pod) -> bool {
    p.metadata.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(NODE_LIFECYCLE_MANAGER)
            && m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer(READY_STATUS_FIELD).is_some())
    })
}

/// What the checks need of a PVC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PvcSnap {
    pub name: String,
    /// `deletionTimestamp` set, or the PVC is gone.
    pub deleting: bool,
    pub rv: u64,
}

impl PvcSnap {
    pub fn of(p: &PersistentVolumeClaim, gone: bool) -> PvcSnap {
        PvcSnap {
            name: p.metadata.name.clone().unwrap_or_default(),
            deleting: gone || p.metadata.deletion_timestamp.is_some(),
            rv: rv_of(p.metadata.resource_version.as_deref()),
        }
    }
}

fn rv_of(rv: Option<&str>) -> u64 {
    rv.and_then(|r| r.parse().ok()).unwrap_or(0)
}

/// The limits of one phase of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Largest `replicas` + `maxSurge`.
    pub max_pods: usize,
    /// Smallest `replicas` − `maxUnavailable`; `None` until the CloneSet first settled.
    pub min_available: Option<usize>,
}

#[derive(Debug, Clone)]
struct Suspect {
    pvc: String,
    pvc_rv: u64,
    pod_uid: String,
    pod_name: String,
}

/// The checks of one run.
#[derive(Debug)]
pub struct Checker {
    bounds: Bounds,
    pods: BTreeMap<String, PodSnap>,
    /// The list being received after a watch (re)start.
    init: Option<BTreeMap<String, PodSnap>>,
    /// The revision at which each pod uid was first seen not live.
    gone_at: BTreeMap<String, u64>,
    suspects: Vec<Suspect>,
    violations: Vec<String>,
    too_many: bool,
    too_few: bool,
    /// The largest number of live pods, the smallest of available ones plus those down by
    /// the node (after settled: what the floor bounds), the largest of those down by the
    /// node.
    pub peak_pods: usize,
    pub least_available: Option<usize>,
    pub most_down_by_node: usize,
}

impl Checker {
    pub fn new(bounds: Bounds) -> Checker {
        Checker {
            bounds,
            pods: BTreeMap::new(),
            init: None,
            gone_at: BTreeMap::new(),
            suspects: Vec::new(),
            violations: Vec::new(),
            too_many: false,
            too_few: false,
            peak_pods: 0,
            least_available: None,
            most_down_by_node: 0,
        }
    }

    pub fn set_bounds(&mut self, bounds: Bounds) {
        self.bounds = bounds;
        self.check_counts("bounds set");
    }

    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// A pod was added or changed.
    pub fn pod_applied(&mut self, p: PodSnap) {
        if let Some(init) = self.init.as_mut() {
            init.insert(p.uid.clone(), p);
            return;
        }
        let what = format!("pod {} (rv {})", p.name, p.rv);
        self.note_gone(&p);
        self.pods.insert(p.uid.clone(), p);
        self.check_counts(&what);
    }

    /// A pod was deleted.
    pub fn pod_deleted(&mut self, mut p: PodSnap) {
        p.live = false;
        let what = format!("pod {} deleted (rv {})", p.name, p.rv);
        self.note_gone(&p);
        self.pods.remove(&p.uid);
        if let Some(init) = self.init.as_mut() {
            init.remove(&p.uid);
        }
        self.check_counts(&what);
    }

    /// The pod watch (re)started: a full list follows, then [`Checker::pods_listed`].
    pub fn pods_relisting(&mut self) {
        self.init = Some(BTreeMap::new());
    }

    pub fn pods_listed(&mut self) {
        if let Some(init) = self.init.take() {
            for p in init.values() {
                self.note_gone(p);
            }
            // Pods that vanished between two lists were deleted: their deletion revision
            // is unknown, so a suspect about them is judged at the end, conservatively.
            self.pods = init;
            self.check_counts("pod list");
        }
    }

    /// A PVC changed or was deleted.
    pub fn pvc_changed(&mut self, pvc: PvcSnap) {
        if !pvc.deleting {
            return;
        }
        for p in self.pods.values() {
            if p.live
                && p.claims.contains(&pvc.name)
                && !self
                    .suspects
                    .iter()
                    .any(|s| s.pvc == pvc.name && s.pod_uid == p.uid)
            {
                match self.gone_at.get(&p.uid) {
                    Some(at) if *at < pvc.rv => {}
                    _ => self.suspects.push(Suspect {
                        pvc: pvc.name.clone(),
                        pvc_rv: pvc.rv,
                        pod_uid: p.uid.clone(),
                        pod_name: p.name.clone(),
                    }),
                }
            }
        }
    }

    /// The end of the run: suspects whose pod is still live (or whose deletion came
    /// after the PVC's) are violations. Returns all violations.
    pub fn finish(&mut self) -> Vec<String> {
        for s in std::mem::take(&mut self.suspects) {
            let verdict = match self.gone_at.get(&s.pod_uid) {
                Some(at) if *at < s.pvc_rv => None,
                Some(at) => Some(format!(
                    "PVC {} deleted (rv {}) while its pod {} was live (deleted at rv {at})",
                    s.pvc, s.pvc_rv, s.pod_name
                )),
                None => Some(format!(
                    "PVC {} deleted (rv {}) while its pod {} is live",
                    s.pvc, s.pvc_rv, s.pod_name
                )),
            };
            self.violations.extend(verdict);
        }
        self.violations.clone()
    }

    fn note_gone(&mut self, p: &PodSnap) {
        if p.live {
            return;
        }
        self.gone_at.entry(p.uid.clone()).or_insert(p.rv);
        let at = self.gone_at[&p.uid];
        let mut kept = Vec::new();
        for s in std::mem::take(&mut self.suspects) {
            if s.pod_uid != p.uid || at < s.pvc_rv {
                if s.pod_uid != p.uid {
                    kept.push(s);
                }
                continue;
            }
            self.violations.push(format!(
                "PVC {} deleted (rv {}) while its pod {} was live (deleted at rv {at})",
                s.pvc, s.pvc_rv, s.pod_name
            ));
        }
        self.suspects = kept;
    }

    fn check_counts(&mut self, what: &str) {
        let live = self.pods.values().filter(|p| p.live).count();
        let available = self.pods.values().filter(|p| p.live && p.ready).count();
        let down_by_node = self
            .pods
            .values()
            .filter(|p| p.live && !p.ready && p.down_by_node)
            .count();
        self.peak_pods = self.peak_pods.max(live);
        let too_many = live > self.bounds.max_pods;
        if too_many && !self.too_many {
            self.violations.push(format!(
                "{live} live pods > replicas + maxSurge = {} (at {what}: {})",
                self.bounds.max_pods,
                self.summary()
            ));
        }
        self.too_many = too_many;
        if let Some(min) = self.bounds.min_available {
            // Out of service by no hand of the controller's: counted as the available
            // pods they were.
            let not_by_us = available + down_by_node;
            self.least_available =
                Some(self.least_available.map_or(not_by_us, |l| l.min(not_by_us)));
            self.most_down_by_node = self.most_down_by_node.max(down_by_node);
            let too_few = not_by_us < min;
            if too_few && !self.too_few {
                let node = if down_by_node > 0 {
                    format!(" + {down_by_node} down by the node")
                } else {
                    String::new()
                };
                self.violations.push(format!(
                    "{available} available pods{node} < replicas - maxUnavailable = {min} (at {what}: {})",
                    self.summary()
                ));
            }
            self.too_few = too_few;
        }
    }

    fn summary(&self) -> String {
        self.pods
            .values()
            .map(|p| {
                format!(
                    "{}{}",
                    p.name,
                    match (p.live, p.ready, p.down_by_node) {
                        (false, _, _) => "[deleting]",
                        (true, true, _) => "[ready]",
                        (true, false, true) => "[not-ready:node]",
                        (true, false, false) => "[not-ready]",
                    }
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, live: bool, ready: bool, rv: u64) -> PodSnap {
        PodSnap {
            uid: format!("uid-{name}"),
            name: name.into(),
            live,
            ready,
            down_by_node: false,
            claims: vec![format!("data-{name}")],
            rv,
        }
    }

    fn pvc(name: &str, rv: u64) -> PvcSnap {
        PvcSnap {
            name: name.into(),
            deleting: true,
            rv,
        }
    }

    fn settled(max_pods: usize, min: usize) -> Checker {
        let mut c = Checker::new(Bounds {
            max_pods,
            min_available: None,
        });
        for (i, n) in ["a", "b", "c"].iter().enumerate() {
            c.pod_applied(pod(n, true, true, i as u64 + 1));
        }
        c.set_bounds(Bounds {
            max_pods,
            min_available: Some(min),
        });
        c
    }

    #[test]
    fn one_pod_out_of_service_at_a_time_is_fine_two_is_a_violation() {
        let mut c = settled(3, 2);
        c.pod_applied(pod("a", true, false, 10));
        c.pod_applied(pod("a", true, true, 11));
        c.pod_applied(pod("b", true, false, 12));
        assert!(c.violations().is_empty(), "{:?}", c.violations());
        c.pod_applied(pod("c", false, true, 13));
        assert_eq!(c.violations().len(), 1, "{:?}", c.violations());
        assert!(c.violations()[0].contains("1 available pods < replicas - maxUnavailable = 2"));
        // Still below: the same episode, not a second violation.
        c.pod_deleted(pod("c", false, true, 14));
        assert_eq!(c.violations().len(), 1);
        assert_eq!(c.least_available, Some(1));
    }

    #[test]
    fn not_ready_pods_before_the_cloneset_settled_are_not_counted() {
        let mut c = Checker::new(Bounds {
            max_pods: 3,
            min_available: None,
        });
        c.pod_applied(pod("a", true, false, 1));
        c.pod_applied(pod("b", true, false, 2));
        assert!(c.violations().is_empty());
    }

    #[test]
    fn a_pod_above_replicas_plus_surge_is_a_violation() {
        let mut c = settled(4, 0);
        c.pod_applied(pod("d", true, false, 20));
        assert!(c.violations().is_empty());
        c.pod_applied(pod("e", true, false, 21));
        assert_eq!(c.violations().len(), 1);
        assert!(c.violations()[0].starts_with("5 live pods > replicas + maxSurge = 4"));
        assert_eq!(c.peak_pods, 5);
        // A terminating pod is not live.
        c.pod_applied(pod("e", false, false, 22));
        c.pod_applied(pod("f", true, false, 23));
        assert_eq!(c.violations().len(), 2);
    }

    #[test]
    fn a_pvc_deleted_after_its_pod_is_fine_even_when_seen_first() {
        let mut c = settled(3, 0);
        // The PVC's deletion (rv 31) is seen before the pod's (rv 30).
        c.pvc_changed(pvc("data-a", 31));
        c.pod_applied(pod("a", false, true, 30));
        assert!(c.finish().is_empty());
    }

    #[test]
    fn a_pvc_deleted_before_its_pod_or_while_it_lives_is_a_violation() {
        let mut c = settled(3, 0);
        c.pvc_changed(pvc("data-a", 31));
        c.pod_applied(pod("a", false, true, 35));
        c.pvc_changed(pvc("data-b", 40));
        let v = c.finish();
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("PVC data-a deleted (rv 31) while its pod a was live"));
        assert!(v[1].contains("PVC data-b deleted (rv 40) while its pod b is live"));
    }

    #[test]
    fn a_pvc_of_a_pod_already_deleted_or_one_not_deleted_is_fine() {
        let mut c = settled(3, 0);
        c.pod_deleted(pod("a", true, true, 30));
        c.pvc_changed(pvc("data-a", 31));
        c.pvc_changed(PvcSnap {
            name: "data-b".into(),
            deleting: false,
            rv: 32,
        });
        assert!(c.finish().is_empty());
    }

    #[test]
    fn a_relist_replaces_the_pods() {
        let mut c = settled(3, 2);
        c.pods_relisting();
        c.pod_applied(pod("a", true, true, 50));
        c.pod_applied(pod("b", true, true, 51));
        c.pod_applied(pod("c", true, true, 52));
        c.pods_listed();
        assert!(c.violations().is_empty());
        c.pods_relisting();
        c.pod_applied(pod("a", true, true, 60));
        c.pods_listed();
        assert_eq!(c.violations().len(), 1, "two pods gone between lists");
    }

    /// A pod of a simulated node as the watch delivers it: its `Ready` condition's
    /// `status` held by `ready_writer` in its managed fields (the rest of the status by
    /// the simulator), as the bed's API server keeps them.
    /// (A pod that does not parse is the default one: the assertions on it fail.)
    fn watched(name: &str, rv: u64, ready: bool, ready_writer: &str) -> Pod {
        let ready_fields = json!({ "f:lastTransitionTime": {}, "f:status": {} });
        let mut managed = vec![json!({
            "manager": "inplace-nodesim", "operation": "Update", "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": { "f:status": { "f:conditions": {
                ".": {},
                "k:{\"type\":\"ContainersReady\"}": { ".": {}, "f:status": {}, "f:type": {} },
                "k:{\"type\":\"Ready\"}": { ".": {}, "f:lastProbeTime": {}, "f:type": {} },
            }, "f:phase": {} } },
        })];
        if ready_writer == "inplace-nodesim" {
            managed[0]["fieldsV1"]["f:status"]["f:conditions"]["k:{\"type\":\"Ready\"}"]["f:status"] =
                json!({});
        } else {
            managed.push(json!({
                "manager": ready_writer, "operation": "Update", "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": { "f:status": { "f:conditions": {
                    "k:{\"type\":\"Ready\"}": ready_fields,
                } } },
            }));
        }
        let status = if ready { "True" } else { "False" };
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "uid": format!("uid-{name}"), "resourceVersion": rv.to_string(),
                "managedFields": managed,
            },
            "status": { "phase": "Running", "conditions": [
                { "type": "ContainersReady", "status": "True" },
                { "type": "Ready", "status": status },
            ] },
        }))
        .unwrap_or_default()
    }

    #[test]
    fn a_pod_is_down_by_the_node_only_when_the_node_lifecycle_controller_wrote_its_not_ready() {
        let snap = |ready, writer| PodSnap::of(&watched("a", 1, ready, writer));
        assert!(snap(false, "kube-controller-manager").down_by_node);
        // The simulator's own not Ready (a container restarting), the controller's (an
        // in-place update's readiness gate): theirs.
        assert!(!snap(false, "inplace-nodesim").down_by_node);
        assert!(!snap(false, "inplace-controller").down_by_node);
        // Ready again (the simulator's status resync): available, not excused.
        let back = snap(true, "kube-controller-manager");
        assert!(back.ready && !back.down_by_node);
        // No managed fields at all (an API server that keeps none): nothing is excused.
        let mut bare = watched("a", 1, false, "kube-controller-manager");
        bare.metadata.managed_fields = None;
        assert!(!PodSnap::of(&bare).down_by_node);
    }

    /// The history of seed 86 (rollout-max-surge: 4 replicas, maxSurge 1, maxUnavailable
    /// 0), as the watch saw it while another run restarted the API server: the surge pod
    /// Ready, one old pod in its in-place update (the controller's one), and another marked
    /// not Ready by the node lifecycle controller. Then the controller taking a second
    /// Ready pod down is its own doing.
    #[test]
    fn a_pod_the_node_lifecycle_controller_marked_not_ready_is_not_lost_by_our_hand() {
        let mut c = Checker::new(Bounds {
            max_pods: 5,
            min_available: None,
        });
        for (i, n) in ["a", "b", "c", "d"].iter().enumerate() {
            c.pod_applied(PodSnap::of(&watched(
                n,
                i as u64 + 1,
                true,
                "inplace-nodesim",
            )));
        }
        c.set_bounds(Bounds {
            max_pods: 5,
            min_available: Some(4),
        });
        c.pod_applied(PodSnap::of(&watched("e", 10, true, "inplace-nodesim")));
        c.pod_applied(PodSnap::of(&watched("a", 11, false, "inplace-controller")));
        c.pod_applied(PodSnap::of(&watched(
            "b",
            12,
            false,
            "kube-controller-manager",
        )));
        assert!(c.violations().is_empty(), "{:?}", c.violations());
        assert_eq!((c.least_available, c.most_down_by_node), (Some(4), 1));
        c.pod_applied(PodSnap::of(&watched("c", 13, false, "inplace-controller")));
        assert_eq!(c.violations().len(), 1, "{:?}", c.violations());
        assert!(
            c.violations()[0].starts_with(
                "2 available pods + 1 down by the node < replicas - maxUnavailable = 4"
            ),
            "{:?}",
            c.violations()
        );
        assert!(c.violations()[0].contains("b[not-ready:node]"));
    }
}
