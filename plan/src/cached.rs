//! Compact cached forms of pods.
//!
//! Pods are the bulk of the controller's memory: 10,000 of them must fit in a few tens of
//! MiB. A `k8s_openapi` `Pod` is large even when stripped (the struct alone is ~2 KiB and
//! each `Container` another ~2 KiB, nearly all of it `None` fields), and stripping after
//! deserialisation leaves the dropped parts' freed memory interleaved with the kept parts.
//! So the stores hold these types instead, deserialised straight from the API's JSON
//! (serde skips the fields they do not name without allocating them). The planner reads
//! them as they are (`plan::PodFacts` borrow from a [`CachedPod`]; a reconcile shares the
//! store's entries, it copies none), and the act layer builds a full `Pod`
//! ([`CachedPod::to_pod`]) only for a pod it writes.
//!
//! [`CachedPod`] keeps everything the planner, the act layer and the status writer read:
//! metadata (name, namespace, uid, resourceVersion, timestamps, labels, annotations,
//! finalizers, owner references), node name, readiness gates, per container name / image /
//! resources / resize and restart policy, and the status phase, conditions, start time,
//! resize and container statuses (name, image, imageID, containerID, ready, restartCount,
//! started, state, resources). [`PodPlacement`] keeps what the ImagePullJob controller
//! reads: namespace, name, labels, deletion timestamp, node name and phase.
//!
//! Each [`CachedPod`] also carries its [`PodSummary`]: what every plan reads of its status,
//! annotations and readiness gates, worked out once here instead of on every plan.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

pub use inplace_proto::inplace_contract::ContainerView;
use k8s_openapi::api::core::v1::{
    Container, ContainerResizePolicy, ContainerState, ContainerStatus, Pod, PodCondition,
    PodReadinessGate, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::pod_summary::PodSummary;

/// A cached string. Most strings of a pod repeat across pods (label keys and values,
/// images, image IDs, node names, condition types and messages): they are interned, so
/// 10,000 pods share one copy of each.
pub type Str = Arc<str>;

/// A string map (labels, annotations): interned pairs sorted by key.
type Pairs = Box<[(Str, Str)]>;

/// The interned strings; entries nobody else holds are dropped when the set has doubled.
struct Interner {
    set: HashSet<Str>,
    prune_at: usize,
}

static INTERNER: LazyLock<Mutex<Interner>> = LazyLock::new(|| {
    Mutex::new(Interner {
        set: HashSet::new(),
        prune_at: 4096,
    })
});

/// The shared copy of `s`.
pub fn intern(s: &str) -> Str {
    let mut g = INTERNER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = g.set.get(s) {
        return found.clone();
    }
    if g.set.len() >= g.prune_at {
        g.set.retain(|a| Arc::strong_count(a) > 1);
        g.prune_at = (g.set.len() * 2).max(4096);
    }
    let a: Str = Arc::from(s);
    g.set.insert(a.clone());
    a
}

struct StrVisitor;

impl Visitor<'_> for StrVisitor {
    type Value = Str;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Str, E> {
        Ok(intern(v))
    }
}

/// An interned string (looked up before anything is allocated).
fn interned<'de, D: Deserializer<'de>>(d: D) -> Result<Str, D::Error> {
    d.deserialize_str(StrVisitor)
}

