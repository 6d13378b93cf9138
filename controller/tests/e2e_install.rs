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
//!   cargo test -p inplace-controller --test e2e_install -- --ignored --test-threads 1
//! tests/testbed/up --uninstall
//! ```
//!
//! The test names start with `installed_`: `tests/run-all` skips them in the suites that run
//! before the product is installed (those start their own controller and daemon, which would
//! fight with installed ones).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod e2e_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::Mutex;

use e2e_support::*;
use serde_json::{Value, json};

const SYSTEM_NS: &str = "inplace-system";
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

fn sys(args: &[&str]) -> TestResult<String> {
    let mut a = vec!["-n", SYSTEM_NS];
    a.extend(args);
    kubectl(&a, None)
}

fn sys_json(args: &[&str]) -> TestResult<Value> {
    let mut a = vec!["-n", SYSTEM_NS];
    a.extend(args);
    kubectl_json(&a)
}

fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

fn name(obj: &Value) -> String {
    obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn component_pods(component: &str) -> TestResult<Vec<Value>> {
    Ok(items(&sys_json(&[
        "get",
        "pods",
        "-l",
        &format!("app.kubernetes.io/component={component}"),
    ])?)
    .into_iter()
    .filter(|p| !pod_terminating(p))
    .collect())
}

fn lease_holder() -> TestResult<String> {
    sys(&[
        "get",
        "lease",
        "inplace-controller",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
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
        ("inplace-controller", "get secrets", Some("default"), false),
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
