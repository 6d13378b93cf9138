//! The ContainerRecreateRequest controller: what OpenKruise's CRR mutating webhook and
//! its manager controller do, without a webhook. Per request, [`plan::plan`] decides and
//! this module writes:
//!
//! - a request as the docs show it (pod name and container names) gets the labels
//!   `crr.apps.kruise.io/pod-name`, `pod-uid`, `node-name` and every container's
//!   `statusContext` (one merge patch with a resourceVersion precondition); the node's
//!   daemon then sees it. A request the webhook would refuse is completed at once with
//!   the reason and a Warning event;
//! - `crr.apps.kruise.io/active` on one unfinished request per pod at a time; the others
//!   are reported Pending with a message naming the one that runs;
//! - with `unreadyGracePeriodSeconds`: the finalizer `crr.apps.kruise.io/unready-acquired`,
//!   the not-ready key `ContainerRecreateRequest` / `<ns>/<name>` in the pod's
//!   `KruisePodReady` condition, then the `unready-acquired` annotation the daemon waits
//!   out; key and finalizer are removed once the request is finished;
//! - completion past `activeDeadlineSeconds`, when the pod has gone, or when no daemon
//!   answered within 60 s; the container snapshot annotation while Recreating; deletion
//!   after `ttlSecondsAfterFinished`.
//!
//! Pods are watched for metadata only (no cache): a pod event wakes the requests that
//! name it, whose reconcile then reads the pod. A request's change wakes the other
//! requests of its pod (the next in line becomes active when one completes).

pub mod plan;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use inplace_proto::crr::ContainerRecreateRequest;
use inplace_proto::keys;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::delete_as_read::delete_as_read;
use crate::events::{EventSink, Note};
use crate::watch::Scope;

/// Why a reconcile of one request did not finish.
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
    crrs: Store<ContainerRecreateRequest>,
    events: EventSink,
}

/// Reason of the Warning event on a refused request.
pub const REFUSED_REASON: &str = "FailedValidation";

/// Runs the ContainerRecreateRequest controller until `stop` completes.
pub async fn run<S>(client: Client, scope: Scope, events: EventSink, stop: S)
where
    S: Future<Output = ()> + Send + Sync + 'static,
{
    let controller = Controller::new(
        scope.api::<ContainerRecreateRequest>(&client),
        watcher::Config::default(),
    )
    .trigger_backoff(crate::watch_backoff::relist());
    let crrs = controller.store();
    let for_pods = crrs.clone();
    let pods = watcher(
        scope.api::<PartialObjectMeta<Pod>>(&client),
        watcher::Config::default(),
    )
    .backoff(crate::watch_backoff::relist())
    .touched_objects();
    // a request's change (its completion above all) wakes the other requests of its pod:
    // the next one in line becomes active
    let for_siblings = crrs.clone();
    let controller = controller.watches(
        scope.api::<ContainerRecreateRequest>(&client),
        watcher::Config::default(),
        move |c: ContainerRecreateRequest| {
            let ns = c.metadata.namespace.clone();
            for_siblings
                .state()
                .iter()
                .filter(|o| o.metadata.namespace == ns && o.spec.pod_name == c.spec.pod_name)
                .filter(|o| o.metadata.uid != c.metadata.uid)
                .map(|o| ObjectRef::from_obj(o.as_ref()))
                .collect::<Vec<_>>()
        },
    );
    let controller = controller.watches_stream(pods, move |pod| {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        for_pods
            .state()
            .iter()
            .filter(|c| c.metadata.namespace.as_deref() == Some(ns.as_str()))
            .filter(|c| c.spec.pod_name == name)
            .map(|c| ObjectRef::from_obj(c.as_ref()))
            .collect::<Vec<_>>()
    });
    let ctx = Arc::new(Ctx {
        client,
        crrs,
        events,
    });
    info!("ContainerRecreateRequest controller started");
    let results = controller.graceful_shutdown_on(stop).run(
        |crr, ctx| {
            // every line of a reconcile names its object
            let span = tracing::info_span!(
                "reconcile",
                crr = %format_args!("{}/{}", crr.namespace().unwrap_or_default(), crr.name_any())
            );
            tracing::Instrument::instrument(reconcile(crr, ctx), span)
        },
        error_policy,
        ctx,
    );
    crate::runtime::drain_results(results, "crr").await;
    info!("ContainerRecreateRequest controller stopped");
}

