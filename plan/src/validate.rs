//! What a CloneSet must satisfy before the controller acts on it: the CEL rules of the CRD
//! (`inplace_proto::validation`), which API servers before 1.25 drop, and what the
//! reference's validating webhook refuses that no schema can express (the pod template is
//! an open object to the schema). Schema keywords (`minimum`, `enum`, list uniqueness) are
//! enforced by every API server and are not repeated here.
//!
//! [`cloneset`] lists every violation, each naming its field; the runtime reports them as a
//! `FailedScale` condition with reason [`REASON`] and a Warning event, and plans nothing
//! for the CloneSet until its spec is fixed (the checks of OpenKruise's validating webhook,
//! `pkg/webhook/cloneset/validating/validation.go`).
//!
//! `selector` immutability is a transition rule (it needs the previous object): without
//! it, the selector the controller last acted on is the one it recorded in
//! `status.labelSelector` ([`selector_change`]). A changed selector would release every
//! pod that no longer matches, and the pods and PVCs released are no longer counted,
//! updated or deleted with the CloneSet; so nothing is done until it is put back.
//!
//! Not checked here: the rest of Kubernetes' pod-template validation (the API server
//! validates each pod at creation; a refusal shows as `FailedCreate`).

use inplace_proto::validation::CLONESET_RULES;
use inplace_proto::{CloneSet, CloneSetUpdateStrategyType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use super::diffs::scaled_value;
use super::selector::Selector;

/// Reason of the condition and the event.
pub const REASON: &str = "InvalidSpec";

/// One refused field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Path of the field, e.g. `spec.template.spec.restartPolicy`.
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The message of the CRD rule `id`, so that old and new servers say the same thing.
fn rule_message(id: &str) -> String {
    CLONESET_RULES
        .iter()
        .find(|r| r.id == id)
        .map_or_else(|| id.to_owned(), |r| r.message.to_owned())
}

/// `<integer>%` with an unsigned integer (the CRD's `^[0-9]+%$`).
fn is_percent(s: &str) -> bool {
    s.strip_suffix('%')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// An int-or-string that is an integer ≥ 0 or a percent; `max_percent` bounds the percent.
fn int_or_percent_ok(value: &IntOrString, max_percent: Option<u64>) -> bool {
    match value {
        IntOrString::Int(n) => *n >= 0,
        IntOrString::String(s) => {
            is_percent(s)
                && max_percent.is_none_or(|max| {
                    s.trim_end_matches('%')
                        .parse::<u64>()
                        .is_ok_and(|p| p <= max)
                })
        }
    }
}

fn selector_violations(field: &str, selector: &LabelSelector, out: &mut Vec<Violation>) -> bool {
    match Selector::parse(selector) {
        Err(e) => {
            out.push(Violation {
                field: field.to_owned(),
                message: e.to_string(),
            });
            false
        }
        Ok(sel) if sel.is_empty() => {
            out.push(Violation {
                field: field.to_owned(),
                message: "must not be empty: set matchLabels or matchExpressions".to_owned(),
            });
            false
        }
        Ok(_) => true,
    }
}

/// Every violation of `cs`, in field order of the spec; empty when it may be acted on.
pub fn cloneset(cs: &CloneSet) -> Vec<Violation> {
    let mut out = Vec::new();
    let spec = &cs.spec;
    let replicas = cs.replicas();

    out.extend(selector_change(cs));
    // spec.selector, and the template's labels against it.
    if selector_violations("spec.selector", &spec.selector, &mut out)
        && let Ok(selector) = Selector::parse(&spec.selector)
        && let Some(requirement) = selector.first_mismatch(&spec.template.labels())
    {
        out.push(Violation {
            field: "spec.template.metadata.labels".to_owned(),
            message: format!(
                "spec.selector does not match the template's labels ({requirement} is not satisfied): pods made from the template would not belong to the CloneSet"
            ),
        });
    }

    // spec.template.spec: what the reference's webhook refuses in a CloneSet's pods.
    let pod_spec = spec.template.0.pointer(&["spec"]);
    match pod_spec.and_then(|s| s.get("restartPolicy")) {
        None | Some(Value::Null) => {}
        Some(Value::String(p)) if p == "Always" || p.is_empty() => {}
        Some(other) => out.push(Violation {
            field: "spec.template.spec.restartPolicy".to_owned(),
            message: format!(
                "{} is not allowed: a CloneSet's pods run with restartPolicy Always",
                other
                    .as_str()
                    .map_or_else(|| other.to_string(), str::to_owned)
            ),
        }),
    }
    if pod_spec
        .and_then(|s| s.get("activeDeadlineSeconds"))
        .is_some_and(|v| !v.is_null())
    {
        out.push(Violation {
            field: "spec.template.spec.activeDeadlineSeconds".to_owned(),
            message: "must not be set: a CloneSet's pods run until they are replaced".to_owned(),
        });
    }

    // spec.progressDeadlineSeconds against minReadySeconds.
    if let Some(deadline) = spec.progress_deadline_seconds
        && deadline != i32::MAX
        && deadline <= cs.min_ready_seconds()
    {
        out.push(Violation {
            field: "spec.progressDeadlineSeconds".to_owned(),
            message: rule_message("progress_deadline_exceeds_min_ready"),
        });
    }

    // spec.scaleStrategy.maxUnavailable.
    if let Some(v) = spec
        .scale_strategy
        .as_ref()
        .and_then(|s| s.max_unavailable.as_ref())
        && !int_or_percent_ok(v, None)
    {
        out.push(Violation {
            field: "spec.scaleStrategy.maxUnavailable".to_owned(),
            message: rule_message("scale_max_unavailable_int_or_percent"),
        });
    }

    // spec.updateStrategy.
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let mut formats_ok = true;
    for (field, value, max, rule) in [
        (
            "spec.updateStrategy.partition",
            &strategy.partition,
            Some(100),
            "partition_int_or_percent",
        ),
        (
            "spec.updateStrategy.maxUnavailable",
            &strategy.max_unavailable,
            None,
            "max_unavailable_int_or_percent",
        ),
        (
            "spec.updateStrategy.maxSurge",
            &strategy.max_surge,
            None,
            "max_surge_int_or_percent",
        ),
    ] {
        if let Some(v) = value
            && !int_or_percent_ok(v, max)
        {
            formats_ok = false;
            out.push(Violation {
                field: field.to_owned(),
                message: rule_message(rule),
            });
        }
    }
    if formats_ok && replicas != 0 {
        // Percents rounded up, as the reference's webhook computes them.
        let up = |v: &IntOrString| scaled_value(v, replicas.max(0), true).unwrap_or(0);
        let surge = strategy.max_surge.as_ref().map_or(0, up);
        let unavailable = strategy
            .max_unavailable
            .as_ref()
            .map_or_else(|| up(&IntOrString::String("20%".into())), up);
        if cs.update_type() == CloneSetUpdateStrategyType::InPlaceOnly && surge > 0 {
            out.push(Violation {
                field: "spec.updateStrategy.maxSurge".to_owned(),
                message: rule_message("max_surge_forbidden_with_in_place_only"),
            });
        }
        if surge < 1 && unavailable < 1 {
            out.push(Violation {
                field: "spec.updateStrategy.maxUnavailable".to_owned(),
                message: rule_message("max_unavailable_and_max_surge_not_both_zero"),
            });
        }
    }
    if let Some(priority) = &strategy.priority_strategy {
        if !priority.weight_priority.is_empty() && !priority.order_priority.is_empty() {
            out.push(Violation {
                field: "spec.updateStrategy.priorityStrategy".to_owned(),
                message: rule_message("priority_weight_or_order"),
            });
        }
        for (i, term) in priority.weight_priority.iter().enumerate() {
            selector_violations(
                &format!("spec.updateStrategy.priorityStrategy.weightPriority[{i}].matchSelector"),
                &term.match_selector,
                &mut out,
            );
        }
    }
    out
}

/// The violations as one message for the condition and the event.
/// The refused change of `spec.selector`, if the selector differs from the one recorded in
/// `status.labelSelector` (written by every reconcile that acted, ours or the
/// reference's; absent before the first). Compared as sets of requirements, so that a
/// recorded string in another order or spacing is the same selector.
pub fn selector_change(cs: &CloneSet) -> Option<Violation> {
    let recorded = cs
        .status
        .as_ref()?
        .label_selector
        .as_deref()
        .filter(|s| !s.trim().is_empty())?;
    let now = Selector::parse(&cs.spec.selector).ok()?.to_string();
    (requirement_set(recorded) != requirement_set(&now)).then(|| Violation {
        field: "spec.selector".to_owned(),
        message: format!(
            "{} (was \"{recorded}\", now \"{now}\"): changed after creation, which would release the pods that no longer match; nothing is done until the selector is put back",
            rule_message("selector_immutable")
        ),
    })
}

/// The requirements of a printed label selector (`a=b,c in (d,e),!f`), each with its
/// spaces removed: commas inside parentheses belong to a requirement's values.
fn requirement_set(printed: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let (mut depth, mut current) = (0usize, String::new());
    for c in printed.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.insert(std::mem::take(&mut current));
                continue;
            }
            c if c.is_whitespace() => continue,
            _ => {}
        }
        current.push(c);
    }
    if !current.is_empty() {
        out.insert(current);
    }
    out
}

