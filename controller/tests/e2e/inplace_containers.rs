//! End-to-end, in-place updates of pods with several containers, on the bed's real kubelet:
//!
//! - container launch priority (`apps.kruise.io/container-launch-priority: Ordered`): both
//!   images change, the first container is updated first and the second only once the
//!   first runs its new image and is Ready (two batches in `containerBatchesRecord`);
//! - env from metadata: a template label that one container's env reads changes; the
//!   node daemon restarts that container only, the pod keeps its UID;
//! - with `CloneSetEventHandlerOptimization` (pod updates that matter only trigger a
//!   reconcile) an in-place rollout and a scale-down still finish;
//! - updates that must finish, from OpenKruise's own edge cases: a new tag of the same
//!   image (same image ID) with and without the node daemon, in a partition rollout that
//!   must reach `ProgressPartitionAvailable`; an image change together with an
//!   env-from-metadata change; a pod that already carries the new label value; a
//!   `KRUISE_CONTAINER_PRIORITY` container updated first, and a failed first batch that
//!   holds the rest back and is reported.
//!
//! ```text
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-controller --test e2e -- --ignored --test-threads=1 inplace_containers::
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support as e2e_support;

use std::time::Duration;

use e2e_support::*;
use serde_json::{Value, json};

const ROLLOUT: Duration = Duration::from_secs(150);

/// A one-pod CloneSet with containers `first` (:8080) and `second` (:8081), both on
/// `image`, with extra template `annotations`/`labels` (YAML flow maps) and `first`'s env.
fn two_container_cloneset(name: &str, image: &str, meta: &str, first_env: &str) -> String {
    two_containers_with_env(name, image, meta, first_env, "")
}

