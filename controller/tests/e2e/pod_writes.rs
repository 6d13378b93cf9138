//! End-to-end, on the bed's real kubelet with the node daemon: how many times the
//! controller and the daemon write a pod during an in-place image update with no
//! lifecycle hooks (issue 15: at most 3, where the reference makes 4 or more), counted
//! through a pod watch, and that the pod ends as it must (lifecycle Normal,
//! `InPlaceUpdateReady` True, Ready, the new image).
//!
//! ```text
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-controller --test e2e -- --ignored --test-threads=1 pod_writes::
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support as e2e_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2e_support::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;
use serde_json::Value;

const ROLLOUT: Duration = Duration::from_secs(120);

/// Who made a pod write, told from what it changed: metadata (labels, annotations,
/// finalizers), the spec, or the `InPlaceUpdateReady` condition are the controller's and
/// the daemon's; the rest of the status is the kubelet's (it writes nothing else).
#[derive(Debug, PartialEq, Eq)]
enum Writer {
    Ours(String),
    Kubelet,
}

fn condition<'a>(pod: &'a Value, kind: &str) -> Option<&'a Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// The writer of the change from `old` to `new`, with what changed.
fn writer(old: &Value, new: &Value) -> Writer {
    let mut changed = Vec::new();
    for field in ["labels", "annotations", "finalizers"] {
        if old["metadata"][field] != new["metadata"][field] {
            changed.push(format!("metadata.{field}"));
        }
    }
    if old["spec"] != new["spec"] {
        changed.push("spec".to_owned());
    }
    let iur =
        |p| condition(p, "InPlaceUpdateReady").map(|c| (c["status"].clone(), c["reason"].clone()));
    if iur(old) != iur(new) {
        changed.push(format!(
            "InPlaceUpdateReady={}",
            iur(new).map(|(s, _)| s).unwrap_or_default()
        ));
    }
    if changed.is_empty() {
        Writer::Kubelet
    } else {
        Writer::Ours(changed.join(", "))
    }
}

