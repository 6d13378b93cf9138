//! The ImagePullJob controller: watches ImagePullJobs, NodeImages and Nodes, runs
//! [`plan::plan`] per job and applies it (creates a node's NodeImage when missing, patches
//! `spec.images[<image>]` of NodeImages with the node's resourceVersion as precondition,
//! writes the job status through the status subresource, conditional on the job's
//! resourceVersion, deletes jobs past their TTL).
//!
//! Pods are not watched: a job's `podSelector` is resolved to nodes by listing the pods
//! of the job's namespace that match it (server-side label selector, compact
//! [`PodPlacement`]s, paged) when the job is reconciled. Jobs are few and short-lived
//! while a watch of every pod had cost ~9 MiB per 10,000 pods for the whole life of the
//! process. A running job with a `podSelector` is requeued every
//! [`POD_SELECTOR_RESYNC`], so pods that land on new nodes are picked up within that
//! bound (node changes and the job's own NodeImages still wake it at once).

pub mod lifecycle;
pub mod list;
pub mod list_plan;
pub mod nodeimages;
pub mod plan;
pub mod secrets;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use inplace_proto::imagepulljob::ImagePullJob;
use inplace_proto::nodeimage::{NodeImage, NodeImageSpec};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use rand::Rng as _;
use tracing::{info, warn};

use crate::delete_as_read::delete_as_read;
use crate::turns::Turns;
use crate::watch::{PodPlacement, Scope};

/// Why a reconcile of one ImagePullJob did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error("planning: {0}")]
    Plan(#[from] plan::PlanError),
    #[error("encoding {what}: {source}")]
    Encode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

struct Ctx {
    client: Client,
    node_images: Store<NodeImage>,
    nodes: Store<Node>,
    /// True once the two stores above have listed.
    synced: tokio::sync::watch::Receiver<bool>,
    /// The namespace the pull secrets are mirrored into ([`secrets`]); `None`: the
    /// NodeImages name the jobs' own Secrets.
    secrets_namespace: Option<String>,
    /// `workers` reconciles at once, in the order they fell due.
    turns: Arc<Turns>,
}

fn strip_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    node.metadata.annotations = None;
    node.spec = None;
    node.status = None;
}

fn strip_node_image(ni: &mut NodeImage) {
    ni.metadata.managed_fields = None;
}