/// [`two_container_cloneset`] with extra env entries for `second` too.
fn two_containers_with_env(
    name: &str,
    image: &str,
    meta: &str,
    first_env: &str,
    second_env: &str,
) -> String {
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
        env: [{{name: PORT, value: "8081"}}{second_env}]
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
    assert_revision_label_form(&pod)?;
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

/// An env entry for `first` that reads the pod label `tier` (as YAML flow, after PORT).
const TIER_ENV: &str =
    ", {name: TIER, valueFrom: {fieldRef: {fieldPath: \"metadata.labels['tier']\"}}}";

/// A namespace with the node daemon and a controller, and a rolled-out one-pod CloneSet
/// `name` whose container `first` reads the label `tier` (= `a`) through its env, with
/// `annotations` (a YAML flow map) on its template; returns them and the pod.
fn env_reader(name: &str, annotations: &str) -> TestResult<(Namespace, Daemon, Controller, Value)> {
    let ns = Namespace::create(name)?;
    let daemon = Daemon::start()?;
    let ctl = Controller::start(&ns.name)?;
    let meta = format!("labels: {{app: {name}, tier: a}}\n      annotations: {annotations}");
    ns.apply(&two_container_cloneset(name, &image("v1"), &meta, TIER_ENV))?;
    wait_rolled_out(&ns, name, 1, ROLLOUT)?;
    let pod = the_pod(&ns)?;
    Ok((ns, daemon, ctl, pod))
}

/// When container `c`'s current instance started (RFC 3339; compares as text).
fn started_at(pod: &Value, c: &str) -> String {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == c)
        .and_then(|s| s["state"]["running"]["startedAt"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The containers of each batch in `containerBatchesRecord`, in order.
fn batch_containers(state: &Value) -> Vec<Value> {
    state["containerBatchesRecord"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| b["containers"].clone())
        .collect()
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
    let ctl = Controller::start(&ns.name)?;
    let name = "prio";
    let meta = "labels: {app: prio}\n      annotations: {apps.kruise.io/container-launch-priority: Ordered}";
    ns.apply(&two_container_cloneset(name, &image("v1"), meta, ""))?;
    wait_rolled_out(&ns, name, 1, ROLLOUT)?;
    let before = the_pod(&ns)?;

    // Both containers change image at once.
    let v2 = image("v2");
    ns.set_images(name, &[(0, &v2), (1, &v2)])?;
    wait_rolled_out(&ns, name, 1, ROLLOUT).map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
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
    let started = |c: &str| started_at(&after, c);
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
    let name = "envmeta";
    let (ns, _daemon, ctl, before) = env_reader(name, "{}")?;

    ns.patch_cloneset(
        name,
        &json!({"spec": {"template": {"metadata": {"labels": {"tier": "b"}}}}}),
    )?;
    wait_rolled_out(&ns, name, 1, ROLLOUT).map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
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

/// Host process: runs with the feature gate CloneSetEventHandlerOptimization, which deploy/
/// does not set.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn host_event_handler_optimization_still_rolls_out_and_scales() -> TestResult {
    let ns = Namespace::create("evopt")?;
    let ctl = Controller::host(
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
    wait_rolled_out(&ns, name, 3, ROLLOUT).map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
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
    .map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    Ok(())
}

/// `image` with its tag replaced by `tag`.
fn with_tag(image: &str, tag: &str) -> String {
    let repo = image.rsplit_once(':').map_or(image, |(repo, _)| repo);
    format!("{repo}:{tag}")
}

/// A tag of `image` that no node has seen (so the kubelet pulls it), pushed to the bed's
/// registry: the same manifest, so the same image ID.
fn retag(image: &str) -> TestResult<String> {
    let tag = format!("retag-{:08x}", rand::random::<u32>());
    let target = with_tag(image, &tag);
    copy_image(image, &target)?;
    Ok(target)
}

fn condition<'a>(obj: &'a Value, ty: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
}

/// Every pod kept its UID, restarted its one container once, runs `image` and is through
/// its in-place update (`InPlaceUpdateReady` True, lifecycle Normal).
fn assert_updated_in_place(ns: &Namespace, uids: &[String], image: &str) -> TestResult {
    for pod in ns.pods()?.values().filter(|p| !pod_terminating(p)) {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        assert!(uids.iter().any(|u| u == uid), "{name} kept its UID");
        assert_eq!(restart_count(pod), 1, "{name} restarted once");
        assert_eq!(container_image(pod), image, "{name} spec image");
        assert_eq!(
            condition(pod, "InPlaceUpdateReady").map(|c| c["status"].clone()),
            Some(json!("True")),
            "{name}: {}",
            pod["status"]
        );
        assert_eq!(label(pod, "lifecycle.apps.kruise.io/state"), Some("Normal"));
    }
    Ok(())
}

fn uids(ns: &Namespace) -> TestResult<Vec<String>> {
    Ok(ns
        .pods()?
        .values()
        .filter_map(|p| p["metadata"]["uid"].as_str().map(str::to_owned))
        .collect())
}

/// A new tag of the running image (same image ID) restarts the container in place and
/// the update completes: judged by the new container, not by the image ID (unchanged) or
/// by the image name containerd reports (the image's first tag, possibly the old one).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn a_new_tag_of_the_same_image_completes_in_place() -> TestResult {
    let ns = Namespace::create("retag")?;
    let _daemon = Daemon::start()?;
    let ctl = Controller::start(&ns.name)?;
    let name = "retag";
    ns.apply(&sample_cloneset(name, 2, &image("v1"), "InPlaceIfPossible"))?;
    wait_rolled_out(&ns, name, 2, ROLLOUT)?;
    let before = uids(&ns)?;
    let same = retag(&image("v1"))?;
    ns.set_image(name, &same)?;
    wait_rolled_out(&ns, name, 2, ROLLOUT).map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    assert_updated_in_place(&ns, &before, &same)?;
    // The image ID did not change: the update really was a retag.
    for pod in ns.pods()?.values() {
        let state = in_place_state(pod);
        let recorded = state["lastContainerStatuses"]["app"]["imageID"].clone();
        assert_eq!(
            pod["status"]["containerStatuses"][0]["imageID"], recorded,
            "same image ID: {state}"
        );
    }
    Ok(())
}

/// A partition rollout of a retag, with no node daemon started (the controller judges
/// completion from the pod status alone), reaches `ProgressPartitionAvailable`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn a_partition_rollout_of_a_retag_reaches_partition_available() -> TestResult {
    let ns = Namespace::create("retagpart")?;
    let ctl = Controller::start(&ns.name)?;
    let name = "retagpart";
    let manifest = sample_cloneset(name, 3, &image("v1"), "InPlaceIfPossible").replace(
        "  updateStrategy:\n",
        "  progressDeadlineSeconds: 300\n  updateStrategy:\n    partition: 1\n",
    );
    ns.apply(&manifest)?;
    wait_rolled_out(&ns, name, 3, ROLLOUT)?;
    let same = retag(&image("v1"))?;
    ns.set_image(name, &same)?;
    let mut last = Value::Null;
    wait_for(
        "2 of 3 updated and ProgressPartitionAvailable",
        ROLLOUT,
        || {
            last = ns.cloneset(name)?;
            let progressing = condition(&last, "Progressing");
            Ok(status_i64(&last, "updatedReadyReplicas") == 2
                && status_i64(&last, "readyReplicas") == 3
                && progressing.is_some_and(|c| {
                    c["status"] == "True" && c["reason"] == "ProgressPartitionAvailable"
                }))
        },
    )
    .map_err(|e| format!("{e}; status {}\n{}", last["status"], ctl.log_excerpt()))?;
    let updated: Vec<Value> = ns
        .pods()?
        .into_values()
        .filter(|p| container_image(p) == same)
        .collect();
    assert_eq!(updated.len(), 2);
    for pod in &updated {
        assert_eq!(restart_count(pod), 1);
        assert!(pod_ready(pod));
    }
    Ok(())
}

/// One template change of both an image and a label that the same container's env reads:
/// the container restarts once (the kubelet's restart for the image already reads the new
/// label) and the update completes.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn an_image_change_with_an_env_from_metadata_change_completes() -> TestResult {
    let name = "imgenv";
    let (ns, _daemon, ctl, before) = env_reader(name, "{}")?;
    let patch = json!([
        {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": image("v2")},
        {"op": "replace", "path": "/spec/template/metadata/labels/tier", "value": "b"},
    ]);
    ns.json_patch_cloneset(name, &patch)?;
    wait_rolled_out(&ns, name, 1, ROLLOUT).map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    let after = the_pod(&ns)?;
    let seen = format!(
        "pod metadata: {}\npod status: {}",
        after["metadata"], after["status"]
    );
    assert_eq!(
        after["metadata"]["uid"], before["metadata"]["uid"],
        "{seen}"
    );
    assert_eq!(label(&after, "tier"), Some("b"), "{seen}");
    assert_eq!(restarts_of(&after, "first"), 1, "{seen}");
    assert_eq!(restarts_of(&after, "second"), 0, "{seen}");
    let state = in_place_state(&after);
    assert_eq!(state["updateEnvFromMetadata"], json!(true), "{state}");
    assert_eq!(state["updateImages"], json!(true), "{state}");
    Ok(())
}

/// Someone labelled the pod with the new value by hand before the template changed: the
/// running container still has the old value in its env, so the daemon restarts it (the
/// decision reads the value the container runs with, not whether this update changed the
/// pod's label).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn a_pod_that_already_carries_the_new_value_still_restarts_the_reader() -> TestResult {
    let name = "premeta";
    let (ns, _daemon, ctl, before) = env_reader(name, "{}")?;
    let pod_name = before["metadata"]["name"].as_str().unwrap_or_default();
    ns.kubectl(&["label", "pod", pod_name, "tier=b", "--overwrite"])?;
    ns.patch_cloneset(
        name,
        &json!({"spec": {"template": {"metadata": {"labels": {"tier": "b"}}}}}),
    )?;
    let mut after = Value::Null;
    wait_for("first restarted and the update complete", ROLLOUT, || {
        after = the_pod(&ns)?;
        let cs = ns.cloneset(name)?;
        Ok(restarts_of(&after, "first") == 1
            && status_i64(&cs, "updatedReadyReplicas") == 1
            && cs["status"]["currentRevision"] == cs["status"]["updateRevision"])
    })
    .map_err(|e| format!("{e}; pod: {}\n{}", after["status"], ctl.log_excerpt()))?;
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    assert_eq!(restarts_of(&after, "second"), 0, "second does not read it");
    Ok(())
}

