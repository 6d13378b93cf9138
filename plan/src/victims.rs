//! Which pods go first when scaling in (docs "Deletion Sequence", "Pod deletion cost",
//! "Deletion by Spread Constraints"; OpenKruise `sync/cloneset_scale.go` `choosePodsToDelete`
//! and `utils/pod_sorter.go`).
//!
//! Pods of old revisions are chosen first (`scaleDownOldRevision` of them), then pods of
//! the update revision. Within a group, the first in this order is deleted first:
//!
//! 1. not scheduled before scheduled;
//! 2. Pending, then Unknown, then Running;
//! 3. not available (ready for minReadySeconds, lifecycle Normal) before available, then
//!    not ready before ready;
//! 4. lower `controller.kubernetes.io/pod-deletion-cost` first;
//! 5. higher spread rank first (below);
//! 6. when both are ready: ready for a shorter time first (no ready time first);
//! 7. a container with more restarts first (the highest restart count of its containers);
//! 8. no creation time first, then newer before older.
//!
//! Spread rank: with `topologySpreadConstraints` in the template, for every constraint
//! the group's pods are split by the value of the topology key on their node, each domain
//! is sorted (by the order above, with the same-node rank inside unless the key is
//! `kubernetes.io/hostname`), and the i-th of n pods in a domain earns
//! `(n - i)·ln(domains + 2)`; ranks of all constraints add up, so pods of crowded domains
//! go first. Pods whose node is unknown (not in the snapshot) or lacks the key earn
//! nothing for that key.
//! Without constraints, the same-node rank: on a node with k > 1 of the group's pods, the
//! pod that would be kept last gets 0 and the others k-1 … 1 in deletion order.
//!
//! Ties (the reference's unstable sort leaves them random) are broken by pod name.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

use super::model::{PlanContext, PodFacts, PodPhase};
use crate::cached::CachedPod;

/// The hostname topology key, whose domains are single nodes.
const HOSTNAME_KEY: &str = "kubernetes.io/hostname";

/// What the deletion order looks at, extracted once per pod.
#[derive(Clone, Debug)]
struct Key<'a> {
    name: &'a str,
    node: Option<&'a str>,
    phase_rank: u8,
    available: bool,
    /// The kubelet's Ready condition is True (regardless of in-place readiness).
    ready: bool,
    ready_since: Option<Timestamp>,
    deletion_cost: i64,
    max_restarts: i32,
    creation: Option<Timestamp>,
}

impl<'a> Key<'a> {
    fn new(
        facts: &'a PodFacts,
        pod: Option<&'a CachedPod>,
        min_ready: i32,
        now: Timestamp,
    ) -> Self {
        let ready_condition = pod
            .and_then(|p| p.condition("Ready"))
            .filter(|c| &*c.status == "True");
        let max_restarts = pod
            .and_then(|p| p.container_statuses().iter().map(|c| c.restart_count).max())
            .unwrap_or(0);
        Key {
            name: facts.name,
            node: facts.node_name.filter(|n| !n.is_empty()),
            phase_rank: match facts.phase {
                PodPhase::Unknown => 1,
                PodPhase::Running => 2,
                _ => 0,
            },
            available: facts.is_available(min_ready, now),
            ready: ready_condition.is_some(),
            ready_since: ready_condition
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0),
            deletion_cost: facts.deletion_cost,
            max_restarts,
            creation: facts.creation,
        }
    }
}

/// "t1 after t2, a missing time counting as the latest" (`afterOrZero`): true when `a`
/// should come first because it is the newer one.
fn newer_first(a: Option<Timestamp>, b: Option<Timestamp>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => b.cmp(&a),
    }
}

