//! The labels and annotations others put on pods and CloneSets, and the strings in a
//! pod spec the components read beyond its type: the lifecycle state and its timestamp,
//! the deletion cost, specified-delete, the revision and instance labels, the CloneSet's
//! image pre-download annotations, the container launch priority, downward-API field
//! paths and resource quantities. A structured input (`arbitrary`): fuzzed values under
//! the keys that are read.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use inplace_controller::plan::{PodFacts, container_batches, predownload};
use inplace_controller::watch::CachedPod;
use inplace_daemon::inplace::decide as daemon;
use inplace_daemon::resize;
use inplace_fuzz::{now, partition_fixture, plan_and_render};
use inplace_proto::{downward, keys, quantity};
use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum PodKey<'a> {
    LifecycleState,
    LifecycleTimestamp,
    DeletionCost,
    SpecifiedDelete,
    Revision,
    TemplateHash,
    InstanceId,
    Other(&'a str),
}

impl PodKey<'_> {
    fn key(&self) -> (bool, &str) {
        match self {
            Self::LifecycleState => (true, keys::LIFECYCLE_STATE_LABEL),
            Self::LifecycleTimestamp => (false, keys::LIFECYCLE_TIMESTAMP_ANNOTATION),
            Self::DeletionCost => (false, keys::POD_DELETION_COST_ANNOTATION),
            Self::SpecifiedDelete => (true, keys::SPECIFIED_DELETE_LABEL),
            Self::Revision => (true, keys::REVISION_LABEL),
            Self::TemplateHash => (true, keys::POD_TEMPLATE_HASH_LABEL),
            Self::InstanceId => (true, keys::INSTANCE_ID_LABEL),
            Self::Other(k) => (false, k),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum ClonesetKey<'a> {
    Parallelism,
    Timeout,
    MinUpdatedReady,
    LaunchPriority,
    ExcludePreparingDelete,
    Other(&'a str),
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    pod: Vec<(PodKey<'a>, &'a str)>,
    cloneset: Vec<(ClonesetKey<'a>, &'a str)>,
    /// `(env name, fieldPath or priority value)` of the first pod's container.
    env: Vec<(&'a str, &'a str)>,
    quantities: Vec<&'a str>,
    runtime_env: Vec<(&'a str, &'a str)>,
}

fuzz_target!(|input: Input<'_>| {
    let Some(fixture) = partition_fixture() else {
        panic!("the partition fixture does not load");
    };
    let mut inputs = fixture.clone();

    // The CloneSet's annotations and labels.
    for (key, value) in &input.cloneset {
        let (label, key) = match key {
            ClonesetKey::Parallelism => (false, keys::IMAGE_PREDOWNLOAD_PARALLELISM_ANNOTATION),
            ClonesetKey::Timeout => (false, keys::IMAGE_PREDOWNLOAD_TIMEOUT_ANNOTATION),
            ClonesetKey::MinUpdatedReady => (
                false,
                keys::IMAGE_PREDOWNLOAD_MIN_UPDATED_READY_PODS_ANNOTATION,
            ),
            ClonesetKey::LaunchPriority => (false, keys::CONTAINER_LAUNCH_PRIORITY_ANNOTATION),
            ClonesetKey::ExcludePreparingDelete => {
                (true, keys::SCALING_EXCLUDE_PREPARING_DELETE_LABEL)
            }
            ClonesetKey::Other(k) => (false, *k),
        };
        if key == keys::CONTAINER_LAUNCH_PRIORITY_ANNOTATION {
            // Read from the template's annotations.
            let template = &mut inputs.cloneset.spec.template.0.0;
            let metadata = template
                .entry("metadata")
                .or_insert_with(|| serde_json::json!({}));
            if let Some(m) = metadata.as_object_mut() {
                let annotations = m
                    .entry("annotations")
                    .or_insert_with(|| serde_json::json!({}));
                if let Some(a) = annotations.as_object_mut() {
                    a.insert(key.to_owned(), (*value).into());
                }
            }
            continue;
        }
        let meta = &mut inputs.cloneset.metadata;
        let map = if label {
            meta.labels.get_or_insert_default()
        } else {
            meta.annotations.get_or_insert_default()
        };
        map.insert(key.to_owned(), (*value).to_owned());
    }
    let _ = predownload::parallelism(&inputs.cloneset);
    let _ = predownload::timeout_seconds(&inputs.cloneset);
    let _ = predownload::min_updated_ready(&inputs.cloneset);
    let _ = container_batches::launch_priorities(&inputs.cloneset.spec.template.0.0);

    // The first pod's labels and annotations, its container's env.
    let Some(pod) = inputs.pods.first_mut() else {
        return;
    };
    for (key, value) in &input.pod {
        let (label, key) = key.key();
        // The selector's own label stays: the controller sees only pods it selects.
        if key == "app" {
            continue;
        }
        let map = if label {
            pod.metadata.labels.get_or_insert_default()
        } else {
            pod.metadata.annotations.get_or_insert_default()
        };
        map.insert(key.to_owned(), (*value).to_owned());
    }
    let env: Vec<EnvVar> = input
        .env
        .iter()
        .map(|(name, value)| {
            if *name == keys::CONTAINER_PRIORITY_ENV {
                EnvVar {
                    name: (*name).to_owned(),
                    value: Some((*value).to_owned()),
                    ..EnvVar::default()
                }
            } else {
                EnvVar {
                    name: (*name).to_owned(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: (*value).to_owned(),
                            ..ObjectFieldSelector::default()
                        }),
                        ..EnvVarSource::default()
                    }),
                    ..EnvVar::default()
                }
            }
        })
        .collect();
    for (_, path) in &input.env {
        let _ = downward::metadata_key(path);
    }
    let container = Container {
        name: "nginx".into(),
        env: Some(env),
        ..Container::default()
    };
    let _ = daemon::env_from_metadata(&container);
    let running: BTreeMap<String, String> = input
        .runtime_env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let _ = daemon::stale_metadata_env(&container, &running, &pod.metadata);
    if let Some(spec) = pod.spec.as_mut() {
        if let Some(c) = spec.containers.first_mut() {
            c.env = container.env.clone();
        }
    }

    // The planner reads the pod as the watch caches it.
    if let Ok(cached) = CachedPod::from_pod(pod) {
        let facts = PodFacts::from_pod(&cached, &Default::default());
        let _ = facts.lifecycle_since();
        let _ = facts.is_available(10, now());
    }

    // Quantities, as the controller compares them and the daemon converts them.
    for q in &input.quantities {
        let _ = quantity::value(q);
        let _ = quantity::millis(q);
        let _ = quantity::units(q);
        let _ = quantity::is_positive(&Quantity((*q).to_owned()));
        let _ = resize::parse_quantity(q, true);
        let _ = resize::parse_quantity(q, false);
    }
    if let [a, b, ..] = input.quantities.as_slice() {
        let _ = quantity::cmp(&Quantity((*a).to_owned()), &Quantity((*b).to_owned()));
    }

    plan_and_render(&inputs);
});
