//! Helpers for the suites that run against the real test bed: the kubeconfig, a
//! node simulator child process, namespaces, polling.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use inplace_proto::cloneset::CloneSet;
use inplace_proto::nodeimage::NodeImage;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, PodCondition, ServiceAccount};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;

/// The admin kubeconfig of the bed, from `INPLACE_TESTBED_KUBECONFIG`.
pub fn kubeconfig_path() -> Result<String> {
    match std::env::var("INPLACE_TESTBED_KUBECONFIG") {
        Ok(p) if !p.is_empty() => Ok(p),
        _ => bail!(
            "INPLACE_TESTBED_KUBECONFIG is not set: start the bed with tests/testbed/up, then run \
             INPLACE_TESTBED_KUBECONFIG=${{INPLACE_TESTBED_DIR:-/var/tmp/inplace-testbed}}/kubeconfig \
             cargo test -p inplace-tests --test nodesim -- --ignored --nocapture"
        ),
    }
}

pub async fn client() -> Result<Client> {
    let path = kubeconfig_path()?;
    let kc = Kubeconfig::read_from(&path).with_context(|| format!("reading {path}"))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// A unique-enough suffix for names (no randomness crate needed).
pub fn suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{:x}{:05x}", std::process::id() % 0xfff, nanos % 0xfffff)
}

/// A running `inplace-nodesim` child; SIGTERMed (and reaped) on drop.
#[derive(Debug)]
pub struct Sim {
    child: Option<Child>,
    lines: Arc<Mutex<Vec<String>>>,
    pub prefix: String,
    pub group: String,
    pub nodes: usize,
}

impl Sim {
    /// Starts the simulator binary `bin` (an integration test passes
    /// `env!("CARGO_BIN_EXE_inplace-nodesim")`) with `nodes` nodes named `<group>-<i>`,
    /// labelled and tainted (NoSchedule) `inplace.dev/sim-group=<group>` so that only the
    /// test's own pods (with [`Sim::selector`] and [`Sim::toleration`]) land there;
    /// `extra` are more flags.
    pub fn start(bin: &std::path::Path, group: &str, nodes: usize, extra: &[&str]) -> Result<Sim> {
        let prefix = format!("{group}-");
        let mut cmd = Command::new(bin);
        cmd.arg("--kubeconfig")
            .arg(kubeconfig_path()?)
            .arg("--nodes")
            .arg(nodes.to_string())
            .arg("--name-prefix")
            .arg(&prefix)
            .arg("--node-label")
            .arg(format!("inplace.dev/sim-group={group}"))
            .arg("--node-taint")
            .arg(format!("inplace.dev/sim-group={group}:NoSchedule"))
            .arg("--delete-nodes-on-exit")
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("starting inplace-nodesim")?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            let (lines, group) = (lines.clone(), group.to_owned());
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    eprintln!("[{group}] {line}");
                    if let Ok(mut l) = lines.lock() {
                        l.push(line);
                    }
                }
            });
        }
        Ok(Sim {
            child: Some(child),
            lines,
            prefix,
            group: group.to_owned(),
            nodes,
        })
    }

    /// The simulator's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The node selector that lands pods on this simulator's nodes.
    pub fn selector(&self) -> serde_json::Value {
        json!({ "inplace.dev/sim-group": self.group })
    }

    /// The toleration of this simulator's taint (a `tolerations` list).
    pub fn tolerations(&self) -> serde_json::Value {
        json!([{ "key": "inplace.dev/sim-group", "operator": "Equal", "value": self.group, "effect": "NoSchedule" }])
    }

    /// Waits until all of this simulator's nodes are Ready.
    pub async fn wait_nodes_ready(&self, client: &Client, timeout: Duration) -> Result<Duration> {
        let api: Api<Node> = Api::all(client.clone());
        let lp = ListParams::default().labels(&format!("inplace.dev/sim-group={}", self.group));
        let want = self.nodes;
        wait_for(
            timeout,
            Duration::from_millis(500),
            "simulated nodes Ready",
            || {
                let (api, lp) = (api.clone(), lp.clone());
                async move {
                    let nodes = api.list(&lp).await?;
                    let ready = nodes.items.iter().filter(|n| node_ready(n)).count();
                    Ok((ready >= want).then_some(()))
                }
            },
        )
        .await
        .map(|(_, d)| d)
    }

    /// The latest `nodesim: …` report line and its value for `key`.
    pub fn stat(&self, key: &str) -> Option<String> {
        let lines = self.lines.lock().ok()?;
        let line = lines
            .iter()
            .rev()
            .find(|l| l.starts_with("nodesim: nodes="))?;
        crate::nodesim::stats::parse_line(line)?
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    pub fn last_report(&self) -> Option<String> {
        let lines = self.lines.lock().ok()?;
        lines
            .iter()
            .rev()
            .find(|l| l.starts_with("nodesim: nodes="))
            .cloned()
    }

    /// SIGTERM, wait for exit (it prints a final report and deletes its nodes).
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait()? {
                // Let the stderr reader catch up with the final lines.
                std::thread::sleep(Duration::from_millis(200));
                if !status.success() {
                    bail!("inplace-nodesim exited with {status}");
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("inplace-nodesim did not exit within 60 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

pub fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pod's condition of type `kind`.
pub fn condition<'a>(p: &'a Pod, kind: &str) -> Option<&'a PodCondition> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
}

/// The status of the pod's condition of type `kind`.
pub fn pod_condition(p: &Pod, kind: &str) -> Option<String> {
    condition(p, kind).map(|c| c.status.clone())
}

pub fn pod_ready(p: &Pod) -> bool {
    pod_condition(p, "Ready").as_deref() == Some("True")
}

/// Polls `f` until it yields `Some`, or fails after `timeout`.
pub async fn wait_for<T, F, Fut>(
    timeout: Duration,
    every: Duration,
    what: &str,
    mut f: F,
) -> Result<(T, Duration)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let t0 = Instant::now();
    loop {
        match f().await {
            Ok(Some(v)) => return Ok((v, t0.elapsed())),
            Ok(None) => {}
            Err(e) if t0.elapsed() > timeout => {
                return Err(e.context(format!("waiting for {what}")));
            }
            Err(_) => {}
        }
        if t0.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(every).await;
    }
}

/// A fresh namespace, usable for pods (its default ServiceAccount and token exist).
pub async fn namespace(client: &Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } }))?;
    match api.create(&PostParams::default(), &ns).await {
        // The names are the caller's own (random suffixes): an existing one was made by an
        // earlier attempt of this call whose answer was lost.
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        r => {
            r?;
        }
    }
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    wait_for(
        Duration::from_secs(60),
        Duration::from_millis(200),
        "default ServiceAccount and its token",
        || {
            let sas = sas.clone();
            // v1.20 admission also wants the ServiceAccount's token Secret.
            async move {
                let sa = sas.get_opt("default").await?;
                Ok(sa
                    .filter(|sa| sa.secrets.as_ref().is_some_and(|s| !s.is_empty()))
                    .map(|_| ()))
            }
        },
    )
    .await?;
    Ok(())
}

