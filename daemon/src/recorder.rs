//! Kubernetes Events the daemon records (`events.k8s.io/v1`, reporter `inplace-daemon`,
//! the node's name as the instance):
//!
//! - on the pod, a container it stopped so that the kubelet restarts it in place
//!   (`ContainerRestarted`: the container's env reads metadata that changed);
//! - on the pod, the outcome of a ContainerRecreateRequest (`ContainerRecreateSucceeded`,
//!   or the Warning `ContainerRecreateFailed`), with the request as the related object;
//! - on the pod, a preStop hook that failed before a container was stopped for a request
//!   (the Warning `FailedPreStopHook`, as the kubelet's; the container is stopped all the
//!   same);
//! - on the node's NodeImage, an image pull that failed (the Warning `PullImageFailed`):
//!   a pre-download pull belongs to no pod, so the event goes where OpenKruise's daemon
//!   puts it.
//!
//! What an event says is decided by the pure `*_note` functions; publishing goes through
//! a bounded queue to one task, so it never blocks or fails the work it reports (a full
//! queue drops the event with a log line). Events are published with kube's
//! [`Recorder`], which folds repeats of one event into a series.

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Resource as _;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

use crate::api::{ContainerRecreateRequest, ContainerRecreateRequestStatus, CrrPhase, NodeImage};

/// The reporting controller of every event.
pub const REPORTER: &str = "inplace-daemon";
/// Reason of a container the daemon stopped for the kubelet to restart.
pub const REASON_RESTARTED: &str = "ContainerRestarted";
/// Reason of a ContainerRecreateRequest that completed with every container recreated.
pub const REASON_CRR_SUCCEEDED: &str = "ContainerRecreateSucceeded";
/// Reason of a ContainerRecreateRequest that completed with a container not recreated.
pub const REASON_CRR_FAILED: &str = "ContainerRecreateFailed";
/// Reason of a preStop hook that failed before its container was stopped for a request:
/// the kubelet's own reason, which OpenKruise's daemon records through the kubelet's code.
pub const REASON_PRE_STOP_FAILED: &str = "FailedPreStopHook";
/// Reason of a failed image pull.
pub const REASON_PULL_FAILED: &str = "PullImageFailed";

/// Events queued and not yet published, at most.
const QUEUE: usize = 256;
/// Longest note (the API server refuses notes over 1 kB).
const MAX_NOTE: usize = 1000;

/// One event to publish.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    pub regarding: ObjectReference,
    pub related: Option<ObjectReference>,
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub message: String,
}

/// A handle that queues events; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct EventRecorder {
    tx: Option<mpsc::Sender<Note>>,
}

impl EventRecorder {
    /// A recorder that drops everything (tests, benchmarks).
    pub fn disabled() -> Self {
        Self::default()
    }

