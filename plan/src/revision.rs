//! ControllerRevisions: the data and name of the revision made from the current template,
//! which existing revision it equals, the collision count, and the history limit.
//!
//! Reference: OpenKruise `pkg/controller/cloneset/revision/cloneset_revision.go` and
//! `cloneset_controller.go` (`getActiveRevisions`, `truncateHistory`), and Kubernetes'
//! `controller/history`.
//!
//! - **Data** is the strategic-merge patch `{"spec":{"template":{…,"$patch":"replace"}}}`
//!   built from the raw template (unknown fields kept, see `proto::template`).
//! - **Hash**: 32-bit FNV-1 (Go's `fnv.New32`, *not* FNV-1a) over the canonical JSON bytes
//!   of the data, followed by the decimal collision count. The reference always passes a
//!   collision count (the CloneSet's, 0 when unset), so the count is always hashed. The
//!   decimal `u32` is then "safe-encoded" byte by byte into the alphabet
//!   `bcdfghjklmnpqrstvwxz2456789`. The name is `<cloneset>-<hash>` (prefix cut at 223 bytes).
//! - **Canonical bytes**: object keys sorted, no whitespace — what Go's `json.Marshal` of a
//!   map produces for plain data. The reference hashes its *typed* encoding, which adds
//!   fields such as `metadata.creationTimestamp: null` and `resources: {}`; we do not
//!   imitate that, so a brand-new revision may get another hash than the reference would
//!   give it. What matters for a takeover is that an *existing* revision written by the
//!   reference is recognised as equal, which [`equal_data`] guarantees by comparing
//!   semantically (null, `{}` and `[]` count as absent).
//! - **Equality** → the existing revision is reused; if it is not the newest one its
//!   `revision` number is bumped to max + 1 (a rollback), see [`RevisionPlan::bump`].
//! - **Collision**: the hashed name exists but with other data → collision count + 1,
//!   rehash, until the name is free. Like the reference, the revision's hash *label*
//!   keeps the hash computed with the collision count the CloneSet had (only the name moves).
//! - **History**: revisions that are not current, not update and not named by any active
//!   pod are deleted oldest first until at most `revisionHistoryLimit` remain.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use inplace_proto::{ClaimTemplate, CloneSet, PodTemplate, keys};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::{Map, Value};

use super::model::{PodFacts, RevisionPlan, Snapshot, revision_matches};

/// The alphabet of Kubernetes' `rand.SafeEncodeString` and `rand.String` (no vowels, no
/// confusable digits, so that no words are spelled).
pub const SAFE_ALPHABET: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";

/// Longest CloneSet-name prefix of a revision name (`ControllerRevisionName`).
const MAX_PREFIX: usize = 223;

/// Most renames tried when hashed names keep colliding.
const MAX_COLLISION_TRIES: usize = 1_000;

/// Why no revision plan could be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RevisionError {
    #[error("no free ControllerRevision name after {0} hash collisions")]
    Collisions(i32),
}

/// 32-bit FNV-1 (multiply, then xor), Go's `hash/fnv.New32`. Written out here (and FNV-1a
/// 32 below) because the `fnv` crate has only the 64-bit FNV-1a.
pub fn fnv1_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, b| {
        hash.wrapping_mul(0x0100_0193) ^ u32::from(*b)
    })
}

/// 32-bit FNV-1a (xor, then multiply), Go's `hash/fnv.New32a`.
pub fn fnv1a_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, b| {
        (hash ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// Kubernetes' `rand.SafeEncodeString`: each byte `b` becomes `SAFE_ALPHABET[b % 27]`.
pub fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| char::from(SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()]))
        .collect()
}

