//! Helpers of the end-to-end suites: the test bed's kubeconfig and kubectl, a namespace
//! per test, the controller (the installed one or a child process) and the daemon, and
//! waiting.
//!
//! Environment: the bed's (`inplace_testkit::bed`), and
//! - `INPLACE_E2E_INSTALLED=1`: [`Controller::start`] and [`Daemon::start`] use the installed
//!   product ([`installed_mode`])

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
use serde_json::{Value, json};

pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub use inplace_testkit::bed::{image, kubeconfig, kubectl_bin};

/// A client of the bed.
pub async fn client() -> TestResult<Client> {
    Ok(inplace_testkit::bed::client().await?)
}

/// Runs kubectl with the bed's kubeconfig; stdout on success, an error with its output
/// otherwise.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> TestResult<String> {
    Ok(inplace_testkit::bed::kubectl(args, stdin)?)
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

/// Whether the tests that need only "a controller" (and "a daemon on the real node") use the
/// installed product (`INPLACE_E2E_INSTALLED=1`, after `tests/testbed/up --install`)
/// instead of processes of their own. `tests/run-all` runs the tests named `host_…` before
/// the product is installed and every other test of the suites with this set, after.
pub fn installed_mode() -> bool {
    std::env::var("INPLACE_E2E_INSTALLED").is_ok_and(|v| v == "1")
}

/// Whether the controller under test runs with `CloneSetShortHash` (`tests/run-all` sets
/// `INPLACE_E2E_SHORT_HASH=1` when it restarted the installed one with that gate).
pub fn short_hash_expected() -> bool {
    std::env::var("INPLACE_E2E_SHORT_HASH").is_ok_and(|v| v == "1")
}

/// The pod's `controller-revision-hash` label has the form the gates ask for: only the
/// hash (equal to `pod-template-hash`) with `CloneSetShortHash`, else the full revision
/// name `<cloneset>-<hash>`. Checked so that a run meant for the short hash cannot pass
/// with the gate not taken.
pub fn assert_revision_label_form(pod: &Value) -> TestResult {
    let revision = label(pod, "controller-revision-hash").ok_or("no revision label")?;
    let hash = label(pod, "pod-template-hash").ok_or("no pod-template-hash label")?;
    let short = revision == hash;
    if short != short_hash_expected() {
        return Err(format!(
            "revision label {revision:?} (pod-template-hash {hash:?}): expected the {} form",
            if short_hash_expected() {
                "short-hash"
            } else {
                "full-name"
            }
        )
        .into());
    }
    if !short && !revision.ends_with(&format!("-{hash}")) {
        return Err(format!("revision label {revision:?} does not end in -{hash}").into());
    }
    Ok(())
}

/// The namespace of the installed product (deploy/).
pub const SYSTEM_NS: &str = "inplace-system";

/// kubectl in [`SYSTEM_NS`].
pub fn sys(args: &[&str]) -> TestResult<String> {
    let mut a = vec!["-n", SYSTEM_NS];
    a.extend(args);
    kubectl(&a, None)
}

pub fn sys_json(args: &[&str]) -> TestResult<Value> {
    let mut a = vec!["-n", SYSTEM_NS];
    a.extend(args);
    kubectl_json(&a)
}

pub fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