/// The deletion order of two pods, `rank` being their spread rank (0 when not ranked) and
/// `with_available` whether step 3's availability test applies (the rankers' inner sorts
/// leave it out, like the reference).
fn compare(a: &Key<'_>, b: &Key<'_>, ranks: (f64, f64), with_available: bool) -> Ordering {
    // 1. unassigned first
    if a.node != b.node && (a.node.is_none() || b.node.is_none()) {
        return if a.node.is_none() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    // 2. phase
    if a.phase_rank != b.phase_rank {
        return a.phase_rank.cmp(&b.phase_rank);
    }
    // 3. availability, then readiness (false first)
    if with_available && a.available != b.available {
        return a.available.cmp(&b.available);
    }
    if a.ready != b.ready {
        return a.ready.cmp(&b.ready);
    }
    // 4. deletion cost
    if a.deletion_cost != b.deletion_cost {
        return a.deletion_cost.cmp(&b.deletion_cost);
    }
    // 5. higher rank first
    if ranks.0 != ranks.1 {
        return ranks.1.partial_cmp(&ranks.0).unwrap_or(Ordering::Equal);
    }
    // 6. ready for less time first
    if a.ready && b.ready && a.ready_since != b.ready_since {
        return newer_first(a.ready_since, b.ready_since);
    }
    // 7. more restarts first
    if a.max_restarts != b.max_restarts {
        return b.max_restarts.cmp(&a.max_restarts);
    }
    // 8. newer creation first
    if a.creation != b.creation {
        return newer_first(a.creation, b.creation);
    }
    a.name.cmp(b.name)
}

/// Sorts `members` (indices into `keys`) by the deletion order with the given ranks.
fn sort_members(members: &mut [usize], keys: &[Key<'_>], ranks: &[f64], with_available: bool) {
    members.sort_by(|&i, &j| compare(&keys[i], &keys[j], (ranks[i], ranks[j]), with_available));
}

/// Same-node rank of each key: see the module doc.
fn same_node_ranks(keys: &[Key<'_>]) -> Vec<f64> {
    let mut ranks = vec![0.0; keys.len()];
    let mut by_node: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, k) in keys.iter().enumerate() {
        if let Some(node) = k.node {
            by_node.entry(node).or_default().push(i);
        }
    }
    let zeros = vec![0.0; keys.len()];
    for mut members in by_node.into_values() {
        if members.len() <= 1 {
            continue;
        }
        sort_members(&mut members, keys, &zeros, false);
        members.pop();
        let n = members.len();
        for (pos, i) in members.into_iter().enumerate() {
            ranks[i] = (n - pos) as f64;
        }
    }
    ranks
}

/// Topology-spread rank of each key: see the module doc.
fn spread_ranks(ctx: &PlanContext<'_>, keys: &[Key<'_>], topology_keys: &[String]) -> Vec<f64> {
    let node_labels: BTreeMap<&str, &BTreeMap<String, String>> = ctx
        .snapshot
        .nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n.metadata.labels.as_ref()?)))
        .collect();
    let same_node = same_node_ranks(keys);
    let zeros = vec![0.0; keys.len()];
    let mut ranks = vec![0.0; keys.len()];
    for topology_key in topology_keys {
        let mut domains: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            let value = k
                .node
                .and_then(|n| node_labels.get(n))
                .and_then(|labels| labels.get(topology_key));
            if let Some(value) = value {
                domains.entry(value.as_str()).or_default().push(i);
            }
        }
        let weight = ((domains.len() + 2) as f64).ln();
        let inner = if topology_key == HOSTNAME_KEY {
            &zeros
        } else {
            &same_node
        };
        for mut members in domains.into_values() {
            sort_members(&mut members, keys, inner, false);
            let n = members.len();
            for (pos, i) in members.into_iter().enumerate() {
                ranks[i] += (n - pos) as f64 * weight;
            }
        }
    }
    ranks
}

