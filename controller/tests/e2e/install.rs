//! End-to-end, the product as installed: `tests/testbed/up --install` built the two images,
//! pushed them to the bed's registry and applied `kubectl apply -k` of an overlay of
//! `deploy/k8s-1.20` (its path and the image tag are in `$INPLACE_TESTBED_DIR/install/env`).
//! These tests use only that installation (no controller or daemon process of their own),
//! and they change it (a controller restart, an upgrade, an uninstall and reinstall): they
//! take a lock and run one at a time, and each leaves the installation as it found it.
//!
//! ```text
//! tests/testbed/up --install
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig INPLACE_KUBECTL=... \
//!   cargo test -p inplace-controller --test e2e -- --ignored --test-threads 1 installed_
//! tests/testbed/up --uninstall
//! ```
//!
//! The test names start with `installed_`: `tests/run-all` skips them in the suites that run
//! before the product is installed (those start their own controller and daemon, which would
//! fight with installed ones).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support as e2e_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::Mutex;

use e2e_support::*;
use serde_json::{Value, json};

const ROLLOUT: Duration = Duration::from_secs(180);
/// The daemon's host port (deploy/daemon/daemonset.yaml).
const DAEMON_PORT: u16 = 10231;

/// One test at a time changes the installation.
static INSTALLATION: Mutex<()> = Mutex::const_new(());

async fn lock() -> tokio::sync::MutexGuard<'static, ()> {
    INSTALLATION.lock().await
}

fn bed_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("INPLACE_TESTBED_DIR").unwrap_or_else(|_| "/var/tmp/inplace-testbed".into()),
    )
}

/// `$INPLACE_TESTBED_DIR/install/env` as a map (written by tests/testbed/install).
fn install_env() -> TestResult<BTreeMap<String, String>> {
    let path = bed_dir().join("install/env");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "{}: {e}; install the product first: tests/testbed/up --install",
            path.display()
        )
    })?;
    Ok(text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
        .collect())
}

fn overlay() -> TestResult<PathBuf> {
    Ok(PathBuf::from(
        install_env()?
            .get("INPLACE_INSTALL_OVERLAY")
            .ok_or("no INPLACE_INSTALL_OVERLAY in install/env")?,
    ))
}

/// Waits until the controller Deployment and the daemon DaemonSet are rolled out (the
/// Deployment Available, every controller replica Ready, the daemon Ready on the real node).
fn wait_installed() -> TestResult {
    sys(&[
        "rollout",
        "status",
        "deployment/inplace-controller",
        "--timeout=180s",
    ])?;
    sys(&[
        "wait",
        "--for=condition=Available",
        "--timeout=60s",
        "deployment/inplace-controller",
    ])?;
    sys(&[
        "rollout",
        "status",
        "daemonset/inplace-daemon",
        "--timeout=180s",
    ])?;
    Ok(())
}

/// A CloneSet of `replicas` pods on the real node, in place, `max_unavailable` at a time,
/// each pod counted available `min_ready` seconds after it is Ready.
fn cloneset(name: &str, replicas: i32, max_unavailable: i32, min_ready: i32) -> String {
    sample_cloneset(name, replicas, &image("v1"), "InPlaceIfPossible")
        .replace(
            "spec:\n  replicas:",
            &format!("spec:\n  minReadySeconds: {min_ready}\n  replicas:"),
        )
        .replace(
            "    type: InPlaceIfPossible\n",
            &format!("    type: InPlaceIfPossible\n    maxUnavailable: {max_unavailable}\n"),
        )
}

/// (uid, restart count) of every pod of the namespace that is not terminating, by name.
fn pod_states(ns: &Namespace) -> TestResult<BTreeMap<String, (String, i64)>> {
    Ok(ns
        .pods()?
        .into_iter()
        .filter(|(_, p)| !pod_terminating(p))
        .map(|(n, p)| (n, (uid(&p), restart_count(&p))))
        .collect())
}

/// The relative path from `from` to `to` (both absolute), for a kustomize `bases:` entry
/// (kustomize v2.0.3 takes no absolute paths there).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c);
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed with the product installed (tests/testbed/up --install)"]
async fn installed_components_are_ready_and_serve() -> TestResult {
    let _guard = lock().await;
    let env = install_env()?;
    wait_installed()?;
    let deploy = sys_json(&["get", "deployment", "inplace-controller"])?;
    let replicas = deploy["spec"]["replicas"].as_i64().unwrap_or(0);
    assert_eq!(replicas, 2);
    assert_eq!(
        deploy["status"]["readyReplicas"], replicas,
        "every replica Ready, the standby too"
    );
    assert!(
        deploy["status"]["conditions"].as_array().is_some_and(|c| c
            .iter()
            .any(|c| c["type"] == "Available" && c["status"] == "True")),
        "{}",
        deploy["status"]
    );

    // Every controller replica serves /readyz with 200: one leader, the rest standbys.
    let controllers = component_pods("controller")?;
    assert_eq!(controllers.len() as i64, replicas);
    let holder = lease_holder()?;
    let mut roles = Vec::new();
    for pod in &controllers {
        assert!(pod_ready(pod), "{} not Ready", name(pod));
        assert_eq!(
            pod["spec"]["containers"][0]["image"],
            env["INPLACE_INSTALL_CONTROLLER_IMAGE"]
                .split('@')
                .next()
                .unwrap_or_default()
        );
        let ip = pod["status"]["podIP"].as_str().ok_or("no pod IP")?;
        let (code, body) = http_get(&format!("{ip}:8080"), "/readyz")?;
        assert_eq!(code, 200, "{}: /readyz {body}", name(pod));
        roles.push((name(pod), body.clone()));
        let leads = body.trim() == "ok: leader";
        assert!(leads || body.contains("standby"), "{}: {body:?}", name(pod));
        assert_eq!(
            holder.starts_with(&format!("{}-", name(pod))),
            leads,
            "{}: /readyz says {body:?}, the lease holder is {holder}",
            name(pod)
        );
        let (code, metrics) = http_get(&format!("{ip}:8080"), "/metrics")?;
        assert_eq!(code, 200);
        assert!(metrics.contains("inplace_leader "), "{metrics}");
        // deploy/images/build compiled the source revision in.
        let head = std::process::Command::new("git")
            .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
            .output()?;
        let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
        assert!(
            metrics.contains(&format!("revision=\"{head}\"}} 1")),
            "inplace_build_info of {head} in {metrics}"
        );
    }
    eprintln!("controller replicas: {roles:?}");
    assert_eq!(
        roles
            .iter()
            .filter(|(_, b)| b.trim() == "ok: leader")
            .count(),
        1,
        "exactly one leader: {roles:?}"
    );

    // The daemon: Ready on the real node, as a non-root user, and it answers on its host
    // port; its /healthz is 200 only when it reaches the CRI socket and its watches synced.
    let daemons = component_pods("daemon")?;
    let on_node: Vec<&Value> = daemons
        .iter()
        .filter(|p| p["spec"]["nodeName"] == NODE)
        .collect();
    assert_eq!(on_node.len(), 1, "one daemon pod on {NODE}");
    let daemon = on_node[0];
    assert!(pod_ready(daemon));
    assert_eq!(daemon["spec"]["securityContext"]["runAsUser"], 65532);
    assert_eq!(daemon["spec"]["priorityClassName"], "system-node-critical");
    let (code, body) = http_get(&format!("127.0.0.1:{DAEMON_PORT}"), "/healthz")?;
    assert_eq!(code, 200, "daemon /healthz: {body}");
    let (code, metrics) = http_get(&format!("127.0.0.1:{DAEMON_PORT}"), "/metrics")?;
    assert_eq!(code, 200);
    assert!(!metrics.is_empty());

    // And the installed pair does its job: an in-place rollout on the real node.
    let ns = Namespace::create("inst-ready")?;
    ns.apply(&cloneset("app", 2, 1, 0))?;
    wait_rolled_out(&ns, "app", 2, ROLLOUT)?;
    let before = pod_states(&ns)?;
    ns.set_image("app", &image("v2"))?;
    wait_rolled_out(&ns, "app", 2, ROLLOUT)?;
    let after = pod_states(&ns)?;
    assert_eq!(before.len(), 2);
    for (pod, (u, restarts)) in &before {
        let (u2, r2) = after.get(pod).ok_or(format!("{pod} is gone"))?;
        assert_eq!(u, u2, "{pod} recreated");
        assert_eq!(*r2, restarts + 1, "{pod} restarted once, in place");
    }
    Ok(())
}

