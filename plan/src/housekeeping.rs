//! Bookkeeping the reference does on every reconcile, outside the scale/update step:
//!
//! - **PVC cleanup with `disablePVCReuse`** (docs "Support PVCs"; OpenKruise
//!   `cloneset_controller.go` `cleanupPVCs`; runs before the scale step): a PVC whose
//!   instance id no active pod has is not kept for reuse. If a finished or terminating pod
//!   still has that id, the PVC is handed over to that pod ([`Action::ReownPvcToPod`]) so
//!   that it goes when the pod goes; otherwise it is deleted ([`Action::DeletePvc`]).
//! - **`podsToDelete` pruning** (docs "Selective Pod deletion": "Controller will clear
//!   podsToDelete automatically once the listed Pods are deleted"): names of pods that are
//!   no longer active are removed ([`Action::PrunePodsToDelete`], planned last).
//!
//! - **`pod-template-hash` back-fill** (docs "Short hash label": since Kruise v1.1 every
//!   pod carries the short hash, and OpenKruise's `sync/cloneset_update.go` adds it to old
//!   pods that lack it):
//!   an active pod without the label gets its revision label's short hash
//!   ([`Action::SetTemplateHash`]).
//!
//! These actions do not count as the scale step's work: a plan may carry them together
//! with scale or update actions.

use std::collections::{BTreeMap, BTreeSet};

use inplace_proto::keys;

use super::model::{Action, PlanContext};

/// PVC actions of `disablePVCReuse` (empty when reuse is on).
pub fn pvc_cleanup(ctx: &PlanContext<'_>) -> Vec<Action> {
    let disabled = ctx
        .cloneset()
        .spec
        .scale_strategy
        .as_ref()
        .is_some_and(|s| s.disable_pvc_reuse);
    if !disabled {
        return Vec::new();
    }
    let active: BTreeSet<&str> = ctx.active_pods().filter_map(|p| p.instance_id).collect();
    let inactive: BTreeMap<&str, &str> = ctx
        .pods
        .iter()
        .filter(|p| !p.is_active())
        .filter_map(|p| Some((p.instance_id?, p.name)))
        .collect();
    let mut actions = Vec::new();
    // Only PVCs this CloneSet owns (the watch gives no other, but a delete is forever:
    // checked again here, by UID, where the decision is made).
    let uid = ctx.cloneset().metadata.uid.as_deref().unwrap_or_default();
    let mut pvcs: Vec<_> = ctx
        .snapshot
        .pvcs
        .iter()
        .filter(|pvc| pvc.metadata.deletion_timestamp.is_none())
        .filter(|pvc| {
            pvc.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| !uid.is_empty() && o.uid == uid)
        })
        .collect();
    pvcs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for pvc in pvcs {
        let Some(name) = pvc.metadata.name.clone() else {
            continue;
        };
        let id = pvc
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::INSTANCE_ID_LABEL))
            .map_or("", String::as_str);
        if active.contains(id) {
            continue;
        }
        match inactive.get(id) {
            Some(pod) => actions.push(Action::ReownPvcToPod {
                pvc: name,
                pod: (*pod).to_owned(),
            }),
            None => actions.push(Action::DeletePvc { pvc: name }),
        }
    }
    actions
}

/// Removes `podsToDelete` entries naming no active pod, but for those in `keep` (names
/// that match no pod and hold back a scale-in, [`super::pods_to_delete`]).
pub fn prune_pods_to_delete(ctx: &PlanContext<'_>, keep: &BTreeSet<&str>) -> Option<Action> {
    let listed = &ctx.cloneset().spec.scale_strategy.as_ref()?.pods_to_delete;
    let active: BTreeSet<&str> = ctx.active_pods().map(|p| p.name).collect();
    let gone: Vec<String> = listed
        .iter()
        .filter(|n| !active.contains(n.as_str()) && !keep.contains(n.as_str()))
        .cloned()
        .collect();
    (!gone.is_empty()).then_some(Action::PrunePodsToDelete { names: gone })
}

