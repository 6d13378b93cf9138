//! Serde of the types: int-or-string fields, enums, full objects with status, defaults
//! of the accessors.

use inplace_proto::{
    CloneSet, CloneSetUpdateStrategy, CloneSetUpdateStrategyType, CompletionPolicyType,
    ContainerRecreateRequest, CrrFailurePolicy, CrrPhase, ImagePullJob, ImagePullPhase,
    ImagePullPolicy, LifecycleState, NodeImage,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

type Result = std::result::Result<(), Box<dyn std::error::Error>>;

#[test]
fn int_or_string_fields_keep_their_form() -> Result {
    let yaml = "partition: \"20%\"\nmaxUnavailable: 3\nmaxSurge: 50%\n";
    let s: CloneSetUpdateStrategy = serde_saphyr::from_str(yaml)?;
    assert_eq!(s.partition, Some(IntOrString::String("20%".into())));
    assert_eq!(s.max_unavailable, Some(IntOrString::Int(3)));
    assert_eq!(s.max_surge, Some(IntOrString::String("50%".into())));
    assert_eq!(
        serde_json::to_value(&s)?,
        json!({"partition": "20%", "maxUnavailable": 3, "maxSurge": "50%"})
    );
    // A quoted number stays a string (it is invalid per the CRD, but must not be
    // silently turned into a number).
    let s: CloneSetUpdateStrategy = serde_json::from_value(json!({"partition": "3"}))?;
    assert_eq!(s.partition, Some(IntOrString::String("3".into())));
    Ok(())
}

#[test]
fn enums_use_the_reference_spelling() -> Result {
    for (t, s) in [
        (CloneSetUpdateStrategyType::ReCreate, "ReCreate"),
        (
            CloneSetUpdateStrategyType::InPlaceIfPossible,
            "InPlaceIfPossible",
        ),
        (CloneSetUpdateStrategyType::InPlaceOnly, "InPlaceOnly"),
        (CloneSetUpdateStrategyType::OnDelete, "OnDelete"),
    ] {
        assert_eq!(serde_json::to_value(t)?, json!(s));
        assert_eq!(t.as_str(), s);
        assert_eq!(
            serde_json::from_value::<CloneSetUpdateStrategyType>(json!(s))?,
            t
        );
    }
    assert!(serde_json::from_value::<CloneSetUpdateStrategyType>(json!("RollingUpdate")).is_err());
    for state in LifecycleState::ALL {
        assert_eq!(serde_json::to_value(state)?, json!(state.as_str()));
        assert_eq!(LifecycleState::parse(state.as_str()), Some(state));
    }
    for (p, s) in [
        (CrrPhase::Pending, "Pending"),
        (CrrPhase::Recreating, "Recreating"),
        (CrrPhase::Succeeded, "Succeeded"),
        (CrrPhase::Failed, "Failed"),
        (CrrPhase::Completed, "Completed"),
    ] {
        assert_eq!(serde_json::to_value(p)?, json!(s));
        assert_eq!(p.as_str(), s);
    }
    for (p, s) in [
        (ImagePullPhase::Waiting, "Waiting"),
        (ImagePullPhase::Pulling, "Pulling"),
        (ImagePullPhase::Succeeded, "Succeeded"),
        (ImagePullPhase::Failed, "Failed"),
    ] {
        assert_eq!(serde_json::to_value(p)?, json!(s));
    }
    assert_eq!(
        serde_json::to_value(ImagePullPolicy::IfNotPresent)?,
        json!("IfNotPresent")
    );
    assert_eq!(
        serde_json::to_value(CompletionPolicyType::Never)?,
        json!("Never")
    );
    assert_eq!(
        serde_json::to_value(CrrFailurePolicy::Ignore)?,
        json!("Ignore")
    );
    Ok(())
}

/// Every field of a CloneSet, status included, survives JSON both ways unchanged, and so
/// do unknown fields inside the pod template.
#[test]
fn full_cloneset_with_status_round_trips() -> Result {
    let raw = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {
            "name": "sample", "namespace": "default", "generation": 2,
            "labels": {"app": "sample", "apps.kruise.io/cloneset-scaling-exclude-preparing-delete": "true"},
            "annotations": {"apps.kruise.io/image-predownload-parallelism": "10"}
        },
        "spec": {
            "replicas": 5,
            "selector": {"matchLabels": {"app": "sample"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]},
            "template": {
                "metadata": {"labels": {"app": "sample", "tier": "web"}, "annotations": {"a": "b"}},
                "spec": {
                    "containers": [{"name": "nginx", "image": "nginx:alpine", "futureField": {"x": 1},
                                    "resources": {"requests": {"cpu": "100m"}}}],
                    "restartPolicy": "Always",
                    "someNewPodField": true
                }
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data-vol"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}}],
            "scaleStrategy": {"podsToDelete": ["sample-9m4hp"], "maxUnavailable": "10%", "disablePVCReuse": true},
            "updateStrategy": {
                "type": "InPlaceIfPossible",
                "partition": "20%",
                "maxUnavailable": 2,
                "maxSurge": "10%",
                "paused": true,
                "priorityStrategy": {"weightPriority": [{"weight": 50, "matchSelector": {"matchLabels": {"test-key": "foo"}}}]},
                "scatterStrategy": [{"key": "foo", "value": "bar"}],
                "inPlaceUpdateStrategy": {"gracePeriodSeconds": 10}
            },
            "revisionHistoryLimit": 5,
            "minReadySeconds": 30,
            "lifecycle": {
                "preDelete": {"finalizersHandler": ["example.io/unready-blocker"], "markPodNotReady": true},
                "inPlaceUpdate": {"labelsHandler": {"example.io/block-unready": "true"}},
                "preNormal": {"finalizersHandler": ["example.io/unready-blocker"]}
            },
            "progressDeadlineSeconds": 600
        },
        "status": {
            "observedGeneration": 2,
            "replicas": 5,
            "readyReplicas": 5,
            "availableReplicas": 4,
            "updatedReplicas": 2,
            "updatedReadyReplicas": 2,
            "updatedAvailableReplicas": 2,
            "expectedUpdatedReplicas": 4,
            "currentRevision": "sample-d4d4fb5bd",
            "updateRevision": "sample-56dfb978d4",
            "collisionCount": 1,
            "labelSelector": "app=sample,tier in (web)",
            "conditions": [{"type": "Progressing", "status": "True", "reason": "CloneSetUpdated",
                            "message": "CloneSet is progressing",
                            "lastTransitionTime": "2026-01-02T03:04:05Z", "lastUpdateTime": "2026-01-02T03:04:06Z"}]
        }
    });
    let cs: CloneSet = serde_json::from_value(raw.clone())?;
    assert_eq!(serde_json::to_value(&cs)?, raw);
    let again: CloneSet = serde_json::from_value(serde_json::to_value(&cs)?)?;
    assert_eq!(again, cs);
    // The accessors read the typed values.
    assert_eq!(cs.replicas(), 5);
    assert_eq!(
        cs.update_type(),
        CloneSetUpdateStrategyType::InPlaceIfPossible
    );
    assert!(cs.excludes_preparing_delete());
    assert_eq!(
        cs.spec.template.labels().get("tier").map(String::as_str),
        Some("web")
    );
    let status = cs.status.as_ref().ok_or("status")?;
    assert_eq!(
        status.conditions[0].reason.as_deref(),
        Some("CloneSetUpdated")
    );
    // And the object passes the CRD's rules.
    assert!(super::cel_rules::cel_failures(super::schema("CloneSet"), &raw, None).is_empty());
    assert!(super::schema_check::violations(super::schema("CloneSet"), &raw).is_empty());
    Ok(())
}

