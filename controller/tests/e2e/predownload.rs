//! End-to-end: image pre-download for in-place update (gate
//! `PreDownloadImageForInPlaceUpdate`) against the test bed, with the controller binary
//! (CloneSet + ImagePullJob controllers) and the node daemon for the bed's real node.
//!
//! - 4 replicas, InPlaceIfPossible, partition 4 (every pod stays old), image v1 → a fresh
//!   tag of v2: the ImagePullJob `<updateRevision>-app` appears with the reference's
//!   fields, the daemon pulls the tag on the node (NodeImage status and containerd), the
//!   revision is labelled `apps.kruise.io/pre-predownload-created`; after partition 0 the
//!   rollout converges and the job is deleted.
//! - 3 replicas: no job, the revision is labelled `apps.kruise.io/image-predownload-ignored`.
//!
//! Only one daemon may serve the real node: run with `--test-threads=1` or next to tests
//! that start none; the daemon test waits for any other `inplace-daemon` of the node to end.
//!
//! ```text
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-controller --test e2e -- --ignored --test-threads=1 predownload::
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support as e2e_support;

use std::process::Command;
use std::time::Duration;

use e2e_support::*;
use serde_json::{Value, json};

const GATE: &str = "PreDownloadImageForInPlaceUpdate=true";

/// `repo:tag` → (repo, tag).
fn split(image: &str) -> (String, String) {
    let at = image.rfind(':').unwrap_or(image.len());
    let slash = image.rfind('/').unwrap_or(0);
    if at > slash && at < image.len() {
        (image[..at].to_owned(), image[at + 1..].to_owned())
    } else {
        (image.to_owned(), "latest".to_owned())
    }
}

/// A CloneSet of `replicas` pods on the real node, InPlaceIfPossible, with `partition`.
fn cloneset_yaml(name: &str, replicas: i32, partition: i32) -> String {
    let mut y = sample_cloneset(name, replicas, &image("v1"), "InPlaceIfPossible");
    y.push_str(&format!("    partition: {partition}\n"));
    y
}

fn update_revision(ns: &Namespace, name: &str) -> TestResult<Option<String>> {
    let cs = ns.cloneset(name)?;
    let (cur, upd) = (
        cs["status"]["currentRevision"].as_str(),
        cs["status"]["updateRevision"].as_str(),
    );
    Ok(match (cur, upd) {
        (Some(c), Some(u)) if c != u => Some(u.to_owned()),
        _ => None,
    })
}

/// Waits for `status.updateRevision` to be set and returns it.
fn wait_update_revision(ns: &Namespace, name: &str) -> TestResult<String> {
    let mut rev = String::new();
    wait_for("a new update revision", Duration::from_secs(30), || {
        Ok(match update_revision(ns, name)? {
            Some(r) => {
                rev = r;
                true
            }
            None => false,
        })
    })?;
    Ok(rev)
}

fn revision_label(ns: &Namespace, rev: &str, key: &str) -> TestResult<Option<String>> {
    let r = ns.json(&["get", "controllerrevision", rev])?;
    Ok(label(&r, key).map(str::to_owned))
}