/// Runs the ImagePullJob controller until `stop` completes. With `secrets_namespace`, the
/// jobs' pull secrets are mirrored there and the NodeImages name the copies ([`secrets`]).
pub async fn run<S>(
    client: Client,
    scope: Scope,
    workers: u16,
    secrets_namespace: Option<String>,
    stop: S,
) where
    S: Future<Output = ()> + Clone + Send + Sync + 'static,
{
    let (ni_store, ni_writer) = reflector::store();
    let ni_stream = watcher(
        Api::<NodeImage>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(crate::watch_backoff::relist())
    .modify(strip_node_image)
    .reflect(ni_writer)
    .touched_objects();
    let (node_store, node_writer) = reflector::store();
    let node_stream = watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
        .backoff(crate::watch_backoff::relist())
        .modify(strip_node)
        .reflect(node_writer)
        .touched_objects();

    let controller = Controller::new(
        scope.api::<ImagePullJob>(&client),
        watcher::Config::default(),
    )
    // No limit in the runner: `reconcile` takes its turn among `workers` in the order the
    // jobs fell due (kube-runtime's limit is not fair: see `crate::turns`).
    .with_config(kube::runtime::controller::Config::default().concurrency(0))
    .trigger_backoff(crate::watch_backoff::relist());
    let jobs = controller.store();
    let jobs_for_nodes = jobs.clone();
    let controller = controller
        // a NodeImage wakes the jobs that own one of its tags
        .watches_stream(ni_stream, |ni: NodeImage| {
            ni.spec
                .images
                .values()
                .flat_map(|i| i.tags.iter())
                .flat_map(|t| t.owner_references.iter())
                .filter(|o| o.kind.as_deref() == Some("ImagePullJob"))
                .filter_map(|o| {
                    let name = o.name.as_deref()?;
                    let ns = o.namespace.as_deref()?;
                    Some(ObjectRef::<ImagePullJob>::new(name).within(ns))
                })
                .collect::<Vec<_>>()
        })
        // a node change may change any job's node set
        .watches_stream(node_stream, move |_node: Node| {
            jobs_for_nodes
                .state()
                .iter()
                .filter(|j| {
                    j.status
                        .as_ref()
                        .is_none_or(|s| s.completion_time.is_none())
                })
                .map(|j| ObjectRef::from_obj(j.as_ref()))
                .collect::<Vec<_>>()
        });
    // One task awaits the caches and tells every reconcile through a watch channel: a
    // store's readiness wakes a single waiter only.
    let (synced_tx, synced) = tokio::sync::watch::channel(false);
    {
        let (node_images, nodes) = (ni_store.clone(), node_store.clone());
        tokio::spawn(async move {
            let ready = node_images.wait_until_ready().await.is_ok()
                && nodes.wait_until_ready().await.is_ok();
            if ready {
                synced_tx.send_replace(true);
            }
        });
    }
    if let Some(ns) = &secrets_namespace {
        tokio::spawn(secrets::run(
            client.clone(),
            jobs.clone(),
            ns.clone(),
            stop.clone(),
        ));
    }
    let turns = Arc::new(Turns::new(workers));
    let ctx = Arc::new(Ctx {
        client,
        node_images: ni_store,
        nodes: node_store,
        synced,
        secrets_namespace,
        turns: turns.clone(),
    });
    info!("ImagePullJob controller started");
    let results = controller
        .graceful_shutdown_on(turns.close_after(stop))
        .run(
            |job, ctx| {
                // every line of a reconcile names its object
                let span = tracing::info_span!(
                    "reconcile",
                    imagepulljob = %format_args!("{}/{}", job.namespace().unwrap_or_default(), job.name_any())
                );
                tracing::Instrument::instrument(reconcile(job, ctx), span)
            },
            error_policy,
            ctx,
        );
    crate::runtime::drain_results(results, "imagepulljob").await;
    info!("ImagePullJob controller stopped");
}

fn error_policy(job: Arc<ImagePullJob>, e: &Error, _: Arc<Ctx>) -> Action {
    match e {
        Error::Kube { source, .. } if is_conflict(source) => {
            Action::requeue(Duration::from_secs(1))
        }
        _ => {
            warn!(job = %format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any()), error = %e, "ImagePullJob reconcile failed");
            Action::requeue(Duration::from_secs(5))
        }
    }
}

/// Reconciles `job` once it has a worker ([`crate::turns`]); waiting, it holds little
/// more than its arguments (the reconcile's own state is allocated after).
async fn reconcile(job: Arc<ImagePullJob>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let Some(_turn) = ctx.turns.take().await else {
        // stopping: a reconcile that waited for a worker is not started
        return Ok(Action::await_change());
    };
    Box::pin(reconcile_now(job, Arc::clone(&ctx))).await
}

