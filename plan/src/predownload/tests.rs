#![allow(clippy::unwrap_used, clippy::expect_used)]

//! One test per rule of the module documentation (OpenKruise
//! `pkg/controller/cloneset/cloneset_predownload_image.go`).

use inplace_proto::imagepulljob::ImagePullJob;
use serde_json::{Value, json};

use super::*;
use crate::fixtures::{cloneset, merge, revision};

const UPDATE: &str = "demo-5f6c7d";
const CURRENT: &str = "demo-old";

fn old_template() -> Value {
    json!({
        "metadata": {"labels": {"app": "demo"}, "annotations": {"team": "a"}},
        "spec": {"imagePullSecrets": [{"name": "regcred"}], "containers": [
            {"name": "main", "image": "nginx:1"},
            {"name": "side", "image": "busybox:1"},
        ]},
    })
}

/// `demo`: 4 replicas, InPlaceIfPossible, partition 1, `main` nginx:1 → nginx:2, status
/// on the update revision with 0 updated ready pods; `extra` is merged over the spec.
fn cs_with(extra: Value) -> CloneSet {
    let mut spec = json!({
        "replicas": 4,
        "updateStrategy": {"type": "InPlaceIfPossible", "partition": 1},
        "template": {
            "metadata": {"labels": {"app": "demo"}, "annotations": {"team": "a"}},
            "spec": {
                "imagePullSecrets": [{"name": "regcred"}],
                "containers": [
                    {"name": "main", "image": "nginx:2"},
                    {"name": "side", "image": "busybox:1"},
                ],
            },
        },
    });
    merge(&mut spec, extra);
    let mut cs = cloneset(spec);
    cs.status = Some(inplace_proto::CloneSetStatus {
        update_revision: Some(UPDATE.into()),
        current_revision: Some(CURRENT.into()),
        updated_ready_replicas: 0,
        ..Default::default()
    });
    cs
}

fn annotate(mut cs: CloneSet, key: &str, value: &str) -> CloneSet {
    cs.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    cs
}

fn revisions(cs: &CloneSet, update_labels: &[(&str, &str)]) -> Vec<ControllerRevision> {
    let mut update = revision(UPDATE, serde_json::to_value(&cs.spec.template).unwrap());
    let labels = update.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(keys::CONTROLLER_REVISION_HASH_LABEL.into(), "5f6c7d".into());
    for (k, v) in update_labels {
        labels.insert((*k).into(), (*v).into());
    }
    vec![revision(CURRENT, old_template()), update]
}

fn gate_on() -> PlanOptions {
    PlanOptions {
        pre_download_image: true,
        ..PlanOptions::default()
    }
}

fn run_with(
    cs: &CloneSet,
    revs: &[ControllerRevision],
    jobs: &[ImagePullJob],
    current: &str,
    options: &PlanOptions,
) -> Decision {
    decide(&Input {
        cloneset: cs,
        update_revision: UPDATE,
        current_revision: current,
        revisions: revs,
        jobs,
        options,
    })
}

fn run(cs: &CloneSet) -> Decision {
    run_with(cs, &revisions(cs, &[]), &[], CURRENT, &gate_on())
}

fn owned_job(name: &str, uid: &str, terminating: bool) -> ImagePullJob {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ImagePullJob",
        "metadata": {
            "name": name,
            "namespace": "default",
            "ownerReferences": [{
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "demo",
                "uid": uid, "controller": true,
            }],
            "deletionTimestamp": if terminating { json!("2026-01-01T00:00:00Z") } else { Value::Null },
        },
        "spec": {"image": "nginx:2"},
    }))
    .unwrap()
}

fn created_names(d: &Decision) -> Vec<String> {
    job_images(d).into_keys().collect()
}