    /// Starts the publishing task; `node` is the reporting instance.
    pub fn start(client: kube::Client, node: &str) -> Self {
        let (tx, mut rx) = mpsc::channel::<Note>(QUEUE);
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: REPORTER.into(),
                instance: Some(node.to_owned()),
            },
        );
        tokio::spawn(async move {
            while let Some(note) = rx.recv().await {
                let event = Event {
                    type_: if note.warning {
                        EventType::Warning
                    } else {
                        EventType::Normal
                    },
                    reason: note.reason.into(),
                    note: Some(truncate(&note.message, MAX_NOTE)),
                    action: note.action.into(),
                    secondary: note.related.clone(),
                };
                if let Err(err) = recorder.publish(&event, &note.regarding).await {
                    tracing::warn!(%err, reason = note.reason, "could not publish event");
                }
            }
        });
        Self { tx: Some(tx) }
    }

    /// Queues `note`; never waits.
    pub fn record(&self, note: Note) {
        let Some(tx) = &self.tx else {
            return;
        };
        if let Err(e) = tx.try_send(note) {
            tracing::warn!(error = %e, "event queue full or closed; event dropped");
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// The container `container` (runtime id `id`) of `pod` was stopped for the kubelet to
/// restart it in place, because `why`, for `revision`.
pub fn restart_note(pod: &Pod, container: &str, id: &str, why: &str, revision: &str) -> Note {
    let short: String = id.chars().take(12).collect();
    Note {
        regarding: pod.object_ref(&()),
        related: None,
        warning: false,
        reason: REASON_RESTARTED,
        action: "Restart",
        message: format!(
            "Stopped container {container} ({short}) so that the kubelet restarts it in place: \
             {why} (revision {revision})"
        ),
    }
}

/// The event of a request whose status moves from `before` to `after`: only when it
/// becomes Completed, on its pod `pod`.
pub fn crr_outcome_note(
    crr: &ContainerRecreateRequest,
    pod: &Pod,
    before: Option<&ContainerRecreateRequestStatus>,
    after: &ContainerRecreateRequestStatus,
) -> Option<Note> {
    if after.phase != CrrPhase::Completed || before.map(|s| s.phase) == Some(CrrPhase::Completed) {
        return None;
    }
    let name = crr.metadata.name.as_deref().unwrap_or_default();
    let names = |phase: CrrPhase| {
        after
            .container_recreate_states
            .iter()
            .filter(|c| c.phase == phase)
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
    };
    let (succeeded, failed) = (names(CrrPhase::Succeeded), names(CrrPhase::Failed));
    // Neither: ended before any container was handled (deadline, pod gone).
    let warning = !failed.is_empty() || succeeded.is_empty();
    let mut message = if warning {
        format!("ContainerRecreateRequest {name} completed without recreating")
    } else {
        format!("ContainerRecreateRequest {name} recreated")
    };
    if !succeeded.is_empty() {
        message.push_str(&format!(
            "{} {}",
            if warning { "; recreated" } else { "" },
            succeeded.join(", ")
        ));
    }
    if !failed.is_empty() {
        message.push_str(&format!(" {}", failed.join(", ")));
    }
    if !after.message.is_empty() {
        message.push_str(&format!(": {}", after.message));
    }
    for c in after
        .container_recreate_states
        .iter()
        .filter(|c| c.phase == CrrPhase::Failed && !c.message.is_empty())
    {
        message.push_str(&format!(" ({}: {})", c.name, c.message));
    }
    Some(Note {
        regarding: pod.object_ref(&()),
        related: Some(crr.object_ref(&())),
        warning,
        reason: if warning {
            REASON_CRR_FAILED
        } else {
            REASON_CRR_SUCCEEDED
        },
        action: "Recreate",
        message,
    })
}

/// The preStop hook of `container` of `pod` failed with `message` before the container was
/// stopped for the request `crr`, which stops it all the same.
pub fn pre_stop_failed_note(
    crr: &ContainerRecreateRequest,
    pod: &Pod,
    container: &str,
    message: &str,
) -> Note {
    let name = crr.metadata.name.as_deref().unwrap_or_default();
    Note {
        regarding: pod.object_ref(&()),
        related: Some(crr.object_ref(&())),
        warning: true,
        reason: REASON_PRE_STOP_FAILED,
        action: "Kill",
        message: format!(
            "preStop hook of container {container} failed, stopping it for \
             ContainerRecreateRequest {name} all the same: {message}"
        ),
    }
}

/// A pull of `image` on `node` failed with `message`: on the node's NodeImage.
pub fn pull_failed_note(node: &str, image: &str, message: &str) -> Note {
    Note {
        regarding: ObjectReference {
            api_version: Some(NodeImage::api_version(&()).into_owned()),
            kind: Some(NodeImage::kind(&()).into_owned()),
            name: Some(node.to_owned()),
            ..ObjectReference::default()
        },
        related: None,
        warning: true,
        reason: REASON_PULL_FAILED,
        action: "Pull",
        message: format!("Failed to pull image {image}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ContainerRecreateRequestContainerRecreateState as State;

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web-0".into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("u1".into());
        p
    }

    fn crr() -> ContainerRecreateRequest {
        let mut c = ContainerRecreateRequest::new("restart-1", Default::default());
        c.metadata.namespace = Some("ns".into());
        c
    }

    fn status(
        phase: CrrPhase,
        states: &[(&str, CrrPhase, &str)],
        msg: &str,
    ) -> ContainerRecreateRequestStatus {
        ContainerRecreateRequestStatus {
            phase,
            message: msg.into(),
            container_recreate_states: states
                .iter()
                .map(|(n, p, m)| State {
                    name: (*n).into(),
                    phase: *p,
                    message: (*m).into(),
                    is_killed: false,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_restart_is_a_normal_event_on_the_pod() {
        let n = restart_note(
            &pod(),
            "app",
            "0123456789abcdef0123",
            "a restart was requested",
            "rev-2",
        );
        assert_eq!(n.regarding.kind.as_deref(), Some("Pod"));
        assert_eq!(n.regarding.name.as_deref(), Some("web-0"));
        assert_eq!(n.regarding.namespace.as_deref(), Some("ns"));
        assert_eq!(n.regarding.uid.as_deref(), Some("u1"));
        assert!(!n.warning);
        assert_eq!(n.reason, REASON_RESTARTED);
        assert!(
            n.message.contains("container app (0123456789ab)"),
            "{}",
            n.message
        );
        assert!(n.message.contains("rev-2"), "{}", n.message);
        assert!(
            n.message.contains("a restart was requested"),
            "{}",
            n.message
        );
    }

    #[test]
    fn a_failed_pre_stop_hook_is_a_warning_on_the_pod_naming_the_request() {
        let n = pre_stop_failed_note(&crr(), &pod(), "app", "preStop exec exited 3: no");
        assert_eq!(n.regarding.kind.as_deref(), Some("Pod"));
        assert_eq!(n.regarding.name.as_deref(), Some("web-0"));
        assert_eq!(
            n.related.as_ref().and_then(|r| r.name.as_deref()),
            Some("restart-1")
        );
        assert!(n.warning);
        assert_eq!(n.reason, "FailedPreStopHook");
        assert_eq!(
            n.message,
            "preStop hook of container app failed, stopping it for ContainerRecreateRequest \
             restart-1 all the same: preStop exec exited 3: no"
        );
    }

    /// (status before, status after, the event: (warning, reason, parts of the message)).
    type Case<'a> = (
        Option<&'a ContainerRecreateRequestStatus>,
        &'a ContainerRecreateRequestStatus,
        Option<(bool, &'static str, Vec<&'static str>)>,
    );

    #[test]
    fn crr_outcomes_table() {
        use CrrPhase::*;
        // (before, after, expected (warning, reason, substrings) or none)
        let ok = status(
            Completed,
            &[("app", Succeeded, ""), ("side", Succeeded, "")],
            "",
        );
        let failed = status(
            Completed,
            &[
                ("app", Succeeded, ""),
                ("side", Failed, "Unknown: failed to stop container"),
            ],
            "",
        );
        let deadline = status(
            Completed,
            &[("app", Pending, "")],
            "recreating has exceeded the activeDeadlineSeconds",
        );
        let recreating = status(Recreating, &[("app", Recreating, "")], "");
        let cases: Vec<Case> = vec![
            (
                Some(&recreating),
                &ok,
                Some((
                    false,
                    REASON_CRR_SUCCEEDED,
                    vec!["restart-1 recreated app, side"],
                )),
            ),
            (
                None,
                &ok,
                Some((false, REASON_CRR_SUCCEEDED, vec!["recreated app, side"])),
            ),
            (
                Some(&recreating),
                &failed,
                Some((
                    true,
                    REASON_CRR_FAILED,
                    vec![
                        "recreated app",
                        " side",
                        "(side: Unknown: failed to stop container)",
                    ],
                )),
            ),
            (
                Some(&recreating),
                &deadline,
                Some((
                    true,
                    REASON_CRR_FAILED,
                    vec!["without recreating", "activeDeadlineSeconds"],
                )),
            ),
            // not completed yet, or completed before: no event
            (None, &recreating, None),
            (Some(&ok), &ok, None),
        ];
        for (before, after, want) in cases {
            let got = crr_outcome_note(&crr(), &pod(), before, after);
            match (got, want) {
                (None, None) => {}
                (Some(n), Some((warning, reason, parts))) => {
                    assert_eq!(n.warning, warning, "{n:?}");
                    assert_eq!(n.reason, reason, "{n:?}");
                    for p in parts {
                        assert!(n.message.contains(p), "{p:?} not in {:?}", n.message);
                    }
                    assert_eq!(n.regarding.name.as_deref(), Some("web-0"));
                    let related = n.related.unwrap_or_default();
                    assert_eq!(related.kind.as_deref(), Some("ContainerRecreateRequest"));
                    assert_eq!(related.name.as_deref(), Some("restart-1"));
                }
                (got, want) => panic!("{after:?} after {before:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_failed_pull_is_a_warning_on_the_nodeimage() {
        let n = pull_failed_note("node-1", "nginx:1.25", "not found");
        assert_eq!(n.regarding.kind.as_deref(), Some("NodeImage"));
        assert_eq!(
            n.regarding.api_version.as_deref(),
            Some("apps.kruise.io/v1beta1")
        );
        assert_eq!(n.regarding.name.as_deref(), Some("node-1"));
        assert!(n.warning);
        assert_eq!(n.reason, REASON_PULL_FAILED);
        assert_eq!(n.message, "Failed to pull image nginx:1.25: not found");
    }

    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        let s = "é".repeat(600);
        let t = truncate(&s, MAX_NOTE);
        assert!(t.len() <= MAX_NOTE);
        assert!(s.starts_with(&t));
        assert_eq!(truncate("short", MAX_NOTE), "short");
    }
}
