//! The rules of `priorityStrategy` and `scatterStrategy`, compiled once per CloneSet, and
//! what they read from one pod's labels ([`PrecomputedOrder`]). The pod facts
//! ([`super::model`]) precompute them while they are built, and the update order
//! ([`super::update_order`]) sorts by them; both import this module, which imports
//! neither.

use inplace_proto::{CloneSetUpdateStrategy, UpdatePriorityStrategy, UpdateScatterTerm};

use super::selector::Selector;
use crate::cached::StrMap;

/// The priority and scatter inputs of one pod (what its labels say about them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodOrderLabels {
    /// The priority sort key (smaller first); (0, 0) without `priorityStrategy`.
    pub priority: (i64, i64),
    /// Bit `t`: the pod carries the label of scatter term `t`.
    pub scatter: u64,
}

/// [`PodOrderLabels`] together with the rules they were computed for, so that they are
/// only used for those very rules (compared by identity: the facts borrow the CloneSet,
/// which therefore cannot change while they exist).
#[derive(Clone, Copy)]
pub struct PrecomputedOrder<'a> {
    priority: Option<&'a UpdatePriorityStrategy>,
    terms: &'a [UpdateScatterTerm],
    pub labels: PodOrderLabels,
}

impl PrecomputedOrder<'_> {
    pub(super) fn is_for(&self, rules: &OrderRules<'_>) -> bool {
        let same_priority = match (self.priority, rules.priority) {
            (None, None) => true,
            (Some(a), Some(b)) => std::ptr::eq(a, b),
            _ => false,
        };
        same_priority
            && self.terms.len() == rules.terms.len()
            && (self.terms.is_empty() || std::ptr::eq(self.terms.as_ptr(), rules.terms.as_ptr()))
    }
}

impl std::fmt::Debug for PrecomputedOrder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.labels.fmt(f)
    }
}

impl PartialEq for PrecomputedOrder<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.labels == other.labels
            && other.is_for(&OrderRules {
                priority: self.priority,
                terms: self.terms,
                key_of: None,
                wanted: Vec::new(),
                term_slots: Vec::new(),
                weight_slots: Vec::new(),
            })
    }
}

/// `priorityStrategy` and `scatterStrategy` compiled once: selectors parsed, and the label
/// keys they read numbered ("slots"), so that a pod's labels are read in ONE pass instead
/// of a tree lookup (string comparisons) per scatter term and selector requirement.
#[derive(Debug)]
pub struct OrderRules<'s> {
    priority: Option<&'s UpdatePriorityStrategy>,
    pub(super) terms: &'s [UpdateScatterTerm],
    pub(super) key_of: Option<PriorityKey<'s>>,
    wanted: Vec<String>,
    term_slots: Vec<usize>,
    weight_slots: Vec<Vec<usize>>,
}

/// Reusable buffers of [`OrderRules::evaluate`]: the values of the wanted label keys of
/// one pod, and its scatter matches.
#[derive(Debug)]
pub struct OrderScratch<'p> {
    values: Vec<Option<&'p str>>,
    /// `values` was filled by [`OrderScratch::see`] for the current pod.
    seen: bool,
    pub(super) hits: Vec<bool>,
}

impl<'p> OrderScratch<'p> {
    /// Starts a pod whose labels will be shown with [`OrderScratch::see`].
    pub fn clear(&mut self) {
        self.values.fill(None);
        self.seen = true;
    }

    /// One label of the current pod (each key at most once, as in a label map).
    pub fn see(&mut self, rules: &OrderRules<'_>, key: &str, value: &'p str) {
        if let Some(j) = rules.wanted.iter().position(|w| w == key) {
            self.values[j] = Some(value);
        }
    }
}