/// `KRUISE_CONTAINER_PRIORITY=10` on `second` and none on `first` (priority 0): `second`
/// is updated first, `first` only once `second` runs its new image and is Ready. Then a
/// bad image for `second`: the update fails in the first batch, `first` is never touched,
/// and the failure is reported on the pod (condition and event) and on the CloneSet.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn priority_env_orders_batches_and_a_failed_batch_holds_the_rest_back() -> TestResult {
    let ns = Namespace::create("prioenv")?;
    let ctl = Controller::start(&ns.name)?;
    let name = "prioenv";
    let meta = "labels: {app: prioenv}";
    let prio = ", {name: KRUISE_CONTAINER_PRIORITY, value: \"10\"}";
    ns.apply(&two_containers_with_env(name, &image("v1"), meta, "", prio))?;
    wait_rolled_out(&ns, name, 1, ROLLOUT)?;

    let v2 = image("v2");
    ns.set_images(name, &[(0, &v2), (1, &v2)])?;
    wait_rolled_out(&ns, name, 1, ROLLOUT).map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    let after = the_pod(&ns)?;
    let state = in_place_state(&after);
    let containers = batch_containers(&state);
    assert_eq!(
        containers,
        [json!(["second"]), json!(["first"])],
        "the prioritised container first: {state}"
    );
    for c in ["first", "second"] {
        assert_eq!(restarts_of(&after, c), 1, "{c} restarted once");
    }

    // A bad image in the first batch.
    let missing = with_tag(&image("v1"), "does-not-exist");
    let v3 = image("v3");
    ns.set_images(name, &[(0, &v3), (1, &missing)])?;
    let mut pod = Value::Null;
    wait_for("the failed batch reported on the pod", ROLLOUT, || {
        pod = the_pod(&ns)?;
        Ok(condition(&pod, "InPlaceUpdateReady")
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "InPlaceUpdateFailed"))
    })
    .map_err(|e| format!("{e}; pod: {}\n{}", pod["status"], ctl.log_excerpt()))?;
    let message = condition(&pod, "InPlaceUpdateReady")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("container second"), "{message}");
    let mut cs = Value::Null;
    wait_for("the failure on the CloneSet", ROLLOUT, || {
        cs = ns.cloneset(name)?;
        Ok(condition(&cs, "FailedUpdate")
            .is_some_and(|c| c["status"] == "True" && c["reason"] == "InPlaceUpdateFailed"))
    })
    .map_err(|e| format!("{e}; status: {}", cs["status"]))?;
    let pod_name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    wait_for("a Warning event on the pod", ROLLOUT, || {
        Ok(ns.events()?.iter().any(|e| {
            e["reason"] == "InPlaceUpdateFailed"
                && (e["involvedObject"]["name"] == pod_name.as_str()
                    || e["regarding"]["name"] == pod_name.as_str())
        }))
    })?;
    // `first` (the later batch) was never touched: still v2, not restarted again.
    let pod = the_pod(&ns)?;
    let first = &pod["spec"]["containers"][0];
    assert_eq!(first["name"], "first");
    assert_eq!(
        first["image"].as_str(),
        Some(v2.as_str()),
        "first untouched"
    );
    assert_eq!(restarts_of(&pod, "first"), 1, "first not restarted again");
    let state = in_place_state(&pod);
    assert_eq!(
        state["nextContainerImages"]["first"].as_str(),
        Some(v3.as_str()),
        "first waits in the state: {state}"
    );
    Ok(())
}