/// An optional interned string; `null` is `None`.
fn opt_interned<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Str>, D::Error> {
    #[derive(Deserialize)]
    struct Wrap(#[serde(deserialize_with = "interned")] Str);
    Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
}

/// A string map (labels, annotations) as a key-sorted slice of interned pairs; `null` and
/// absent are empty.
fn interned_map<'de, D: Deserializer<'de>>(d: D) -> Result<Pairs, D::Error> {
    struct MapVisitor;
    impl<'de> Visitor<'de> for MapVisitor {
        type Value = Pairs;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of strings")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Box::default())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Box::default())
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
            #[derive(Deserialize)]
            struct Wrap(#[serde(deserialize_with = "interned")] Str);
            let mut v: Vec<(Str, Str)> = Vec::with_capacity(m.size_hint().unwrap_or(0));
            while let Some((Wrap(k), Wrap(val))) = m.next_entry::<Wrap, Wrap>()? {
                v.push((k, val));
            }
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v.dedup_by(|later, earlier| later.0 == earlier.0);
            Ok(v.into_boxed_slice())
        }
    }
    d.deserialize_option(MapVisitor)
}

/// A list as a boxed slice; `null` and absent are empty.
fn boxed_seq<'de, D, T>(d: D) -> Result<Box<[T]>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?
        .unwrap_or_default()
        .into_boxed_slice())
}

/// `null` and absent both become the default.
fn or_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn to_map(pairs: &[(Str, Str)]) -> Option<BTreeMap<String, String>> {
    (!pairs.is_empty()).then(|| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    })
}

fn string(s: &Str) -> String {
    s.to_string()
}

/// The metadata of a cached pod: what kube's store and controller read (name, namespace,
/// uid, resourceVersion, owner references) plus the timestamps and finalizers. Labels and
/// annotations are kept interned beside it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CachedMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    #[serde(default, deserialize_with = "interned_map")]
    labels: Pairs,
    #[serde(default, deserialize_with = "interned_map")]
    annotations: Pairs,
    finalizers: Option<Vec<String>>,
    owner_references: Option<Vec<OwnerReference>>,
}

impl CachedMeta {
    fn split(self) -> (ObjectMeta, Pairs, Pairs) {
        let meta = ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            uid: self.uid,
            resource_version: self.resource_version,
            generation: self.generation,
            creation_timestamp: self.creation_timestamp,
            deletion_timestamp: self.deletion_timestamp,
            deletion_grace_period_seconds: self.deletion_grace_period_seconds,
            finalizers: self.finalizers,
            owner_references: self.owner_references,
            ..ObjectMeta::default()
        };
        (meta, self.labels, self.annotations)
    }
}

/// A pod as the CloneSet controller caches it. See the module docs for what is kept.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedPod {
    /// Name, namespace, uid, resourceVersion, timestamps, finalizers, owner references;
    /// never labels or annotations (see [`Self::labels`]).
    pub metadata: ObjectMeta,
    labels: Pairs,
    annotations: Pairs,
    spec: CachedPodSpec,
    status: Option<Box<CachedPodStatus>>,
    /// Worked out from the name, annotations, readiness gates and status when the pod is
    /// cached (a new version of the pod is a new `CachedPod`).
    summary: PodSummary,
}

impl CachedPod {
    /// The pod of these parts, with its summary.
    fn assemble(
        metadata: ObjectMeta,
        labels: Pairs,
        annotations: Pairs,
        spec: CachedPodSpec,
        status: Option<Box<CachedPodStatus>>,
    ) -> Self {
        let mut pod = Self {
            metadata,
            labels,
            annotations,
            spec,
            status,
            summary: PodSummary::default(),
        };
        pod.summary = PodSummary::of(&pod);
        pod
    }
}

impl Default for CachedPod {
    fn default() -> Self {
        Self::assemble(
            ObjectMeta::default(),
            Pairs::default(),
            Pairs::default(),
            CachedPodSpec::default(),
            None,
        )
    }
}

#[derive(Deserialize)]
struct CachedPodSerde {
    #[serde(default)]
    metadata: Option<CachedMeta>,
    #[serde(default, deserialize_with = "or_default")]
    spec: CachedPodSpec,
    #[serde(default)]
    status: Option<Box<CachedPodStatus>>,
}