/// Active pods without `pod-template-hash` get their revision's short hash.
pub fn backfill_template_hash(ctx: &PlanContext<'_>) -> Vec<Action> {
    ctx.active_pods()
        .filter(|p| !p.has_template_hash)
        .filter_map(|p| {
            Some(Action::SetTemplateHash {
                pod: p.name.to_owned(),
                hash: super::revision::short_hash(p.revision?).to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use serde_json::json;

    use super::*;
    use crate::fixtures::{Fixture, cloneset, pod};

    /// A PVC of instance `id` owned by the fixture's CloneSet (UID `cs-uid`).
    fn pvc(name: &str, id: &str) -> PersistentVolumeClaim {
        owned_pvc(name, id, Some("cs-uid"))
    }

    fn owned_pvc(name: &str, id: &str, owner: Option<&str>) -> PersistentVolumeClaim {
        let owners = owner.map_or(json!([]), |uid| {
            json!([{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                    "name": "demo", "uid": uid, "controller": true}])
        });
        serde_json::from_value(json!({"metadata": {
            "name": name, "labels": {keys::INSTANCE_ID_LABEL: id}, "ownerReferences": owners}}))
        .unwrap()
    }

    /// PVCs this CloneSet does not own (left by another CloneSet deleted with
    /// `--cascade=orphan`, or by another owner) are never deleted nor handed over, even
    /// when their labels match and no pod has their instance id.
    #[test]
    fn pvcs_of_other_owners_or_none_are_never_touched() {
        let f = Fixture::new(
            cloneset(json!({"scaleStrategy": {"disablePVCReuse": true}})),
            vec![pod("demo-bbbbb", "demo-new").phase("Failed")],
        );
        let pvcs = [
            owned_pvc("d-b-xxxxx", "xxxxx", None),
            owned_pvc("d-b-bbbbb", "bbbbb", None),
            owned_pvc("d-other-yyyyy", "yyyyy", Some("other-uid")),
        ];
        let mut ctx = f.ctx();
        ctx.snapshot.pvcs = &pvcs;
        assert_eq!(pvc_cleanup(&ctx), vec![]);
    }

    #[test]
    fn disable_pvc_reuse_deletes_pvcs_without_pod_and_hands_others_to_their_finished_pod() {
        let f = Fixture::new(
            cloneset(json!({"scaleStrategy": {"disablePVCReuse": true}})),
            vec![
                pod("demo-aaaaa", "demo-new"),
                pod("demo-bbbbb", "demo-new").phase("Failed"),
            ],
        );
        let pvcs = [
            pvc("d-demo-aaaaa", "aaaaa"),
            pvc("d-demo-bbbbb", "bbbbb"),
            pvc("d-demo-ccccc", "ccccc"),
        ];
        let mut ctx = f.ctx();
        ctx.snapshot.pvcs = &pvcs;
        assert_eq!(
            pvc_cleanup(&ctx),
            vec![
                Action::ReownPvcToPod {
                    pvc: "d-demo-bbbbb".into(),
                    pod: "demo-bbbbb".into()
                },
                Action::DeletePvc {
                    pvc: "d-demo-ccccc".into()
                },
            ]
        );
    }

    #[test]
    fn pvcs_are_kept_for_reuse_by_default() {
        let f = Fixture::new(cloneset(json!({})), vec![]);
        let pvcs = [pvc("d-demo-ccccc", "ccccc")];
        let mut ctx = f.ctx();
        ctx.snapshot.pvcs = &pvcs;
        assert!(pvc_cleanup(&ctx).is_empty());
    }

    #[test]
    fn pods_to_delete_names_of_vanished_pods_are_pruned() {
        let f = Fixture::new(
            cloneset(json!({"scaleStrategy": {"podsToDelete": ["demo-a", "demo-gone", "demo-t"]}})),
            vec![
                pod("demo-a", "demo-new"),
                pod("demo-t", "demo-new").terminating(),
            ],
        );
        assert_eq!(
            prune_pods_to_delete(&f.ctx(), &BTreeSet::new()),
            Some(Action::PrunePodsToDelete {
                names: vec!["demo-gone".into(), "demo-t".into()]
            })
        );
        let f = Fixture::new(cloneset(json!({})), vec![]);
        assert_eq!(prune_pods_to_delete(&f.ctx(), &BTreeSet::new()), None);
    }

    #[test]
    fn pods_without_pod_template_hash_get_their_revisions_short_hash() {
        let unlabelled = |name, rev| pod(name, rev).without_label(keys::POD_TEMPLATE_HASH_LABEL);
        let f = Fixture::new(
            cloneset(json!({})),
            vec![
                unlabelled("demo-a", "demo-5f7c9d"),
                pod("demo-b", "demo-new"),
                unlabelled("demo-c", "5f7c9d"),
                unlabelled("demo-t", "demo-old").terminating(),
            ],
        );
        assert_eq!(
            backfill_template_hash(&f.ctx()),
            vec![
                Action::SetTemplateHash {
                    pod: "demo-a".into(),
                    hash: "5f7c9d".into()
                },
                Action::SetTemplateHash {
                    pod: "demo-c".into(),
                    hash: "5f7c9d".into()
                },
            ]
        );
    }
}
