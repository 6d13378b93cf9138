//! The order in which update candidates are taken (docs "Update sequence"; OpenKruise
//! `pkg/util/updatesort`: `priority_sort.go`, `scatter_sort.go`):
//!
//! 1. the default order, Kubernetes' `ActivePods`: unscheduled < scheduled, Pending <
//!    Unknown < Running, not ready < ready, (both ready) ready more recently (or without a
//!    ready time) first, more restarts first, newer (or without creation time) first.
//!    "Ready" is the Ready condition alone (`IsPodReady`), whatever the phase;
//! 2. `priorityStrategy` (stable);
//! 3. `scatterStrategy`;
//! 4. pods already in PreparingUpdate first (stable): their update has begun.
//!
//! Candidates are indexes into the plan's pod facts. Every step is O(n) or O(n log n) with
//! keys computed once per pod, so a plan over 100k pods stays fast.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use inplace_proto::{
    CloneSetUpdateStrategy, LifecycleState, UpdatePriorityStrategy, UpdateScatterTerm,
};
use k8s_openapi::jiff::Timestamp;

use super::model::PodFacts;
pub use super::order_rules::{
    OrderRules, OrderScratch, PodOrderLabels, PrecomputedOrder, trailing_int,
};

/// Sorts `candidates` (indexes into `pods`) by the whole update order of `strategy`.
///
/// The default order and `priorityStrategy` are ONE sort by a key computed once per
/// candidate (priority first, then the default key, then the position, which makes the
/// sort stable): the same order as sorting by the default order and then stably by
/// priority. The labels that priority and scatter read come from
/// [`PodFacts::order_labels`] when [`PodFacts::extract_all`] computed them for this very
/// strategy, or else from ONE pass over the pods' labels ([`LabelKeys`]): a pod's labels
/// live in their own scattered heap allocations, and each cold read costs far more than
/// the sorting itself.
pub fn sort_candidates(
    strategy: Option<&CloneSetUpdateStrategy>,
    pods: &[PodFacts],
    candidates: &mut Vec<usize>,
) {
    let rules = OrderRules::of_strategy(strategy);
    if !rules.reads_labels() {
        sort_default(pods, candidates);
        preparing_update_first(pods, candidates);
        return;
    }
    let keys = LabelKeys::collect_with(&rules, pods, candidates);
    sort_keyed(pods, keys.priority.as_deref(), candidates);
    if !rules.terms.is_empty() {
        scatter_by(rules.terms, &keys, candidates);
    }
    preparing_update_first(pods, candidates);
}

/// What priority and scatter need from the pods' labels, read once.
#[derive(Debug, Default)]
pub struct LabelKeys {
    /// Per pod index: the priority sort key of a candidate (smaller first).
    priority: Option<Vec<(i64, i64)>>,
    /// Per scatter term, per pod index: the pod carries the term's label.
    scatter: Vec<Vec<bool>>,
    /// Per scatter term: active pods carrying it, and active pods in all.
    totals: Vec<usize>,
    active: usize,
}

impl LabelKeys {
    /// One pass over `pods`: priority keys of the candidates, scatter matches of the
    /// candidates and active pods.
    pub fn collect(
        priority: Option<&UpdatePriorityStrategy>,
        terms: &[UpdateScatterTerm],
        pods: &[PodFacts],
        candidates: &[usize],
    ) -> Self {
        Self::collect_with(&OrderRules::new(priority, terms), pods, candidates)
    }

    fn collect_with(rules: &OrderRules<'_>, pods: &[PodFacts], candidates: &[usize]) -> Self {
        let mut is_candidate = vec![false; pods.len()];
        for &i in candidates {
            is_candidate[i] = true;
        }
        let terms = rules.terms.len();
        let mut keys = Self {
            priority: rules.key_of.as_ref().map(|_| vec![(0, 0); pods.len()]),
            scatter: vec![vec![false; pods.len()]; terms],
            totals: vec![0; terms],
            active: 0,
        };
        let mut scratch = rules.scratch();
        for (i, pod) in pods.iter().enumerate() {
            let active = pod.is_active();
            if !active && !is_candidate[i] {
                continue;
            }
            keys.active += usize::from(active);
            let priority = match &pod.order_labels {
                Some(pre) if pre.is_for(rules) => {
                    for (t, hit) in scratch.hits.iter_mut().enumerate() {
                        *hit = (pre.labels.scatter >> t) & 1 == 1;
                    }
                    pre.labels.priority
                }
                _ => rules.evaluate(pod.labels, &mut scratch),
            };
            for (t, &hit) in scratch.hits.iter().enumerate() {
                keys.scatter[t][i] = hit;
                keys.totals[t] += usize::from(hit && active);
            }
            if is_candidate[i]
                && let Some(list) = keys.priority.as_mut()
            {
                list[i] = priority;
            }
        }
        keys
    }
}

