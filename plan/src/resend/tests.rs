#![allow(clippy::unwrap_used, clippy::expect_used)]

use inplace_proto::CloneSet;
use k8s_openapi::api::apps::v1::ControllerRevision;
use serde_json::json;

use super::*;
use crate::fixtures::{PlanForms, PodBuilder, cloneset, pod, revision, t};
use crate::inplace_write::start;
use crate::model::PlanOptions;

fn template(image: &str) -> Value {
    json!({"metadata": {"labels": {"app": "demo"}},
           "spec": {"containers": [{"name": "main", "image": image}]}})
}

/// The CloneSet moving `main` from `nginx:1` (`demo-old`) to `nginx:2` (`demo-new`).
fn world() -> (CloneSet, Vec<ControllerRevision>, PlanOptions) {
    let cs = cloneset(json!({"template": template("nginx:2"),
                             "updateStrategy": {"type": "InPlaceIfPossible"}}));
    (
        cs,
        vec![revision("demo-old", template("nginx:1"))],
        PlanOptions::default(),
    )
}

fn at(p: PodBuilder, rv: &str) -> Pod {
    let rv = rv.to_owned();
    p.raw(move |v| v["metadata"]["resourceVersion"] = json!(rv))
        .build()
}

#[test]
fn a_conflict_is_retried_three_times_at_most() {
    let cases = [(1, true), (2, true), (3, true), (4, false), (9, false)];
    for (attempt, retried) in cases {
        assert_eq!(retries(attempt), retried, "conflict {attempt}");
    }
}

#[test]
fn the_write_is_the_plans_at_its_version_or_planned_again_from_the_pod_read() {
    let (cs, revisions, options) = world();
    let inputs = WriteInputs {
        cloneset: &cs,
        revisions: &revisions,
        update_revision: "demo-new",
        options: &options,
        now: t(1000),
    };
    let planned = pod("demo-a", "demo-old").cached();
    let write = start(&inputs, &planned, 0, "demo-new").unwrap();

    let pin = Pin::Planned("10".into());
    assert_eq!(pin.resource_version(), "10");
    assert_eq!(pin.body(&write, &inputs).unwrap(), write.pinned_patch("10"));

    // Read again with another image running: planned again from that pod, at its version.
    let fresh = at(
        pod("demo-a", "demo-old")
            .raw(|v| v["status"]["containerStatuses"][0]["imageID"] = json!("sha-9")),
        "12",
    );
    assert!(
        retry_at(&write, fresh, false).is_err(),
        "another image ID is another pod: no retry"
    );
    let fresh = at(pod("demo-a", "demo-old"), "12");
    let pin = retry_at(&write, fresh.clone(), false).unwrap();
    assert_eq!(pin, Pin::Fresh(Box::new(fresh.clone())));
    assert_eq!(pin.resource_version(), "12");
    let replanned = write
        .replan(&inputs, &CachedPod::from_pod(&fresh).unwrap())
        .unwrap()
        .pinned_patch("12");
    assert_eq!(pin.body(&write, &inputs).unwrap(), replanned);

    // The next write of the pod: the plan's pod at the version written, or the fresh one.
    let written = at(pod("demo-a", "demo-old"), "13");
    assert_eq!(
        Pin::Planned("10".into()).after(written.clone()),
        Pin::Planned("13".into())
    );
    assert_eq!(pin.after(written.clone()), Pin::Fresh(Box::new(written)));
}

#[test]
fn a_create_refused_for_an_existing_name_is_the_previous_pod_or_ours_not_cached_yet() {
    assert_eq!(
        create_exists("demo-a", true),
        CreateExists {
            what: "create pod demo-a (the previous pod of the instance is still there)".into(),
            expect_created: false,
        }
    );
    assert_eq!(
        create_exists("demo-a", false),
        CreateExists {
            what: "create pod demo-a (cache behind)".into(),
            expect_created: true,
        }
    );
}