pub fn name(obj: &Value) -> String {
    obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

pub fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The installed pods of `component` (controller, daemon) that are not terminating.
pub fn component_pods(component: &str) -> TestResult<Vec<Value>> {
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

/// The holder of the installed controllers' Lease (`<pod name>-<suffix>`).
pub fn lease_holder() -> TestResult<String> {
    sys(&[
        "get",
        "lease",
        "inplace-controller",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
}

/// The installed controller pod that holds the Lease, if one does and is not terminating.
pub fn leader_pod() -> TestResult<Option<Value>> {
    let holder = lease_holder()?;
    Ok(component_pods("controller")?
        .into_iter()
        .find(|p| holder.starts_with(&format!("{}-", name(p)))))
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

/// Takes a lock on a file of the temporary directory, shared or exclusive, waiting up to
/// `timeout`; the lock is held while the returned file is open.
fn file_lock(
    file_name: &str,
    exclusive: bool,
    what: &str,
    timeout: Duration,
) -> TestResult<std::fs::File> {
    let path = std::env::temp_dir().join(file_name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    wait_for(what, timeout, || {
        let taken = if exclusive {
            file.try_lock()
        } else {
            file.try_lock_shared()
        };
        match taken {
            Ok(()) => Ok(true),
            Err(std::fs::TryLockError::WouldBlock) => Ok(false),
            Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
        }
    })?;
    Ok(file)
}

/// Whether the product is installed on the bed (its controller Deployment exists).
fn product_installed() -> TestResult<bool> {
    let out = sys(&["get", "deployments", "-o", "name"]).or_else(|e| {
        if e.to_string().contains("NotFound") {
            Ok(String::new())
        } else {
            Err(e)
        }
    })?;
    Ok(out
        .lines()
        .any(|l| l.trim() == "deployment.apps/inplace-controller"))
}

/// The controller of a test: in [`installed_mode`] the installed Deployment (its leader's
/// logs and metrics read through the API server and the pod IP; a restart deletes the
/// leader's pod), otherwise the controller binary as a child process, scoped to the test's
/// namespace and killed on drop.
pub struct Controller {
    backend: Backend,
}

enum Backend {
    Host(HostController),
    Installed(InstalledController),
}

struct HostController {
    child: Option<Child>,
    log: PathBuf,
    ns: String,
    config: PathBuf,
    extra: Vec<String>,
}

struct InstalledController {
    /// The test's namespace: the installed controller serves every namespace, the log
    /// excerpt of a failure shows the lines about this one.
    ns: String,
    /// (uid, restart count) of the controller pods when the test took them over or last
    /// restarted them: [`Controller::is_running`] is true while none of them restarted or
    /// went away.
    pods: BTreeMap<String, (String, i64)>,
    /// The Lease holder when the leader's pod was deleted, until a new leader is in.
    killed_leader: Option<String>,
    /// Shared with the other tests of this binary that use the installed controller,
    /// exclusive for one that restarts it ([`Controller::start_alone`]).
    _slot: std::fs::File,
}

/// How long a test waits for the installed controller's slot: an exclusive taker waits for
/// every test that shares it to end (at most a suite's other tests).
const INSTALLED_SLOT_WAIT: Duration = Duration::from_secs(1800);

impl Controller {
    /// "A controller" for the test's namespace `ns`: the installed one in
    /// [`installed_mode`], else a child process.
    pub fn start(ns: &str) -> TestResult<Self> {
        if installed_mode() {
            Self::installed(ns, false)
        } else {
            Self::host(ns, &[])
        }
    }

    /// [`Self::start`] for a test that kills or restarts the controller: the installed one
    /// is taken alone (no other test of this binary uses it meanwhile, so none sees the
    /// restart).
    pub fn start_alone(ns: &str) -> TestResult<Self> {
        if installed_mode() {
            Self::installed(ns, true)
        } else {
            Self::host(ns, &[])
        }
    }

    /// The controller binary as a child process with the extra flags `extra`, for a test
    /// that needs one of its own (see the reason at each `host_…` test).
    pub fn host(ns: &str, extra: &[&str]) -> TestResult<Self> {
        Self::host_through(ns, &kubeconfig(), extra)
    }

    /// [`Self::host`], reaching the API server through the kubeconfig `config`.
    pub fn host_through(ns: &str, config: &std::path::Path, extra: &[&str]) -> TestResult<Self> {
        if installed_mode() || product_installed()? {
            return Err(
                "this test starts a controller of its own, which would fight with the \
                        installed one (both serve every CloneSet of the namespace): run it \
                        before `tests/testbed/up --install` or after `--uninstall`, without \
                        INPLACE_E2E_INSTALLED"
                    .into(),
            );
        }
        let log = std::env::temp_dir().join(format!(
            "inplace-controller-{ns}-{}.log",
            rand::random::<u16>()
        ));
        let mut host = HostController {
            child: None,
            log,
            ns: ns.to_owned(),
            config: config.to_owned(),
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
        };
        host.spawn()?;
        Ok(Self {
            backend: Backend::Host(host),
        })
    }

    fn installed(ns: &str, alone: bool) -> TestResult<Self> {
        let slot = file_lock(
            "inplace-e2e-installed-controller.lock",
            alone,
            "the installed controller's slot (tests that restart it run alone)",
            INSTALLED_SLOT_WAIT,
        )?;
        sys(&[
            "wait",
            "--for=condition=Available",
            "--timeout=180s",
            "deployment/inplace-controller",
        ])?;
        let mut installed = InstalledController {
            ns: ns.to_owned(),
            pods: BTreeMap::new(),
            killed_leader: None,
            _slot: slot,
        };
        installed.wait_leader(None)?;
        eprintln!(
            "controller for {ns}: the installed one, leader {}",
            lease_holder()?
        );
        Ok(Self {
            backend: Backend::Installed(installed),
        })
    }

    /// Stops the controller at once: a child process is killed (SIGKILL: no graceful
    /// release of anything); the installed leader's pod is deleted (its Deployment makes a
    /// new one; the standby takes the lease over).
    pub fn kill(&mut self) {
        match &mut self.backend {
            Backend::Host(h) => h.kill(),
            Backend::Installed(i) => {
                if let Err(e) = i.delete_leader() {
                    eprintln!("deleting the installed controller's leader pod: {e}");
                }
            }
        }
    }

    /// A controller again after [`Self::kill`] (or a kill and a restart): a new child
    /// process with the same flags, its output appended to the same log; for the installed
    /// one, waits until a new leader holds the Lease.
    pub fn restart(&mut self) -> TestResult {
        match &mut self.backend {
            Backend::Host(h) => {
                h.kill();
                h.spawn()
            }
            Backend::Installed(i) => {
                if i.killed_leader.is_none() {
                    i.delete_leader()?;
                }
                let old = i.killed_leader.take();
                i.wait_leader(old.as_deref())
            }
        }
    }

    /// GET `path` from the metrics server: (status code, body). The installed controller's
    /// is its leader's (only the leader reconciles), at the pod's IP.
    pub fn http_get(&self, path: &str) -> TestResult<(u16, String)> {
        match &self.backend {
            Backend::Host(h) => {
                let addr = h.metrics_addr().ok_or("metrics address not logged yet")?;
                http_get(&addr, path)
            }
            Backend::Installed(_) => {
                let leader = leader_pod()?.ok_or("no installed controller holds the lease")?;
                let ip = leader["status"]["podIP"]
                    .as_str()
                    .ok_or(format!("{} has no pod IP", name(&leader)))?;
                http_get(&format!("{ip}:8080"), path)
            }
        }
    }

    /// The controller's log: the child's output, or the installed leader's container log
    /// (pods/log through the API server).
    pub fn log_text(&self) -> String {
        match &self.backend {
            Backend::Host(h) => std::fs::read_to_string(&h.log).unwrap_or_default(),
            Backend::Installed(_) => leader_pod()
                .ok()
                .flatten()
                .and_then(|p| sys(&["logs", &name(&p)]).ok())
                .unwrap_or_default(),
        }
    }

    /// The last lines of the log and where it is, for a failure message: short enough that
    /// the reason stays on screen where CI shows only the tail of a failed test's output
    /// (a child's whole log stays on disk). The installed controller serves every
    /// namespace: its lines about the test's namespace.
    pub fn log_excerpt(&self) -> String {
        let text = strip_ansi(&self.log_text());
        let (source, ns_only) = match &self.backend {
            Backend::Host(h) => (h.log.display().to_string(), None),
            Backend::Installed(i) => (
                format!(
                    "of the installed leader {}",
                    lease_holder().unwrap_or_default()
                ),
                Some(i.ns.as_str()),
            ),
        };
        let tail: Vec<&str> = text
            .lines()
            .rev()
            .filter(|l| ns_only.is_none_or(|ns| l.contains(ns)))
            .take(LOG_EXCERPT_LINES)
            .collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "---- controller log {source} (last {} lines) ----\n{}",
            tail.len(),
            tail.join("\n")
        )
    }

    /// The child is running; the installed controller pods the test started with (or last
    /// restarted) are all there, Ready, and none of them restarted.
    pub fn is_running(&mut self) -> bool {
        match &mut self.backend {
            Backend::Host(h) => h
                .child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(None))),
            Backend::Installed(i) => {
                let Ok(now) = InstalledController::pod_states() else {
                    return false;
                };
                i.pods
                    .iter()
                    .all(|(pod, state)| now.get(pod).is_some_and(|(s, ready)| s == state && *ready))
            }
        }
    }
}

impl HostController {
    fn spawn(&mut self) -> TestResult {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_inplace-controller"))
            .arg("--kubeconfig")
            .arg(&self.config)
            .args([
                "--namespace",
                &self.ns,
                "--metrics-addr",
                "127.0.0.1:0",
                "--lease-duration",
                "6",
            ])
            .args(&self.extra)
            .env(
                "RUST_LOG",
                std::env::var("INPLACE_E2E_LOG")
                    .unwrap_or_else(|_| "info,inplace_controller=debug".into()),
            )
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()?;
        eprintln!(
            "controller for {}: pid {}, log {}",
            self.ns,
            child.id(),
            self.log.display()
        );
        self.child = Some(child);
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The address the metrics server bound (from the last "serving /metrics" log line).
    fn metrics_addr(&self) -> Option<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let line = text.lines().rfind(|l| l.contains("serving /metrics"))?;
        let at = line.find("127.0.0.1:")?;
        let rest = &line[at..];
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
            .unwrap_or(rest.len());
        Some(rest[..end].to_owned())
    }
}

/// (uid, restart count) of a pod, and whether it is Ready.
type PodState = ((String, i64), bool);

impl InstalledController {
    /// The state of every installed controller pod, by name.
    fn pod_states() -> TestResult<BTreeMap<String, PodState>> {
        Ok(component_pods("controller")?
            .iter()
            .map(|p| (name(p), ((uid(p), restart_count(p)), pod_ready(p))))
            .collect())
    }

    /// Deletes the leader's pod (gracefully, as `kubectl delete pod` does) without waiting
    /// for it to go.
    fn delete_leader(&mut self) -> TestResult {
        let leader = leader_pod()?.ok_or("no installed controller holds the lease")?;
        self.killed_leader = Some(lease_holder()?);
        sys(&["delete", "pod", &name(&leader), "--wait=false"])?;
        eprintln!(
            "deleted the installed controller's leader pod {}",
            name(&leader)
        );
        Ok(())
    }

    /// Waits until a controller pod that is not terminating holds the Lease (another holder
    /// than `old`, if given) and every controller replica is Ready again; then takes the
    /// pods as they are for [`Controller::is_running`].
    fn wait_leader(&mut self, old: Option<&str>) -> TestResult {
        wait_for(
            "an installed controller pod holding the lease, every replica Ready",
            Duration::from_secs(180),
            || {
                let holder = lease_holder()?;
                let leads = leader_pod()?.is_some() && old.is_none_or(|o| o != holder);
                let states = Self::pod_states()?;
                let want: i64 = sys(&[
                    "get",
                    "deployment",
                    "inplace-controller",
                    "-o",
                    "jsonpath={.spec.replicas}",
                ])?
                .trim()
                .parse()?;
                Ok(
                    leads
                        && states.len() as i64 == want
                        && states.values().all(|(_, ready)| *ready),
                )
            },
        )?;
        self.pods = Self::pod_states()?
            .into_iter()
            .map(|(pod, (state, _))| (pod, state))
            .collect();
        Ok(())
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.log_excerpt());
        }
        if let Backend::Host(h) = &mut self.backend {
            h.kill();
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

/// `cloneset` (a [`sample_cloneset`]) with a `data` volume claim template of storage class
/// `class` mounted at /data, and `extra_spec` (spec fields, YAML indented by two) before it.
pub fn with_claims(cloneset: &str, class: &str, extra_spec: &str) -> String {
    cloneset
        .replace(
            "        readinessProbe:",
            "        volumeMounts:\n        - name: data\n          mountPath: /data\n        readinessProbe:",
        )
        .replace(
            "  updateStrategy:",
            &format!(
                "{extra_spec}  volumeClaimTemplates:\n  - metadata:\n      name: data\n    spec:\n      accessModes: [\"ReadWriteOnce\"]\n      storageClassName: {class}\n      resources:\n        requests:\n          storage: 1Gi\n  updateStrategy:"
            ),
        )
}

/// The CloneSet's `FailedScale` condition, if it is True.
pub fn failed_scale(cs: &Value) -> Option<Value> {
    cs["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "FailedScale" && c["status"] == "True")
        .cloned()
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

/// "A daemon on the real node" for a test: in [`installed_mode`] the installed DaemonSet's
/// pod on [`NODE`] (Ready), else the daemon binary as a child process, killed on drop.
pub struct Daemon {
    process: Option<DaemonProcess>,
}

struct DaemonProcess {
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
    file_lock(
        &format!("inplace-e2e-daemon-{NODE}.lock"),
        true,
        "the real node's daemon slot (another test's daemon to end)",
        Duration::from_secs(600),
    )
}

impl Daemon {
    /// The installed daemon on [`NODE`] once its pod is Ready, or (not [`installed_mode`])
    /// the daemon binary for [`NODE`], started after any other daemon of that node has
    /// ended (only one may serve a node).
    pub fn start() -> TestResult<Self> {
        if installed_mode() {
            wait_for(
                "the installed daemon's pod on the real node Ready",
                Duration::from_secs(180),
                || {
                    Ok(component_pods("daemon")?
                        .iter()
                        .any(|p| p["spec"]["nodeName"] == NODE && pod_ready(p)))
                },
            )?;
            return Ok(Self { process: None });
        }
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
            process: Some(DaemonProcess {
                child,
                log,
                _slot: slot,
            }),
        })
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("daemon log {}", self.log.display());
    }
}

// ---------- cutting a process off the API server ----------

pub use inplace_testkit::freezable_proxy::FreezableProxy;

/// A [`FreezableProxy`] in front of the bed's API server.
pub async fn freezable_proxy() -> TestResult<FreezableProxy> {
    Ok(FreezableProxy::start(&kubeconfig()).await?)
}

/// Sets pod conditions through the status subresource with a strategic merge patch (the
/// conditions list merges by type).
pub async fn set_pod_conditions(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    conditions: Value,
) -> TestResult {
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    api.patch_status(
        pod,
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": conditions}})),
    )
    .await?;
    Ok(())
}

/// The `KruisePodReady` condition of a pod: (status, message).
pub fn kruise_pod_ready(pod: &Value) -> Option<(String, String)> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "KruisePodReady")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
}
