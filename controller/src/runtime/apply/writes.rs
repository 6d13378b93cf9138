//! The writes the plan made for its other actions ([`crate::plan::action_write`]): one
//! path that sends a planned patch or PVC delete and records what it expects to see; the
//! per-action code around it (creates, pod deletes, recreate and stall events) is in
//! `pods` and here.

use inplace_proto::CloneSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::Patch as KubePatch;
use tracing::{debug, info, warn};

use crate::error::{Error, is_conflict, is_not_found};
use crate::events::Note;
use crate::expectations::Expectation;
use crate::plan::action_write::{Patch, PvcDelete, Target, Write};
use crate::plan::{Action, UpdateMethod};

use super::{Actor, delete_only_uid, now_time, pod_ref};

/// What a failed write of `action` was doing (the error's text).
fn what(action: &Action, patch: &Patch) -> String {
    let name = &patch.name;
    match (action, patch.target) {
        (Action::ReownPvcToPod { pvc, pod }, _) => format!("hand PVC {pvc} to pod {pod}"),
        (Action::PrunePodsToDelete { .. }, _) => "prune spec.scaleStrategy.podsToDelete".into(),
        (Action::SetTemplateHash { .. }, _) => format!("label pod {name}"),
        (Action::Update { .. }, _) => format!("mark for recreate pod {name}"),
        (Action::AddFinalizer { .. } | Action::RemoveFinalizer { .. }, _) => {
            "write CloneSet finalizers".into()
        }
        (Action::AdoptPod { .. }, _) => format!("adopt pod {name}"),
        (Action::ReleasePod { .. }, _) => format!("release pod {name}"),
        (_, Target::PodStatus) => format!("patch status of pod {name}"),
        (_, target) => format!("patch {target:?} {name}"),
    }
}

impl Actor<'_> {
    /// The actions whose write is the planned write alone, plus what each does around it.
    pub(super) async fn act_planned(&self, action: &Action, write: &Write) -> Result<(), Error> {
        match (action, write) {
            (_, Write::Skip { why }) => {
                debug!(?action, why, "nothing to write");
                Ok(())
            }
            (Action::Create { .. }, Write::Create(recipe)) => self.create_pod(recipe).await,
            (Action::Delete { reason, .. }, Write::DeletePod { pod, uid, pvcs }) => {
                self.delete_pod(pod, uid, pvcs, *reason).await
            }
            (_, Write::DeletePvc(delete)) => self.delete_pvc(delete).await,
            (
                Action::Update {
                    pod,
                    method: UpdateMethod::Recreate,
                    revision,
                },
                Write::Patch(patch),
            ) => {
                self.recreate(pod, revision, patch, &what(action, patch))
                    .await
            }
            (
                Action::ReportInPlaceStall {
                    pod,
                    reason,
                    message,
                },
                Write::Patch(patch),
            ) => {
                let sent = self.send_patch(patch, &what(action, patch)).await;
                if !self.written_or_passed(sent)? {
                    return Ok(());
                }
                warn!(pod = %pod, reason, %message, "in-place update stalled");
                let pod = self.pod(pod)?;
                self.ctx.events.send(Note {
                    regarding: pod_ref(&pod),
                    related: Some(self.cs_ref.clone()),
                    warning: true,
                    reason: reason.clone(),
                    action: "UpdateInPlace".to_owned(),
                    message: message.clone(),
                });
                Ok(())
            }
            (_, Write::Patch(patch)) => {
                self.send_patch(patch, &what(action, patch)).await?;
                match action {
                    Action::PrunePodsToDelete { names } => {
                        info!(removed = ?names, "pruned podsToDelete");
                    }
                    Action::AddFinalizer { .. } | Action::RemoveFinalizer { .. } => {
                        info!(?action, "deletion-protection finalizer updated");
                    }
                    Action::AdoptPod { pod } => info!(pod = %pod, "adopted pod"),
                    Action::ReleasePod { pod } => info!(pod = %pod, "released pod"),
                    _ => {}
                }
                Ok(())
            }
            (_, other) => Err(Error::NotCached(format!(
                "a write of {action:?} (the plan has {other:?})"
            ))),
        }
    }

    /// Sends a planned patch (with its precondition and write time); a pod written is
    /// expected at the version the server answered.
    pub(super) async fn send_patch(&self, patch: &Patch, what: &str) -> Result<(), Error> {
        let body = patch.body(&now_time());
        let name = &patch.name;
        let pp = self.pp();
        let kube_err = |e| Error::kube(what, e);
        match patch.target {
            Target::Pod | Target::PodStatus => {
                let status = patch.target == Target::PodStatus;
                self.send_pod_patch(name, status, body, || what.to_owned())
                    .await?;
            }
            Target::Pvc => {
                self.api::<PersistentVolumeClaim>()
                    .patch(name, &pp, &KubePatch::Merge(&body))
                    .await
                    .map_err(kube_err)?;
            }
            Target::CloneSet => {
                self.api::<CloneSet>()
                    .patch(name, &pp, &KubePatch::Merge(&body))
                    .await
                    .map_err(kube_err)?;
            }
        }
        Ok(())
    }

    /// Deletes a PVC, only of the planned UID; gone or replaced is no failure.
    pub(super) async fn delete_pvc(&self, delete: &PvcDelete) -> Result<(), Error> {
        let PvcDelete { pvc, uid } = delete;
        match self
            .api::<PersistentVolumeClaim>()
            .delete(pvc, &delete_only_uid(uid))
            .await
        {
            Ok(_) => debug!(pvc = %pvc, "deleted PVC"),
            Err(e) if is_not_found(&e) || is_conflict(&e) => {}
            Err(e) => return Err(Error::kube(format!("delete PVC {pvc}"), e)),
        }
        self.expect(Expectation::PvcDeleted {
            name: pvc.clone(),
            uid: uid.clone(),
        });
        Ok(())
    }
}
