//! The node side of the simulated kubelet: registration, node status heartbeats and
//! node Leases in `kube-node-lease` (the v1.20 node lifecycle controller takes a renewed
//! Lease as a heartbeat).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use thiserror::Error;
use tokio::sync::{Semaphore, watch};

use super::ippool::node_ip;
use super::model::Ms;
use super::pods::{FIELD_MANAGER, now_ms};
use super::render::{micro_time, time};
use super::stats::Stats;

/// The namespace of node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// Label on every simulated node.
pub const SIMULATED_LABEL: &str = "inplace.dev/simulated";

/// What the simulated nodes look like and how often they report.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub prefix: String,
    pub count: usize,
    pub cpu: String,
    pub memory: String,
    pub max_pods: u32,
    /// Extra labels on every node.
    pub labels: BTreeMap<String, String>,
    /// Taints on every node (none by default: pods must be able to land here).
    pub taints: Vec<Taint>,
    pub lease_interval: Ms,
    pub lease_duration_seconds: i32,
    pub status_interval: Ms,
    /// Node API calls in flight at most (separate from the pods' budget, so that pod
    /// traffic never starves the heartbeats).
    pub max_inflight: usize,
}

/// A node API call failed.
#[derive(Debug, Error)]
pub enum NodeError {
    #[error("node {node}: {source}")]
    Kube {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("node {node}: building the object: {source}")]
    Object {
        node: String,
        #[source]
        source: serde_json::Error,
    },
}

/// A node taint `key=value:Effect` (or `key:Effect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

impl std::str::FromStr for Taint {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kv, effect) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("taint {s:?}: want KEY[=VALUE]:EFFECT"))?;
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(format!(
                "taint {s:?}: effect must be NoSchedule, PreferNoSchedule or NoExecute"
            ));
        }
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        if key.is_empty() {
            return Err(format!("taint {s:?}: empty key"));
        }
        Ok(Taint {
            key: key.to_owned(),
            value: value.to_owned(),
            effect: effect.to_owned(),
        })
    }
}

/// The name of node `index`.
pub fn node_name(prefix: &str, index: usize) -> String {
    format!("{prefix}{index}")
}

fn conditions(now: Ms, since: Ms) -> Value {
    let cond = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": kind,
            "status": status,
            "lastHeartbeatTime": time(now),
            "lastTransitionTime": time(since),
            "reason": reason,
            "message": message,
        })
    };
    json!([
        cond(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        cond(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        cond(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        cond(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status (simulated)"
        ),
    ])
}

/// The Node object of node `index`, registered at `now`.
pub fn node_json(cfg: &NodeConfig, index: usize, now: Ms) -> Value {
    let name = node_name(&cfg.prefix, index);
    let mut labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
        (SIMULATED_LABEL, "true"),
        ("node.kubernetes.io/instance-type", "simulated"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    labels.insert(
        "topology.kubernetes.io/zone".into(),
        format!("zone-{}", index % 3),
    );
    labels.extend(cfg.labels.clone());
    let resources = json!({
        "cpu": cfg.cpu,
        "memory": cfg.memory,
        "pods": cfg.max_pods.to_string(),
        "ephemeral-storage": "100Gi",
    });
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": name, "labels": labels },
        "spec": taints_spec(&cfg.taints),
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": conditions(now, now),
            "addresses": [
                { "type": "InternalIP", "address": node_ip(index) },
                { "type": "Hostname", "address": name },
            ],
            "daemonEndpoints": { "kubeletEndpoint": { "Port": 10250 } },
            "nodeInfo": {
                "machineID": format!("sim-{index}"),
                "systemUUID": format!("sim-{index}"),
                "bootID": format!("sim-boot-{index}"),
                "kernelVersion": "simulated",
                "osImage": "inplace node simulator",
                "containerRuntimeVersion": "sim://0.1.0",
                "kubeletVersion": "v1.20.2",
                "kubeProxyVersion": "v1.20.2",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    })
}

fn taints_spec(taints: &[Taint]) -> Value {
    if taints.is_empty() {
        return json!({});
    }
    let list: Vec<Value> = taints
        .iter()
        .map(|t| json!({ "key": t.key, "value": t.value, "effect": t.effect }))
        .collect();
    json!({ "taints": list })
}

/// The Lease of node `name` (owned by the Node, so that deleting the Node deletes it).
pub fn lease_json(cfg: &NodeConfig, name: &str, node_uid: &str, now: Ms) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid,
            }],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": cfg.lease_duration_seconds,
            "renewTime": micro_time(now),
        },
    })
}

fn kube_err(node: &str) -> impl FnOnce(kube::Error) -> NodeError + '_ {
    move |source| NodeError::Kube {
        node: node.to_owned(),
        source,
    }
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == code)
}