#[test]
fn cloneset_defaults() -> Result {
    let cs: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "metadata": {"name": "x"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}}}
    }))?;
    assert_eq!(cs.replicas(), 1);
    assert_eq!(cs.update_type(), CloneSetUpdateStrategyType::ReCreate);
    assert_eq!(cs.revision_history_limit(), 10);
    assert_eq!(cs.min_ready_seconds(), 0);
    assert!(!cs.excludes_preparing_delete());
    Ok(())
}

#[test]
fn image_pull_job_round_trips_with_defaults() -> Result {
    let yaml = r#"
apiVersion: apps.kruise.io/v1beta1
kind: ImagePullJob
metadata:
  name: job-with-always
  namespace: default
spec:
  image: nginx:1.9.1
  parallelism: 10
  selector:
    names: [node-1, node-2]
  completionPolicy:
    type: Always
    activeDeadlineSeconds: 1200
    ttlSecondsAfterFinished: 300
  pullPolicy:
    backoffLimit: 3
    timeoutSeconds: 300
  pullSecrets: [regcred]
  sandboxConfig:
    labels: {io.kubernetes.image.pull: "true"}
  imagePullPolicy: Always
status:
  startTime: "2026-01-02T03:04:05Z"
  desired: 2
  active: 1
  succeeded: 0
  failed: 1
  message: "node-2: pull failed"
  failedNodes: [node-2]
"#;
    let raw: Value = serde_saphyr::from_str(yaml)?;
    let job: ImagePullJob = serde_json::from_value(raw.clone())?;
    assert!(super::lost_fields(&raw, &serde_json::to_value(&job)?, "").is_empty());
    assert_eq!(job.parallelism(), 10);
    assert_eq!(job.timeout_seconds(), 300);
    assert_eq!(job.backoff_limit(), 3);
    assert_eq!(job.completion_type(), CompletionPolicyType::Always);
    assert_eq!(job.image_pull_policy(), ImagePullPolicy::Always);
    assert!(super::cel_rules::cel_failures(super::schema("ImagePullJob"), &raw, None).is_empty());

    let bare: ImagePullJob = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
        "metadata": {"name": "j"}, "spec": {"image": "busybox", "pullPolicy": {"backoffLimit": -1}}
    }))?;
    assert_eq!(bare.parallelism(), 1);
    assert_eq!(bare.timeout_seconds(), 600);
    assert_eq!(bare.backoff_limit(), 3, "negative means the default");
    assert_eq!(bare.completion_type(), CompletionPolicyType::Always);
    assert_eq!(bare.image_pull_policy(), ImagePullPolicy::IfNotPresent);
    Ok(())
}