impl<'de> Deserialize<'de> for CachedPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = CachedPodSerde::deserialize(d)?;
        let (metadata, labels, annotations) = match raw.metadata {
            Some(m) => m.split(),
            None => Default::default(),
        };
        Ok(Self::assemble(
            metadata,
            labels,
            annotations,
            raw.spec,
            raw.status,
        ))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CachedPodSpec {
    #[serde(default, deserialize_with = "opt_interned")]
    node_name: Option<Str>,
    #[serde(default, deserialize_with = "boxed_seq")]
    containers: Box<[CachedContainer]>,
    #[serde(default)]
    readiness_gates: Option<Box<[CachedGate]>>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CachedGate {
    #[serde(deserialize_with = "interned")]
    condition_type: Str,
}

/// A container of the pod spec, as cached.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedContainer {
    #[serde(default, deserialize_with = "interned")]
    pub name: Str,
    #[serde(default, deserialize_with = "opt_interned")]
    pub image: Option<Str>,
    pub resources: Option<ResourceRequirements>,
    pub resize_policy: Option<Vec<ContainerResizePolicy>>,
    #[serde(default, deserialize_with = "opt_interned")]
    pub restart_policy: Option<Str>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CachedPodStatus {
    #[serde(default, deserialize_with = "opt_interned")]
    phase: Option<Str>,
    #[serde(default)]
    conditions: Option<Box<[CachedCondition]>>,
    #[serde(default)]
    container_statuses: Option<Box<[CachedContainerStatus]>>,
    start_time: Option<Time>,
    #[serde(default, deserialize_with = "opt_interned")]
    resize: Option<Str>,
    #[serde(default, deserialize_with = "opt_interned")]
    reason: Option<Str>,
    #[serde(default, deserialize_with = "opt_interned")]
    message: Option<Str>,
}

/// A pod condition, as cached.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedCondition {
    #[serde(rename = "type", deserialize_with = "interned")]
    pub type_: Str,
    #[serde(deserialize_with = "interned")]
    pub status: Str,
    #[serde(default, deserialize_with = "opt_interned")]
    pub reason: Option<Str>,
    #[serde(default, deserialize_with = "opt_interned")]
    pub message: Option<Str>,
    pub last_probe_time: Option<Time>,
    pub last_transition_time: Option<Time>,
}

/// A container status, as cached.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedContainerStatus {
    #[serde(default, deserialize_with = "interned")]
    pub name: Str,
    #[serde(default, deserialize_with = "interned")]
    pub image: Str,
    #[serde(default, rename = "imageID", deserialize_with = "interned")]
    pub image_id: Str,
    #[serde(default, rename = "containerID", deserialize_with = "opt_interned")]
    pub container_id: Option<Str>,
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub restart_count: i32,
    pub started: Option<bool>,
    pub state: Option<ContainerState>,
    pub resources: Option<ResourceRequirements>,
}

/// What the planner reads of a container status, in the full (`ContainerStatus`) and the
/// cached ([`CachedContainerStatus`]) form alike; its id and image are the in-place
/// contract's [`ContainerView`], which the daemon's view of a runtime container shares.
pub trait ContainerStatusView: ContainerView {
    fn name(&self) -> &str;
    fn ready(&self) -> bool;
    fn started(&self) -> Option<bool>;
    fn state(&self) -> Option<&ContainerState>;
    fn resources(&self) -> Option<&ResourceRequirements>;
}

/// [`ContainerStatusView`] of a type whose fields are named as the API's.
macro_rules! container_status_view {
    ($t:ty) => {
        impl ContainerStatusView for $t {
            fn name(&self) -> &str {
                &self.name
            }
            fn ready(&self) -> bool {
                self.ready
            }
            fn started(&self) -> Option<bool> {
                self.started
            }
            fn state(&self) -> Option<&ContainerState> {
                self.state.as_ref()
            }
            fn resources(&self) -> Option<&ResourceRequirements> {
                self.resources.as_ref()
            }
        }
    };
}

container_status_view!(ContainerStatus);
container_status_view!(CachedContainerStatus);

