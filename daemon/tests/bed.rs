//! The daemon binary against the test bed's API server and real kubelet + containerd.
//!
//! Needs the bed up (`tests/testbed/up`; kubeconfig at
//! `${INPLACE_TESTBED_DIR:-/var/tmp/inplace-testbed}/kubeconfig`, node `inplace-node-0`,
//! the CRDs applied) and, for the restart test, root + the testkit packages.
//! Run: cargo test -p inplace-daemon --test bed -- --ignored --test-threads=1
//!
//! The tests that need only "a daemon on the real node" use the installed DaemonSet's pod
//! when `INPLACE_E2E_INSTALLED=1` (after `tests/testbed/up --install`; its log read through
//! the API server, its metrics at its host port, counted from where they stood when the test
//! began); otherwise they start the daemon binary. The tests named `host_…` start processes
//! of their own (the reason is written at each) and run with the product not installed
//! (`tests/run-all` runs them first).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use inplace_daemon::api::{ContainerRecreateRequest, CrrPhase, NodeImage, TagPhase};
use inplace_daemon::cri::CriClient;
use inplace_daemon::inplace::runtime_containers;
use inplace_testkit::bed::dir as bed_dir;
use inplace_testkit::containerd::{Fixture, SlowProxy, free_port, remove_sandbox};
use inplace_testkit::freezable_proxy::FreezableProxy;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NODE: &str = "inplace-node-0";
const REGISTRY: &str = "127.0.0.1:5000";

async fn client() -> kube::Client {
    inplace_testkit::bed::client().await.unwrap()
}

fn bed_cri() -> CriClient {
    CriClient::new(
        &bed_dir().join("containerd/containerd.sock"),
        Duration::from_secs(10),
    )
    .unwrap()
}

struct Daemon {
    /// The daemon binary this test started; `None`: the installed DaemonSet's pod
    /// `installed_pod`.
    child: Option<Child>,
    port: u16,
    log: PathBuf,
    installed_pod: String,
    /// `/metrics` when the test took the daemon over: the installed one has served the
    /// tests before (a child starts from nothing).
    metrics_at_start: String,
}

/// Whether the tests use the installed daemon (see the module's documentation).
fn installed_mode() -> bool {
    std::env::var("INPLACE_E2E_INSTALLED").is_ok_and(|v| v == "1")
}

/// The installed daemon's host port (deploy/daemon/daemonset.yaml).
const INSTALLED_DAEMON_PORT: u16 = 10231;

/// The value of the series `series` (name and labels, as printed) in the metrics `text`;
/// 0 if it is not there.
fn series_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

impl Daemon {
    /// "A daemon on the real node": the installed one's pod on [`NODE`] once Ready, in
    /// [`installed_mode`]; else [`Self::start`] of the binary on the bed's containerd.
    async fn on_the_node(c: &kube::Client, tag: &str) -> Daemon {
        if !installed_mode() {
            return Self::start(NODE, &bed_dir().join("containerd/containerd.sock"), tag);
        }
        let pods: Api<Pod> = Api::namespaced(c.clone(), "inplace-system");
        let t0 = Instant::now();
        let pod = loop {
            let list = pods
                .list(
                    &kube::api::ListParams::default().labels("app.kubernetes.io/component=daemon"),
                )
                .await
                .unwrap();
            let ready = list.items.into_iter().find(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(NODE)
                    && p.metadata.deletion_timestamp.is_none()
                    && condition(p, "Ready").as_deref() == Some("True")
            });
            if let Some(p) = ready {
                break p.metadata.name.unwrap_or_default();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(180),
                "no Ready installed daemon pod on {NODE} (tests/testbed/up --install)"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let mut d = Daemon {
            child: None,
            port: INSTALLED_DAEMON_PORT,
            log: PathBuf::new(),
            installed_pod: pod,
            metrics_at_start: String::new(),
        };
        d.wait_healthy().await;
        d.metrics_at_start = d.get("/metrics").await;
        d
    }

    /// How much the counter `series` grew since the test took the daemon over, and the
    /// metrics now (for a failure message).
    async fn increase(&self, series: &str) -> (f64, String) {
        let now = self.get("/metrics").await;
        (
            series_value(&now, series) - series_value(&self.metrics_at_start, series),
            now,
        )
    }

    fn start(node: &str, cri: &std::path::Path, tag: &str) -> Daemon {
        Self::start_through(node, cri, tag, &bed_dir().join("kubeconfig"))
    }

    /// [`Self::start`], reaching the API server through the kubeconfig `kubeconfig`.
    fn start_through(
        node: &str,
        cri: &std::path::Path,
        tag: &str,
        kubeconfig: &std::path::Path,
    ) -> Daemon {
        Self::start_with_args(node, cri, tag, kubeconfig, &[])
    }

    /// [`Self::start_through`], with `extra` arguments.
    fn start_with_args(
        node: &str,
        cri: &std::path::Path,
        tag: &str,
        kubeconfig: &std::path::Path,
        extra: &[std::ffi::OsString],
    ) -> Daemon {
        let port = free_port().unwrap();
        let log =
            std::env::temp_dir().join(format!("inplace-daemon-{tag}-{}.log", std::process::id()));
        let f = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_inplace-daemon"))
            .env("NODE_NAME", node)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .arg("--cri-endpoint")
            .arg(cri)
            .arg("--addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--poll-interval-ms")
            .arg("200")
            .args(extra)
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Daemon {
            child: Some(child),
            port,
            log,
            installed_pod: String::new(),
            metrics_at_start: String::new(),
        }
    }

    async fn get(&self, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await else {
            return String::new();
        };
        let _ = s
            .write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .await;
        let mut b = Vec::new();
        let _ = s.read_to_end(&mut b).await;
        String::from_utf8_lossy(&b).into_owned()
    }

    async fn wait_healthy(&self) {
        let t0 = Instant::now();
        loop {
            let r = self.get("/healthz").await;
            if r.starts_with("HTTP/1.0 200") || r.starts_with("HTTP/1.1 200") {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "daemon not healthy: {r}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The child's output, or the installed pod's log (pods/log through the API server).
    fn logs(&self) -> String {
        if self.child.is_some() {
            return std::fs::read_to_string(&self.log).unwrap_or_default();
        }
        let kubectl = std::env::var("INPLACE_KUBECTL").unwrap_or_else(|_| "kubectl".into());
        Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(bed_dir().join("kubeconfig"))
            .args(["-n", "inplace-system", "logs", &self.installed_pod])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Kills the child (a test that kills the daemon starts its own).
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

struct TestNs {
    api: Api<Namespace>,
    name: String,
}

impl TestNs {
    async fn new(c: &kube::Client) -> TestNs {
        let name = format!("inplace-daemon-t-{:08x}", rand::random::<u32>());
        let api: Api<Namespace> = Api::all(c.clone());
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
        TestNs { api, name }
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        let api = self.api.clone();
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let _ = api.delete(&name, &DeleteParams::default()).await;
            });
        })
        .join();
    }
}

fn condition(p: &Pod, t: &str) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)
        .map(|c| c.status.clone())
}