pub fn summary(violations: &[Violation]) -> String {
    let parts: Vec<String> = violations.iter().map(ToString::to_string).collect();
    format!(
        "invalid CloneSet, nothing is done until it is fixed: {}",
        parts.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fixtures::cloneset;

    /// A selector that differs from the one recorded in the status is refused, naming the
    /// field and both selectors; the same selector printed in another order or spacing is
    /// not a change, and neither is a CloneSet that recorded none yet.
    #[test]
    fn a_selector_changed_after_creation_is_refused_until_put_back() {
        let mut cs = cloneset(json!({
            "selector": {"matchLabels": {"app": "demo"}},
            "template": {"metadata": {"labels": {"app": "demo"}}}
        }));
        assert_eq!(selector_change(&cs), None, "nothing recorded yet");
        cs.status = Some(inplace_proto::CloneSetStatus {
            label_selector: Some("app=demo".into()),
            ..Default::default()
        });
        assert_eq!(selector_change(&cs), None, "unchanged");
        cs.spec.selector =
            serde_json::from_value(json!({"matchLabels": {"app": "other"}})).unwrap_or_default();
        let refused = selector_change(&cs);
        assert_eq!(
            refused.as_ref().map(|v| v.field.as_str()),
            Some("spec.selector")
        );
        let message = refused.map(|v| v.message).unwrap_or_default();
        assert!(
            message.contains("\"app=demo\"") && message.contains("\"app=other\""),
            "{message}"
        );
        assert!(cloneset_violations_name(&cs, "spec.selector"));
        // Put back: acted on again.
        cs.spec.selector =
            serde_json::from_value(json!({"matchLabels": {"app": "demo"}})).unwrap_or_default();
        assert_eq!(selector_change(&cs), None);

        // The same requirements, recorded in another order and spacing.
        cs.spec.selector = serde_json::from_value(json!({
            "matchLabels": {"app": "demo"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]
        }))
        .unwrap_or_default();
        cs.status = Some(inplace_proto::CloneSetStatus {
            label_selector: Some("tier in (a, b), app=demo".into()),
            ..Default::default()
        });
        assert_eq!(selector_change(&cs), None);
        cs.status = Some(inplace_proto::CloneSetStatus {
            label_selector: Some("tier in (a),app=demo".into()),
            ..Default::default()
        });
        assert!(selector_change(&cs).is_some());
    }

    fn cloneset_violations_name(cs: &CloneSet, field: &str) -> bool {
        super::cloneset(cs).iter().any(|v| v.field == field)
    }

    /// `(CRD rule id, or "webhook" for what only the reference's webhook refuses; spec patch
    /// over the fixture's valid CloneSet; fields refused)`.
    fn cases() -> Vec<(&'static str, Value, Vec<&'static str>)> {
        vec![
            ("valid", json!({}), vec![]),
            ("valid", json!({"replicas": 0}), vec![]),
            // The template's pod spec.
            (
                "webhook",
                json!({"template": {"spec": {"restartPolicy": "Always"}}}),
                vec![],
            ),
            (
                "webhook",
                json!({"template": {"spec": {"restartPolicy": "OnFailure"}}}),
                vec!["spec.template.spec.restartPolicy"],
            ),
            (
                "webhook",
                json!({"template": {"spec": {"restartPolicy": "Never", "activeDeadlineSeconds": 30}}}),
                vec![
                    "spec.template.spec.restartPolicy",
                    "spec.template.spec.activeDeadlineSeconds",
                ],
            ),
            // Selector and labels.
            (
                "selector_matches_template_labels",
                json!({"selector": {"matchLabels": {"app": "other"}}}),
                vec!["spec.template.metadata.labels"],
            ),
            (
                "selector_not_empty",
                json!({"selector": {"matchLabels": null}}),
                vec!["spec.selector"],
            ),
            (
                "selector_expression_valid",
                json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}),
                vec!["spec.selector"],
            ),
            (
                "selector_expression_valid",
                json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Has", "values": ["demo"]}]}}),
                vec!["spec.selector"],
            ),
            // maxUnavailable and maxSurge both below 1, percents rounded up.
            (
                "max_unavailable_and_max_surge_not_both_zero",
                json!({"updateStrategy": {"maxUnavailable": 0}}),
                vec!["spec.updateStrategy.maxUnavailable"],
            ),
            (
                "max_unavailable_and_max_surge_not_both_zero",
                json!({"updateStrategy": {"maxUnavailable": "0%", "maxSurge": "0%"}}),
                vec!["spec.updateStrategy.maxUnavailable"],
            ),
            (
                "valid",
                json!({"updateStrategy": {"maxUnavailable": 0, "maxSurge": "1%"}}),
                vec![],
            ),
            (
                "valid",
                json!({"updateStrategy": {"maxUnavailable": "1%"}}),
                vec![],
            ),
            (
                "valid",
                json!({"replicas": 0, "updateStrategy": {"maxUnavailable": 0}}),
                vec![],
            ),
            // maxSurge with InPlaceOnly.
            (
                "max_surge_forbidden_with_in_place_only",
                json!({"updateStrategy": {"type": "InPlaceOnly", "maxSurge": 1}}),
                vec!["spec.updateStrategy.maxSurge"],
            ),
            (
                "max_surge_forbidden_with_in_place_only",
                json!({"updateStrategy": {"type": "InPlaceOnly", "maxSurge": "10%"}}),
                vec!["spec.updateStrategy.maxSurge"],
            ),
            (
                "valid",
                json!({"updateStrategy": {"type": "InPlaceOnly", "maxSurge": 0}}),
                vec![],
            ),
            (
                "valid",
                json!({"updateStrategy": {"type": "InPlaceIfPossible", "maxSurge": 1}}),
                vec![],
            ),
            // Formats (only the format is reported, not the arithmetic on top).
            (
                "partition_int_or_percent",
                json!({"updateStrategy": {"partition": "120%"}}),
                vec!["spec.updateStrategy.partition"],
            ),
            (
                "partition_int_or_percent",
                json!({"updateStrategy": {"partition": -1}}),
                vec!["spec.updateStrategy.partition"],
            ),
            (
                "valid",
                json!({"updateStrategy": {"partition": "100%"}}),
                vec![],
            ),
            (
                "max_surge_int_or_percent",
                json!({"updateStrategy": {"maxSurge": "x%", "maxUnavailable": 0}}),
                vec!["spec.updateStrategy.maxSurge"],
            ),
            (
                "max_unavailable_int_or_percent",
                json!({"updateStrategy": {"maxUnavailable": "20"}}),
                vec!["spec.updateStrategy.maxUnavailable"],
            ),
            (
                "scale_max_unavailable_int_or_percent",
                json!({"scaleStrategy": {"maxUnavailable": "1.5%"}}),
                vec!["spec.scaleStrategy.maxUnavailable"],
            ),
            // Progress deadline.
            (
                "progress_deadline_exceeds_min_ready",
                json!({"minReadySeconds": 30, "progressDeadlineSeconds": 30}),
                vec!["spec.progressDeadlineSeconds"],
            ),
            (
                "valid",
                json!({"minReadySeconds": 30, "progressDeadlineSeconds": 2147483647}),
                vec![],
            ),
            ("valid", json!({"progressDeadlineSeconds": 1}), vec![]),
            // Priority strategy.
            (
                "priority_weight_or_order",
                json!({"updateStrategy": {"priorityStrategy": {
                    "weightPriority": [{"weight": 50, "matchSelector": {"matchLabels": {"a": "b"}}}],
                    "orderPriority": [{"orderedKey": "k"}]}}}),
                vec!["spec.updateStrategy.priorityStrategy"],
            ),
            (
                "priority_selector_not_empty",
                json!({"updateStrategy": {"priorityStrategy": {
                    "weightPriority": [{"weight": 50, "matchSelector": {}}]}}}),
                vec!["spec.updateStrategy.priorityStrategy.weightPriority[0].matchSelector"],
            ),
            (
                "priority_selector_expression_valid",
                json!({"updateStrategy": {"priorityStrategy": {
                    "weightPriority": [{"weight": 50, "matchSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}}]}}}),
                vec!["spec.updateStrategy.priorityStrategy.weightPriority[0].matchSelector"],
            ),
        ]
    }

    #[test]
    fn table_of_specs() {
        for (rule, patch, want) in cases() {
            let cs = cloneset(patch.clone());
            let got: Vec<String> = super::cloneset(&cs).into_iter().map(|v| v.field).collect();
            assert_eq!(got, want, "{rule}: {patch}");
        }
    }

    /// Every CEL rule of the CRD has a refused case above, except the transition rule
    /// (it needs the previous object).
    #[test]
    fn every_crd_rule_has_a_refused_case() {
        let covered: Vec<&str> = cases()
            .into_iter()
            .filter(|(_, _, fields)| !fields.is_empty())
            .map(|(rule, _, _)| rule)
            .collect();
        for rule in CLONESET_RULES {
            assert!(
                rule.id == "selector_immutable" || covered.contains(&rule.id),
                "CRD rule {} has no refused case in plan::validate",
                rule.id
            );
        }
    }

    #[test]
    fn messages_are_the_crd_rules_messages_and_the_summary_names_each_field() {
        let cs = cloneset(json!({"updateStrategy": {"maxUnavailable": 0},
                                 "template": {"spec": {"restartPolicy": "OnFailure"}}}));
        let v = super::cloneset(&cs);
        assert_eq!(
            v[1].message,
            "maxUnavailable and maxSurge must not both be 0 (percentages round up) when replicas > 0"
        );
        let s = summary(&v);
        assert!(
            s.contains("spec.template.spec.restartPolicy: OnFailure is not allowed"),
            "{s}"
        );
        assert!(
            s.contains("spec.updateStrategy.maxUnavailable: maxUnavailable and maxSurge"),
            "{s}"
        );
    }
}
