//! `CloneSetEventHandlerOptimization` (docs "Performance optimization"; OpenKruise
//! `pkg/controller/cloneset/core/cloneset_core.go`): with the gate on, a pod update
//! triggers its CloneSet only when it changes something the CloneSet decides on. The
//! kubelet's many status writes that only move timestamps, IPs, other conditions or
//! container state details are dropped.
//!
//! What counts ([`trigger_hash`]): the generation, deletion, labels (revision, lifecycle,
//! specified-delete, …), finalizers (lifecycle hooks), the annotations this controller
//! reads, the node, the phase (activeness), the status of the `Ready`, `KruisePodReady`
//! and `InPlaceUpdateReady` conditions (readiness; the time `Ready` turned True comes with
//! its status), container images in spec and status, imageIDs, readiness and restart
//! counts (completion of an in-place update). This is wider than the reference's list:
//! every write of this controller changes one of these, so a reconcile waiting for its own
//! writes to be observed is always woken.
//!
//! The filter only decides what triggers a reconcile: the pod store is updated by every
//! event before the filter sees it, and a deleted pod always triggers.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use futures::{Stream, StreamExt};
use inplace_proto::keys;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::watch::CachedPod;

/// Annotations whose changes matter to the CloneSet.
const WATCHED_ANNOTATIONS: [&str; 6] = [
    keys::INPLACE_UPDATE_STATE_ANNOTATION,
    keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY,
    keys::INPLACE_UPDATE_GRACE_ANNOTATION,
    keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY,
    keys::LIFECYCLE_TIMESTAMP_ANNOTATION,
    keys::POD_DELETION_COST_ANNOTATION,
];

/// Conditions whose status matters to the CloneSet.
const WATCHED_CONDITIONS: [&str; 3] = [
    "Ready",
    keys::KRUISE_POD_READY_CONDITION,
    keys::INPLACE_UPDATE_READY_CONDITION,
];

/// A hash of what a CloneSet decides on in `pod` (see the module docs), read from the
/// cached form as the watch stores it.
pub fn trigger_hash(pod: &CachedPod) -> u64 {
    let mut h = DefaultHasher::new();
    let meta = &pod.metadata;
    meta.generation.hash(&mut h);
    meta.deletion_timestamp.is_some().hash(&mut h);
    for label in pod.labels() {
        label.hash(&mut h);
    }
    meta.finalizers.hash(&mut h);
    let annotations = pod.annotations();
    for key in WATCHED_ANNOTATIONS {
        annotations.get(key).hash(&mut h);
    }
    pod.node_name().hash(&mut h);
    for c in pod.containers() {
        (&c.name, &c.image).hash(&mut h);
    }
    pod.phase().hash(&mut h);
    for ty in WATCHED_CONDITIONS {
        pod.condition(ty).map(|c| &c.status).hash(&mut h);
    }
    for c in pod.container_statuses() {
        (&c.name, &c.image, &c.image_id, c.ready, c.restart_count).hash(&mut h);
    }
    h.finish()
}

