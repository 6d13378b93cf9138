//! End-to-end: the ImageListPullJob controller (in the controller binary, beside the
//! ImagePullJob one) and the node daemon against the test bed: a list of two images makes
//! one ImagePullJob per image (owned by the list, labelled with the template hash), both
//! images are pulled on the bed's node, the list's status is aggregated from its jobs, and
//! `ttlSecondsAfterFinished` after completion the list and its jobs are gone.
//!
//! ```text
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-controller --test e2e -- --ignored imagelistpulljob::
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support as e2e_support;

use std::collections::BTreeSet;
use std::time::Duration;

use e2e_support::*;
use serde_json::Value;

const REPO: &str = "127.0.0.1:5000/inplace-test/app";
const TTL_SECONDS: u64 = 15;

fn list_yaml(name: &str, images: &[String]) -> String {
    format!(
        r#"apiVersion: apps.kruise.io/v1beta1
kind: ImageListPullJob
metadata:
  name: {name}
spec:
  images: [{images}]
  selector:
    names: [{NODE}]
  parallelism: 1
  pullPolicy:
    timeoutSeconds: 60
    backoffLimit: 1
  completionPolicy:
    type: Always
    ttlSecondsAfterFinished: {TTL_SECONDS}
"#,
        images = images.join(", ")
    )
}

fn tag_phase(tag: &str) -> TestResult<Value> {
    let ni = kubectl_json(&["get", "nodeimage", NODE, "-o", "json"])?;
    Ok(ni["status"]["imageStatuses"][REPO]["tags"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["tag"] == tag).cloned())
        .map(|t| t["phase"].clone())
        .unwrap_or(Value::Null))
}

/// The ImagePullJobs of `ns` controlled by the object with `uid`.
fn jobs_of(ns: &Namespace, uid: &str) -> TestResult<Vec<Value>> {
    let all = ns.json(&["get", "imagepulljobs", "-o", "json"])?;
    Ok(all["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|j| {
            j["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|os| {
                    os.iter().any(|o| {
                        o["uid"] == uid
                            && o["controller"] == true
                            && o["kind"] == "ImageListPullJob"
                    })
                })
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn list_pulls_both_images_aggregates_and_is_cleaned_up_by_ttl() -> TestResult {
    let ns = Namespace::create("ilpj")?;
    // tags containerd has never seen, so the pulls really happen
    let tags: Vec<String> = (0..2)
        .map(|n| format!("ilpj{n}-{:08x}", rand::random::<u32>()))
        .collect();
    for t in &tags {
        copy_image(&format!("{REPO}:v3"), &format!("{REPO}:{t}"))?;
    }
    let images: Vec<String> = tags.iter().map(|t| format!("{REPO}:{t}")).collect();

    let _daemon = Daemon::start()?;
    let ctl = Controller::start(&ns.name)?;
    ns.apply(&list_yaml("warm", &images))?;
    let uid = ns.json(&["get", "imagelistpulljob", "warm", "-o", "json"])?["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    let mut last = Value::Null;
    wait_for(
        "ImageListPullJob warm to complete",
        Duration::from_secs(240),
        || {
            last = ns.json(&["get", "imagelistpulljob", "warm", "-o", "json"])?;
            Ok(last["status"]["completionTime"].is_string())
        },
    )
    .map_err(|e| format!("{e}; last: {}\n{}", last["status"], ctl.log_excerpt()))?;
    let status = &last["status"];
    eprintln!("warm: {status}");
    assert_eq!(status["desired"], 2);
    assert_eq!(status["completed"], 2);
    assert_eq!(status["succeeded"], 2);
    assert_eq!(status["active"], 0);
    assert!(status["startTime"].is_string());
    assert!(status.get("failedImageStatuses").is_none(), "{status}");

    // one job per image, named after the list, labelled with the template hash
    let jobs = jobs_of(&ns, &uid)?;
    let job_images: BTreeSet<&str> = jobs
        .iter()
        .filter_map(|j| j["spec"]["image"].as_str())
        .collect();
    assert_eq!(
        job_images,
        images.iter().map(String::as_str).collect::<BTreeSet<_>>()
    );
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let hashes: BTreeSet<&str> = jobs
        .iter()
        .filter_map(|j| j["metadata"]["labels"]["controller-revision-hash"].as_str())
        .collect();
    assert_eq!(
        hashes.len(),
        1,
        "one template hash on both jobs: {hashes:?}"
    );
    for j in &jobs {
        let name = j["metadata"]["name"].as_str().unwrap_or_default();
        assert!(name.starts_with("warm-"), "{name}");
        // the template fields were carried over
        assert_eq!(j["spec"]["selector"]["names"], serde_json::json!([NODE]));
        assert_eq!(j["spec"]["pullPolicy"]["backoffLimit"], 1);
        assert_eq!(
            j["spec"]["completionPolicy"]["ttlSecondsAfterFinished"],
            TTL_SECONDS
        );
        assert_eq!(j["status"]["succeeded"], 1, "{name}: {}", j["status"]);
    }
    for t in &tags {
        assert_eq!(tag_phase(t)?, "Succeeded", "{t}");
    }

    // the TTL: the list and its jobs are deleted
    wait_for(
        "ImageListPullJob warm and its jobs to be deleted by TTL",
        Duration::from_secs(TTL_SECONDS + 120),
        || {
            let gone = ns
                .kubectl(&[
                    "get",
                    "imagelistpulljob",
                    "warm",
                    "--ignore-not-found",
                    "-o",
                    "name",
                ])?
                .trim()
                .is_empty();
            Ok(gone && jobs_of(&ns, &uid)?.is_empty())
        },
    )
    .map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    Ok(())
}
