//! How a pod's in-place update ended, in the terms of issue 28's node invariant: every
//! update ends *done*, or *failed with a condition saying why*, within a bound after the
//! faults stop.
//!
//! - Done: the pod is on the update revision, `InPlaceUpdateReady` and `Ready` are True.
//! - Failed: the pod is on the update revision and `InPlaceUpdateReady` is False with one
//!   of the reasons the product gives a failed or stalled update
//!   (`InPlaceUpdateFailed`, `InPlaceUpdateStalled`, `InvalidInPlaceUpdateState`) and a
//!   message: a user can tell why from the pod alone.
//! - Anything else is not an ending (still running, or failed without saying why).
//!
//! The node suite's convergence check is [`judge`]: each run expects every update to end
//! done (the new image exists, the change can succeed once the faults stop) or failed
//! (the seed chose an image the registry does not have). Which ending counts follows the
//! product, not OpenKruise v1.9: the reference leaves such a pod `InPlaceUpdateReady=False`
//! with its `StartInPlaceUpdate` reason for good and says nothing; this controller writes
//! `InPlaceUpdateFailed` with the kubelet's waiting reason (plan `stall`), so a pod that
//! only shows `ImagePullBackOff` in its container status hung silently.

use inplace_proto::keys;
use k8s_openapi::api::core::v1::Pod;

use crate::bed::condition;

/// The reasons on `InPlaceUpdateReady=False` that end an update as failed.
pub const FAILED_REASONS: [&str; 3] = [
    keys::INPLACE_UPDATE_FAILED_REASON,
    keys::INPLACE_UPDATE_STALLED_REASON,
    keys::INPLACE_UPDATE_STATE_UNREADABLE_REASON,
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Done,
    Failed {
        reason: String,
        message: String,
    },
    /// Not ended, and why not.
    Open(String),
}

/// How the in-place update of `p` to `update_revision` ended, if it did.
pub fn ending(p: &Pod, update_revision: &str) -> Ending {
    let revision = p
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::REVISION_LABEL))
        .map(String::as_str)
        .unwrap_or_default();
    if revision != update_revision {
        return Ending::Open(format!("on revision {revision:?}, not {update_revision}"));
    }
    let inplace = condition(p, keys::INPLACE_UPDATE_READY_CONDITION);
    let ready = condition(p, "Ready").is_some_and(|c| c.status == "True");
    match inplace {
        Some(c) if c.status == "True" && ready => Ending::Done,
        Some(c) if c.status == "True" => Ending::Open("InPlaceUpdateReady but not Ready".into()),
        Some(c) if c.status == "False" => {
            let reason = c.reason.clone().unwrap_or_default();
            let message = c.message.clone().unwrap_or_default();
            if FAILED_REASONS.contains(&reason.as_str()) && !message.trim().is_empty() {
                Ending::Failed { reason, message }
            } else {
                Ending::Open(format!(
                    "InPlaceUpdateReady False ({reason:?}: {message:?}): running, or failed without saying why"
                ))
            }
        }
        Some(c) => Ending::Open(format!("InPlaceUpdateReady {}", c.status)),
        None => Ending::Open("no InPlaceUpdateReady condition".into()),
    }
}

/// How a run's in-place updates are expected to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// The change can succeed: every pod ends done.
    Done,
    /// The change cannot succeed (its image is not in the registry): every pod the
    /// controller moved to the update revision ends failed, saying why; the others stay
    /// outside the update.
    Failed,
}

/// One pod's ending as the runner read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEnding {
    pub name: String,
    /// On the update revision (the controller began its update).
    pub in_update: bool,
    pub ending: Ending,
}

impl PodEnding {
    pub fn of(p: &Pod, update_revision: &str) -> PodEnding {
        let in_update = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::REVISION_LABEL))
            .is_some_and(|r| r == update_revision);
        PodEnding {
            name: p.metadata.name.clone().unwrap_or_default(),
            in_update,
            ending: ending(p, update_revision),
        }
    }
}

/// What [`judge`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every update ended as expected.
    Ended,
    /// Not yet: why (the runner polls again until its bound).
    Wait(String),
    /// Ended otherwise than expected, or (at the bound) not ended.
    Violations(Vec<String>),
}