/// `Ordered` launch priority: `first` (highest) reads a label through its env, `second`
/// changes image. One template change of both: `first`'s batch changes only the label, so
/// the daemon restarts `first` and records it checked; only then does `second` go.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn an_env_only_batch_holds_the_next_batch_until_the_daemon_restarted_it() -> TestResult {
    let name = "envbatch";
    let (ns, _daemon, ctl, _) =
        env_reader(name, "{apps.kruise.io/container-launch-priority: Ordered}")?;
    let patch = json!([
        {"op": "replace", "path": "/spec/template/spec/containers/1/image", "value": image("v2")},
        {"op": "replace", "path": "/spec/template/metadata/labels/tier", "value": "b"},
    ]);
    ns.json_patch_cloneset(name, &patch)?;
    let mut after = Value::Null;
    wait_for(
        "both containers restarted and the update complete",
        ROLLOUT,
        || {
            after = the_pod(&ns)?;
            let cs = ns.cloneset(name)?;
            Ok(restarts_of(&after, "first") == 1
                && restarts_of(&after, "second") == 1
                && status_i64(&cs, "updatedReadyReplicas") == 1
                && cs["status"]["currentRevision"] == cs["status"]["updateRevision"])
        },
    )
    .map_err(|e| format!("{e}; pod: {}\n{}", after["status"], ctl.log_excerpt()))?;
    let state = in_place_state(&after);
    let containers = batch_containers(&state);
    assert_eq!(containers, [json!(["first"]), json!(["second"])], "{state}");
    let started = |c: &str| started_at(&after, c);
    assert!(
        started("first") <= started("second"),
        "first (restarted by the daemon) before second: {} vs {}",
        started("first"),
        started("second")
    );
    Ok(())
}