#[test]
fn enablement_gate_off_does_nothing() {
    let cs = cs_with(json!({}));
    let revs = revisions(&cs, &[]);
    let jobs = [owned_job("old-main", "cs-uid", false)];
    let off = PlanOptions::default();
    // neither jobs while rolling out nor cleanup once converged
    assert_eq!(
        run_with(&cs, &revs, &jobs, CURRENT, &off),
        Decision::Nothing(Idle::GateOff)
    );
    assert_eq!(
        run_with(&cs, &revs, &jobs, UPDATE, &off),
        Decision::Nothing(Idle::GateOff)
    );
    // and nothing for a CloneSet being deleted
    let mut deleting = cs.clone();
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    assert_eq!(run(&deleting), Decision::Nothing(Idle::Deleting));
}

#[test]
fn trigger_updated_ready_reaches_min_updated_ready_pods() {
    // (what, annotation, status updateRevision, updatedReadyReplicas, triggered)
    let cases: &[(&str, Option<&str>, &str, i32, bool)] = &[
        ("no annotation: min 0", None, UPDATE, 0, true),
        ("absolute, below", Some("2"), UPDATE, 1, false),
        ("absolute, reached", Some("2"), UPDATE, 2, true),
        (
            "percent of replicas rounded up: 30% of 4 = 2, below",
            Some("30%"),
            UPDATE,
            1,
            false,
        ),
        (
            "percent of replicas rounded up: 30% of 4 = 2, reached",
            Some("30%"),
            UPDATE,
            2,
            true,
        ),
        ("unreadable counts 0", Some("two"), UPDATE, 0, true),
        ("negative counts 0", Some("-3"), UPDATE, 0, true),
        (
            "counters of another revision count 0",
            Some("1"),
            "demo-older",
            3,
            false,
        ),
    ];
    for (what, ann, status_rev, ready, triggered) in cases {
        let mut cs = cs_with(json!({}));
        if let Some(v) = ann {
            cs = annotate(
                cs,
                keys::IMAGE_PREDOWNLOAD_MIN_UPDATED_READY_PODS_ANNOTATION,
                v,
            );
        }
        let status = cs.status.as_mut().unwrap();
        status.update_revision = Some((*status_rev).into());
        status.updated_ready_replicas = *ready;
        let d = run(&cs);
        assert_eq!(
            matches!(d, Decision::Create { .. }),
            *triggered,
            "{what}: {d:?}"
        );
        if !triggered {
            assert!(
                matches!(d, Decision::Nothing(Idle::WaitingForUpdatedReady { .. })),
                "{what}: {d:?}"
            );
        }
    }
}

#[test]
fn skips_label_the_revision_ignored() {
    // (what, spec merged over the base, reason)
    type ReasonCheck = fn(&SkipReason) -> bool;
    let cases: Vec<(&str, Value, ReasonCheck)> = vec![
        (
            "update type ReCreate",
            json!({"updateStrategy": {"type": "ReCreate"}}),
            |r| {
                matches!(
                    r,
                    SkipReason::NotInPlaceStrategy(CloneSetUpdateStrategyType::ReCreate)
                )
            },
        ),
        (
            "update type OnDelete (no rolling update)",
            json!({"updateStrategy": {"type": "OnDelete"}}),
            |r| {
                matches!(
                    r,
                    SkipReason::NotInPlaceStrategy(CloneSetUpdateStrategyType::OnDelete)
                )
            },
        ),
        ("replicas 3", json!({"replicas": 3}), |r| {
            *r == SkipReason::TooFewReplicas(3)
        }),
        ("replicas 1", json!({"replicas": 1}), |r| {
            *r == SkipReason::TooFewReplicas(1)
        }),
        (
            "partition 0 and maxUnavailable 100%: one batch",
            json!({"updateStrategy": {"partition": 0, "maxUnavailable": "100%"}}),
            |r| {
                *r == SkipReason::OneBatch {
                    max_unavailable: 4,
                    replicas: 4,
                }
            },
        ),
        (
            "partition 0 and maxUnavailable 5 > replicas",
            json!({"updateStrategy": {"partition": 0, "maxUnavailable": 5}}),
            |r| {
                *r == SkipReason::OneBatch {
                    max_unavailable: 5,
                    replicas: 4,
                }
            },
        ),
        (
            "an env change cannot go in place",
            json!({"template": {"spec": {"containers": [
                {"name": "main", "image": "nginx:2", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "busybox:1"},
            ]}}}),
            |r| matches!(r, SkipReason::NotInPlace(_)),
        ),
        (
            "InPlaceOnly refusing the change",
            json!({"updateStrategy": {"type": "InPlaceOnly"}, "template": {"spec": {"containers": [
                {"name": "main", "image": "nginx:2"},
            ]}}}),
            |r| matches!(r, SkipReason::NotInPlace(_)),
        ),
    ];
    for (what, spec, reason_ok) in cases {
        let cs = cs_with(spec);
        match run(&cs) {
            Decision::Ignore { revision, reason } => {
                assert_eq!(revision, UPDATE, "{what}");
                assert!(reason_ok(&reason), "{what}: {reason:?}");
                assert!(!reason.to_string().is_empty());
            }
            other => panic!("{what}: expected Ignore, got {other:?}"),
        }
    }
}

