//! End-to-end, on the test bed's v1.20 API server: what OpenKruise's webhooks do that
//! inplace does with CRD defaults and the controller instead.
//!
//! - A CloneSet applied without `replicas` (or strategies) is stored with the reference's
//!   defaults, shows DESIRED, and scales with `kubectl scale` (the scale subresource reads
//!   `.spec.replicas`); ImagePullJob, NodeImage and ContainerRecreateRequest get theirs.
//! - A CloneSet that the CRD's CEL rules or the reference's webhook would refuse (v1.20 has
//!   no CEL) is reported with a `FailedScale` condition and a Warning event naming the
//!   fields, and no pod is made until it is fixed.
//! - With `ResourcesDeletionProtection`, a CloneSet labelled
//!   `policy.kruise.io/delete-protection: Always` survives `kubectl delete` (held by a
//!   finalizer, its pods untouched) until the label is removed.
//!
//! ```text
//! tests/testbed/up     # applies deploy/crds, also to a bed that is already up
//! cargo test -p inplace-controller --test e2e -- --ignored parity::
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support as e2e_support;

use std::time::Duration;

use e2e_support::*;
use serde_json::{Value, json};

const ROLLOUT: Duration = Duration::from_secs(120);

/// The bed must serve the CRDs of this tree (`tests/testbed/up` applies them): fail with
/// that instruction rather than with a confusing assertion.
fn require_current_crds() -> TestResult {
    let crd = kubectl_json(&["get", "crd", "clonesets.apps.kruise.io"])?;
    let replicas = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["replicas"];
    if replicas["default"] != json!(1) {
        return Err(
            "the bed's CloneSet CRD has no default for spec.replicas: it predates deploy/crds; run tests/testbed/up (it re-applies the CRDs)"
                .into(),
        );
    }
    Ok(())
}

fn cloneset_without_defaults(name: &str) -> String {
    format!(
        r#"apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata:
  name: {name}
spec:
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
      - name: app
        image: {image}
"#,
        image = image("v1")
    )
}

/// The DESIRED column of `kubectl get cloneset <name>`.
fn desired_column(ns: &Namespace, name: &str) -> TestResult<String> {
    let table = ns.kubectl(&["get", "cloneset", name])?;
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let at = header
        .iter()
        .position(|h| *h == "DESIRED")
        .ok_or_else(|| format!("no DESIRED column in {table}"))?;
    Ok(row.get(at).copied().unwrap_or_default().to_owned())
}

