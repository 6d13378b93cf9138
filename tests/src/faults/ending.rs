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
}
