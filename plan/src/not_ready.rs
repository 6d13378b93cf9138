//! The multi-writer `KruisePodReady` condition: each writer keeps its own key in the
//! condition's message (a JSON list of `{userAgent, key}`), and the condition is False while
//! any key is there (reference `pub.KruisePodReadyConditionType` and its message format).
//! Written by the lifecycle hooks' `markPodNotReady` and by ContainerRecreateRequests'
//! `unreadyGracePeriodSeconds`.

use inplace_proto::keys;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use crate::pod_conditions::has_gate;

/// The `userAgent` of a ContainerRecreateRequest's entry in the `KruisePodReady` message
/// (its key: the request's `namespace/name`).
pub const CRR_USER_AGENT: &str = "ContainerRecreateRequest";

/// The `userAgent` of the lifecycle hooks' entries (`markPodNotReady`; keys
/// `preDeleteHook`, `preUpdateHook`), as the reference writes them: entries match by
/// userAgent and key, so a pod taken over from OpenKruise is released only by this one.
pub const LIFECYCLE_USER_AGENT: &str = "Lifecycle";

/// One entry of the `KruisePodReady` condition message.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotReadyMessage {
    pub user_agent: String,
    pub key: String,
}

/// The `KruisePodReady` condition (status, message) after adding (`add`) or removing
/// `key` from the not-ready keys in `pod`'s; `None` when nothing changes. An unreadable
/// message counts as no keys.
pub fn kruise_pod_ready(pod: &Pod, key: &NotReadyMessage, add: bool) -> Option<(String, String)> {
    kruise_pod_ready_any(pod, std::slice::from_ref(key), add)
}

/// [`kruise_pod_ready`] for a key written under any of `spellings` (the first is the one
/// added): present when one of them is, removed in all of them.
fn kruise_pod_ready_any(
    pod: &Pod,
    spellings: &[NotReadyMessage],
    add: bool,
) -> Option<(String, String)> {
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| {
            c.iter()
                .find(|c| c.type_ == keys::KRUISE_POD_READY_CONDITION)
        });
    let mut keys_now: Vec<NotReadyMessage> = current
        .and_then(|c| c.message.as_deref())
        .filter(|m| !m.is_empty())
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or_default();
    let present = keys_now.iter().any(|k| spellings.contains(k));
    if add == present {
        return None;
    }
    if add {
        keys_now.extend(spellings.first().cloned());
    } else {
        keys_now.retain(|k| !spellings.contains(k));
    }
    if keys_now.is_empty() {
        Some(("True".into(), String::new()))
    } else {
        let text = serde_json::to_string(&keys_now).ok()?;
        Some(("False".into(), text))
    }
}

/// Immediate retries of a change of our key after a conflict: others edit the same list
/// (ContainerRecreateRequests, the daemon), so the pod is read again and the change
/// decided again from it, once.
pub const KEY_CONFLICT_RETRIES: u32 = 1;

/// After the `attempt`th conflict (from 1) of a change of our key: whether the pod is read
/// again for a retry.
pub fn key_retries(attempt: u32) -> bool {
    attempt <= KEY_CONFLICT_RETRIES
}

/// The `pods/status` patch that adds (`add`) or removes our `key` in the `KruisePodReady`
/// condition's message list of `pod`, conditional on `resource_version`; `None` when the
/// pod has no such readiness gate or the list is already as wanted.
pub fn not_ready_key_patch(
    pod: &Pod,
    key: &str,
    add: bool,
    resource_version: Option<&str>,
    now: Time,
) -> Option<Value> {
    if !has_gate(pod, keys::KRUISE_POD_READY_CONDITION) {
        return None;
    }
    // Earlier builds wrote our lifecycle entries under the ContainerRecreateRequest
    // userAgent: a pod they marked is released too.
    let ours = [LIFECYCLE_USER_AGENT, CRR_USER_AGENT].map(|user_agent| NotReadyMessage {
        user_agent: user_agent.into(),
        key: key.into(),
    });
    let (status, message) = kruise_pod_ready_any(pod, &ours, add)?;
    Some(json!({
        "metadata": {"resourceVersion": resource_version},
        "status": {"conditions": [{
            "type": keys::KRUISE_POD_READY_CONDITION,
            "status": status,
            "message": message,
            "lastTransitionTime": now,
        }]},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn pod(message: Option<&str>) -> Result<Pod, serde_json::Error> {
        serde_json::from_value(json!({
            "spec": {"containers": [], "readinessGates": [{"conditionType": keys::KRUISE_POD_READY_CONDITION}]},
            "status": {"conditions": message.map(|m| vec![json!({
                "type": keys::KRUISE_POD_READY_CONDITION,
                "status": "False",
                "message": m,
            })]).unwrap_or_default()},
        }))
    }

    /// The (status, message) the key's patch writes; None when it writes nothing.
    fn written(
        message: Option<&str>,
        add: bool,
    ) -> Result<Option<(Value, Value)>, serde_json::Error> {
        let now = Time(Timestamp::UNIX_EPOCH);
        let pod = pod(message)?;
        let body = not_ready_key_patch(&pod, keys::PRE_DELETE_HOOK_KEY, add, None, now);
        Ok(body.map(|b| {
            let c = &b["status"]["conditions"][0];
            (c["status"].clone(), c["message"].clone())
        }))
    }

    #[test]
    fn lifecycle_keys_are_written_and_released_as_the_reference_spells_them()
    -> Result<(), serde_json::Error> {
        let lifecycle = r#"[{"userAgent":"Lifecycle","key":"preDeleteHook"}]"#;
        let legacy = r#"[{"userAgent":"ContainerRecreateRequest","key":"preDeleteHook"}]"#;
        let crr = r#"[{"userAgent":"ContainerRecreateRequest","key":"ns/r"}]"#;
        let both = r#"[{"userAgent":"ContainerRecreateRequest","key":"ns/r"},{"userAgent":"Lifecycle","key":"preDeleteHook"}]"#;
        for (case, message, add, want) in [
            ("added", None, true, Some(("False", lifecycle))),
            ("beside a CRR's", Some(crr), true, Some(("False", both))),
            ("there", Some(lifecycle), true, None),
            ("there, old spelling", Some(legacy), true, None),
            ("released", Some(lifecycle), false, Some(("True", ""))),
            ("released, old", Some(legacy), false, Some(("True", ""))),
            ("CRR's kept", Some(both), false, Some(("False", crr))),
            ("a CRR's alone", Some(crr), false, None),
        ] {
            let want = want.map(|(s, m)| (json!(s), json!(m)));
            assert_eq!(written(message, add)?, want, "{case}");
        }
        Ok(())
    }

    #[test]
    fn a_change_of_our_key_is_retried_once_after_a_conflict() {
        for (attempt, retried) in [(1, true), (2, false), (3, false)] {
            assert_eq!(key_retries(attempt), retried, "attempt {attempt}");
        }
    }
}