impl<'s> OrderRules<'s> {
    pub fn new(
        priority: Option<&'s UpdatePriorityStrategy>,
        terms: &'s [UpdateScatterTerm],
    ) -> Self {
        let key_of = priority.map(PriorityKey::new);
        let mut wanted: Vec<String> = Vec::new();
        let term_slots = terms.iter().map(|t| slot(&t.key, &mut wanted)).collect();
        let weight_slots = match &key_of {
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
        Self {
            priority,
            terms,
            key_of,
            wanted,
            term_slots,
            weight_slots,
        }
    }

    /// The rules of `strategy`'s `priorityStrategy` and `scatterStrategy`.
    pub fn of_strategy(strategy: Option<&'s CloneSetUpdateStrategy>) -> Self {
        Self::new(
            strategy.and_then(|s| s.priority_strategy.as_ref()),
            strategy.map_or(&[][..], |s| s.scatter_strategy.as_slice()),
        )
    }

    /// Whether the order depends on labels at all.
    pub(super) fn reads_labels(&self) -> bool {
        self.key_of.is_some() || !self.terms.is_empty()
    }

    /// Whether [`OrderRules::precompute`] applies: labels are read, and the scatter terms
    /// fit the bit set.
    pub fn precomputable(&self) -> bool {
        self.reads_labels() && self.terms.len() <= 64
    }

    pub fn scratch<'p>(&self) -> OrderScratch<'p> {
        OrderScratch {
            values: vec![None; self.wanted.len()],
            seen: false,
            hits: vec![false; self.terms.len()],
        }
    }

    /// The priority key of a pod with `labels`; the scatter matches go to `scratch.hits`.
    /// The labels are read here unless they were shown to the scratch already
    /// ([`OrderScratch::clear`], [`OrderScratch::see`]).
    pub(super) fn evaluate<'p>(
        &self,
        labels: StrMap<'p>,
        scratch: &mut OrderScratch<'p>,
    ) -> (i64, i64) {
        if !std::mem::take(&mut scratch.seen) && !self.wanted.is_empty() {
            scratch.values.fill(None);
            for (key, value) in labels.iter() {
                if let Some(j) = self.wanted.iter().position(|w| w == key) {
                    scratch.values[j] = Some(value);
                }
            }
        }
        let values = &scratch.values;
        for ((term, &slot), hit) in self
            .terms
            .iter()
            .zip(&self.term_slots)
            .zip(&mut scratch.hits)
        {
            *hit = values[slot] == Some(term.value.as_str());
        }
        match &self.key_of {
            None => (0, 0),
            Some(PriorityKey::Weight(list)) => {
                let weight: i64 = list
                    .iter()
                    .zip(&self.weight_slots)
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
            Some(other) => other.key(labels),
        }
    }

    /// What these rules read from a pod with `labels`, for [`PodFacts::order_labels`].
    /// Only when [`OrderRules::precomputable`].
    pub fn precompute<'p>(
        &self,
        labels: StrMap<'p>,
        scratch: &mut OrderScratch<'p>,
    ) -> PrecomputedOrder<'s> {
        let priority = self.evaluate(labels, scratch);
        let scatter = scratch
            .hits
            .iter()
            .enumerate()
            .fold(0u64, |bits, (t, &hit)| bits | (u64::from(hit) << t));
        PrecomputedOrder {
            priority: self.priority,
            terms: self.terms,
            labels: PodOrderLabels { priority, scatter },
        }
    }
}

/// `priorityStrategy` compiled once: selectors parsed, keys computed per pod.
#[derive(Debug)]
pub(super) enum PriorityKey<'s> {
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
    fn key(&self, labels: StrMap<'_>) -> (i64, i64) {
        match self {
            Self::Weight(terms) => {
                let weight: i64 = terms
                    .iter()
                    .filter(|(_, s)| s.matches_with(|k| labels.get(k)))
                    .map(|(w, _)| w)
                    .sum();
                (-weight, 0)
            }
            Self::Order(terms) => terms
                .iter()
                .enumerate()
                .find_map(|(level, term)| {
                    labels
                        .get(&term.ordered_key)
                        .map(|v| (i64::try_from(level).unwrap_or(i64::MAX), -trailing_int(v)))
                })
                .unwrap_or((-1, 0)),
            Self::None => (0, 0),
        }
    }
}

/// The integer at the end of a label value: 5 in "5", 10 in "sts-10", 0 when there is none
/// or it does not fit (docs "order": "sorted based on the int part of the value string").
pub fn trailing_int(value: &str) -> i64 {
    let digits = value.bytes().rev().take_while(u8::is_ascii_digit).count();
    value[value.len() - digits..].parse().unwrap_or(0)
}

/// Index of `key` in `wanted`, added when missing.
fn slot(key: &str, wanted: &mut Vec<String>) -> usize {
    wanted.iter().position(|w| w == key).unwrap_or_else(|| {
        wanted.push(key.to_owned());
        wanted.len() - 1
    })
}
