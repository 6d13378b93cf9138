//! The in-place invariants of the daemon scenario, checked on every event of a direct
//! (not faulted) pod watch: no pod is marked `InPlaceUpdateReady=True` on the update
//! revision before its new container runs, and the pods are updated in place (the same
//! UIDs at the end as before the change).
//!
//! Before the change the runner takes a [`InPlaceChecker::baseline`] of the settled pods:
//! each pod's revision, and its container's id and image id. From then on, an event of a
//! pod of the baseline whose revision label is no longer the baseline's (the controller
//! wrote the new revision) and whose `InPlaceUpdateReady` is `True` is a completion (the
//! controller sets the condition False before it writes the new revision). The daemon
//! completes an image update once the runtime runs the new container, which the kubelet's
//! status may name only at its next relist: a completion whose event shows a new
//! container must show it running and, when the image changed, with another image id; one
//! whose event still shows the container from before (or none running) is judged against
//! containerd's own view at the end ([`InPlaceChecker::runtime_claims`],
//! [`super::runtime_view::check_claims`]): a container newer than the one from before must
//! have been created before the completion was seen.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;

/// The container the checks look at, as the pod's status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerSnap {
    pub id: String,
    pub image_id: String,
    pub running: bool,
}

/// What the checks need of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InPlaceSnap {
    pub uid: String,
    pub name: String,
    pub rv: u64,
    pub live: bool,
    /// The `controller-revision-hash` label.
    pub revision: String,
    /// The `InPlaceUpdateReady` condition's status (`None`: no such condition).
    pub inplace_ready: Option<bool>,
    /// The status of the container named by the checker (`None`: not reported).
    pub container: Option<ContainerSnap>,
}

impl InPlaceSnap {
    pub fn of(p: &Pod, container: &str) -> InPlaceSnap {
        let status = p.status.as_ref();
        let c = status
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.name == container))
            .map(|c| ContainerSnap {
                id: c.container_id.clone().unwrap_or_default(),
                image_id: c.image_id.clone(),
                running: c.state.as_ref().is_some_and(|s| s.running.is_some()),
            });
        InPlaceSnap {
            uid: p.metadata.uid.clone().unwrap_or_default(),
            name: p.metadata.name.clone().unwrap_or_default(),
            rv: p
                .metadata
                .resource_version
                .as_deref()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0),
            live: p.metadata.deletion_timestamp.is_none(),
            revision: p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("controller-revision-hash"))
                .cloned()
                .unwrap_or_default(),
            inplace_ready: crate::bed::pod_condition(p, "InPlaceUpdateReady").map(|s| s == "True"),
            container: c,
        }
    }
}

#[derive(Debug, Clone)]
struct Before {
    name: String,
    revision: String,
    container: ContainerSnap,
}

/// A step of an in-place update of one pod, as the unfaulted watch sees it (the node
/// suite SIGKILLs the daemon when the first pod reaches the seed's step).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum UpdateStep {
    /// The controller wrote the new revision; the container from before still runs.
    Begun,
    /// The container from before is no longer running, no new one runs yet.
    OldStopped,
    /// A new container runs; the pod is not yet marked `InPlaceUpdateReady=True`
    /// (the daemon's completion write is what remains).
    NewRunning,
}

impl UpdateStep {
    pub const ALL: [UpdateStep; 3] = [
        UpdateStep::Begun,
        UpdateStep::OldStopped,
        UpdateStep::NewRunning,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UpdateStep::Begun => "begun",
            UpdateStep::OldStopped => "old-stopped",
            UpdateStep::NewRunning => "new-running",
        }
    }
}

/// A completion seen before the pod's status named the new container: containerd's view
/// decides whether the new container existed then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeClaim {
    pub uid: String,
    pub name: String,
    pub revision: String,
    pub rv: u64,
    /// When the watch saw the completion, in nanoseconds since the epoch.
    pub seen_ns: i64,
}

/// The checks of one daemon-scenario run.
#[derive(Debug, Default)]
pub struct InPlaceChecker {
    image_changed: bool,
    before: BTreeMap<String, Before>,
    claims: BTreeMap<String, RuntimeClaim>,
    /// Pods (uid) already found in violation, and those whose completion was checked.
    flagged: BTreeSet<String>,
    completed: BTreeSet<String>,
    violations: Vec<String>,
}

impl InPlaceChecker {
    /// Before the change, from the settled pods; `image_changed`: the change sets a new
    /// image (else only metadata an env reads).
    pub fn baseline(&mut self, pods: &[InPlaceSnap], image_changed: bool) {
        self.image_changed = image_changed;
        for p in pods.iter().filter(|p| p.live) {
            if let Some(c) = &p.container {
                self.before.insert(
                    p.uid.clone(),
                    Before {
                        name: p.name.clone(),
                        revision: p.revision.clone(),
                        container: c.clone(),
                    },
                );
            }
        }
    }

