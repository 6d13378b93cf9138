//! What the CRD validation (or the reference's webhook) would reject. The plan command is a
//! what-if tool: it still computes, and prints these as warnings on stderr.

use inplace_proto::{CloneSet, CloneSetUpdateStrategyType};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::plan::diffs::{resolve_checked, scaled_value};
use crate::plan::selector::Selector;

/// Warnings about `cs`, one sentence each, naming the field.
pub fn warnings(cs: &CloneSet) -> Vec<String> {
    let mut out: Vec<String> = resolve_checked(cs)
        .1
        .into_iter()
        .map(|w| w.to_string())
        .collect();
    let replicas = cs.replicas();
    if replicas < 0 {
        out.push(format!(
            "spec.replicas: {replicas} is negative (the CRD requires >= 0); planned as 0"
        ));
    }
    let strategy = cs.spec.update_strategy.clone().unwrap_or_default();
    let replicas = replicas.max(0);
    let up = |v: &IntOrString| scaled_value(v, replicas, true).unwrap_or(0);
    let surge = strategy.max_surge.as_ref().map_or(0, up);
    let unavailable = strategy
        .max_unavailable
        .as_ref()
        .map_or_else(|| up(&IntOrString::String("20%".into())), up);
    if cs.update_type() == CloneSetUpdateStrategyType::InPlaceOnly && surge > 0 {
        out.push("spec.updateStrategy.maxSurge: must be 0 with type InPlaceOnly (the CRD rejects this CloneSet)".into());
    }
    if replicas > 0 && surge < 1 && unavailable < 1 {
        out.push("spec.updateStrategy: maxUnavailable and maxSurge may not both be below 1 (the CRD rejects this CloneSet)".into());
    }
    if let Some(p) = &strategy.partition
        && scaled_value(p, replicas, true).is_some_and(|v| v < 0)
    {
        out.push("spec.updateStrategy.partition: must not be negative; planned as 0".into());
    }
    if let Some(deadline) = cs.spec.progress_deadline_seconds
        && deadline != i32::MAX
        && deadline <= cs.min_ready_seconds()
    {
        out.push(format!(
            "spec.progressDeadlineSeconds: {deadline} must be greater than minReadySeconds {}",
            cs.min_ready_seconds()
        ));
    }
    if let Some(priority) = &strategy.priority_strategy {
        if !priority.weight_priority.is_empty() && !priority.order_priority.is_empty() {
            out.push("spec.updateStrategy.priorityStrategy: weightPriority and orderPriority are exclusive".into());
        }
        if priority
            .weight_priority
            .iter()
            .any(|w| !(0..=100).contains(&w.weight))
        {
            out.push(
                "spec.updateStrategy.priorityStrategy.weightPriority: weight must be 0 to 100"
                    .into(),
            );
        }
    }
    let terms = &strategy.scatter_strategy;
    if terms.iter().any(|t| t.key.is_empty()) {
        out.push("spec.updateStrategy.scatterStrategy: a term has an empty key".into());
    }
    for (i, t) in terms.iter().enumerate() {
        if terms[..i].contains(t) {
            out.push(format!(
                "spec.updateStrategy.scatterStrategy: term {}:{} is repeated",
                t.key, t.value
            ));
        }
    }
    match Selector::parse(&cs.spec.selector) {
        Ok(sel) if sel.is_empty() => {
            out.push("spec.selector: empty (the reference requires a non-empty selector)".into());
        }
        Ok(sel) if !sel.matches(&cs.spec.template.labels()) => out.push(format!(
            "spec.template.metadata.labels: do not match spec.selector ({sel})"
        )),
        _ => {}
    }
    let spec = cs.spec.template.0.pointer(&["spec"]);
    if let Some(policy) = spec
        .and_then(|s| s.get("restartPolicy"))
        .and_then(|v| v.as_str())
        && policy != "Always"
    {
        out.push(format!(
            "spec.template.spec.restartPolicy: {policy} (only Always is allowed)"
        ));
    }
    if spec.and_then(|s| s.get("activeDeadlineSeconds")).is_some() {
        out.push("spec.template.spec.activeDeadlineSeconds: not allowed in a CloneSet".into());
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;
    use inplace_testkit::pods::cloneset;

    #[test]
    fn a_valid_cloneset_has_no_warnings() {
        assert!(warnings(&cloneset(json!({}))).is_empty());
    }

    #[test]
    fn max_surge_with_in_place_only_is_warned_about() {
        let w = warnings(&cloneset(
            json!({"updateStrategy": {"type": "InPlaceOnly", "maxSurge": 1}}),
        ));
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("spec.updateStrategy.maxSurge"));
    }

    #[test]
    fn zero_unavailable_and_zero_surge_is_warned_about() {
        let w = warnings(&cloneset(json!({"updateStrategy": {"maxUnavailable": 0}})));
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("may not both be below 1"));
    }

    #[test]
    fn bad_percent_and_mismatched_labels_are_warned_about() {
        let w = warnings(&cloneset(json!({
            "updateStrategy": {"maxSurge": "x%"},
            "template": {"metadata": {"labels": {"app": "other"}}}
        })));
        assert_eq!(w.len(), 2, "{w:?}");
    }
}
