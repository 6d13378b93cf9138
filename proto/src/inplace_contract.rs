//! The one in-place contract both binaries judge by: whether a pod is at a revision, whether
//! its update still waits for the grace period, whether a container runs the updated spec,
//! and the `pods/status` patch that completes an update.
//!
//! The controller (planner, applier, plugin) and the node daemon (in-place executor, CRR
//! executor) each see a container differently (the kubelet's pod status; the runtime's CRI
//! listing), but they must never disagree on these verdicts: an update that one side
//! judges complete and the other does not hangs. So each side only adapts its view to
//! [`ContainerView`] and calls the rules here.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::image_ref::{self, ImageRef};
use crate::{InPlaceUpdateContainerStatus, keys};

/// The hash part of a revision name or label: its last `-`-separated segment
/// (`<cloneset>-<hash>` → `<hash>`; a short hash is its own).
pub fn short_hash(revision: &str) -> &str {
    revision.rsplit('-').next().unwrap_or(revision)
}

/// Whether a pod's `controller-revision-hash` label names `revision`.
///
/// The label holds the full revision name `<cloneset>-<hash>` or, with the
/// `CloneSetShortHash` gate (or on pods written by it), only `<hash>`, while the in-place
/// state and the CloneSet's status always name the full revision. Like the reference's
/// revision adapter (`EqualToRevisionHash`), both forms are accepted by comparing the last
/// `-`-separated segments.
///
/// Equal names have equal last segments, so comparing the last segments alone decides
/// it. They are compared from the end, byte by byte, in one walk: this runs several times
/// per pod in every plan, and two different hashes differ in their first byte read.
pub fn revision_matches(label: &str, revision: &str) -> bool {
    let (mut a, mut b) = (
        label.as_bytes().iter().rev(),
        revision.as_bytes().iter().rev(),
    );
    loop {
        // None: the segment has ended (a `-` or the start of the string).
        let x = a.next().filter(|&&c| c != b'-');
        let y = b.next().filter(|&&c| c != b'-');
        match (x, y) {
            (None, None) => return true,
            (Some(x), Some(y)) if x == y => {}
            _ => return false,
        }
    }
}

/// Whether a pod with these labels is at `revision` ([`revision_matches`] on its
/// `controller-revision-hash` label; a pod without the label is at no revision).
pub fn at_revision(labels: Option<&BTreeMap<String, String>>, revision: &str) -> bool {
    labels
        .and_then(|l| l.get(keys::REVISION_LABEL))
        .is_some_and(|label| revision_matches(label, revision))
}

/// Whether `key` is one of the annotations that hold an in-place update in its grace
/// period (the spec is not patched yet).
pub fn is_grace_key(key: &str) -> bool {
    key == keys::INPLACE_UPDATE_GRACE_ANNOTATION
        || key == keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY
}

/// Whether a pod with these annotations has an in-place update waiting for its grace
/// period: the spec is not patched yet, so nothing can be complete.
pub fn grace_pending(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.is_some_and(|a| a.keys().any(|k| is_grace_key(k)))
}

/// The runtime's own id of a container from the `<runtime>://<id>` form the kubelet reports
/// (and the in-place state records); an id without a prefix is returned as it is.
pub fn runtime_id(full: &str) -> &str {
    full.rsplit_once("://").map_or(full, |(_, id)| id)
}

/// A container as one side sees it: the kubelet's status (controller) or the runtime's
/// listing (daemon).
pub trait ContainerView {
    /// The container's id, with or without the `<runtime>://` prefix; `None` or empty
    /// while there is no container.
    fn container_id(&self) -> Option<&str>;
    /// The image ID the container runs.
    fn image_id(&self) -> &str;
    /// The image name the container was reported with.
    fn image(&self) -> &str;
}

/// [`ContainerView`] of a container status type whose fields are named as the API's
/// (`containerID`, `imageID`, `image`): the kubelet's view, in full or as a cache keeps it.
#[macro_export]
macro_rules! container_view_of_status {
    ($t:ty) => {
        impl $crate::inplace_contract::ContainerView for $t {
            fn container_id(&self) -> Option<&str> {
                self.container_id.as_deref()
            }
            fn image_id(&self) -> &str {
                &self.image_id
            }
            fn image(&self) -> &str {
                &self.image
            }
        }
    };
}