    /// The step of the update `p` is at (`None`: a pod outside the baseline, not yet in
    /// the update, or done).
    pub fn step(&self, p: &InPlaceSnap) -> Option<UpdateStep> {
        let before = self.before.get(&p.uid)?;
        if p.revision == before.revision || p.inplace_ready == Some(true) || !p.live {
            return None;
        }
        Some(match &p.container {
            Some(c) if c.running && !c.id.is_empty() && c.id != before.container.id => {
                UpdateStep::NewRunning
            }
            Some(c) if c.running => UpdateStep::Begun,
            _ => UpdateStep::OldStopped,
        })
    }

    /// The step of a ContainerRecreateRequest on pod `p`, whose container was `before`
    /// when the request was made: the container stopped, or a new one running (the
    /// request's own begin, its being taken up, shows on the request, not on the pod).
    pub fn recreate_step(before: &ContainerSnap, p: &InPlaceSnap) -> Option<UpdateStep> {
        if !p.live {
            return None;
        }
        match &p.container {
            Some(c) if c.running && c.id == before.id => None,
            Some(c) if c.running && !c.id.is_empty() => Some(UpdateStep::NewRunning),
            _ => Some(UpdateStep::OldStopped),
        }
    }

    /// An event of pod `p`, seen at `seen_ns` (nanoseconds since the epoch).
    pub fn observe(&mut self, p: &InPlaceSnap, seen_ns: i64) {
        let Some(before) = self.before.get(&p.uid) else {
            return;
        };
        if p.revision == before.revision || p.inplace_ready != Some(true) {
            return;
        }
        let why = match &p.container {
            Some(c) if c.running && !c.id.is_empty() && c.id != before.container.id => {
                if self.image_changed && c.image_id == before.container.image_id {
                    Some(format!(
                        "its container still runs the old image ({})",
                        c.image_id
                    ))
                } else {
                    None
                }
            }
            // The status does not name a new running container yet: containerd decides.
            _ => {
                if !self.completed.contains(&p.uid) {
                    self.claims
                        .entry(p.uid.clone())
                        .or_insert_with(|| RuntimeClaim {
                            uid: p.uid.clone(),
                            name: p.name.clone(),
                            revision: p.revision.clone(),
                            rv: p.rv,
                            seen_ns,
                        });
                }
                return;
            }
        };
        match why {
            Some(why) if self.flagged.insert(p.uid.clone()) => self.violations.push(format!(
                "pod {} marked InPlaceUpdateReady=True on revision {} (rv {}) but {why}",
                p.name, p.revision, p.rv
            )),
            Some(_) => {}
            None => {
                self.completed.insert(p.uid.clone());
            }
        }
    }

    /// The completions seen before the pod's status named the new container, for
    /// [`super::runtime_view::check_claims`] (a later event that names it does not show
    /// that the container existed when the completion was seen).
    pub fn runtime_claims(&self) -> Vec<RuntimeClaim> {
        self.claims.values().cloned().collect()
    }

    /// The end of the run, with the live pods then: each pod of the baseline is still
    /// there (same UID: updated in place, not recreated) and no other pod is.
    pub fn finish(&mut self, live: &[InPlaceSnap]) -> Vec<String> {
        let now: BTreeSet<&String> = live.iter().filter(|p| p.live).map(|p| &p.uid).collect();
        for (uid, b) in &self.before {
            if !now.contains(uid) {
                self.violations.push(format!(
                    "pod {} ({uid}) was not updated in place: it is gone",
                    b.name
                ));
            }
        }
        for p in live
            .iter()
            .filter(|p| p.live && !self.before.contains_key(&p.uid))
        {
            self.violations.push(format!(
                "pod {} ({}) is not one of the pods before the update",
                p.name, p.uid
            ));
        }
        self.violations.clone()
    }

