//! Test fixtures of the update side (lifecycle, inplace, update, status): pods and
//! CloneSets built from JSON, and a [`Fixture`] that owns a snapshot and lends a
//! [`PlanContext`].
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use inplace_proto::{CloneSet, keys};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::model::{PlanContext, PlanOptions, PodFacts, Resolved, Snapshot};
use crate::watch::CachedPod;

/// The fixtures' epoch: every time is `t(seconds after it)`.
pub fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + secs).unwrap()
}

fn rfc3339(ts: Timestamp) -> String {
    ts.to_string()
}

/// A pod built step by step as JSON.
#[derive(Clone, Debug)]
pub struct PodBuilder(Value);

/// A scheduled, Running, Ready pod of revision `rev` (label value = full revision name),
/// created at t(0) and ready since t(0), lifecycle Normal, one container `main`.
pub fn pod(name: &str, rev: &str) -> PodBuilder {
    PodBuilder(json!({
        "metadata": {
            "name": name,
            "uid": format!("uid-{name}"),
            "creationTimestamp": rfc3339(t(0)),
            "labels": {
                keys::REVISION_LABEL: rev,
                keys::POD_TEMPLATE_HASH_LABEL: rev.rsplit('-').next().unwrap_or(rev),
                keys::LIFECYCLE_STATE_LABEL: "Normal",
                keys::INSTANCE_ID_LABEL: name.rsplit('-').next().unwrap_or(name),
            },
            "annotations": {},
        },
        "spec": {
            "nodeName": "node-1",
            "containers": [{"name": "main", "image": "nginx:1"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(t(0))}],
            "containerStatuses": [{
                "name": "main", "image": "nginx:1", "imageID": "sha-1",
                "containerID": "containerd://main-1", "started": true,
                "state": {"running": {"startedAt": rfc3339(t(0))}},
                "ready": true, "restartCount": 0,
            }],
        },
    }))
}

impl PodBuilder {
    fn meta(&mut self, field: &str) -> &mut serde_json::Map<String, Value> {
        let meta = self.0["metadata"].as_object_mut().unwrap();
        meta.entry(field)
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .unwrap()
    }

    pub fn without_label(mut self, k: &str) -> Self {
        self.meta("labels").remove(k);
        self
    }

    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.meta("labels").insert(k.into(), json!(v));
        self
    }

    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.meta("annotations").insert(k.into(), json!(v));
        self
    }

    pub fn lifecycle(self, state: &str) -> Self {
        self.label(keys::LIFECYCLE_STATE_LABEL, state)
    }

    pub fn no_lifecycle(mut self) -> Self {
        self.meta("labels").remove(keys::LIFECYCLE_STATE_LABEL);
        self
    }

    pub fn finalizer(mut self, f: &str) -> Self {
        let meta = self.0["metadata"].as_object_mut().unwrap();
        let list = meta.entry("finalizers").or_insert_with(|| json!([]));
        list.as_array_mut().unwrap().push(json!(f));
        self
    }

    pub fn unscheduled(mut self) -> Self {
        self.0["spec"].as_object_mut().unwrap().remove("nodeName");
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.0["status"]["phase"] = json!(phase);
        self
    }

    fn set_condition(&mut self, ty: &str, status: &str, since: Timestamp) {
        let conds = self.0["status"]["conditions"].as_array_mut().unwrap();
        conds.retain(|c| c["type"] != ty);
        conds.push(json!({"type": ty, "status": status, "lastTransitionTime": rfc3339(since)}));
    }

    pub fn not_ready(mut self) -> Self {
        self.set_condition("Ready", "False", t(0));
        self
    }

    pub fn ready_since(mut self, since: Timestamp) -> Self {
        self.set_condition("Ready", "True", since);
        self
    }

    pub fn in_place_ready(mut self, ready: bool) -> Self {
        let status = if ready { "True" } else { "False" };
        self.set_condition(keys::INPLACE_UPDATE_READY_CONDITION, status, t(0));
        self
    }

    pub fn created(mut self, at: Timestamp) -> Self {
        self.0["metadata"]["creationTimestamp"] = json!(rfc3339(at));
        self
    }

    pub fn terminating(mut self) -> Self {
        self.0["metadata"]["deletionTimestamp"] = json!(rfc3339(t(0)));
        self
    }

    pub fn restarts(mut self, n: i32) -> Self {
        self.0["status"]["containerStatuses"][0]["restartCount"] = json!(n);
        self
    }

    /// Spec image of container `main`.
    pub fn spec_image(mut self, image: &str) -> Self {
        self.0["spec"]["containers"][0]["image"] = json!(image);
        self
    }

    /// Status image and imageID of container `main`.
    pub fn status_image(mut self, image: &str, image_id: &str) -> Self {
        self.0["status"]["containerStatuses"][0]["image"] = json!(image);
        self.0["status"]["containerStatuses"][0]["imageID"] = json!(image_id);
        self
    }

    /// Status `containerID` of container `main`.
    pub fn container_id(mut self, id: &str) -> Self {
        self.0["status"]["containerStatuses"][0]["containerID"] = json!(id);
        self
    }

    pub fn in_place_state(self, state: &Value) -> Self {
        self.annotation(keys::INPLACE_UPDATE_STATE_ANNOTATION, &state.to_string())
    }

    pub fn grace(self, grace: &Value) -> Self {
        self.annotation(keys::INPLACE_UPDATE_GRACE_ANNOTATION, &grace.to_string())
    }

    pub fn raw(mut self, f: impl FnOnce(&mut Value)) -> Self {
        f(&mut self.0);
        self
    }

    pub fn build(self) -> Pod {
        serde_json::from_value(self.0).unwrap()
    }

    /// The built pod in the cached form the planner reads.
    pub fn cached(self) -> Arc<CachedPod> {
        cached(&self.build())
    }

    /// The facts of the built pod, which is leaked so that the facts (which borrow from
    /// it) can outlive this call: a few test pods for the whole test run.
    pub fn facts(self) -> PodFacts<'static> {
        PodFacts::from_pod(Box::leak(Box::new(self.cached())), &BTreeSet::new())
    }
}

