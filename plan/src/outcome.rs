//! What became of sending a plan, as the applier tallies it: the writes attempted, the
//! failures (each under the condition it is reported under), the steps not attempted
//! because an earlier phase failed, and the conflicts let pass; and which error the
//! reconcile's retry policy gets. Generic in the applier's error type, which this crate
//! does not know.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::sending::FailureKind;

/// One failed write.
#[derive(Debug)]
pub struct Failure<E> {
    pub kind: FailureKind,
    pub error: E,
}

/// What happened while sending a plan.
#[derive(Debug)]
pub struct Outcome<E> {
    pub attempted: usize,
    pub failures: Vec<Failure<E>>,
    /// Steps not attempted because an earlier phase failed.
    pub skipped: usize,
    /// Writes answered 409 that were not failures: the pod is judged again from its newer
    /// version. That version's watch event normally triggers the next reconcile; the
    /// reconcile is requeued soon as well, in case no event comes.
    pub conflicts_passed: usize,
    /// Failed writes that do not fail the reconcile ([`crate::sending::fails_reconcile`]):
    /// the reconcile is due again soon instead.
    pub set_aside: Vec<E>,
}

impl<E> Default for Outcome<E> {
    fn default() -> Self {
        Self {
            attempted: 0,
            failures: Vec::new(),
            skipped: 0,
            conflicts_passed: 0,
            set_aside: Vec::new(),
        }
    }
}

/// Several failed writes, as one error: how many of how many, and the first.
#[derive(Debug)]
pub struct Aggregate<E> {
    pub failed: usize,
    pub total: usize,
    pub first: E,
}

impl<E> Outcome<E> {
    /// The revisions could not be written (`error`): no step of the plan's `steps` is
    /// attempted, since no pod is written before its revision exists.
    pub fn revisions_failed(steps: usize, error: E) -> Self {
        let mut outcome = Self {
            attempted: 1,
            skipped: steps,
            ..Self::default()
        };
        outcome.fail(FailureKind::Update, error);
        outcome
    }

    pub fn fail(&mut self, kind: FailureKind, error: E) {
        self.failures.push(Failure { kind, error });
    }

    /// Tallies one phase of `len` steps of which `results` were attempted (the others
    /// skipped: a chain stops at its first failure, slow start at its first failed
    /// batch), each failure under `kind_of` its step; whether one failed.
    pub fn tally<S>(
        &mut self,
        len: usize,
        results: Vec<(S, Result<(), E>)>,
        kind_of: impl Fn(&S) -> FailureKind,
    ) -> bool {
        self.attempted += results.len();
        self.skipped += len.saturating_sub(results.len());
        let mut failed = false;
        for (step, result) in results {
            if let Err(error) = result {
                failed = true;
                self.fail(kind_of(&step), error);
            }
        }
        failed
    }

    /// `results` of a phase with the failures of the steps `aside` picks taken out (into
    /// [`Self::set_aside`]) and counted as written, to be [tallied](Self::tally): they fail
    /// neither the phase nor the reconcile.
    pub fn set_failures_aside<S>(
        &mut self,
        results: Vec<(S, Result<(), E>)>,
        aside: impl Fn(&S) -> bool,
    ) -> Vec<(S, Result<(), E>)> {
        let mut kept = Vec::with_capacity(results.len());
        for (step, result) in results {
            match result {
                Err(error) if aside(&step) => {
                    self.set_aside.push(error);
                    kept.push((step, Ok(())));
                }
                result => kept.push((step, result)),
            }
        }
        kept
    }

    /// The error to hand to the retry policy, if anything failed: the one failure as it
    /// is, several as their [`Aggregate`].
    pub fn into_error(self) -> Option<E>
    where
        E: From<Aggregate<E>>,
    {
        let (total, failed) = (self.attempted, self.failures.len());
        let first = self.failures.into_iter().next()?.error;
        if failed == 1 {
            return Some(first);
        }
        Some(E::from(Aggregate {
            failed,
            total,
            first,
        }))
    }
}

/// Per pod name: the resourceVersion our last write of one execution left on the pod. A
/// later write of the same pod in the same execution is pinned to it (the cached pod's
/// version is outdated by our own write).
#[derive(Debug, Default)]
pub struct LeftVersions(Mutex<HashMap<String, String>>);

impl LeftVersions {
    fn map(&self) -> MutexGuard<'_, HashMap<String, String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that our write of pod `name` left `resource_version` (an empty one, of an
    /// answer without a version, notes nothing).
    pub fn record(&self, name: &str, resource_version: &str) {
        if !resource_version.is_empty() {
            self.map()
                .insert(name.to_owned(), resource_version.to_owned());
        }
    }

    /// The version a write of pod `name` is pinned to: what our last write of it left,
    /// else `cached`, the cached pod's own.
    pub fn pin_for(&self, name: &str, cached: Option<String>) -> Option<String> {
        self.map().get(name).cloned().or(cached)
    }
}

#[cfg(test)]
mod tests;
