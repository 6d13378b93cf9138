//! Image pre-download for in-place update, the I/O side: keeps a watch of ImagePullJobs,
//! asks [`crate::plan::predownload::decide`] once per CloneSet reconcile and carries the
//! decision out: creates the jobs (an already existing one is fine: the name is fixed
//! per revision and container), labels the update ControllerRevision created or ignored,
//! deletes the CloneSet's jobs once its revisions have converged, and records the
//! `CreatedImagePullJob` / `FailedCreateImagePullJob` events.
//!
//! It exists only with the gate `PreDownloadImageForInPlaceUpdate` on, and only when the
//! server serves `imagepulljobs.apps.kruise.io`. Failures are logged and do not fail the
//! CloneSet reconcile (as in the reference); a failed create leaves the revision
//! unlabelled, so the next reconcile tries again.

use inplace_proto::CloneSet;
use inplace_proto::imagepulljob::ImagePullJob;
use inplace_proto::keys;
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{debug, info, warn};

use crate::events::{EventSink, Note};
use crate::plan::predownload::{self, Decision, Input};
use crate::plan::{PlanOptions, RevisionPlan, Snapshot};
use crate::watch::{Scope, Stores};

/// What the ImagePullJob writer writes with: the API client, the event sink, our field
/// manager name, the planner's options (borrowed from the reconciler's context), and
/// whether the jobs carry the update order of their nodes
/// ([`predownload::with_node_order`]).
#[derive(Clone, Copy)]
pub struct JobWriter<'a> {
    pub client: &'a Client,
    pub events: &'a EventSink,
    pub field_manager: &'a str,
    pub options: &'a PlanOptions,
    pub update_order: bool,
}

impl std::fmt::Debug for JobWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobWriter")
            .field("field_manager", &self.field_manager)
            .field("update_order", &self.update_order)
            .finish_non_exhaustive()
    }
}

/// How soon a reconcile whose pre-download write failed is followed by the next.
pub const RETRY_FAILED_WRITE: std::time::Duration = std::time::Duration::from_secs(5);

/// The ImagePullJob cache of the pre-download writer.
#[derive(Clone)]
pub struct PreDownloader {
    jobs: Store<ImagePullJob>,
    synced: tokio::sync::watch::Receiver<bool>,
}

impl std::fmt::Debug for PreDownloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreDownloader")
            .field("jobs", &self.jobs.len())
            .finish()
    }
}

/// Whether the server serves `imagepulljobs` in the version this controller writes
/// (`apps.kruise.io/v1beta1`, OpenKruise v1.9.0's storage version). A failed answer is
/// asked again by the start schedule, so that one lost request does not switch
/// pre-download off; only a server that never answers does (with a warning).
async fn serves_image_pull_jobs(client: &Client) -> bool {
    let asked = crate::discovery::serves_retrying(
        client,
        &ImagePullJob::api_version(&()),
        "imagepulljobs",
        crate::discovery::startup_backoff(),
        |e, retry_in| warn!(error = %e, ?retry_in, "cannot list apps.kruise.io resources yet"),
    )
    .await;
    asked.unwrap_or_else(|e| {
        warn!(error = %e, "cannot list apps.kruise.io resources");
        false
    })
}

impl PreDownloader {
    /// Starts the ImagePullJob watch of `scope` when `enabled` (the gate); `None` when the
    /// gate is off or the ImagePullJob CRD is not installed.
    pub async fn start(client: &Client, scope: &Scope, enabled: bool) -> Option<Self> {
        if !enabled {
            return None;
        }
        if !serves_image_pull_jobs(client).await {
            warn!(
                "PreDownloadImageForInPlaceUpdate is on but imagepulljobs.apps.kruise.io is not \
                 served: image pre-download disabled"
            );
            return None;
        }
        let (reader, writer) = reflector::store();
        let stream = watcher(
            scope.api::<ImagePullJob>(client),
            watcher::Config::default(),
        )
        .backoff(crate::watch_backoff::relist())
        .modify(|j: &mut ImagePullJob| j.metadata.managed_fields = None)
        .reflect(writer)
        .touched_objects();
        tokio::spawn(futures::StreamExt::for_each(stream, |r| async move {
            if let Err(e) = r {
                debug!(error = %e, "ImagePullJob watch");
            }
        }));
        let (tx, synced) = tokio::sync::watch::channel(false);
        let ready = reader.clone();
        tokio::spawn(async move {
            if ready.wait_until_ready().await.is_ok() {
                tx.send_replace(true);
            }
        });
        info!("image pre-download for in-place update enabled");
        Some(Self {
            jobs: reader,
            synced,
        })
    }