/// `kubectl auth can-i` as the installed ServiceAccount `sa` (in `inplace-system`), in
/// namespace `ns` (`None`: all namespaces); `what` is `VERB RESOURCE[/SUBRESOURCE]`.
fn can_i(sa: &str, what: &str, ns: Option<&str>) -> TestResult<bool> {
    let (verb, resource) = what.split_once(' ').ok_or("VERB RESOURCE")?;
    let (resource, sub) = resource.split_once('/').unwrap_or((resource, ""));
    let who = format!("--as=system:serviceaccount:{SYSTEM_NS}:{sa}");
    let mut args = vec!["auth", "can-i", verb, resource, who.as_str()];
    let sub_flag = format!("--subresource={sub}");
    if !sub.is_empty() {
        args.push(&sub_flag);
    }
    match ns {
        Some(ns) => args.extend(["-n", ns]),
        None => args.push("--all-namespaces"),
    }
    let out = std::process::Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(&args)
        .output()?;
    // can-i answers on stdout and exits 1 for "no"; anything else is an error.
    match String::from_utf8_lossy(&out.stdout).trim() {
        "yes" => Ok(true),
        "no" => Ok(false),
        other => Err(format!(
            "kubectl {}: {other} {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )
        .into()),
    }
}

/// Least privilege, as the API server sees the installed ServiceAccounts (not just the
/// manifests: a binding to the wrong subject or namespace shows here). A node's daemon
/// writes pod status only, never a pod's spec, and cannot exec, delete or create; the
/// controller cannot exec into pods, read Secrets or grant itself more.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed with the product installed (tests/testbed/up --install)"]
async fn installed_service_accounts_have_least_privilege() -> TestResult {
    let _guard = lock().await;
    wait_installed()?;
    let checks: &[(&str, &str, Option<&str>, bool)] = &[
        // The daemon: its watches and its status writes...
        ("inplace-daemon", "list pods", None, true),
        ("inplace-daemon", "watch pods", None, true),
        ("inplace-daemon", "patch pods/status", Some("default"), true),
        (
            "inplace-daemon",
            "patch nodeimages.apps.kruise.io/status",
            None,
            true,
        ),
        (
            "inplace-daemon",
            "patch containerrecreaterequests.apps.kruise.io/status",
            Some("default"),
            true,
        ),
        // Events on the pods it restarts (kube's Recorder creates them, patches repeats).
        (
            "inplace-daemon",
            "create events.events.k8s.io",
            Some("default"),
            true,
        ),
        (
            "inplace-daemon",
            "patch events.events.k8s.io",
            Some("default"),
            true,
        ),
        (
            "inplace-daemon",
            "delete events.events.k8s.io",
            Some("default"),
            false,
        ),
        // ...and nothing that changes what a pod runs or reaches into one.
        ("inplace-daemon", "patch pods", Some("default"), false),
        ("inplace-daemon", "update pods", Some("default"), false),
        ("inplace-daemon", "create pods", Some("default"), false),
        ("inplace-daemon", "delete pods", Some("default"), false),
        ("inplace-daemon", "create pods/exec", Some("default"), false),
        (
            "inplace-daemon",
            "create pods/eviction",
            Some("default"),
            false,
        ),
        ("inplace-daemon", "list secrets", Some("default"), false),
        // Secrets: the daemon reads only the pull-secret copies in inplace-system, by name.
        ("inplace-daemon", "get secrets", Some("default"), false),
        ("inplace-daemon", "get secrets", Some(SYSTEM_NS), true),
        ("inplace-daemon", "list secrets", Some(SYSTEM_NS), false),
        ("inplace-daemon", "create secrets", Some(SYSTEM_NS), false),
        ("inplace-daemon", "patch nodes", None, false),
        (
            "inplace-daemon",
            "patch nodeimages.apps.kruise.io",
            None,
            false,
        ),
        (
            "inplace-daemon",
            "patch clonesets.apps.kruise.io",
            Some("default"),
            false,
        ),
        (
            "inplace-daemon",
            "create containerrecreaterequests.apps.kruise.io",
            Some("default"),
            false,
        ),
        (
            "inplace-daemon",
            "create clusterrolebindings.rbac.authorization.k8s.io",
            None,
            false,
        ),
        // The controller: what it writes...
        ("inplace-controller", "create pods", Some("default"), true),
        (
            "inplace-controller",
            "patch pods/status",
            Some("default"),
            true,
        ),
        (
            "inplace-controller",
            "create controllerrevisions.apps",
            Some("default"),
            true,
        ),
        (
            "inplace-controller",
            "patch clonesets.apps.kruise.io/status",
            Some("default"),
            true,
        ),
        // ...and no reach beyond it.
        (
            "inplace-controller",
            "create pods/exec",
            Some("default"),
            false,
        ),
        // Secrets: the pull secrets ImagePullJobs name, by name only (it cannot list
        // them); their copies are written in inplace-system only.
        ("inplace-controller", "get secrets", Some("default"), true),
        ("inplace-controller", "list secrets", Some("default"), false),
        (
            "inplace-controller",
            "watch secrets",
            Some("default"),
            false,
        ),
        (
            "inplace-controller",
            "create secrets",
            Some("default"),
            false,
        ),
        (
            "inplace-controller",
            "update secrets",
            Some("default"),
            false,
        ),
        (
            "inplace-controller",
            "delete secrets",
            Some("default"),
            false,
        ),
        ("inplace-controller", "list secrets", Some(SYSTEM_NS), true),
        (
            "inplace-controller",
            "create secrets",
            Some(SYSTEM_NS),
            true,
        ),
        (
            "inplace-controller",
            "update secrets",
            Some(SYSTEM_NS),
            true,
        ),
        (
            "inplace-controller",
            "delete secrets",
            Some(SYSTEM_NS),
            true,
        ),
        ("inplace-controller", "patch nodes", None, false),
        ("inplace-controller", "delete nodes", None, false),
        (
            "inplace-controller",
            "create clusterrolebindings.rbac.authorization.k8s.io",
            None,
            false,
        ),
        (
            "inplace-controller",
            "impersonate serviceaccounts",
            None,
            false,
        ),
        (
            "inplace-controller",
            "patch deployments.apps",
            Some("default"),
            false,
        ),
    ];
    let mut wrong = Vec::new();
    for (sa, what, ns, want) in checks {
        let got = can_i(sa, what, *ns)?;
        if got != *want {
            wrong.push(format!("{sa} {what} in {ns:?}: {got}, want {want}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");

    // Under that role the installed daemon still does its part: a template label that the
    // container's env reads changes; only the daemon can restart the container (the
    // kubelet does not), and its completion, the condition and the container ids in the
    // state annotation, goes through pods/status in one write.
    let ns = Namespace::create("inst-rbac")?;
    let env = "        env: [{name: TIER, valueFrom: {fieldRef: {fieldPath: \"metadata.labels['tier']\"}}}]\n";
    let manifest = cloneset("reader", 1, 1, 0)
        .replace(
            "        app: reader\n    spec:",
            "        app: reader\n        tier: a\n    spec:",
        )
        .replace(
            "        readinessProbe:",
            &format!("{env}        readinessProbe:"),
        );
    ns.apply(&manifest)?;
    wait_rolled_out(&ns, "reader", 1, ROLLOUT)?;
    let before = pod_states(&ns)?;
    ns.patch_cloneset(
        "reader",
        &json!({"spec": {"template": {"metadata": {"labels": {"tier": "b"}}}}}),
    )?;
    wait_rolled_out(&ns, "reader", 1, ROLLOUT)?;
    let after = pod_states(&ns)?;
    let (pod, (uid_before, restarts)) = before.iter().next().ok_or("no pod")?;
    assert_eq!(
        after.get(pod),
        Some(&(uid_before.clone(), restarts + 1)),
        "{pod} restarted once in place by the daemon"
    );
    let live = &ns.pods()?[pod];
    let state: Value = serde_json::from_str(
        live["metadata"]["annotations"]["apps.kruise.io/inplace-update-state"]
            .as_str()
            .ok_or("no state annotation")?,
    )?;
    assert_eq!(state["updateEnvFromMetadata"], json!(true), "{state}");
    assert!(
        state["daemonContainerIDs"]["app"]
            .as_str()
            .is_some_and(|id| id.starts_with("containerd://")),
        "the daemon's ids written through pods/status: {state}"
    );
    // The daemon recorded its restart as an Event on the pod (published in the background,
    // so waited for).
    let mut seen = Vec::new();
    let found = wait_for(
        "the daemon's ContainerRestarted event on the pod",
        Duration::from_secs(30),
        || {
            let events = ns.events()?;
            seen = events
                .iter()
                .map(|e| {
                    format!(
                        "{} {} {} by {}: {}",
                        e["type"],
                        e["reason"],
                        e["involvedObject"]["name"],
                        e["reportingComponent"],
                        e["message"]
                    )
                })
                .collect();
            Ok(events.iter().any(|e| {
                e["involvedObject"]["kind"] == "Pod"
                    && e["involvedObject"]["name"] == pod.as_str()
                    && e["involvedObject"]["uid"] == uid_before.as_str()
                    && e["reason"] == "ContainerRestarted"
                    && e["type"] == "Normal"
                    && e["reportingComponent"] == "inplace-daemon"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("container app"))
            }))
        },
    );
    assert!(
        found.is_ok(),
        "{found:?}; events in the namespace: {seen:#?}"
    );
    Ok(())
}

/// An ImagePullJob in a user namespace names a pull secret of its namespace: the installed
/// controller mirrors it into inplace-system (same type and data, the source's uid, key and
/// the job as references), the NodeImage names the copy and not the original, the daemon
/// (which may read Secrets only in inplace-system) reads the copy and pulls the image from
/// the bed's registry, and deleting the job deletes the copy. The bed's registry has no
/// authentication, so the pull itself does not prove the credentials; the daemon's log
/// line for the copy does.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed with the product installed (tests/testbed/up --install)"]
async fn installed_imagepulljob_pull_secret_is_mirrored_for_the_daemon() -> TestResult {
    let _guard = lock().await;
    wait_installed()?;
    let ns = Namespace::create("inst-pullsecret")?;
    let repo = format!(
        "{}/inplace-test/app",
        std::env::var("INPLACE_REGISTRY").unwrap_or_else(|_| "127.0.0.1:5000".into())
    );
    let tag = format!("secret-{:08x}", rand::random::<u32>());
    copy_image(&format!("{repo}:v3"), &format!("{repo}:{tag}"))?;
    ns.kubectl(&[
        "create",
        "secret",
        "docker-registry",
        "regcred",
        "--docker-server=127.0.0.1:5000",
        "--docker-username=puller",
        "--docker-password=not-checked-by-the-bed-registry",
    ])?;
    let source = ns.json(&["get", "secret", "regcred", "-o", "json"])?;
    let copy = format!("{}.regcred", ns.name);
    ns.apply(&format!(
        r#"apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata:
  name: warm
spec:
  image: {repo}:{tag}
  pullSecrets: [regcred]
  selector:
    names: [{NODE}]
  pullPolicy:
    timeoutSeconds: 60
    backoffLimit: 0
  completionPolicy:
    type: Always
"#
    ))?;

    // The copy, in inplace-system.
    let mut mirrored = Value::Null;
    wait_for("the pull secret's copy in inplace-system", ROLLOUT, || {
        mirrored = sys_json(&["get", "secret", &copy, "-o", "json"]).unwrap_or(Value::Null);
        Ok(mirrored["metadata"]["name"] == copy.as_str())
    })?;
    assert_eq!(mirrored["type"], "kubernetes.io/dockerconfigjson");
    assert_eq!(mirrored["data"], source["data"], "the same content");
    let meta = &mirrored["metadata"];
    assert_eq!(
        meta["labels"]["imagepulljobs.kruise.io/source-uid"],
        source["metadata"]["uid"]
    );
    assert_eq!(
        meta["annotations"]["imagepulljobs.kruise.io/source-key"],
        format!("{}/regcred", ns.name)
    );
    assert_eq!(
        meta["annotations"]["imagepulljobs.kruise.io/references"],
        format!("{}/warm", ns.name)
    );

    // The NodeImage names the copy (written once the copy exists), never the user's Secret.
    let mut refs = Value::Null;
    wait_for("the NodeImage to name the copy", ROLLOUT, || {
        let ni = kubectl_json(&["get", "nodeimage", NODE, "-o", "json"])?;
        refs = ni["spec"]["images"][&repo]["pullSecrets"].clone();
        Ok(refs.as_array().is_some_and(|r| {
            r.iter()
                .any(|r| r["namespace"] == SYSTEM_NS && r["name"] == copy.as_str())
        }))
    })
    .map_err(|e| format!("{e}: {refs}"))?;
    assert!(
        refs.as_array()
            .is_some_and(|r| r.iter().all(|r| r["namespace"] != ns.name.as_str())),
        "{refs}"
    );

    // The daemon pulls, reading the copy from inplace-system.
    let mut status = Value::Null;
    wait_for("the ImagePullJob to complete", ROLLOUT, || {
        status = ns.json(&["get", "imagepulljob", "warm", "-o", "json"])?["status"].clone();
        Ok(status["completionTime"].is_string())
    })?;
    assert_eq!(status["succeeded"], 1, "{status}");
    let daemon = component_pods("daemon")?
        .into_iter()
        .find(|p| p["spec"]["nodeName"] == NODE)
        .ok_or("no daemon on the node")?;
    let log = strip_ansi(&sys(&[
        "logs",
        daemon["metadata"]["name"].as_str().unwrap_or_default(),
    ])?);
    let read = format!("{SYSTEM_NS}/{copy}");
    assert!(
        log.lines()
            .any(|l| l.contains("pull secret read") && l.contains(&read)),
        "no 'pull secret read' of {read} in the daemon's log"
    );

    // Deleting the job deletes the copy.
    ns.kubectl(&["delete", "imagepulljob", "warm"])?;
    wait_for("the copy deleted with its last job", ROLLOUT, || {
        Ok(sys(&["get", "secrets", "-o", "name"])?
            .lines()
            .all(|l| l.trim() != format!("secret/{copy}")))
    })?;
    Ok(())
}

/// `kubectl rollout restart deployment/inplace-controller` in the middle of a CloneSet's
/// in-place rollout: the leader changes hands, the rollout finishes, and no pod is deleted,
/// updated twice, or made unavailable beyond maxUnavailable.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed with the product installed (tests/testbed/up --install)"]
async fn installed_controller_restart_mid_rollout_keeps_the_budget() -> TestResult {
    let _guard = lock().await;
    wait_installed()?;
    let ns = Namespace::create("inst-ha")?;
    // One pod at a time, each counted available 3 s after Ready: the rollout of 6 pods takes
    // well over the controllers' restart and the lease hand-over.
    let (replicas, max_unavailable) = (6, 1);
    ns.apply(&cloneset("ha", replicas, max_unavailable, 3))?;
    wait_rolled_out(&ns, "ha", i64::from(replicas), ROLLOUT)?;
    let before = pod_states(&ns)?;
    let watch = UnavailabilityWatch::start(&ns.name, i64::from(replicas)).await?;
    let leader_before = lease_holder()?;
    let controllers_before: Vec<String> = component_pods("controller")?.iter().map(uid).collect();

    ns.set_image("ha", &image("v2"))?;
    wait_for("the rollout under way (1 pod updated)", ROLLOUT, || {
        let cs = ns.cloneset("ha")?;
        Ok(status_i64(&cs, "updatedReplicas") >= 1)
    })?;
    let updated_at_restart = status_i64(&ns.cloneset("ha")?, "updatedReadyReplicas");
    sys(&["rollout", "restart", "deployment/inplace-controller"])?;
    sys(&[
        "rollout",
        "status",
        "deployment/inplace-controller",
        "--timeout=180s",
    ])?;
    let status_at_new_controllers = ns.cloneset("ha")?["status"].clone();
    wait_rolled_out(&ns, "ha", i64::from(replicas), ROLLOUT)?;

    let leader_after = lease_holder()?;
    let controllers_after: Vec<String> = component_pods("controller")?.iter().map(uid).collect();
    eprintln!(
        "restart at {updated_at_restart}/{replicas} updated-ready; status when the new controllers \
         were all Ready: {status_at_new_controllers}; leader {leader_before} -> {leader_after}; \
         max unavailable {} of {max_unavailable} allowed, max live {}, {} samples",
        watch.max(),
        watch.max_live(),
        watch.samples()
    );
    assert!(
        updated_at_restart < i64::from(replicas),
        "the restart came after the rollout had finished: nothing was tested"
    );
    assert!(
        controllers_after
            .iter()
            .all(|u| !controllers_before.contains(u)),
        "every controller pod was replaced"
    );
    assert_ne!(leader_before, leader_after, "the lease changed hands");
    let after = pod_states(&ns)?;
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "no pod deleted or created"
    );
    for (pod, (u, restarts)) in &before {
        let (u2, r2) = &after[pod];
        assert_eq!(u, u2, "{pod} recreated");
        assert_eq!(*r2, restarts + 1, "{pod} updated exactly once");
    }
    for pod in ns.pods()?.values() {
        assert_eq!(container_image(pod), image("v2"));
    }
    assert!(
        watch.max() <= i64::from(max_unavailable),
        "maxUnavailable {max_unavailable} exceeded: {} ({})",
        watch.max(),
        watch.worst()
    );
    assert_eq!(watch.max_live(), i64::from(replicas), "no extra pod");
    Ok(())
}

/// An overlay of the installed components (`<overlay>/components`: controller, daemon, PDB;
/// the CRDs stay as they are) with both images at `tag`, in a temporary directory. (kubectl
/// 1.20's kustomize applies `images:` to every object and fails on the CRDs' schemas, so an
/// image override must not take the CRDs in; see tests/testbed/install.)
fn overlay_with_tag(tag: &str) -> TestResult<tempfile::TempDir> {
    let installed = overlay()?.join("components");
    let dir = tempfile::Builder::new()
        .prefix("inplace-upgrade")
        .tempdir()?;
    let registry = std::env::var("INPLACE_REGISTRY").unwrap_or_else(|_| "127.0.0.1:5000".into());
    let base = relative(dir.path(), &installed);
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nbases:\n  - {}\n\
             images:\n  - name: {registry}/inplace/inplace-controller\n    newTag: \"{tag}\"\n\
             \x20 - name: {registry}/inplace/inplace-daemon\n    newTag: \"{tag}\"\n",
            base.display()
        ),
    )?;
    Ok(dir)
}

