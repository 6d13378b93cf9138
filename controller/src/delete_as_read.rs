//! Deletes decided from an object's own content, sent only on the version they were
//! decided from.
//!
//! A ContainerRecreateRequest or an ImagePullJob is deleted once its
//! `ttlSecondsAfterFinished` has passed, a decision read off the object itself: if a user
//! changed the TTL in the meantime, or a deposed leader's delete reaches the API server
//! late, the delete must not go through. The UID and resourceVersion of the version read
//! are the delete's preconditions; a conflict (409) means the object changed, and its
//! new version is reconciled anew (the watch brings it).
//!
//! OpenKruise v1.9 deletes these without preconditions; the outcome differs only when
//! the object changed between the read and the delete, where the decision is remade on
//! the new version instead of being applied to it.

use kube::Resource;
use kube::api::{DeleteParams, Preconditions};

/// Deletion only of the object with this UID: a replacement of the same name (a new pod
/// reusing an instance id, a NodeImage of a node registered again) is never deleted by a
/// decision made about its predecessor.
pub fn delete_only_uid(uid: &str) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// Background deletion of `obj`, only of its UID and resourceVersion as read.
pub fn delete_as_read<K: Resource>(obj: &K) -> DeleteParams {
    let meta = obj.meta();
    DeleteParams {
        preconditions: Some(Preconditions {
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
        }),
        ..DeleteParams::background()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{ObjectMeta, PropagationPolicy};

    #[test]
    fn the_preconditions_are_the_version_read() {
        for (uid, rv) in [
            (Some("u1"), Some("42")),
            (Some("u1"), None),
            (None, Some("42")),
            (None, None),
        ] {
            let obj = ConfigMap {
                metadata: ObjectMeta {
                    name: Some("x".into()),
                    uid: uid.map(str::to_owned),
                    resource_version: rv.map(str::to_owned),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            };
            let dp = delete_as_read(&obj);
            let pre = dp.preconditions.clone().unwrap_or_default();
            assert_eq!(pre.uid.as_deref(), uid, "{uid:?} {rv:?}");
            assert_eq!(pre.resource_version.as_deref(), rv, "{uid:?} {rv:?}");
            assert!(matches!(
                dp.propagation_policy,
                Some(PropagationPolicy::Background)
            ));
        }
    }
}
