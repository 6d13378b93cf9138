//! The ImageListPullJob controller: watches ImageListPullJobs and the ImagePullJobs they
//! control, runs [`list_plan::plan`] per list and applies it (creates and deletes the
//! list's ImagePullJobs, writes the list's status through the status subresource,
//! conditional on the list's resourceVersion, deletes lists past their TTL). The
//! ImagePullJobs themselves are pulled by the ImagePullJob controller ([`super::run`]).
//!
//! The jobs of a list are read from the API server on every reconcile (a list of the
//! namespace's ImagePullJobs, filtered by controller reference), not from the watch
//! cache: a job created by the previous reconcile is then always seen, so none is made
//! twice (the reference keeps creation expectations for the same purpose).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use inplace_proto::imagelistpulljob::{ImageListPullJob, ImageListPullJobStatus};
use inplace_proto::imagepulljob::ImagePullJob;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use std::collections::BTreeMap;
use tracing::{info, warn};

use super::list_plan::{self, TEMPLATE_HASH_LABEL};
use super::{Error, is_conflict, kube_err};
use crate::events::{EventSink, Note};
use crate::watch::Scope;

struct Ctx {
    client: Client,
    events: EventSink,
}

/// Runs the ImageListPullJob controller until `stop` completes.
pub async fn run<S>(client: Client, scope: Scope, events: EventSink, stop: S)
where
    S: Future<Output = ()> + Clone + Send + Sync + 'static,
{
    // A cluster with CRDs from before this kind (e.g. Helm with crds.install=false and the
    // CRDs not yet re-applied), or an API server that has just restarted and not loaded
    // the CRD yet: one warning, then asked again until served, not a watch failing
    // forever nor a controller off for the life of the process.
    let api_version = ImageListPullJob::api_version(&());
    let served = crate::discovery::wait_until_served(
        &client,
        &api_version,
        "imagelistpulljobs",
        "the ImageListPullJob controller (its CRD is in deploy/crds)",
    );
    tokio::select! {
        () = served => {}
        () = stop.clone() => return,
    }
    let controller = Controller::new(
        scope.api::<ImageListPullJob>(&client),
        watcher::Config::default(),
    )
    .trigger_backoff(crate::watch_backoff::relist())
    .owns(
        scope.api::<ImagePullJob>(&client),
        watcher::Config::default(),
    );
    let ctx = Arc::new(Ctx { client, events });
    info!("ImageListPullJob controller started");
    let results = controller
        .graceful_shutdown_on(stop)
        .run(
            |list, ctx| {
                let span = tracing::info_span!(
                    "reconcile",
                    imagelistpulljob = %format_args!("{}/{}", list.namespace().unwrap_or_default(), list.name_any())
                );
                tracing::Instrument::instrument(reconcile(list, ctx), span)
            },
            error_policy,
            ctx,
        );
    crate::runtime::drain_results(results, "imagelistpulljob").await;
    info!("ImageListPullJob controller stopped");
}

fn error_policy(list: Arc<ImageListPullJob>, e: &Error, _: Arc<Ctx>) -> Action {
    match e {
        Error::Kube { source, .. } if is_conflict(source) => {
            Action::requeue(Duration::from_secs(1))
        }
        _ => {
            warn!(list = %format!("{}/{}", list.namespace().unwrap_or_default(), list.name_any()), error = %e, "ImageListPullJob reconcile failed");
            Action::requeue(Duration::from_secs(5))
        }
    }
}

fn reference(list: &ImageListPullJob) -> ObjectReference {
    ObjectReference {
        api_version: Some(ImageListPullJob::api_version(&()).into_owned()),
        kind: Some(ImageListPullJob::kind(&()).into_owned()),
        namespace: list.namespace(),
        name: Some(list.name_any()),
        uid: list.metadata.uid.clone(),
        resource_version: list.resource_version(),
        ..ObjectReference::default()
    }
}

