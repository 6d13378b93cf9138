//! `kubectl inplace get` without a name: one row per CloneSet (of the namespace, or of every
//! namespace with `-A`, filtered by `-l` on the server), with kubectl's columns for the kind
//! and why its rollout waits ([`super::waiting`]). Pure functions over objects already read.

use inplace_proto::CloneSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::waiting::{Waiting, reasons};

/// One CloneSet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub namespace: String,
    pub name: String,
    /// `spec.replicas`.
    pub desired: i32,
    pub updated: i32,
    pub updated_ready: i32,
    pub ready: i32,
    /// `status.replicas`.
    pub total: i32,
    pub paused: bool,
    pub waiting: Vec<Waiting>,
}

/// The rows of `clonesets` (by namespace, then name), each with the reasons its rollout
/// waits from `pods` (pods of any namespace; each CloneSet takes those it controls).
pub fn rows(clonesets: &[CloneSet], pods: &[Pod], now: Timestamp) -> Vec<Row> {
    let mut rows: Vec<Row> = clonesets
        .iter()
        .map(|cs| {
            let status = cs.status.clone().unwrap_or_default();
            let namespace = cs.metadata.namespace.clone().unwrap_or_default();
            let same_namespace: Vec<Pod> = pods
                .iter()
                .filter(|p| p.metadata.namespace.as_deref().unwrap_or_default() == namespace)
                .cloned()
                .collect();
            Row {
                name: cs.metadata.name.clone().unwrap_or_default(),
                desired: cs.replicas(),
                updated: status.updated_replicas,
                updated_ready: status.updated_ready_replicas,
                ready: status.ready_replicas,
                total: status.replicas,
                paused: cs.spec.update_strategy.as_ref().is_some_and(|s| s.paused),
                waiting: reasons(cs, &same_namespace, now),
                namespace,
            }
        })
        .collect();
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    rows
}

/// The rows in words (a NAMESPACE column with `all_namespaces`, as kubectl's `-A`);
/// `No resources found ...` like kubectl when there are none.
pub fn table(rows: &[Row], all_namespaces: bool, namespace: &str) -> String {
    if rows.is_empty() {
        return if all_namespaces {
            "No resources found\n".to_owned()
        } else {
            format!("No resources found in {namespace} namespace.\n")
        };
    }
    let mut head = vec![
        "NAME",
        "DESIRED",
        "UPDATED",
        "UPDATED_READY",
        "READY",
        "TOTAL",
        "WAITING",
    ];
    if all_namespaces {
        head.insert(0, "NAMESPACE");
    }
    let mut cells = vec![head.into_iter().map(str::to_owned).collect::<Vec<_>>()];
    for r in rows {
        let waiting = if r.waiting.is_empty() {
            "-".to_owned()
        } else {
            r.waiting
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        };
        let mut row = vec![
            r.name.clone(),
            r.desired.to_string(),
            r.updated.to_string(),
            r.updated_ready.to_string(),
            r.ready.to_string(),
            r.total.to_string(),
            waiting,
        ];
        if all_namespaces {
            row.insert(0, r.namespace.clone());
        }
        cells.push(row);
    }
    super::view::columns(&cells)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;

    fn cloneset(ns: &str, name: &str, paused: bool, updated: i32) -> CloneSet {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}"),
                "generation": 1},
            "spec": {"replicas": 2, "selector": {}, "template": {},
                "updateStrategy": {"paused": paused}},
            "status": {"observedGeneration": 1, "replicas": 2, "readyReplicas": 2,
                "updatedReplicas": updated, "updatedReadyReplicas": updated}
        }))
        .unwrap()
    }

    fn now() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn one_row_per_cloneset_sorted_with_reasons() {
        let sets = [
            cloneset("b", "web", false, 2),
            cloneset("a", "web", true, 0),
        ];
        let rows = rows(&sets, &[], now());
        assert_eq!(rows[0].namespace, "a");
        assert_eq!(rows[0].waiting, [Waiting::Paused { left: 2 }], "{rows:?}");
        assert!(rows[1].waiting.is_empty(), "{rows:?}");
        assert_eq!(
            table(&rows, true, ""),
            "NAMESPACE  NAME  DESIRED  UPDATED  UPDATED_READY  READY  TOTAL  WAITING\n\
             a          web   2        0        0              2      2      paused: 2 pod(s) left to update (kubectl inplace rollout resume)\n\
             b          web   2        2        2              2      2      -\n"
        );
        assert_eq!(
            table(&rows[1..], false, "b"),
            "NAME  DESIRED  UPDATED  UPDATED_READY  READY  TOTAL  WAITING\n\
             web   2        2        2              2      2      -\n"
        );
    }

    #[test]
    fn no_clonesets_is_said_like_kubectl() {
        assert_eq!(
            table(&[], false, "dev"),
            "No resources found in dev namespace.\n"
        );
        assert_eq!(table(&[], true, "dev"), "No resources found\n");
    }

    #[test]
    fn pods_count_only_for_clonesets_of_their_namespace() {
        let sets = [cloneset("a", "web", false, 0)];
        // A pod of another namespace that names the same owner uid is not taken.
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-x", "namespace": "b", "ownerReferences": [{
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web",
                "uid": "a-web", "controller": true}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "reason": "Unschedulable"}]}
        }))
        .unwrap();
        assert!(rows(&sets, &[pod], now())[0].waiting.is_empty());
    }
}
