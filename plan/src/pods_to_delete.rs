//! `podsToDelete` names that match no pod of the CloneSet.
//!
//! OpenKruise refuses them at admission: its validating webhook
//! (`pkg/webhook/cloneset/validating/validation.go`) checks every name *added* to
//! `scaleStrategy.podsToDelete` and refuses one that names no pod, a terminating pod or a
//! pod of another owner. Names already listed are not checked again, and after each sync
//! the controller drops the names of pods that are no longer live
//! (`truncatePodsToDelete` in `cloneset_controller.go`). So under OpenKruise a listed name
//! without a pod is always one whose pod existed and is gone.
//!
//! Without a webhook a name may also never have matched a pod (a typo, another
//! CloneSet's pod). Dropped silently, it would let a `replicas` decrease made in the same
//! change delete a pod picked by the default order instead of the one the user meant. The
//! rule here tells the two apart by what the controller has seen:
//!
//! - a name that matches a pod now (running or terminating) is handled as usual;
//! - a name without a pod that this controller saw matching a pod earlier is **gone**: its
//!   pod was deleted (by us or anyone) and the name is pruned, as OpenKruise does;
//! - a name without a pod that was never seen matching one is **not found**. It is reported
//!   (a `FailedScale` condition with reason [`REASON_NOT_FOUND`] and a Warning event naming
//!   the names). While the CloneSet has pods to scale in, one default-order victim per
//!   such name is held back (the scale-in deletes that many fewer pods) and the name stays
//!   listed, until the user fixes or removes it or raises `replicas`; with nothing to
//!   scale in it can cause no wrong deletion and is pruned, as OpenKruise would.
//!
//! "Seen" is remembered per CloneSet for the names still listed only ([`remember`]), so it
//! is bounded by the list. Our own deletions do not depend on it: a pod we delete is
//! terminating, still matched, in the next reconcile, which prunes its name. After a
//! controller restart a gone name whose pod vanished unseen (deleted with no grace period
//! while no controller ran) is reported as not found; it holds a victim only while there is
//! something to scale in, and is pruned as soon as there is not.

use std::collections::BTreeSet;

use super::model::PlanContext;

/// No names: the memory of a controller that has seen nothing yet.
pub static NO_NAMES: BTreeSet<String> = BTreeSet::new();

/// The `FailedScale` reason of names that match no pod.
pub const REASON_NOT_FOUND: &str = "PodsToDeleteNotFound";

/// The listed names that match no pod, split by whether they were seen matching one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unmatched<'a> {
    /// Seen before, pod gone: pruned.
    pub gone: Vec<&'a str>,
    /// Never seen: reported; each holds back one scale-in victim while there is any.
    pub not_found: Vec<&'a str>,
}

/// The unmatched names of `ctx`'s CloneSet and the victims they hold back from a scale-in
/// of `scale_down` pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Check<'c> {
    pub unmatched: Unmatched<'c>,
    pub held: usize,
}

impl Check<'_> {
    /// The not-found names that stay listed (none when nothing is held).
    pub fn kept(&self) -> BTreeSet<&str> {
        if self.held > 0 {
            self.unmatched.not_found.iter().copied().collect()
        } else {
            BTreeSet::new()
        }
    }
}

/// The names listed in `podsToDelete` of `ctx`'s CloneSet.
pub fn listed<'c>(ctx: &'c PlanContext<'_>) -> &'c [String] {
    ctx.cloneset()
        .spec
        .scale_strategy
        .as_ref()
        .map_or(&[], |s| s.pods_to_delete.as_slice())
}

/// The names of the CloneSet's pods, terminating ones included.
pub fn present<'c>(ctx: &'c PlanContext<'_>) -> BTreeSet<&'c str> {
    ctx.pods.iter().map(|p| p.name).collect()
}

/// [`unmatched`] and [`held`] for `ctx` with a scale-in of `scale_down` pods wanted.
pub fn check<'c>(ctx: &'c PlanContext<'_>, scale_down: i32) -> Check<'c> {
    let unmatched = unmatched(listed(ctx), &present(ctx), ctx.snapshot.pods_to_delete_seen);
    let held = held(unmatched.not_found.len(), scale_down);
    Check { unmatched, held }
}

/// Splits the names of `listed` that are not in `present` (the names of the CloneSet's
/// pods, terminating ones included) by `seen`. Each name once, in list order.
pub fn unmatched<'a>(
    listed: &'a [String],
    present: &BTreeSet<&str>,
    seen: &BTreeSet<String>,
) -> Unmatched<'a> {
    let mut out = Unmatched::default();
    let mut done = BTreeSet::new();
    for name in listed.iter().map(String::as_str) {
        if present.contains(name) || !done.insert(name) {
            continue;
        }
        if seen.contains(name) {
            out.gone.push(name);
        } else {
            out.not_found.push(name);
        }
    }
    out
}

/// Scale-in victims held back: one per not-found name, at most the `scale_down` wanted.
pub fn held(not_found: usize, scale_down: i32) -> usize {
    not_found.min(usize::try_from(scale_down).unwrap_or(0))
}

