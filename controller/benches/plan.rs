//! One plan of a CloneSet with 1k, 10k and 100k pods (issue 2, item 6): mixed revisions
//! (a rollout under way), some pods not ready, weight priority and a scatter term set,
//! update type InPlaceIfPossible. Targets on the 2-core machine: ≤ 5 ms at 10k pods on
//! one core, and time(100k) / time(10k) ≤ 12.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use inplace_controller::plan::{PlanOptions, Snapshot, plan};
use inplace_proto::CloneSet;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

const EPOCH: i64 = 1_767_225_600;

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

struct Input {
    cs: CloneSet,
    pods: Vec<Pod>,
    revisions: Vec<ControllerRevision>,
    options: PlanOptions,
}

fn snapshot(input: &Input) -> Snapshot<'_> {
    Snapshot {
        cloneset: &input.cs,
        pods: &input.pods,
        pvcs: &[],
        revisions: &input.revisions,
        nodes: &[],
        now: Timestamp::from_second(EPOCH + 1000).unwrap(),
        options: &input.options,
    }
}

/// `n` pods: a third already on the new revision, one in twenty not ready.
fn input(n: usize) -> Input {
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
            serde_json::from_value(json!({
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
            .unwrap()
        })
        .collect();
    Input {
        cs: cloneset(n, "app:v2", Some(&old_name)),
        pods,
        revisions: vec![old_rev, new_rev],
        options,
    }
}

fn bench_plan(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(8));
    for n in [1_000usize, 10_000, 100_000] {
        let input = input(n);
        // The plan must do real work: an update step over the candidates.
        let first = plan(snapshot(&input)).unwrap();
        assert!(!first.actions.is_empty(), "the benchmark plan does nothing");
        group.bench_with_input(BenchmarkId::from_parameter(n), &input, |b, input| {
            b.iter(|| black_box(plan(black_box(snapshot(input))).unwrap()));
        });
    }
    group.finish();
}

criterion_group!(benches, bench_plan);
criterion_main!(benches);
