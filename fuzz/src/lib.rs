//! What the fuzz targets share: splitting one input into several texts, the fixtures the
//! targets put fuzzed values into, and the planner run over a CloneSet and its pods.
//!
//! The property of every target: no panic. An error (or a plan that reports a problem) is
//! the right answer to bad input.

use std::sync::OnceLock;

use inplace_controller::cli::{self, Format, Inputs, Settings, input::Source};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

/// Separates the texts of one input (a CloneSet, then its pods, ...): a byte no manifest
/// or JSON text carries. The seed corpora are written with it (`tests/fuzz/run`).
pub const SEPARATOR: u8 = 0;

/// The first `n` texts of `data`, split at [`SEPARATOR`]; missing ones are empty.
pub fn texts(data: &[u8], n: usize) -> Vec<String> {
    let mut out: Vec<String> = data
        .splitn(n, |b| *b == SEPARATOR)
        .map(|t| String::from_utf8_lossy(t).into_owned())
        .collect();
    out.resize(n, String::new());
    out
}

/// The planner's clock in every target.
pub fn now() -> Timestamp {
    Timestamp::from_second(1_772_366_400).unwrap_or(Timestamp::UNIX_EPOCH) // 2026-03-01T12:00Z
}

const CLONESET: &str = include_str!("../../controller/tests/fixtures/plan/partition-cloneset.yaml");
const PODS: &str = include_str!("../../controller/tests/fixtures/plan/partition-pods.yaml");
const REVISIONS: &str =
    include_str!("../../controller/tests/fixtures/plan/partition-revisions.yaml");

/// The docs' partition example (an in-place update in progress), loaded once: the
/// targets put fuzzed metadata on its pods and plan it again.
pub fn partition_fixture() -> Option<&'static Inputs> {
    static LOADED: OnceLock<Option<Inputs>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let s = |name, text| Source { name, text };
            cli::load(
                s("cloneset.yaml", CLONESET),
                Some(s("pods.yaml", PODS)),
                Some(s("revisions.yaml", REVISIONS)),
                None,
            )
            .ok()
        })
        .as_ref()
}

/// Plans `inputs` at [`now`] and renders the plan both ways (an error is fine).
pub fn plan_and_render(inputs: &Inputs) {
    if let Ok(report) = cli::compute(inputs, &Settings::default(), now(), "cloneset.yaml") {
        let json = cli::render(&report, inputs, Format::Json);
        assert!(
            serde_json::from_str::<serde_json::Value>(&json).is_ok(),
            "-o json is not JSON: {json}"
        );
        let _ = cli::render(&report, inputs, Format::Table);
    }
}

/// The partition fixture with `edit` applied to its first pod, planned.
pub fn plan_with_first_pod(edit: impl FnOnce(&mut Pod)) {
    let Some(fixture) = partition_fixture() else {
        panic!("the partition fixture does not load");
    };
    let mut inputs = fixture.clone();
    if let Some(pod) = inputs.pods.first_mut() {
        edit(pod);
    }
    plan_and_render(&inputs);
}

/// A Ready node named `name` (Ready for a day at [`now`]).
pub fn ready_node(name: &str) -> k8s_openapi::api::core::v1::Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {"pool": "a"}},
        "status": {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-02-28T12:00:00Z"}
        ]}
    }))
    .unwrap_or_default()
}

/// An object of type `T` from JSON, as the API server sends it (and kube decodes it).
pub fn object<T: serde::de::DeserializeOwned>(text: &str) -> Option<T> {
    serde_json::from_str(text).ok()
}
