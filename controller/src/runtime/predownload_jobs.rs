//! Image pre-download for in-place update, the watch: keeps a cache of ImagePullJobs and
//! hands each CloneSet reconcile the jobs that CloneSet controls, which its plan's
//! snapshot holds ([`crate::plan::Snapshot::pre_download`]); the plan decides the writes
//! ([`crate::plan::predownload_steps`]) and the applier sends them.
//!
//! It exists only with the gate `PreDownloadImageForInPlaceUpdate` on, and watches once
//! the server serves `imagepulljobs.apps.kruise.io` (asked again while it does not). The
//! CloneSet controller drives the watch: a job's change queues its CloneSet.

use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use inplace_proto::CloneSet;
use inplace_proto::imagepulljob::ImagePullJob;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt, predicates, watcher};
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

/// How long pre-download waits before asking again whether the server serves
/// `imagepulljobs`, after it answered that it does not.
const NOT_SERVED_RECHECK: Duration = Duration::from_secs(15);

/// The ImagePullJob changes the CloneSet controller drives: each queues the CloneSet that
/// controls the job (its controller reference), so a job the cache sees late (a relist
/// after a dropped watch) is still planned for, e.g. deleted once its CloneSet converged.
pub type JobTriggers = BoxStream<'static, Result<ImagePullJob, watcher::Error>>;

/// Whether the server serves `imagepulljobs` in the version this controller writes
/// (`apps.kruise.io/v1beta1`, OpenKruise v1.9.0's storage version). A failed answer is
/// asked again by the start schedule; only a server that never answers counts as "not
/// served" (with a warning).
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

/// Asks `served` until it says yes, `recheck` apart; the number of "no" answers. A "no" is
/// not final: an API server that has just restarted answers 404 for a CRD's group until
/// it has loaded its CRDs, and pre-download switched off for the life of the process
/// would leave the jobs it created behind.
async fn until_served<F, Fut>(mut served: F, recheck: Duration) -> u32
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut refused = 0;
    while !served().await {
        if refused == 0 {
            warn!(
                ?recheck,
                "PreDownloadImageForInPlaceUpdate is on but imagepulljobs.apps.kruise.io is not \
                 served: image pre-download waits for it"
            );
        }
        refused += 1;
        tokio::time::sleep(recheck).await;
    }
    refused
}

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
            until_served(|| serves_image_pull_jobs(&client), NOT_SERVED_RECHECK).await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[tokio::test(start_paused = true)]
    async fn pre_download_waits_for_the_server_to_serve_image_pull_jobs() {
        // A restarted API server answers 404 for the group until its CRDs are loaded.
        let answers = [false, false, true, false];
        let asked = Cell::new(0);
        let recheck = Duration::from_secs(15);
        let began = tokio::time::Instant::now();
        let refused = until_served(
            || {
                let answer = answers[asked.get()];
                asked.set(asked.get() + 1);
                async move { answer }
            },
            recheck,
        )
        .await;
        assert_eq!(refused, 2, "two answers said not served");
        assert_eq!(asked.get(), 3, "asked until served, not after");
        assert_eq!(
            began.elapsed(),
            recheck * 2,
            "asked again {recheck:?} apart"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_serves_image_pull_jobs_is_asked_once() {
        let asked = Cell::new(0);
        let refused = until_served(
            || {
                asked.set(asked.get() + 1);
                async { true }
            },
            NOT_SERVED_RECHECK,
        )
        .await;
        assert_eq!((refused, asked.get()), (0, 1));
    }
}