/// Applying a new image tag rolls both components; the CloneSet's running pods keep their
/// UID and restart count, and the upgraded pair still updates in place. The original tag
/// is applied again at the end.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed with the product installed (tests/testbed/up --install)"]
async fn installed_upgrade_rolls_components_and_leaves_workloads_alone() -> TestResult {
    let _guard = lock().await;
    let env = install_env()?;
    wait_installed()?;
    let tag = env["INPLACE_INSTALL_TAG"].clone();
    let registry = std::env::var("INPLACE_REGISTRY").unwrap_or_else(|_| "127.0.0.1:5000".into());
    let new_tag = format!("{tag}-upgrade");
    for n in ["inplace-controller", "inplace-daemon"] {
        copy_image(
            &format!("{registry}/inplace/{n}:{tag}"),
            &format!("{registry}/inplace/{n}:{new_tag}"),
        )?;
    }
    let ns = Namespace::create("inst-upgrade")?;
    ns.apply(&cloneset("up", 3, 1, 0))?;
    wait_rolled_out(&ns, "up", 3, ROLLOUT)?;
    let before = pod_states(&ns)?;
    let controllers_before: Vec<String> = component_pods("controller")?.iter().map(uid).collect();
    let daemons_before: Vec<String> = component_pods("daemon")?.iter().map(uid).collect();

    let upgrade = overlay_with_tag(&new_tag)?;
    let applied = kubectl(
        &[
            "apply",
            "--validate=false",
            "-k",
            &upgrade.path().to_string_lossy(),
        ],
        None,
    )?;
    eprintln!("{applied}");
    wait_installed()?;
    let restore = || -> TestResult {
        kubectl(
            &[
                "apply",
                "--validate=false",
                "-k",
                &overlay()?.to_string_lossy(),
            ],
            None,
        )?;
        wait_installed()
    };
    let checks = (|| -> TestResult {
        for (component, old) in [
            ("controller", &controllers_before),
            ("daemon", &daemons_before),
        ] {
            let pods = component_pods(component)?;
            assert!(!pods.is_empty());
            for pod in &pods {
                let img = pod["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap_or_default();
                assert!(
                    img.ends_with(&format!(":{new_tag}")),
                    "{}: {img}",
                    name(pod)
                );
                assert!(!old.contains(&uid(pod)), "{} was not replaced", name(pod));
                assert!(pod_ready(pod), "{} not Ready", name(pod));
            }
        }
        let after = pod_states(&ns)?;
        assert_eq!(after, before, "the upgrade touched the CloneSet's pods");
        let cs = ns.cloneset("up")?;
        assert_eq!(status_i64(&cs, "updatedReadyReplicas"), 3);
        // The upgraded pair still updates in place.
        ns.set_image("up", &image("v2"))?;
        wait_rolled_out(&ns, "up", 3, ROLLOUT)?;
        for (pod, (u, restarts)) in &before {
            let (u2, r2) = pod_states(&ns)?
                .get(pod)
                .cloned()
                .ok_or(format!("{pod} is gone"))?;
            assert_eq!(*u, u2, "{pod} recreated");
            assert_eq!(r2, restarts + 1);
        }
        Ok(())
    })();
    let restored = restore();
    checks?;
    restored
}

/// Uninstalling the components as the README says (`kubectl delete -k … -l
/// app.kubernetes.io/name=inplace`) removes them and keeps the CRDs, the CloneSets and
/// their running pods; installing again takes the CloneSet over without touching a pod.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed with the product installed (tests/testbed/up --install)"]
async fn installed_uninstall_keeps_workloads_running() -> TestResult {
    let _guard = lock().await;
    wait_installed()?;
    let overlay = overlay()?;
    let overlay = overlay.to_string_lossy();
    let ns = Namespace::create("inst-uninstall")?;
    ns.apply(&cloneset("keep", 3, 1, 0))?;
    wait_rolled_out(&ns, "keep", 3, ROLLOUT)?;
    let before = pod_states(&ns)?;

    kubectl(
        &[
            "delete",
            "--wait=true",
            "--timeout=180s",
            "-l",
            "app.kubernetes.io/name=inplace",
            "-k",
            &overlay,
        ],
        None,
    )?;
    kubectl(
        &[
            "wait",
            "--for=delete",
            &format!("namespace/{SYSTEM_NS}"),
            "--timeout=180s",
        ],
        None,
    )
    .or_else(|e| {
        // Gone before the wait started.
        if kubectl(&["get", "namespace", SYSTEM_NS], None).is_err() {
            Ok(String::new())
        } else {
            Err(e)
        }
    })?;
    let reinstall = || -> TestResult {
        kubectl(&["apply", "--validate=false", "-k", &overlay], None)?;
        wait_installed()
    };
    let checks = (|| -> TestResult {
        for (kind, obj) in [
            ("clusterrole", "inplace-controller"),
            ("clusterrole", "inplace-daemon"),
            ("clusterrolebinding", "inplace-daemon"),
        ] {
            assert!(
                kubectl(&["get", kind, obj], None).is_err(),
                "{kind} {obj} still there"
            );
        }
        for crd in [
            "clonesets.apps.kruise.io",
            "imagepulljobs.apps.kruise.io",
            "nodeimages.apps.kruise.io",
            "containerrecreaterequests.apps.kruise.io",
        ] {
            kubectl(&["get", "crd", crd], None)?;
        }
        let cs = ns.cloneset("keep")?;
        assert_eq!(status_i64(&cs, "readyReplicas"), 3);
        let pods = ns.pods()?;
        assert_eq!(pod_states(&ns)?, before, "pods changed by the uninstall");
        assert!(pods.values().all(pod_ready), "every pod still Ready");
        Ok(())
    })();
    let reinstalled = reinstall();
    checks?;
    reinstalled?;
    // Installed again: the CloneSet is taken over as it is, and is reconciled.
    ns.patch_cloneset("keep", &json!({"spec": {"replicas": 4}}))?;
    wait_rolled_out(&ns, "keep", 4, ROLLOUT)?;
    let after = pod_states(&ns)?;
    for (pod, state) in &before {
        assert_eq!(
            after.get(pod),
            Some(state),
            "{pod} changed by the reinstall"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Migration from OpenKruise v1.9 (docs/migrating-from-openkruise.md).
//
// OpenKruise's images cannot be pulled here, so "a cluster that ran OpenKruise" is made by
// writing exactly the objects kruise-manager (and its webhooks) would have written, with
// our controller stopped the whole time (as kruise-manager is stopped before ours starts):
// - the CRD `clonesets.apps.kruise.io` as a v1 CRD served and stored as v1alpha1 (a minimal
//   stand-in for OpenKruise's: schemaless spec and status, status and scale subresources);
// - a CloneSet whose template carries what OpenKruise's mutating webhook adds (the typed
//   Go encoding: `metadata.creationTimestamp: null`, `resources: {}`, the PodSpec and
//   container defaults);
// - one ControllerRevision per template, as `history.NewControllerRevision` makes it:
//   name `<cloneset>-<hash>`, the hash being FNV-1 (32 bit) over the `json.Marshal` bytes of
//   `{"spec":{"template":{…,"$patch":"replace"}}}` followed by the collision count "0",
//   safe-encoded; labels = template labels + `controller.kubernetes.io/hash`; annotations =
//   CloneSet annotations + `kruise.io/cloneset-volumeclaimtemplate-hash` ("" without VCTs);
//   the CloneSet as controller owner;
// - pods as `newVersionedPods` and the pod webhook make them: name `<cloneset>-<id>`,
//   labels `controller-revision-hash` (full revision name), `pod-template-hash` (the hash
//   part), `apps.kruise.io/cloneset-instance-id`, `lifecycle.apps.kruise.io/state`, the
//   readiness gates `InPlaceUpdateReady` and `KruisePodReady` with both conditions True;
// - an earlier in-place update v1 → v2 done the way OpenKruise does it: InPlaceUpdateReady
//   False (reason StartInPlaceUpdate), then one pod write with the new revision labels, the
//   `apps.kruise.io/inplace-update-state` annotation (`revision`, `updateTimestamp`,
//   `lastContainerStatuses` with the old `imageID` only, `updateImages`) and the new image
//   (the real kubelet restarts the container), then InPlaceUpdateReady True;
// - the CloneSet status as OpenKruise writes it after that update.

const KRUISE_CS: &str = "kapp";

fn rfc3339_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The pod template as OpenKruise's mutating webhook stores it (defaults filled in, the
/// typed encoding's `creationTimestamp: null` and `resources: {}` included).
fn kruise_template(image: &str) -> Value {
    json!({
        "metadata": {"creationTimestamp": null, "labels": {"app": KRUISE_CS}},
        "spec": {
            "containers": [{
                "name": "app",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "readinessProbe": {
                    "httpGet": {"path": "/version", "port": 8080, "scheme": "HTTP"},
                    "periodSeconds": 1,
                    "timeoutSeconds": 1,
                    "successThreshold": 1,
                    "failureThreshold": 3
                },
                "resources": {},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File"
            }],
            "dnsPolicy": "ClusterFirst",
            "nodeSelector": {"inplace.testbed/real": "true"},
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "terminationGracePeriodSeconds": 2
        }
    })
}

/// `(name, hash, data)` of the ControllerRevision OpenKruise writes for `template`.
fn kruise_revision(template: &Value) -> (String, String, Value) {
    use inplace_controller::plan::revision::{canonical_json, fnv1_32, safe_encode};
    let mut tpl = template.clone();
    tpl["$patch"] = json!("replace");
    let data = json!({"spec": {"template": tpl}});
    // Go's json.Marshal of a map: keys sorted, no spaces; then the collision count.
    let mut bytes = canonical_json(&data);
    bytes.extend(b"0");
    let hash = safe_encode(&fnv1_32(&bytes).to_string());
    (format!("{KRUISE_CS}-{hash}"), hash, data)
}

/// A minimal stand-in for OpenKruise v1.9's CloneSet CRD: the same name, group and version,
/// served and stored as v1alpha1, with schemaless spec and status (validation was its
/// webhook's job) and the status and scale subresources. Replaces the installed CRD (its
/// resourceVersion given: CRDs take no unconditional update).
fn kruise_crd(resource_version: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "clonesets.apps.kruise.io",
            "resourceVersion": resource_version,
            "annotations": {"controller-gen.kubebuilder.io/version": "v0.16.5"}
        },
        "spec": {
            "group": "apps.kruise.io",
            "names": {
                "kind": "CloneSet", "listKind": "CloneSetList", "plural": "clonesets",
                "singular": "cloneset", "shortNames": ["clone"]
            },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }},
                "subresources": {
                    "status": {},
                    "scale": {
                        "labelSelectorPath": ".status.labelSelector",
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas"
                    }
                }
            }]
        }
    })
}