inplace_proto::container_view_of_status!(CachedContainerStatus);

/// `k8s_openapi::Resource` and `Metadata` of a compact pod form: it is read from and
/// stands for `v1/Pod`, so kube can list and watch it as one.
macro_rules! pod_shaped {
    ($t:ty) => {
        impl k8s_openapi::Resource for $t {
            const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = k8s_openapi::NamespaceResourceScope;
        }

        impl k8s_openapi::Metadata for $t {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pod_shaped!(CachedPod);

/// A string map of a cached pod (labels or annotations): pairs sorted by key, each key
/// once.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StrMap<'a>(&'a [(Str, Str)]);

impl<'a> StrMap<'a> {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The pairs, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// A copy as the `BTreeMap` of a full object (None when empty).
    pub fn to_map(&self) -> Option<BTreeMap<String, String>> {
        to_map(self.0)
    }
}

impl CachedPod {
    /// The compact form of a full pod: exactly what the watch would cache had the API
    /// server sent `pod` (it goes through the same deserialiser).
    pub fn from_pod(pod: &Pod) -> Result<Self, serde_json::Error> {
        serde_json::from_value(serde_json::to_value(pod)?)
    }

    /// What the planner reads of the pod's status, annotations and readiness gates on
    /// every plan (and the hash of its name), worked out when the pod was cached.
    pub fn summary(&self) -> &PodSummary {
        &self.summary
    }

    /// The pod's labels, sorted by key (`metadata.labels` of the cached form is empty).
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels.iter().map(|(k, v)| (&**k, &**v))
    }

    /// The pod's labels as a map (`metadata.labels` of the cached form is empty).
    pub fn label_map(&self) -> StrMap<'_> {
        StrMap(&self.labels)
    }

    /// The pod's annotations (`metadata.annotations` of the cached form is empty).
    pub fn annotations(&self) -> StrMap<'_> {
        StrMap(&self.annotations)
    }

    /// The node the pod is bound to.
    pub fn node_name(&self) -> Option<&str> {
        self.spec.node_name.as_deref()
    }

    /// `spec.containers`.
    pub fn containers(&self) -> &[CachedContainer] {
        &self.spec.containers
    }

    /// The condition types of `spec.readinessGates`.
    pub fn readiness_gates(&self) -> impl Iterator<Item = &str> {
        self.spec
            .readiness_gates
            .iter()
            .flatten()
            .map(|g| &*g.condition_type)
    }

    /// `status.phase`.
    pub fn phase(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.phase.as_deref())
    }

    /// `status.conditions`.
    pub fn conditions(&self) -> &[CachedCondition] {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or(&[])
    }

    /// The condition of type `ty`.
    pub fn condition(&self, ty: &str) -> Option<&CachedCondition> {
        self.conditions().iter().find(|c| &*c.type_ == ty)
    }

    /// `status.containerStatuses`.
    pub fn container_statuses(&self) -> &[CachedContainerStatus] {
        self.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or(&[])
    }

    /// The pod as the planner and the act layer take it.
    pub fn to_pod(&self) -> Pod {
        let spec = &self.spec;
        Pod {
            metadata: ObjectMeta {
                labels: to_map(&self.labels),
                annotations: to_map(&self.annotations),
                ..self.metadata.clone()
            },
            spec: Some(PodSpec {
                node_name: spec.node_name.as_ref().map(string),
                containers: spec
                    .containers
                    .iter()
                    .map(|c| Container {
                        name: c.name.to_string(),
                        image: c.image.as_ref().map(string),
                        resources: c.resources.clone(),
                        resize_policy: c.resize_policy.clone(),
                        restart_policy: c.restart_policy.as_ref().map(string),
                        ..Container::default()
                    })
                    .collect(),
                readiness_gates: spec.readiness_gates.as_ref().map(|g| {
                    g.iter()
                        .map(|g| PodReadinessGate {
                            condition_type: g.condition_type.to_string(),
                        })
                        .collect()
                }),
                ..PodSpec::default()
            }),
            status: self.status.as_ref().map(|s| PodStatus {
                phase: s.phase.as_ref().map(string),
                conditions: s.conditions.as_ref().map(|cs| {
                    cs.iter()
                        .map(|c| PodCondition {
                            type_: c.type_.to_string(),
                            status: c.status.to_string(),
                            reason: c.reason.as_ref().map(string),
                            message: c.message.as_ref().map(string),
                            last_probe_time: c.last_probe_time.clone(),
                            last_transition_time: c.last_transition_time.clone(),
                            ..PodCondition::default()
                        })
                        .collect()
                }),
                container_statuses: s.container_statuses.as_ref().map(|cs| {
                    cs.iter()
                        .map(|c| ContainerStatus {
                            name: c.name.to_string(),
                            image: c.image.to_string(),
                            image_id: c.image_id.to_string(),
                            container_id: c.container_id.as_ref().map(string),
                            ready: c.ready,
                            restart_count: c.restart_count,
                            started: c.started,
                            state: c.state.clone(),
                            resources: c.resources.clone(),
                            ..ContainerStatus::default()
                        })
                        .collect()
                }),
                start_time: s.start_time.clone(),
                resize: s.resize.as_ref().map(string),
                reason: s.reason.as_ref().map(string),
                message: s.message.as_ref().map(string),
                ..PodStatus::default()
            }),
        }
    }
}

