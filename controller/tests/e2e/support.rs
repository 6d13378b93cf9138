//! Helpers of the end-to-end suites: the test bed's kubeconfig and kubectl, a namespace
//! per test, the controller as a child process, and waiting.
//!
//! Environment:
//! - `INPLACE_TESTBED_KUBECONFIG` (default `${INPLACE_TESTBED_DIR:-/var/tmp/inplace-testbed}/kubeconfig`)
//! - `INPLACE_KUBECTL` (default `kubectl` on PATH)
//! - `INPLACE_TEST_IMAGE_V1|V2|V3` (default `127.0.0.1:5000/inplace-test/app:v1|v2|v3`)

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};

use kube::{Api, Client};
use serde_json::Value;

pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub fn kubeconfig() -> PathBuf {
    if let Ok(p) = std::env::var("INPLACE_TESTBED_KUBECONFIG") {
        return PathBuf::from(p);
    }
    let dir =
        std::env::var("INPLACE_TESTBED_DIR").unwrap_or_else(|_| "/var/tmp/inplace-testbed".into());
    PathBuf::from(dir).join("kubeconfig")
}

pub fn kubectl_bin() -> String {
    std::env::var("INPLACE_KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

pub fn image(version: &str) -> String {
    let var = format!("INPLACE_TEST_IMAGE_{}", version.to_uppercase());
    std::env::var(var).unwrap_or_else(|_| format!("127.0.0.1:5000/inplace-test/app:{version}"))
}

/// A client of the bed.
pub async fn client() -> TestResult<Client> {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig())?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(Client::try_from(config)?)
}

/// Runs kubectl with the bed's kubeconfig; stdout on success, an error with stderr otherwise.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> TestResult<String> {
    let mut cmd = Command::new(kubectl_bin());
    cmd.arg("--kubeconfig").arg(kubeconfig()).args(args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn()?;
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(format!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn kubectl_json(args: &[&str]) -> TestResult<Value> {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    Ok(serde_json::from_str(&kubectl(&a, None)?)?)
}

/// A namespace for one test, deleted (with everything in it) on drop.
pub struct Namespace {
    pub name: String,
}

impl Namespace {
    pub fn create(prefix: &str) -> TestResult<Self> {
        let name = format!("e2e-{prefix}-{:06x}", rand::random::<u32>() & 0xff_ffff);
        kubectl(&["create", "namespace", &name], None)?;
        // The admission of the bed creates the default service account asynchronously.
        wait_for("default service account", Duration::from_secs(30), || {
            Ok(kubectl(&["-n", &name, "get", "serviceaccount", "default"], None).is_ok())
        })?;
        Ok(Self { name })
    }

    pub fn kubectl(&self, args: &[&str]) -> TestResult<String> {
        let mut a = vec!["-n", self.name.as_str()];
        a.extend(args);
        kubectl(&a, None)
    }

    pub fn json(&self, args: &[&str]) -> TestResult<Value> {
        let mut a = vec!["-n", self.name.as_str()];
        a.extend(args);
        kubectl_json(&a)
    }

    pub fn apply(&self, yaml: &str) -> TestResult<String> {
        kubectl(&["-n", &self.name, "apply", "-f", "-"], Some(yaml))
    }

    pub fn patch_cloneset(&self, name: &str, merge_patch: &Value) -> TestResult<String> {
        self.kubectl(&[
            "patch",
            "cloneset",
            name,
            "--type",
            "merge",
            "-p",
            &merge_patch.to_string(),
        ])
    }

    /// `kubectl patch --type json` replacing the first container's image (a merge patch
    /// would replace the whole containers list).
    pub fn set_image(&self, name: &str, image: &str) -> TestResult<String> {
        self.set_images(name, &[(0, image)])
    }

    /// [`Self::set_image`] for several containers at once, by index.
    pub fn set_images(&self, name: &str, images: &[(usize, &str)]) -> TestResult<String> {
        let patch: Vec<Value> = images
            .iter()
            .map(|(i, image)| {
                serde_json::json!({
                    "op": "replace",
                    "path": format!("/spec/template/spec/containers/{i}/image"),
                    "value": image,
                })
            })
            .collect();
        self.json_patch_cloneset(name, &Value::Array(patch))
    }

    /// `kubectl patch --type json` of a CloneSet: several fields in one write (one new
    /// revision).
    pub fn json_patch_cloneset(&self, name: &str, patch: &Value) -> TestResult<String> {
        self.kubectl(&[
            "patch",
            "cloneset",
            name,
            "--type",
            "json",
            "-p",
            &patch.to_string(),
        ])
    }

    pub fn cloneset(&self, name: &str) -> TestResult<Value> {
        self.json(&["get", "cloneset", name])
    }

    /// Pods of the namespace, by name.
    pub fn pods(&self) -> TestResult<BTreeMap<String, Value>> {
        let list = self.json(&["get", "pods"])?;
        Ok(list["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                (
                    p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    p,
                )
            })
            .collect())
    }

    /// UIDs of the pods that are not terminating, by name.
    pub fn live_pod_uids(&self) -> TestResult<BTreeMap<String, String>> {
        Ok(self
            .pods()?
            .into_iter()
            .filter(|(_, p)| !pod_terminating(p))
            .map(|(name, p)| {
                let uid = p["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
                (name, uid)
            })
            .collect())
    }

    pub fn events(&self) -> TestResult<Vec<Value>> {
        Ok(self.json(&["get", "events"])?["items"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if std::env::var("INPLACE_E2E_KEEP").is_ok() {
            eprintln!("keeping namespace {}", self.name);
            return;
        }
        let _ = kubectl(&["delete", "namespace", &self.name, "--wait=false"], None);
    }
}

/// Controller log lines quoted in a failure (the panic message or error comes first and
/// must not scroll out of the part of the output CI keeps).
const LOG_EXCERPT_LINES: usize = 12;

/// `text` without terminal colour sequences (`ESC [ ... m`).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The controller binary running as a child process, scoped to one namespace; killed
/// on drop.
pub struct ControllerProcess {
    child: Option<Child>,
    pub log: PathBuf,
}

impl ControllerProcess {
    pub fn start(ns: &str) -> TestResult<Self> {
        Self::start_with(ns, &[])
    }

    pub fn start_with(ns: &str, extra: &[&str]) -> TestResult<Self> {
        Self::start_through(ns, &kubeconfig(), extra)
    }

    /// [`Self::start_with`], reaching the API server through the kubeconfig `config`.
    pub fn start_through(ns: &str, config: &std::path::Path, extra: &[&str]) -> TestResult<Self> {
        let log = std::env::temp_dir().join(format!(
            "inplace-controller-{ns}-{}.log",
            rand::random::<u16>()
        ));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_inplace-controller"))
            .arg("--kubeconfig")
            .arg(config)
            .args([
                "--namespace",
                ns,
                "--metrics-addr",
                "127.0.0.1:0",
                "--lease-duration",
                "6",
            ])
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("INPLACE_E2E_LOG")
                    .unwrap_or_else(|_| "info,inplace_controller=debug".into()),
            )
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()?;
        eprintln!(
            "controller for {ns}: pid {}, log {}",
            child.id(),
            log.display()
        );
        Ok(Self {
            child: Some(child),
            log,
        })
    }

    /// Kills the process (SIGKILL: no graceful release of anything).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The address the metrics server bound (from the log line "serving /metrics").
    pub fn metrics_addr(&self) -> Option<String> {
        let text = self.log_text();
        let line = text.lines().find(|l| l.contains("serving /metrics"))?;
        let at = line.find("127.0.0.1:")?;
        let rest = &line[at..];
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
            .unwrap_or(rest.len());
        Some(rest[..end].to_owned())
    }

    /// GET `path` from the metrics server: (status code, body).
    pub fn http_get(&self, path: &str) -> TestResult<(u16, String)> {
        let addr = self
            .metrics_addr()
            .ok_or("metrics address not logged yet")?;
        http_get(&addr, path)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines of the log and its path, for a failure message: short enough that
    /// the reason stays on screen where CI shows only the tail of a failed test's output
    /// (the whole log stays on disk).
    pub fn log_excerpt(&self) -> String {
        let text = strip_ansi(&self.log_text());
        let tail: Vec<&str> = text.lines().rev().take(LOG_EXCERPT_LINES).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "---- controller log {} (last {} lines) ----\n{}",
            self.log.display(),
            tail.len(),
            tail.join("\n")
        )
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("{}", self.log_excerpt());
        }
    }
}

/// A plain HTTP/1.1 GET of `path` from `addr`: (status code, body).
pub fn http_get(addr: &str, path: &str) -> TestResult<(u16, String)> {
    use std::io::Read;
    let mut conn = std::net::TcpStream::connect(addr)?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = String::new();
    conn.read_to_string(&mut raw)?;
    let code = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// Polls `check` every 500 ms until it is true or `timeout` passes.
pub fn wait_for(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> TestResult<bool>,
) -> TestResult {
    let start = Instant::now();
    let mut last_err = None;
    loop {
        match check() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = Some(e.to_string()),
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "timed out after {timeout:?} waiting for {what}{}",
                last_err
                    .map(|e| format!(" (last error: {e})"))
                    .unwrap_or_default()
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

pub fn status_i64(cs: &Value, field: &str) -> i64 {
    cs["status"][field].as_i64().unwrap_or(0)
}

/// Ready per the Ready condition.
pub fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

pub fn pod_terminating(pod: &Value) -> bool {
    !pod["metadata"]["deletionTimestamp"].is_null()
}

pub fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["labels"][key].as_str()
}

pub fn restart_count(pod: &Value) -> i64 {
    pod["status"]["containerStatuses"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| c["restartCount"].as_i64().unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
}

pub fn container_image(pod: &Value) -> String {
    pod["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

pub fn sample_cloneset(name: &str, replicas: i32, image: &str, strategy: &str) -> String {
    format!(
        r#"apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata:
  labels:
    app: {name}
  name: {name}
spec:
  replicas: {replicas}
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
        readinessProbe:
          httpGet:
            path: /version
            port: 8080
          periodSeconds: 1
  updateStrategy:
    type: {strategy}
"#
    )
}

/// Waits until the CloneSet reports `n` updated-ready replicas out of `n`, all on its update
/// revision, and `n` pods exist.
pub fn wait_rolled_out(ns: &Namespace, name: &str, n: i64, timeout: Duration) -> TestResult<Value> {
    let mut last = Value::Null;
    wait_for(
        &format!("{name} {n}/{n} updated and ready"),
        timeout,
        || {
            let cs = ns.cloneset(name)?;
            let ok = status_i64(&cs, "replicas") == n
                && status_i64(&cs, "readyReplicas") == n
                && status_i64(&cs, "updatedReadyReplicas") == n
                && cs["status"]["observedGeneration"] == cs["metadata"]["generation"]
                && cs["status"]["currentRevision"] == cs["status"]["updateRevision"];
            last = cs;
            Ok(ok)
        },
    )
    .map_err(|e| format!("{e}; last status: {}", last["status"]))?;
    Ok(last)
}

/// Watches the pods of a namespace and records, at every event, how many of the
/// `desired` pods are unavailable (missing, not ready, or terminating).
pub struct UnavailabilityWatch {
    pub max_unavailable: Arc<Mutex<i64>>,
    /// Most pods (not terminating) seen at once.
    pub max_live: Arc<Mutex<i64>>,
    pub samples: Arc<Mutex<u64>>,
    /// The pods (name, ready, revision label) at the worst moment.
    pub worst: Arc<Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl UnavailabilityWatch {
    pub async fn start(ns: &str, desired: i64) -> TestResult<Self> {
        let api: Api<Pod> = Api::namespaced(client().await?, ns);
        let max = Arc::new(Mutex::new(0i64));
        let samples = Arc::new(Mutex::new(0u64));
        let worst = Arc::new(Mutex::new(String::new()));
        let max_live = Arc::new(Mutex::new(0i64));
        let (m, s, w, ml) = (
            max.clone(),
            samples.clone(),
            worst.clone(),
            max_live.clone(),
        );
        let task = tokio::spawn(async move {
            let (reader, writer) = kube::runtime::reflector::store::<Pod>();
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .boxed();
            // The store is complete only after the initial list (InitDone).
            let mut synced = false;
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::InitDone) => synced = true,
                    Ok(_) => {}
                    Err(_) => continue,
                }
                if !synced {
                    continue;
                }
                let pods = reader.state();
                let available = pods
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter(|p| {
                        p.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|cs| {
                                cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                    })
                    .count() as i64;
                let unavailable = (desired - available).max(0);
                let live = pods
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .count() as i64;
                {
                    let mut l = ml.lock().unwrap();
                    *l = (*l).max(live);
                }
                *s.lock().unwrap() += 1;
                let mut mx = m.lock().unwrap();
                if unavailable > *mx {
                    *mx = unavailable;
                    let mut desc = String::new();
                    for p in &pods {
                        let conds: Vec<String> = p
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .map(|cs| {
                                cs.iter()
                                    .map(|c| format!("{}={}", c.type_, c.status))
                                    .collect()
                            })
                            .unwrap_or_default();
                        desc.push_str(&format!(
                            "{} {:?} {} [{}]; ",
                            p.metadata.name.as_deref().unwrap_or_default(),
                            p.metadata
                                .labels
                                .as_ref()
                                .and_then(|l| l.get("controller-revision-hash")),
                            p.metadata.deletion_timestamp.is_some(),
                            conds.join(",")
                        ));
                    }
                    *w.lock().unwrap() = desc;
                }
            }
        });
        Ok(Self {
            max_live,
            max_unavailable: max,
            samples,
            worst,
            task,
        })
    }

    pub fn max(&self) -> i64 {
        *self.max_unavailable.lock().unwrap()
    }

    pub fn max_live(&self) -> i64 {
        *self.max_live.lock().unwrap()
    }

    pub fn worst(&self) -> String {
        self.worst.lock().unwrap().clone()
    }

    pub fn samples(&self) -> u64 {
        *self.samples.lock().unwrap()
    }
}

impl Drop for UnavailabilityWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------- the node daemon ----------

/// Copies `src` to `dst` in the bed's registry (plain HTTP), e.g. to a tag containerd has
/// never seen so that a pull really happens.
pub fn copy_image(src: &str, dst: &str) -> TestResult {
    let copy = Command::new("skopeo")
        .args([
            "copy",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            &format!("docker://{src}"),
            &format!("docker://{dst}"),
        ])
        .output()?;
    if !copy.status.success() {
        return Err(format!(
            "skopeo copy {src} {dst}: {}",
            String::from_utf8_lossy(&copy.stderr)
        )
        .into());
    }
    Ok(())
}

/// The bed's real node.
pub const NODE: &str = "inplace-node-0";

/// The workspace's `inplace-daemon`, built if needed (it is another package's binary).
fn daemon_bin() -> TestResult<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args(["build", "-p", "inplace-daemon", "--bin", "inplace-daemon"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()?;
    if !status.success() {
        return Err("cargo build -p inplace-daemon failed".into());
    }
    let out = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()?;
    let meta: Value = serde_json::from_slice(&out.stdout)?;
    let dir = meta["target_directory"]
        .as_str()
        .ok_or("cargo metadata: no target_directory")?;
    Ok(PathBuf::from(dir).join("debug").join("inplace-daemon"))
}

/// Pids of other `inplace-daemon` processes serving the real node.
fn other_daemons() -> Vec<String> {
    let out = Command::new("pgrep")
        .args(["-af", "inplace-daemon"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.lines()
        .filter(|l| l.contains(NODE) && !l.contains("cargo"))
        .map(str::to_owned)
        .collect()
}

/// The daemon for the bed's node, killed on drop.
pub struct Daemon {
    child: Child,
    log: PathBuf,
    /// The node's daemon slot, released after the child is killed (fields drop after
    /// `Drop::drop`).
    _slot: std::fs::File,
}

/// Takes the real node's daemon slot: an exclusive lock on a file, held while a test's
/// daemon runs. Two tests that start daemons at the same moment (threads of one test
/// binary) both found no other daemon process and both started one, and the two daemons
/// then acted on the same pods; with the lock the second waits for the first to end.
fn node_daemon_slot() -> TestResult<std::fs::File> {
    let path = std::env::temp_dir().join(format!("inplace-e2e-daemon-{NODE}.lock"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    wait_for(
        "the real node's daemon slot (another test's daemon to end)",
        Duration::from_secs(600),
        || match file.try_lock() {
            Ok(()) => Ok(true),
            Err(std::fs::TryLockError::WouldBlock) => Ok(false),
            Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
        },
    )?;
    Ok(file)
}

impl Daemon {
    /// Starts the daemon for [`NODE`], after any other daemon of that node has ended
    /// (only one may serve a node).
    pub fn start() -> TestResult<Self> {
        let bin = daemon_bin()?;
        let slot = node_daemon_slot()?;
        wait_for(
            "no other inplace-daemon serving the real node",
            Duration::from_secs(600),
            || {
                let others = other_daemons();
                if !others.is_empty() {
                    eprintln!("waiting for: {others:?}");
                }
                Ok(others.is_empty())
            },
        )?;
        let cri = std::env::var("INPLACE_CRI_ENDPOINT").unwrap_or_else(|_| {
            "unix:///var/tmp/inplace-testbed/containerd/containerd.sock".into()
        });
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log =
            std::env::temp_dir().join(format!("inplace-daemon-{}.log", rand::random::<u16>()));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .args(["--node-name", NODE, "--cri-endpoint", &cri])
            .arg("--addr")
            .arg(format!("127.0.0.1:{port}"))
            .env("KUBECONFIG", kubeconfig())
            .env("RUST_LOG", "info")
            .stdout(file.try_clone()?)
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()?;
        eprintln!("daemon: pid {}, log {}", child.id(), log.display());
        Ok(Self {
            child,
            log,
            _slot: slot,
        })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("daemon log {}", self.log.display());
    }
}

// ---------- cutting a process off the API server ----------

pub use inplace_proto::freezable_proxy::FreezableProxy;

/// A [`FreezableProxy`] in front of the bed's API server.
pub async fn freezable_proxy() -> TestResult<FreezableProxy> {
    Ok(FreezableProxy::start(&kubeconfig()).await?)
}
