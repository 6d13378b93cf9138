//! `ResourcesDeletionProtection` for CloneSets without an admission webhook: a CloneSet
//! labelled `policy.kruise.io/delete-protection` `Always`, or `Cascading` with
//! `spec.replicas` > 0 (the reference's `ValidateWorkloadDeletion`), carries the finalizer
//! [`FINALIZER`] while the gate is on. The reference refuses the DELETE; on servers without
//! the ValidatingAdmissionPolicy of `deploy/policy/` the DELETE is accepted, but the
//! CloneSet is not removed — and with the default (background) propagation neither are
//! its pods — until the label is removed or (Cascading) `replicas` is 0; the controller
//! reports that with a Warning event. `kubectl delete --cascade=foreground` is not held
//! this way (the garbage collector deletes the pods first); the policy refuses it.
//!
//! [`decide`] is the whole rule; [`planned`] makes its step of the plan (the finalizer
//! write, or the held deletion's event), which the applier sends like any other.

use inplace_proto::{CloneSet, keys};
use serde_json::json;

use crate::action_write::{Patch, Target, Write};
use crate::model::Action;
use crate::step::{self as plan_step, StepWrite};

/// The finalizer: the label's key, so that a user who finds it knows where it comes from.
pub const FINALIZER: &str = keys::DELETE_PROTECTION_LABEL;

/// Event reason while a deletion is held.
pub const REASON_HELD: &str = "DeletionProtected";

/// What to do about the finalizer of one CloneSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Nothing,
    AddFinalizer,
    RemoveFinalizer,
    /// Being deleted while protected: keep the finalizer and say why.
    Held {
        message: String,
    },
}

/// Why `cs` may not be deleted now (`None` when it may), as the reference words it.
pub fn protection(cs: &CloneSet) -> Option<String> {
    let value = cs
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::DELETE_PROTECTION_LABEL))?;
    match value.as_str() {
        "Always" => Some(format!(
            "deletion is held by {}=Always: remove the label to let it proceed",
            keys::DELETE_PROTECTION_LABEL
        )),
        "Cascading" if cs.replicas() > 0 => Some(format!(
            "deletion is held by {}=Cascading while replicas is {} > 0: scale to 0 or remove the label to let it proceed",
            keys::DELETE_PROTECTION_LABEL,
            cs.replicas()
        )),
        _ => None,
    }
}

/// The finalizer step for `cs` with the gate `enabled`.
pub fn decide(cs: &CloneSet, enabled: bool) -> Step {
    let has = cs
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER));
    let deleting = cs.metadata.deletion_timestamp.is_some();
    match (enabled.then(|| protection(cs)).flatten(), has) {
        // Gate off, or not protected (any more): never leave the finalizer behind.
        (None, true) => Step::RemoveFinalizer,
        (None, false) => Step::Nothing,
        (Some(message), true) if deleting => Step::Held { message },
        (Some(_), true) => Step::Nothing,
        // Not added once deletion has begun: the DELETE was accepted unprotected.
        (Some(_), false) if deleting => Step::Nothing,
        (Some(_), false) => Step::AddFinalizer,
    }
}

/// `metadata.finalizers` after `step` (None when it does not change them).
pub fn finalizers_after(cs: &CloneSet, step: &Step) -> Option<Vec<String>> {
    let current = cs.metadata.finalizers.clone().unwrap_or_default();
    match step {
        Step::AddFinalizer => {
            let mut out = current;
            out.push(FINALIZER.to_owned());
            Some(out)
        }
        Step::RemoveFinalizer => Some(current.into_iter().filter(|f| f != FINALIZER).collect()),
        Step::Nothing | Step::Held { .. } => None,
    }
}

