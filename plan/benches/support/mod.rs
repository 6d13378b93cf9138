//! The CloneSet snapshot shared by the `plan` bench and the `phase_timing` example
//! (included by both with `#[path]`): 1k–100k pods, mixed revisions, some not ready,
//! weight priority and a scatter term set, update type InPlaceIfPossible.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, dead_code)]

use std::sync::Arc;

use inplace_plan::cached::CachedPod;
use inplace_plan::{PlanOptions, Snapshot, plan};
use inplace_proto::CloneSet;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

pub const EPOCH: i64 = 1_767_225_600;

fn ts(secs: i64) -> String {
    Timestamp::from_second(EPOCH + secs).unwrap().to_string()
}

fn template(image: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": "big"}},
        "spec": {"containers": [{"name": "main", "image": image}]},
    })
}

fn cloneset(replicas: usize, image: &str, current: Option<&str>) -> CloneSet {
    let mut cs: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": "big", "namespace": "default", "uid": "big-uid", "generation": 7},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "big"}},
            "template": template(image),
            "minReadySeconds": 10,
            "progressDeadlineSeconds": 600,
            "updateStrategy": {
                "type": "InPlaceIfPossible",
                "partition": "10%",
                "maxUnavailable": "10%",
                "priorityStrategy": {"weightPriority": [
                    {"weight": 50, "matchSelector": {"matchLabels": {"zone": "a"}}},
                    {"weight": 20, "matchSelector": {"matchExpressions": [
                        {"key": "rack", "operator": "In", "values": ["r1", "r2"]}]}},
                ]},
                "scatterStrategy": [{"key": "zone", "value": "c"}],
            },
        },
    }))
    .unwrap();
    if let Some(current) = current {
        cs.status = Some(inplace_proto::CloneSetStatus {
            current_revision: Some(current.to_owned()),
            update_revision: Some(current.to_owned()),
            ..Default::default()
        });
    }
    cs
}

pub struct Input {
    pub cs: CloneSet,
    /// In the cached form the planner reads, deserialised as the watch does.
    pub pods: Vec<Arc<CachedPod>>,
    pub revisions: Vec<ControllerRevision>,
    pub options: PlanOptions,
}

pub fn snapshot(input: &Input) -> Snapshot<'_> {
    Snapshot {
        cloneset: &input.cs,
        pods: &input.pods,
        pvcs: &[],
        revisions: &input.revisions,
        nodes: &[],
        now: Timestamp::from_second(EPOCH + 1000).unwrap(),
        options: &input.options,
        pods_to_delete_seen: &inplace_plan::pods_to_delete::NO_NAMES,
        pre_download: None,
    }
}

/// `n` pods: a third already on the new revision, one in twenty not ready.
pub fn input(n: usize) -> Input {
    let options = PlanOptions::default();
    // Let the planner name both revisions.
    let name_of = |cs: &CloneSet| {
        let p = plan(Snapshot {
            cloneset: cs,
            pods: &[],
            pvcs: &[],
            revisions: &[],
            nodes: &[],
            now: Timestamp::from_second(EPOCH).unwrap(),
            options: &options,
            pods_to_delete_seen: &inplace_plan::pods_to_delete::NO_NAMES,
            pre_download: None,
        })
        .unwrap();
        (
            p.revisions.update_revision.clone(),
            p.revisions.create.unwrap(),
        )
    };
    let (old_name, old_rev) = name_of(&cloneset(n, "app:v1", None));
    let (new_name, new_rev) = name_of(&cloneset(n, "app:v2", None));
    let pods = (0..n)
        .map(|i| {
            let updated = i % 3 == 0;
            let ready = i % 20 != 7;
            let (rev, image) = if updated {
                (&new_name, "app:v2")
            } else {
                (&old_name, "app:v1")
            };
            let zone = ["a", "b", "c", "d"][i % 4];
            let rack = format!("r{}", i % 7);
            let pod: CachedPod = serde_json::from_value(json!({
                "metadata": {
                    "name": format!("big-{i:06}"),
                    "namespace": "default",
                    "uid": format!("uid-{i}"),
                    "creationTimestamp": ts(i64::try_from(i % 500).unwrap()),
                    "labels": {
                        "app": "big",
                        "controller-revision-hash": rev,
                        "pod-template-hash": rev.rsplit('-').next().unwrap(),
                        "apps.kruise.io/cloneset-instance-id": format!("{i:06}"),
                        "lifecycle.apps.kruise.io/state": "Normal",
                        "zone": zone,
                        "rack": rack,
                    },
                    "annotations": {"lifecycle.apps.kruise.io/timestamp": ts(0)},
                },
                "spec": {
                    "nodeName": format!("node-{}", i % 1000),
                    "containers": [{"name": "main", "image": image}],
                    "readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
                },
                "status": {
                    "phase": "Running",
                    "conditions": [
                        {"type": "Ready", "status": if ready { "True" } else { "False" },
                         "lastTransitionTime": ts(i64::try_from(i % 900).unwrap())},
                        {"type": "InPlaceUpdateReady", "status": "True"},
                    ],
                    "containerStatuses": [{
                        "name": "main", "image": image, "imageID": format!("sha256:{image}"),
                        "ready": ready, "restartCount": i % 3,
                    }],
                },
            }))
            .unwrap();
            Arc::new(pod)
        })
        .collect();
    Input {
        cs: cloneset(n, "app:v2", Some(&old_name)),
        pods,
        revisions: vec![old_rev, new_rev],
        options,
    }
}
