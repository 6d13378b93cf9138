//! PVCs of the CloneSet's instances: deleted with UID precondition, or handed over to the
//! pod that keeps using them.

use kube::ResourceExt;
use kube::api::Patch;
use serde_json::{Value, json};
use tracing::debug;

use crate::error::{Error, is_conflict, is_not_found};
use crate::expectations::Expectation;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::{Actor, delete_only_uid};

impl Actor<'_> {
    /// The CloneSet's cached PVC `name`, if any.
    fn owned_pvc(&self, name: &str) -> Option<&PersistentVolumeClaim> {
        self.owned
            .pvcs
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
    }

    pub(super) async fn delete_pvc(&self, name: &str) -> Result<(), Error> {
        let Some(pvc) = self.owned_pvc(name) else {
            return Ok(());
        };
        if pvc.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let uid = pvc.uid().unwrap_or_default();
        let dp = delete_only_uid(&uid);
        match self.pvc_api().delete(name, &dp).await {
            Ok(_) => debug!(pvc = %name, "deleted PVC"),
            Err(e) if is_not_found(&e) || is_conflict(&e) => {}
            Err(e) => return Err(Error::kube(format!("delete PVC {name}"), e)),
        }
        self.expect(Expectation::PvcDeleted {
            name: name.to_owned(),
            uid,
        });
        Ok(())
    }

    pub(super) async fn reown_pvc(&self, name: &str, pod_name: &str) -> Result<(), Error> {
        let Some(pvc) = self.owned_pvc(name) else {
            return Ok(());
        };
        let pod = &self.pod(pod_name)?;
        let cs_uid = self.cs.uid().unwrap_or_default();
        let mut refs: Vec<Value> = pvc
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.uid != cs_uid)
            .map(|o| serde_json::to_value(o).unwrap_or(Value::Null))
            .filter(|v| !v.is_null())
            .collect();
        refs.push(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod_name,
            "uid": pod.uid(),
            "controller": true,
            "blockOwnerDeletion": true,
        }));
        let body = json!({
            "metadata": {"resourceVersion": pvc.resource_version(), "ownerReferences": refs}
        });
        self.pvc_api()
            .patch(name, &self.pp(), &Patch::Merge(&body))
            .await
            .map_err(|e| Error::kube(format!("hand PVC {name} to pod {pod_name}"), e))?;
        Ok(())
    }
}