/// The plan's step for the finalizer of `cs` with the gate `enabled` (None: nothing to
/// do). Adding or removing it is a merge patch of the whole `metadata.finalizers` list,
/// only on the CloneSet version decided from (a concurrent change of the list wins and is
/// decided again); a held deletion writes nothing (its step's event says why).
pub fn planned(cs: &CloneSet, enabled: bool) -> Option<plan_step::Step> {
    let step = decide(cs, enabled);
    let action = match &step {
        Step::Nothing => return None,
        Step::Held { message } => {
            return Some(plan_step::Step {
                action: Action::HoldDeletion {
                    message: message.clone(),
                },
                write: Ok(StepWrite::Nothing {
                    why: "the deletion waits: the finalizer stays",
                }),
            });
        }
        Step::AddFinalizer => Action::AddFinalizer {
            finalizer: FINALIZER.to_owned(),
        },
        Step::RemoveFinalizer => Action::RemoveFinalizer {
            finalizer: FINALIZER.to_owned(),
        },
    };
    let finalizers = finalizers_after(cs, &step)?;
    let patch = Patch {
        target: Target::CloneSet,
        name: cs.metadata.name.clone().unwrap_or_default(),
        resource_version: cs.metadata.resource_version.clone(),
        patch: json!({"metadata": {"finalizers": finalizers}}),
        stamp_conditions: false,
    };
    Some(plan_step::Step {
        action,
        write: Ok(StepWrite::Object(Write::Patch(patch))),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;
    use crate::fixtures::{cloneset, t};

    fn cs(label: Option<&str>, replicas: i32, finalizer: bool, deleting: bool) -> CloneSet {
        let mut cs = cloneset(json!({"replicas": replicas}));
        if let Some(v) = label {
            cs.metadata.labels = Some([(FINALIZER.to_owned(), v.to_owned())].into());
        }
        if finalizer {
            cs.metadata.finalizers = Some(vec!["other/keep".into(), FINALIZER.into()]);
        }
        if deleting {
            cs.metadata.deletion_timestamp = Some(Time(t(1)));
        }
        cs
    }

    /// The expected step, `Held` without its message.
    #[derive(Debug, PartialEq)]
    enum Want {
        Nothing,
        Add,
        Remove,
        Held,
    }

    fn kind(step: &Step) -> Want {
        match step {
            Step::Nothing => Want::Nothing,
            Step::AddFinalizer => Want::Add,
            Step::RemoveFinalizer => Want::Remove,
            Step::Held { .. } => Want::Held,
        }
    }

    #[test]
    fn table() {
        use Want::*;
        // (label, replicas, has finalizer, deleting, gate) -> step
        let cases = [
            (Some("Always"), 3, false, false, true, Add),
            (Some("Always"), 0, false, false, true, Add),
            (Some("Always"), 3, true, false, true, Nothing),
            (Some("Always"), 3, true, true, true, Held),
            (Some("Cascading"), 3, false, false, true, Add),
            (Some("Cascading"), 0, false, false, true, Nothing),
            // Scaled to 0 while protected: the finalizer goes, also during deletion.
            (Some("Cascading"), 0, true, false, true, Remove),
            (Some("Cascading"), 0, true, true, true, Remove),
            (Some("Cascading"), 2, true, true, true, Held),
            // Label removed or another value.
            (None, 3, true, false, true, Remove),
            (None, 3, true, true, true, Remove),
            (Some("Never"), 3, false, false, true, Nothing),
            (None, 3, false, false, true, Nothing),
            // Deleted before it was protected: not held afterwards.
            (Some("Always"), 3, false, true, true, Nothing),
            // Gate off: nothing added, anything left behind removed.
            (Some("Always"), 3, false, false, false, Nothing),
            (Some("Always"), 3, true, true, false, Remove),
        ];
        for (label, replicas, fin, deleting, gate, want) in cases {
            let step = decide(&cs(label, replicas, fin, deleting), gate);
            assert_eq!(
                kind(&step),
                want,
                "{label:?} replicas {replicas} finalizer {fin} deleting {deleting} gate {gate}: {step:?}"
            );
        }
    }

    #[test]
    fn held_messages_name_the_label_and_the_way_out() {
        let Step::Held { message } = decide(&cs(Some("Cascading"), 2, true, true), true) else {
            panic!("held")
        };
        assert!(message.contains("policy.kruise.io/delete-protection=Cascading"));
        assert!(message.contains("scale to 0"));
    }

    /// The step's write as sent: the target, the precondition and the body.
    fn sent(step: &plan_step::Step) -> Option<(Target, String, Option<String>, serde_json::Value)> {
        match &step.write {
            Ok(StepWrite::Object(Write::Patch(p))) => Some((
                p.target,
                p.name.clone(),
                p.resource_version.clone(),
                p.patch.clone(),
            )),
            _ => None,
        }
    }

    #[test]
    fn planned_steps_carry_the_whole_finalizer_list_on_the_version_decided_from() {
        let versioned = |mut cs: CloneSet| {
            cs.metadata.resource_version = Some("41".into());
            cs
        };
        let fin = || FINALIZER.to_owned();
        // (CloneSet, gate) -> (action, the finalizers written; None: nothing written)
        let cases: Vec<(CloneSet, bool, Option<Action>, Option<serde_json::Value>)> = vec![
            (
                versioned(cs(Some("Always"), 3, false, false)),
                true,
                Some(Action::AddFinalizer { finalizer: fin() }),
                Some(json!([FINALIZER])),
            ),
            (
                versioned(cs(None, 3, true, false)),
                true,
                Some(Action::RemoveFinalizer { finalizer: fin() }),
                Some(json!(["other/keep"])),
            ),
            (
                versioned(cs(Some("Always"), 3, true, true)),
                false,
                Some(Action::RemoveFinalizer { finalizer: fin() }),
                Some(json!(["other/keep"])),
            ),
            (
                versioned(cs(Some("Always"), 3, true, false)),
                true,
                None,
                None,
            ),
            (versioned(cs(None, 3, false, false)), true, None, None),
        ];
        for (cloneset, gate, action, finalizers) in cases {
            let step = planned(&cloneset, gate);
            assert_eq!(
                step.as_ref().map(|s| s.action.clone()),
                action,
                "{cloneset:?}"
            );
            if let Some(finalizers) = finalizers {
                let step = step.expect("a step");
                assert_eq!(
                    sent(&step),
                    Some((
                        Target::CloneSet,
                        "demo".to_owned(),
                        Some("41".to_owned()),
                        json!({"metadata": {"finalizers": finalizers}})
                    ))
                );
            }
        }
    }

    #[test]
    fn a_held_deletion_is_a_step_that_writes_nothing_and_says_why() {
        let step = planned(&cs(Some("Always"), 3, true, true), true).expect("a step");
        let Action::HoldDeletion { message } = &step.action else {
            panic!("held: {step:?}")
        };
        assert!(message.contains("=Always"), "{message}");
        assert!(matches!(step.write, Ok(StepWrite::Nothing { .. })));
        assert_eq!(sent(&step), None);
    }

    #[test]
    fn finalizer_lists_keep_other_finalizers() {
        let with = cs(Some("Always"), 1, true, false);
        assert_eq!(
            finalizers_after(&with, &Step::RemoveFinalizer),
            Some(vec!["other/keep".to_owned()])
        );
        let without = cs(Some("Always"), 1, false, false);
        assert_eq!(
            finalizers_after(&without, &Step::AddFinalizer),
            Some(vec![FINALIZER.to_owned()])
        );
        assert_eq!(finalizers_after(&with, &Step::Nothing), None);
    }
}
