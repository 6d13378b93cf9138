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

/// The `userAgent` of our entries in the `KruisePodReady` message (the reference uses this
/// one for lifecycle keys too).
pub const NOT_READY_USER_AGENT: &str = "ContainerRecreateRequest";

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
    let present = keys_now.contains(key);
    if add == present {
        return None;
    }
    if add {
        keys_now.push(key.clone());
    } else {
        keys_now.retain(|k| k != key);
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
    let ours = NotReadyMessage {
        user_agent: NOT_READY_USER_AGENT.into(),
        key: key.into(),
    };
    let (status, message) = kruise_pod_ready(pod, &ours, add)?;
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

    #[test]
    fn a_change_of_our_key_is_retried_once_after_a_conflict() {
        for (attempt, retried) in [(1, true), (2, false), (3, false)] {
            assert_eq!(key_retries(attempt), retried, "attempt {attempt}");
        }
    }
}
