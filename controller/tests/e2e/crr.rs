//! End-to-end, ContainerRecreateRequests on the bed's real kubelet, written as the
//! OpenKruise docs show them (pod name and container names only; no webhook fills them
//! in here, the controller does):
//!
//! - two requests for one pod of a CloneSet: the first (containers `first` and `third`)
//!   runs while the second waits Pending; exactly the named containers restart (restart
//!   count +1, the others unchanged, same pod UID); the second (`second`, with
//!   `unreadyGracePeriodSeconds`) makes the pod not-ready through `KruisePodReady` before
//!   its container restarts, and readiness comes back once it is Completed;
//! - without a node daemon, a request past its `activeDeadlineSeconds` is completed by
//!   the controller (its long `unreadyGracePeriodSeconds` would hold back a daemon, were
//!   one running for a parallel test), the pod's readiness is given back, and the request
//!   is deleted after `ttlSecondsAfterFinished`; a request naming a container the pod
//!   lacks is refused (Completed, Warning event).
//!
//! ```text
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-controller --test e2e -- --ignored --test-threads=1 crr::
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support as e2e_support;

use std::collections::BTreeMap;
use std::time::Duration;

use e2e_support::*;
use serde_json::Value;

const ROLLOUT: Duration = Duration::from_secs(150);
const RECREATE: Duration = Duration::from_secs(90);

/// A one-pod CloneSet with containers `first`, `second`, `third` on ports 8080–8082.
fn three_containers(name: &str) -> String {
    let image = image("v1");
    let container = |c: &str, port: u16| {
        format!(
            r#"      - name: {c}
        image: {image}
        env: [{{name: PORT, value: "{port}"}}]
        readinessProbe:
          httpGet: {{path: /version, port: {port}}}
          periodSeconds: 1
"#
        )
    };
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
      labels:
        app: {name}
    spec:
      nodeSelector:
        inplace.testbed/real: "true"
      terminationGracePeriodSeconds: 2
      containers:
{}{}{}  updateStrategy:
    type: InPlaceIfPossible
"#,
        container("first", 8080),
        container("second", 8081),
        container("third", 8082)
    )
}

/// A request in the docs' shape, with only the pod and the containers, plus `extra`
/// lines under `spec` (YAML, two-space indented).
fn request(name: &str, pod: &str, containers: &[&str], extra: &str) -> String {
    let list: String = containers
        .iter()
        .map(|c| format!("  - name: {c}\n"))
        .collect();
    format!(
        "apiVersion: apps.kruise.io/v1alpha1\nkind: ContainerRecreateRequest\nmetadata:\n  name: {name}\nspec:\n  podName: {pod}\n  containers:\n{list}{extra}"
    )
}

fn the_pod(ns: &Namespace) -> TestResult<Value> {
    let pods = ns.pods()?;
    let live: Vec<&Value> = pods.values().filter(|p| !pod_terminating(p)).collect();
    match live.as_slice() {
        [p] => Ok((*p).clone()),
        other => Err(format!("expected one pod, found {}", other.len()).into()),
    }
}