async fn bed_client() -> TestResult<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig())?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

fn revisions_of(ns: &Namespace) -> TestResult<BTreeMap<String, Value>> {
    Ok(items(&ns.json(&["get", "controllerrevisions"])?)
        .into_iter()
        .map(|r| (name(&r), r))
        .collect())
}

fn kubectl_create(ns: &Namespace, obj: &Value) -> TestResult<Value> {
    let out = kubectl(
        &["-n", &ns.name, "create", "-o", "json", "-f", "-"],
        Some(&obj.to_string()),
    )?;
    Ok(serde_json::from_str(&out)?)
}

/// A ControllerRevision as OpenKruise writes it.
fn kruise_revision_object(cs: &Value, template: &Value, number: i64) -> Value {
    let (rev_name, hash, data) = kruise_revision(template);
    json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": rev_name,
            "labels": {"app": KRUISE_CS, "controller.kubernetes.io/hash": hash},
            "annotations": {"kruise.io/cloneset-volumeclaimtemplate-hash": ""},
            "ownerReferences": [{
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                "name": KRUISE_CS, "uid": uid(cs),
                "controller": true, "blockOwnerDeletion": true
            }]
        },
        "data": data,
        "revision": number
    })
}

/// A pod as OpenKruise's `newVersionedPods` and pod webhook create it.
fn kruise_pod(cs: &Value, template: &Value, id: &str) -> Value {
    let (rev_name, hash, _) = kruise_revision(template);
    let mut spec = template["spec"].clone();
    spec["readinessGates"] = json!([
        {"conditionType": "InPlaceUpdateReady"},
        {"conditionType": "KruisePodReady"}
    ]);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{KRUISE_CS}-{id}"),
            "generateName": format!("{KRUISE_CS}-"),
            "labels": {
                "app": KRUISE_CS,
                "controller-revision-hash": rev_name,
                "pod-template-hash": hash,
                "apps.kruise.io/cloneset-instance-id": id,
                "lifecycle.apps.kruise.io/state": "Normal"
            },
            "annotations": {"lifecycle.apps.kruise.io/timestamp": rfc3339_now()},
            "ownerReferences": [{
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                "name": KRUISE_CS, "uid": uid(cs),
                "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": spec
    })
}