/// The endings of a run's pods against what was `expected`; `at_bound`: the bound after
/// the faults stopped is over, so an update still open is a violation (it hung).
///
/// Done expected: every pod done; one that failed may still recover while the bound
/// lasts (the kubelet retries a container the CRI faults failed), at the bound it is a
/// violation like one still running. Failed expected: at least one pod in the update and
/// each pod in it failed saying why; a pod that ended done is a violation at once (the
/// image does not exist: it cannot run it).
pub fn judge(expected: Expected, pods: &[PodEnding], at_bound: bool) -> Verdict {
    let mut wrong = Vec::new();
    let mut open = Vec::new();
    match expected {
        Expected::Done => {
            for p in pods {
                match &p.ending {
                    Ending::Done => {}
                    Ending::Failed { reason, message } => open.push(format!(
                        "pod {}: its update failed ({reason}: {message}) though it can succeed",
                        p.name
                    )),
                    Ending::Open(why) => open.push(format!(
                        "pod {}: its update neither done nor failed: {why}",
                        p.name
                    )),
                }
            }
        }
        Expected::Failed => {
            for p in pods.iter().filter(|p| p.in_update) {
                match &p.ending {
                    Ending::Failed { .. } => {}
                    Ending::Done => wrong.push(format!(
                        "pod {}: its update ended done though its image does not exist",
                        p.name
                    )),
                    Ending::Open(why) => open.push(format!(
                        "pod {}: its update cannot succeed but did not fail saying why (hung silently): {why}",
                        p.name
                    )),
                }
            }
            if !pods.iter().any(|p| p.in_update) {
                open.push("no pod is on the update revision: the update never began".into());
            }
        }
    }
    if !wrong.is_empty() {
        wrong.extend(open.into_iter().filter(|_| at_bound));
        return Verdict::Violations(wrong);
    }
    match (open.is_empty(), at_bound) {
        (true, _) => Verdict::Ended,
        (false, false) => Verdict::Wait(open.join("; ")),
        (false, true) => Verdict::Violations(open),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(revision: &str, inplace: Option<(&str, &str, &str)>, ready: bool) -> Pod {
        let mut conditions =
            vec![json!({"type": "Ready", "status": if ready { "True" } else { "False" }})];
        if let Some((status, reason, message)) = inplace {
            conditions.push(json!({
                "type": "InPlaceUpdateReady", "status": status, "reason": reason, "message": message
            }));
        }
        serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": {"controller-revision-hash": revision}},
            "status": {"conditions": conditions}
        }))
        .unwrap_or_default()
    }

    #[test]
    fn an_update_ends_done_or_failed_with_a_reason_and_a_message() {
        let failed = |reason: &str, message: &str| Ending::Failed {
            reason: reason.into(),
            message: message.into(),
        };
        for (what, p, want) in [
            (
                "done",
                pod("r2", Some(("True", "", "")), true),
                Some(Ending::Done),
            ),
            (
                "a container of the update fails",
                pod(
                    "r2",
                    Some((
                        "False",
                        "InPlaceUpdateFailed",
                        "container app: ErrImagePull",
                    )),
                    false,
                ),
                Some(failed("InPlaceUpdateFailed", "container app: ErrImagePull")),
            ),
            (
                "stalled past its deadline",
                pod(
                    "r2",
                    Some(("False", "InPlaceUpdateStalled", "not done in 300s")),
                    true,
                ),
                Some(failed("InPlaceUpdateStalled", "not done in 300s")),
            ),
            (
                "state unreadable",
                pod(
                    "r2",
                    Some(("False", "InvalidInPlaceUpdateState", "bad JSON")),
                    true,
                ),
                Some(failed("InvalidInPlaceUpdateState", "bad JSON")),
            ),
            (
                "still running",
                pod("r2", Some(("False", "StartInPlaceUpdate", "")), false),
                None,
            ),
            (
                "failed without a message",
                pod("r2", Some(("False", "InPlaceUpdateFailed", " ")), false),
                None,
            ),
            (
                "False for another reason",
                pod("r2", Some(("False", "Whatever", "why")), false),
                None,
            ),
            (
                "completed, not yet Ready",
                pod("r2", Some(("True", "", "")), false),
                None,
            ),
            (
                "not on the update revision",
                pod("r1", Some(("True", "", "")), true),
                None,
            ),
            ("no condition", pod("r2", None, true), None),
        ] {
            let got = ending(&p, "r2");
            match want {
                Some(want) => assert_eq!(got, want, "{what}"),
                None => assert!(matches!(got, Ending::Open(_)), "{what}: {got:?}"),
            }
        }
    }

    fn named(name: &str, p: Pod) -> PodEnding {
        let mut p = p;
        p.metadata.name = Some(name.into());
        PodEnding::of(&p, "r2")
    }

    fn done(name: &str) -> PodEnding {
        named(name, pod("r2", Some(("True", "", "")), true))
    }

    fn failed(name: &str) -> PodEnding {
        named(
            name,
            pod(
                "r2",
                Some((
                    "False",
                    "InPlaceUpdateFailed",
                    "in-place update to revision r2 failed: container app: ImagePullBackOff",
                )),
                false,
            ),
        )
    }

    /// Moved to the update revision, the update under way (or hung: no failure said).
    fn running(name: &str) -> PodEnding {
        named(
            name,
            pod("r2", Some(("False", "StartInPlaceUpdate", "")), false),
        )
    }

    /// Still on the old revision: outside the update.
    fn outside(name: &str) -> PodEnding {
        named(name, pod("r1", Some(("True", "", "")), true))
    }

    fn violations(v: Verdict) -> Vec<String> {
        match v {
            Verdict::Violations(v) => v,
            other => panic!("not a violation: {other:?}"),
        }
    }

    #[test]
    fn a_change_that_can_succeed_must_end_done_on_every_pod() {
        for at_bound in [false, true] {
            assert_eq!(
                judge(Expected::Done, &[done("a"), done("b")], at_bound),
                Verdict::Ended
            );
        }
        // Before the bound: still running, an old-revision pod, or a failure the
        // kubelet may yet recover from are waited for.
        for pods in [
            vec![done("a"), running("b")],
            vec![done("a"), outside("b")],
            vec![done("a"), failed("b")],
        ] {
            assert!(
                matches!(judge(Expected::Done, &pods, false), Verdict::Wait(_)),
                "{pods:?}"
            );
        }
        // At the bound each is a violation, naming the pod and why.
        let v = violations(judge(Expected::Done, &[done("a"), running("b")], true));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("pod b: its update neither done nor failed"),
            "{v:?}"
        );
        let v = violations(judge(Expected::Done, &[failed("a"), outside("b")], true));
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(
            v[0].contains("pod a: its update failed (InPlaceUpdateFailed"),
            "{v:?}"
        );
        assert!(v[1].contains("on revision \"r1\""), "{v:?}");
    }

    #[test]
    fn a_change_that_cannot_succeed_must_end_failed_saying_why() {
        // One pod in the update (maxUnavailable 1), failed with the reason: ended.
        for at_bound in [false, true] {
            assert_eq!(
                judge(Expected::Failed, &[failed("a"), outside("b")], at_bound),
                Verdict::Ended
            );
        }
        // Ended done: a violation at once, whatever the bound.
        let v = violations(judge(Expected::Failed, &[done("a"), outside("b")], false));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("pod a: its update ended done though its image does not exist"));
        // Hung silently: waited for, then a violation at the bound.
        let pods = [running("a"), outside("b")];
        assert!(matches!(
            judge(Expected::Failed, &pods, false),
            Verdict::Wait(_)
        ));
        let v = violations(judge(Expected::Failed, &pods, true));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("pod a: its update cannot succeed but did not fail saying why"));
        // Failed without a message is not saying why.
        let silent = named(
            "a",
            pod("r2", Some(("False", "InPlaceUpdateFailed", "")), false),
        );
        let v = violations(judge(Expected::Failed, &[silent], true));
        assert!(v[0].contains("hung silently"), "{v:?}");
        // The update never began.
        let v = violations(judge(Expected::Failed, &[outside("a"), outside("b")], true));
        assert!(v[0].contains("the update never began"), "{v:?}");
    }

    /// The watch's history of a pod whose new image does not exist, as this product
    /// writes it: the controller begins the update, the kubelet cannot pull, the
    /// controller reports the failure. Judged at every event, it ends only at the report;
    /// the same history with the report left out (as OpenKruise v1.9 leaves it) and a
    /// daemon that marked the pod done are flagged.
    #[test]
    fn the_history_of_an_update_that_cannot_succeed() {
        let history = [
            outside("a"),
            running("a"),
            named(
                "a",
                pod("r2", Some(("False", "StartInPlaceUpdate", "")), false),
            ),
            failed("a"),
        ];
        let verdicts: Vec<Verdict> = history
            .iter()
            .map(|p| judge(Expected::Failed, std::slice::from_ref(p), false))
            .collect();
        assert!(
            verdicts[..3].iter().all(|v| matches!(v, Verdict::Wait(_))),
            "{verdicts:?}"
        );
        assert_eq!(verdicts[3], Verdict::Ended);
        // No report by the bound: hung.
        assert!(matches!(
            judge(Expected::Failed, std::slice::from_ref(&history[2]), true),
            Verdict::Violations(_)
        ));
        // Made done (a daemon that marked it ready without the new container): flagged.
        assert!(matches!(
            judge(Expected::Failed, &[done("a")], false),
            Verdict::Violations(_)
        ));
    }
}