/// Deletes the namespace and waits (up to `timeout`) until its pods are gone — call it
/// while the simulator that runs them is still up, so that it does the final deletes.
pub async fn delete_namespace_and_wait(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> Result<()> {
    delete_namespace(client, name).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), name);
    wait_for(
        timeout,
        Duration::from_millis(500),
        "the namespace's pods deleted",
        || {
            let pods = pods.clone();
            async move {
                Ok(pods
                    .list(&ListParams::default())
                    .await?
                    .items
                    .is_empty()
                    .then_some(()))
            }
        },
    )
    .await?;
    Ok(())
}

/// Deletes the NodeImages of the nodes named `prefix…`: the ImagePullJob controller makes
/// them for simulated nodes, and no NodeImage lifecycle runs with `--namespace` to remove
/// them with the nodes.
pub async fn delete_node_images(client: &Client, prefix: &str) {
    let api: Api<NodeImage> = Api::all(client.clone());
    let Ok(list) = api.list(&ListParams::default()).await else {
        return;
    };
    for name in list
        .items
        .iter()
        .filter_map(|ni| ni.metadata.name.as_deref())
    {
        if name.starts_with(prefix) {
            let _ = api.delete(name, &DeleteParams::default()).await;
        }
    }
}

/// Deletes the namespace (does not wait).
pub async fn delete_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let _ = api.delete(name, &DeleteParams::default()).await;
}

/// A one-container pod for the simulator's nodes.
pub fn pod(name: &str, sim: &Sim, image: &str, extra_spec: serde_json::Value) -> Result<Pod> {
    let mut spec = json!({
        "nodeSelector": sim.selector(),
        "tolerations": sim.tolerations(),
        "terminationGracePeriodSeconds": 30,
        "containers": [{ "name": "app", "image": image }],
    });
    if let (Some(base), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": spec,
    }))?)
}

/// All `want` pods exist, are Ready and on the update revision, and the status is current.
pub fn cloneset_settled(cs: &CloneSet, want: u32) -> bool {
    let want = i32::try_from(want).unwrap_or(i32::MAX);
    let Some(s) = cs.status.as_ref() else {
        return false;
    };
    s.replicas == want
        && s.ready_replicas == want
        && s.updated_replicas == want
        && s.updated_ready_replicas == want
        && s.observed_generation == cs.metadata.generation
        && s.current_revision == s.update_revision
}

pub fn cloneset_status_line(cs: &CloneSet) -> String {
    cs.status.as_ref().map_or_else(
        || "no status".to_owned(),
        |s| {
            format!(
                "replicas={} ready={} updated={} updatedReady={} gen={:?}/{:?} rev={:?}->{:?}",
                s.replicas,
                s.ready_replicas,
                s.updated_replicas,
                s.updated_ready_replicas,
                s.observed_generation,
                cs.metadata.generation,
                s.current_revision,
                s.update_revision
            )
        },
    )
}
