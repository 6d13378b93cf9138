//! The NodeImage lifecycle, applied: every NodeImage and every node, planned by
//! [`lifecycle::plan`] and written (create, delete, spec, status).
//!
//! It sweeps all of them at once rather than reconciling one object per event: a
//! NodeImage may exist without its node (to be deleted) and a node without its NodeImage
//! (to get one), so neither kind alone can key a reconcile, and the decisions are pure and
//! cheap (one pass over a few thousand nodes is well under a millisecond of planning).
//! A sweep runs when a watched object changes (debounced), when the earliest timer a plan
//! asked for is due, and at least every [`RESYNC`].
//!
//! It needs every ImagePullJob of the cluster to tell an orphaned tag from one whose job
//! lives in a namespace it cannot see, so it runs only in a controller that watches all
//! namespaces (`--namespace` unset).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use inplace_proto::imagepulljob::ImagePullJob;
use inplace_proto::nodeimage::{NodeImage, NodeImageSpec};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tracing::{debug, info, warn};

use super::lifecycle::{self, Step};
use super::{Error, kube_err};
use crate::delete_as_read::delete_only_uid;

/// The longest time between two sweeps.
pub const RESYNC: Duration = Duration::from_secs(60);
/// How long to wait for more events before a sweep.
const DEBOUNCE: Duration = Duration::from_millis(300);

/// Keeps of a node only what the plan reads: name, UID, deletion, the Ready condition.
fn strip_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    node.metadata.annotations = None;
    node.metadata.labels = None;
    node.spec = None;
    let ready: Vec<NodeCondition> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.type_ == "Ready")
        .cloned()
        .collect();
    node.status = Some(NodeStatus {
        conditions: Some(ready),
        ..NodeStatus::default()
    });
}

fn strip_job(job: &mut ImagePullJob) {
    job.metadata.managed_fields = None;
    job.metadata.annotations = None;
    job.status = None;
}

/// Every name that may need a step: the nodes' and the NodeImages'.
fn names(nodes: &Store<Node>, node_images: &Store<NodeImage>) -> BTreeSet<String> {
    nodes
        .state()
        .iter()
        .map(|n| n.name_any())
        .chain(node_images.state().iter().map(|n| n.name_any()))
        .collect()
}

/// Runs the lifecycle until `stop` completes.
pub async fn run<S>(client: Client, stop: S)
where
    S: Future<Output = ()> + Send + 'static,
{
    let (ni_store, ni_writer) = reflector::store();
    let ni_events = watcher(
        Api::<NodeImage>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(crate::watch_backoff::relist())
    .modify(|ni: &mut NodeImage| ni.metadata.managed_fields = None)
    .reflect(ni_writer)
    .map(|_| ())
    .boxed();
    let (node_store, node_writer) = reflector::store();
    let node_events = watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
        .backoff(crate::watch_backoff::relist())
        .modify(strip_node)
        .reflect(node_writer)
        .map(|_| ())
        .boxed();
    let (job_store, job_writer) = reflector::store();
    let job_events = watcher(
        Api::<ImagePullJob>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(crate::watch_backoff::relist())
    .modify(strip_job)
    .reflect(job_writer)
    .map(|_| ())
    .boxed();
    let mut events = futures::stream::select_all([ni_events, node_events, job_events]);
    let mut stop = std::pin::pin!(stop);

    // Nothing is decided before every cache has listed ("no NodeImage" must mean none).
    let synced = async {
        ni_store.wait_until_ready().await.is_ok()
            && node_store.wait_until_ready().await.is_ok()
            && job_store.wait_until_ready().await.is_ok()
    };
    let mut synced = std::pin::pin!(synced);
    loop {
        tokio::select! {
            () = &mut stop => return,
            ready = &mut synced => {
                if !ready {
                    warn!("NodeImage lifecycle: a cache never became ready");
                    return;
                }
                break;
            }
            _ = events.next() => {}
        }
    }
    info!("NodeImage lifecycle started");

    let mut next = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = tokio::time::sleep_until(next) => {}
            event = events.next() => {
                if event.is_none() {
                    break;
                }
                // Let a burst of events land in the caches first.
                let burst = tokio::time::sleep(DEBOUNCE);
                tokio::pin!(burst);
                loop {
                    tokio::select! {
                        () = &mut burst => break,
                        _ = events.next() => {}
                    }
                }
            }
        }
        let wait = sweep(&client, &node_store, &ni_store, &job_store).await;
        next = tokio::time::Instant::now() + wait.min(RESYNC);
    }
    info!("NodeImage lifecycle stopped");
}

