//! Container launch priority at start-up: the barrier env of the pods we create (what
//! OpenKruise's pod webhook injects, `pkg/webhook/pod/mutating/
//! container_launch_priority_initialization.go`; there is no webhook here, and the
//! template is ours to render).
//!
//! A pod whose containers have launch priorities ([`launch_priorities`]: the `Ordered`
//! annotation, `KRUISE_CONTAINER_PRIORITY` env, or a barrier env already in the template)
//! gets on every container the env
//! `KRUISE_CONTAINER_BARRIER` = ConfigMap `<pod>-barrier`, key `p_<priority>`. The kubelet
//! cannot start a container until its key exists in that ConfigMap, and the controller's
//! launch-priority loop (the controller's `launch_priority`) writes the keys one priority at a time,
//! the highest first, as the containers of the earlier ones become Ready.
//!
//! Like the webhook, a pod with one container, or whose containers all have the same
//! priority, gets no barrier. Unlike it, a `KRUISE_CONTAINER_PRIORITY` that is no integer
//! counts as 0 (the webhook refuses to create such a pod; [`launch_priorities`] reads it
//! the same way for in-place batches). A barrier env already in the template (copied
//! from a running pod) is replaced by one naming this pod's ConfigMap: left as it was, it
//! would wait on another pod's.

use inplace_proto::keys;
use serde_json::{Map, Value, json};

use super::container_batches::launch_priorities;

/// `<pod>-barrier`: the ConfigMap the barrier env of pod `pod` reads.
pub fn barrier_name(pod: &str) -> String {
    format!("{pod}{}", keys::CONTAINER_BARRIER_CONFIGMAP_SUFFIX)
}

/// `p_<priority>`: the ConfigMap key that releases containers of `priority`.
pub fn barrier_key(priority: i64) -> String {
    format!("p_{priority}")
}

/// The priority of every container of `template` (in order) when its pods get a
/// barrier; `None` when they get none (one container, no priorities, or all equal).
pub fn startup_priorities(template: &Map<String, Value>) -> Option<Vec<i64>> {
    let priorities = launch_priorities(template);
    let declared = priorities.iter().any(|(_, p)| p.is_some());
    let values: Vec<i64> = priorities.iter().map(|(_, p)| p.unwrap_or(0)).collect();
    let all_equal = values.windows(2).all(|w| w[0] == w[1]);
    (declared && values.len() > 1 && !all_equal).then_some(values)
}

/// The barrier env of a container of `priority` in pod `pod`.
pub fn barrier_env(pod: &str, priority: i64) -> Value {
    json!({
        "name": keys::CONTAINER_BARRIER_ENV,
        "valueFrom": {"configMapKeyRef": {"name": barrier_name(pod), "key": barrier_key(priority)}},
    })
}

/// Puts the barrier env of pod `pod` into `spec` (the pod spec rendered from
/// `template`): on every container when [`startup_priorities`] gives priorities, else
/// only where the template already carries one (re-pointed to this pod's ConfigMap).
pub fn render(template: &Map<String, Value>, spec: &mut Map<String, Value>, pod: &str) {
    let priorities = startup_priorities(template);
    let Some(containers) = spec.get_mut("containers").and_then(Value::as_array_mut) else {
        return;
    };
    let by_name = launch_priorities(template);
    for (i, container) in containers.iter_mut().enumerate() {
        let name = container.get("name").and_then(Value::as_str);
        let existing = existing_barrier(container);
        let priority = match &priorities {
            Some(values) => values.get(i).copied(),
            None => existing.and_then(|_| {
                by_name
                    .iter()
                    .find(|(n, _)| Some(n.as_str()) == name)
                    .and_then(|(_, p)| *p)
            }),
        };
        let Some(priority) = priority else { continue };
        let Some(c) = container.as_object_mut() else {
            continue;
        };
        let mut env = match c.remove("env") {
            Some(Value::Array(env)) => env,
            _ => Vec::new(),
        };
        env.retain(|e| e.get("name").and_then(Value::as_str) != Some(keys::CONTAINER_BARRIER_ENV));
        env.push(barrier_env(pod, priority));
        c.insert("env".into(), Value::Array(env));
    }
}

/// The container's `KRUISE_CONTAINER_BARRIER` env, if it has one.
fn existing_barrier(container: &Value) -> Option<&Value> {
    container
        .get("env")
        .and_then(Value::as_array)?
        .iter()
        .find(|e| e.get("name").and_then(Value::as_str) == Some(keys::CONTAINER_BARRIER_ENV))
}

#[cfg(test)]
mod tests;