fn container_status(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]
}

/// Pods, revisions and a CloneSet as OpenKruise v1.9 leaves them (see above); returns the
/// names of the v1 and v2 revisions.
async fn write_kruise_state(ns: &Namespace, client: &kube::Client) -> TestResult<(String, String)> {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    let (v1, v2) = (kruise_template(&image("v1")), kruise_template(&image("v2")));
    let cs = kubectl_create(
        ns,
        &json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "CloneSet",
            "metadata": {"name": KRUISE_CS, "labels": {"app": KRUISE_CS}},
            "spec": {
                "replicas": 2,
                "revisionHistoryLimit": 10,
                "selector": {"matchLabels": {"app": KRUISE_CS}},
                "scaleStrategy": {},
                "template": v1,
                "updateStrategy": {
                    "type": "InPlaceIfPossible", "partition": 0,
                    "maxUnavailable": 1, "maxSurge": 0
                }
            }
        }),
    )?;
    let r1 = kruise_revision_object(&cs, &v1, 1);
    kubectl_create(ns, &r1)?;
    let ids = ["x7k2p", "m4q9z"];
    for id in ids {
        kubectl_create(ns, &kruise_pod(&cs, &v1, id))?;
    }
    let pods: Vec<String> = ids.iter().map(|id| format!("{KRUISE_CS}-{id}")).collect();
    // kruise-manager's pod-readiness controller and the in-place code set both gates' True.
    wait_for("the kruise pods' containers ready", ROLLOUT, || {
        let p = ns.pods()?;
        Ok(pods.iter().all(|n| {
            p.get(n)
                .is_some_and(|p| container_status(p)["ready"] == true)
        }))
    })?;
    for pod in &pods {
        let now = rfc3339_now();
        set_pod_conditions(
            client,
            &ns.name,
            pod,
            json!([
                {"type": "InPlaceUpdateReady", "status": "True", "lastTransitionTime": now},
                {"type": "KruisePodReady", "status": "True", "lastTransitionTime": now}
            ]),
        )
        .await?;
    }
    wait_for("the kruise pods Ready", ROLLOUT, || {
        let p = ns.pods()?;
        Ok(pods.iter().all(|n| p.get(n).is_some_and(pod_ready)))
    })?;

    // The template changes to v2: a new revision, and each pod updated in place.
    ns.json_patch_cloneset(
        KRUISE_CS,
        &json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": image("v2")}]),
    )?;
    let r2 = kruise_revision_object(&cs, &v2, 2);
    kubectl_create(ns, &r2)?;
    let (r2_name, r2_hash, _) = kruise_revision(&v2);
    for pod in &pods {
        let before = ns.json(&["get", "pod", pod])?;
        let old_image_id = container_status(&before)["imageID"].clone();
        set_pod_conditions(
            client,
            &ns.name,
            pod,
            json!([{"type": "InPlaceUpdateReady", "status": "False",
                    "reason": "StartInPlaceUpdate", "lastTransitionTime": rfc3339_now()}]),
        )
        .await?;
        let state = json!({
            "revision": r2_name,
            "updateTimestamp": rfc3339_now(),
            "lastContainerStatuses": {"app": {"imageID": old_image_id}},
            "updateImages": true
        });
        ns.kubectl(&[
            "patch",
            "pod",
            pod,
            "--type",
            "strategic",
            "-p",
            &json!({
                "metadata": {
                    "labels": {
                        "controller-revision-hash": r2_name,
                        "pod-template-hash": r2_hash,
                        "lifecycle.apps.kruise.io/state": "Updating"
                    },
                    "annotations": {
                        "apps.kruise.io/inplace-update-state": state.to_string(),
                        "lifecycle.apps.kruise.io/timestamp": rfc3339_now()
                    }
                },
                "spec": {"containers": [{"name": "app", "image": image("v2")}]}
            })
            .to_string(),
        ])?;
        wait_for(&format!("{pod} restarted on v2"), ROLLOUT, || {
            let p = ns.json(&["get", "pod", pod])?;
            let c = container_status(&p);
            Ok(c["restartCount"] == 1 && c["ready"] == true && c["imageID"] != old_image_id)
        })?;
        set_pod_conditions(
            client,
            &ns.name,
            pod,
            json!([{"type": "InPlaceUpdateReady", "status": "True",
                    "lastTransitionTime": rfc3339_now()}]),
        )
        .await?;
        ns.kubectl(&[
            "label",
            "pod",
            pod,
            "--overwrite",
            "lifecycle.apps.kruise.io/state=Normal",
        ])?;
    }
    wait_for("the kruise pods Ready on v2", ROLLOUT, || {
        let p = ns.pods()?;
        Ok(pods.iter().all(|n| p.get(n).is_some_and(pod_ready)))
    })?;

    // The status kruise-manager writes once the update is done.
    let generation = ns.cloneset(KRUISE_CS)?["metadata"]["generation"].clone();
    let gvk = GroupVersionKind::gvk("apps.kruise.io", "v1alpha1", "CloneSet");
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&gvk, "clonesets"),
    );
    api.patch_status(
        KRUISE_CS,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "observedGeneration": generation,
            "replicas": 2, "readyReplicas": 2, "availableReplicas": 2,
            "updatedReplicas": 2, "updatedReadyReplicas": 2, "updatedAvailableReplicas": 2,
            "expectedUpdatedReplicas": 2,
            "currentRevision": r2_name, "updateRevision": r2_name,
            "collisionCount": 0,
            "labelSelector": format!("app={KRUISE_CS}")
        }})),
    )
    .await?;
    Ok((kruise_revision(&v1).0, r2_name))
}