async fn reconcile(list: Arc<ImageListPullJob>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if list.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(uid) = list.metadata.uid.clone() else {
        return Ok(Action::await_change());
    };
    let ns = list.namespace().unwrap_or_default();
    let name = list.name_any();
    let lists: Api<ImageListPullJob> = Api::namespaced(ctx.client.clone(), &ns);
    let jobs_api: Api<ImagePullJob> = Api::namespaced(ctx.client.clone(), &ns);

    // a complete list needs no jobs read: only its TTL is looked at
    let complete = list
        .status
        .as_ref()
        .is_some_and(|s| s.completion_time.is_some());
    let jobs: Vec<ImagePullJob> = if complete {
        Vec::new()
    } else {
        jobs_api
            .list(&ListParams::default())
            .await
            .map_err(kube_err(format!("listing ImagePullJobs of {ns}")))?
            .items
            .into_iter()
            .filter(|j| {
                j.owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && o.uid == uid)
            })
            .collect()
    };
    let p = list_plan::plan(&list_plan::Input {
        list: &list,
        jobs: &jobs,
        now: k8s_openapi::jiff::Timestamp::now(),
    });

    if p.delete_list {
        info!(list = %format!("{ns}/{name}"), "deleting ImageListPullJob past ttlSecondsAfterFinished");
        match lists.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(kube_err(format!("deleting ImageListPullJob {ns}/{name}"))(
                    e,
                ));
            }
        }
        return Ok(Action::await_change());
    }

    for job in &p.delete {
        match jobs_api.delete(job, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(kube_err(format!("deleting ImagePullJob {ns}/{job}"))(e)),
        }
    }
    if !p.delete.is_empty() {
        ctx.events.send(Note {
            regarding: reference(&list),
            related: None,
            warning: false,
            reason: "Successful delete ImagePullJob".into(),
            action: "Delete".into(),
            message: format!(
                "Delete {} ImagePullJob: {}",
                p.delete.len(),
                p.delete.join(", ")
            ),
        });
    }

    let owner = OwnerReference {
        api_version: ImageListPullJob::api_version(&()).into_owned(),
        kind: ImageListPullJob::kind(&()).into_owned(),
        name: name.clone(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let mut created = Vec::new();
    for new in &p.create {
        let job = ImagePullJob {
            metadata: ObjectMeta {
                generate_name: Some(new.generate_name.clone()),
                namespace: Some(ns.clone()),
                labels: Some(BTreeMap::from([(
                    TEMPLATE_HASH_LABEL.to_owned(),
                    new.hash.clone(),
                )])),
                owner_references: Some(vec![owner.clone()]),
                ..ObjectMeta::default()
            },
            spec: new.spec.clone(),
            status: None,
        };
        let made = jobs_api
            .create(&PostParams::default(), &job)
            .await
            .map_err(kube_err(format!(
                "creating the ImagePullJob of {} for {ns}/{name}",
                new.spec.image
            )))?;
        created.push(made.name_any());
    }
    if !created.is_empty() {
        info!(list = %format!("{ns}/{name}"), jobs = ?created, "created ImagePullJobs");
        ctx.events.send(Note {
            regarding: reference(&list),
            related: None,
            warning: false,
            reason: "Successful create ImagePullJob".into(),
            action: "Create".into(),
            message: format!(
                "Create {} ImagePullJob: {}",
                created.len(),
                created.join(", ")
            ),
        });
    }

    if list.status.as_ref() != Some(&p.status) {
        let patch =
            status_patch(&p.status, list.resource_version().as_deref()).map_err(|source| {
                Error::Encode {
                    what: format!("status of ImageListPullJob {ns}/{name}"),
                    source,
                }
            })?;
        lists
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err(format!(
                "writing status of ImageListPullJob {ns}/{name}"
            )))?;
    }
    Ok(match p.requeue_after_seconds {
        Some(s) => Action::requeue(Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1))),
        None => Action::await_change(),
    })
}

/// The merge patch writing the list's `status` whole, conditional on `resource_version`
/// (a list changed meanwhile answers 409 and is planned again from the newer object).
fn status_patch(
    status: &ImageListPullJobStatus,
    resource_version: Option<&str>,
) -> Result<serde_json::Value, serde_json::Error> {
    let mut value = serde_json::to_value(status)?;
    // fields left out when empty must be cleared explicitly in a merge patch
    if let Some(obj) = value.as_object_mut() {
        for key in ["completionTime", "failedImageStatuses"] {
            obj.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    let mut body = serde_json::json!({"status": value});
    if let Some(rv) = resource_version {
        body["metadata"] = serde_json::json!({"resourceVersion": rv});
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_write_clears_what_is_gone_and_is_conditional() -> Result<(), serde_json::Error> {
        let status = ImageListPullJobStatus {
            desired: 2,
            ..Default::default()
        };
        let body = status_patch(&status, Some("7"))?;
        assert_eq!(
            body["metadata"],
            serde_json::json!({"resourceVersion": "7"})
        );
        assert_eq!(body["status"]["desired"], 2);
        for key in ["completionTime", "failedImageStatuses"] {
            assert_eq!(
                body["status"].get(key),
                Some(&serde_json::Value::Null),
                "{key}"
            );
        }
        Ok(())
    }
}
