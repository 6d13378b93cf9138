//! Orphan adoption and release (OpenKruise `cloneset_controller.go` `claimPods`: pods
//! matching the selector without an owner are adopted; owned pods no longer matching are
//! released).
//!
//! [`decide`] is the rule; [`steps`] makes the plan's steps of it: each a strategic merge
//! patch of the pod's owner references carrying the pod's UID (`metadata.uid` in the
//! body: the API server refuses the patch of a pod recreated under the same name).
//!
//! Only pods carrying `apps.kruise.io/cloneset-instance-id` are seen (the controller's pod
//! watch is filtered on it): every pod a CloneSet made, e.g. the pods left behind by
//! `kubectl delete cloneset --cascade=orphan`, which a CloneSet applied again adopts.
//! Unlike the reference, a pod without that label is not adopted.

use inplace_proto::CloneSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;

use crate::action_write::{Patch, Target, Write};
use crate::model::Action;
use crate::revision::owner_reference;
use crate::selector::Selector;
use crate::step::{Step, StepWrite};

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
        let matches = selector.matches_with(|key| {
            meta.labels
                .as_ref()
                .and_then(|l| l.get(key))
                .map(String::as_str)
        });
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

/// The owner reference an adoption writes: the CloneSet as the pod's controller (as kube's
/// `controller_owner_ref`, without `blockOwnerDeletion`).
fn adopting_owner(cs: &CloneSet) -> OwnerReference {
    OwnerReference {
        block_owner_deletion: None,
        ..owner_reference(cs)
    }
}

/// The plan's steps of [`decide`]: each claim with its patch, in pod name order.
pub fn steps(cs: &CloneSet, pods: &[Pod]) -> Vec<Step> {
    let owner = adopting_owner(cs);
    decide(cs, pods)
        .into_iter()
        .map(|claim| {
            let (action, pod, body) = match claim {
                Claim::Adopt { pod, uid } => (
                    Action::AdoptPod { pod: pod.clone() },
                    pod,
                    json!({"metadata": {"uid": uid, "ownerReferences": [owner]}}),
                ),
                Claim::Release { pod, uid } => (
                    Action::ReleasePod { pod: pod.clone() },
                    pod,
                    json!({"metadata": {"uid": uid, "ownerReferences": [
                        {"$patch": "delete", "uid": cs.metadata.uid}
                    ]}}),
                ),
            };
            let patch = Patch {
                target: Target::Pod,
                name: pod,
                resource_version: None,
                patch: body,
                stamp_conditions: false,
            };
            Step {
                action,
                write: Ok(StepWrite::Object(Write::Patch(patch))),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::{Value, json};

    use super::*;
    use crate::fixtures::cloneset;

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

    #[test]
    fn each_claim_is_a_step_with_its_pod_patch_carrying_the_pods_uid() {
        let cs = cloneset(json!({}));
        let pods = vec![
            pod("ours-relabelled", json!({"app": "moved"}), Some("cs-uid")),
            pod("orphan", json!({"app": "demo"}), None),
            pod("someone-elses", json!({"app": "demo"}), Some("other-uid")),
        ];
        // (action, pod patched, body sent)
        let want = [
            (
                Action::AdoptPod {
                    pod: "orphan".into(),
                },
                "orphan",
                json!({"metadata": {"uid": "uid-orphan", "ownerReferences": [{
                    "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                    "name": "demo", "uid": "cs-uid", "controller": true,
                }]}}),
            ),
            (
                Action::ReleasePod {
                    pod: "ours-relabelled".into(),
                },
                "ours-relabelled",
                json!({"metadata": {"uid": "uid-ours-relabelled", "ownerReferences": [
                    {"$patch": "delete", "uid": "cs-uid"}
                ]}}),
            ),
        ];
        let steps = steps(&cs, &pods);
        assert_eq!(steps.len(), want.len(), "{steps:?}");
        for (step, (action, name, body)) in steps.iter().zip(want) {
            assert_eq!(step.action, action);
            let Ok(StepWrite::Object(Write::Patch(patch))) = &step.write else {
                panic!("a patch: {step:?}")
            };
            assert_eq!(patch.target, Target::Pod);
            assert_eq!(patch.name, name);
            // No resourceVersion: the owner references are right whatever the version;
            // the UID in the body is the precondition.
            assert_eq!(patch.resource_version, None);
            assert_eq!(patch.body(&Time(crate::fixtures::t(0))), body);
        }
    }

    #[test]
    fn nothing_to_claim_is_no_step() {
        let cs = cloneset(json!({}));
        let ours = pod("ours", json!({"app": "demo"}), Some("cs-uid"));
        assert!(steps(&cs, &[ours]).is_empty());
    }
}