container_view_of_status!(k8s_openapi::api::core::v1::ContainerStatus);

/// Whether a container recorded in `lastContainerStatuses` as `before` runs the updated
/// spec, by `now`, the container as one side sees it.
///
/// - When the id of the container that ran as the spec was patched is recorded (we record
///   it): `now` is another container. The kubelet starts a container only from the spec
///   it has, so a new id is the restart the update asked for, whatever image ID or image
///   name is reported: a new tag of the same image (a retag, same image ID) is judged like
///   any other image change. containerd reports the image name as the image's first tag,
///   which for a retag may well be the old one, so the name alone could wait forever.
/// - Otherwise (a state written by OpenKruise or before we recorded ids) the reference's
///   rule: another image ID, or the same image ID and an image equal to the spec image
///   (`:latest` appended when the spec names no tag or digest).
pub fn container_updated(
    spec_image: Option<&str>,
    before: &InPlaceUpdateContainerStatus,
    now: &impl ContainerView,
) -> bool {
    if !before.container_id.is_empty() {
        return now
            .container_id()
            .map(runtime_id)
            .is_some_and(|id| !id.is_empty() && id != runtime_id(&before.container_id));
    }
    if now.image_id() != before.image_id {
        return true;
    }
    spec_image.is_some_and(|image| same_image(image, now.image()))
}

/// Whether `now` is the very container recorded in `before` (by id), the one that ran when
/// the spec was patched.
pub fn is_recorded_container(
    before: &InPlaceUpdateContainerStatus,
    now: &impl ContainerView,
) -> bool {
    let old = runtime_id(&before.container_id);
    !old.is_empty() && now.container_id().map(runtime_id) == Some(old)
}

/// Whether the spec's image and the image a container reports name the same image. The
/// kubelet on containerd reports the fully qualified name (`docker.io/library/nginx:latest`
/// for a spec's `nginx`), so both sides are compared normalised; a reference that does not
/// parse is compared as written, `:latest` added. (OpenKruise compares repository and tag
/// without Docker Hub normalisation, so a retag of a short Docker Hub name with an
/// unchanged image ID never completes there.)
pub fn same_image(spec_image: &str, reported: &str) -> bool {
    match (ImageRef::parse(spec_image), ImageRef::parse(reported)) {
        (Ok(spec), Ok(status)) => spec.normalized() == status.normalized(),
        _ => image_with_default_tag(spec_image) == reported,
    }
}

/// `image` with `:latest` appended when it names neither a tag nor a digest. Unlike the
/// reference (which looks for any `:`), a registry port (`host:5000/app`) is not a tag.
pub fn image_with_default_tag(image: &str) -> String {
    image_ref::split(image).with_default_tag()
}

/// The one strategic merge patch of `pods/status` that completes an in-place update:
/// `InPlaceUpdateReady` True (conditions merge by `type`, so no other condition is
/// touched; the reason and message of a stall report belong to the False condition and are
/// removed), pinned to `resource_version`, the version of the pod judged complete, with
/// `metadata` (labels and annotations the same write carries) merged in.
///
/// A `pods/status` patch may write labels and annotations: the API server's status
/// strategy for pods resets only the spec, the deletion timestamp and the owner references
/// from the stored pod (v1.20 and every release since).
pub fn completion_patch(resource_version: &str, metadata: Value, now: Timestamp) -> Value {
    let mut metadata = match metadata {
        Value::Object(m) => Value::Object(m),
        _ => json!({}),
    };
    metadata["resourceVersion"] = json!(resource_version);
    json!({"metadata": metadata, "status": ready_status(now)})
}

/// The `status` part of a completion: the `InPlaceUpdateReady` condition True since
/// `now`, by itself in the conditions list (merged by `type`).
pub fn ready_status(now: Timestamp) -> Value {
    json!({"conditions": [{
        "type": keys::INPLACE_UPDATE_READY_CONDITION,
        "status": "True",
        "lastTransitionTime": now.to_string(),
        "reason": null,
        "message": null,
    }]})
}