#[test]
fn node_image_round_trips() -> Result {
    let raw = json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "NodeImage", "metadata": {"name": "node-1"},
        "spec": {"images": {"docker.io/library/nginx": {
            "pullSecrets": [{"namespace": "kruise-daemon-config", "name": "regcred", "mode": "batch"}],
            "tags": [{"tag": "alpine", "createdAt": "2026-01-02T03:04:05Z",
                      "pullPolicy": {"timeoutSeconds": 600, "backoffLimit": 3, "ttlSecondsAfterFinished": 600, "activeDeadlineSeconds": 1200},
                      "ownerReferences": [{"apiVersion": "apps.kruise.io/v1beta1", "kind": "ImagePullJob", "name": "job", "namespace": "default", "uid": "u-1"}],
                      "version": 2, "imagePullPolicy": "IfNotPresent"}],
            "sandboxConfig": {"annotations": {"a": "b"}}
        }}},
        "status": {"desired": 1, "succeeded": 1,
                   "imageStatuses": {"docker.io/library/nginx": {"tags": [{"tag": "alpine", "phase": "Succeeded", "progress": 100,
                       "startTime": "2026-01-02T03:04:06Z", "completionTime": "2026-01-02T03:04:16Z", "version": 2,
                       "imageID": "docker.io/library/nginx@sha256:abc"}]}},
                   "firstSyncStatus": {"syncAt": "2026-01-02T03:00:00Z", "status": "Succeeded"}}
    });
    let ni: NodeImage = serde_json::from_value(raw.clone())?;
    assert_eq!(serde_json::to_value(&ni)?, raw);
    let st = ni
        .tag_status("docker.io/library/nginx", "alpine")
        .ok_or("tag status")?;
    assert!(st.phase.is_finished());
    assert_eq!(st.image_id, "docker.io/library/nginx@sha256:abc");
    assert_eq!(
        ni.tag_spec("docker.io/library/nginx", "alpine")
            .map(|t| t.version),
        Some(2)
    );
    assert!(super::schema_check::violations(super::schema("NodeImage"), &raw).is_empty());
    Ok(())
}

#[test]
fn container_recreate_request_round_trips() -> Result {
    let raw = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
        "metadata": {"name": "crr-1", "namespace": "default",
                     "labels": {"crr.apps.kruise.io/pod-uid": "u-1", "crr.apps.kruise.io/node-name": "node-1", "crr.apps.kruise.io/active": "true"},
                     "annotations": {"crr.apps.kruise.io/sync-container-statuses": "[{\"name\":\"app\",\"ready\":true,\"restartCount\":1,\"containerID\":\"containerd://abc\"}]",
                                     "crr.apps.kruise.io/unready-acquired": "2026-01-02T03:04:05Z"}},
        "spec": {
            "podName": "pod-1",
            "containers": [{"name": "app",
                            "preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 5"]}},
                            "ports": [{"name": "http", "containerPort": 80}],
                            "statusContext": {"containerID": "containerd://abc", "restartCount": 1}}],
            "strategy": {"failurePolicy": "Ignore", "orderedRecreate": true, "forceRecreate": true,
                         "terminationGracePeriodSeconds": 30, "unreadyGracePeriodSeconds": 3, "minStartedSeconds": 10},
            "activeDeadlineSeconds": 300,
            "ttlSecondsAfterFinished": 1800
        },
        "status": {"phase": "Completed", "completionTime": "2026-01-02T03:05:05Z", "message": "done",
                   "containerRecreateStates": [{"name": "app", "phase": "Succeeded", "isKilled": true}]}
    });
    let crr: ContainerRecreateRequest = serde_json::from_value(raw.clone())?;
    assert_eq!(serde_json::to_value(&crr)?, raw);
    assert!(crr.is_completed());
    assert_eq!(crr.failure_policy(), CrrFailurePolicy::Ignore);
    let synced = crr.sync_container_statuses().ok_or("annotation")??;
    assert_eq!(synced[0].container_id, "containerd://abc");
    assert!(synced[0].ready);
    assert!(
        super::schema_check::violations(super::schema("ContainerRecreateRequest"), &raw).is_empty()
    );

    let fresh: ContainerRecreateRequest = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest", "metadata": {"name": "c"},
        "spec": {"podName": "p", "containers": [{"name": "app"}]}
    }))?;
    assert_eq!(fresh.phase(), CrrPhase::Pending);
    assert_eq!(fresh.failure_policy(), CrrFailurePolicy::Fail);
    assert!(fresh.sync_container_statuses().is_none());
    Ok(())
}