/// Stable sort of `candidates` by `keys[candidate]`.
fn sort_by_keys(keys: &[(i64, i64)], candidates: &mut [usize]) {
    let mut keyed: Vec<((i64, i64), usize, usize)> = candidates
        .iter()
        .enumerate()
        .map(|(pos, &i)| (keys[i], pos, i))
        .collect();
    keyed.sort_unstable();
    for (slot, (_, _, i)) in candidates.iter_mut().zip(keyed) {
        *slot = i;
    }
}

/// Bits of an encoded time ([`later_first`]): jiff timestamps span years -9999..=9999,
/// less than 2^68 nanoseconds either side of the epoch.
const TIME_BITS: u32 = 70;

/// A time as an unsigned number that grows as the time gets EARLIER ("later first").
fn later_first(t: Timestamp) -> u128 {
    let offset = 1i128 << (TIME_BITS - 1);
    // In 0..2^70 for every Timestamp (see TIME_BITS); the subtraction reverses the order.
    let shifted = u128::try_from(t.as_nanosecond() + offset).unwrap_or(0);
    ((1u128 << TIME_BITS) - 1) - shifted
}

/// "Empty first, then later first" (the ActivePods rule for ready and creation times) as
/// one number: 0 for none, then a 1 bit above the reversed time.
fn empty_or_later_first(t: Option<Timestamp>) -> u128 {
    t.map_or(0, |t| (1u128 << TIME_BITS) | later_first(t))
}

/// `i64` to `u64` keeping the order.
fn ordered_u64(v: i64) -> u64 {
    (v as u64) ^ (1 << 63)
}

/// The default order of one pod and its position, packed in two numbers compared in
/// turn, most significant bits first: (scheduled, phase, ready) and the ready time (a pod
/// that is not ready has none: 0), then restarts (more first); then the creation time,
/// then the position (stable for equal pods).
fn default_key(p: &PodFacts, pos: usize) -> (u128, u128) {
    let scheduled = p.node_name.is_some_and(|n| !n.is_empty());
    let ready_time = if p.ready_condition {
        empty_or_later_first(p.ready_since)
    } else {
        0
    };
    // PodPhase's discriminants follow its order (< 8: 3 bits).
    let flags = (u128::from(scheduled) << 4)
        | (u128::from(p.phase as u8) << 1)
        | u128::from(p.ready_condition);
    // i32 -> u32 keeping the order, then reversed: more restarts first.
    let restarts = u32::MAX - ((p.restarts as u32) ^ (1 << 31));
    // flags: 5 bits at 103, ready time: 71 bits at 32, restarts: 32 bits at 0.
    let first = (flags << 103) | (ready_time << 32) | u128::from(restarts);
    // creation: 71 bits at 57, position: 57 bits (more candidates than that cannot exist).
    let second = (empty_or_later_first(p.creation) << 57) | (pos as u128);
    (first, second)
}

/// Most distinct priority keys that [`sort_keyed`] ranks into the spare top bits of the
/// default key (the default key uses the low 108 bits of its first number).
const MAX_RANKED_PRIORITIES: usize = 64;

/// Bits of a position in the second number of [`default_key`].
const POSITION_MASK: u128 = (1 << 57) - 1;

/// The distinct priority keys of `candidates`, sorted; None when there are more than
/// [`MAX_RANKED_PRIORITIES`] of them.
fn priority_levels(keys: &[(i64, i64)], candidates: &[usize]) -> Option<Vec<(i64, i64)>> {
    let mut levels: Vec<(i64, i64)> = Vec::new();
    for &i in candidates {
        let key = keys[i];
        if !levels.contains(&key) {
            if levels.len() == MAX_RANKED_PRIORITIES {
                return None;
            }
            levels.push(key);
        }
    }
    levels.sort_unstable();
    Some(levels)
}