    /// Pods whose completion (True on the new revision) was seen and checked, from the
    /// pod's status or (at the end) from containerd's view.
    pub fn completions_checked(&self) -> usize {
        self.completed
            .union(&self.claims.keys().cloned().collect())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(
        name: &str,
        rev: &str,
        ready: Option<bool>,
        id: &str,
        image: &str,
        running: bool,
    ) -> InPlaceSnap {
        InPlaceSnap {
            uid: format!("uid-{name}"),
            name: name.into(),
            rv: 1,
            live: true,
            revision: rev.into(),
            inplace_ready: ready,
            container: Some(ContainerSnap {
                id: id.into(),
                image_id: image.into(),
                running,
            }),
        }
    }

    fn checker(image_changed: bool) -> InPlaceChecker {
        let mut c = InPlaceChecker::default();
        c.baseline(
            &[
                snap("a", "r1", Some(true), "c-a1", "img1", true),
                snap("b", "r1", Some(true), "c-b1", "img1", true),
            ],
            image_changed,
        );
        c
    }

    #[test]
    fn the_steps_of_an_update_as_the_watch_sees_them() {
        let c = checker(true);
        let step = |p: InPlaceSnap| c.step(&p);
        assert_eq!(
            step(snap("a", "r1", Some(false), "c-a1", "img1", true)),
            None
        );
        assert_eq!(
            step(snap("a", "r2", Some(false), "c-a1", "img1", true)),
            Some(UpdateStep::Begun)
        );
        assert_eq!(
            step(snap("a", "r2", Some(false), "c-a1", "img1", false)),
            Some(UpdateStep::OldStopped)
        );
        assert_eq!(
            step(snap("a", "r2", Some(false), "c-a2", "img2", true)),
            Some(UpdateStep::NewRunning)
        );
        assert_eq!(
            step(snap("a", "r2", Some(true), "c-a2", "img2", true)),
            None
        );
        assert_eq!(
            step(snap("z", "r2", Some(false), "c-z", "img2", true)),
            None
        );
    }

    #[test]
    fn the_steps_of_a_recreate_request_as_the_watch_sees_them() {
        let before = ContainerSnap {
            id: "c-a1".into(),
            image_id: "img1".into(),
            running: true,
        };
        let step = |p: InPlaceSnap| InPlaceChecker::recreate_step(&before, &p);
        assert_eq!(
            step(snap("a", "r1", Some(true), "c-a1", "img1", true)),
            None
        );
        assert_eq!(
            step(snap("a", "r1", Some(true), "c-a1", "img1", false)),
            Some(UpdateStep::OldStopped)
        );
        assert_eq!(
            step(snap("a", "r1", Some(true), "c-a2", "img1", true)),
            Some(UpdateStep::NewRunning)
        );
    }

    #[test]
    fn an_update_marked_ready_once_the_new_container_runs_is_fine() {
        let mut c = checker(true);
        // The controller: False, then the new revision; the kubelet: the old container
        // still reported, then the new one; the daemon: True.
        c.observe(&snap("a", "r1", Some(false), "c-a1", "img1", true), 0);
        c.observe(&snap("a", "r2", Some(false), "c-a1", "img1", true), 0);
        c.observe(&snap("a", "r2", Some(false), "c-a2", "img2", true), 0);
        c.observe(&snap("a", "r2", Some(true), "c-a2", "img2", true), 0);
        assert_eq!(c.completions_checked(), 1);
        let live = [
            snap("a", "r2", Some(true), "c-a2", "img2", true),
            snap("b", "r2", Some(true), "c-b2", "img2", true),
        ];
        assert!(c.finish(&live).is_empty());
    }

    #[test]
    fn a_new_container_on_the_old_image_is_a_violation() {
        let mut c = checker(true);
        c.observe(&snap("b", "r2", Some(true), "c-b2", "img1", true), 0);
        c.observe(&snap("b", "r2", Some(true), "c-b2", "img1", true), 0);
        let v = c.finish(&[
            snap("a", "r2", Some(true), "c-a2", "img2", true),
            snap("b", "r2", Some(true), "c-b2", "img2", true),
        ]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("pod b marked InPlaceUpdateReady=True on revision r2"));
        assert!(v[0].contains("still runs the old image (img1)"));
    }

    #[test]
    fn a_completion_the_status_does_not_show_yet_is_left_to_containerd() {
        let mut c = checker(true);
        // The daemon completed from the runtime's view; the kubelet still reports the
        // container from before, then none running, then the new one.
        c.observe(&snap("a", "r2", Some(true), "c-a1", "img1", true), 10);
        c.observe(&snap("a", "r2", Some(true), "c-a1", "img1", false), 20);
        c.observe(&snap("a", "r2", Some(true), "c-a2", "img2", true), 30);
        // Pod b's status never showed a new container while marked.
        c.observe(&snap("b", "r2", Some(true), "c-b1", "img1", true), 40);
        let claims = c.runtime_claims();
        assert_eq!(claims.len(), 2, "{claims:?}");
        assert_eq!((claims[0].name.as_str(), claims[0].seen_ns), ("a", 10));
        assert_eq!((claims[1].name.as_str(), claims[1].seen_ns), ("b", 40));
        assert_eq!(c.completions_checked(), 2);
        // Nothing is decided from the status alone.
        let v = c.finish(&[
            snap("a", "r2", Some(true), "c-a2", "img2", true),
            snap("b", "r2", Some(true), "c-b2", "img2", true),
        ]);
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn an_env_only_change_needs_a_new_container_not_a_new_image() {
        let mut c = checker(false);
        c.observe(&snap("a", "r2", Some(true), "c-a2", "img1", true), 0);
        assert_eq!(c.completions_checked(), 1);
        // The old container still shown: containerd decides, not the status.
        c.observe(&snap("b", "r2", Some(true), "c-b1", "img1", true), 0);
        assert_eq!(c.runtime_claims().len(), 1);
        assert_eq!(c.finish(&[]).len(), 2, "both pods gone");
    }

    #[test]
    fn a_recreated_pod_is_not_in_place() {
        let mut c = checker(true);
        let mut other = snap("a", "r2", Some(true), "c-x", "img2", true);
        other.uid = "uid-a-2".into();
        c.observe(&other, 0);
        let v = c.finish(&[other, snap("b", "r2", Some(true), "c-b2", "img2", true)]);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("pod a (uid-a) was not updated in place"));
        assert!(v[1].contains("pod a (uid-a-2) is not one of the pods before the update"));
    }
}