async fn reconcile_now(job: Arc<ImagePullJob>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // the caches must have listed before "no NodeImage" may mean "create one"
    if !*ctx.synced.borrow() {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let node_images: BTreeMap<String, NodeImage> = ctx
        .node_images
        .state()
        .iter()
        .map(|n| (n.name_any(), n.as_ref().clone()))
        .collect();
    let nodes: Vec<Node> = ctx
        .nodes
        .state()
        .iter()
        .map(|n| n.as_ref().clone())
        .collect();
    let ns = job.namespace().unwrap_or_default();
    let pods: Vec<Pod> = match &job.spec.pod_selector {
        Some(ps) => list_selected_pods(&ctx.client, &ns, ps).await?,
        None => Vec::new(),
    };
    let never = job.completion_type() == inplace_proto::imagepulljob::CompletionPolicyType::Never;
    let jitter = if never {
        rand::rng().random_range(-600..=600)
    } else {
        rand::rng().random_range(0..=300)
    };
    let input = plan::Input {
        job: &job,
        node_images: &node_images,
        nodes: &nodes,
        pods: &pods,
        now: k8s_openapi::jiff::Timestamp::now(),
        ttl_jitter_seconds: jitter,
    };
    let p = plan::plan(&input)?;
    let name = job.name_any();
    let jobs: Api<ImagePullJob> = Api::namespaced(ctx.client.clone(), &ns);

    if p.delete {
        info!(job = %format!("{ns}/{name}"), "deleting ImagePullJob past ttlSecondsAfterFinished");
        match jobs.delete(&name, &delete_as_read(job.as_ref())).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            // Changed since read (or replaced): its new version is reconciled anew.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                info!(job = %format!("{ns}/{name}"), "not deleted: it changed since read");
            }
            Err(e) => return Err(kube_err(format!("deleting ImagePullJob {ns}/{name}"))(e)),
        }
        return Ok(Action::await_change());
    }

    let nis: Api<NodeImage> = Api::all(ctx.client.clone());
    let mut writes = p.writes;
    if let Some(mirror) = &ctx.secrets_namespace {
        // The daemon reads Secrets in the mirror namespace only: name the copies, once
        // they exist (the mirror task makes them within seconds).
        if !writes.is_empty()
            && !secrets::copies_ready(&ctx.client, &job, mirror)
                .await
                .map_err(kube_err(format!("reading the pull secrets of {ns}/{name}")))?
        {
            info!(job = %format!("{ns}/{name}"), "waiting for the pull secrets' copies in {mirror}");
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        for w in &mut writes {
            w.spec.pull_secrets = secrets::mirror_references(&w.spec.pull_secrets, mirror);
        }
    }
    for w in &writes {
        if w.create {
            let ni = NodeImage {
                metadata: ObjectMeta {
                    name: Some(w.node.clone()),
                    ..ObjectMeta::default()
                },
                spec: NodeImageSpec {
                    images: BTreeMap::from([(w.image.clone(), w.spec.clone())]),
                },
                status: None,
            };
            nis.create(&PostParams::default(), &ni)
                .await
                .map_err(kube_err(format!("creating NodeImage {}", w.node)))?;
        } else {
            let rv = node_images
                .get(&w.node)
                .and_then(|n| n.resource_version())
                .unwrap_or_default();
            let spec = serde_json::to_value(&w.spec).map_err(|source| Error::Encode {
                what: format!("NodeImage {} image {}", w.node, w.image),
                source,
            })?;
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": rv},
                "spec": {"images": {w.image.clone(): spec}},
            });
            nis.patch(&w.node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube_err(format!("patching NodeImage {}", w.node)))?;
        }
        info!(job = %format!("{ns}/{name}"), node = %w.node, image = %w.image, "added image tag to NodeImage");
    }

    if job.status.as_ref() != Some(&p.status) {
        let patch =
            status_patch(&p.status, job.resource_version().as_deref()).map_err(|source| {
                Error::Encode {
                    what: format!("status of ImagePullJob {ns}/{name}"),
                    source,
                }
            })?;
        jobs.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err(format!(
                "writing status of ImagePullJob {ns}/{name}"
            )))?;
    }
    let running = p.status.completion_time.is_none();
    Ok(requeue_action(
        p.requeue_after_seconds,
        running && job.spec.pod_selector.is_some(),
    ))
}