/// Sorts `candidates` by (priority key when given, default key, position): the default
/// order, or the default order followed by a stable sort by priority.
///
/// Usually the priority keys take a few distinct values (weights, levels): then a
/// candidate's rank among them goes into the spare top bits of its default key and the
/// sort compares two numbers per candidate instead of three, on half the bytes. The
/// order is the same: ranks follow the priority keys' order, and positions are unique.
fn sort_keyed(pods: &[PodFacts], priority: Option<&[(i64, i64)]>, candidates: &mut [usize]) {
    let levels = match priority {
        None => Some(Vec::new()),
        Some(keys) => priority_levels(keys, candidates),
    };
    let Some(levels) = levels else {
        sort_wide(pods, priority, candidates);
        return;
    };
    let rank = |i: usize| -> u128 {
        priority.map_or(0, |keys| {
            // Every key of a candidate is in `levels`; the search cannot fail.
            let r = levels.binary_search(&keys[i]).unwrap_or_else(|r| r);
            r as u128
        })
    };
    let mut keyed: Vec<(u128, u128)> = candidates
        .iter()
        .enumerate()
        .map(|(pos, &i)| {
            let (first, second) = default_key(&pods[i], pos);
            ((rank(i) << 108) | first, second)
        })
        .collect();
    // Positions are unique, so the order is total.
    keyed.sort_unstable();
    let original = candidates.to_vec();
    for (slot, (_, second)) in candidates.iter_mut().zip(keyed) {
        // The position is the low bits of the second number (see `default_key`).
        *slot = original[(second & POSITION_MASK) as usize];
    }
}

/// [`sort_keyed`] with the priority key as a number of its own (many distinct keys).
fn sort_wide(pods: &[PodFacts], priority: Option<&[(i64, i64)]>, candidates: &mut [usize]) {
    let mut keyed: Vec<(u128, u128, u128, usize)> = candidates
        .iter()
        .enumerate()
        .map(|(pos, &i)| {
            let (p0, p1) = priority.map_or((0, 0), |keys| keys[i]);
            let first = (u128::from(ordered_u64(p0)) << 64) | u128::from(ordered_u64(p1));
            let (second, third) = default_key(&pods[i], pos);
            (first, second, third, i)
        })
        .collect();
    // Positions are unique, so the index is never compared and the order is total.
    keyed.sort_unstable();
    for (slot, (_, _, _, i)) in candidates.iter_mut().zip(keyed) {
        *slot = i;
    }
}

/// The default order (Kubernetes `ActivePods`), stable for equal pods.
///
/// Restarts count the sum over containers (the facts' `restarts`), where Kubernetes takes
/// the highest single container's count; both put crash-looping pods first.
pub fn sort_default(pods: &[PodFacts], candidates: &mut [usize]) {
    sort_keyed(pods, None, candidates);
}

/// `priorityStrategy`, a stable sort:
///
/// - `weightPriority`: the sum of the weights of the terms whose selector matches, higher
///   first. An invalid selector counts for nothing (reference).
/// - `orderPriority`: the first `orderedKey` the pod carries decides its level (earlier
///   keys first); within a level the value's trailing integer, larger first. Pods with
///   none of the keys go FIRST, as in the reference (level −1), an undocumented corner we
///   keep for compatibility.
///
/// Ties keep the default order. The reference breaks ties by the pods' positions in its
/// informer list, which is arbitrary; stable is the deliberate choice here.
pub fn sort_by_priority(
    strategy: &UpdatePriorityStrategy,
    pods: &[PodFacts],
    candidates: &mut [usize],
) {
    let keys = LabelKeys::collect(Some(strategy), &[], pods, candidates);
    if let Some(priority_keys) = &keys.priority {
        sort_by_keys(priority_keys, candidates);
    }
}

/// `scatterStrategy`: pods matching a term are spread evenly through the order.
///
/// Docs: replicas 10, 3 pods labelled `foo=bar`, one term `foo=bar` → those pods are the
/// 1st, 6th and 10th updated. Per term (several terms: those matching more waiting pods
/// first, stable), like the reference: the last matched pod is moved to the very end;
/// the others are interleaved in groups sized from the density of matched pods among all
/// active pods, or among the waiting ones when those are denser. Group sizes round half
/// away from zero. The density comparison is exact (cross-multiplied integers) where the
/// reference divides in float32; they agree except when float32 cannot tell two
/// densities apart.
///
/// "All active pods" are the active ones of `pods`.
pub fn scatter(terms: &[UpdateScatterTerm], pods: &[PodFacts], candidates: &mut Vec<usize>) {
    let keys = LabelKeys::collect(None, terms, pods, candidates);
    scatter_by(terms, &keys, candidates);
}

