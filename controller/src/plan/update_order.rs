//! The order in which update candidates are taken (docs "Update sequence"; kruise-behaviour
//! a.6 "Sort", "Weight priority", "Order priority", "Scatter"):
//!
//! 1. the default order, Kubernetes' `ActivePods`: unscheduled < scheduled, Pending <
//!    Unknown < Running, not ready < ready, (both ready) ready more recently (or without a
//!    ready time) first, more restarts first, newer (or without creation time) first;
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
use super::selector::Selector;

/// Sorts `candidates` (indexes into `pods`) by the whole update order of `strategy`.
///
/// The labels that priority and scatter read are looked up in ONE pass over the pods
/// ([`LabelKeys`]): a pod's labels live in its own scattered heap allocations, and each
/// cold lookup costs far more than the sorting itself.
pub fn sort_candidates(
    strategy: Option<&CloneSetUpdateStrategy>,
    pods: &[PodFacts],
    candidates: &mut Vec<usize>,
) {
    sort_default(pods, candidates);
    let priority = strategy.and_then(|s| s.priority_strategy.as_ref());
    let terms = strategy.map_or(&[][..], |s| s.scatter_strategy.as_slice());
    if priority.is_none() && terms.is_empty() {
        preparing_update_first(pods, candidates);
        return;
    }
    let keys = LabelKeys::collect(priority, terms, pods, candidates);
    if let Some(priority_keys) = &keys.priority {
        sort_by_keys(priority_keys, candidates);
    }
    if !terms.is_empty() {
        scatter_by(terms, &keys, candidates);
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
        let mut is_candidate = vec![false; pods.len()];
        for &i in candidates {
            is_candidate[i] = true;
        }
        let key_of = priority.map(PriorityKey::new);
        // The label keys read below, fetched with ONE pass over each pod's labels instead
        // of a tree lookup (string comparisons) per scatter term and selector requirement.
        let mut wanted: Vec<&str> = Vec::new();
        let term_slots: Vec<usize> = terms.iter().map(|t| slot(&t.key, &mut wanted)).collect();
        let weight_slots: Vec<Vec<usize>> = match &key_of {
            Some(PriorityKey::Weight(list)) => list
                .iter()
                .map(|(_, selector)| {
                    selector
                        .requirements()
                        .iter()
                        .map(|r| slot(r.key(), &mut wanted))
                        .collect()
                })
                .collect(),
            _ => Vec::new(),
        };
        let mut values: Vec<Option<&str>> = vec![None; wanted.len()];
        let mut keys = Self {
            priority: key_of.as_ref().map(|_| vec![(0, 0); pods.len()]),
            scatter: vec![vec![false; pods.len()]; terms.len()],
            totals: vec![0; terms.len()],
            active: 0,
        };
        for (i, pod) in pods.iter().enumerate() {
            let active = pod.is_active();
            if !active && !is_candidate[i] {
                continue;
            }
            keys.active += usize::from(active);
            if !wanted.is_empty() {
                values.fill(None);
                for (key, value) in pod.labels {
                    if let Some(j) = wanted.iter().position(|w| *w == key.as_str()) {
                        values[j] = Some(value.as_str());
                    }
                }
            }
            for (t, term) in terms.iter().enumerate() {
                let hit = values[term_slots[t]] == Some(term.value.as_str());
                keys.scatter[t][i] = hit;
                keys.totals[t] += usize::from(hit && active);
            }
            if is_candidate[i]
                && let (Some(list), Some(key_of)) = (keys.priority.as_mut(), key_of.as_ref())
            {
                list[i] = match key_of {
                    PriorityKey::Weight(list) => {
                        let weight: i64 = list
                            .iter()
                            .zip(&weight_slots)
                            .filter(|((_, selector), slots)| {
                                selector
                                    .requirements()
                                    .iter()
                                    .zip(slots.iter())
                                    .all(|(r, &j)| r.matches_value(values[j]))
                            })
                            .map(|((w, _), _)| w)
                            .sum();
                        (-weight, 0)
                    }
                    _ => key_of.key(pod),
                };
            }
        }
        keys
    }
}

