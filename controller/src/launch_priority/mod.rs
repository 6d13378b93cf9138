//! Container launch priority at start-up: what OpenKruise's container-launch-priority
//! controller does (`pkg/controller/containerlaunchpriority`), for the pods of CloneSets.
//!
//! The pods we create carry the barrier env where their template declares launch
//! priorities ([`crate::plan::launch_barrier`]): each container reads the key
//! `p_<priority>` of the ConfigMap `<pod>-barrier`, and the kubelet does not start it
//! until that key exists. This loop watches the pods labelled with a CloneSet instance
//! id and, per pod ([`decide`]):
//! - creates the ConfigMap (owner reference to the pod, as the reference's: `v1` `Pod`,
//!   name and UID, so it goes with the pod) holding the key of the highest priority;
//! - adds the key of the next priority once every container of the higher ones is Ready;
//! - marks the pod `apps.kruise.io/container-launch-priority-completed: "true"` once the
//!   last priority is released.
//!
//! The watch keeps a trimmed copy of each pod (the barrier env, container readiness,
//! `ContainersReady`, the completion annotation); the ConfigMap is read when a pod with
//! something pending changes.

pub mod decide;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use inplace_proto::keys;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Config};
use kube::runtime::reflector::{self};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::plan::launch_barrier::barrier_name;
use crate::watch::Scope;
use decide::Step;

/// Why a reconcile of one pod did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
}

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
}

struct Ctx {
    client: Client,
}

/// Pods reconciled at once (the reference's `concurrentReconciles`).
const CONCURRENCY: u16 = 4;

/// Keeps of a pod only what [`decide::pending`] reads.
fn trim(pod: &mut Pod) {
    let annotations = pod.metadata.annotations.take().map(|a| {
        a.into_iter()
            .filter(|(k, _)| k == keys::CONTAINER_LAUNCH_PRIORITY_COMPLETED_ANNOTATION)
            .collect()
    });
    pod.metadata = ObjectMeta {
        name: pod.metadata.name.take(),
        namespace: pod.metadata.namespace.take(),
        uid: pod.metadata.uid.take(),
        resource_version: pod.metadata.resource_version.take(),
        deletion_timestamp: pod.metadata.deletion_timestamp.take(),
        annotations,
        ..ObjectMeta::default()
    };
    let containers = pod
        .spec
        .take()
        .map(|s| s.containers)
        .unwrap_or_default()
        .into_iter()
        .map(|c| Container {
            env: c.env.map(|env| {
                env.into_iter()
                    .filter(|e| e.name == keys::CONTAINER_BARRIER_ENV)
                    .collect()
            }),
            name: c.name,
            ..Container::default()
        })
        .collect();
    pod.spec = Some(PodSpec {
        containers,
        ..PodSpec::default()
    });
    pod.status = pod.status.take().map(|s| PodStatus {
        conditions: s.conditions.map(|c| {
            c.into_iter()
                .filter(|c| c.type_ == "ContainersReady")
                .collect()
        }),
        container_statuses: s.container_statuses.map(|cs| {
            cs.into_iter()
                .map(|mut c| {
                    c.last_state = None;
                    c.state = None;
                    c
                })
                .collect()
        }),
        ..PodStatus::default()
    });
}

/// Runs the launch-priority loop until `stop` completes.
pub async fn run<S>(client: Client, scope: Scope, stop: S)
where
    S: Future<Output = ()> + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let pods = watcher(
        scope.api::<Pod>(&client),
        watcher::Config::default().labels(keys::INSTANCE_ID_LABEL),
    )
    .backoff(crate::watch_backoff::relist())
    .modify(trim)
    .reflect(writer)
    .touched_objects()
    // only pods with something to release are reconciled
    .filter(|p| std::future::ready(p.as_ref().map_or(true, |p| decide::pending(p).is_some())));
    let ctx = Arc::new(Ctx { client });
    info!("container launch-priority loop started");
    let results = Controller::for_stream(pods, reader)
        .with_config(Config::default().concurrency(CONCURRENCY))
        // the pod stream backs off by itself
        .trigger_backoff(crate::watch_backoff::NoPause)
        .graceful_shutdown_on(stop)
        .run(
            |pod, ctx| {
                let span = tracing::info_span!(
                    "launch_priority",
                    pod = %format_args!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
                );
                tracing::Instrument::instrument(reconcile(pod, ctx), span)
            },
            error_policy,
            ctx,
        );
    crate::runtime::drain_results(results, "launch-priority").await;
    info!("container launch-priority loop stopped");
}

fn error_policy(pod: Arc<Pod>, e: &Error, _: Arc<Ctx>) -> Action {
    let Error::Kube { source, .. } = e;
    if matches!(source, kube::Error::Api(s) if s.code == 409) {
        return Action::requeue(Duration::from_secs(1));
    }
    warn!(pod = %format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()), error = %e, "launch-priority reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let Some(pending) = decide::pending(&pod) else {
        return Ok(Action::await_change());
    };
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let uid = pod.uid().unwrap_or_default();
    let cm_name = barrier_name(&name);
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let barrier = cms
        .get_opt(&cm_name)
        .await
        .map_err(kube_err(format!("reading ConfigMap {ns}/{cm_name}")))?;
    let complete = match decide::step(&pending, &uid, barrier.as_ref()) {
        Step::Nothing => return Ok(Action::await_change()),
        Step::Create { key, complete } => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(cm_name.clone()),
                    namespace: Some(ns.clone()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Pod".into(),
                        name: name.clone(),
                        uid: uid.clone(),
                        ..OwnerReference::default()
                    }]),
                    ..ObjectMeta::default()
                },
                data: Some([(key.clone(), "true".to_owned())].into()),
                ..ConfigMap::default()
            };
            cms.create(&PostParams::default(), &cm)
                .await
                .map_err(kube_err(format!("creating ConfigMap {ns}/{cm_name}")))?;
            info!(configmap = %cm_name, %key, "barrier created, priority released");
            complete
        }
        Step::Release { key, complete } => {
            let body = json!({"data": {key.as_str(): "true"}});
            cms.patch(&cm_name, &PatchParams::default(), &Patch::Strategic(&body))
                .await
                .map_err(kube_err(format!(
                    "releasing {key} in ConfigMap {ns}/{cm_name}"
                )))?;
            info!(configmap = %cm_name, %key, "priority released");
            complete
        }
        Step::Complete => true,
        Step::ReplaceStale => {
            let stale_uid = barrier.and_then(|b| b.metadata.uid);
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: stale_uid,
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            cms.delete(&cm_name, &dp).await.map_err(kube_err(format!(
                "deleting ConfigMap {ns}/{cm_name} of an earlier pod"
            )))?;
            info!(configmap = %cm_name, "barrier of an earlier pod of this name deleted");
            return Ok(Action::requeue(Duration::from_millis(200)));
        }
    };
    if complete {
        let body = json!({"metadata": {"annotations": {
            keys::CONTAINER_LAUNCH_PRIORITY_COMPLETED_ANNOTATION: "true"
        }}});
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
        pods.patch(&name, &PatchParams::default(), &Patch::Strategic(&body))
            .await
            .map_err(kube_err(format!("marking pod {ns}/{name} completed")))?;
        info!("every launch priority released");
    }
    Ok(Action::await_change())
}