    /// Decides and acts for `cs` after its plan (`revisions` are the plan's, `snapshot`
    /// what it was made from: the pull order of new jobs is read from it). A write that
    /// failed does not fail the reconcile (as in the reference), but asks for the next one
    /// within [`RETRY_FAILED_WRITE`] (`Some`), so that a job is not left, say, after the
    /// revisions converged and nothing else reconciles the CloneSet until the resync.
    pub async fn reconcile(
        &self,
        ctx: &JobWriter<'_>,
        stores: &Stores,
        snapshot: Snapshot<'_>,
        revisions: &RevisionPlan,
    ) -> Option<std::time::Duration> {
        let cs = snapshot.cloneset;
        if !*self.synced.borrow() {
            debug!("ImagePullJob cache not synced yet; pre-download waits");
            return None;
        }
        let ns = cs.namespace().unwrap_or_default();
        let jobs: Vec<ImagePullJob> = self
            .jobs
            .state_filter(|j| j.metadata.namespace.as_deref() == Some(ns.as_str()))
            .iter()
            .map(|j| ImagePullJob::clone(j))
            .collect();
        let stored: Vec<ControllerRevision> =
            [&revisions.update_revision, &revisions.current_revision]
                .into_iter()
                .filter_map(|name| stores.revisions.get(&ObjectRef::new(name).within(&ns)))
                .map(|r| ControllerRevision::clone(&r))
                .collect();
        let mut decision = predownload::decide(&Input {
            cloneset: cs,
            update_revision: &revisions.update_revision,
            current_revision: &revisions.current_revision,
            revisions: &stored,
            jobs: &jobs,
            options: ctx.options,
        });
        if ctx.update_order && matches!(decision, Decision::Create { .. }) {
            let order = predownload::node_order_of(
                snapshot,
                &revisions.update_revision,
                &revisions.current_revision,
            );
            predownload::with_node_order(&mut decision, &order);
        }
        let failed = self.apply(ctx, cs, &ns, decision).await;
        failed.then_some(RETRY_FAILED_WRITE)
    }

    /// Carries `decision` out; true when one of its writes failed.
    async fn apply(
        &self,
        ctx: &JobWriter<'_>,
        cs: &CloneSet,
        ns: &str,
        decision: Decision,
    ) -> bool {
        let pp = PatchParams {
            field_manager: Some(ctx.field_manager.to_owned()),
            ..PatchParams::default()
        };
        let job_api: Api<ImagePullJob> = Api::namespaced(ctx.client.clone(), ns);
        let label = predownload::revision_label(&decision).map(|(r, k)| (r.to_owned(), k));
        match decision {
            Decision::Nothing(idle) => {
                debug!(?idle, "pre-download: nothing to do");
                return false;
            }
            Decision::Ignore { revision, reason } => {
                info!(%revision, %reason, "pre-download skipped for this revision");
            }
            Decision::Create { revision, jobs } => {
                let mut failed = false;
                for job in &jobs {
                    let name = job.name_any();
                    match job_api.create(&PostParams::default(), job).await {
                        Ok(_) => event(
                            ctx,
                            cs,
                            false,
                            keys::events::CREATED_IMAGE_PULL_JOB,
                            format!("created ImagePullJob {name} for image: {}", job.spec.image),
                        ),
                        Err(kube::Error::Api(s)) if s.code == 409 => {
                            debug!(job = %name, "ImagePullJob exists already");
                        }
                        Err(e) => {
                            failed = true;
                            event(
                                ctx,
                                cs,
                                true,
                                keys::events::FAILED_CREATE_IMAGE_PULL_JOB,
                                format!("failed to create ImagePullJob {name}: {e}"),
                            );
                        }
                    }
                }
                if failed {
                    // unlabelled: the next reconcile retries the missing jobs
                    return true;
                }
                info!(%revision, jobs = jobs.len(), "pre-download jobs in place");
            }
            Decision::Delete { jobs } => {
                let mut failed = false;
                for name in jobs {
                    match job_api.delete(&name, &DeleteParams::background()).await {
                        Ok(_) => info!(job = %name, "deleted ImagePullJob: revisions converged"),
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => {
                            failed = true;
                            warn!(job = %name, error = %e, "deleting ImagePullJob");
                        }
                    }
                }
                return failed;
            }
        }
        if let Some((revision, key)) = label {
            let patch = serde_json::json!({"metadata": {"labels": {key: "true"}}});
            let revs: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
            if let Err(e) = revs.patch(&revision, &pp, &Patch::Merge(&patch)).await {
                warn!(%revision, label = key, error = %e, "labelling ControllerRevision");
                return true;
            }
        }
        false
    }
}

fn event(ctx: &JobWriter<'_>, cs: &CloneSet, warning: bool, reason: &str, message: String) {
    if warning {
        warn!(reason, %message, "event");
    } else {
        info!(reason, %message, "event");
    }
    ctx.events.send(Note {
        regarding: cs.object_ref(&()),
        related: None,
        warning,
        reason: reason.to_owned(),
        action: "PreDownloadImage".to_owned(),
        message,
    });
}
