//! What every part of a CloneSet reconcile shares: the [`Settings`] of the reconciler and
//! the [`Context`] (API client, caches, expectations, events, metrics), built once by
//! [`super::run`]. It imports no other part of the runtime but the ImagePullJob cache it
//! holds, so the writers ([`super::apply`], [`super::status_writer`]) and the reconcile
//! loop ([`super`]) all import it without a circle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inplace_proto::{CloneSet, CloneSetStatus};
use kube::api::{PatchParams, PostParams};
use kube::{Client, ResourceExt};

use crate::discovery::ServerCapabilities;
use crate::events::EventSink;
use crate::expectations::Expectations;
use crate::metrics::Metrics;
use crate::plan::PlanOptions;
use crate::server::Health;
use crate::turns::Turns;
use crate::watch::{Scope, Stores};

use super::last_write::LastWrites;
use super::predownload_jobs::PreDownloader;

/// [`Settings::api_parallelism`] unless told otherwise (`--api-parallelism`).
pub const DEFAULT_API_PARALLELISM: usize = 64;

/// Settings of the reconciler.
#[derive(Clone, Debug)]
pub struct Settings {
    pub scope: Scope,
    /// Concurrent reconciles (different CloneSets).
    pub workers: u16,
    /// After this long an unobserved write is given up on.
    pub expectation_timeout: Duration,
    /// Reconcile every CloneSet at least this often.
    pub resync: Duration,
    /// Concurrent API calls of one action phase (deletes, updates). An in-place batch
    /// is two pod writes per pod started one after another, so a batch of 200 pods at 16
    /// in flight took 6 to 12 s on the bench's loaded API server, most of the rollout's
    /// time over its floor; kube-controller-manager deletes a ReplicaSet's batch all at
    /// once.
    pub api_parallelism: usize,
    /// Field manager / user agent name of our writes.
    pub field_manager: String,
    pub plan_options: PlanOptions,
    /// `CloneSetEventHandlerOptimization`: only pod updates that matter trigger a
    /// reconcile ([`crate::pod_events`]).
    pub event_handler_optimization: bool,
    /// `ResourcesDeletionProtection`: protected CloneSets carry a finalizer
    /// ([`crate::plan::protection`]).
    pub deletion_protection: bool,
    /// Pre-download jobs carry the update order of their nodes and pull in it
    /// ([`crate::plan::predownload::with_node_order`]); off: by node name.
    pub predownload_update_order: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            scope: Scope::default(),
            workers: 3,
            expectation_timeout: Duration::from_secs(300),
            resync: Duration::from_secs(300),
            api_parallelism: DEFAULT_API_PARALLELISM,
            field_manager: "inplace-controller".into(),
            plan_options: PlanOptions::default(),
            event_handler_optimization: false,
            deletion_protection: false,
            predownload_update_order: true,
        }
    }
}

impl Settings {
    /// The parameters of every patch: our field manager.
    pub fn patch_params(&self) -> PatchParams {
        PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        }
    }

    /// The parameters of every create: our field manager.
    pub fn post_params(&self) -> PostParams {
        PostParams {
            field_manager: Some(self.field_manager.clone()),
            ..PostParams::default()
        }
    }
}

/// Everything a reconcile needs.
pub struct Context {
    pub client: Client,
    pub stores: Stores,
    pub expectations: Expectations,
    pub events: EventSink,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub caps: ServerCapabilities,
    pub settings: Settings,
    /// The ImagePullJob cache of image pre-download (gate
    /// `PreDownloadImageForInPlaceUpdate`); `None` when off or not served.
    pub predownload: Option<PreDownloader>,
    pub(super) failures: Mutex<HashMap<String, u32>>,
    /// Per CloneSet UID: the status and resourceVersion our last status write left.
    pub status_writes: LastWrites<CloneSetStatus>,
    /// Per CloneSet UID: its `podsToDelete` names seen matching one of its pods
    /// ([`crate::plan::pods_to_delete`]); bounded by the names listed.
    pub(super) pods_to_delete_seen: Mutex<HashMap<String, std::collections::BTreeSet<String>>>,
    /// Turns true once every cache has synced. A watch channel wakes every waiting
    /// reconcile; awaiting the stores' readiness from each reconcile does not (only the
    /// last waiter was woken, and the others sat out their whole timeout).
    pub(super) synced: tokio::sync::watch::Receiver<bool>,
    /// `settings.workers` reconciles at once, in the order they fell due ([`Turns`]).
    pub(super) turns: Arc<Turns>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("stores", &self.stores)
            .field("caps", &self.caps)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Context {
    pub(super) fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `namespace/name` of a CloneSet, the key of its expectations.
pub fn key_of(cs: &CloneSet) -> String {
    format!("{}/{}", cs.namespace().unwrap_or_default(), cs.name_any())
}