async fn wait_pod(
    api: &Api<Pod>,
    name: &str,
    what: &str,
    limit: Duration,
    ok: impl Fn(&Pod) -> bool,
) -> Pod {
    wait_pod_every(api, name, what, limit, Duration::from_millis(100), ok).await
}

/// [`wait_pod`], reading the pod every `every` (`ok` sees each version read).
async fn wait_pod_every(
    api: &Api<Pod>,
    name: &str,
    what: &str,
    limit: Duration,
    every: Duration,
    ok: impl Fn(&Pod) -> bool,
) -> Pod {
    let t0 = Instant::now();
    loop {
        let p = api.get(name).await.unwrap();
        if ok(&p) {
            return p;
        }
        assert!(
            t0.elapsed() < limit,
            "{what}: not within {limit:?}: {:#?}",
            p.status
        );
        tokio::time::sleep(every).await;
    }
}

/// Creates `pod` and waits until all its containers have started.
async fn create_started(pods: &Api<Pod>, pod: Pod) -> Pod {
    let name = pod.metadata.name.clone().unwrap_or_default();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_pod(
        pods,
        &name,
        "pod running",
        Duration::from_secs(90),
        all_started,
    )
    .await
}

fn all_started(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            !cs.is_empty()
                && cs
                    .iter()
                    .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
}

fn container_id(p: &Pod, name: &str) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == name))
        .and_then(|c| c.container_id.clone())
        .unwrap_or_default()
}

fn restart_count(p: &Pod, name: &str) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == name))
        .map(|c| c.restart_count)
        .unwrap_or(-1)
}

/// Fails when `p` is Ready while its status still names the container `old_id` that ran
/// before the update.
fn assert_not_ready_on(p: &Pod, old_id: &str) {
    assert!(
        condition(p, "Ready").as_deref() != Some("True") || container_id(p, "main") != old_id,
        "Ready on the old container {old_id}'s status: {:#?}",
        p.status
    );
}

async fn set_not_ready(api: &Api<Pod>, name: &str) {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": [{"type": "InPlaceUpdateReady", "status": "False",
            "reason": "StartInPlaceUpdate", "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}]}})),
    )
    .await
    .unwrap();
}

/// What the controller writes to start an in-place update of container `main` of pod
/// `name` to `image` (revision `rev-2`): the revision label, the update state recording
/// the old image id, and the new image.
async fn start_image_update(pods: &Api<Pod>, name: &str, old_image_id: &str, image: &str) {
    let state = json!({"revision": "rev-2", "updateTimestamp": k8s_openapi::jiff::Timestamp::now().to_string(),
        "lastContainerStatuses": {"main": {"imageID": old_image_id}}, "updateImages": true});
    pods.patch(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({
            "metadata": {"labels": {"controller-revision-hash": "rev-2"},
                         "annotations": {"apps.kruise.io/inplace-update-state": state.to_string()}},
            "spec": {"containers": [{"name": "main", "image": image}]}
        })),
    )
    .await
    .unwrap();
}

fn pod_json(name: &str, containers: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"controller-revision-hash": "rev-1", "x": "1"}},
        "spec": {
            "nodeName": NODE,
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 5,
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "containers": containers
        }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the test bed (tests/testbed/up)"]
