//! The watches and their in-memory stores.
//!
//! One shared pod watch (only pods carrying `apps.kruise.io/cloneset-instance-id`), one
//! PVC watch (same label), one ControllerRevision watch and one node watch (names and
//! labels only, for topology-spread ranking). Pods are cached in the compact form of
//! [`cached`] (pods are the bulk of the memory); managed fields are stripped from the
//! other kinds before they enter a store. The streams are handed to the CloneSet `Controller`, which polls them:
//! each event updates the store first and then triggers the owning CloneSet.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use inplace_proto::{CloneSet, keys};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use kube::core::Expression;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

use crate::expectations::{CacheView, Seen};

/// The compact cached pod is the planner's input type; it lives in the plan crate.
pub use inplace_plan::cached;

pub use cached::{CachedPod, PodPlacement};

/// Which namespace(s) the controller manages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// `None`: every namespace.
    pub namespace: Option<String>,
}

impl Scope {
    /// An `Api` for a namespaced kind in this scope.
    pub fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
}

/// Read handles of every store the controller keeps.
#[derive(Clone)]
pub struct Stores {
    pub clonesets: Store<CloneSet>,
    pub pods: Store<CachedPod>,
    pub pvcs: Store<PersistentVolumeClaim>,
    pub revisions: Store<ControllerRevision>,
    pub nodes: Store<Node>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("clonesets", &self.clonesets.len())
            .field("pods", &self.pods.len())
            .field("pvcs", &self.pvcs.len())
            .field("revisions", &self.revisions.len())
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

/// A watch stream of `K` that keeps a store up to date.
pub type Reflected<K> = std::pin::Pin<Box<dyn Stream<Item = Result<K, watcher::Error>> + Send>>;

/// The secondary watches, not yet polled.
pub struct Streams {
    pub pods: Reflected<CachedPod>,
    pub pvcs: Reflected<PersistentVolumeClaim>,
    pub revisions: Reflected<ControllerRevision>,
    pub nodes: Reflected<Node>,
}

impl std::fmt::Debug for Streams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Streams")
    }
}

fn strip<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

fn reflected<K>(
    api: Api<K>,
    config: watcher::Config,
    modify: fn(&mut K),
) -> (Store<K>, Reflected<K>)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, config)
        .backoff(crate::watch_backoff::relist())
        .modify(modify)
        .reflect(writer)
        .touched_objects()
        .boxed();
    (reader, stream)
}

/// The watch of a store the controller's writes are planned from (its pods, PVCs and
/// revisions): every list, the first after a start included, is a consistent read (no
/// `resourceVersion`), never an answer of the API server's watch cache
/// (`resourceVersion=0`), which may lag behind writes already acknowledged. A controller
/// that has just started has no expectations of its own, so a list without the pod its
/// predecessor created would make it create another one, past `maxSurge`. The cost is one
/// read from etcd per list (at a start and after a `410 Gone`), not per event.
pub fn consistent(config: watcher::Config) -> watcher::Config {
    config.list_semantic(watcher::ListSemantic::MostRecent)
}

/// Builds the secondary watches for `scope`. The CloneSet store comes from the controller.
pub fn secondary_watches(client: &Client, scope: &Scope) -> (StoresPart, Streams) {
    let labelled = consistent(watcher::Config::default().labels(keys::INSTANCE_ID_LABEL));
    // `CachedPod` never holds managed fields: nothing to strip.
    let (pods, pod_stream) = reflected(
        scope.api::<CachedPod>(client),
        labelled.clone(),
        |_: &mut CachedPod| {},
    );
    let (pvcs, pvc_stream) = reflected(
        scope.api::<PersistentVolumeClaim>(client),
        labelled,
        strip::<PersistentVolumeClaim>,
    );
    let (revisions, revision_stream) = reflected(
        scope.api::<ControllerRevision>(client),
        consistent(watcher::Config::default()),
        strip::<ControllerRevision>,
    );
    let (nodes, node_stream) = reflected(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        |node: &mut Node| {
            node.metadata.managed_fields = None;
            node.metadata.annotations = None;
            node.spec = None;
            node.status = None;
        },
    );
    (
        StoresPart {
            pods,
            pvcs,
            revisions,
            nodes,
        },
        Streams {
            pods: pod_stream,
            pvcs: pvc_stream,
            revisions: revision_stream,
            nodes: node_stream,
        },
    )
}