/// Plans and applies one step for every name; returns when to sweep again.
async fn sweep(
    client: &Client,
    nodes: &Store<Node>,
    node_images: &Store<NodeImage>,
    jobs: &Store<ImagePullJob>,
) -> Duration {
    let job_uids: BTreeMap<(String, String), String> = jobs
        .state()
        .iter()
        .map(|j| {
            (
                (j.namespace().unwrap_or_default(), j.name_any()),
                j.uid().unwrap_or_default(),
            )
        })
        .collect();
    let now = Timestamp::now();
    let mut wait = RESYNC;
    for name in names(nodes, node_images) {
        let node = nodes.get(&reflector::ObjectRef::new(&name));
        let ni = node_images.get(&reflector::ObjectRef::new(&name));
        let plan = lifecycle::plan(&lifecycle::Input {
            node: node.as_deref(),
            node_image: ni.as_deref(),
            jobs: &job_uids,
            now,
        });
        if let Some(after) = plan.requeue_after {
            wait = wait.min(after.max(Duration::from_secs(1)));
        }
        if let Err(e) = apply(client, &name, ni.as_deref(), plan.step).await {
            // A conflict or a write that lost a race: the next sweep plans again.
            debug!(nodeimage = %name, error = %e, "NodeImage lifecycle step not applied");
            wait = wait.min(Duration::from_secs(2));
        }
    }
    wait
}

async fn apply(
    client: &Client,
    name: &str,
    current: Option<&NodeImage>,
    step: Step,
) -> Result<(), Error> {
    let api: Api<NodeImage> = Api::all(client.clone());
    match step {
        Step::Nothing => Ok(()),
        Step::Create { name, owner } => {
            let ni = NodeImage {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    owner_references: Some(vec![owner]),
                    ..ObjectMeta::default()
                },
                spec: NodeImageSpec::default(),
                status: None,
            };
            match api.create(&PostParams::default(), &ni).await {
                Ok(_) => {
                    info!(nodeimage = %name, "created NodeImage for its node");
                    Ok(())
                }
                // The ImagePullJob controller made it first.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(kube_err(format!("creating NodeImage {name}"))(e)),
            }
        }
        Step::Delete { name, uid } => match api.delete(&name, &delete_only_uid(&uid)).await {
            Ok(_) => {
                info!(nodeimage = %name, "deleted NodeImage: its node is gone");
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(kube_err(format!("deleting NodeImage {name}"))(e)),
        },
        Step::UpdateSpec {
            images,
            owner,
            reasons,
        } => {
            let Some(current) = current else {
                return Ok(());
            };
            // A replace carrying the resourceVersion read: a concurrent write (the
            // ImagePullJob controller adding a tag) wins and the next sweep plans again.
            let mut next = current.clone();
            next.spec.images = images;
            if let Some(owner) = owner {
                next.metadata
                    .owner_references
                    .get_or_insert_with(Vec::new)
                    .push(owner);
            }
            api.replace(name, &PostParams::default(), &next)
                .await
                .map_err(kube_err(format!("updating NodeImage {name}")))?;
            info!(nodeimage = %name, ?reasons, "NodeImage spec updated");
            Ok(())
        }
        Step::UpdateStatus { status, failed } => {
            let Some(current) = current else {
                return Ok(());
            };
            let mut next = current.clone();
            next.status = Some(status);
            api.replace_status(name, &PostParams::default(), &next)
                .await
                .map_err(kube_err(format!("writing status of NodeImage {name}")))?;
            for (tag, message) in failed {
                warn!(nodeimage = %name, %tag, %message, "image tag failed on its node");
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    /// A node keeps its name, UID and Ready condition only; the plan needs no more.
    #[test]
    fn a_stripped_node_keeps_what_the_plan_reads() -> Result<(), Box<dyn std::error::Error>> {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "uid": "u1", "labels": {"a": "b"},
                         "annotations": {"x": "y"}},
            "spec": {"podCIDR": "10.0.0.0/24"},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ],
                "images": [{"names": ["big"], "sizeBytes": 1}]
            }
        }))?;
        strip_node(&mut node);
        assert_eq!(node.metadata.name.as_deref(), Some("n1"));
        assert_eq!(node.metadata.uid.as_deref(), Some("u1"));
        assert!(node.metadata.labels.is_none() && node.spec.is_none());
        let status = node.status.as_ref().ok_or("no status")?;
        assert!(status.images.is_none());
        let conditions = status.conditions.as_ref().ok_or("no conditions")?;
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].type_, "Ready");
        let at: Timestamp = "2026-01-01T00:00:00Z".parse()?;
        assert_eq!(conditions[0].last_transition_time, Some(Time(at)));
        // And the plan reads it as Ready since then: a NodeImage is due after the delay.
        let later = at + lifecycle::CREATION_DELAY;
        let plan = lifecycle::plan(&lifecycle::Input {
            node: Some(&node),
            node_image: None,
            jobs: &BTreeMap::new(),
            now: later,
        });
        assert!(matches!(plan.step, Step::Create { .. }), "{plan:?}");
        Ok(())
    }
}