async fn image_update_is_ready_only_after_the_new_container_runs() {
    let c = client().await;
    let ns = TestNs::new(&c).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let cri = bed_cri();
    let v1 = format!("{REGISTRY}/inplace-test/app:v1");
    let v2 = format!("{REGISTRY}/inplace-test/app:v2");
    let p = create_started(
        &pods,
        pod_json("ip", json!([{"name": "main", "image": v1}])),
    )
    .await;
    let uid = p.metadata.uid.clone().unwrap();
    let old_id = container_id(&p, "main");
    let old_image_id = p
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .image_id
        .clone();
    // the new image is on the node already (a pre-download would have done this)
    cri.pull_image(&v2, None, None, Duration::from_secs(60))
        .await
        .unwrap();
    let v2_id = cri.image_status(&v2).await.unwrap().unwrap().id;

    set_not_ready(&pods, "ip").await;
    let d = Daemon::on_the_node(&c, "inplace").await;
    d.wait_healthy().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let p = pods.get("ip").await.unwrap();
    assert_eq!(
        condition(&p, "InPlaceUpdateReady").as_deref(),
        Some("False"),
        "daemon must not touch a pod without update state"
    );

    // The kubelet has taken the False condition in (the samples below fail on Ready with
    // the old container).
    wait_pod(&pods, "ip", "not Ready", Duration::from_secs(30), |p| {
        condition(p, "Ready").as_deref() == Some("False")
    })
    .await;
    let t_patch = Instant::now();
    start_image_update(&pods, "ip", &old_image_id, &v2).await;

    let mut samples_false_with_old = 0;
    let t0 = Instant::now();
    let done = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "not marked ready in 60 s\n{}",
            d.logs()
        );
        let p = pods.get("ip").await.unwrap();
        assert_not_ready_on(&p, &old_id);
        let rc = runtime_containers(&cri, &uid).await.unwrap();
        let newest = rc
            .iter()
            .filter(|c| c.name == "main")
            .max_by_key(|c| (c.attempt, c.created_at))
            .cloned();
        match condition(&p, "InPlaceUpdateReady").as_deref() {
            Some("True") => break (p, newest),
            _ => {
                if newest.as_ref().is_some_and(|n| n.image_ref != v2_id) {
                    samples_false_with_old += 1;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (p, newest) = done;
    let newest = newest.unwrap();
    println!(
        "InPlaceUpdateReady=True {:.2}s after the image patch; {samples_false_with_old} samples saw False while the old container ran",
        t_patch.elapsed().as_secs_f64()
    );
    assert!(
        newest.running,
        "ready was set while the new container was not running"
    );
    assert_eq!(
        newest.image_ref, v2_id,
        "ready was set while the old image ran"
    );
    assert_ne!(format!("containerd://{}", newest.id), old_id);
    let st: serde_json::Value = serde_json::from_str(
        &p.metadata.annotations.as_ref().unwrap()["apps.kruise.io/inplace-update-state"],
    )
    .unwrap();
    assert_eq!(
        st["daemonContainerIDs"]["main"],
        format!("containerd://{}", newest.id)
    );
    assert_eq!(st["revision"], "rev-2", "controller's keys kept");
    // the kubelet keeps the other conditions; Ready follows, never on the old container's
    // status (the daemon may complete before the kubelet reports the new container)
    let (limit, every) = (Duration::from_secs(30), Duration::from_millis(20));
    let p = wait_pod_every(&pods, "ip", "Ready", limit, every, |p| {
        assert_not_ready_on(p, &old_id);
        condition(p, "Ready").as_deref() == Some("True")
    })
    .await;
    assert_eq!(
        container_id(&p, "main"),
        format!("containerd://{}", newest.id)
    );
    println!(
        "Ready {:.2}s after the image patch",
        t_patch.elapsed().as_secs_f64()
    );
    let (n, m) = d
        .increase("inplace_daemon_inplace_updates_completed_total")
        .await;
    assert_eq!(n, 1.0, "counted by this test: {m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the test bed (tests/testbed/up)"]
async fn env_from_metadata_change_restarts_the_container() {
    let c = client().await;
    let ns = TestNs::new(&c).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let v1 = format!("{REGISTRY}/inplace-test/app:v1");
    let p = create_started(&pods, pod_json("env", json!([
            {"name": "main", "image": v1,
             "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['x']"}}}]},
            {"name": "other", "image": v1, "env": [{"name": "PORT", "value": "8081"}]}
        ]))).await;
    let old_main = container_id(&p, "main");
    let old_other = container_id(&p, "other");
    set_not_ready(&pods, "env").await;
    let d = Daemon::on_the_node(&c, "env").await;
    d.wait_healthy().await;
    let state = json!({"revision": "rev-2", "updateTimestamp": k8s_openapi::jiff::Timestamp::now().to_string(),
        "lastContainerStatuses": {}, "updateEnvFromMetadata": true});
    pods.patch(
        "env",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"labels": {"controller-revision-hash": "rev-2", "x": "2"},
            "annotations": {"apps.kruise.io/inplace-update-state": state.to_string()}}}),
        ),
    )
    .await
    .unwrap();
    let p = wait_pod(
        &pods,
        "env",
        "InPlaceUpdateReady",
        Duration::from_secs(60),
        |p| condition(p, "InPlaceUpdateReady").as_deref() == Some("True"),
    )
    .await;
    assert_eq!(condition(&p, "InPlaceUpdateReady").as_deref(), Some("True"));
    // the kubelet reports the restart in pod status a moment later
    let p = wait_pod(
        &pods,
        "env",
        "main restarted",
        Duration::from_secs(30),
        |p| restart_count(p, "main") == 1,
    )
    .await;
    assert_ne!(
        container_id(&p, "main"),
        old_main,
        "main not restarted\n{}",
        d.logs()
    );
    assert_eq!(
        container_id(&p, "other"),
        old_other,
        "other must not be touched"
    );
    assert_eq!(restart_count(&p, "other"), 0);
    let (n, m) = d
        .increase("inplace_daemon_container_restarts_total{reason=\"env-from-metadata\"}")
        .await;
    assert_eq!(n, 1.0, "counted by this test: {m}");
}

/// The request `name`, active as the controller leaves it for the daemon, to recreate the
/// container `container` of the started pod `p`.
fn one_container_crr(
    name: &str,
    p: &Pod,
    container: &str,
    min_started_seconds: u32,
    active_deadline_seconds: u32,
) -> ContainerRecreateRequest {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
        "metadata": {"name": name, "labels": {
            "crr.apps.kruise.io/node-name": NODE, "crr.apps.kruise.io/active": "true",
            "crr.apps.kruise.io/pod-uid": p.metadata.uid.clone().unwrap()}},
        "spec": {"podName": p.metadata.name.clone().unwrap(),
            "containers": [{"name": container, "statusContext": {"containerID": container_id(p, container), "restartCount": 0}}],
            "strategy": {"minStartedSeconds": min_started_seconds},
            "activeDeadlineSeconds": active_deadline_seconds}
    }))
    .unwrap()
}