/// The stores of [`secondary_watches`], before the CloneSet store is known.
#[derive(Clone)]
pub struct StoresPart {
    pub pods: Store<CachedPod>,
    pub pvcs: Store<PersistentVolumeClaim>,
    pub revisions: Store<ControllerRevision>,
    pub nodes: Store<Node>,
}

impl std::fmt::Debug for StoresPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoresPart")
    }
}

impl StoresPart {
    pub fn with_clonesets(self, clonesets: Store<CloneSet>) -> Stores {
        Stores {
            clonesets,
            pods: self.pods,
            pvcs: self.pvcs,
            revisions: self.revisions,
            nodes: self.nodes,
        }
    }
}

/// The controller owner reference of `meta`, if it points to a CloneSet.
pub fn cloneset_owner(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    meta.owner_references.iter().flatten().find(|o| {
        o.controller == Some(true)
            && o.kind == "CloneSet"
            && o.api_version.starts_with(&format!("{}/", keys::GROUP))
    })
}

fn owned_by(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Everything of one CloneSet that its plan reads.
///
/// The pods are the cache's own compact entries (shared, never copied): the planner reads
/// them as they are, and the act layer builds a full [`Pod`] ([`CachedPod::to_pod`]) only
/// for a pod it writes.
#[derive(Clone, Debug, Default)]
pub struct Owned {
    pub pods: Vec<Arc<CachedPod>>,
    pub pvcs: Vec<PersistentVolumeClaim>,
    pub revisions: Vec<ControllerRevision>,
    pub nodes: Vec<Node>,
}

/// Whether labels read through `get` satisfy `expr` (kube's `SelectorExt::matches` of an
/// [`Expression`], on the cached pod's labels instead of a `BTreeMap`).
fn expression_matches<'l>(expr: &Expression, get: impl Fn(&str) -> Option<&'l str>) -> bool {
    match expr {
        Expression::In(key, values) => get(key).is_some_and(|v| values.contains(v)),
        Expression::NotIn(key, values) => get(key).is_none_or(|v| !values.contains(v)),
        Expression::Exists(key) => get(key).is_some(),
        Expression::DoesNotExist(key) => get(key).is_none(),
        Expression::Equal(key, value) => get(key) == Some(value.as_str()),
        Expression::NotEqual(key, value) => get(key) != Some(value.as_str()),
    }
}