#[test]
fn skips_do_not_apply_at_the_boundaries() {
    // (what, spec merged over the base)
    let cases = [
        ("replicas 4 is enough", json!({"replicas": 4})),
        (
            "partition 0, maxUnavailable 99% rounds down to 3 < 4",
            json!({"updateStrategy": {"partition": 0, "maxUnavailable": "99%"}}),
        ),
        (
            "partition 0, default maxUnavailable 20%",
            json!({"updateStrategy": {"partition": 0}}),
        ),
        (
            "maxUnavailable 100% but a partition keeps old pods",
            json!({"updateStrategy": {"partition": 2, "maxUnavailable": "100%"}}),
        ),
        (
            "InPlaceOnly with an image change",
            json!({"updateStrategy": {"type": "InPlaceOnly"}}),
        ),
    ];
    for (what, spec) in cases {
        let d = run(&cs_with(spec));
        assert_eq!(
            created_names(&d),
            vec![format!("{UPDATE}-main")],
            "{what}: {d:?}"
        );
    }
}

#[test]
fn revision_labelled_created_or_ignored_is_handled_once() {
    let cs = cs_with(json!({}));
    for (label, idle) in [
        (keys::PRE_PREDOWNLOAD_CREATED_LABEL, Idle::AlreadyCreated),
        (keys::IMAGE_PREDOWNLOAD_IGNORED_LABEL, Idle::AlreadyIgnored),
    ] {
        let revs = revisions(&cs, &[(label, "true")]);
        assert_eq!(
            run_with(&cs, &revs, &[], CURRENT, &gate_on()),
            Decision::Nothing(idle),
            "{label}"
        );
    }
    // a skipped CloneSet whose revision is already labelled is not labelled again
    let small = cs_with(json!({"replicas": 2}));
    let revs = revisions(&small, &[(keys::IMAGE_PREDOWNLOAD_IGNORED_LABEL, "true")]);
    assert_eq!(
        run_with(&small, &revs, &[], CURRENT, &gate_on()),
        Decision::Nothing(Idle::AlreadyIgnored)
    );
}

#[test]
fn update_revision_not_stored_yet_waits() {
    let cs = cs_with(json!({}));
    let revs = vec![revision(CURRENT, old_template())];
    assert_eq!(
        run_with(&cs, &revs, &[], CURRENT, &gate_on()),
        Decision::Nothing(Idle::RevisionNotStored)
    );
}