/// `priorityStrategy` compiled once: selectors parsed, keys computed per pod.
enum PriorityKey<'s> {
    Weight(Vec<(i64, Selector)>),
    Order(&'s [inplace_proto::UpdatePriorityOrderTerm]),
    None,
}

impl<'s> PriorityKey<'s> {
    fn new(strategy: &'s UpdatePriorityStrategy) -> Self {
        if !strategy.weight_priority.is_empty() {
            // An invalid selector counts for nothing (reference).
            Self::Weight(
                strategy
                    .weight_priority
                    .iter()
                    .filter_map(|t| {
                        Selector::parse(&t.match_selector)
                            .ok()
                            .map(|s| (i64::from(t.weight), s))
                    })
                    .collect(),
            )
        } else if !strategy.order_priority.is_empty() {
            Self::Order(&strategy.order_priority)
        } else {
            Self::None
        }
    }

    /// Smaller sorts first.
    fn key(&self, pod: &PodFacts) -> (i64, i64) {
        match self {
            Self::Weight(terms) => {
                let weight: i64 = terms
                    .iter()
                    .filter(|(_, s)| s.matches(pod.labels))
                    .map(|(w, _)| w)
                    .sum();
                (-weight, 0)
            }
            Self::Order(terms) => terms
                .iter()
                .enumerate()
                .find_map(|(level, term)| {
                    pod.labels
                        .get(&term.ordered_key)
                        .map(|v| (i64::try_from(level).unwrap_or(i64::MAX), -trailing_int(v)))
                })
                .unwrap_or((-1, 0)),
            Self::None => (0, 0),
        }
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

/// "Empty first, then later first": the ActivePods rule for ready and creation times.
fn empty_or_later_first(t: Option<Timestamp>) -> (u8, Reverse<i128>) {
    match t {
        None => (0, Reverse(0)),
        Some(t) => (1, Reverse(t.as_nanosecond())),
    }
}

/// The default order (Kubernetes `ActivePods`), stable for equal pods.
///
/// Restarts count the sum over containers (the facts' `restarts`), where Kubernetes takes
/// the highest single container's count; both put crash-looping pods first.
pub fn sort_default(pods: &[PodFacts], candidates: &mut [usize]) {
    let mut keyed: Vec<_> = candidates
        .iter()
        .enumerate()
        .map(|(pos, &i)| {
            let p = &pods[i];
            let scheduled = p.node_name.is_some_and(|n| !n.is_empty());
            let ready_time = if p.ready {
                empty_or_later_first(p.ready_since)
            } else {
                (0, Reverse(0))
            };
            (
                (
                    scheduled,
                    p.phase,
                    p.ready,
                    ready_time,
                    Reverse(p.restarts),
                    empty_or_later_first(p.creation),
                    pos,
                ),
                i,
            )
        })
        .collect();
    keyed.sort_unstable();
    for (slot, (_, i)) in candidates.iter_mut().zip(keyed) {
        *slot = i;
    }
}

/// The integer at the end of a label value: 5 in "5", 10 in "sts-10", 0 when there is none
/// or it does not fit (docs "order": "sorted based on the int part of the value string").
pub fn trailing_int(value: &str) -> i64 {
    let digits = value.bytes().rev().take_while(u8::is_ascii_digit).count();
    value[value.len() - digits..].parse().unwrap_or(0)
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

/// Index of `key` in `wanted`, added when missing.
fn slot<'k>(key: &'k str, wanted: &mut Vec<&'k str>) -> usize {
    wanted.iter().position(|w| *w == key).unwrap_or_else(|| {
        wanted.push(key);
        wanted.len() - 1
    })
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
