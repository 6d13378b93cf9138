//! Sends the CloneSet status write of a plan ([`crate::plan::status_write`]) through the
//! `status` subresource, with the failure conditions of what became of its steps, and the
//! Warning events of the planner's problems. What is written, over which version, and
//! which problems get an event are the plan's; this module only sends.
//!
//! The write moves over the status our own last write left while the cache does not show
//! that write yet ([`super::last_write`]): the cache often lags behind our previous write,
//! and a write over its version would be refused (409, the reconcile then retried
//! quietly, [`RetryClass::Stale`](crate::error::RetryClass)) for a change that was our own.

use std::borrow::Cow;

use inplace_proto::CloneSet;
use k8s_openapi::jiff::Timestamp;
use kube::api::Patch;
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, warn};

use crate::error::Error;
use crate::events::Note;
use crate::metrics::CloneSetLabels;
use crate::plan::status_write::StatusWrite;
use crate::runtime::apply::Outcome;
use crate::runtime::context::Context;

/// `write` moved over the status our own last write to `cs` left, when the cache does not
/// show that write yet.
fn based<'w>(ctx: &Context, cs: &CloneSet, write: &'w StatusWrite) -> Cow<'w, StatusWrite> {
    let uid = cs.uid().unwrap_or_default();
    match ctx
        .status_writes
        .base(&uid, cs.resource_version().as_deref())
    {
        Some((status, rv)) => Cow::Owned(write.over(status, rv)),
        None => Cow::Borrowed(write),
    }
}

/// Sends `write`, the status write of a plan for `cs`, after its steps came to `outcome`.
pub async fn write(
    ctx: &Context,
    cs: &CloneSet,
    write: &StatusWrite,
    outcome: &Outcome,
) -> Result<(), Error> {
    let write = based(ctx, cs, write);
    let status = write.status_with(&write.failures(outcome), Timestamp::now());
    let labels = CloneSetLabels::new(&write.namespace, &write.name);
    ctx.metrics.record_status(&labels, &status);

    let cs_ref = cs.object_ref(&());
    for e in write.events() {
        warn!(condition = e.action, reason = %e.reason, message = %e.message, "CloneSet problem");
        ctx.events.send(Note::of(e, cs_ref.clone(), None));
    }

    let body = write.body(&status).map_err(|source| Error::Encode {
        what: "CloneSet status".into(),
        source,
    })?;
    let Some(body) = body else {
        return Ok(());
    };
    let api: Api<CloneSet> = Api::namespaced(ctx.client.clone(), &write.namespace);
    let written = api
        .patch_status(
            &write.name,
            &ctx.settings.patch_params(),
            &Patch::Merge(&body),
        )
        .await
        .map_err(|e| Error::kube("write CloneSet status", e))?;
    if let (Some(uid), Some(left)) = (cs.uid(), written.resource_version()) {
        ctx.status_writes.record(
            &uid,
            cs.resource_version().as_deref(),
            written.status.unwrap_or_default(),
            left,
        );
    }
    debug!(
        replicas = status.replicas,
        ready = status.ready_replicas,
        updated = status.updated_replicas,
        "status written"
    );
    Ok(())
}
