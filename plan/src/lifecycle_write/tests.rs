#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::*;
use crate::fixtures::cloneset;

use LifecycleState::{
    Normal, PreparingDelete, PreparingNormal, PreparingUpdate, Updated, Updating,
};

fn hooked() -> CloneSet {
    cloneset(json!({"lifecycle": {"inPlaceUpdate": {
        "labelsHandler": {"example.io/block": "true"},
        "finalizersHandler": ["example.io/hold"],
        "markPodNotReady": true,
    }}}))
}

fn lifecycle(from: Option<LifecycleState>, to: LifecycleState, mark: Option<bool>) -> Action {
    Action::Lifecycle {
        pod: "demo-a".into(),
        from,
        to,
        mark_not_ready: mark,
    }
}

fn state(to: LifecycleState) -> BTreeMap<String, String> {
    BTreeMap::from([(
        keys::LIFECYCLE_STATE_LABEL.to_owned(),
        to.as_str().to_owned(),
    )])
}

/// (case, action, not-ready key, labels, finalizers)
type Case = (
    &'static str,
    Action,
    Option<NotReadyKey>,
    BTreeMap<String, String>,
    Vec<String>,
);

#[test]
fn each_transition_writes_its_state_hook_and_not_ready_key() {
    let mut hook_labels = state(PreparingUpdate);
    hook_labels.insert("example.io/block".into(), "true".into());
    let pre_update = |add| {
        Some(NotReadyKey {
            key: keys::PRE_UPDATE_HOOK_KEY,
            add,
        })
    };
    let pre_delete = |add| {
        Some(NotReadyKey {
            key: keys::PRE_DELETE_HOOK_KEY,
            add,
        })
    };
    // (case, action, not-ready key, labels, finalizers)
    let cases: Vec<Case> = vec![
        (
            "into PreparingUpdate, marked not ready",
            lifecycle(Some(Normal), PreparingUpdate, Some(true)),
            pre_update(true),
            state(PreparingUpdate),
            vec![],
        ),
        (
            "another update of an Updated pod puts the hook back",
            lifecycle(Some(Updated), PreparingUpdate, Some(true)),
            pre_update(true),
            hook_labels,
            vec!["example.io/hold".into()],
        ),
        (
            "updated, the key removed",
            lifecycle(Some(Updating), Updated, Some(false)),
            pre_update(false),
            state(Updated),
            vec![],
        ),
        (
            "into PreparingDelete: the preDelete key",
            lifecycle(Some(Normal), PreparingDelete, Some(true)),
            pre_delete(true),
            state(PreparingDelete),
            vec![],
        ),
        (
            "back from PreparingDelete: the preDelete key removed",
            lifecycle(Some(PreparingDelete), Normal, Some(false)),
            pre_delete(false),
            state(Normal),
            vec![],
        ),
        (
            "no markPodNotReady",
            lifecycle(Some(PreparingNormal), Normal, None),
            None,
            state(Normal),
            vec![],
        ),
        (
            "a pod without a state gets one",
            lifecycle(None, Normal, None),
            None,
            state(Normal),
            vec![],
        ),
        (
            "already in the state: no pod patch, the key still written",
            lifecycle(Some(PreparingDelete), PreparingDelete, Some(true)),
            pre_delete(true),
            BTreeMap::new(),
            vec![],
        ),
    ];
    let cs = hooked();
    for (case, action, not_ready, labels, finalizers) in cases {
        let want = LifecycleWrite {
            pod: "demo-a".into(),
            not_ready,
            labels,
            finalizers,
            with_completion: false,
        };
        assert_eq!(of(&cs, &action), Some(want), "{case}");
    }
    // Without the hook nothing is put back.
    let plain = cloneset(json!({}));
    let w = of(&plain, &lifecycle(Some(Updated), PreparingUpdate, None)).unwrap();
    assert_eq!((w.labels, w.finalizers), (state(PreparingUpdate), vec![]));
    // Other actions have no lifecycle write.
    assert_eq!(
        of(
            &cs,
            &Action::CompleteInPlaceUpdate {
                pod: "demo-a".into()
            }
        ),
        None
    );
}

#[test]
fn the_patch_carries_labels_timestamp_and_finalizers() {
    let cs = hooked();
    let w = of(&cs, &lifecycle(Some(Updated), PreparingUpdate, Some(true))).unwrap();
    assert_eq!(
        w.patch("2026-03-01T12:00:00Z"),
        Some(json!({"metadata": {
            "labels": {keys::LIFECYCLE_STATE_LABEL: "PreparingUpdate", "example.io/block": "true"},
            "annotations": {keys::LIFECYCLE_TIMESTAMP_ANNOTATION: "2026-03-01T12:00:00Z"},
            "finalizers": ["example.io/hold"],
        }}))
    );
    let plain = of(&cs, &lifecycle(Some(Updating), Updated, None)).unwrap();
    assert_eq!(
        plain.patch("t"),
        Some(json!({"metadata": {
            "labels": {keys::LIFECYCLE_STATE_LABEL: "Updated"},
            "annotations": {keys::LIFECYCLE_TIMESTAMP_ANNOTATION: "t"},
        }}))
    );
    let same = of(&cs, &lifecycle(Some(Normal), Normal, None)).unwrap();
    assert_eq!(same.patch("t"), None);
    // all(): one per lifecycle action, in plan order
    let actions = [
        lifecycle(Some(Updating), Updated, None),
        Action::CompleteInPlaceUpdate {
            pod: "demo-b".into(),
        },
        Action::Lifecycle {
            pod: "demo-b".into(),
            from: Some(Updating),
            to: Normal,
            mark_not_ready: None,
        },
    ];
    let pods: Vec<String> = all(&cs, &actions).into_iter().map(|w| w.pod).collect();
    assert_eq!(pods, ["demo-a", "demo-b"]);
}