/// The topology keys of the template's `topologySpreadConstraints`.
fn topology_keys(ctx: &PlanContext<'_>) -> Vec<String> {
    ctx.cloneset()
        .spec
        .template
        .0
        .pointer(&["spec", "topologySpreadConstraints"])
        .and_then(|v| v.as_array())
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get("topologyKey")?.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `group` (indices into `ctx.pods`) sorted in deletion order, first to delete first.
pub fn deletion_order(ctx: &PlanContext<'_>, group: &[usize]) -> Vec<usize> {
    let min_ready = ctx.cloneset().min_ready_seconds();
    let now = ctx.now();
    let keys: Vec<Key<'_>> = group
        .iter()
        .filter_map(|&i| {
            let facts = ctx.pods.get(i)?;
            Some(Key::new(
                facts,
                ctx.snapshot.pods.get(i).map(|p| &**p),
                min_ready,
                now,
            ))
        })
        .collect();
    if keys.len() != group.len() {
        // Indices outside the snapshot: nothing sensible to rank.
        return group.to_vec();
    }
    let topology = topology_keys(ctx);
    let ranks = if topology.is_empty() {
        same_node_ranks(&keys)
    } else {
        spread_ranks(ctx, &keys, &topology)
    };
    let mut order: Vec<usize> = (0..keys.len()).collect();
    sort_members(&mut order, &keys, &ranks, true);
    order.into_iter().map(|pos| group[pos]).collect()
}

/// `choosePodsToDelete`: `total` victims of which `old_first` from the not-updated group,
/// the rest from the updated group; groups are indices into `ctx.pods`.
pub fn choose(
    ctx: &PlanContext<'_>,
    total: usize,
    old_first: usize,
    not_updated: &[usize],
    updated: &[usize],
) -> Vec<usize> {
    let take = |group: &[usize], n: usize| -> Vec<usize> {
        if n >= group.len() {
            return group.to_vec();
        }
        deletion_order(ctx, group).into_iter().take(n).collect()
    };
    if old_first >= total {
        take(not_updated, total)
    } else if old_first > 0 {
        let mut out = take(not_updated, old_first);
        out.extend(take(updated, total - old_first));
        out
    } else {
        take(updated, total)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    use super::*;
    use crate::fixtures::{Fixture, PodBuilder, cloneset, pod, t};

    fn order(f: &Fixture) -> Vec<String> {
        let ctx = f.ctx();
        let all: Vec<usize> = (0..ctx.pods.len()).collect();
        deletion_order(&ctx, &all)
            .into_iter()
            .map(|i| ctx.pods[i].name.to_owned())
            .collect()
    }

    fn on(p: PodBuilder, node: &str) -> PodBuilder {
        p.raw(|v| v["spec"]["nodeName"] = json!(node))
    }

    fn fixture(pods: Vec<PodBuilder>) -> Fixture {
        Fixture::new(cloneset(json!({})), pods)
    }

    #[test]
    fn unassigned_pods_are_deleted_before_assigned_ones() {
        let f = fixture(vec![on(pod("a", "r"), "n1"), pod("b", "r").unscheduled()]);
        assert_eq!(order(&f), ["b", "a"]);
    }

    #[test]
    fn pending_before_unknown_before_running() {
        let f = fixture(vec![
            on(pod("run", "r"), "n1"),
            on(pod("unk", "r").phase("Unknown"), "n2"),
            on(pod("pend", "r").phase("Pending"), "n3"),
        ]);
        assert_eq!(order(&f), ["pend", "unk", "run"]);
    }

    #[test]
    fn not_ready_pods_are_deleted_before_ready_ones() {
        let f = fixture(vec![
            on(pod("ready", "r"), "n1"),
            on(pod("notready", "r").not_ready(), "n2"),
        ]);
        assert_eq!(order(&f), ["notready", "ready"]);
    }

    #[test]
    fn not_available_pods_go_before_available_ones() {
        // Both ready; one still PreparingNormal, hence not available.
        let f = fixture(vec![
            on(pod("normal", "r"), "n1"),
            on(pod("preparing", "r").lifecycle("PreparingNormal"), "n2"),
        ]);
        assert_eq!(order(&f), ["preparing", "normal"]);
    }

    #[test]
    fn lower_pod_deletion_cost_is_deleted_first() {
        let cost = "controller.kubernetes.io/pod-deletion-cost";
        let f = fixture(vec![
            on(pod("high", "r").annotation(cost, "100"), "n1"),
            on(pod("none", "r"), "n2"),
            on(pod("neg", "r").annotation(cost, "-5"), "n3"),
            // "+7" is not a valid cost: counts as 0, like no annotation.
            on(
                pod("plus", "r").annotation(cost, "+7").created(t(-10)),
                "n4",
            ),
        ]);
        assert_eq!(order(&f), ["neg", "none", "plus", "high"]);
    }

    #[test]
    fn more_pods_on_the_same_node_rank_higher_for_deletion() {
        // n1 holds three pods, n2 one: two of n1's pods go before the n2 pod, whatever
        // their age; the n1 pod kept last ties with the n2 pod and creation decides.
        let f = fixture(vec![
            on(pod("n2-old", "r").created(t(1)), "n2"),
            on(pod("n1-a", "r").created(t(5)), "n1"),
            on(pod("n1-b", "r").created(t(4)), "n1"),
            on(pod("n1-c", "r").created(t(3)), "n1"),
        ]);
        assert_eq!(order(&f), ["n1-a", "n1-b", "n1-c", "n2-old"]);
    }

    #[test]
    fn topology_spread_constraints_delete_from_the_most_crowded_zone_first() {
        let mut f = Fixture::new(
            cloneset(json!({"template": {"spec": {"topologySpreadConstraints": [
                {"topologyKey": "zone", "maxSkew": 1, "whenUnsatisfiable": "ScheduleAnyway"}
            ]}}})),
            vec![
                on(pod("za-1", "r").created(t(1)), "na1"),
                on(pod("za-2", "r").created(t(2)), "na2"),
                on(pod("zb-1", "r").created(t(9)), "nb1"),
            ],
        );
        let nodes: Vec<Node> = [("na1", "a"), ("na2", "a"), ("nb1", "b")]
            .iter()
            .map(|(n, z)| {
                serde_json::from_value(json!({"metadata": {"name": n, "labels": {"zone": z}}}))
                    .unwrap()
            })
            .collect();
        f.resolved.replicas = 3;
        let mut ctx = f.ctx();
        ctx.snapshot.nodes = &nodes;
        let all: Vec<usize> = (0..3).collect();
        let names: Vec<String> = deletion_order(&ctx, &all)
            .into_iter()
            .map(|i| ctx.pods[i].name.to_owned())
            .collect();
        // Zone a has two pods: its newer one gets rank 2·ln4, za-1 and zb-1 rank 1·ln4
        // each; then the newer of those two (zb-1) goes first.
        assert_eq!(names, ["za-2", "zb-1", "za-1"]);
    }

    #[test]
    fn ready_for_less_time_is_deleted_first() {
        let f = fixture(vec![
            on(pod("long", "r").ready_since(t(10)), "n1"),
            on(pod("short", "r").ready_since(t(500)), "n2"),
        ]);
        assert_eq!(order(&f), ["short", "long"]);
    }

    #[test]
    fn more_restarts_are_deleted_first() {
        let f = fixture(vec![
            on(pod("calm", "r").restarts(1), "n1"),
            on(pod("crashy", "r").restarts(7), "n2"),
        ]);
        assert_eq!(order(&f), ["crashy", "calm"]);
    }

    #[test]
    fn newer_pods_are_deleted_before_older_and_missing_creation_first() {
        let f = fixture(vec![
            on(pod("old", "r").created(t(1)), "n1"),
            on(pod("new", "r").created(t(50)), "n2"),
            on(
                pod("nodate", "r").raw(|v| {
                    v["metadata"]
                        .as_object_mut()
                        .unwrap()
                        .remove("creationTimestamp");
                }),
                "n3",
            ),
        ]);
        assert_eq!(order(&f), ["nodate", "new", "old"]);
    }

    #[test]
    fn old_revision_victims_are_chosen_first() {
        let f = fixture(vec![
            on(pod("new-a", "demo-new").not_ready(), "n1"),
            on(pod("old-a", "demo-old"), "n2"),
            on(pod("old-b", "demo-old").not_ready(), "n3"),
        ]);
        let ctx = f.ctx();
        let names = |v: Vec<usize>| -> Vec<String> {
            v.into_iter().map(|i| ctx.pods[i].name.to_owned()).collect()
        };
        assert_eq!(names(choose(&ctx, 1, 1, &[1, 2], &[0])), ["old-b"]);
        assert_eq!(names(choose(&ctx, 2, 1, &[1, 2], &[0])), ["old-b", "new-a"]);
        assert_eq!(names(choose(&ctx, 1, 0, &[1, 2], &[0])), ["new-a"]);
        assert_eq!(names(choose(&ctx, 3, 5, &[1, 2], &[0])), ["old-a", "old-b"]);
    }
}