/// Passes on the events of `pods` that should trigger a reconcile: the first event of a
/// pod, every event whose [`trigger_hash`] changed, and deletions (a pod no longer in
/// `store`, which the reflector updated before this stage).
pub fn filter_pod_triggers<S>(
    pods: S,
    store: Store<CachedPod>,
) -> impl Stream<Item = Result<CachedPod, watcher::Error>> + Send
where
    S: Stream<Item = Result<CachedPod, watcher::Error>> + Send,
{
    let mut seen: HashMap<ObjectRef<CachedPod>, u64> = HashMap::new();
    pods.filter(move |event| {
        let pass = match event {
            Err(_) => true,
            Ok(pod) => {
                let key = ObjectRef::from_obj(pod);
                if store.get(&key).is_none() {
                    seen.remove(&key);
                    true
                } else {
                    let hash = trigger_hash(pod);
                    seen.insert(key, hash) != Some(hash)
                }
            }
        };
        futures::future::ready(pass)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::{Value, json};

    use super::*;

    type Change = Box<dyn FnOnce(&mut Value)>;

    fn pod(f: impl FnOnce(&mut Value)) -> CachedPod {
        serde_json::from_value(pod_json(f)).unwrap()
    }

    fn pod_json(f: impl FnOnce(&mut Value)) -> Value {
        let mut v = json!({
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "1", "generation": 1,
                "labels": {"controller-revision-hash": "cs-1"}, "annotations": {}},
            "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "app:1"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "conditions": [
                    {"type": "Ready", "status": "True", "lastProbeTime": null},
                    {"type": "ContainersReady", "status": "True"}],
                "containerStatuses": [{"name": "main", "image": "app:1", "imageID": "sha-1",
                    "ready": true, "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]},
        });
        f(&mut v);
        v
    }

    #[test]
    fn kubelet_noise_does_not_change_the_hash() {
        let base = trigger_hash(&pod(|_| {}));
        let noise: Vec<Change> = vec![
            Box::new(|v| v["metadata"]["resourceVersion"] = json!("2")),
            Box::new(|v| v["status"]["podIP"] = json!("10.0.0.2")),
            Box::new(|v| v["status"]["conditions"][1]["status"] = json!("False")),
            Box::new(|v| {
                v["status"]["conditions"][0]["lastProbeTime"] = json!("2026-01-01T00:00:01Z")
            }),
            Box::new(|v| {
                v["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] =
                    json!("2026-01-01T00:00:05Z")
            }),
            Box::new(|v| v["metadata"]["annotations"]["unrelated"] = json!("x")),
        ];
        for change in noise {
            assert_eq!(trigger_hash(&pod(change)), base);
        }
    }

    #[test]
    fn what_the_cloneset_decides_on_changes_the_hash() {
        let base = trigger_hash(&pod(|_| {}));
        let relevant: Vec<(&str, Change)> = vec![
            (
                "generation",
                Box::new(|v| v["metadata"]["generation"] = json!(2)),
            ),
            (
                "deletion",
                Box::new(|v| v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")),
            ),
            (
                "label",
                Box::new(|v| {
                    v["metadata"]["labels"]["lifecycle.apps.kruise.io/state"] = json!("Updating")
                }),
            ),
            (
                "finalizer",
                Box::new(|v| v["metadata"]["finalizers"] = json!(["hook"])),
            ),
            (
                "state",
                Box::new(|v| {
                    v["metadata"]["annotations"]["apps.kruise.io/inplace-update-state"] =
                        json!("{}")
                }),
            ),
            ("node", Box::new(|v| v["spec"]["nodeName"] = json!("n2"))),
            (
                "spec image",
                Box::new(|v| v["spec"]["containers"][0]["image"] = json!("app:2")),
            ),
            (
                "phase",
                Box::new(|v| v["status"]["phase"] = json!("Failed")),
            ),
            (
                "ready",
                Box::new(|v| v["status"]["conditions"][0]["status"] = json!("False")),
            ),
            (
                "gate",
                Box::new(|v| {
                    v["status"]["conditions"][1] =
                        json!({"type": "InPlaceUpdateReady", "status": "False"})
                }),
            ),
            (
                "imageID",
                Box::new(|v| v["status"]["containerStatuses"][0]["imageID"] = json!("sha-2")),
            ),
            (
                "container ready",
                Box::new(|v| v["status"]["containerStatuses"][0]["ready"] = json!(false)),
            ),
            (
                "restarts",
                Box::new(|v| v["status"]["containerStatuses"][0]["restartCount"] = json!(1)),
            ),
        ];
        for (what, change) in relevant {
            assert_ne!(trigger_hash(&pod(change)), base, "{what}");
        }
    }

    #[tokio::test]
    async fn the_filter_passes_first_sight_relevant_changes_and_deletions() {
        let cached = |f: fn(&mut Value)| -> CachedPod {
            let mut v = pod_json(|_| {});
            f(&mut v);
            serde_json::from_value(v).unwrap()
        };
        let first = cached(|_| {});
        let noise = cached(|v| v["status"]["podIP"] = json!("10.0.0.9"));
        let relevant = cached(|v| v["status"]["containerStatuses"][0]["ready"] = json!(false));
        let (store, mut writer) = kube::runtime::reflector::store::<CachedPod>();
        writer.apply_watcher_event(&watcher::Event::Apply(first.clone()));
        // Events as the reflector hands them on, store updated first; the last one is the
        // deletion (the pod is gone from the store by then).
        let events = vec![first, noise, relevant.clone(), relevant.clone()];
        let passed: Vec<_> = {
            let stream = futures::stream::iter(events.into_iter().map(Ok));
            let filtered = filter_pod_triggers(stream, store.clone());
            futures::pin_mut!(filtered);
            let mut out = Vec::new();
            let mut n = 0;
            while let Some(item) = filtered.next().await {
                out.push(item.is_ok());
                n += 1;
                if n == 2 {
                    writer.apply_watcher_event(&watcher::Event::Delete(relevant.clone()));
                }
            }
            out
        };
        // first (new), relevant (changed), then the deleted one; the noise is dropped.
        assert_eq!(passed.len(), 3, "{passed:?}");
    }
}
