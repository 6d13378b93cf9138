//! Image pre-download for in-place update, the watch: keeps a cache of ImagePullJobs and
//! hands each CloneSet reconcile the jobs that CloneSet controls, which its plan's
//! snapshot holds ([`crate::plan::Snapshot::pre_download`]); the plan decides the writes
//! ([`crate::plan::predownload_steps`]) and the applier sends them.
//!
//! It exists only with the gate `PreDownloadImageForInPlaceUpdate` on, and watches once
//! the server serves `imagepulljobs.apps.kruise.io` (asked again while it does not). The
//! CloneSet controller drives the watch: a job's change queues its CloneSet.

use futures::StreamExt as _;
use futures::stream::BoxStream;
use inplace_proto::CloneSet;
use inplace_proto::imagepulljob::ImagePullJob;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt, predicates, watcher};
use kube::{Client, Resource};
use tracing::{debug, info};

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

/// The ImagePullJob changes the CloneSet controller drives: each queues the CloneSet that
/// controls the job (its controller reference), so a job the cache sees late (a relist
/// after a dropped watch) is still planned for, e.g. deleted once its CloneSet converged.
pub type JobTriggers = BoxStream<'static, Result<ImagePullJob, watcher::Error>>;

impl PreDownloader {
    /// The ImagePullJob cache of `scope` and the stream that fills it, when `enabled` (the
    /// gate); the CloneSet controller drives the stream ([`JobTriggers`]). The stream first
    /// waits until the server serves `imagepulljobs`; until then, and until the cache has
    /// listed them, pre-download waits ([`Self::jobs_of`]).
    pub fn start(client: &Client, scope: &Scope, enabled: bool) -> Option<(Self, JobTriggers)> {
        if !enabled {
            return None;
        }
        let (reader, writer) = reflector::store();
        let api = scope.api::<ImagePullJob>(client);
        let client = client.clone();
        let watch = async move {
            crate::discovery::wait_until_served(
                &client,
                &ImagePullJob::api_version(&()),
                "imagepulljobs",
                "image pre-download for in-place update",
            )
            .await;
            info!("image pre-download for in-place update enabled");
            watcher(api, watcher::Config::default())
                .backoff(crate::watch_backoff::relist())
                .modify(|j: &mut ImagePullJob| j.metadata.managed_fields = None)
                .reflect(writer)
                .touched_objects()
                // A job's status (its pulls' progress) is nothing the plan reads: only a
                // job new to the cache or changed in its spec queues its CloneSet.
                .predicate_filter(predicates::generation, PredicateConfig::default())
        };
        let triggers = futures::stream::once(watch).flatten().boxed();
        let (tx, synced) = tokio::sync::watch::channel(false);
        let ready = reader.clone();
        tokio::spawn(async move {
            if ready.wait_until_ready().await.is_ok() {
                tx.send_replace(true);
            }
        });
        let cache = Self {
            jobs: reader,
            synced,
        };
        Some((cache, triggers))
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