/// `pod` in the cached form the planner reads (as the watch would cache it).
pub fn cached(pod: &Pod) -> Arc<CachedPod> {
    Arc::new(CachedPod::from_pod(pod).expect("a pod converts to its cached form"))
}

/// The facts of `pods` as a plan reads them (none in `podsToDelete`): what the writers
/// find the pods their actions name in.
pub fn facts_of(pods: &[Arc<CachedPod>]) -> Vec<PodFacts<'_>> {
    pods.iter()
        .map(|p| PodFacts::from_pod(p, &BTreeSet::new()))
        .collect()
}

/// A CloneSet `demo` from a JSON `spec` merged over a minimal valid one.
pub fn cloneset(spec: Value) -> CloneSet {
    let mut base = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": "demo", "namespace": "default", "uid": "cs-uid", "generation": 3},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "demo"}},
            "template": {
                "metadata": {"labels": {"app": "demo"}},
                "spec": {"containers": [{"name": "main", "image": "nginx:2"}]},
            },
        },
    });
    merge(&mut base["spec"], spec);
    serde_json::from_value(base).unwrap()
}

/// JSON merge (objects merged key by key, anything else replaced).
pub fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// A ControllerRevision `name` holding `template` the way the reference stores it.
pub fn revision(name: &str, template: Value) -> ControllerRevision {
    let mut template = template;
    template["$patch"] = json!("replace");
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "revision": 1,
        "data": {"spec": {"template": template}},
    }))
    .unwrap()
}

/// Owns everything a [`PlanContext`] borrows.
#[derive(Debug)]
pub struct Fixture {
    pub cloneset: CloneSet,
    pub pods: Vec<Arc<CachedPod>>,
    pub revisions: Vec<ControllerRevision>,
    pub options: PlanOptions,
    pub now: Timestamp,
    pub update_revision: String,
    pub current_revision: String,
    pub resolved: Resolved,
}

impl Fixture {
    /// Update revision `demo-new`, current `demo-old`, now = t(1000).
    pub fn new(cloneset: CloneSet, pods: Vec<PodBuilder>) -> Self {
        let replicas = cloneset.replicas();
        Self {
            cloneset,
            pods: pods.into_iter().map(PodBuilder::cached).collect(),
            revisions: Vec::new(),
            options: PlanOptions::default(),
            now: t(1000),
            update_revision: "demo-new".to_owned(),
            current_revision: "demo-old".to_owned(),
            resolved: Resolved {
                replicas,
                max_unavailable: 1,
                scale_max_unavailable: i32::MAX,
                ..Resolved::default()
            },
        }
    }

    /// The planner's input: the CloneSet, pods, revisions and options, at `now`.
    pub fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            cloneset: &self.cloneset,
            pods: &self.pods,
            pvcs: &[],
            revisions: &self.revisions,
            nodes: &[],
            now: self.now,
            options: &self.options,
            pods_to_delete_seen: &crate::plan::pods_to_delete::NO_NAMES,
        }
    }

    pub fn ctx(&self) -> PlanContext<'_> {
        let pods_to_delete: BTreeSet<&str> = self
            .cloneset
            .spec
            .scale_strategy
            .iter()
            .flat_map(|s| s.pods_to_delete.iter().map(String::as_str))
            .collect();
        PlanContext {
            snapshot: self.snapshot(),
            pods: self
                .pods
                .iter()
                .map(|p| PodFacts::from_pod(p, &pods_to_delete))
                .collect(),
            update_revision: self.update_revision.clone(),
            current_revision: self.current_revision.clone(),
            resolved: self.resolved,
        }
    }
}
