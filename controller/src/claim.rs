//! Orphan adoption and release (OpenKruise `cloneset_controller.go` `claimPods`: pods
//! matching the selector without an owner are adopted; owned pods no longer matching are
//! released).
//!
//! [`decide`] is pure; [`apply`] patches the pods' owner references, each patch carrying
//! the pod's UID so that it cannot land on a pod recreated under the same name.
//!
//! Only pods carrying `apps.kruise.io/cloneset-instance-id` are seen (the pod watch is
//! filtered on it): every pod a CloneSet made, e.g. the pods left behind by
//! `kubectl delete cloneset --cascade=orphan`, which a CloneSet applied again adopts.
//! Unlike the reference, a pod without that label is not adopted.

use inplace_proto::CloneSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::info;

use crate::error::Error;
use crate::expectations::{Expectation, Expectations};
use crate::plan::selector::Selector;

/// A change of a pod's controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Make the CloneSet the pod's controller.
    Adopt { pod: String, uid: String },
    /// Remove the CloneSet's owner reference: the pod no longer matches its selector.
    Release { pod: String, uid: String },
}

/// What `cs` adopts or releases among `pods` (pods of its namespace; others are ignored).
///
/// - a pod controlled by `cs` that no longer matches the selector is released, unless it
///   is terminating or the CloneSet is being deleted;
/// - a pod without a controller that matches the selector is adopted, unless it is
///   terminating or the CloneSet is being deleted;
/// - a pod controlled by something else is left alone;
/// - an empty or unreadable selector adopts nothing (it would match every pod) and
///   releases nothing (the CloneSet is reported invalid by the planner instead).
pub fn decide(cs: &CloneSet, pods: &[Pod]) -> Vec<Claim> {
    let Some(uid) = cs.metadata.uid.as_deref() else {
        return Vec::new();
    };
    if cs.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    let selector = match Selector::parse(&cs.spec.selector) {
        Ok(s) if !s.is_empty() => s,
        _ => return Vec::new(),
    };
    let ns = cs.metadata.namespace.as_deref();
    let mut claims = Vec::new();
    for pod in pods {
        let meta = &pod.metadata;
        if meta.namespace.as_deref() != ns || meta.deletion_timestamp.is_some() {
            continue;
        }
        let (Some(name), Some(pod_uid)) = (meta.name.clone(), meta.uid.clone()) else {
            continue;
        };
        let controller = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        let matches = selector.matches(pod.labels());
        match controller {
            Some(owner) if owner.uid == uid && !matches => claims.push(Claim::Release {
                pod: name,
                uid: pod_uid,
            }),
            None if matches => claims.push(Claim::Adopt {
                pod: name,
                uid: pod_uid,
            }),
            _ => {}
        }
    }
    claims.sort_by(|a, b| claim_pod(a).cmp(claim_pod(b)));
    claims
}

fn claim_pod(c: &Claim) -> &str {
    match c {
        Claim::Adopt { pod, .. } | Claim::Release { pod, .. } => pod,
    }
}

/// Patches the owner references of `claims`' pods; each write is recorded as an
/// expectation of `key`, so the next plan sees the pods with their new owner.
pub async fn apply(
    api: &Api<Pod>,
    pp: &PatchParams,
    cs: &CloneSet,
    claims: &[Claim],
    expectations: &Expectations,
    key: &str,
) -> Result<(), Error> {
    let owner = cs.controller_owner_ref(&());
    for claim in claims {
        let (name, body, verb) = match claim {
            Claim::Adopt { pod, uid } => (
                pod,
                json!({"metadata": {"uid": uid, "ownerReferences": [owner]}}),
                "adopt",
            ),
            Claim::Release { pod, uid } => (
                pod,
                json!({"metadata": {"uid": uid, "ownerReferences": [
                    {"$patch": "delete", "uid": cs.metadata.uid}
                ]}}),
                "release",
            ),
        };
        let written = api
            .patch(name, pp, &Patch::Strategic(body))
            .await
            .map_err(|e| Error::kube(format!("{verb} pod {name}"), e))?;
        info!(pod = %name, "{verb}ed pod");
        expectations.expect(
            key,
            Expectation::PodUpdated {
                name: name.clone(),
                uid: written.uid().unwrap_or_default(),
                resource_version: written.resource_version().unwrap_or_default(),
            },
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::{Value, json};

    use super::*;
    use inplace_testkit::pods::cloneset;

    fn pod(name: &str, labels: Value, owner_uid: Option<&str>) -> Pod {
        let owners = owner_uid.map(|uid| {
            json!([{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "x",
                    "uid": uid, "controller": true}])
        });
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                         "labels": labels, "ownerReferences": owners},
        }))
        .unwrap()
    }

    #[test]
    fn orphans_matching_the_selector_are_adopted_and_strays_released() {
        let cs = cloneset(json!({}));
        let pods = vec![
            pod("orphan", json!({"app": "demo"}), None),
            pod("orphan-other-app", json!({"app": "web"}), None),
            pod("ours", json!({"app": "demo"}), Some("cs-uid")),
            pod("ours-relabelled", json!({"app": "moved"}), Some("cs-uid")),
            pod("someone-elses", json!({"app": "demo"}), Some("other-uid")),
        ];
        assert_eq!(
            decide(&cs, &pods),
            vec![
                Claim::Adopt {
                    pod: "orphan".into(),
                    uid: "uid-orphan".into()
                },
                Claim::Release {
                    pod: "ours-relabelled".into(),
                    uid: "uid-ours-relabelled".into()
                },
            ]
        );
    }

    #[test]
    fn nothing_is_claimed_while_the_cloneset_or_the_pod_is_being_deleted() {
        let mut cs = cloneset(json!({}));
        let orphan = pod("orphan", json!({"app": "demo"}), None);
        let mut terminating = orphan.clone();
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(decide(&cs, std::slice::from_ref(&terminating)).is_empty());
        cs.metadata.deletion_timestamp = terminating.metadata.deletion_timestamp.clone();
        assert!(decide(&cs, &[orphan]).is_empty());
    }

    #[test]
    fn an_empty_selector_adopts_nothing_and_other_namespaces_are_ignored() {
        let cs = cloneset(json!({"selector": {"matchLabels": null}}));
        assert!(decide(&cs, &[pod("orphan", json!({"app": "demo"}), None)]).is_empty());
        let cs = cloneset(json!({}));
        let mut elsewhere = pod("orphan", json!({"app": "demo"}), None);
        elsewhere.metadata.namespace = Some("other".into());
        assert!(decide(&cs, &[elsewhere]).is_empty());
    }
}