/// The merge patch writing the job's `status` whole, conditional on `resource_version`,
/// the version of the job the status was decided from: when the job changed meanwhile,
/// the API server answers 409 and the job is planned again from the newer object
/// ([`error_policy`]).
fn status_patch(
    status: &inplace_proto::imagepulljob::ImagePullJobStatus,
    resource_version: Option<&str>,
) -> Result<serde_json::Value, serde_json::Error> {
    let mut value = serde_json::to_value(status)?;
    // fields left out when empty must be cleared explicitly in a merge patch
    if let Some(obj) = value.as_object_mut() {
        for key in ["completionTime", "message", "failedNodes"] {
            obj.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    let mut body = serde_json::json!({"status": value});
    if let Some(rv) = resource_version {
        body["metadata"] = serde_json::json!({"resourceVersion": rv});
    }
    Ok(body)
}

/// Longest time before a running job with a `podSelector` sees its pods on new nodes
/// (pods are listed on reconcile, not watched).
pub const POD_SELECTOR_RESYNC: Duration = Duration::from_secs(30);

/// When to reconcile again: the plan's own deadline, capped at [`POD_SELECTOR_RESYNC`]
/// when the job's node set follows pods.
fn requeue_action(plan_secs: Option<i64>, follows_pods: bool) -> Action {
    let planned = plan_secs.map(|s| Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1)));
    let resync = follows_pods.then_some(POD_SELECTOR_RESYNC);
    match (planned, resync) {
        (Some(a), Some(b)) => Action::requeue(a.min(b)),
        (Some(d), None) | (None, Some(d)) => Action::requeue(d),
        (None, None) => Action::await_change(),
    }
}

/// Pods per list page: bounds the transient memory of one list.
const POD_LIST_PAGE: u32 = 500;

/// The pods of `ns` matching `ps`, as the planner takes them (metadata, labels, node,
/// phase). The selector is applied by the server when it converts to a label selector;
/// the planner matches again either way.
async fn list_selected_pods(
    client: &Client,
    ns: &str,
    ps: &inplace_proto::imagepulljob::ImagePullJobPodSelector,
) -> Result<Vec<Pod>, Error> {
    let api: Api<PodPlacement> = Api::namespaced(client.clone(), ns);
    let mut lp = ListParams::default().limit(POD_LIST_PAGE);
    let sel = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
        match_labels: ps.match_labels.clone(),
        match_expressions: ps.match_expressions.clone(),
    };
    // an invalid selector is reported by the planner; list unfiltered then
    if let Ok(sel) = kube::core::Selector::try_from(sel) {
        lp = lp.labels_from(&sel);
    }
    let mut pods = Vec::new();
    loop {
        let page = api
            .list(&lp)
            .await
            .map_err(kube_err(format!("listing pods of {ns}")))?;
        pods.extend(page.items.iter().map(PodPlacement::to_pod));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => lp = lp.continue_token(&token),
            _ => break,
        }
    }
    Ok(pods)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_write_is_conditional_on_the_version_decided_from() -> Result<(), serde_json::Error>
    {
        let status = inplace_proto::imagepulljob::ImagePullJobStatus {
            desired: 3,
            ..Default::default()
        };
        let body = status_patch(&status, Some("99"))?;
        assert_eq!(
            body["metadata"],
            serde_json::json!({"resourceVersion": "99"})
        );
        assert_eq!(body["status"]["desired"], 3);
        for key in ["completionTime", "message", "failedNodes"] {
            assert_eq!(
                body["status"].get(key),
                Some(&serde_json::Value::Null),
                "{key}"
            );
        }
        assert_eq!(body.as_object().map(|o| o.len()), Some(2));
        Ok(())
    }

    #[test]
    fn requeue_follows_the_plan_and_caps_it_while_following_pods() {
        let cases = [
            (None, false, Action::await_change()),
            (Some(40), false, Action::requeue(Duration::from_secs(40))),
            (Some(0), false, Action::requeue(Duration::from_secs(1))),
            (None, true, Action::requeue(POD_SELECTOR_RESYNC)),
            (Some(5), true, Action::requeue(Duration::from_secs(5))),
            (Some(1200), true, Action::requeue(POD_SELECTOR_RESYNC)),
        ];
        for (plan_secs, follows, want) in cases {
            assert_eq!(
                requeue_action(plan_secs, follows),
                want,
                "{plan_secs:?} {follows}"
            );
        }
    }
}