fn pod_json(pod: &Pod) -> Value {
    serde_json::to_value(pod).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn an_image_update_in_place_without_hooks_is_at_most_three_writes_by_controller_and_daemon()
-> TestResult {
    let ns = Namespace::create("writes")?;
    let _daemon = Daemon::start()?;
    let _ctl = Controller::start(&ns.name)?;
    ns.apply(&sample_cloneset(
        "web",
        1,
        &image("v1"),
        "InPlaceIfPossible",
    ))?;
    let before = wait_rolled_out(&ns, "web", 1, ROLLOUT)?;
    let pod = ns.pods()?.into_values().next().ok_or("no pod")?;
    let pod_name = name(&pod);
    let pod_uid = uid(&pod);
    let restarts_before = restart_count(&pod);
    // The container before the update, by its runtime id: the new one is any other id.
    // (Not by the image name in the status: the runtime reports one of the image's tags,
    // and another test's retag of the same image may be the one it reports.)
    let old_container_id = pod["status"]["containerStatuses"][0]["containerID"].clone();
    assert!(
        old_container_id.is_string(),
        "the pod's container has an id: {old_container_id}"
    );

    // Every version of the pod from here on, in order (a watch sends each write).
    let versions: Arc<Mutex<Vec<Value>>> = Arc::default();
    let api: Api<Pod> = Api::namespaced(client().await?, &ns.name);
    let seen = versions.clone();
    let watch = tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={pod_name}"));
        let mut events = watcher(api, config).boxed();
        while let Some(event) = events.next().await {
            let pods = match event {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => vec![p],
                _ => continue,
            };
            let mut seen = seen.lock().unwrap();
            for p in pods {
                let p = pod_json(&p);
                let last_rv = seen
                    .last()
                    .map(|l| l["metadata"]["resourceVersion"].clone());
                if last_rv.as_ref() != Some(&p["metadata"]["resourceVersion"]) {
                    seen.push(p);
                }
            }
        }
    });
    wait_for("the watch to list the pod", Duration::from_secs(10), || {
        Ok(!versions.lock().unwrap().is_empty())
    })?;

    ns.set_image("web", &image("v2"))?;
    let after = wait_rolled_out(&ns, "web", 1, ROLLOUT)?;
    assert_ne!(
        before["status"]["updateRevision"],
        after["status"]["updateRevision"]
    );
    // The end state a user sees, then a quiet moment for trailing writes to show.
    let done = |p: &Value| {
        label(p, "lifecycle.apps.kruise.io/state") == Some("Normal")
            && condition(p, "InPlaceUpdateReady").is_some_and(|c| c["status"] == "True")
            && pod_ready(p)
    };
    wait_for(
        "the pod Normal, InPlaceUpdateReady True and Ready",
        ROLLOUT,
        || Ok(versions.lock().unwrap().last().is_some_and(done)),
    )?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    watch.abort();

    let versions = versions.lock().unwrap().clone();
    let last = versions.last().ok_or("no pod version seen")?;
    assert_eq!(uid(last), pod_uid, "the same pod");
    assert_eq!(container_image(last), image("v2"));
    assert_eq!(restart_count(last), restarts_before + 1, "restarted once");
    assert!(
        done(last),
        "the pod ends Normal, InPlaceUpdateReady True, Ready"
    );

    let mut ours = Vec::new();
    let mut kubelet = 0;
    for pair in versions.windows(2) {
        match writer(&pair[0], &pair[1]) {
            Writer::Ours(what) => ours.push(what),
            Writer::Kubelet => kubelet += 1,
        }
    }
    // The daemon's completion records the container ids in the state; the controller's
    // does not: who completed the update (either may, whichever sees it first).
    let completed_by = if last["metadata"]["annotations"]["apps.kruise.io/inplace-update-state"]
        .as_str()
        .is_some_and(|s| s.contains("daemonContainerIDs"))
    {
        "the daemon"
    } else {
        "the controller"
    };
    eprintln!(
        "in-place image update of one pod: {} writes by the controller and the daemon ({}), {kubelet} by the kubelet; completed by {completed_by}",
        ours.len(),
        ours.join("; ")
    );
    // Traffic stops before the container restarts: the first of our writes is the
    // condition False, before the spec changes.
    assert!(
        ours.first()
            .is_some_and(|w| w.contains("InPlaceUpdateReady=\"False\"") && !w.contains("spec")),
        "InPlaceUpdateReady False first: {ours:?}"
    );
    assert!(
        ours.len() <= 3,
        "at most 3 writes, saw {}: {ours:?}",
        ours.len()
    );
    // The timeline, for a failure below: each version's writer, revision label,
    // conditions and container statuses.
    let timeline: Vec<String> = versions
        .iter()
        .map(|v| {
            let conditions: Vec<String> = v["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| format!("{}={}", c["type"], c["status"]))
                .collect();
            let containers: Vec<String> = v["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    format!(
                        "{} ready={} id={}",
                        c["image"], c["ready"], c["containerID"]
                    )
                })
                .collect();
            format!(
                "rv {} rev {:?} [{}] [{}]",
                v["metadata"]["resourceVersion"],
                label(v, "controller-revision-hash"),
                conditions.join(" "),
                containers.join("; ")
            )
        })
        .collect();
    let timeline = timeline.join("\n");
    // Readiness returns only after the new container is Ready: no version before the
    // new container reports ready has the pod Ready with InPlaceUpdateReady True. (The
    // kubelet computes Ready from its own copy of the pod, which may still hold the gate
    // True from before our first write: a kubelet status write can then say Ready while
    // the API's InPlaceUpdateReady is False, until its next sync. That is the kubelet's
    // stale view, not a write of ours: counted and shown, not failed.)
    let gate_true =
        |v: &Value| condition(v, "InPlaceUpdateReady").is_some_and(|c| c["status"] == "True");
    let mut stale_kubelet_ready = Vec::new();
    for v in &versions {
        let new_ready = v["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["containerID"] != old_container_id && c["ready"] == true);
        let updating =
            label(v, "controller-revision-hash") == after["status"]["updateRevision"].as_str();
        if updating && !new_ready && pod_ready(v) {
            assert!(
                !gate_true(v),
                "Ready with InPlaceUpdateReady True before the new container: {}\n{timeline}",
                v["metadata"]["resourceVersion"]
            );
            stale_kubelet_ready.push(v["metadata"]["resourceVersion"].clone());
        }
    }
    if !stale_kubelet_ready.is_empty() {
        eprintln!(
            "the kubelet wrote Ready with InPlaceUpdateReady False (its stale copy of the gate) at {stale_kubelet_ready:?}:\n{timeline}"
        );
    }
    Ok(())
}
