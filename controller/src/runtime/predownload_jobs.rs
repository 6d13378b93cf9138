//! Image pre-download for in-place update, the watch: keeps a cache of ImagePullJobs and
//! hands each CloneSet reconcile the jobs that CloneSet controls, which its plan's
//! snapshot holds ([`crate::plan::Snapshot::pre_download`]); the plan decides the writes
//! ([`crate::plan::predownload_steps`]) and the applier sends them.
//!
//! It exists only with the gate `PreDownloadImageForInPlaceUpdate` on, and only when the
//! server serves `imagepulljobs.apps.kruise.io`.

use inplace_proto::CloneSet;
use inplace_proto::imagepulljob::ImagePullJob;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use tracing::{debug, info, warn};

use crate::plan::predownload;
use crate::watch::Scope;

/// The ImagePullJob cache of image pre-download.
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

    /// The ImagePullJobs `cs` controls; None while the cache has not listed them yet
    /// (pre-download waits: a job not seen yet would be created again, or not deleted).
    pub fn jobs_of(&self, cs: &CloneSet) -> Option<Vec<ImagePullJob>> {
        if !*self.synced.borrow() {
            debug!("ImagePullJob cache not synced yet; pre-download waits");
            return None;
        }
        let controlled = self.jobs.state_filter(|j| predownload::controls_job(cs, j));
        Some(controlled.iter().map(|j| ImagePullJob::clone(j)).collect())
    }
}