/// Host process: runs with --imagepulljob-controller=false: the ImagePullJob it creates
/// must stay as admission stored it, and the installed controller runs the ImagePullJob
/// controller.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn host_a_cloneset_without_replicas_is_defaulted_shows_desired_and_scales() -> TestResult {
    require_current_crds()?;
    let ns = Namespace::create("defaults")?;
    let _ctl = Controller::host(&ns.name, &["--imagepulljob-controller=false"])?;
    ns.apply(&cloneset_without_defaults("plain"))?;

    // Stored with the reference webhook's defaults.
    let cs = ns.cloneset("plain")?;
    assert_eq!(cs["spec"]["replicas"], 1, "{}", cs["spec"]);
    assert_eq!(cs["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(cs["spec"]["scaleStrategy"], json!({}));
    assert_eq!(
        cs["spec"]["updateStrategy"],
        json!({"type": "ReCreate", "partition": 0, "maxUnavailable": "20%", "maxSurge": 0})
    );
    // The template is stored as written.
    assert!(cs["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"].is_null());
    assert_eq!(desired_column(&ns, "plain")?, "1");

    wait_rolled_out(&ns, "plain", 1, ROLLOUT)?;
    ns.kubectl(&["scale", "cloneset", "plain", "--replicas", "2"])?;
    let cs = wait_rolled_out(&ns, "plain", 2, ROLLOUT)?;
    assert_eq!(cs["spec"]["replicas"], 2);
    assert_eq!(desired_column(&ns, "plain")?, "2");
    let scale: Value = serde_json::from_str(&kubectl(
        &[
            "get",
            "--raw",
            &format!(
                "/apis/apps.kruise.io/v1alpha1/namespaces/{}/clonesets/plain/scale",
                ns.name
            ),
        ],
        None,
    )?)?;
    assert_eq!(scale["spec"]["replicas"], 2, "{scale}");
    assert_eq!(scale["status"]["replicas"], 2, "{scale}");
    assert_eq!(scale["status"]["selector"], "app=plain", "{scale}");

    // The other kinds. Nothing acts on these objects here (no ImagePullJob controller, no
    // daemon, no such pod or node); only what the API server stored is read.
    ns.apply(
        r#"apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata:
  name: pull
spec:
  image: 127.0.0.1:5000/inplace-test/app:v1
  parallelism: 0
  selector:
    names: [no-such-node]
"#,
    )?;
    let job = ns.json(&["get", "imagepulljob", "pull"])?;
    assert_eq!(job["spec"]["completionPolicy"], json!({"type": "Always"}));
    assert_eq!(
        job["spec"]["pullPolicy"],
        json!({"timeoutSeconds": 600, "backoffLimit": 3})
    );
    assert_eq!(job["spec"]["imagePullPolicy"], "IfNotPresent");

    ns.apply(
        r#"apiVersion: apps.kruise.io/v1alpha1
kind: ContainerRecreateRequest
metadata:
  name: restart
spec:
  podName: no-such-pod
  containers:
  - name: app
"#,
    )?;
    let crr = ns.json(&["get", "containerrecreaterequest", "restart"])?;
    assert_eq!(crr["spec"]["strategy"], json!({"failurePolicy": "Fail"}));

    let node_image = format!("{}-no-such-node", ns.name);
    kubectl(
        &["apply", "-f", "-"],
        Some(&format!(
            r#"apiVersion: apps.kruise.io/v1alpha1
kind: NodeImage
metadata:
  name: {node_image}
  labels:
    apps.kruise.io/fake-nodeimage: "true"
spec:
  images:
    127.0.0.1:5000/inplace-test/app:
      tags:
      - tag: v1
"#
        )),
    )?;
    let ni = kubectl_json(&["get", "nodeimage", &node_image]);
    let _ = kubectl(&["delete", "nodeimage", &node_image, "--wait=false"], None);
    let ni = ni?;
    assert_eq!(
        ni["spec"]["images"]["127.0.0.1:5000/inplace-test/app"]["tags"][0]["pullPolicy"],
        json!({"timeoutSeconds": 600, "backoffLimit": 3})
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn a_cloneset_the_webhook_would_refuse_is_reported_and_gets_no_pods() -> TestResult {
    let ns = Namespace::create("refused")?;
    let _ctl = Controller::start(&ns.name)?;
    // Accepted by a v1.20 API server (the template is an open object, CEL rules are
    // dropped); OpenKruise's webhook refuses all three.
    let bad = sample_cloneset("bad", 2, &image("v1"), "ReCreate")
        .replace(
            "      terminationGracePeriodSeconds: 2\n",
            "      terminationGracePeriodSeconds: 2\n      restartPolicy: OnFailure\n      activeDeadlineSeconds: 600\n",
        )
        .replace(
            "  updateStrategy:\n    type: ReCreate\n",
            "  updateStrategy:\n    type: ReCreate\n    maxUnavailable: 0\n    maxSurge: 0\n",
        );
    ns.apply(&bad)?;

    let mut condition = Value::Null;
    wait_for("FailedScale on the refused CloneSet", ROLLOUT, || {
        condition = failed_scale(&ns.cloneset("bad")?).unwrap_or(Value::Null);
        Ok(!condition.is_null())
    })?;
    assert_eq!(condition["reason"], "InvalidSpec", "{condition}");
    let message = condition["message"].as_str().unwrap_or_default().to_owned();
    for field in [
        "spec.template.spec.restartPolicy",
        "spec.template.spec.activeDeadlineSeconds",
        "spec.updateStrategy.maxUnavailable",
    ] {
        assert!(message.contains(field), "{field} not named in {message}");
    }
    wait_for("a Warning event naming the fields", ROLLOUT, || {
        Ok(ns.events()?.iter().any(|e| {
            e["type"] == "Warning"
                && e["reason"] == "InvalidSpec"
                && (e["involvedObject"]["name"] == "bad" || e["regarding"]["name"] == "bad")
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("spec.template.spec.restartPolicy"))
        }))
    })?;
    // The condition was written by a reconcile that planned nothing: no pod, no revision.
    assert!(
        ns.pods()?.is_empty(),
        "pods were made for a refused CloneSet"
    );
    let revisions = ns.json(&["get", "controllerrevisions"])?;
    assert_eq!(revisions["items"].as_array().map(Vec::len), Some(0));

    // Fixed, it is acted on and the condition goes.
    ns.kubectl(&[
        "patch",
        "cloneset",
        "bad",
        "--type",
        "json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/template/spec/restartPolicy"},
            {"op": "remove", "path": "/spec/template/spec/activeDeadlineSeconds"},
            {"op": "replace", "path": "/spec/updateStrategy/maxUnavailable", "value": 1}]"#,
    ])?;
    let cs = wait_rolled_out(&ns, "bad", 2, ROLLOUT)?;
    assert!(failed_scale(&cs).is_none(), "{}", cs["status"]);
    Ok(())
}

