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

#[cfg(test)]
mod tests {
    use inplace_proto::{CloneSetSpec, CloneSetStatus, keys};
    use serde_json::{Value, json};

    use super::*;
    use crate::plan::sending::FailureKind;
    use crate::runtime::apply::tests::{recording_server, test_context};

    /// The planned write goes to the status subresource with the failure conditions of the
    /// sending, conditional on the version read; the next one over what it left while the
    /// cache still shows the version before.
    #[tokio::test]
    async fn the_planned_write_is_sent_with_the_sendings_failures_then_over_our_last_write()
    -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let mut cs = CloneSet::new("demo", CloneSetSpec::default());
        cs.metadata.namespace = Some("default".into());
        cs.metadata.uid = Some("u-demo".into());
        cs.metadata.generation = Some(3);
        cs.metadata.resource_version = Some("41".into());
        cs.status = Some(CloneSetStatus {
            replicas: 1,
            ..CloneSetStatus::default()
        });
        let mut answer = cs.clone();
        answer.metadata.resource_version = Some("42".into());
        answer.status = Some(CloneSetStatus {
            replicas: 2,
            current_revision: Some("demo-1".into()),
            ..CloneSetStatus::default()
        });
        let answer: &'static str = Box::leak(serde_json::to_string(&answer)?.into_boxed_str());
        let (client, seen, server) = recording_server(answer).await?;
        let ctx = test_context(client);

        let planned = |replicas| CloneSetStatus {
            replicas,
            ..CloneSetStatus::default()
        };
        let now = Timestamp::now();
        let mut outcome = Outcome::default();
        outcome.fail(
            FailureKind::Scale,
            Error::NotCached("pod default/demo-a".into()),
        );
        write(
            &ctx,
            &cs,
            &StatusWrite::planned(&cs, planned(2), Vec::new(), now),
            &outcome,
        )
        .await?;
        // The cache still shows version 41: the next write goes over what the first left.
        let second = StatusWrite::planned(&cs, planned(3), Vec::new(), now);
        write(&ctx, &cs, &second, &Outcome::default()).await?;
        server.abort();

        let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        let path = "/apis/apps.kruise.io/v1alpha1/namespaces/default/clonesets/demo/status";
        assert_eq!(seen.len(), 2, "{seen:?}");
        let (first, second) = (&seen[0], &seen[1]);
        assert_eq!((first.0.as_str(), first.1.as_str()), ("PATCH", path));
        let body = &first.2;
        assert_eq!(body["metadata"], json!({"resourceVersion": "41"}));
        assert_eq!(body["status"]["replicas"], 2);
        assert_eq!(body["status"]["observedGeneration"], 3);
        let conditions = body["status"]["conditions"]
            .as_array()
            .ok_or("conditions")?;
        assert_eq!(conditions.len(), 1, "{conditions:?}");
        assert_eq!(conditions[0]["type"], keys::CONDITION_FAILED_SCALE);
        assert_eq!(conditions[0]["status"], "True");
        assert_eq!(conditions[0].get("reason"), None);
        assert_eq!(
            conditions[0]["message"],
            Error::NotCached("pod default/demo-a".into()).to_string()
        );

        assert_eq!((second.0.as_str(), second.1.as_str()), ("PATCH", path));
        let body = &second.2;
        assert_eq!(body["metadata"], json!({"resourceVersion": "42"}));
        assert_eq!(body["status"]["replicas"], 3);
        // Only the status our first write left had it: nulled.
        assert_eq!(body["status"]["currentRevision"], Value::Null);
        assert_eq!(body["status"].get("conditions"), None);
        Ok(())
    }

    /// A CloneSet the planner cannot work with: its status as read, `FailedScale` added.
    #[tokio::test]
    async fn an_invalid_cloneset_gets_failed_scale_over_its_status()
    -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let mut cs = CloneSet::new("demo", CloneSetSpec::default());
        cs.metadata.namespace = Some("default".into());
        cs.metadata.generation = Some(5);
        cs.metadata.resource_version = Some("7".into());
        cs.status = Some(CloneSetStatus {
            replicas: 4,
            observed_generation: Some(4),
            ..CloneSetStatus::default()
        });
        let answer: &'static str = Box::leak(serde_json::to_string(&cs)?.into_boxed_str());
        let (client, seen, server) = recording_server(answer).await?;
        let ctx = test_context(client);
        let invalid = StatusWrite::invalid(&cs, "template outside the selector", Timestamp::now());
        write(&ctx, &cs, &invalid, &Outcome::default()).await?;
        server.abort();

        let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        assert_eq!(seen.len(), 1, "{seen:?}");
        let body = &seen[0].2;
        assert_eq!(body["metadata"], json!({"resourceVersion": "7"}));
        assert_eq!(body["status"]["replicas"], 4);
        assert_eq!(body["status"]["observedGeneration"], 5);
        let conditions = body["status"]["conditions"]
            .as_array()
            .ok_or("conditions")?;
        assert_eq!(conditions.len(), 1, "{conditions:?}");
        assert_eq!(conditions[0]["type"], keys::CONDITION_FAILED_SCALE);
        assert_eq!(conditions[0]["reason"], crate::plan::validate::REASON);
        assert_eq!(conditions[0]["message"], "template outside the selector");
        Ok(())
    }
}
