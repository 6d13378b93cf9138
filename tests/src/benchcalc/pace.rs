//! The pace of a rollout under a budget: how soon a freed slot is taken again.
//!
//! A rollout of `budget` pods at once (maxUnavailable, maxSurge 0) takes a pod out of
//! service ("start": an in-place update begins, an old pod is deleted) and gets one back
//! ("done": the updated or new pod is Ready). The k-th start (k ≥ budget, in time order)
//! can only use the slot the (k − budget)-th done freed; the time between the two is the
//! workload controller's lag. With no lag the budget is always full, and the rollout takes
//! its floor.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;

use super::Summary;

/// The moments (seconds from the rollout's start) pods were taken out of service and got
/// back, in any order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    pub starts: Vec<f64>,
    pub dones: Vec<f64>,
}

impl Timeline {
    fn sorted(&self) -> (Vec<f64>, Vec<f64>) {
        let sort = |v: &[f64]| {
            let mut v: Vec<f64> = v.iter().copied().filter(|t| t.is_finite()).collect();
            v.sort_by(f64::total_cmp);
            v
        };
        (sort(&self.starts), sort(&self.dones))
    }

    /// For every start that needed a freed slot: its time minus the time that slot was
    /// freed (negative only if the budget was overrun, or the watch saw the two events
    /// out of order).
    pub fn slot_lags(&self, budget: usize) -> Vec<f64> {
        let (starts, dones) = self.sorted();
        starts
            .iter()
            .enumerate()
            .skip(budget)
            .filter_map(|(k, s)| dones.get(k - budget).map(|d| s - d))
            .collect()
    }

    /// The mean number of pods out of service from 0 to `end` seconds.
    pub fn mean_in_flight(&self, end: f64) -> f64 {
        if end <= 0.0 {
            return 0.0;
        }
        let (starts, dones) = self.sorted();
        let mut events: Vec<(f64, f64)> = starts.iter().map(|&t| (t, 1.0)).collect();
        events.extend(dones.iter().map(|&t| (t, -1.0)));
        events.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (mut area, mut level, mut last) = (0.0, 0.0, 0.0);
        for (t, step) in events {
            let t = t.clamp(0.0, end);
            area += level * (t - last);
            level += step;
            last = t;
        }
        area += level * (end - last);
        area / end
    }

    /// `pace: slot freed -> next start n=… p50=… …; in flight mean X of budget B (Y %)`.
    pub fn line(&self, budget: usize, end: f64) -> String {
        let lags = Summary::of(self.slot_lags(budget))
            .map_or_else(|| "none (no slot was reused)".to_owned(), |s| s.line());
        let mean = self.mean_in_flight(end);
        let share = if budget == 0 {
            0.0
        } else {
            100.0 * mean / budget as f64
        };
        format!(
            "pace: {} starts, {} dones; slot freed -> next start {lags}; in flight mean {mean:.1} of budget {budget} ({share:.0} %)",
            self.starts.len(),
            self.dones.len()
        )
    }
}

/// Builds a [`Timeline`] from a pod watch of one workload's pods.
///
/// A pod seen before the rollout is out of service at its first event that deletes it,
/// changes a container image, or sets `InPlaceUpdateReady` False; it is back once its
/// new images run Ready. A pod created during the rollout is back once it is Ready.
#[derive(Debug, Default)]
pub struct PodPace {
    images: HashMap<String, Vec<String>>,
    created_in_rollout: HashSet<String>,
    started: HashSet<String>,
    done: HashSet<String>,
    pub timeline: Timeline,
}

fn images(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| c.image.clone().unwrap_or_default())
        .collect()
}

fn condition(pod: &Pod, type_: &str) -> Option<bool> {
    let conds = pod.status.as_ref()?.conditions.as_ref()?;
    let c = conds.iter().find(|c| c.type_ == type_)?;
    Some(c.status == "True")
}

/// Ready, the gate (if any) True, and every container running its spec's image, ready.
fn serving(pod: &Pod) -> bool {
    let specs = images(pod);
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    let running = statuses.is_some_and(|st| {
        st.len() == specs.len() && st.iter().all(|c| c.ready && specs.contains(&c.image))
    });
    pod.metadata.deletion_timestamp.is_none()
        && condition(pod, "Ready") == Some(true)
        && condition(pod, "InPlaceUpdateReady") != Some(false)
        && running
}

impl PodPace {
    /// A pod as the watch lists it before the rollout.
    pub fn before(&mut self, pod: &Pod) {
        if let Some(uid) = pod.metadata.uid.clone() {
            self.images.entry(uid).or_insert_with(|| images(pod));
        }
    }