fn pp() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// Talks to the API server for the simulated nodes.
#[derive(Clone)]
pub struct Nodes {
    cfg: Arc<NodeConfig>,
    nodes: Api<Node>,
    leases: Api<Lease>,
    registered_at: Ms,
}

impl std::fmt::Debug for Nodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nodes")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Nodes {
    pub fn new(client: Client, cfg: NodeConfig) -> Self {
        Nodes {
            cfg: Arc::new(cfg),
            nodes: Api::all(client.clone()),
            leases: Api::namespaced(client, LEASE_NAMESPACE),
            registered_at: now_ms(),
        }
    }

    /// Creates (or takes over) every node and its Lease, `max_inflight` at a time.
    pub async fn register(&self, stats: &Stats) -> Result<(), NodeError> {
        futures::stream::iter(0..self.cfg.count)
            .map(|i| async move {
                self.register_one(i).await?;
                Stats::inc(&stats.nodes);
                Ok::<(), NodeError>(())
            })
            .buffer_unordered(self.cfg.max_inflight.max(1))
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    async fn register_one(&self, index: usize) -> Result<(), NodeError> {
        let name = node_name(&self.cfg.prefix, index);
        let obj: Node = serde_json::from_value(node_json(&self.cfg, index, self.registered_at))
            .map_err(|source| NodeError::Object {
                node: name.clone(),
                source,
            })?;
        let uid = match self.nodes.create(&PostParams::default(), &obj).await {
            Ok(node) => node.metadata.uid,
            Err(e) if is_status(&e, 409) => {
                let labels = json!({ "metadata": { "labels": obj.metadata.labels } });
                self.nodes
                    .patch(&name, &pp(), &Patch::Strategic(labels))
                    .await
                    .map_err(kube_err(&name))?
                    .metadata
                    .uid
            }
            Err(e) => return Err(kube_err(&name)(e)),
        };
        // Create may drop the status on some servers: always send it once.
        self.heartbeat(index).await?;
        self.renew_lease(index, uid.as_deref()).await
    }

    /// Sends the node status with fresh heartbeat times.
    pub async fn heartbeat(&self, index: usize) -> Result<(), NodeError> {
        let name = node_name(&self.cfg.prefix, index);
        let full = node_json(&self.cfg, index, now_ms());
        let mut status = full["status"].clone();
        status["conditions"] = conditions(now_ms(), self.registered_at);
        self.nodes
            .patch_status(&name, &pp(), &Patch::Strategic(json!({ "status": status })))
            .await
            .map_err(kube_err(&name))?;
        Ok(())
    }

    /// Renews the node's Lease, creating it when missing.
    pub async fn renew_lease(&self, index: usize, node_uid: Option<&str>) -> Result<(), NodeError> {
        let name = node_name(&self.cfg.prefix, index);
        let renew = json!({ "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": self.cfg.lease_duration_seconds,
            "renewTime": micro_time(now_ms()),
        } });
        match self.leases.patch(&name, &pp(), &Patch::Merge(renew)).await {
            Ok(_) => return Ok(()),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(kube_err(&name)(e)),
        }
        let uid = match node_uid {
            Some(uid) => uid.to_owned(),
            None => self
                .nodes
                .get(&name)
                .await
                .map_err(kube_err(&name))?
                .metadata
                .uid
                .unwrap_or_default(),
        };
        let lease: Lease = serde_json::from_value(lease_json(&self.cfg, &name, &uid, now_ms()))
            .map_err(|source| NodeError::Object {
                node: name.clone(),
                source,
            })?;
        match self.leases.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(e) => Err(kube_err(&name)(e)),
        }
    }

    /// Renews every Lease once per `lease_interval` and sends every node status once per
    /// `status_interval`, spread evenly over the interval, until `shutdown`.
    pub async fn keep_alive(&self, stats: Arc<Stats>, mut shutdown: watch::Receiver<bool>) {
        let count = self.cfg.count.max(1);
        let period = |interval: Ms| {
            Duration::from_micros(
                (u64::try_from(interval).unwrap_or(1) * 1000 / count as u64).max(100),
            )
        };
        let mut lease_tick = tokio::time::interval(period(self.cfg.lease_interval));
        let mut status_tick = tokio::time::interval(period(self.cfg.status_interval));
        let sem = Arc::new(Semaphore::new(self.cfg.max_inflight.max(1)));
        let lease_busy: Arc<Vec<AtomicBool>> =
            Arc::new((0..count).map(|_| AtomicBool::new(false)).collect());
        let status_busy: Arc<Vec<AtomicBool>> =
            Arc::new((0..count).map(|_| AtomicBool::new(false)).collect());
        let (mut next_lease, mut next_status) = (0usize, 0usize);
        loop {
            tokio::select! {
                _ = lease_tick.tick() => {
                    let i = next_lease;
                    next_lease = (next_lease + 1) % count;
                    if lease_busy[i].swap(true, Ordering::AcqRel) {
                        continue;
                    }
                    let (this, sem, busy, stats) = (self.clone(), sem.clone(), lease_busy.clone(), stats.clone());
                    tokio::spawn(async move {
                        if let Ok(_permit) = sem.acquire_owned().await {
                            match this.renew_lease(i, None).await {
                                Ok(()) => Stats::inc(&stats.lease_renewals),
                                Err(e) => {
                                    Stats::inc(&stats.lease_errors);
                                    tracing::warn!("lease: {e}");
                                }
                            }
                        }
                        busy[i].store(false, Ordering::Release);
                    });
                }
                _ = status_tick.tick() => {
                    let i = next_status;
                    next_status = (next_status + 1) % count;
                    if status_busy[i].swap(true, Ordering::AcqRel) {
                        continue;
                    }
                    let (this, sem, busy) = (self.clone(), sem.clone(), status_busy.clone());
                    tokio::spawn(async move {
                        if let Ok(_permit) = sem.acquire_owned().await
                            && let Err(e) = this.heartbeat(i).await
                        {
                            tracing::warn!("node status: {e}");
                        }
                        busy[i].store(false, Ordering::Release);
                    });
                }
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Deletes every simulated node and its Lease.
    pub async fn delete_all(&self) -> usize {
        futures::stream::iter(0..self.cfg.count)
            .map(|i| async move {
                let name = node_name(&self.cfg.prefix, i);
                let dp = DeleteParams::default();
                let node = self.nodes.delete(&name, &dp).await;
                let _ = self.leases.delete(&name, &dp).await;
                node.is_ok()
            })
            .buffer_unordered(self.cfg.max_inflight.max(1))
            .filter(|ok| futures::future::ready(*ok))
            .count()
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> NodeConfig {
        NodeConfig {
            prefix: "sim-node-".into(),
            count: 5,
            cpu: "32".into(),
            memory: "128Gi".into(),
            max_pods: 110,
            labels: [("extra".to_owned(), "x".to_owned())].into_iter().collect(),
            taints: Vec::new(),
            lease_interval: 10_000,
            lease_duration_seconds: 40,
            status_interval: 60_000,
            max_inflight: 4,
        }
    }

    #[test]
    fn node_object_is_a_valid_node() -> Result<(), serde_json::Error> {
        let node: Node = serde_json::from_value(node_json(&cfg(), 4, 1_700_000_000_000))?;
        assert_eq!(node.metadata.name.as_deref(), Some("sim-node-4"));
        let labels = node.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get(SIMULATED_LABEL).map(String::as_str),
            Some("true")
        );
        assert_eq!(
            labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some("zone-1")
        );
        assert_eq!(
            labels.get("kubernetes.io/hostname").map(String::as_str),
            Some("sim-node-4")
        );
        assert_eq!(labels.get("extra").map(String::as_str), Some("x"));
        let status = node.status.unwrap_or_default();
        let alloc = status.allocatable.unwrap_or_default();
        assert_eq!(alloc.get("cpu").map(|q| q.0.as_str()), Some("32"));
        assert_eq!(alloc.get("pods").map(|q| q.0.as_str()), Some("110"));
        let ready = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status);
        assert_eq!(ready.as_deref(), Some("True"));
        assert!(
            node.spec.and_then(|s| s.taints).is_none(),
            "no taints: pods must land here"
        );
        Ok(())
    }

    #[test]
    fn taints() -> Result<(), String> {
        let t: Taint = "a.b/c=d:NoSchedule".parse()?;
        assert_eq!(
            (t.key.as_str(), t.value.as_str(), t.effect.as_str()),
            ("a.b/c", "d", "NoSchedule")
        );
        let t: Taint = "k:NoExecute".parse()?;
        assert_eq!((t.key.as_str(), t.value.as_str()), ("k", ""));
        assert!("k=v".parse::<Taint>().is_err());
        assert!("k=v:Sometimes".parse::<Taint>().is_err());
        let mut c = cfg();
        c.taints = vec!["x=y:NoSchedule".parse()?];
        let node: Node = serde_json::from_value(node_json(&c, 0, 0)).map_err(|e| e.to_string())?;
        let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
        assert_eq!(taints.len(), 1);
        assert_eq!(taints[0].effect, "NoSchedule");
        Ok(())
    }

    #[test]
    fn lease_object_is_a_valid_lease() -> Result<(), serde_json::Error> {
        let lease: Lease =
            serde_json::from_value(lease_json(&cfg(), "sim-node-0", "uid-0", 1_500))?;
        let spec = lease.spec.unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("sim-node-0"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert!(spec.renew_time.is_some());
        let owner = lease.metadata.owner_references.unwrap_or_default();
        assert_eq!(owner.first().map(|o| o.uid.as_str()), Some("uid-0"));
        Ok(())
    }
}