/// Compact JSON with object keys sorted at every level, independent of serde_json's
/// `preserve_order` feature, so that hashes never depend on input key order.
pub fn canonical_json(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            out.push(b'{');
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            for (i, (key, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(&Value::String(key.clone()), out);
                out.push(b':');
                write_canonical(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(v, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar(value: &Value, out: &mut Vec<u8>) {
    // Serializing a scalar `Value` into memory cannot fail.
    out.extend(serde_json::to_vec(value).unwrap_or_default());
}

/// The revision data of `template`: `{"spec":{"template":{…,"$patch":"replace"}}}`.
pub fn revision_data(template: &PodTemplate) -> Value {
    let mut tpl = template.0.0.clone();
    tpl.insert("$patch".into(), Value::String("replace".into()));
    let mut spec = Map::new();
    spec.insert("template".into(), Value::Object(tpl));
    let mut root = Map::new();
    root.insert("spec".into(), Value::Object(spec));
    Value::Object(root)
}

/// The pod template stored in revision data (the `$patch` directive removed).
pub fn template_from_data(data: &Value) -> Option<PodTemplate> {
    let mut tpl = data.get("spec")?.get("template")?.as_object()?.clone();
    tpl.remove("$patch");
    Some(PodTemplate(inplace_proto::RawObject(tpl)))
}

/// The pod template of `revision`, if its data holds one.
pub fn template_of(revision: &ControllerRevision) -> Option<PodTemplate> {
    template_from_data(&revision.data.as_ref()?.0)
}

/// The pod template of the revision named `name`: the CloneSet's own template for the
/// update revision, otherwise the data of the matching existing revision.
pub fn template_for(
    cloneset: &CloneSet,
    revisions: &[ControllerRevision],
    update_revision: &str,
    name: &str,
) -> Option<PodTemplate> {
    if name == update_revision {
        return Some(cloneset.spec.template.clone());
    }
    revisions
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(name))
        .and_then(template_of)
}

/// `HashControllerRevision`: FNV-1 over the canonical data bytes and the decimal collision
/// count, safe-encoded.
pub fn hash_data(data: &Value, collision_count: i32) -> String {
    let mut bytes = canonical_json(data);
    bytes.extend(collision_count.to_string().bytes());
    safe_encode(&fnv1_32(&bytes).to_string())
}

pub use inplace_proto::inplace_contract::short_hash;

/// `<cloneset>-<hash>`, the prefix cut to 223 bytes (on a character boundary).
pub fn revision_name(cloneset: &str, hash: &str) -> String {
    let mut end = cloneset.len().min(MAX_PREFIX);
    while !cloneset.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-{hash}", &cloneset[..end])
}

/// The `kruise.io/cloneset-volumeclaimtemplate-hash` annotation value: FNV-1a over the
/// canonical JSON of the templates reduced to `{metadata:{name}, spec}` and sorted by name;
/// empty when there are no templates.
///
/// The reference hashes a Go debug print of its JSON, which cannot be reproduced byte for
/// byte; the value is only ever compared for equality (gate
/// `RecreatePodWhenChangeVCTInCloneSetGate`), and a revision written by the reference is
/// seen as "changed" at most once.
pub fn vct_hash(templates: &[ClaimTemplate]) -> String {
    if templates.is_empty() {
        return String::new();
    }
    let mut reduced: Vec<(String, Value)> = templates
        .iter()
        .map(|t| {
            let name = t.name().unwrap_or_default().to_owned();
            let spec = t.0.0.get("spec").cloned().unwrap_or(Value::Null);
            let mut meta = Map::new();
            meta.insert("name".into(), Value::String(name.clone()));
            let mut obj = Map::new();
            obj.insert("metadata".into(), Value::Object(meta));
            obj.insert("spec".into(), spec);
            (name, Value::Object(obj))
        })
        .collect();
    reduced.sort_by(|a, b| a.0.cmp(&b.0));
    let list = Value::Array(reduced.into_iter().map(|(_, v)| v).collect());
    fnv1a_32(&canonical_json(&list)).to_string()
}

/// Semantic equality of revision data: like the reference's byte comparison of its typed
/// encoding, in which an absent field, `null`, `{}` and `[]` all encode alike.
pub fn equal_data(a: &Value, b: &Value) -> bool {
    normalize(a) == normalize(b)
}

fn normalize(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalize(v)))
                .filter(|(_, v)| !is_empty_value(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// The controller reference every object made for the CloneSet carries.
pub fn owner_reference(cloneset: &CloneSet) -> OwnerReference {
    OwnerReference {
        api_version: format!("{}/{}", keys::GROUP, keys::VERSION),
        kind: "CloneSet".into(),
        name: cloneset.metadata.name.clone().unwrap_or_default(),
        uid: cloneset.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A ControllerRevision for the CloneSet's current template (`NewRevision`): labels =
/// template labels + hash label, annotations = CloneSet annotations + VCT hash, owned by
/// the CloneSet. The name is `<cloneset>-<hash(data, collision_count)>`.
pub fn new_revision(cloneset: &CloneSet, number: i64, collision_count: i32) -> ControllerRevision {
    let data = revision_data(&cloneset.spec.template);
    let hash = hash_data(&data, collision_count);
    let mut labels = cloneset.spec.template.labels();
    labels.insert(keys::CONTROLLER_REVISION_HASH_LABEL.into(), hash.clone());
    let mut annotations: BTreeMap<String, String> =
        cloneset.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(
        keys::VOLUME_CLAIM_TEMPLATE_HASH_ANNOTATION.into(),
        vct_hash(&cloneset.spec.volume_claim_templates),
    );
    let cs_name = cloneset.metadata.name.clone().unwrap_or_default();
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(&cs_name, &hash)),
            namespace: cloneset.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner_reference(cloneset)]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(data)),
        revision: number,
    }
}

/// History order: by `revision`, then older creation first, then name.
fn history_order(a: &ControllerRevision, b: &ControllerRevision) -> Ordering {
    let created = |r: &ControllerRevision| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
    a.revision
        .cmp(&b.revision)
        .then_with(|| created(a).cmp(&created(b)))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

fn name_of(r: &ControllerRevision) -> &str {
    r.metadata.name.as_deref().unwrap_or_default()
}

/// Decides the update and current revisions, what to create, bump and delete.
///
/// `pods` are the facts of the snapshot's pods; only active ones keep a revision alive
/// (the reference truncates history against its active pods).
pub fn plan_revisions(
    snapshot: &Snapshot<'_>,
    pods: &[PodFacts],
) -> Result<RevisionPlan, RevisionError> {
    let cloneset = snapshot.cloneset;
    let options = snapshot.options;
    let mut sorted: Vec<&ControllerRevision> = snapshot.revisions.iter().collect();
    sorted.sort_by(|a, b| history_order(a, b));
    let next_number = sorted.last().map_or(1, |r| r.revision.saturating_add(1));
    let initial_collisions = cloneset
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let mut collision_count = initial_collisions;

    let mut plan = RevisionPlan::default();
    if let Some(name) = &options.update_revision_override {
        plan.update_revision = name.clone();
    } else {
        let candidate = new_revision(cloneset, next_number, initial_collisions);
        let data = candidate
            .data
            .as_ref()
            .map(|d| &d.0)
            .unwrap_or(&Value::Null);
        let last_equal = sorted
            .iter()
            .rev()
            .find(|r| r.data.as_ref().is_some_and(|d| equal_data(&d.0, data)));
        match last_equal {
            Some(equal)
                if sorted
                    .last()
                    .is_some_and(|last| name_of(last) == name_of(equal)) =>
            {
                plan.update_revision = name_of(equal).to_owned();
            }
            Some(equal) => {
                let mut bumped = (*equal).clone();
                bumped.revision = next_number;
                let vct_key = keys::VOLUME_CLAIM_TEMPLATE_HASH_ANNOTATION;
                let wanted = vct_hash(&cloneset.spec.volume_claim_templates);
                let annotations = bumped.metadata.annotations.get_or_insert_default();
                if annotations.get(vct_key) != Some(&wanted) {
                    annotations.insert(vct_key.into(), wanted);
                }
                plan.update_revision = name_of(equal).to_owned();
                plan.bump = Some(bumped);
            }
            None => {
                let cs_name = cloneset.metadata.name.as_deref().unwrap_or_default();
                let taken = |name: &str| sorted.iter().any(|r| name_of(r) == name);
                let mut name = candidate.metadata.name.clone().unwrap_or_default();
                let mut tries = 0;
                while taken(&name) {
                    tries += 1;
                    if tries > MAX_COLLISION_TRIES {
                        return Err(RevisionError::Collisions(collision_count));
                    }
                    collision_count = collision_count.saturating_add(1);
                    name = revision_name(cs_name, &hash_data(data, collision_count));
                }
                let mut created = candidate.clone();
                created.metadata.name = Some(name.clone());
                plan.update_revision = name;
                plan.create = Some(created);
            }
        }
    }

    plan.current_revision = match &options.current_revision_override {
        Some(name) => name.clone(),
        None => cloneset
            .status
            .as_ref()
            .and_then(|s| s.current_revision.as_deref())
            .filter(|current| sorted.iter().any(|r| name_of(r) == *current))
            .map_or_else(|| plan.update_revision.clone(), str::to_owned),
    };
    plan.collision_count = collision_count;
    plan.delete = history_to_delete(
        &sorted,
        pods,
        &plan.current_revision,
        &plan.update_revision,
        cloneset.revision_history_limit(),
    );
    Ok(plan)
}

/// Non-live revisions beyond `limit`, oldest first (`truncateHistory`). A negative limit
/// counts as 0.
fn history_to_delete(
    sorted: &[&ControllerRevision],
    pods: &[PodFacts],
    current: &str,
    update: &str,
    limit: i32,
) -> Vec<String> {
    let live_labels: Vec<&str> = pods
        .iter()
        .filter(|p| p.is_active())
        .filter_map(|p| p.revision)
        .collect();
    let non_live: Vec<&str> = sorted
        .iter()
        .map(|r| name_of(r))
        .filter(|name| *name != current && *name != update)
        .filter(|name| !live_labels.iter().any(|l| revision_matches(l, name)))
        .collect();
    let limit = usize::try_from(limit.max(0)).unwrap_or(0);
    let excess = non_live.len().saturating_sub(limit);
    non_live[..excess].iter().map(|s| (*s).to_owned()).collect()
}

/// The merge patch that gives `bumped` (a [`RevisionPlan::bump`]) its new number, pinned
/// to the version of it read.
pub fn bump_patch(bumped: &ControllerRevision) -> Value {
    serde_json::json!({
        "metadata": {"resourceVersion": bumped.metadata.resource_version},
        "revision": bumped.revision,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeSet;

    use inplace_proto::{CloneSetSpec, CloneSetStatus, RawObject};
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;
    use crate::model::PlanOptions;

    fn cloneset(image: &str) -> CloneSet {
        let mut cs = CloneSet::new(
            "sample",
            CloneSetSpec {
                template: PodTemplate(
                    RawObject::from_typed(&json!({
                        "metadata": {"labels": {"app": "sample"}},
                        "spec": {"containers": [{"name": "main", "image": image}]}
                    }))
                    .unwrap(),
                ),
                ..CloneSetSpec::default()
            },
        );
        cs.metadata.namespace = Some("default".into());
        cs.metadata.uid = Some("uid-1".into());
        cs
    }

    fn existing(cs: &CloneSet, number: i64) -> ControllerRevision {
        new_revision(cs, number, 0)
    }

    fn pod_on(revision: &str) -> PodFacts<'static> {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("p-{revision}"), "labels": {"controller-revision-hash": revision}},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        // Facts borrow from their pod; a test pod may live for the whole test run.
        let cached = crate::fixtures::cached(&pod);
        PodFacts::from_pod(Box::leak(Box::new(cached)), &BTreeSet::new())
    }

    fn plan_for(
        cs: &CloneSet,
        revisions: &[ControllerRevision],
        pods: &[PodFacts],
        options: &PlanOptions,
    ) -> RevisionPlan {
        let snapshot = Snapshot {
            cloneset: cs,
            pods: &[],
            pvcs: &[],
            revisions,
            nodes: &[],
            now: Timestamp::UNIX_EPOCH,
            options,
            pods_to_delete_seen: &crate::pods_to_delete::NO_NAMES,
            pre_download: None,
        };
        plan_revisions(&snapshot, pods).unwrap()
    }

    #[test]
    fn fnv_variants_match_published_test_vectors() {
        // FNV-1 and FNV-1a 32-bit of "" and "a" (from the FNV reference test suite).
        assert_eq!(fnv1_32(b""), 0x811c_9dc5);
        assert_eq!(fnv1_32(b"a"), 0x050c_5d7e);
        assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a_32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn safe_encode_maps_each_byte_into_the_kubernetes_alphabet() {
        // '0' is 48 → 48 % 27 = 21 → '4'; '9' is 57 → 3 → 'f'.
        assert_eq!(safe_encode("09"), "4f");
        assert!(
            safe_encode("1234567890")
                .bytes()
                .all(|b| SAFE_ALPHABET.contains(&b))
        );
    }

    #[test]
    fn revision_data_is_a_replace_patch_of_the_raw_template_with_unknown_fields_kept() {
        let mut cs = cloneset("nginx:1");
        cs.spec
            .template
            .0
            .0
            .insert("futureField".into(), json!({"x": 1}));
        let data = revision_data(&cs.spec.template);
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        assert_eq!(data["spec"]["template"]["futureField"]["x"], 1);
        assert_eq!(template_from_data(&data), Some(cs.spec.template.clone()));
    }

    #[test]
    fn revision_name_is_cloneset_dash_hash_and_labels_carry_the_hash() {
        let cs = cloneset("nginx:1");
        let rev = new_revision(&cs, 1, 0);
        let name = rev.metadata.name.clone().unwrap();
        let hash = short_hash(&name);
        assert_eq!(name, format!("sample-{hash}"));
        assert!(hash.bytes().all(|b| SAFE_ALPHABET.contains(&b)));
        let labels = rev.metadata.labels.clone().unwrap();
        assert_eq!(labels["app"], "sample");
        assert_eq!(labels[keys::CONTROLLER_REVISION_HASH_LABEL], hash);
        let annotations = rev.metadata.annotations.clone().unwrap();
        assert_eq!(annotations[keys::VOLUME_CLAIM_TEMPLATE_HASH_ANNOTATION], "");
        let owner = &rev.metadata.owner_references.clone().unwrap()[0];
        assert_eq!(owner.kind, "CloneSet");
        assert_eq!(owner.controller, Some(true));
        assert_eq!(rev.revision, 1);
    }

    #[test]
    fn hash_is_independent_of_key_order_and_depends_on_template_and_collision_count() {
        let a = json!({"spec": {"template": {"a": 1, "b": [1, {"y": 2, "x": 1}]}}});
        let b: Value =
            serde_json::from_str(r#"{"spec":{"template":{"b":[1,{"x":1,"y":2}],"a":1}}}"#).unwrap();
        assert_eq!(hash_data(&a, 0), hash_data(&b, 0));
        assert_ne!(hash_data(&a, 0), hash_data(&a, 1));
        let other = json!({"spec": {"template": {"a": 2}}});
        assert_ne!(hash_data(&a, 0), hash_data(&other, 0));
        assert_eq!(
            canonical_json(&b),
            br#"{"spec":{"template":{"a":1,"b":[1,{"x":1,"y":2}]}}}"#
        );
    }

    #[test]
    fn first_revision_is_created_with_number_one_and_is_also_current() {
        let cs = cloneset("nginx:1");
        let plan = plan_for(&cs, &[], &[], &PlanOptions::default());
        let created = plan.create.clone().unwrap();
        assert_eq!(created.revision, 1);
        assert_eq!(plan.update_revision, created.metadata.name.clone().unwrap());
        assert_eq!(plan.current_revision, plan.update_revision);
        assert_eq!(plan.bump, None);
        assert_eq!(plan.collision_count, 0);
    }

    #[test]
    fn unchanged_template_reuses_the_newest_revision() {
        let cs = cloneset("nginx:1");
        let rev = existing(&cs, 3);
        let plan = plan_for(
            &cs,
            std::slice::from_ref(&rev),
            &[],
            &PlanOptions::default(),
        );
        assert_eq!(plan.update_revision, rev.metadata.name.clone().unwrap());
        assert_eq!(plan.create, None);
        assert_eq!(plan.bump, None);
    }

    #[test]
    fn rollback_to_an_older_equal_revision_bumps_its_revision_number() {
        let v1 = cloneset("nginx:1");
        let v2 = cloneset("nginx:2");
        let r1 = existing(&v1, 1);
        let r2 = existing(&v2, 2);
        let plan = plan_for(&v1, &[r1.clone(), r2], &[], &PlanOptions::default());
        assert_eq!(plan.update_revision, r1.metadata.name.clone().unwrap());
        assert_eq!(plan.create, None);
        assert_eq!(plan.bump.as_ref().map(|b| b.revision), Some(3));
        let mut bumped = plan.bump.unwrap();
        bumped.metadata.resource_version = Some("41".into());
        assert_eq!(
            bump_patch(&bumped),
            json!({"metadata": {"resourceVersion": "41"}, "revision": 3})
        );
    }

    #[test]
    fn equality_ignores_null_and_empty_fields_like_the_typed_encoding() {
        let plain = json!({"spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let typed = json!({"spec": {"template": {"metadata": {"creationTimestamp": null, "labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i", "resources": {}}]}}}});
        assert!(equal_data(&plain, &typed));
        let changed = json!({"spec": {"template": {"metadata": {"labels": {"a": "c"}}}}});
        assert!(!equal_data(&plain, &changed));
    }

    #[test]
    fn name_collision_with_other_data_increments_collision_count_and_rehashes() {
        let v1 = cloneset("nginx:1");
        let v2 = cloneset("nginx:2");
        // An impostor: v1's data under the name v2 would get.
        let mut impostor = existing(&v1, 1);
        impostor.metadata.name = new_revision(&v2, 1, 0).metadata.name;
        let plan = plan_for(
            &v2,
            std::slice::from_ref(&impostor),
            &[],
            &PlanOptions::default(),
        );
        assert_eq!(plan.collision_count, 1);
        let created = plan.create.unwrap();
        assert_ne!(created.metadata.name, impostor.metadata.name);
        assert_eq!(
            created.metadata.name.unwrap(),
            new_revision(&v2, 1, 1).metadata.name.unwrap()
        );
        assert_eq!(created.revision, 2);
    }

    #[test]
    fn current_revision_is_status_current_if_it_exists_else_the_update_revision() {
        let v1 = cloneset("nginx:1");
        let mut v2 = cloneset("nginx:2");
        let r1 = existing(&v1, 1);
        let r1_name = r1.metadata.name.clone().unwrap();
        v2.status = Some(CloneSetStatus {
            current_revision: Some(r1_name.clone()),
            ..CloneSetStatus::default()
        });
        let plan = plan_for(&v2, std::slice::from_ref(&r1), &[], &PlanOptions::default());
        assert_eq!(plan.current_revision, r1_name);
        assert_ne!(plan.update_revision, r1_name);

        v2.status = Some(CloneSetStatus {
            current_revision: Some("sample-gone".into()),
            ..CloneSetStatus::default()
        });
        let plan = plan_for(&v2, std::slice::from_ref(&r1), &[], &PlanOptions::default());
        assert_eq!(plan.current_revision, plan.update_revision);
    }

    #[test]
    fn options_override_update_and_current_revisions() {
        let cs = cloneset("nginx:1");
        let options = PlanOptions {
            update_revision_override: Some("sample-up".into()),
            current_revision_override: Some("sample-cur".into()),
            ..PlanOptions::default()
        };
        let plan = plan_for(&cs, &[], &[], &options);
        assert_eq!(plan.update_revision, "sample-up");
        assert_eq!(plan.current_revision, "sample-cur");
        assert_eq!(plan.create, None);
    }

    #[test]
    fn history_beyond_the_limit_deletes_oldest_non_live_revisions_first() {
        let mut cs = cloneset("nginx:9");
        cs.spec.revision_history_limit = Some(2);
        let olds: Vec<ControllerRevision> = (1..=5)
            .map(|i| existing(&cloneset(&format!("nginx:{i}")), i))
            .collect();
        let name = |i: usize| olds[i].metadata.name.clone().unwrap();
        // A pod still runs revision 2 (index 1), status.currentRevision is revision 1.
        cs.status = Some(CloneSetStatus {
            current_revision: Some(name(0)),
            ..CloneSetStatus::default()
        });
        let pods = vec![pod_on(&name(1))];
        let plan = plan_for(&cs, &olds, &pods, &PlanOptions::default());
        // Non-live: revisions 3, 4, 5 → keep the newest 2 → delete revision 3.
        assert_eq!(plan.delete, vec![name(2)]);
    }

    #[test]
    fn pod_labelled_with_the_short_hash_keeps_its_revision_alive() {
        let mut cs = cloneset("nginx:9");
        cs.spec.revision_history_limit = Some(0);
        let old = existing(&cloneset("nginx:1"), 1);
        let full = old.metadata.name.clone().unwrap();
        let plan = plan_for(
            &cs,
            std::slice::from_ref(&old),
            &[pod_on(short_hash(&full))],
            &PlanOptions::default(),
        );
        assert!(plan.delete.is_empty());
        let plan = plan_for(&cs, &[old], &[], &PlanOptions::default());
        assert_eq!(plan.delete, vec![full]);
    }

    #[test]
    fn vct_hash_is_empty_without_templates_and_ignores_template_order() {
        assert_eq!(vct_hash(&[]), "");
        let t = |name: &str, size: &str| {
            ClaimTemplate(
                RawObject::from_typed(&json!({
                    "metadata": {"name": name, "labels": {"x": "y"}},
                    "spec": {"resources": {"requests": {"storage": size}}}
                }))
                .unwrap(),
            )
        };
        let ab = vct_hash(&[t("a", "1Gi"), t("b", "2Gi")]);
        assert_eq!(ab, vct_hash(&[t("b", "2Gi"), t("a", "1Gi")]));
        assert_ne!(ab, vct_hash(&[t("a", "1Gi"), t("b", "3Gi")]));
    }

    #[test]
    fn long_cloneset_names_are_cut_to_223_bytes_in_revision_names() {
        let long = "x".repeat(300);
        assert_eq!(revision_name(&long, "abc").len(), 223 + 4);
    }
}