fn scatter_by(terms: &[UpdateScatterTerm], keys: &LabelKeys, candidates: &mut Vec<usize>) {
    if terms.is_empty() || candidates.len() <= 1 {
        return;
    }
    let ordered: Vec<usize> = if terms.len() == 1 {
        vec![0]
    } else {
        let mut counted: BTreeMap<(&str, &str), (usize, usize)> = BTreeMap::new();
        for (t, term) in terms.iter().enumerate() {
            let count = candidates.iter().filter(|&&i| keys.scatter[t][i]).count();
            if count > 0 {
                counted
                    .entry((term.key.as_str(), term.value.as_str()))
                    .or_insert((count, t));
            }
        }
        let mut list: Vec<(usize, usize)> = counted.into_values().collect();
        list.sort_by_key(|&(count, first_seen)| (Reverse(count), first_seen));
        list.into_iter().map(|(_, t)| t).collect()
    };
    for t in ordered {
        let matched = keys.totals[t];
        *candidates = scatter_term(
            &keys.scatter[t],
            matched,
            keys.active.saturating_sub(matched),
            candidates,
        );
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Groups {
    count: usize,
    matched_size: usize,
    unmatched_size: usize,
    unmatched_first: usize,
}

/// `round(a / b)` for positive integers, halves away from zero.
fn round_div(a: usize, b: usize) -> usize {
    (2 * a + b) / (2 * b)
}

fn groups(matched: usize, unmatched: usize) -> Groups {
    let count = matched.min(unmatched).max(1);
    Groups {
        count,
        matched_size: round_div(matched, count),
        unmatched_size: round_div(unmatched, count),
        unmatched_first: 0,
    }
}

fn groups_by_density(
    total_matched: usize,
    total_unmatched: usize,
    matched: usize,
    unmatched: usize,
) -> Groups {
    let waiting = groups(matched, unmatched);
    // total_unmatched / total_matched >= unmatched / matched
    if total_unmatched * matched >= unmatched * total_matched {
        return waiting;
    }
    let total = groups(total_matched, total_unmatched);
    let (m, u) = (total.matched_size.max(1), total.unmatched_size.max(1));
    let count = (matched / m).min(unmatched / u);
    Groups {
        count,
        matched_size: m,
        unmatched_size: u,
        unmatched_first: unmatched - count * u,
    }
}

fn scatter_term(
    is_match: &[bool],
    total_matched: usize,
    total_unmatched: usize,
    candidates: &[usize],
) -> Vec<usize> {
    let (mut matched, unmatched): (Vec<usize>, Vec<usize>) =
        candidates.iter().partition(|&&i| is_match[i]);
    if matched.len() <= 1 || unmatched.len() <= 1 {
        return candidates.to_vec();
    }
    let Some(last) = matched.pop() else {
        return candidates.to_vec();
    };
    // Candidates are active pods, so the totals cover them; max() guards odd inputs.
    let total_matched = total_matched.max(matched.len() + 1) - 1;
    let total_unmatched = total_unmatched.max(unmatched.len());
    let g = groups_by_density(
        total_matched,
        total_unmatched,
        matched.len(),
        unmatched.len(),
    );
    let mut out = Vec::with_capacity(candidates.len());
    let (mut m, mut u) = (matched.as_slice(), unmatched.as_slice());
    let take = |src: &mut &[usize], n: usize, out: &mut Vec<usize>| {
        let n = n.min(src.len());
        out.extend_from_slice(&src[..n]);
        *src = &src[n..];
    };
    take(&mut u, g.unmatched_first, &mut out);
    for _ in 0..g.count {
        take(&mut m, g.matched_size, &mut out);
        take(&mut u, g.unmatched_size, &mut out);
    }
    out.extend_from_slice(m);
    out.extend_from_slice(u);
    out.push(last);
    out
}

/// Pods already in PreparingUpdate first, otherwise stable: their update has begun and
/// must finish before others start (reference `SortUpdateIndexes`).
pub fn preparing_update_first(pods: &[PodFacts], candidates: &mut [usize]) {
    // A stable partition (what a stable sort on this boolean key does), in O(n) and
    // without moving anything in the usual case of no pod in PreparingUpdate.
    let preparing = |i: usize| pods[i].lifecycle == Some(LifecycleState::PreparingUpdate);
    if !candidates.iter().any(|&i| preparing(i)) {
        return;
    }
    let (front, rest): (Vec<usize>, Vec<usize>) = candidates.iter().partition(|&&i| preparing(i));
    for (slot, i) in candidates.iter_mut().zip(front.into_iter().chain(rest)) {
        *slot = i;
    }
}

#[cfg(test)]
mod tests;
