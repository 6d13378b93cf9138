//! The CloneSet's ControllerRevisions: the new one created (or an old one's number
//! bumped) before any pod is written, old ones deleted after a step without failures.

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch};
use tracing::info;

use crate::error::Error;
use crate::expectations::Expectation;
use crate::plan::revision::bump_patch;

use super::Actor;

impl Actor<'_> {
    pub(super) async fn write_revisions(&self) -> Result<(), Error> {
        let api = self.api::<ControllerRevision>();
        if let Some(rev) = &self.plan.revisions.create {
            let name = rev.name_any();
            let what = format!("revision {name}");
            if self.create_kept(api.clone(), rev, &what).await? {
                info!(revision = %name, "created ControllerRevision");
            }
            self.expect(Expectation::RevisionCreated { name });
        }
        if let Some(rev) = &self.plan.revisions.bump {
            let name = rev.name_any();
            let patch = Patch::Merge(bump_patch(rev));
            let written = api
                .patch(&name, &self.ctx.settings.patch_params(), &patch)
                .await
                .map_err(|e| Error::kube(format!("bump revision {name}"), e))?;
            self.expect(Expectation::RevisionUpdated {
                name,
                resource_version: written.resource_version().unwrap_or_default(),
            });
        }
        Ok(())
    }

    pub(super) async fn delete_old_revisions(&self) -> Result<(), Error> {
        for name in &self.plan.revisions.delete {
            let params = DeleteParams::default();
            self.delete::<ControllerRevision>("revision", name, &params)
                .await?;
            self.expect(Expectation::RevisionDeleted { name: name.clone() });
        }
        Ok(())
    }
}