    /// A pod event during the rollout, `at` seconds after its start.
    pub fn during(&mut self, pod: &Pod, at: f64) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let Some(initial) = self.images.get(&uid) else {
            // First seen now: created by the rollout.
            self.images.insert(uid.clone(), images(pod));
            self.created_in_rollout.insert(uid.clone());
            return self.check_done(pod, uid, at);
        };
        let changed = *initial != images(pod);
        if !self.created_in_rollout.contains(&uid)
            && !self.started.contains(&uid)
            && (pod.metadata.deletion_timestamp.is_some()
                || changed
                || condition(pod, "InPlaceUpdateReady") == Some(false))
        {
            self.started.insert(uid.clone());
            self.timeline.starts.push(at);
        }
        if self.created_in_rollout.contains(&uid) || (changed && self.started.contains(&uid)) {
            self.check_done(pod, uid, at);
        }
    }

    fn check_done(&mut self, pod: &Pod, uid: String, at: f64) {
        if !self.done.contains(&uid) && serving(pod) {
            self.done.insert(uid);
            self.timeline.dones.push(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_start_beyond_the_budget_takes_the_slot_of_the_matching_done() {
        // Budget 2: starts 3 and 4 take the slots freed by dones 1 and 2 (in time order).
        let t = Timeline {
            starts: vec![0.0, 0.1, 3.5, 4.0],
            dones: vec![3.0, 3.2, 6.0, 7.0],
        };
        let lags = t.slot_lags(2);
        assert_eq!(lags.len(), 2);
        assert!((lags[0] - 0.5).abs() < 1e-9);
        assert!((lags[1] - 0.8).abs() < 1e-9);
        // Nothing to match below the budget.
        assert!(t.slot_lags(4).is_empty());
        // Unsorted input is sorted first.
        let shuffled = Timeline {
            starts: vec![4.0, 0.0, 3.5, 0.1],
            dones: vec![7.0, 3.2, 6.0, 3.0],
        };
        assert_eq!(shuffled.slot_lags(2), lags);
    }

    #[test]
    fn the_mean_in_flight_is_the_area_under_the_level() {
        // One pod out from 0 to 2, another from 1 to 3, over 4 s: (2 + 2) / 4 = 1.
        let t = Timeline {
            starts: vec![0.0, 1.0],
            dones: vec![2.0, 3.0],
        };
        assert!((t.mean_in_flight(4.0) - 1.0).abs() < 1e-9);
        assert_eq!(t.mean_in_flight(0.0), 0.0);
        // A budget kept full all along: the mean is the budget.
        let full = Timeline {
            starts: vec![0.0, 0.0, 1.0, 1.0],
            dones: vec![1.0, 1.0, 2.0, 2.0],
        };
        assert!((full.mean_in_flight(2.0) - 2.0).abs() < 1e-9);
        assert!(
            full.line(2, 2.0).contains("(100 %)"),
            "{}",
            full.line(2, 2.0)
        );
    }

    fn pod(uid: &str, image: &str, ready: bool, gate: Option<bool>, status_image: &str) -> Pod {
        let status = |b: bool| if b { "True" } else { "False" };
        let mut conditions = vec![serde_json::json!({"type": "Ready", "status": status(ready)})];
        if let Some(g) = gate {
            conditions.push(serde_json::json!({"type": "InPlaceUpdateReady", "status": status(g)}));
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"uid": uid, "name": uid},
            "spec": {"containers": [{"name": "app", "image": image}]},
            "status": {
                "conditions": conditions,
                "containerStatuses": [{"name": "app", "image": status_image, "imageID": "", "ready": ready, "restartCount": 0}],
            },
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_in_place_update_starts_at_its_gate_and_is_done_when_its_new_image_serves() {
        let mut pace = PodPace::default();
        pace.before(&pod("a", "v1", true, Some(true), "v1"));
        // The gate goes False first: out of service.
        pace.during(&pod("a", "v1", true, Some(false), "v1"), 1.0);
        // The new image in the spec, the old one still reported Ready: not back yet.
        pace.during(&pod("a", "v2", true, Some(false), "v1"), 1.1);
        pace.during(&pod("a", "v2", true, Some(true), "v1"), 1.2);
        // The new image runs and is Ready: back.
        pace.during(&pod("a", "v2", true, Some(true), "v2"), 4.0);
        pace.during(&pod("a", "v2", true, Some(true), "v2"), 5.0);
        assert_eq!(pace.timeline.starts, vec![1.0]);
        assert_eq!(pace.timeline.dones, vec![4.0]);
    }

    #[test]
    fn a_recreated_pod_starts_at_the_old_ones_deletion_and_is_done_when_the_new_one_is_ready() {
        let mut pace = PodPace::default();
        let mut old = pod("old", "v1", true, None, "v1");
        pace.before(&old);
        old.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        pace.during(&old, 0.5);
        pace.during(&old, 0.7);
        pace.during(&pod("new", "v2", false, None, "v2"), 1.0);
        pace.during(&pod("new", "v2", true, None, "v2"), 3.0);
        assert_eq!(pace.timeline.starts, vec![0.5]);
        assert_eq!(pace.timeline.dones, vec![3.0]);
    }
}