impl Stores {
    /// Whether every store has listed its objects once.
    ///
    /// Await it from ONE task only: a store's readiness wakes a single waiter, so
    /// concurrent waiters (and the CloneSet store, which the kube `Controller` itself
    /// awaits before running any reconcile) can sleep forever. The CloneSet store is
    /// therefore left out: no reconcile runs before it is ready anyway.
    pub async fn wait_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.pods.wait_until_ready().await?;
        self.pvcs.wait_until_ready().await?;
        self.revisions.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        Ok(())
    }

    /// The objects of `cs`: pods and revisions it controls, PVCs it owns, and the nodes its
    /// pods run on.
    ///
    /// PVCs by owner UID only, as the reference lists them: a PVC left by another CloneSet
    /// (deleted with `--cascade=orphan`) whose labels match this selector is not ours,
    /// and with `disablePVCReuse` this CloneSet would delete it (user data).
    pub fn owned(&self, cs: &CloneSet) -> Owned {
        let ns = cs.namespace().unwrap_or_default();
        let uid = cs.uid().unwrap_or_default();
        let selector: Option<kube::core::Selector> = cs.spec.selector.clone().try_into().ok();
        let expressions: Option<Vec<Expression>> =
            selector.clone().map(|s| s.into_iter().collect());
        let mut pods: Vec<Arc<CachedPod>> = self.pods.state_filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns.as_str())
                && owned_by(&p.metadata, &uid)
                && expressions.as_ref().is_none_or(|e| {
                    let labels = p.label_map();
                    e.iter().all(|e| expression_matches(e, |k| labels.get(k)))
                })
        });
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut pvcs: Vec<PersistentVolumeClaim> = self
            .pvcs
            .state_filter(|p| {
                p.metadata.namespace.as_deref() == Some(ns.as_str()) && owned_by(&p.metadata, &uid)
            })
            .iter()
            .map(|p| PersistentVolumeClaim::clone(p))
            .collect();
        pvcs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut revisions: Vec<ControllerRevision> = self
            .revisions
            .state_filter(|r| {
                r.metadata.namespace.as_deref() == Some(ns.as_str()) && owned_by(&r.metadata, &uid)
            })
            .iter()
            .map(|r| ControllerRevision::clone(r))
            .collect();
        revisions.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let node_names: std::collections::BTreeSet<&str> =
            pods.iter().filter_map(|p| p.node_name()).collect();
        let nodes = node_names
            .into_iter()
            .filter_map(|n| self.nodes.get(&ObjectRef::new(n)))
            .map(|n| Node::clone(&n))
            .collect();
        Owned {
            pods,
            pvcs,
            revisions,
            nodes,
        }
    }

    /// A view of one namespace for expectation checks.
    pub fn view<'a>(&'a self, namespace: &'a str) -> NamespaceView<'a> {
        NamespaceView {
            stores: self,
            namespace,
        }
    }
}

/// [`CacheView`] over the stores, for one namespace.
#[derive(Debug)]
pub struct NamespaceView<'a> {
    stores: &'a Stores,
    namespace: &'a str,
}

fn seen<K: Resource>(obj: Option<Arc<K>>) -> Option<Seen> {
    obj.map(|o| {
        let m = o.meta();
        Seen {
            uid: m.uid.clone().unwrap_or_default(),
            resource_version: m.resource_version.clone().unwrap_or_default(),
            terminating: m.deletion_timestamp.is_some(),
        }
    })
}