fn revision_label(pod: &Value) -> String {
    label(pod, "controller-revision-hash")
        .unwrap_or_default()
        .to_owned()
}

/// A CloneSet, its revisions and pods as OpenKruise v1.9 left them, under OpenKruise's CRD,
/// are taken over by the installed controller after `kubectl apply -k` of ours: the CRD is
/// replaced in place (objects kept, storedVersions v1alpha1), no pod is restarted or
/// recreated, the kruise revision stays current, a scale-up uses it, an image change goes
/// in place, and a rollback reuses the older kruise-written revision.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed with the product installed (tests/testbed/up --install)"]
async fn installed_takes_over_a_cloneset_left_by_openkruise() -> TestResult {
    let _guard = lock().await;
    wait_installed()?;
    let overlay = overlay()?;
    let overlay = overlay.to_string_lossy().into_owned();
    let replicas = sys(&[
        "get",
        "deployment",
        "inplace-controller",
        "-o",
        "jsonpath={.spec.replicas}",
    ])?;
    // Our controller is not running while "OpenKruise" writes (two controllers on one
    // CloneSet fight): this is the state before the migration.
    sys(&["scale", "deployment/inplace-controller", "--replicas=0"])?;
    let install = || -> TestResult {
        kubectl(&["apply", "--validate=false", "-k", &overlay], None)?;
        sys(&[
            "scale",
            "deployment/inplace-controller",
            &format!("--replicas={replicas}"),
        ])?;
        kubectl(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/clonesets.apps.kruise.io",
            ],
            None,
        )?;
        wait_installed()
    };
    let client = bed_client().await?;
    let ns = Namespace::create("inst-kruise")?;
    let checks = takeover(&ns, &client, &install).await;
    let restored = install();
    checks?;
    restored
}