/// Whether the not-found names stay listed: only while they hold something back.
pub fn keep_not_found(not_found: usize, scale_down: i32) -> bool {
    held(not_found, scale_down) > 0
}

/// The names to remember as seen after this reconcile: those seen before or matching a pod
/// now, of the names still listed (a name leaves the memory when it leaves the list).
pub fn remember(
    listed: &[String],
    present: &BTreeSet<&str>,
    seen: &BTreeSet<String>,
) -> BTreeSet<String> {
    listed
        .iter()
        .filter(|n| present.contains(n.as_str()) || seen.contains(n.as_str()))
        .cloned()
        .collect()
}

/// The condition message for `not_found` names, `held` victims held back.
pub fn message(not_found: &[&str], held: usize) -> String {
    let names = not_found.join(", ");
    if held > 0 {
        format!(
            "scaleStrategy.podsToDelete names no pod of this CloneSet: {names}; {held} pod(s) of the scale-in are held back instead of deleting others in their place, until the names are fixed or removed or replicas is raised"
        )
    } else {
        format!(
            "scaleStrategy.podsToDelete names no pod of this CloneSet: {names}; removed from the list (nothing to scale in, no other pod was deleted)"
        )
    }
}

#[cfg(test)]
#[path = "pods_to_delete/plan_tests.rs"]
mod plan_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn names_are_matched_gone_or_not_found() {
        // (listed, present, seen) -> (gone, not_found)
        type Case<'a> = (
            &'a [&'a str],
            &'a [&'a str],
            &'a [&'a str],
            &'a [&'a str],
            &'a [&'a str],
        );
        let cases: [Case<'_>; 7] = [
            (&[], &["a"], &[], &[], &[]),
            (&["a"], &["a"], &[], &[], &[]),
            // deleted by us (or anyone) after we saw it: gone
            (&["a"], &[], &["a"], &["a"], &[]),
            // never matched a pod: a typo or another CloneSet's pod
            (&["typo"], &["a"], &[], &[], &["typo"]),
            (&["a", "typo", "b"], &["a"], &["b"], &["b"], &["typo"]),
            // duplicates once, list order kept
            (&["z", "y", "z"], &[], &[], &[], &["z", "y"]),
            // a name seen for another pod name does not count
            (&["b"], &[], &["a"], &[], &["b"]),
        ];
        for (listed, present, seen, gone, not_found) in cases {
            let listed = strings(listed);
            let present: BTreeSet<&str> = present.iter().copied().collect();
            let got = unmatched(&listed, &present, &set(seen));
            assert_eq!(got.gone, gone, "{listed:?} {present:?} {seen:?}");
            assert_eq!(got.not_found, not_found, "{listed:?} {present:?} {seen:?}");
        }
    }

    #[test]
    fn victims_are_held_only_while_there_is_a_scale_in() {
        // (not_found, scale_down) -> (held, keep)
        let cases = [
            (0, 0, 0, false),
            (0, 3, 0, false),
            (1, 0, 0, false),
            (1, -2, 0, false),
            (1, 1, 1, true),
            (2, 1, 1, true),
            (1, 3, 1, true),
            (3, 2, 2, true),
        ];
        for (n, down, want_held, want_keep) in cases {
            assert_eq!(held(n, down), want_held, "{n} {down}");
            assert_eq!(keep_not_found(n, down), want_keep, "{n} {down}");
        }
    }

    #[test]
    fn memory_holds_listed_names_seen_or_present_only() {
        let listed = strings(&["a", "b", "c"]);
        let present: BTreeSet<&str> = ["a", "x"].into_iter().collect();
        // "b" seen before stays; "old" left the list; "c" never seen; "x" not listed
        let got = remember(&listed, &present, &set(&["b", "old"]));
        assert_eq!(got, set(&["a", "b"]));
        // a pruned list forgets everything
        assert!(remember(&[], &present, &got).is_empty());
    }

    #[test]
    fn the_message_names_the_names_and_says_what_was_held() {
        let m = message(&["web-typo", "other-abc"], 1);
        assert!(m.contains("web-typo, other-abc"), "{m}");
        assert!(m.contains("1 pod(s) of the scale-in are held back"), "{m}");
        let m = message(&["web-typo"], 0);
        assert!(m.contains("removed from the list"), "{m}");
    }

    proptest::proptest! {
        /// The memory never outgrows the list, and a name present now is never unmatched.
        #[test]
        fn memory_is_bounded_and_present_names_match(
            listed in proptest::collection::vec("[a-e]", 0..8),
            present in proptest::collection::btree_set("[a-e]", 0..5),
            seen in proptest::collection::btree_set("[a-h]", 0..8),
        ) {
            let present: BTreeSet<&str> = present.iter().map(String::as_str).collect();
            let next = remember(&listed, &present, &seen);
            proptest::prop_assert!(next.iter().all(|n| listed.contains(n)));
            let u = unmatched(&listed, &present, &seen);
            proptest::prop_assert!(u.gone.iter().chain(&u.not_found).all(|n| !present.contains(n)));
            proptest::prop_assert!(u.gone.iter().all(|n| seen.contains(*n)));
            proptest::prop_assert!(u.not_found.iter().all(|n| !seen.contains(*n)));
        }
    }
}