/// The metadata a completion carries when it also moves the lifecycle state: the `labels`
/// (the lifecycle label, and any other of the same write) and the state's timestamp
/// annotation, stamped `now`.
pub fn lifecycle_metadata(labels: &BTreeMap<String, String>, now: &str) -> Value {
    json!({
        "labels": labels,
        "annotations": {keys::LIFECYCLE_TIMESTAMP_ANNOTATION: now},
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The definition: the last `-`-separated segments are equal.
    fn by_definition(label: &str, revision: &str) -> bool {
        label.rsplit('-').next() == revision.rsplit('-').next()
    }

    #[test]
    fn full_names_and_short_hashes() {
        for (label, revision, expected) in [
            ("demo-7c9d", "demo-7c9d", true),
            ("7c9d", "demo-7c9d", true),
            ("demo-7c9d", "7c9d", true),
            ("other-7c9d", "demo-7c9d", true),
            ("demo-7c9e", "demo-7c9d", false),
            ("demo-c9d", "demo-7c9d", false),
            ("demo-7c9d-", "demo-7c9d", false),
            ("", "", true),
            ("", "demo-", true),
            ("demo", "", false),
            ("a-b-c", "c", true),
        ] {
            assert_eq!(
                revision_matches(label, revision),
                expected,
                "{label:?} vs {revision:?}"
            );
            assert_eq!(by_definition(label, revision), expected);
        }
    }

    #[test]
    fn a_pod_labelled_with_the_short_hash_is_at_the_full_revision() {
        let labels = |v: &str| BTreeMap::from([(keys::REVISION_LABEL.to_owned(), v.to_owned())]);
        assert!(at_revision(Some(&labels("6fccd6cd9d")), "demo-6fccd6cd9d"));
        assert!(at_revision(
            Some(&labels("demo-6fccd6cd9d")),
            "demo-6fccd6cd9d"
        ));
        assert!(!at_revision(Some(&labels("6fccd6cd9e")), "demo-6fccd6cd9d"));
        assert!(!at_revision(None, "demo-6fccd6cd9d"));
        assert!(!at_revision(Some(&BTreeMap::new()), "demo-6fccd6cd9d"));
    }

    #[test]
    fn grace_is_either_spelling() {
        let with = |k: &str| BTreeMap::from([(k.to_owned(), "{}".to_owned())]);
        assert!(grace_pending(Some(&with(
            keys::INPLACE_UPDATE_GRACE_ANNOTATION
        ))));
        assert!(grace_pending(Some(&with(
            keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY
        ))));
        assert!(!grace_pending(Some(&with(
            keys::INPLACE_UPDATE_STATE_ANNOTATION
        ))));
        assert!(!grace_pending(None));
    }

    #[test]
    fn runtime_ids_lose_their_prefix() {
        assert_eq!(runtime_id("containerd://abc"), "abc");
        assert_eq!(runtime_id("abc"), "abc");
        assert_eq!(runtime_id(""), "");
    }

    #[test]
    fn the_completion_patch_sets_the_condition_and_carries_metadata() {
        let labels =
            BTreeMap::from([(keys::LIFECYCLE_STATE_LABEL.to_owned(), "Normal".to_owned())]);
        let patch = completion_patch(
            "42",
            lifecycle_metadata(&labels, "2026-01-01T00:00:00Z"),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(
            patch["metadata"]["labels"][keys::LIFECYCLE_STATE_LABEL],
            "Normal"
        );
        assert_eq!(
            patch["metadata"]["annotations"][keys::LIFECYCLE_TIMESTAMP_ANNOTATION],
            "2026-01-01T00:00:00Z"
        );
        let condition = &patch["status"]["conditions"][0];
        assert_eq!(condition["type"], keys::INPLACE_UPDATE_READY_CONDITION);
        assert_eq!(condition["status"], "True");
        assert_eq!(condition["reason"], Value::Null);
        let bare = completion_patch("7", Value::Null, Timestamp::UNIX_EPOCH);
        assert_eq!(bare["metadata"], json!({"resourceVersion": "7"}));
    }

    proptest! {
        #[test]
        fn agrees_with_the_definition(
            label in "[a-c-]{0,8}",
            revision in "[a-c-]{0,8}",
        ) {
            prop_assert_eq!(revision_matches(&label, &revision), by_definition(&label, &revision));
            prop_assert!(revision_matches(&label, &label));
            // The short hash of a name always matches the name.
            prop_assert!(revision_matches(short_hash(&revision), &revision));
        }
    }
}