fn error_policy(crr: Arc<ContainerRecreateRequest>, e: &Error, _: Arc<Ctx>) -> Action {
    let Error::Kube { source, .. } = e;
    if matches!(source, kube::Error::Api(s) if s.code == 409) {
        return Action::requeue(Duration::from_secs(1));
    }
    warn!(crr = %format!("{}/{}", crr.namespace().unwrap_or_default(), crr.name_any()), error = %e, "ContainerRecreateRequest reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

fn pp() -> PatchParams {
    PatchParams::default()
}

async fn reconcile(crr: Arc<ContainerRecreateRequest>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = crr.namespace().unwrap_or_default();
    let name = crr.name_any();
    let id = format!("{ns}/{name}");
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pod = pods
        .get_opt(&crr.spec.pod_name)
        .await
        .map_err(kube_err(format!("reading pod {ns}/{}", crr.spec.pod_name)))?;
    let siblings: Vec<Arc<ContainerRecreateRequest>> = ctx
        .crrs
        .state()
        .into_iter()
        .filter(|c| c.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|c| c.spec.pod_name == crr.spec.pod_name)
        .filter(|c| c.metadata.uid != crr.metadata.uid)
        .collect();
    let mut all: Vec<&ContainerRecreateRequest> = siblings.iter().map(|c| c.as_ref()).collect();
    all.push(crr.as_ref());
    let p = plan::plan(&crr, pod.as_ref(), &all, Timestamp::now());
    let api: Api<ContainerRecreateRequest> = Api::namespaced(ctx.client.clone(), &ns);

    if p.release_not_ready {
        if let Some(pod) = &pod
            && pod.metadata.deletion_timestamp.is_none()
        {
            set_not_ready(&pods, pod, &plan::not_ready_key(&crr), false).await?;
        }
        let finalizers: Vec<String> = crr
            .finalizers()
            .iter()
            .filter(|f| f.as_str() != keys::CRR_UNREADY_ACQUIRED_FINALIZER)
            .cloned()
            .collect();
        let body = json!({"metadata": {"resourceVersion": crr.resource_version(), "finalizers": finalizers}});
        api.patch(&name, &pp(), &Patch::Merge(&body))
            .await
            .map_err(kube_err(format!("removing the finalizer of {id}")))?;
        info!(crr = %id, "pod readiness released");
        return Ok(Action::await_change());
    }
    if p.delete {
        info!(crr = %id, "deleting ContainerRecreateRequest past ttlSecondsAfterFinished");
        match api.delete(&name, &delete_as_read(crr.as_ref())).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            // Changed since read (or replaced): its new version is reconciled anew.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                info!(crr = %id, "not deleted: it changed since read");
            }
            Err(e) => return Err(kube_err(format!("deleting {id}"))(e)),
        }
        return Ok(Action::await_change());
    }

    // The version of the request the status below was decided from: as read, or as our
    // own metadata write left it (that write was conditional on the version read).
    let mut decided_from = crr.resource_version();
    // metadata (and the one-time spec fill) first: the daemon must not see the request
    // before its statusContext is there (both land in one write)
    if !p.labels.is_empty() || p.fill.is_some() || p.sync_statuses.is_some() {
        let mut body = json!({"metadata": {"resourceVersion": crr.resource_version()}});
        if !p.labels.is_empty() {
            let labels: serde_json::Map<String, Value> = p
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().map_or(Value::Null, Value::String)))
                .collect();
            body["metadata"]["labels"] = Value::Object(labels);
        }
        if let Some(s) = &p.sync_statuses {
            body["metadata"]["annotations"] =
                json!({keys::CRR_SYNC_CONTAINER_STATUSES_ANNOTATION: s});
        }
        if let Some(f) = &p.fill {
            body["spec"] = json!({"containers": f.containers});
            if let Some(g) = f.termination_grace_period_seconds {
                body["spec"]["strategy"] = json!({"terminationGracePeriodSeconds": g});
            }
        }
        let written = api
            .patch(&name, &pp(), &Patch::Merge(&body))
            .await
            .map_err(kube_err(format!("updating {id}")))?;
        decided_from = written.resource_version();
        if p.fill.is_some() {
            info!(crr = %id, pod = %crr.spec.pod_name, active = p.labels.contains_key(keys::CRR_ACTIVE_LABEL), "filled in from the pod");
        }
    }
    if let Some(status) = &p.status {
        let body = status_patch(status, decided_from.as_deref());
        api.patch_status(&name, &pp(), &Patch::Merge(&body))
            .await
            .map_err(kube_err(format!("writing the status of {id}")))?;
        info!(crr = %id, phase = status.phase.as_str(), message = %status.message, "status");
    }
    if let Some(why) = &p.refused {
        warn!(crr = %id, reason = %why, "refused");
        ctx.events.send(Note {
            regarding: crr.object_ref(&()),
            related: pod.as_ref().map(|p| p.object_ref(&())),
            warning: true,
            reason: REFUSED_REASON.into(),
            action: "Validate".into(),
            message: format!("refused: {why}"),
        });
    }
    if p.acquire_not_ready
        && let Some(pod) = &pod
    {
        // finalizer first (so the key is always released), then the pod, then the
        // annotation the daemon waits on
        let gated = crate::plan::pod_conditions::has_gate(pod, keys::KRUISE_POD_READY_CONDITION);
        if gated {
            if !crr
                .finalizers()
                .iter()
                .any(|f| f == keys::CRR_UNREADY_ACQUIRED_FINALIZER)
            {
                let mut finalizers = crr.finalizers().to_vec();
                finalizers.push(keys::CRR_UNREADY_ACQUIRED_FINALIZER.into());
                let body = json!({"metadata": {"resourceVersion": crr.resource_version(), "finalizers": finalizers}});
                api.patch(&name, &pp(), &Patch::Merge(&body))
                    .await
                    .map_err(kube_err(format!("adding the finalizer of {id}")))?;
            }
            set_not_ready(&pods, pod, &plan::not_ready_key(&crr), true).await?;
        } else {
            info!(crr = %id, "the pod has no KruisePodReady readiness gate: not made not-ready");
        }
        let at = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let body =
            json!({"metadata": {"annotations": {keys::CRR_UNREADY_ACQUIRED_ANNOTATION: at}}});
        api.patch(&name, &pp(), &Patch::Merge(&body))
            .await
            .map_err(kube_err(format!("annotating {id}")))?;
        info!(crr = %id, "pod made not-ready for unreadyGracePeriodSeconds");
    }
    Ok(match p.requeue_after_seconds {
        Some(s) => Action::requeue(Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1))),
        None => Action::await_change(),
    })
}

