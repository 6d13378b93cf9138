//! End-to-end, in-place updates of pods with several containers, on the bed's real kubelet:
//!
//! - container launch priority (`apps.kruise.io/container-launch-priority: Ordered`): both
//!   images change, the first container is updated first and the second only once the
//!   first runs its new image and is Ready (two batches in `containerBatchesRecord`);
//! - env from metadata: a template label that one container's env reads changes; the
//!   node daemon restarts that container only, the pod keeps its UID;
//! - with `CloneSetEventHandlerOptimization` (pod updates that matter only trigger a
//!   reconcile) an in-place rollout and a scale-down still finish.
//!
//! ```text
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-controller --test e2e_inplace_containers -- --ignored --test-threads=1
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod e2e_support;

use std::time::Duration;

use e2e_support::*;
use serde_json::{Value, json};

const ROLLOUT: Duration = Duration::from_secs(150);

/// A one-pod CloneSet with containers `first` (:8080) and `second` (:8081), both on
/// `image`, with extra template `annotations`/`labels` (YAML flow maps) and `first`'s env.
fn two_container_cloneset(name: &str, image: &str, meta: &str, first_env: &str) -> String {
    format!(
        r#"apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata:
  name: {name}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      {meta}
    spec:
      nodeSelector:
        inplace.testbed/real: "true"
      terminationGracePeriodSeconds: 2
      containers:
      - name: first
        image: {image}
        env: [{{name: PORT, value: "8080"}}{first_env}]
        readinessProbe:
          httpGet: {{path: /version, port: 8080}}
          periodSeconds: 1
      - name: second
        image: {image}
        env: [{{name: PORT, value: "8081"}}]
        readinessProbe:
          httpGet: {{path: /version, port: 8081}}
          periodSeconds: 1
  updateStrategy:
    type: InPlaceIfPossible
"#
    )
}

fn the_pod(ns: &Namespace) -> TestResult<Value> {
    let pods = ns.pods()?;
    let mut live = pods.into_values().filter(|p| !pod_terminating(p));
    let pod = live.next().ok_or("no pod")?;
    assert!(live.next().is_none(), "one pod expected");
    Ok(pod)
}

fn restarts_of(pod: &Value, container: &str) -> i64 {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == container)
        .and_then(|c| c["restartCount"].as_i64())
        .unwrap_or(-1)
}

fn in_place_state(pod: &Value) -> Value {
    pod["metadata"]["annotations"]["apps.kruise.io/inplace-update-state"]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn launch_priority_updates_containers_in_batches() -> TestResult {
    let ns = Namespace::create("batches")?;
    let ctl = ControllerProcess::start(&ns.name)?;
    let name = "prio";
    let meta = "labels: {app: prio}\n      annotations: {apps.kruise.io/container-launch-priority: Ordered}";
    ns.apply(&two_container_cloneset(name, &image("v1"), meta, ""))?;
    wait_rolled_out(&ns, name, 1, ROLLOUT)?;
    let before = the_pod(&ns)?;

    // Both containers change image at once.
    let v2 = image("v2");
    ns.set_images(name, &[(0, &v2), (1, &v2)])?;
    wait_rolled_out(&ns, name, 1, ROLLOUT).map_err(|e| format!("{e}\n{}", ctl.log_text()))?;
    let after = the_pod(&ns)?;
    assert_eq!(
        after["metadata"]["uid"], before["metadata"]["uid"],
        "updated in place"
    );
    for c in ["first", "second"] {
        assert_eq!(restarts_of(&after, c), 1, "{c} restarted once");
    }
    let state = in_place_state(&after);
    let batches = state["containerBatchesRecord"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let containers: Vec<&Value> = batches.iter().map(|b| &b["containers"]).collect();
    assert_eq!(
        containers,
        [&json!(["first"]), &json!(["second"])],
        "two batches, the first container first: {state}"
    );
    assert!(
        batches[0]["timestamp"].as_str() <= batches[1]["timestamp"].as_str(),
        "batches in order: {state}"
    );
    assert!(
        state.get("nextContainerImages").is_none(),
        "nothing left: {state}"
    );
    // The second batch started only after the first container was Ready again: its new
    // container started before the second container's new one.
    let started = |c: &str| -> String {
        after["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"] == c)
            .and_then(|s| s["state"]["running"]["startedAt"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        started("first") <= started("second"),
        "first restarted before second: {} vs {}",
        started("first"),
        started("second")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn env_from_metadata_restarts_only_the_container_that_reads_it() -> TestResult {
    let ns = Namespace::create("envmeta")?;
    let _daemon = Daemon::start()?;
    let ctl = ControllerProcess::start(&ns.name)?;
    let name = "envmeta";
    let meta = "labels: {app: envmeta, tier: a}";
    let env = ", {name: TIER, valueFrom: {fieldRef: {fieldPath: \"metadata.labels['tier']\"}}}";
    ns.apply(&two_container_cloneset(name, &image("v1"), meta, env))?;
    wait_rolled_out(&ns, name, 1, ROLLOUT)?;
    let before = the_pod(&ns)?;

    ns.patch_cloneset(
        name,
        &json!({"spec": {"template": {"metadata": {"labels": {"tier": "b"}}}}}),
    )?;
    wait_rolled_out(&ns, name, 1, ROLLOUT).map_err(|e| format!("{e}\n{}", ctl.log_text()))?;
    let mut after = Value::Null;
    wait_for("first restarted by the daemon", ROLLOUT, || {
        after = the_pod(&ns)?;
        Ok(restarts_of(&after, "first") == 1)
    })
    .map_err(|e| format!("{e}; pod: {}", after["status"]))?;
    assert_eq!(
        after["metadata"]["uid"], before["metadata"]["uid"],
        "updated in place"
    );
    assert_eq!(label(&after, "tier"), Some("b"));
    assert_eq!(restarts_of(&after, "second"), 0, "second does not read it");
    let state = in_place_state(&after);
    assert_eq!(state["updateEnvFromMetadata"], json!(true), "{state}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn event_handler_optimization_still_rolls_out_and_scales() -> TestResult {
    let ns = Namespace::create("evopt")?;
    let ctl = ControllerProcess::start_with(
        &ns.name,
        &["--feature-gates", "CloneSetEventHandlerOptimization=true"],
    )?;
    let name = "evopt";
    ns.apply(&sample_cloneset(name, 3, &image("v1"), "InPlaceIfPossible"))?;
    wait_rolled_out(&ns, name, 3, ROLLOUT)?;
    let before: Vec<String> = ns
        .pods()?
        .values()
        .map(|p| p["metadata"]["uid"].as_str().unwrap_or_default().to_owned())
        .collect();
    ns.set_image(name, &image("v2"))?;
    wait_rolled_out(&ns, name, 3, ROLLOUT).map_err(|e| format!("{e}\n{}", ctl.log_text()))?;
    let pods = ns.pods()?;
    for pod in pods.values() {
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        assert!(before.iter().any(|b| b == uid), "pod kept its UID");
        assert_eq!(restart_count(pod), 1);
        assert_eq!(container_image(pod), image("v2"));
    }
    // A scale-down is finished only when the deleted pod's last event is seen.
    ns.patch_cloneset(name, &json!({"spec": {"replicas": 2}}))?;
    wait_for("2 pods left", ROLLOUT, || {
        let live = ns.pods()?.values().filter(|p| !pod_terminating(p)).count();
        Ok(live == 2 && status_i64(&ns.cloneset(name)?, "replicas") == 2)
    })
    .map_err(|e| format!("{e}\n{}", ctl.log_text()))?;
    Ok(())
}