fn restarts(pod: &Value) -> BTreeMap<String, i64> {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_owned(),
                c["restartCount"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

fn crr(ns: &Namespace, name: &str) -> TestResult<Value> {
    ns.json(&["get", "containerrecreaterequest", name])
}

fn phase(c: &Value) -> String {
    c["status"]["phase"].as_str().unwrap_or_default().to_owned()
}

fn container_phases(c: &Value) -> BTreeMap<String, String> {
    c["status"]["containerRecreateStates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or_default().to_owned(),
                s["phase"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn wait_completed(ns: &Namespace, name: &str, ctl: &Controller) -> TestResult<Value> {
    let mut last = Value::Null;
    wait_for(&format!("{name} Completed"), RECREATE, || {
        last = crr(ns, name)?;
        Ok(phase(&last) == "Completed")
    })
    .map_err(|e| format!("{e}; last: {last}\n{}", ctl.log_excerpt()))?;
    Ok(last)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn requests_as_the_docs_write_them_restart_exactly_the_named_containers() -> TestResult {
    let ns = Namespace::create("crr")?;
    let _daemon = Daemon::start()?;
    let ctl = Controller::start(&ns.name)?;
    let name = "crr";
    ns.apply(&three_containers(name))?;
    wait_rolled_out(&ns, name, 1, ROLLOUT)?;
    let before = the_pod(&ns)?;
    let pod = before["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let uid = before["metadata"]["uid"].clone();
    let counts = restarts(&before);
    assert_eq!(counts.len(), 3, "{counts:?}");

    // Both at once: crr-1 runs first (same creation second, then by name).
    let first = request("crr-1", &pod, &["first", "third"], "");
    let second = request(
        "crr-2",
        &pod,
        &["second"],
        "  strategy:\n    unreadyGracePeriodSeconds: 2\n",
    );
    ns.apply(&format!("{first}---\n{second}"))?;

    // Filled in from the pod, as OpenKruise's webhook does.
    let mut filled = Value::Null;
    wait_for("crr-1 filled in", Duration::from_secs(20), || {
        filled = crr(&ns, "crr-1")?;
        Ok(!filled["spec"]["containers"][0]["statusContext"].is_null())
    })
    .map_err(|e| format!("{e}; {filled}\n{}", ctl.log_excerpt()))?;
    assert_eq!(label(&filled, "crr.apps.kruise.io/pod-uid"), uid.as_str());
    assert_eq!(
        label(&filled, "crr.apps.kruise.io/node-name"),
        before["spec"]["nodeName"].as_str()
    );
    assert_eq!(
        label(&filled, "crr.apps.kruise.io/pod-name"),
        Some(pod.as_str())
    );
    let status_by_name = |n: &str| {
        before["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == n)
            .cloned()
            .unwrap_or_default()
    };
    for c in filled["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let n = c["name"].as_str().unwrap_or_default();
        assert_eq!(
            c["statusContext"]["containerID"],
            status_by_name(n)["containerID"],
            "{n}"
        );
        assert_eq!(
            c["statusContext"]["restartCount"],
            status_by_name(n)["restartCount"],
            "{n}"
        );
        assert!(c["preStop"].is_null(), "preStop is not copied: {c}");
    }

    // crr-2 waits for crr-1.
    let mut queued = Value::Null;
    wait_for(
        "crr-2 Pending behind crr-1",
        Duration::from_secs(20),
        || {
            queued = crr(&ns, "crr-2")?;
            Ok(phase(&queued) == "Pending"
                && queued["status"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("waiting for ContainerRecreateRequest crr-1"))
        },
    )
    .map_err(|e| format!("{e}; {queued}"))?;
    assert_eq!(
        label(&queued, "crr.apps.kruise.io/active"),
        None,
        "only one active request per pod: {queued}"
    );

    let done = wait_completed(&ns, "crr-1", &ctl)?;
    assert_eq!(done["status"]["message"].as_str().unwrap_or_default(), "");
    assert_eq!(
        container_phases(&done),
        BTreeMap::from([
            ("first".to_owned(), "Succeeded".to_owned()),
            ("third".to_owned(), "Succeeded".to_owned()),
        ])
    );
    // Succeeded once the snapshot (from the pod status) shows the new instances ready.
    let after = the_pod(&ns)?;
    assert_eq!(after["metadata"]["uid"], uid, "same pod");
    let now = restarts(&after);
    assert_eq!(now["first"], counts["first"] + 1, "{now:?}");
    assert_eq!(now["third"], counts["third"] + 1, "{now:?}");
    assert_eq!(now["second"], counts["second"], "not named: {now:?}");
    // The active label goes with completion.
    wait_for("crr-1 inactive", Duration::from_secs(20), || {
        Ok(label(&crr(&ns, "crr-1")?, "crr.apps.kruise.io/active").is_none())
    })?;

    // crr-2 runs next: the pod is made not-ready first.
    let mut seen = None;
    wait_for("KruisePodReady False for crr-2", RECREATE, || {
        let p = the_pod(&ns)?;
        seen = kruise_pod_ready(&p);
        Ok(seen
            .as_ref()
            .is_some_and(|(s, m)| s == "False" && m.contains(&format!("{}/crr-2", ns.name)))
            && restarts(&p)["second"] == counts["second"])
    })
    .map_err(|e| format!("{e}; last {seen:?}\n{}", ctl.log_excerpt()))?;
    let running = crr(&ns, "crr-2")?;
    assert!(
        running["metadata"]["annotations"]["crr.apps.kruise.io/unready-acquired"].is_string(),
        "{running}"
    );
    let done = wait_completed(&ns, "crr-2", &ctl)?;
    assert_eq!(
        container_phases(&done),
        BTreeMap::from([("second".to_owned(), "Succeeded".to_owned())])
    );
    // Readiness released, finalizer removed, pod Ready again; all three restarted once.
    let mut last = Value::Null;
    wait_for("readiness back", Duration::from_secs(30), || {
        last = the_pod(&ns)?;
        let c = crr(&ns, "crr-2")?;
        Ok(kruise_pod_ready(&last).is_some_and(|(s, _)| s == "True")
            && pod_ready(&last)
            && c["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty()))
    })
    .map_err(|e| format!("{e}; {}", last["status"]))?;
    assert_eq!(last["metadata"]["uid"], uid, "same pod");
    let now = restarts(&last);
    for c in ["first", "second", "third"] {
        assert_eq!(now[c], counts[c] + 1, "{c}: {now:?}");
    }
    Ok(())
}

/// Host process: needs no daemon serving the real node, where the installed DaemonSet runs
/// one.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn host_without_a_daemon_the_deadline_completes_and_the_ttl_deletes() -> TestResult {
    let ns = Namespace::create("crrdl")?;
    let ctl = Controller::host(&ns.name, &[])?;
    let name = "crrdl";
    ns.apply(&sample_cloneset(name, 1, &image("v1"), "InPlaceIfPossible"))?;
    wait_rolled_out(&ns, name, 1, ROLLOUT)?;
    let before = the_pod(&ns)?;
    let pod = before["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ns.apply(&request(
        "late",
        &pod,
        &["app"],
        // the long unready grace holds a daemon back, should one run on the node
        // (tests of this binary may run in parallel)
        "  strategy:\n    unreadyGracePeriodSeconds: 60\n  activeDeadlineSeconds: 5\n  ttlSecondsAfterFinished: 5\n",
    ))?;
    let done = wait_completed(&ns, "late", &ctl)?;
    assert_eq!(
        done["status"]["message"].as_str().unwrap_or_default(),
        "recreating has exceeded the activeDeadlineSeconds"
    );
    assert_eq!(
        container_phases(&done),
        BTreeMap::from([("app".to_owned(), "Failed".to_owned())])
    );
    assert_eq!(
        restarts(&the_pod(&ns)?),
        restarts(&before),
        "nothing restarted"
    );
    // the pod was made not-ready meanwhile (CloneSet pods have the KruisePodReady gate)
    // and is released with the completion; the finalizer goes, so the TTL can delete
    wait_for("readiness back", Duration::from_secs(30), || {
        let p = the_pod(&ns)?;
        Ok(kruise_pod_ready(&p).is_some_and(|(s, _)| s == "True") && pod_ready(&p))
    })?;
    wait_for("deleted after the TTL", Duration::from_secs(30), || {
        Ok(ns
            .kubectl(&[
                "get",
                "containerrecreaterequest",
                "late",
                "--ignore-not-found",
                "-o",
                "name",
            ])?
            .trim()
            .is_empty())
    })?;

    // A request naming a container the pod lacks is refused with an event.
    ns.apply(&request("wrong", &pod, &["nope"], ""))?;
    let done = wait_completed(&ns, "wrong", &ctl)?;
    let msg = done["status"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("container nope not found"), "{msg}");
    wait_for("Warning event", Duration::from_secs(20), || {
        Ok(ns.events()?.iter().any(|e| {
            e["type"] == "Warning"
                && e["reason"] == "FailedValidation"
                && e.to_string().contains("container nope not found")
        }))
    })?;
    Ok(())
}
