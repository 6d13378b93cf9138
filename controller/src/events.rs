//! Kubernetes events about CloneSets, published in the background.
//!
//! Every create, delete, in-place update, recreate and failure gets an event on the
//! CloneSet (the pod is the event's `related` object, so events about different pods are
//! not folded into one series). Publishing never blocks or fails a reconcile: events go
//! through a bounded queue to one task; when the queue is full the event is logged and
//! dropped.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

/// Name of the reporting controller on every event.
pub const REPORTER: &str = "inplace-controller";

/// One event to publish.
#[derive(Clone, Debug)]
pub struct Note {
    pub regarding: ObjectReference,
    pub related: Option<ObjectReference>,
    pub warning: bool,
    pub reason: String,
    pub action: String,
    pub message: String,
}

/// A handle that queues events.
#[derive(Clone, Debug)]
pub struct EventSink {
    tx: Option<mpsc::Sender<Note>>,
}

impl EventSink {
    /// A sink that drops everything (when the server has no events.k8s.io/v1, or in tests).
    pub fn disabled() -> Self {
        Self { tx: None }
    }

    /// Starts the publishing task.
    pub fn start(client: Client, instance: Option<String>, capacity: usize) -> Self {
        let (tx, mut rx) = mpsc::channel::<Note>(capacity);
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: REPORTER.into(),
                instance,
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
                    reason: note.reason.clone(),
                    note: Some(truncate(&note.message, 1000)),
                    action: note.action.clone(),
                    secondary: note.related.clone(),
                };
                if let Err(err) = recorder.publish(&event, &note.regarding).await {
                    tracing::warn!(%err, reason = %note.reason, "could not publish event");
                }
            }
        });
        Self { tx: Some(tx) }
    }

    /// Queues an event; never waits.
    pub fn send(&self, note: Note) {
        let Some(tx) = &self.tx else { return };
        if let Err(err) = tx.try_send(note) {
            tracing::warn!(%err, "event queue full, event dropped");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("ééé", 3), "é");
    }

    #[test]
    fn disabled_sink_drops_silently() {
        EventSink::disabled().send(Note {
            regarding: ObjectReference::default(),
            related: None,
            warning: false,
            reason: "R".into(),
            action: "A".into(),
            message: "m".into(),
        });
    }
}