/// The request `name` once Completed (within 90 s).
async fn wait_completed(
    crrs: &Api<ContainerRecreateRequest>,
    name: &str,
    d: &Daemon,
) -> ContainerRecreateRequest {
    let t0 = Instant::now();
    loop {
        let r = crrs.get(name).await.unwrap();
        if r.phase() == CrrPhase::Completed {
            return r;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "CRR {name} not completed: {:#?}\n{}",
            r.status,
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the test bed (tests/testbed/up)"]
async fn crr_recreates_exactly_the_named_containers() {
    let c = client().await;
    let ns = TestNs::new(&c).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let v1 = format!("{REGISTRY}/inplace-test/app:v1");
    let p = create_started(&pods, pod_json("crr", json!([
            {"name": "a", "image": v1, "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
             "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "echo bye from $(cat /etc/version) > /shared/prestop"]}}}},
            {"name": "b", "image": v1, "env": [{"name": "PORT", "value": "8081"}],
             "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]},
            {"name": "c", "image": v1, "env": [{"name": "PORT", "value": "8082"}]}
        ]))).await;
    let uid = p.metadata.uid.clone().unwrap();
    let d = Daemon::on_the_node(&c, "crr").await;
    d.wait_healthy().await;
    let crrs: Api<ContainerRecreateRequest> = Api::namespaced(c.clone(), &ns.name);
    let ctx = |n: &str| json!({"containerID": container_id(&p, n), "restartCount": 0});
    let crr: ContainerRecreateRequest = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
        "metadata": {"name": "r1", "labels": {
            "crr.apps.kruise.io/node-name": NODE, "crr.apps.kruise.io/active": "true", "crr.apps.kruise.io/pod-uid": uid}},
        "spec": {"podName": "crr",
            "containers": [
                // A hook in the request is never run: only the pod's own (above).
                {"name": "a", "statusContext": ctx("a"),
                 "preStop": {"exec": {"command": ["/bin/sh", "-c", "touch /shared/from-request"]}}},
                {"name": "c", "statusContext": ctx("c")}],
            "strategy": {"orderedRecreate": true, "minStartedSeconds": 1},
            "activeDeadlineSeconds": 120}
    }))
    .unwrap();
    crrs.create(&PostParams::default(), &crr).await.unwrap();
    let t0 = Instant::now();
    let done = wait_completed(&crrs, "r1", &d).await;
    println!(
        "CRR completed in {:.1}s: {}",
        t0.elapsed().as_secs_f64(),
        serde_json::to_string(&done.status).unwrap()
    );
    let st = done.status.unwrap();
    assert_eq!(st.message, "");
    let phases: BTreeMap<String, (CrrPhase, bool)> = st
        .container_recreate_states
        .iter()
        .map(|s| (s.name.clone(), (s.phase, s.is_killed)))
        .collect();
    assert_eq!(
        phases,
        BTreeMap::from([
            ("a".into(), (CrrPhase::Succeeded, true)),
            ("c".into(), (CrrPhase::Succeeded, true))
        ])
    );
    let p = wait_pod(
        &pods,
        "crr",
        "restart counts",
        Duration::from_secs(30),
        |p| restart_count(p, "a") == 1 && restart_count(p, "c") == 1,
    )
    .await;
    assert_eq!(restart_count(&p, "b"), 0, "b was not named");
    // preStop ran in a before the stop: b (untouched, same emptyDir) sees its file
    let cri = bed_cri();
    let b_id = container_id(&p, "b").replace("containerd://", "");
    let out = cri
        .exec_sync(
            &b_id,
            vec!["cat".into(), "/shared/prestop".into()],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "bye from v1");
    let from_request = cri
        .exec_sync(
            &b_id,
            vec!["ls".into(), "/shared".into()],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&from_request.stdout).trim(),
        "prestop",
        "only the pod's preStop ran"
    );
    // orderedRecreate: c's new instance was created only after a's had run minStartedSeconds
    let rc = runtime_containers(&cri, &uid).await.unwrap();
    let newest = |n: &str| {
        rc.iter()
            .filter(|c| c.name == n)
            .max_by_key(|c| c.attempt)
            .cloned()
            .unwrap()
    };
    let (a1, c1) = (newest("a"), newest("c"));
    assert_eq!((a1.attempt, c1.attempt), (1, 1));
    assert!(
        c1.created_at >= a1.created_at + 1_000_000_000,
        "c recreated {} ms after a",
        (c1.created_at - a1.created_at) / 1_000_000
    );
    let (n, m) = d
        .increase("inplace_daemon_container_restarts_total{reason=\"crr\"}")
        .await;
    assert_eq!(n, 2.0, "counted by this test: {m}");
}

/// A preStop hook that fails does not keep the request from recreating its container, as
/// in the kubelet's `KillContainer` that OpenKruise's daemon calls: the container is
/// stopped all the same (restarted once, the request Succeeded), and the failure is the
/// Warning `FailedPreStopHook` on the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the test bed (tests/testbed/up)"]
async fn a_failing_pre_stop_hook_does_not_keep_a_crr_from_recreating() {
    let c = client().await;
    let ns = TestNs::new(&c).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let v1 = format!("{REGISTRY}/inplace-test/app:v1");
    let p = create_started(&pods, pod_json("hookfail", json!([
            {"name": "a", "image": v1,
             "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "echo drain refused >&2; exit 3"]}}}}
        ]))).await;
    let d = Daemon::on_the_node(&c, "crr-hook").await;
    d.wait_healthy().await;
    let crrs: Api<ContainerRecreateRequest> = Api::namespaced(c.clone(), &ns.name);
    crrs.create(
        &PostParams::default(),
        &one_container_crr("r1", &p, "a", 1, 120),
    )
    .await
    .unwrap();
    let done = wait_completed(&crrs, "r1", &d).await;
    let st = done.status.unwrap();
    let phases: Vec<(String, CrrPhase, bool)> = st
        .container_recreate_states
        .iter()
        .map(|s| (s.name.clone(), s.phase, s.is_killed))
        .collect();
    assert_eq!(
        phases,
        vec![("a".into(), CrrPhase::Succeeded, true)],
        "{st:?}"
    );
    wait_pod(
        &pods,
        "hookfail",
        "restart count 1",
        Duration::from_secs(30),
        |p| restart_count(p, "a") == 1,
    )
    .await;
    // The Warning on the pod, with the hook's own words.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(c.clone(), &ns.name);
    let t0 = Instant::now();
    let warning = loop {
        let found = events
            .list(&kube::api::ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("FailedPreStopHook")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("hookfail")
            });
        if let Some(e) = found {
            break e;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no FailedPreStopHook event\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    let note = warning.note.unwrap_or_default();
    assert!(
        note.contains("preStop hook of container a failed"),
        "{note}"
    );
    assert!(
        note.contains("exited 3") && note.contains("drain refused"),
        "{note}"
    );
}

/// Host process: kills its daemon mid-pull and starts another, on a fixture containerd
/// behind a slow registry proxy (fixtures the cluster cannot give).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the test bed (tests/testbed/up) + root for the fixture containerd"]
async fn host_daemon_killed_mid_pull_finishes_after_restart() {
    let c = client().await;
    let fx = Fixture::start().unwrap();
    let refs = fx.push_bulk("restart", 1, 24 * 1024).unwrap();
    let proxy = SlowProxy::start(&fx.registry, Duration::from_secs(2))
        .await
        .unwrap();
    fx.allow_http(&proxy.addr).unwrap();
    let image = refs[0]
        .replace(&fx.registry, &proxy.addr)
        .trim_end_matches(":v1")
        .to_string();
    let node = format!("inplace-daemon-t-{:08x}", rand::random::<u32>());
    let nis: Api<NodeImage> = Api::all(c.clone());
    let ni: NodeImage = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
        "metadata": {"name": node},
        "spec": {"images": {image.clone(): {"tags": [{"tag": "v1", "version": 1,
            "pullPolicy": {"timeoutSeconds": 120, "backoffLimit": 2}}]}}}
    }))
    .unwrap();
    nis.create(&PostParams::default(), &ni).await.unwrap();
    struct Cleanup(Api<NodeImage>, String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let (api, name) = (self.0.clone(), self.1.clone());
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let _ = api.delete(&name, &DeleteParams::default()).await;
                });
            })
            .join();
        }
    }
    let _cleanup = Cleanup(nis.clone(), node.clone());

    let tag_status = |n: &NodeImage| n.tag_status(&image, "v1").cloned();
    let mut d1 = Daemon::start(&node, &fx.socket, "pull1");
    let t0 = Instant::now();
    let pulling = loop {
        let n = nis.get(&node).await.unwrap();
        if let Some(t) = tag_status(&n).filter(|t| t.phase == TagPhase::Pulling) {
            break t;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "never Pulling: {:?}\n{}",
            n.status,
            d1.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    d1.kill();
    let n = nis.get(&node).await.unwrap();
    let after_kill = tag_status(&n).unwrap();
    assert_eq!(
        after_kill.phase,
        TagPhase::Pulling,
        "killed before the pull could finish"
    );
    println!(
        "killed daemon 1 while {image}:v1 was Pulling since {:?}",
        pulling.start_time
    );

    let d2 = Daemon::start(&node, &fx.socket, "pull2");
    let t1 = Instant::now();
    let done = loop {
        let n = nis.get(&node).await.unwrap();
        if tag_status(&n).is_some_and(|t| t.phase.is_finished()) {
            break n;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(90),
            "not finished after restart: {:?}\n{}",
            n.status,
            d2.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let s = done.status.clone().unwrap();
    let t = tag_status(&done).unwrap();
    println!("after restart: {}", serde_json::to_string(&s).unwrap());
    assert_eq!(t.phase, TagPhase::Succeeded, "{t:?}");
    assert_eq!(
        t.start_time, pulling.start_time,
        "the start of the interrupted pull is kept"
    );
    assert!(t.completion_time.is_some());
    assert_eq!(t.version, 1);
    assert!(
        t.image_id.starts_with(&format!("{image}@sha256:")),
        "{}",
        t.image_id
    );
    assert_eq!(
        (s.desired, s.succeeded, s.pulling, s.waiting, s.failed),
        (1, 1, 0, 0, 0)
    );
    let cri = CriClient::new(&fx.socket, Duration::from_secs(5)).unwrap();
    assert!(
        cri.image_status(&format!("{image}:v1"))
            .await
            .unwrap()
            .is_some()
    );
}

/// A request's status decided from a request that changed meanwhile is refused (409), and
/// the daemon reads the request again and decides anew. The daemon reaches the API server
/// through a proxy, frozen while the daemon has a write due (the recreated container must
/// run `minStartedSeconds` before the request completes); the request is annotated by
/// hand meanwhile, so the completion the proxy holds names a resourceVersion the API
/// server no longer has. Thawed: 409, counted; the request completes all the same and
/// the hand-made change stays.
///
/// Host process: its daemon reaches the API server through a freezable proxy (a fixture the
/// cluster cannot give: the test freezes the daemon's view).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the test bed (tests/testbed/up)"]
async fn host_a_crr_status_from_a_stale_request_is_refused_and_decided_again() {
    let c = client().await;
    let ns = TestNs::new(&c).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let v1 = format!("{REGISTRY}/inplace-test/app:v1");
    let p = create_started(
        &pods,
        pod_json("stale", json!([{"name": "a", "image": v1}])),
    )
    .await;
    let proxy = FreezableProxy::start(&bed_dir().join("kubeconfig"))
        .await
        .unwrap();
    let d = Daemon::start_through(
        NODE,
        &bed_dir().join("containerd/containerd.sock"),
        "stale",
        proxy.kubeconfig(),
    );
    d.wait_healthy().await;
    let crrs: Api<ContainerRecreateRequest> = Api::namespaced(c.clone(), &ns.name);
    crrs.create(
        &PostParams::default(),
        &one_container_crr("r1", &p, "a", 15, 300),
    )
    .await
    .unwrap();
    // The container is recreated and running, and the request says it was stopped: the
    // daemon has to write the completion once minStartedSeconds have passed.
    wait_pod(
        &pods,
        "stale",
        "container a recreated and running",
        Duration::from_secs(60),
        |p| restart_count(p, "a") == 1 && all_started(p),
    )
    .await;
    let t0 = Instant::now();
    loop {
        let r = crrs.get("r1").await.unwrap();
        let st = r.status.clone().unwrap_or_default();
        let killed = st
            .container_recreate_states
            .iter()
            .any(|s| s.name == "a" && s.is_killed);
        if st.phase == CrrPhase::Recreating && killed {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the request does not show the stop: {:#?}\n{}",
            r.status,
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.freeze();
    let seen = crrs.get("r1").await.unwrap();
    let touched = crrs
        .patch(
            "r1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"inplace.test/touched": "by-hand"}}}),
            ),
        )
        .await
        .unwrap();
    assert_ne!(
        seen.metadata.resource_version, touched.metadata.resource_version,
        "the annotation gave the request a new resourceVersion"
    );
    let t1 = Instant::now();
    while proxy.held_from_client() == 0 {
        assert!(
            t1.elapsed() < Duration::from_secs(60),
            "the daemon sent nothing while cut off\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(
        crrs.get("r1").await.unwrap().phase(),
        CrrPhase::Completed,
        "no write of the daemon landed while it was cut off"
    );
    proxy.thaw();
    let t2 = Instant::now();
    let done = loop {
        let r = crrs.get("r1").await.unwrap();
        if r.phase() == CrrPhase::Completed {
            break r;
        }
        assert!(
            t2.elapsed() < Duration::from_secs(60),
            "request not completed: {:#?}\n{}",
            r.status,
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let st = done.status.clone().unwrap();
    assert_eq!(st.message, "");
    assert_eq!(
        st.container_recreate_states
            .iter()
            .map(|s| (s.name.as_str(), s.phase, s.is_killed))
            .collect::<Vec<_>>(),
        vec![("a", CrrPhase::Succeeded, true)]
    );
    assert_eq!(
        done.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("inplace.test/touched"))
            .map(String::as_str),
        Some("by-hand"),
        "the hand-made change stays"
    );
    let m = d.get("/metrics").await;
    assert!(
        m.lines()
            .find(|l| l.starts_with("inplace_daemon_status_writes_total{result=\"conflict\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(|n| n >= 1.0),
        "no conflict counted:\n{m}"
    );
    assert!(
        d.logs()
            .contains("the request changed since it was read: reading it again and deciding anew"),
        "{}",
        d.logs()
    );
    // stopped once: the decision made again did not stop the new instance
    assert!(
        m.contains("inplace_daemon_container_restarts_total{reason=\"crr\"} 1"),
        "{m}"
    );
    let p = pods.get("stale").await.unwrap();
    assert_eq!(restart_count(&p, "a"), 1);
}

/// Requests for different pods of the node proceed at once; those of one pod one after
/// another. Every container has a 6 s preStop: pod `pa` gets two requests (one for each
/// of its containers), pod `pb` one, all created together. `pb`'s container is recreated
/// while `pa`'s first request is still in its preStop (one request at a time per node
/// would have made it wait those 6 s), and `pa`'s second request stops its container only
/// after the first one completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the test bed (tests/testbed/up)"]
async fn crrs_of_different_pods_run_at_once_and_of_one_pod_in_order() {
    const PRE_STOP_SECONDS: i64 = 6;
    let c = client().await;
    let ns = TestNs::new(&c).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let v1 = format!("{REGISTRY}/inplace-test/app:v1");
    let pre_stop = json!({"preStop": {"exec": {"command": ["/bin/sh", "-c", format!("sleep {PRE_STOP_SECONDS}")]}}});
    for (name, containers) in [
        (
            "pa",
            json!([{"name": "a", "image": v1, "lifecycle": pre_stop},
                   {"name": "b", "image": v1, "env": [{"name": "PORT", "value": "8081"}], "lifecycle": pre_stop}]),
        ),
        (
            "pb",
            json!([{"name": "a", "image": v1, "lifecycle": pre_stop}]),
        ),
    ] {
        let mut pod = pod_json(name, containers);
        if let Some(spec) = pod.spec.as_mut() {
            spec.termination_grace_period_seconds = Some(20);
        }
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let mut started = BTreeMap::new();
    for name in ["pa", "pb"] {
        let p = wait_pod(
            &pods,
            name,
            "pod running",
            Duration::from_secs(90),
            all_started,
        )
        .await;
        started.insert(name, p);
    }
    let d = Daemon::on_the_node(&c, "crr-par").await;
    d.wait_healthy().await;
    let crrs: Api<ContainerRecreateRequest> = Api::namespaced(c.clone(), &ns.name);
    let t0 = Instant::now();
    for (crr, pod, container) in [("r-a1", "pa", "a"), ("r-a2", "pa", "b"), ("r-b", "pb", "a")] {
        let r = one_container_crr(crr, &started[pod], container, 1, 300);
        crrs.create(&PostParams::default(), &r).await.unwrap();
    }
    // when each request was first seen Completed
    let mut done: BTreeMap<&str, Duration> = BTreeMap::new();
    while done.len() < 3 {
        for name in ["r-a1", "r-a2", "r-b"] {
            if !done.contains_key(name)
                && crrs.get(name).await.unwrap().phase() == CrrPhase::Completed
            {
                done.insert(name, t0.elapsed());
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "requests not completed: {done:?}\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("completed after (s): {done:?}");
    let cri = bed_cri();
    // when the new instance (attempt 1) of each pod's container was created, in ns
    let mut created: BTreeMap<(&str, String), i64> = BTreeMap::new();
    for name in ["pa", "pb"] {
        let uid = started[name].metadata.uid.clone().unwrap();
        for c in runtime_containers(&cri, &uid).await.unwrap() {
            assert!(c.attempt <= 1, "{name}/{} recreated twice", c.name);
            if c.attempt == 1 {
                created.insert((name, c.name.clone()), c.created_at);
            }
        }
    }
    println!("recreated (ns since the epoch): {created:?}");
    let at = |pod: &str, container: &str| -> i64 {
        created
            .get(&(pod, container.to_owned()))
            .copied()
            .unwrap_or_else(|| panic!("{pod}/{container} not recreated: {created:?}"))
    };
    let secs = |ns: i64| ns as f64 / 1e9;
    // different pods at once: pb's container was recreated within the preStop of pa's
    // first request (in turn, it would have come at least PRE_STOP_SECONDS later)
    let apart = secs((at("pb", "a") - at("pa", "a")).abs());
    assert!(
        apart < (PRE_STOP_SECONDS as f64) / 2.0,
        "pa and pb recreated {apart:.1}s apart: one after the other\n{}",
        d.logs()
    );
    // one pod in order: pa's second request ran its preStop only after the first request's
    // new instance had run minStartedSeconds
    let gap = secs(at("pa", "b") - at("pa", "a"));
    assert!(
        gap >= (PRE_STOP_SECONDS + 1) as f64,
        "pa's second recreate {gap:.1}s after its first\n{}",
        d.logs()
    );
    assert!(done["r-a2"] > done["r-a1"], "{done:?}");
    // both first requests took their preStop, and together not much longer than one
    assert!(
        done["r-b"] >= Duration::from_secs(PRE_STOP_SECONDS as u64),
        "{done:?}"
    );
    assert!(
        done["r-b"].max(done["r-a1"]) < Duration::from_secs(2 * PRE_STOP_SECONDS as u64),
        "{done:?}"
    );
    let (n, m) = d
        .increase("inplace_daemon_container_restarts_total{reason=\"crr\"}")
        .await;
    assert_eq!(n, 3.0, "counted by this test: {m}");
}

/// The image a pod's container `name` runs, as the kubelet reports it, once running.
fn running_image_id(p: &Pod, name: &str) -> Option<String> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name && c.state.as_ref().is_some_and(|s| s.running.is_some()))
        .map(|c| c.image_id.clone())
}

/// A daemon that starts when an in-place update is already under way on its node, the
/// pod's new container started by the kubelet while no daemon ran (a daemon upgrade, a
/// crash): the update ends, with nothing restarted again. With `reboot`, the pod's sandbox
/// is also removed with every container in it before the daemon starts (what a node
/// reboot leaves: the kubelet makes a new sandbox and starts them all again, the app's
/// with the new image).
///
/// Host process: no daemon may run on the node until the test starts its own (the
/// product is not installed in the host phase).
async fn a_daemon_started_mid_update_completes_it(reboot: bool) {
    let c = client().await;
    let ns = TestNs::new(&c).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns.name);
    let cri = bed_cri();
    let v1 = format!("{REGISTRY}/inplace-test/app:v1");
    let v2 = format!("{REGISTRY}/inplace-test/app:v2");
    let p = create_started(
        &pods,
        pod_json(
            "cold",
            json!([{"name": "main", "image": v1}, {"name": "side", "image": v1}]),
        ),
    )
    .await;
    let uid = p.metadata.uid.clone().unwrap();
    let old_image_id = running_image_id(&p, "main").unwrap();
    cri.pull_image(&v2, None, None, Duration::from_secs(60))
        .await
        .unwrap();
    set_not_ready(&pods, "cold").await;

    // The controller's write, with no daemon running.
    start_image_update(&pods, "cold", &old_image_id, &v2).await;
    let p = wait_pod(
        &pods,
        "cold",
        "the kubelet runs the new image",
        Duration::from_secs(60),
        |p| running_image_id(p, "main").is_some_and(|id| id != old_image_id),
    )
    .await;
    if reboot {
        // What a reboot leaves of the pod on the node: nothing. Its sandbox is removed
        // with every container in it; the kubelet makes a new sandbox and starts them all.
        let sandboxes: std::collections::BTreeSet<String> = cri
            .list_containers(std::collections::HashMap::from([(
                inplace_daemon::inplace::POD_UID_LABEL.to_owned(),
                uid.clone(),
            )]))
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.pod_sandbox_id)
            .collect();
        assert!(!sandboxes.is_empty(), "the pod's sandbox on the node");
        let before = (container_id(&p, "main"), container_id(&p, "side"));
        for sandbox in &sandboxes {
            remove_sandbox(&cri, sandbox).await.unwrap();
        }
        wait_pod(
            &pods,
            "cold",
            "every container started again by the kubelet in a new sandbox",
            Duration::from_secs(120),
            |p| {
                all_started(p)
                    && container_id(p, "main") != before.0
                    && container_id(p, "side") != before.1
            },
        )
        .await;
    }
    let p = pods.get("cold").await.unwrap();
    assert_eq!(
        condition(&p, "InPlaceUpdateReady").as_deref(),
        Some("False"),
        "nothing completes the update while no daemon runs"
    );
    let restarts = (restart_count(&p, "main"), restart_count(&p, "side"));
    let ids = (container_id(&p, "main"), container_id(&p, "side"));

    let d = Daemon::start(NODE, &bed_dir().join("containerd/containerd.sock"), "cold");
    d.wait_healthy().await;
    let p = wait_pod(
        &pods,
        "cold",
        "InPlaceUpdateReady True from the daemon started mid-update",
        Duration::from_secs(30),
        |p| condition(p, "InPlaceUpdateReady").as_deref() == Some("True"),
    )
    .await;
    let st: serde_json::Value = serde_json::from_str(
        &p.metadata.annotations.as_ref().unwrap()["apps.kruise.io/inplace-update-state"],
    )
    .unwrap();
    assert_eq!(
        st["daemonContainerIDs"]["main"],
        ids.0,
        "completed on the container the kubelet started\n{}",
        d.logs()
    );
    // Nothing restarted by the daemon, then or a little later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = pods.get("cold").await.unwrap();
    assert_eq!(
        (restart_count(&p, "main"), restart_count(&p, "side")),
        restarts,
        "a container was restarted again\n{}",
        d.logs()
    );
    assert_eq!(
        (container_id(&p, "main"), container_id(&p, "side")),
        ids,
        "a container was replaced again\n{}",
        d.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the test bed (tests/testbed/up), and no other daemon on its node"]
async fn host_a_daemon_started_mid_update_completes_it_without_restarting_anything() {
    a_daemon_started_mid_update_completes_it(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the test bed (tests/testbed/up), and no other daemon on its node"]
async fn host_after_a_reboot_a_daemon_completes_the_update_it_did_not_see_begin() {
    a_daemon_started_mid_update_completes_it(true).await;
}

/// Deletes the named NodeImages when dropped (on a thread of its own: a test's runtime
/// may be gone by then).
struct NodeImagesCleanup(Api<NodeImage>, Vec<String>);

impl Drop for NodeImagesCleanup {
    fn drop(&mut self) {
        let (api, names) = (self.0.clone(), std::mem::take(&mut self.1));
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                for n in names {
                    let _ = api.delete(&n, &DeleteParams::default()).await;
                }
            });
        })
        .join();
    }
}

/// Writes an executable shell script.
fn write_script(path: &std::path::Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Pulls from a registry that wants a login (htpasswd), with no pull secret: only the
/// kubelet's credential provider plugins can give the daemon credentials. Three daemons
/// on the fixture's containerd, each with a NodeImage of its own asking for the image:
/// without providers the pull fails (401); with a provider whose plugin fails, it fails
/// with the plugin's error in the tag's message (which the PullImageFailed event repeats:
/// not checked here, the bed's 1.20 API server refuses the daemon's events on NodeImages,
/// a separate bug); with a plugin that
/// answers (registry in its args, user and password in its env, as the config says), it
/// succeeds, and the plugin got the kubelet's request for the image repository.
/// Then containerd's CRI itself: the same credentials with `server_address` set to the bare
/// `host:port` are refused (containerd url.Parses it), with it empty they are used, which
/// is why the daemon sends it empty, as the kubelet does.
///
/// Host process: its daemons run with the provider flags, on the fixture's containerd that
/// reaches the login registry (the installed daemon has neither).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the test bed (tests/testbed/up) + root for the fixture containerd"]
async fn host_credential_provider_plugins_log_pulls_in() {
    let c = client().await;
    let mut fx = Fixture::start().unwrap();
    let user = "node-identity";
    let password = format!("pw-{:08x}", rand::random::<u32>());
    let reg = fx.start_auth_registry(user, &password).unwrap();
    let image = format!("{reg}/inplace-test/app");

    let plugins = tempfile::tempdir().unwrap();
    let requests = plugins.path().join("requests.log");
    write_script(
        &plugins.path().join("node-identity"),
        &format!(
            r#"req=$(cat)
echo "$req" >> {requests}
printf '{{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"1m","auth":{{"%s":{{"username":"%s","password":"%s"}}}}}}' "$1" "$REG_USER" "$REG_PASSWORD""#,
            requests = requests.display()
        ),
    );
    write_script(
        &plugins.path().join("broken"),
        "cat >/dev/null; echo 'metadata server unreachable' >&2; exit 1",
    );
    let config = |provider: &str, extra: &str| {
        let path = plugins.path().join(format!("{provider}.yaml"));
        std::fs::write(
            &path,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - name: {provider}\n    matchImages: [\"{reg}\"]\n    defaultCacheDuration: 10m\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n{extra}"
            ),
        )
        .unwrap();
        let mut args: Vec<std::ffi::OsString> = vec!["--image-credential-provider-config".into()];
        args.push(path.into());
        args.push("--image-credential-provider-bin-dir".into());
        args.push(plugins.path().into());
        args
    };
    let good = config(
        "node-identity",
        &format!(
            "    args: [\"{reg}\"]\n    env:\n      - {{name: REG_USER, value: {user}}}\n      - {{name: REG_PASSWORD, value: \"{password}\"}}\n"
        ),
    );
    let broken = config("broken", "");

    let nis: Api<NodeImage> = Api::all(c.clone());
    let run = format!("{:08x}", rand::random::<u32>());
    let nodes = ["none", "broken", "good"].map(|k| format!("inplace-daemon-cp-{k}-{run}"));
    let _cleanup = NodeImagesCleanup(nis.clone(), nodes.to_vec());
    for node in &nodes {
        let ni: NodeImage = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
            // an installed controller deletes NodeImages of nodes that do not exist but these
            "metadata": {"name": node, "labels": {"apps.kruise.io/fake-nodeimage": "true"}},
            "spec": {"images": {image.clone(): {"tags": [{"tag": "v1", "version": 1,
                "pullPolicy": {"timeoutSeconds": 60, "backoffLimit": 0}}]}}}
        }))
        .unwrap();
        nis.create(&PostParams::default(), &ni).await.unwrap();
    }
    let kubeconfig = bed_dir().join("kubeconfig");
    let daemons = [
        Daemon::start_with_args(&nodes[0], &fx.socket, "cp-none", &kubeconfig, &[]),
        Daemon::start_with_args(&nodes[1], &fx.socket, "cp-broken", &kubeconfig, &broken),
        Daemon::start_with_args(&nodes[2], &fx.socket, "cp-good", &kubeconfig, &good),
    ];
    let mut outcome = Vec::new();
    for (node, d) in nodes.iter().zip(&daemons) {
        let t0 = Instant::now();
        let t = loop {
            let n = nis.get(node).await.unwrap();
            if let Some(t) = n.tag_status(&image, "v1").filter(|t| t.phase.is_finished()) {
                break t.clone();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "{node}: not finished: {:?}\n{}",
                n.status,
                d.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        println!("{node}: {:?} {:?}", t.phase, t.message);
        outcome.push(t);
    }
    let logs = |i: usize| daemons[i].logs();
    assert_eq!(outcome[0].phase, TagPhase::Failed, "{}", logs(0));
    assert!(
        outcome[0].message.to_lowercase().contains("unauthorized"),
        "no credentials, no pull: {}",
        outcome[0].message
    );
    assert_eq!(outcome[1].phase, TagPhase::Failed, "{}", logs(1));
    let broken_note = "credential provider broken: the plugin failed (exit status: 1): metadata server unreachable";
    assert!(
        outcome[1].message.contains(broken_note),
        "{}",
        outcome[1].message
    );
    assert_eq!(
        outcome[2].phase,
        TagPhase::Succeeded,
        "{:?}\n{}",
        outcome[2],
        logs(2)
    );
    assert!(
        outcome[2].image_id.starts_with(&format!("{image}@sha256:")),
        "{}",
        outcome[2].image_id
    );
    let sent: Vec<serde_json::Value> = std::fs::read_to_string(&requests)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        sent,
        [json!({"apiVersion": "credentialprovider.kubelet.k8s.io/v1",
            "kind": "CredentialProviderRequest", "image": image})],
        "one request, the kubelet's, for the repository"
    );

    // containerd's CRI and server_address
    let cri = CriClient::new(&fx.socket, Duration::from_secs(10)).unwrap();
    let auth = |server_address: &str| k8s_cri::v1::AuthConfig {
        username: user.into(),
        password: password.clone(),
        server_address: server_address.into(),
        ..Default::default()
    };
    let v2 = format!("{image}:v2");
    let bare = cri
        .pull_image(&v2, Some(auth(&reg)), None, Duration::from_secs(60))
        .await;
    let Err(bare) = bare else {
        panic!("containerd used credentials with server_address {reg:?}")
    };
    println!("server_address {reg:?}: {}", bare.runtime_message());
    assert!(
        bare.runtime_message().contains("parse server address"),
        "{}",
        bare.runtime_message()
    );
    cri.pull_image(&v2, Some(auth("")), None, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("empty server_address: {}", e.runtime_message()));
}
