//! End-to-end: the ImagePullJob controller (in the controller binary) and the node daemon
//! against the test bed: a job's tag lands in the node's NodeImage, the daemon pulls it
//! through containerd, the job completes; a missing tag fails with the runtime's message.
//!
//! ```text
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-controller --test e2e -- --ignored imagepulljob::
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support as e2e_support;

use std::time::Duration;

use e2e_support::*;
use serde_json::Value;

const REPO: &str = "127.0.0.1:5000/inplace-test/app";

fn job_yaml(name: &str, image: &str) -> String {
    format!(
        r#"apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata:
  name: {name}
spec:
  image: {image}
  selector:
    names: [{NODE}]
  pullPolicy:
    timeoutSeconds: 60
    backoffLimit: 0
  completionPolicy:
    type: Always
"#
    )
}

fn tag_status(tag: &str) -> TestResult<Value> {
    let ni = kubectl_json(&["get", "nodeimage", NODE, "-o", "json"])?;
    Ok(ni["status"]["imageStatuses"][REPO]["tags"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["tag"] == tag).cloned())
        .unwrap_or(Value::Null))
}

fn wait_job_done(ns: &Namespace, name: &str) -> TestResult<Value> {
    let mut last = Value::Null;
    wait_for(
        &format!("ImagePullJob {name} to complete"),
        Duration::from_secs(180),
        || {
            last = ns.json(&["get", "imagepulljob", name, "-o", "json"])?;
            Ok(last["status"]["completionTime"].is_string())
        },
    )
    .map_err(|e| format!("{e}; last: {}", last["status"]))?;
    Ok(last["status"].clone())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn job_pulls_on_node_and_missing_tag_fails() -> TestResult {
    let ns = Namespace::create("ipj")?;
    // a tag containerd has never seen, so the pull really happens
    let fresh = format!("ipj-{:08x}", rand::random::<u32>());
    copy_image(&format!("{REPO}:v3"), &format!("{REPO}:{fresh}"))?;
    let missing = format!("missing-{:08x}", rand::random::<u32>());

    let _daemon = Daemon::start()?;
    let ctl = Controller::start(&ns.name)?;
    ns.apply(&job_yaml("fresh", &format!("{REPO}:{fresh}")))?;
    ns.apply(&job_yaml("missing", &format!("{REPO}:{missing}")))?;

    let ok = wait_job_done(&ns, "fresh").map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    eprintln!("fresh: {ok}");
    assert_eq!(ok["desired"], 1);
    assert_eq!(ok["succeeded"], 1);
    assert_eq!(ok["failed"], 0);
    assert_eq!(ok["active"], 0);
    assert_eq!(ok["message"], "job has completed");
    let st = tag_status(&fresh)?;
    eprintln!("NodeImage status of {fresh}: {st}");
    assert_eq!(st["phase"], "Succeeded");
    let id = st["imageID"].as_str().unwrap_or_default();
    assert!(id.contains("@sha256:"), "imageID {id:?}");

    let bad = wait_job_done(&ns, "missing")?;
    eprintln!("missing: {bad}");
    assert_eq!(bad["desired"], 1);
    assert_eq!(bad["succeeded"], 0);
    assert_eq!(bad["failed"], 1);
    assert_eq!(bad["failedNodes"], serde_json::json!([NODE]));
    let st = tag_status(&missing)?;
    assert_eq!(st["phase"], "Failed");
    let runtime_msg = st["message"].as_str().unwrap_or_default();
    assert!(!runtime_msg.is_empty());
    let msg = bad["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains(&format!("{NODE}: {runtime_msg}")),
        "job message {msg:?} lacks the runtime's {runtime_msg:?}"
    );
    Ok(())
}