fn image_pull_jobs(ns: &Namespace) -> TestResult<Vec<Value>> {
    Ok(ns.json(&["get", "imagepulljobs"])?["items"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// Host process: runs with the feature gate PreDownloadImageForInPlaceUpdate, which deploy/
/// does not set.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn host_predownload_pulls_new_image_on_old_pods_nodes_and_cleans_up() -> TestResult {
    let ns = Namespace::create("pdl")?;
    // v2 under a tag containerd has never seen, so that the daemon really pulls it
    let (repo, _) = split(&image("v2"));
    let fresh = format!("pdl-{:08x}", rand::random::<u32>());
    let new_image = format!("{repo}:{fresh}");
    copy_image(&image("v2"), &new_image)?;

    let _daemon = Daemon::start()?;
    let ctl = Controller::host(
        &ns.name,
        &["--leader-elect", "false", "--feature-gates", GATE],
    )?;
    let name = "pdl";
    ns.apply(&cloneset_yaml(name, 4, 4))?;
    wait_rolled_out(&ns, name, 4, Duration::from_secs(180))?;
    assert!(image_pull_jobs(&ns)?.is_empty(), "no job before any update");

    ns.set_image(name, &new_image)?;
    let rev = wait_update_revision(&ns, name)?;
    let job_name = format!("{rev}-app");
    let mut job = Value::Null;
    wait_for(
        &format!("ImagePullJob {job_name}"),
        Duration::from_secs(30),
        || {
            job = ns.json(&["get", "imagepulljob", &job_name])?;
            Ok(true)
        },
    )
    .map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    eprintln!("job: {}", job["spec"]);
    let hash = ns.json(&["get", "controllerrevision", &rev])?["metadata"]["labels"]
        ["controller.kubernetes.io/hash"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!hash.is_empty());
    assert_eq!(job["spec"]["image"], new_image.as_str());
    assert_eq!(
        job["spec"]["podSelector"],
        json!({
            "matchLabels": {"app": name},
            "matchExpressions": [{
                "key": "controller-revision-hash",
                "operator": "NotIn",
                "values": [rev, hash],
            }],
        })
    );
    assert_eq!(job["spec"]["parallelism"], 1);
    assert_eq!(
        job["spec"]["pullPolicy"],
        json!({"timeoutSeconds": 300, "backoffLimit": 1})
    );
    assert_eq!(
        job["spec"]["completionPolicy"],
        json!({"type": "Always", "ttlSecondsAfterFinished": 600})
    );
    let owner = &job["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "CloneSet");
    assert_eq!(owner["name"], name);
    assert_eq!(owner["controller"], true);
    assert_eq!(
        label(&job, "controller.kubernetes.io/hash"),
        Some(hash.as_str())
    );

    // the ImagePullJob controller resolves the pod selector to the real node; the daemon pulls
    let mut status = Value::Null;
    wait_for(
        &format!("ImagePullJob {job_name} to complete"),
        Duration::from_secs(180),
        || {
            status = ns.json(&["get", "imagepulljob", &job_name])?["status"].clone();
            Ok(status["completionTime"].is_string())
        },
    )
    .map_err(|e| format!("{e}; last status {status}\n{}", ctl.log_excerpt()))?;
    eprintln!("job status: {status}");
    assert_eq!(status["desired"], 1);
    assert_eq!(status["succeeded"], 1);
    assert_eq!(status["failed"], 0);
    let ni = kubectl_json(&["get", "nodeimage", NODE])?;
    let tag = ni["status"]["imageStatuses"][repo.as_str()]["tags"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["tag"] == fresh.as_str()).cloned())
        .unwrap_or(Value::Null);
    eprintln!("NodeImage status of {fresh}: {tag}");
    assert_eq!(tag["phase"], "Succeeded");
    assert!(
        tag["imageID"]
            .as_str()
            .unwrap_or_default()
            .contains("@sha256:"),
        "imageID {tag}"
    );
    // containerd has the tag although no pod runs it yet (partition 4)
    let sock = std::env::var("INPLACE_CONTAINERD_SOCK")
        .unwrap_or_else(|_| "/var/tmp/inplace-testbed/containerd/containerd.sock".into());
    let refs = Command::new("ctr")
        .args(["-a", &sock, "-n", "k8s.io", "images", "ls", "-q"])
        .output()?;
    let refs = String::from_utf8_lossy(&refs.stdout);
    assert!(
        refs.lines().any(|l| l.trim() == new_image),
        "{new_image} not in containerd's images"
    );
    assert!(
        ns.pods()?
            .values()
            .all(|p| container_image(p) == image("v1")),
        "partition 4 keeps every pod on v1"
    );

    wait_for("revision labelled created", Duration::from_secs(30), || {
        Ok(
            revision_label(&ns, &rev, "apps.kruise.io/pre-predownload-created")?.as_deref()
                == Some("true"),
        )
    })?;
    let events = ns.events()?;
    assert!(
        events.iter().any(|e| e["reason"] == "CreatedImagePullJob"
            && e["message"]
                .as_str()
                .or_else(|| e["note"].as_str())
                .is_some_and(|m| m.contains(&job_name))),
        "no CreatedImagePullJob event naming {job_name}"
    );

    // the rollout converges: the jobs go away
    ns.patch_cloneset(name, &json!({"spec": {"updateStrategy": {"partition": 0}}}))?;
    wait_rolled_out(&ns, name, 4, Duration::from_secs(240))?;
    wait_for("ImagePullJobs deleted", Duration::from_secs(60), || {
        Ok(image_pull_jobs(&ns)?.is_empty())
    })
    .map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    Ok(())
}

/// Host process: runs with the feature gate PreDownloadImageForInPlaceUpdate, which deploy/
/// does not set.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn host_predownload_ignored_for_three_replicas() -> TestResult {
    let ns = Namespace::create("pdl3")?;
    let _ctl = Controller::host(
        &ns.name,
        &["--leader-elect", "false", "--feature-gates", GATE],
    )?;
    let name = "pdl3";
    ns.apply(&cloneset_yaml(name, 3, 3))?;
    wait_rolled_out(&ns, name, 3, Duration::from_secs(180))?;
    ns.set_image(name, &image("v2"))?;
    let rev = wait_update_revision(&ns, name)?;
    wait_for("revision labelled ignored", Duration::from_secs(30), || {
        Ok(
            revision_label(&ns, &rev, "apps.kruise.io/image-predownload-ignored")?.as_deref()
                == Some("true"),
        )
    })?;
    assert_eq!(
        revision_label(&ns, &rev, "apps.kruise.io/pre-predownload-created")?,
        None
    );
    assert!(image_pull_jobs(&ns)?.is_empty(), "no job for 3 replicas");
    Ok(())
}

/// Host process: runs with the feature gate PreDownloadImageForInPlaceUpdate, which deploy/
/// does not set.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn host_predownload_waits_for_min_updated_ready_pods() -> TestResult {
    let ns = Namespace::create("pdlmin")?;
    let _ctl = Controller::host(
        &ns.name,
        &["--leader-elect", "false", "--feature-gates", GATE],
    )?;
    let name = "pdlmin";
    let mut yaml = cloneset_yaml(name, 4, 4);
    yaml = yaml.replacen(
        "metadata:\n  labels:",
        "metadata:\n  annotations:\n    apps.kruise.io/image-predownload-min-updated-ready-pods: \"1\"\n  labels:",
        1,
    );
    ns.apply(&yaml)?;
    wait_rolled_out(&ns, name, 4, Duration::from_secs(180))?;
    ns.set_image(name, &image("v2"))?;
    let rev = wait_update_revision(&ns, name)?;
    // partition 4: no pod is updated, so the trigger (1 updated ready pod) is never reached
    std::thread::sleep(Duration::from_secs(8));
    assert!(image_pull_jobs(&ns)?.is_empty(), "job before the trigger");
    let r = ns.json(&["get", "controllerrevision", &rev])?;
    assert_eq!(label(&r, "apps.kruise.io/pre-predownload-created"), None);
    assert_eq!(label(&r, "apps.kruise.io/image-predownload-ignored"), None);

    // one pod updated and ready reaches it
    ns.patch_cloneset(name, &json!({"spec": {"updateStrategy": {"partition": 3}}}))?;
    let job_name = format!("{rev}-app");
    wait_for(
        &format!("ImagePullJob {job_name}"),
        Duration::from_secs(90),
        || Ok(ns.json(&["get", "imagepulljob", &job_name]).is_ok()),
    )?;
    let cs = ns.cloneset(name)?;
    assert!(
        status_i64(&cs, "updatedReadyReplicas") >= 1,
        "job created with {} updated ready pods",
        status_i64(&cs, "updatedReadyReplicas")
    );
    wait_for("revision labelled created", Duration::from_secs(30), || {
        Ok(
            revision_label(&ns, &rev, "apps.kruise.io/pre-predownload-created")?.as_deref()
                == Some("true"),
        )
    })?;
    Ok(())
}