#[test]
fn jobs_one_per_container_whose_image_changes() {
    // (what, containers of the new template, jobs (name → image))
    let cases = [
        (
            "one of two containers changes",
            json!([{"name": "main", "image": "nginx:2"}, {"name": "side", "image": "busybox:1"}]),
            vec![(format!("{UPDATE}-main"), "nginx:2")],
        ),
        (
            "both change",
            json!([{"name": "main", "image": "nginx:2"}, {"name": "side", "image": "busybox:2"}]),
            vec![
                (format!("{UPDATE}-main"), "nginx:2"),
                (format!("{UPDATE}-side"), "busybox:2"),
            ],
        ),
    ];
    for (what, containers, want) in cases {
        let cs = cs_with(json!({"template": {"spec": {"containers": containers}}}));
        let d = run(&cs);
        let got: Vec<(String, String)> = job_images(&d).into_iter().collect();
        let want: Vec<(String, String)> =
            want.into_iter().map(|(n, i)| (n, i.to_owned())).collect();
        assert_eq!(got, want, "{what}");
        assert_eq!(
            revision_label(&d),
            Some((UPDATE, keys::PRE_PREDOWNLOAD_CREATED_LABEL)),
            "{what}"
        );
    }
    // only metadata changes: in place, nothing to pull, the revision is still marked done
    let cs = cs_with(json!({"template": {
        "metadata": {"labels": {"app": "demo", "tier": "x"}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1"}, {"name": "side", "image": "busybox:1"}]},
    }}));
    let d = run(&cs);
    assert_eq!(
        d,
        Decision::Create {
            revision: UPDATE.into(),
            jobs: vec![]
        }
    );
}

#[test]
fn jobs_carry_the_reference_fields() {
    let cs = cs_with(json!({"selector": {"matchExpressions": [
        {"key": "tier", "operator": "Exists"},
    ]}}));
    let Decision::Create { jobs, .. } = run(&cs) else {
        panic!("expected jobs");
    };
    let job = serde_json::to_value(&jobs[0]).unwrap();
    // v1beta1: the version OpenKruise v1.9.0 creates them in (its imagejob utility
    // builds an appsv1beta1.ImagePullJob) and stores.
    let want = json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "ImagePullJob",
        "metadata": {
            "name": format!("{UPDATE}-main"),
            "namespace": "default",
            "labels": {"app": "demo", "controller.kubernetes.io/hash": "5f6c7d"},
            "ownerReferences": [{
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "demo",
                "uid": "cs-uid", "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "image": "nginx:2",
            "pullSecrets": ["regcred"],
            "podSelector": {
                "matchLabels": {"app": "demo"},
                "matchExpressions": [
                    {"key": "tier", "operator": "Exists"},
                    {"key": "controller-revision-hash", "operator": "NotIn", "values": [UPDATE, "5f6c7d"]},
                ],
            },
            "parallelism": 1,
            "pullPolicy": {"timeoutSeconds": 300, "backoffLimit": 1},
            "completionPolicy": {"type": "Always", "ttlSecondsAfterFinished": 600},
            "sandboxConfig": {"labels": {"app": "demo"}, "annotations": {"team": "a"}},
        },
    });
    assert_eq!(job, want);
}

#[test]
fn jobs_parallelism_and_timeout_from_annotations() {
    // (annotation, value, parallelism, timeout)
    let cases = [
        (
            keys::IMAGE_PREDOWNLOAD_PARALLELISM_ANNOTATION,
            "10",
            10,
            300,
        ),
        (keys::IMAGE_PREDOWNLOAD_PARALLELISM_ANNOTATION, "0", 0, 300),
        (
            keys::IMAGE_PREDOWNLOAD_PARALLELISM_ANNOTATION,
            "50%",
            1,
            300,
        ),
        (keys::IMAGE_PREDOWNLOAD_PARALLELISM_ANNOTATION, "-2", 1, 300),
        (keys::IMAGE_PREDOWNLOAD_TIMEOUT_ANNOTATION, "120", 1, 120),
        (keys::IMAGE_PREDOWNLOAD_TIMEOUT_ANNOTATION, "soon", 1, 300),
    ];
    for (key, value, par, timeout) in cases {
        let cs = annotate(cs_with(json!({})), key, value);
        let Decision::Create { jobs, .. } = run(&cs) else {
            panic!("{key}={value}: expected jobs");
        };
        assert_eq!(jobs[0].parallelism(), par, "{key}={value}");
        assert_eq!(jobs[0].timeout_seconds(), timeout, "{key}={value}");
        assert_eq!(jobs[0].backoff_limit(), BACKOFF_LIMIT);
    }
}

#[test]
fn cleanup_when_revisions_converge_deletes_controlled_jobs() {
    let cs = cs_with(json!({}));
    let revs = revisions(&cs, &[(keys::PRE_PREDOWNLOAD_CREATED_LABEL, "true")]);
    let mut other_ns = owned_job("elsewhere", "cs-uid", false);
    other_ns.metadata.namespace = Some("other".into());
    let jobs = [
        owned_job("a-main", "cs-uid", false),
        owned_job("b-side", "cs-uid", false),
        owned_job("gone", "cs-uid", true),
        owned_job("foreign", "another-uid", false),
        other_ns,
    ];
    assert_eq!(
        run_with(&cs, &revs, &jobs, UPDATE, &gate_on()),
        Decision::Delete {
            jobs: vec!["a-main".into(), "b-side".into()]
        }
    );
    // nothing left to delete
    assert_eq!(
        run_with(&cs, &revs, &jobs[2..], UPDATE, &gate_on()),
        Decision::Nothing(Idle::Converged)
    );
    // while revisions differ, existing jobs are kept
    assert!(matches!(
        run_with(&cs, &revs, &jobs, CURRENT, &gate_on()),
        Decision::Nothing(Idle::AlreadyCreated)
    ));
}

#[test]
fn controls_job_needs_the_namespace_and_a_controller_reference_with_the_uid() {
    let cs = cs_with(json!({}));
    let mut other_ns = owned_job("elsewhere", "cs-uid", false);
    other_ns.metadata.namespace = Some("other".into());
    let mut not_controller = owned_job("owner-only", "cs-uid", false);
    for o in not_controller
        .metadata
        .owner_references
        .iter_mut()
        .flatten()
    {
        o.controller = None;
    }
    let mut no_owner = owned_job("orphan", "cs-uid", false);
    no_owner.metadata.owner_references = None;
    let cases = [
        (owned_job("mine", "cs-uid", false), true),
        (owned_job("mine-terminating", "cs-uid", true), true),
        (owned_job("foreign", "another-uid", false), false),
        (other_ns, false),
        (not_controller, false),
        (no_owner, false),
    ];
    for (job, controlled) in &cases {
        assert_eq!(
            controls_job(&cs, job),
            *controlled,
            "{:?}",
            job.metadata.name
        );
    }
    let mut no_uid = cs.clone();
    no_uid.metadata.uid = None;
    assert!(!controls_job(&no_uid, &cases[0].0));
}

#[test]
fn short_hash_revision_label_is_in_the_not_in_values_once() {
    // a revision without the hash label: the name's last segment stands in
    let cs = cs_with(json!({}));
    let mut revs = revisions(&cs, &[]);
    revs[1].metadata.labels = None;
    let Decision::Create { jobs, .. } = run_with(&cs, &revs, &[], CURRENT, &gate_on()) else {
        panic!("expected jobs");
    };
    let exprs = jobs[0]
        .spec
        .pod_selector
        .as_ref()
        .and_then(|p| p.match_expressions.clone())
        .unwrap();
    assert_eq!(
        exprs[0].values,
        Some(vec![UPDATE.to_owned(), "5f6c7d".to_owned()])
    );
}

mod node_order {
    use serde_json::json;

    use super::super::*;
    use crate::fixtures::{Fixture, PodBuilder, cloneset, pod, t};

    fn on(name: &str, rev: &str, node: &str) -> PodBuilder {
        let node = node.to_owned();
        pod(name, rev).raw(move |v| v["spec"]["nodeName"] = json!(node))
    }

    fn order(strategy: serde_json::Value, pods: Vec<PodBuilder>) -> Vec<String> {
        let cs = cloneset(json!({"replicas": 4, "updateStrategy": strategy}));
        let fx = Fixture::new(cs, pods);
        update_node_order(&fx.ctx())
    }

    #[test]
    fn nodes_follow_the_update_order() {
        let weight = json!({"priorityStrategy": {"weightPriority": [
            {"weight": 50, "matchSelector": {"matchLabels": {"tier": "first"}}}]}});
        // (what, strategy, pods, nodes in pull order)
        let cases: Vec<(&str, serde_json::Value, Vec<PodBuilder>, Vec<&str>)> = vec![
            (
                "default order: not ready first, then newer first",
                json!({}),
                vec![
                    on("a", "demo-old", "n-a").created(t(1)),
                    on("b", "demo-old", "n-b").created(t(3)),
                    on("c", "demo-old", "n-c").created(t(2)).not_ready(),
                ],
                vec!["n-c", "n-b", "n-a"],
            ),
            (
                "updated and terminating pods are not pulled for",
                json!({}),
                vec![
                    on("a", "demo-new", "n-a"),
                    on("b", "demo-old", "n-b"),
                    on("c", "demo-old", "n-c").terminating(),
                ],
                vec!["n-b"],
            ),
            (
                "priority before the default order",
                weight,
                vec![
                    on("a", "demo-old", "n-a").created(t(5)),
                    on("b", "demo-old", "n-b")
                        .created(t(1))
                        .label("tier", "first"),
                ],
                vec!["n-b", "n-a"],
            ),
            (
                "a node once, at its first pod; unscheduled pods have none",
                json!({}),
                vec![
                    on("a", "demo-old", "n-x").created(t(3)),
                    on("b", "demo-old", "n-y").created(t(2)),
                    on("c", "demo-old", "n-x").created(t(1)),
                    pod("d", "demo-old").unscheduled(),
                ],
                vec!["n-x", "n-y"],
            ),
            (
                "PreparingUpdate first: its update has begun",
                json!({}),
                vec![
                    on("a", "demo-old", "n-a").created(t(5)),
                    on("b", "demo-old", "n-b")
                        .created(t(1))
                        .lifecycle("PreparingUpdate"),
                ],
                vec!["n-b", "n-a"],
            ),
        ];
        for (what, strategy, pods, want) in cases {
            assert_eq!(order(strategy, pods), want, "{what}");
        }
    }

    #[test]
    fn the_annotation_lists_the_order_within_the_size_cap() {
        assert_eq!(encode_node_order(&[]), "");
        let nodes: Vec<String> = ["n1", "n2", "n3"].map(String::from).to_vec();
        assert_eq!(encode_node_order(&nodes), "n1,n2,n3");
        // 10,000 names of 20 bytes do not fit: cut after a whole name
        let many: Vec<String> = (0..10_000).map(|i| format!("node-{i:015}")).collect();
        let value = encode_node_order(&many);
        assert!(value.len() <= MAX_NODE_ORDER_BYTES);
        assert!(value.len() > MAX_NODE_ORDER_BYTES - 21);
        let listed: Vec<&str> = value.split(',').collect();
        assert_eq!(listed[0], many[0]);
        assert_eq!(
            listed.last().copied(),
            Some(many[listed.len() - 1].as_str())
        );
    }

    #[test]
    fn only_created_jobs_get_the_order() {
        let job = ImagePullJob::new("j", ImagePullJobSpec::default());
        let mut create = Decision::Create {
            revision: "r".into(),
            jobs: vec![job.clone(), job],
        };
        with_node_order(&mut create, &["n2".to_owned(), "n1".to_owned()]);
        let Decision::Create { jobs, .. } = &create else {
            panic!("still a create");
        };
        for j in jobs {
            let a = j.metadata.annotations.as_ref().unwrap();
            assert_eq!(a[keys::PREDOWNLOAD_NODE_ORDER_ANNOTATION], "n2,n1");
        }
        let mut empty = Decision::Create {
            revision: "r".into(),
            jobs: vec![ImagePullJob::new("j", ImagePullJobSpec::default())],
        };
        with_node_order(&mut empty, &[]);
        let Decision::Create { jobs, .. } = &empty else {
            panic!("still a create");
        };
        assert!(jobs[0].metadata.annotations.is_none());
        let mut delete = Decision::Delete { jobs: vec![] };
        with_node_order(&mut delete, &["n".to_owned()]);
        assert_eq!(delete, Decision::Delete { jobs: vec![] });
    }
}
