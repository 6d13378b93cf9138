//! Instance ids for new pods (docs "Support PVCs"; OpenKruise `sync/cloneset_scale.go`
//! `getOrGenAvailableIDs`).
//!
//! A pod is named `<cloneset>-<id>` and its PVCs `<vct>-<cloneset>-<id>`. Ids of PVCs that
//! no active pod uses are reused first, so that a pod deleted by hand comes back with its
//! volumes; the rest are fresh 5-character ids over Kubernetes' random alphabet, unique
//! among every id in sight (pods, active or not, and PVCs).
//!
//! Choices where the reference is random or silent:
//! - reused ids whose old pod is completely gone come first, then ids whose old pod still
//!   exists but is finished or terminating (creating that name fails until the old pod is
//!   gone; the reference has the same wait), each group in id order;
//! - fresh ids come from a deterministic generator seeded by the CloneSet uid, the ids in
//!   sight and a counter, so the same snapshot always plans the same names;
//! - the returned list is sorted, like the reference's `sets.String.List()`; the first
//!   ones go to the current revision when old-revision pods are created.

use std::collections::BTreeSet;
use std::hash::Hasher;

use inplace_proto::keys;

use super::model::PlanContext;
use super::revision::SAFE_ALPHABET;

/// Length of an instance id.
pub const INSTANCE_ID_LEN: usize = 5;

/// `count` ids for new pods, reused ones first (see the module doc), sorted.
pub fn available_ids(ctx: &PlanContext<'_>, count: usize) -> Vec<String> {
    if count == 0 {
        // Nothing to name: skip the sets over every pod (a plan calls this each time the
        // arithmetic wants pods but the scale limits allow none).
        return Vec::new();
    }
    let active: BTreeSet<&str> = ctx.active_pods().filter_map(|p| p.instance_id).collect();
    let any_pod: BTreeSet<&str> = ctx.pods.iter().filter_map(|p| p.instance_id).collect();
    let pvc_ids: BTreeSet<&str> = ctx
        .snapshot
        .pvcs
        .iter()
        .filter(|pvc| pvc.metadata.deletion_timestamp.is_none())
        .filter_map(|pvc| pvc.metadata.labels.as_ref()?.get(keys::INSTANCE_ID_LABEL))
        .map(String::as_str)
        .filter(|id| !id.is_empty())
        .collect();

    // With `disablePVCReuse` those PVCs are being deleted (see `super::pvcs`): no reuse,
    // but their ids stay taken so that no new pod picks up a dying claim.
    let reuse = !ctx
        .cloneset()
        .spec
        .scale_strategy
        .as_ref()
        .is_some_and(|s| s.disable_pvc_reuse);
    let free: Vec<&str> = pvc_ids
        .iter()
        .filter(|_| reuse)
        .filter(|id| !any_pod.contains(**id))
        .copied()
        .collect();
    let waiting: Vec<&str> = pvc_ids
        .iter()
        .filter(|_| reuse)
        .filter(|id| any_pod.contains(**id) && !active.contains(**id))
        .copied()
        .collect();

    let mut out: Vec<String> = free
        .into_iter()
        .chain(waiting)
        .take(count)
        .map(str::to_owned)
        .collect();

    let taken: BTreeSet<&str> = any_pod.union(&pvc_ids).copied().collect();
    let seed = ctx.cloneset().metadata.uid.as_deref().unwrap_or_default();
    let mut generator = IdGenerator::new(seed, &taken);
    let mut generated: BTreeSet<String> = BTreeSet::new();
    while out.len() < count {
        let id = generator.next_id();
        if !taken.contains(id.as_str()) && generated.insert(id.clone()) {
            out.push(id);
        }
    }
    out.sort();
    out
}

/// Deterministic 5-character ids: FNV-1a 64 over the seed, the ids in sight and a
/// counter, spelled in the safe alphabet.
#[derive(Debug)]
struct IdGenerator {
    base: u64,
    counter: u64,
}