/// Host process: runs with the feature gate ResourcesDeletionProtection, which deploy/ does
/// not set.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn host_a_protected_cloneset_is_held_on_delete_until_its_label_is_removed() -> TestResult {
    let ns = Namespace::create("protect")?;
    // Dropped before the namespace: a failed run must not leave a finalizer that keeps
    // the namespace Terminating.
    let _unprotect = ClearFinalizers {
        ns: ns.name.clone(),
        cloneset: "kept",
    };
    let _ctl = Controller::host(
        &ns.name,
        &["--feature-gates=ResourcesDeletionProtection=true"],
    )?;
    let manifest = sample_cloneset("kept", 1, &image("v1"), "ReCreate").replace(
        "  labels:\n    app: kept\n  name: kept\n",
        "  labels:\n    app: kept\n    policy.kruise.io/delete-protection: Always\n  name: kept\n",
    );
    ns.apply(&manifest)?;
    wait_for("the protection finalizer", ROLLOUT, || {
        let cs = ns.cloneset("kept")?;
        Ok(cs["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "policy.kruise.io/delete-protection")))
    })?;
    wait_rolled_out(&ns, "kept", 1, ROLLOUT)?;
    let pod_uid = |ns: &Namespace| -> TestResult<Vec<String>> {
        Ok(ns
            .pods()?
            .values()
            .filter(|p| !pod_terminating(p))
            .map(|p| p["metadata"]["uid"].as_str().unwrap_or_default().to_owned())
            .collect())
    };
    let before = pod_uid(&ns)?;
    assert_eq!(before.len(), 1);

    // A v1.20 server accepts the DELETE (no ValidatingAdmissionPolicy); the finalizer holds
    // the CloneSet, and background propagation leaves its pods alone meanwhile.
    ns.kubectl(&["delete", "cloneset", "kept", "--wait=false"])?;
    wait_for("a DeletionProtected Warning event", ROLLOUT, || {
        Ok(ns.events()?.iter().any(|e| {
            e["type"] == "Warning"
                && e["reason"] == "DeletionProtected"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("policy.kruise.io/delete-protection=Always"))
        }))
    })?;
    let cs = ns.cloneset("kept")?;
    assert!(!cs["metadata"]["deletionTimestamp"].is_null());
    assert_eq!(
        pod_uid(&ns)?,
        before,
        "the pod stays while the deletion is held"
    );

    // Without the label the finalizer goes, and so do the CloneSet and its pod.
    ns.kubectl(&[
        "label",
        "cloneset",
        "kept",
        "policy.kruise.io/delete-protection-",
    ])?;
    wait_for("the CloneSet to be gone", ROLLOUT, || {
        Ok(ns.kubectl(&["get", "cloneset", "kept"]).is_err())
    })?;
    wait_for("its pod to be deleted", ROLLOUT, || {
        Ok(pod_uid(&ns)?.is_empty())
    })?;
    Ok(())
}

/// Removes every finalizer of a CloneSet on drop (test cleanup).
struct ClearFinalizers {
    ns: String,
    cloneset: &'static str,
}

impl Drop for ClearFinalizers {
    fn drop(&mut self) {
        let _ = kubectl(
            &[
                "-n",
                &self.ns,
                "patch",
                "cloneset",
                self.cloneset,
                "--type",
                "merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ],
            None,
        );
    }
}
