//! End-to-end, container launch priority at start-up (OpenKruise's pod webhook and
//! container-launch-priority controller, done by our controller): a new pod's containers
//! start one priority at a time, each only once the higher ones are Ready, through the
//! barrier env and the per-pod ConfigMap `<pod>-barrier`, which goes with the pod.
//!
//! ```text
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-controller --test e2e -- --ignored launch_priority::
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support as e2e_support;

use std::time::{Duration, Instant};

use e2e_support::*;
use serde_json::{Value, json};

const START: Duration = Duration::from_secs(150);

/// Seconds before `first` can be Ready (its readiness probe's initial delay).
const READY_DELAY: i64 = 8;

/// A one-pod CloneSet: `first` (:8080) with `KRUISE_CONTAINER_PRIORITY=10` and a
/// readiness probe that cannot pass before [`READY_DELAY`] seconds; `second` (:8081)
/// without a priority (0).
fn cloneset(name: &str, image: &str) -> String {
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
      labels: {{app: {name}}}
    spec:
      nodeSelector:
        inplace.testbed/real: "true"
      terminationGracePeriodSeconds: 2
      containers:
      - name: first
        image: {image}
        env: [{{name: PORT, value: "8080"}}, {{name: KRUISE_CONTAINER_PRIORITY, value: "10"}}]
        readinessProbe:
          httpGet: {{path: /version, port: 8080}}
          initialDelaySeconds: {READY_DELAY}
          periodSeconds: 1
      - name: second
        image: {image}
        env: [{{name: PORT, value: "8081"}}]
        readinessProbe:
          httpGet: {{path: /version, port: 8081}}
          periodSeconds: 1
"#
    )
}

fn status_of<'a>(pod: &'a Value, container: &str) -> &'a Value {
    pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == container))
        .unwrap_or(&Value::Null)
}

fn started_at(pod: &Value, container: &str) -> Option<i64> {
    let at = status_of(pod, container)["state"]["running"]["startedAt"].as_str()?;
    Some(chrono::DateTime::parse_from_rfc3339(at).ok()?.timestamp())
}

fn barrier_env(container: &Value) -> Option<&Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == "KRUISE_CONTAINER_BARRIER")
}

/// `second` (priority 0) starts only after `first` (priority 10) is Ready: never seen
/// running while `first` was not Ready, and started no earlier than `first`'s readiness
/// delay after `first`. The pod carries the barrier env, its ConfigMap holds both keys
/// with the pod as owner, the pod is marked completed, and the ConfigMap goes with the pod.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn the_lower_priority_container_starts_once_the_higher_one_is_ready() -> TestResult {
    let ns = Namespace::create("launchprio")?;
    let ctl = Controller::start(&ns.name)?;
    let cs_name = "launchprio";
    ns.apply(&cloneset(cs_name, &image("v1")))?;

    // Watch the pod until both containers are Ready, checking the order at every look.
    let deadline = Instant::now() + START;
    let mut pod = Value::Null;
    let mut held = 0; // looks at `second` waiting while `first` was not Ready
    loop {
        let live: Vec<Value> = ns
            .pods()?
            .into_values()
            .filter(|p| !pod_terminating(p))
            .collect();
        if let Some(p) = live.first() {
            pod = p.clone();
            let first_ready = status_of(&pod, "first")["ready"] == true;
            let second = status_of(&pod, "second");
            if !first_ready {
                assert!(
                    second["state"]["running"].is_null(),
                    "second runs while first is not Ready: {}",
                    pod["status"]
                );
                if !second["state"]["waiting"].is_null() {
                    held += 1;
                }
            }
            if first_ready && second["ready"] == true {
                break;
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "timed out waiting for both containers Ready; pod: {}\n{}",
                pod["status"],
                ctl.log_excerpt()
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(held > 0, "second was seen held back: {}", pod["status"]);
    let first_at = started_at(&pod, "first").ok_or("first has no startedAt")?;
    let second_at = started_at(&pod, "second").ok_or("second has no startedAt")?;
    assert!(
        second_at >= first_at + READY_DELAY,
        "second started at {second_at}, first at {first_at} (Ready no earlier than {READY_DELAY} s later)"
    );
    for c in ["first", "second"] {
        assert_eq!(
            status_of(&pod, c)["restartCount"],
            0,
            "{c} started once, not crashed into order"
        );
    }

    // The barrier as the reference's webhook and controller write it.
    let pod_name = name(&pod);
    let pod_uid = uid(&pod);
    let cm_name = format!("{pod_name}-barrier");
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let keys: Vec<(Value, Value)> = containers
        .iter()
        .map(|c| {
            let env = barrier_env(c).cloned().unwrap_or(Value::Null);
            (
                c["name"].clone(),
                env["valueFrom"]["configMapKeyRef"].clone(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            (json!("first"), json!({"name": cm_name, "key": "p_10"})),
            (json!("second"), json!({"name": cm_name, "key": "p_0"})),
        ]
    );
    let cm = ns.json(&["get", "configmap", &cm_name])?;
    assert_eq!(cm["data"], json!({"p_10": "true", "p_0": "true"}));
    assert_eq!(
        cm["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid}])
    );
    let mut marked = Value::Null;
    wait_for("the pod marked completed", Duration::from_secs(30), || {
        marked = ns.json(&["get", "pod", &pod_name])?;
        Ok(
            marked["metadata"]["annotations"]["apps.kruise.io/container-launch-priority-completed"]
                == "true",
        )
    })
    .map_err(|e| format!("{e}; annotations: {}", marked["metadata"]["annotations"]))?;

    // The ConfigMap goes with its pod.
    ns.patch_cloneset(cs_name, &json!({"spec": {"replicas": 0}}))?;
    wait_for("the pod and its barrier gone", START, || {
        let pods = ns.pods()?;
        let cms = ns.json(&["get", "configmaps"])?;
        let barrier_left = items(&cms).iter().any(|c| name(c) == cm_name);
        Ok(pods.is_empty() && !barrier_left)
    })
    .map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    Ok(())
}