/// The metadata the ImagePullJob controller reads of a pod.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlacementMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<Time>,
    #[serde(default, deserialize_with = "interned_map")]
    labels: Pairs,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlacementSpec {
    #[serde(default, deserialize_with = "opt_interned")]
    node_name: Option<Str>,
}

#[derive(Default, Deserialize)]
struct PlacementStatus {
    #[serde(default, deserialize_with = "opt_interned")]
    phase: Option<Str>,
}

#[derive(Deserialize)]
struct PlacementSerde {
    #[serde(default)]
    metadata: Option<PlacementMeta>,
    #[serde(default, deserialize_with = "or_default")]
    spec: PlacementSpec,
    #[serde(default, deserialize_with = "or_default")]
    status: PlacementStatus,
}

/// A pod as the ImagePullJob controller caches it: where it runs and whether it is active.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodPlacement {
    /// Name, namespace, uid, resourceVersion, deletion timestamp; labels are beside it.
    pub metadata: ObjectMeta,
    labels: Pairs,
    node_name: Option<Str>,
    phase: Option<Str>,
}

impl<'de> Deserialize<'de> for PodPlacement {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = PlacementSerde::deserialize(d)?;
        let (metadata, labels) = match raw.metadata {
            Some(m) => (
                ObjectMeta {
                    name: m.name,
                    namespace: m.namespace,
                    uid: m.uid,
                    resource_version: m.resource_version,
                    deletion_timestamp: m.deletion_timestamp,
                    ..ObjectMeta::default()
                },
                m.labels,
            ),
            None => Default::default(),
        };
        Ok(Self {
            metadata,
            labels,
            node_name: raw.spec.node_name,
            phase: raw.status.phase,
        })
    }
}

pod_shaped!(PodPlacement);

impl PodPlacement {
    /// The node the pod is bound to.
    pub fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }

    /// The pod as the ImagePullJob planner takes it (metadata, labels, node name, phase).
    pub fn to_pod(&self) -> Pod {
        Pod {
            metadata: ObjectMeta {
                labels: to_map(&self.labels),
                ..self.metadata.clone()
            },
            spec: Some(PodSpec {
                node_name: self.node_name.as_ref().map(string),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: self.phase.as_ref().map(string),
                ..PodStatus::default()
            }),
        }
    }
}

#[cfg(test)]
mod facts_tests;
#[cfg(test)]
mod tests;