impl IdGenerator {
    fn new(seed: &str, taken: &BTreeSet<&str>) -> Self {
        let mut base = fnv::FnvHasher::default();
        base.write(seed.as_bytes());
        for id in taken {
            base.write(b"/");
            base.write(id.as_bytes());
        }
        Self {
            base: base.finish(),
            counter: 0,
        }
    }

    fn next_id(&mut self) -> String {
        let mut hasher = fnv::FnvHasher::with_key(self.base);
        hasher.write(&self.counter.to_le_bytes());
        self.counter += 1;
        // Mix the bits once more so that consecutive counters spread over all letters.
        let mut v = hasher.finish();
        v ^= v >> 33;
        v = v.wrapping_mul(0xff51_afd7_ed55_8ccd);
        v ^= v >> 33;
        let n = SAFE_ALPHABET.len() as u64;
        (0..INSTANCE_ID_LEN)
            .map(|_| {
                let c = SAFE_ALPHABET[usize::try_from(v % n).unwrap_or(0)];
                v /= n;
                char::from(c)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use serde_json::json;

    use super::*;
    use crate::fixtures::{Fixture, cloneset, pod};

    fn pvc(name: &str, id: &str) -> PersistentVolumeClaim {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {keys::INSTANCE_ID_LABEL: id}}}),
        )
        .unwrap()
    }

    fn ids(f: &Fixture, pvcs: &[PersistentVolumeClaim], count: usize) -> Vec<String> {
        let mut ctx = f.ctx();
        ctx.snapshot.pvcs = pvcs;
        available_ids(&ctx, count)
    }

    #[test]
    fn ids_of_pvcs_without_a_pod_are_reused_first() {
        let f = Fixture::new(cloneset(json!({})), vec![pod("demo-aaaaa", "demo-new")]);
        let pvcs = [
            pvc("data-demo-aaaaa", "aaaaa"),
            pvc("data-demo-zzzzz", "zzzzz"),
            pvc("data-demo-bbbbb", "bbbbb"),
        ];
        assert_eq!(ids(&f, &pvcs, 2), vec!["bbbbb", "zzzzz"]);
        let three = ids(&f, &pvcs, 3);
        assert_eq!(three.len(), 3);
        assert!(three.contains(&"bbbbb".to_owned()) && three.contains(&"zzzzz".to_owned()));
        assert!(!three.contains(&"aaaaa".to_owned()));
    }

    #[test]
    fn ids_of_terminating_pods_are_reused_after_those_of_gone_pods() {
        let f = Fixture::new(
            cloneset(json!({})),
            vec![pod("demo-ccccc", "demo-new").terminating()],
        );
        let pvcs = [pvc("d-ccccc", "ccccc"), pvc("d-ddddd", "ddddd")];
        assert_eq!(ids(&f, &pvcs, 1), vec!["ddddd"]);
        assert_eq!(ids(&f, &pvcs, 2), vec!["ccccc", "ddddd"]);
    }

    #[test]
    fn disable_pvc_reuse_never_reuses_ids_and_avoids_them() {
        let f = Fixture::new(
            cloneset(json!({"scaleStrategy": {"disablePVCReuse": true}})),
            vec![],
        );
        let pvcs = [pvc("d-bbbbb", "bbbbb")];
        let got = ids(&f, &pvcs, 3);
        assert_eq!(got.len(), 3);
        assert!(!got.contains(&"bbbbb".to_owned()));
    }

    #[test]
    fn fresh_ids_are_unique_deterministic_and_spelled_in_the_safe_alphabet() {
        let f = Fixture::new(cloneset(json!({})), vec![pod("demo-aaaaa", "demo-new")]);
        let a = ids(&f, &[], 50);
        assert_eq!(a, ids(&f, &[], 50));
        let set: BTreeSet<&String> = a.iter().collect();
        assert_eq!(set.len(), 50);
        for id in &a {
            assert_eq!(id.len(), INSTANCE_ID_LEN);
            assert!(id.bytes().all(|b| SAFE_ALPHABET.contains(&b)));
            assert_ne!(id, "aaaaa");
        }
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(a, sorted);
    }
}