async fn takeover(
    ns: &Namespace,
    client: &kube::Client,
    install: &dyn Fn() -> TestResult,
) -> TestResult {
    wait_for("no controller pod", ROLLOUT, || {
        Ok(component_pods("controller")?.is_empty())
    })?;
    // OpenKruise's CRD (same name) in place of ours.
    let crd = kubectl_json(&["get", "crd", "clonesets.apps.kruise.io"])?;
    let rv = crd["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    kubectl(&["replace", "-f", "-"], Some(&kruise_crd(rv).to_string()))?;
    kubectl(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/clonesets.apps.kruise.io",
        ],
        None,
    )?;
    let crd = kubectl_json(&["get", "crd", "clonesets.apps.kruise.io"])?;
    assert!(
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            .is_null(),
        "OpenKruise's schemaless CRD is in place"
    );
    let (r1, r2) = write_kruise_state(ns, client).await?;
    let cs_before = ns.cloneset(KRUISE_CS)?;
    let pods_before = pod_states(ns)?;
    let revisions_before = revisions_of(ns)?;
    assert_eq!(pods_before.len(), 2);
    assert!(
        pods_before.values().all(|(_, r)| *r == 1),
        "{pods_before:?}"
    );
    assert_eq!(revisions_before.keys().cloned().collect::<Vec<_>>(), {
        let mut v = vec![r1.clone(), r2.clone()];
        v.sort();
        v
    });
    eprintln!("kruise state: revisions {r1} (v1), {r2} (v2); pods {pods_before:?}");

    // The migration: `kubectl apply -k` of ours (the CRD replaced, the components installed).
    install()?;
    let crd = kubectl_json(&["get", "crd", "clonesets.apps.kruise.io"])?;
    assert_eq!(crd["status"]["storedVersions"], json!(["v1alpha1"]));
    assert_eq!(
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["replicas"]["default"],
        json!(1),
        "our CRD schema is in place"
    );
    let cs = ns.cloneset(KRUISE_CS)?;
    assert_eq!(uid(&cs), uid(&cs_before), "the CloneSet object is kept");

    // The controller acts on it: one more replica, made from the kruise revision.
    ns.patch_cloneset(KRUISE_CS, &json!({"spec": {"replicas": 3}}))?;
    let cs = wait_rolled_out(ns, KRUISE_CS, 3, ROLLOUT)?;
    assert_eq!(cs["status"]["updateRevision"], json!(r2));
    assert_eq!(cs["status"]["currentRevision"], json!(r2));
    for field in [
        "replicas",
        "readyReplicas",
        "availableReplicas",
        "updatedReplicas",
        "updatedReadyReplicas",
    ] {
        assert_eq!(status_i64(&cs, field), 3, "{field}: {}", cs["status"]);
    }
    let revisions = revisions_of(ns)?;
    assert_eq!(
        revisions.keys().collect::<Vec<_>>(),
        revisions_before.keys().collect::<Vec<_>>(),
        "no new ControllerRevision for the template OpenKruise already recorded"
    );
    for (n, r) in &revisions_before {
        assert_eq!(uid(&revisions[n]), uid(r), "{n} recreated");
    }
    let after = pod_states(ns)?;
    for (pod, state) in &pods_before {
        assert_eq!(after.get(pod), Some(state), "{pod} touched by the takeover");
    }
    let pods = ns.pods()?;
    for p in pods.values() {
        assert_eq!(revision_label(p), r2, "{}", name(p));
    }
    let new_pod = after
        .keys()
        .find(|p| !pods_before.contains_key(*p))
        .ok_or("no new pod")?
        .clone();
    eprintln!("takeover: scaled to 3 with {new_pod} on {r2}; no new revision, no pod touched");

    // A later image change goes in place.
    ns.set_image(KRUISE_CS, &image("v3"))?;
    let cs = wait_rolled_out(ns, KRUISE_CS, 3, ROLLOUT)?;
    let r3 = cs["status"]["updateRevision"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(r3 != r1 && r3 != r2, "a new revision for v3: {r3}");
    let updated = pod_states(ns)?;
    for (pod, (u, restarts)) in &after {
        let (u2, r) = updated.get(pod).ok_or(format!("{pod} is gone"))?;
        assert_eq!(u, u2, "{pod} recreated");
        assert_eq!(*r, restarts + 1, "{pod} restarted once, in place");
    }
    for p in ns.pods()?.values() {
        assert_eq!(container_image(p), image("v3"));
        assert_eq!(revision_label(p), r3);
    }

    // Back to v1, written as a user's manifest has it (no `creationTimestamp: null`, no
    // `resources: {}`: what a GitOps tool replacing the template sends): the revision
    // OpenKruise wrote for v1 (whose data has both) is found equal and reused (renumbered),
    // though its name is not the hash of this template's bytes.
    let mut plain_v1 = kruise_template(&image("v1"));
    plain_v1["metadata"]
        .as_object_mut()
        .ok_or("template metadata")?
        .remove("creationTimestamp");
    plain_v1["spec"]["containers"][0]
        .as_object_mut()
        .ok_or("container")?
        .remove("resources");
    assert_ne!(
        kruise_revision(&plain_v1).0,
        r1,
        "the name alone does not match"
    );
    ns.json_patch_cloneset(
        KRUISE_CS,
        &json!([{"op": "replace", "path": "/spec/template", "value": plain_v1}]),
    )?;
    let cs = wait_rolled_out(ns, KRUISE_CS, 3, ROLLOUT)?;
    assert_eq!(
        cs["status"]["updateRevision"],
        json!(r1),
        "{}",
        cs["status"]
    );
    let revisions = revisions_of(ns)?;
    let mut names: Vec<&String> = revisions.keys().collect();
    names.sort();
    let mut want = vec![&r1, &r2, &r3];
    want.sort();
    assert_eq!(names, want, "no revision made for v1");
    assert_eq!(uid(&revisions[&r1]), uid(&revisions_before[&r1]));
    assert!(
        revisions[&r1]["revision"].as_i64() > revisions[&r3]["revision"].as_i64(),
        "{r1} renumbered as the newest"
    );
    let rolled_back = pod_states(ns)?;
    for (pod, (u, restarts)) in &updated {
        let (u2, r) = rolled_back.get(pod).ok_or(format!("{pod} is gone"))?;
        assert_eq!(u, u2, "{pod} recreated");
        assert_eq!(*r, restarts + 1, "{pod} restarted once, in place");
    }
    for p in ns.pods()?.values() {
        assert_eq!(container_image(p), image("v1"));
        assert_eq!(revision_label(p), r1);
    }
    eprintln!(
        "after v3 ({r3}) and back to v1: revisions {:?}; pods {rolled_back:?}",
        revisions
            .iter()
            .map(|(n, r)| (n.clone(), r["revision"].as_i64().unwrap_or(0)))
            .collect::<Vec<_>>()
    );
    Ok(())
}

/// The NodeImage lifecycle, run by the installed (cluster-wide) controller: the real
/// node's NodeImage exists and is owned by its Node; a NodeImage whose node does not exist
/// is deleted, one labelled `apps.kruise.io/fake-nodeimage` is kept; the tag an
/// ImagePullJob put on the node's NodeImage goes once the job is deleted.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed with the product installed (tests/testbed/up --install)"]
async fn installed_nodeimage_lifecycle_keeps_one_per_node_and_drops_orphans() -> TestResult {
    let _guard = lock().await;
    wait_installed()?;
    let node = kubectl_json(&["get", "node", NODE])?;
    wait_for("the node's NodeImage owned by its Node", ROLLOUT, || {
        let ni = kubectl_json(&["get", "nodeimage", NODE])?;
        Ok(ni["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|o| o["kind"] == "Node" && o["uid"] == node["metadata"]["uid"]))
    })?;

    let suffix = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
    let ghost = format!("ghost-{suffix}");
    let fake = format!("fake-{suffix}");
    let node_image = |name: &str, labels: Value| {
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
               "metadata": {"name": name, "labels": labels}, "spec": {}})
        .to_string()
    };
    kubectl(&["apply", "-f", "-"], Some(&node_image(&ghost, json!({}))))?;
    kubectl(
        &["apply", "-f", "-"],
        Some(&node_image(
            &fake,
            json!({"apps.kruise.io/fake-nodeimage": "true"}),
        )),
    )?;
    let gone = |name: &str| -> TestResult<bool> {
        Ok(kubectl(
            &["get", "nodeimage", name, "--ignore-not-found", "-o", "name"],
            None,
        )?
        .trim()
        .is_empty())
    };
    wait_for(
        "the NodeImage of a node that does not exist deleted",
        ROLLOUT,
        || gone(&ghost),
    )?;
    assert!(!gone(&fake)?, "a fake NodeImage is kept");
    kubectl(&["delete", "nodeimage", &fake, "--wait=false"], None)?;

    // A job's tag on the real node, then the job deleted: the tag goes.
    let ns = Namespace::create("inst-ni")?;
    let v1 = image("v1");
    let (repo, tag) = v1.rsplit_once(':').ok_or("image without a tag")?;
    ns.apply(&format!(
        "apiVersion: apps.kruise.io/v1alpha1\nkind: ImagePullJob\nmetadata:\n  name: warm\nspec:\n  image: {v1}\n  selector:\n    names: [{NODE}]\n  completionPolicy:\n    type: Always\n"
    ))?;
    let job = ns.json(&["get", "imagepulljob", "warm"])?;
    let job_uid = job["metadata"]["uid"].clone();
    let owned_by_job = || -> TestResult<bool> {
        let ni = kubectl_json(&["get", "nodeimage", NODE])?;
        Ok(ni["spec"]["images"][repo]["tags"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["tag"] == tag)
            .flat_map(|t| t["ownerReferences"].as_array().cloned().unwrap_or_default())
            .any(|o| o["uid"] == job_uid))
    };
    wait_for(
        "the job's tag on the node's NodeImage",
        ROLLOUT,
        owned_by_job,
    )?;
    ns.kubectl(&["delete", "imagepulljob", "warm"])?;
    wait_for("the deleted job's tag dropped", ROLLOUT, || {
        Ok(!owned_by_job()?)
    })?;
    Ok(())
}