impl CacheView for NamespaceView<'_> {
    fn pod(&self, name: &str) -> Option<Seen> {
        seen(
            self.stores
                .pods
                .get(&ObjectRef::new(name).within(self.namespace)),
        )
    }
    fn pvc(&self, name: &str) -> Option<Seen> {
        seen(
            self.stores
                .pvcs
                .get(&ObjectRef::new(name).within(self.namespace)),
        )
    }
    fn revision(&self, name: &str) -> Option<Seen> {
        seen(
            self.stores
                .revisions
                .get(&ObjectRef::new(name).within(self.namespace)),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use axum::http::{Request, Response};
    use serde_json::json;

    use super::*;

    /// The query of every request a fake API server got: lists are answered empty, watches
    /// never.
    fn recording_client(seen: Arc<Mutex<Vec<String>>>) -> Client {
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let seen = seen.clone();
            async move {
                let query = req.uri().query().unwrap_or_default().to_owned();
                let watching = query.split('&').any(|kv| kv == "watch=true");
                seen.lock()
                    .unwrap()
                    .push(format!("{} {query}", req.uri().path()));
                if watching {
                    futures::future::pending::<()>().await;
                }
                let list = json!({"metadata": {"resourceVersion": "1"}, "items": []});
                Ok::<_, std::convert::Infallible>(Response::new(kube::client::Body::from(
                    list.to_string().into_bytes(),
                )))
            }
        });
        Client::new(service, "ns")
    }

    /// After an outage the pod store lists again within the relist cap of the API server
    /// being back (kube's default would wait up to a minute after a 40 s outage).
    #[tokio::test(start_paused = true)]
    async fn after_an_outage_the_pods_list_again_within_seconds() {
        let started = tokio::time::Instant::now();
        let back_at = started + Duration::from_secs(40);
        let lists = Arc::new(Mutex::new(Vec::new()));
        let seen = lists.clone();
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let seen = seen.clone();
            async move {
                let watching = req.uri().query().unwrap_or_default().contains("watch=true");
                if watching {
                    futures::future::pending::<()>().await;
                }
                let now = tokio::time::Instant::now();
                let up = now >= back_at;
                seen.lock().unwrap().push((now, up));
                let (status, body) = if up {
                    (
                        200,
                        json!({"metadata": {"resourceVersion": "1"}, "items": []}),
                    )
                } else {
                    (
                        503,
                        json!({"kind": "Status", "code": 503, "message": "outage"}),
                    )
                };
                Ok::<_, std::convert::Infallible>(
                    Response::builder()
                        .status(status)
                        .body(kube::client::Body::from(body.to_string().into_bytes()))
                        .unwrap(),
                )
            }
        });
        let scope = Scope {
            namespace: Some("ns".into()),
        };
        let (_stores, streams) = secondary_watches(&Client::new(service, "ns"), &scope);
        let task = drain(streams.pods);
        while !lists.lock().unwrap().iter().any(|(_, up)| *up) {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "never listed again"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        task.abort();
        let lists = lists.lock().unwrap().clone();
        let first_up = lists.iter().find(|(_, up)| *up).map(|(at, _)| *at).unwrap();
        let late = first_up - back_at;
        let bound = crate::watch_backoff::CAP.mul_f64(1.0 + crate::watch_backoff::JITTER);
        assert!(
            late <= bound,
            "listed {late:?} after the API server was back"
        );
        // Tried again all along, never sooner than the first delay after a failure (the
        // watcher's own `Init` after a failed list resets its backoff).
        let tries = lists.iter().filter(|(_, up)| !*up).count();
        assert!((8..=50).contains(&tries), "{tries} lists during the outage");
    }

    fn drain<K: Send + 'static>(stream: Reflected<K>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(stream.for_each(|_| async {}))
    }

    /// The stores a restarted controller plans from list consistently: no
    /// `resourceVersion` (a cached, possibly stale answer) and no `resourceVersionMatch`.
    #[tokio::test]
    async fn the_planned_from_stores_list_consistently() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let scope = Scope {
            namespace: Some("ns".into()),
        };
        let (_stores, streams) = secondary_watches(&recording_client(seen.clone()), &scope);
        let Streams {
            pods,
            pvcs,
            revisions,
            nodes: _,
        } = streams;
        let tasks = [drain(pods), drain(pvcs), drain(revisions)];
        let paths = [
            "/api/v1/namespaces/ns/pods",
            "/api/v1/namespaces/ns/persistentvolumeclaims",
            "/apis/apps/v1/namespaces/ns/controllerrevisions",
        ];
        let lists = |seen: &[String]| -> Vec<String> {
            seen.iter()
                .filter(|r| !r.contains("watch=true"))
                .cloned()
                .collect()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got = lists(&seen.lock().unwrap());
            if paths
                .iter()
                .all(|p| got.iter().any(|r| r.starts_with(&format!("{p} "))))
            {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "lists seen: {got:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for t in tasks {
            t.abort();
        }
        let got = lists(&seen.lock().unwrap());
        for list in got
            .iter()
            .filter(|r| paths.iter().any(|p| r.starts_with(&format!("{p} "))))
        {
            assert!(
                !list.contains("resourceVersion"),
                "a list from the watch cache: {list}"
            );
        }
        for p in &paths[..2] {
            assert!(
                got.iter()
                    .any(|r| r.starts_with(&format!("{p} ")) && r.contains("labelSelector=")),
                "{p}: {got:?}"
            );
        }
    }
}