/// The merge patch writing `status` whole (fields it leaves out are cleared), conditional
/// on `resource_version`, the version of the request the status was decided from: when the
/// request changed meanwhile (the daemon wrote its progress), the API server answers 409
/// and the reconcile runs again from the newer request ([`error_policy`]).
fn status_patch(
    status: &inplace_proto::crr::ContainerRecreateRequestStatus,
    resource_version: Option<&str>,
) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
    if let Some(obj) = value.as_object_mut() {
        for key in ["completionTime", "message", "containerRecreateStates"] {
            obj.entry(key).or_insert(Value::Null);
        }
    }
    let mut body = json!({"status": value});
    if let Some(rv) = resource_version {
        body["metadata"] = json!({"resourceVersion": rv});
    }
    body
}

/// Adds or removes the request's key in the pod's `KruisePodReady` condition (strategic
/// merge patch of the status, pinned to the pod version read: a concurrent writer of the
/// same condition makes it conflict and retry).
async fn set_not_ready(
    pods: &Api<Pod>,
    pod: &Pod,
    key: &crate::plan::not_ready::NotReadyMessage,
    add: bool,
) -> Result<(), Error> {
    if !crate::plan::pod_conditions::has_gate(pod, keys::KRUISE_POD_READY_CONDITION) {
        return Ok(());
    }
    let Some((status, message)) = plan::kruise_pod_ready(pod, key, add) else {
        return Ok(());
    };
    let at = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let body = json!({
        "metadata": {"resourceVersion": pod.resource_version()},
        "status": {"conditions": [{
            "type": keys::KRUISE_POD_READY_CONDITION,
            "status": status,
            "message": message,
            "lastTransitionTime": at,
        }]},
    });
    let name = pod.name_any();
    pods.patch_status(&name, &pp(), &Patch::Strategic(body))
        .await
        .map_err(kube_err(format!("patching KruisePodReady of pod {name}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use inplace_proto::crr::{ContainerRecreateRequestStatus, CrrPhase};

    #[test]
    fn the_status_write_is_conditional_on_the_version_decided_from() {
        let status = ContainerRecreateRequestStatus {
            phase: CrrPhase::Pending,
            message: "waiting for r0".into(),
            ..ContainerRecreateRequestStatus::default()
        };
        let body = status_patch(&status, Some("812"));
        assert_eq!(body["metadata"], json!({"resourceVersion": "812"}));
        assert_eq!(body["status"]["phase"], "Pending");
        assert_eq!(body["status"]["message"], "waiting for r0");
        // left out of the status: cleared, as the status is written whole
        for key in ["completionTime", "containerRecreateStates"] {
            assert_eq!(body["status"].get(key), Some(&Value::Null), "{key}");
        }
        assert_eq!(body.as_object().map(|o| o.len()), Some(2));
        // without a version (never the case for an object read from the API): no metadata
        assert_eq!(status_patch(&status, None).get("metadata"), None);
    }
}
