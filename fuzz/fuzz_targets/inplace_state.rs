//! The in-place update state and grace annotations (`apps.kruise.io/inplace-update-state`,
//! `apps.kruise.io/inplace-update-grace`), written by the controller, OpenKruise or
//! anyone who can patch a pod. Input: the state text, NUL, the grace text.
//!
//! Read as the controller reads them (the planner's pod facts and container batches, the
//! whole plan of a CloneSet whose first pod carries them) and as the daemon does (its
//! decision for a pod on its node, the patches it would write).
#![no_main]

use std::collections::BTreeMap;

use inplace_controller::plan::PodFacts;
use inplace_controller::plan::container_batches;
use inplace_controller::watch::CachedPod;
use inplace_daemon::inplace::decide::{self as daemon, RuntimeContainer};
use inplace_fuzz::{now, plan_with_first_pod, texts};
use inplace_proto::keys;
use inplace_proto::{InPlaceUpdateGrace, InPlaceUpdateState};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let t = texts(data, 2);
    let (state_text, grace_text) = (&t[0], &t[1]);

    for key in [
        keys::INPLACE_UPDATE_STATE_ANNOTATION,
        keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY,
    ] {
        let annotations = BTreeMap::from([(key.to_owned(), state_text.clone())]);
        if let Some(Ok(state)) = InPlaceUpdateState::from_annotations(&annotations) {
            // What the controller and the daemon do with a state they could read.
            let _ = serde_json::to_string(&state);
            let _ = container_batches::next_batch::<ContainerStatus>(&state, &[]);
            let _ = container_batches::env_restarts_awaited::<ContainerStatus>(&state, &[]);
            let _ = container_batches::remaining(&state);
            let _ = daemon::resized_containers(&state);
            let ids = BTreeMap::from([("nginx".to_owned(), "containerd://b".to_owned())]);
            let _ = daemon::state_with_container_ids(&state, &ids);
        }
    }
    if let Ok(grace) = serde_json::from_str::<InPlaceUpdateGrace>(grace_text) {
        let _ = serde_json::to_string(&grace);
        let _ = container_batches::split(&grace, &[("nginx".to_owned(), None)]);
    }

    let annotate = |pod: &mut Pod| {
        let a = pod.metadata.annotations.get_or_insert_default();
        a.insert(
            keys::INPLACE_UPDATE_STATE_ANNOTATION.to_owned(),
            state_text.clone(),
        );
        if !grace_text.is_empty() {
            a.insert(
                keys::INPLACE_UPDATE_GRACE_ANNOTATION.to_owned(),
                grace_text.clone(),
            );
        }
    };

    // The daemon's view of the first fixture pod carrying them (in an update, not ready).
    let Some(fixture) = inplace_fuzz::partition_fixture() else {
        panic!("the partition fixture does not load");
    };
    if let Some(pod) = fixture.pods.first() {
        let mut pod = pod.clone();
        annotate(&mut pod);
        if let Some(c) = pod
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .and_then(|c| {
                c.iter_mut()
                    .find(|c| c.type_ == keys::INPLACE_UPDATE_READY_CONDITION)
            })
        {
            c.status = "False".into();
        }
        let runtime = [RuntimeContainer {
            id: "b".into(),
            name: "nginx".into(),
            attempt: 1,
            running: true,
            created_at: 1,
            image_ref: "sha256:bbbb".into(),
            image: "sha256:bbbb".into(),
            reported_image: None,
            env: None,
        }];
        let resolved = BTreeMap::from([("nginx:mainline".to_owned(), "sha256:bbbb".to_owned())]);
        let _ = daemon::decide(&pod, &runtime, &resolved);
        let _ = daemon::in_update(&pod);
        let ids = BTreeMap::from([("nginx".to_owned(), "containerd://b".to_owned())]);
        let _ = daemon::completion_patch(&pod, &ids, now());
        // The planner reads the pod as the watch caches it.
        if let Ok(cached) = CachedPod::from_pod(&pod) {
            let facts = PodFacts::from_pod(&cached, &Default::default());
            let _ = facts.lifecycle_since();
        }
    }

    // The controller's whole plan with the first pod carrying them.
    plan_with_first_pod(annotate);
});
