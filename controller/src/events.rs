//! Kubernetes events about CloneSets, published in the background.
//!
//! Every create, delete, in-place update, recreate and failure gets an event on the
//! CloneSet (the pod is the event's `related` object, so events about different pods are
//! not folded into one series). Publishing never blocks or fails a reconcile: events go
//! through a bounded queue to one task; when the queue is full the event is logged and
//! dropped.
//!
//! Like client-go's event recorder (whose `EventSourceObjectSpamFilter` the reference's
//! events go through), events of one object, type and reason are rate limited: a burst
//! of 25, then one per 5 minutes. A 1,000-pod rollout so writes a few dozen events, not
//! one per pod, which had cost the API server a write per pod on top of the update.
//! The limit is applied when an event is queued, so the queue holds only events that
//! will be published: creating 10,000 pods had filled it to its bound with events the
//! limit then dropped (~6 MiB at the peak with kube's recorder cache).

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::HashMapStateStore;

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

impl Note {
    /// The event the plan decided (`e`), regarding and related to the objects given.
    pub fn of(
        e: crate::plan::sending::StepEvent,
        regarding: ObjectReference,
        related: Option<ObjectReference>,
    ) -> Self {
        Self {
            regarding,
            related,
            warning: e.warning,
            reason: e.reason,
            action: e.action.to_owned(),
            message: e.message,
        }
    }
}

/// A handle that queues events.
#[derive(Clone, Debug)]
pub struct EventSink {
    tx: Option<mpsc::Sender<Note>>,
    spam: Arc<Mutex<SpamFilter>>,
}

impl EventSink {
    /// A sink that drops everything (in tests).
    pub fn disabled() -> Self {
        Self {
            tx: None,
            spam: Arc::default(),
        }
    }

    /// Starts the publishing task. When the server did not serve `events.k8s.io/v1` at
    /// start (`served` false: an API server in its first seconds after a restart answers
    /// discovery without some groups), the task asks again until it does; events queued
    /// meanwhile wait for it, up to the queue's bound.
    pub fn start(client: Client, instance: Option<String>, capacity: usize, served: bool) -> Self {
        let (tx, mut rx) = mpsc::channel::<Note>(capacity);
        let asking = client.clone();
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: REPORTER.into(),
                instance,
            },
        );
        tokio::spawn(async move {
            if !served {
                crate::discovery::wait_until_served(
                    &asking,
                    "events.k8s.io/v1",
                    "events",
                    "event publishing",
                )
                .await;
            }
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
        Self {
            tx: Some(tx),
            spam: Arc::default(),
        }
    }

    /// Queues an event unless rate limited; never waits.
    pub fn send(&self, note: Note) {
        let Some(tx) = &self.tx else { return };
        // a panic while holding the lock cannot leave the buckets inconsistent
        let allowed = self
            .spam
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .allow(&note);
        if !allowed {
            tracing::debug!(reason = %note.reason, message = %note.message, "event rate limited");
            return;
        }
        if let Err(err) = tx.try_send(note) {
            tracing::warn!(%err, "event queue full, event dropped");
        }
    }
}

/// Burst and refill interval of [`SpamFilter`] (client-go's defaults).
const SPAM_BURST: NonZeroU32 = match NonZeroU32::new(25) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};
const SPAM_REFILL: Duration = Duration::from_secs(300);

/// A token bucket per (regarding object, type, reason): governor's GCRA limiter, keyed.
#[derive(Debug)]
struct SpamFilter<C: Clock = DefaultClock> {
    buckets: governor::RateLimiter<
        String,
        HashMapStateStore<String>,
        C,
        governor::middleware::NoOpMiddleware<C::Instant>,
    >,
}

impl Default for SpamFilter {
    fn default() -> Self {
        Self::with_clock(DefaultClock::default())
    }
}

impl<C: Clock> SpamFilter<C> {
    fn with_clock(clock: C) -> Self {
        let quota = governor::Quota::with_period(SPAM_REFILL)
            .unwrap_or_else(|| governor::Quota::per_hour(NonZeroU32::MIN))
            .allow_burst(SPAM_BURST);
        Self {
            buckets: governor::RateLimiter::hashmap_with_clock(quota, clock),
        }
    }

    fn key(note: &Note) -> String {
        let r = &note.regarding;
        format!(
            "{}/{}/{}/{}/{}/{}",
            r.kind.as_deref().unwrap_or_default(),
            r.namespace.as_deref().unwrap_or_default(),
            r.name.as_deref().unwrap_or_default(),
            r.uid.as_deref().unwrap_or_default(),
            if note.warning { "Warning" } else { "Normal" },
            note.reason
        )
    }

    /// Whether `note` may be published now (takes a token if so).
    fn allow(&mut self, note: &Note) -> bool {
        if self.buckets.len() > 10_000 {
            // Forget buckets that have refilled completely: they behave as new ones.
            self.buckets.retain_recent();
        }
        self.buckets.check_key(&Self::key(note)).is_ok()
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

    fn note(name: &str, reason: &str) -> Note {
        Note {
            regarding: ObjectReference {
                kind: Some("CloneSet".into()),
                namespace: Some("ns".into()),
                name: Some(name.into()),
                ..ObjectReference::default()
            },
            related: None,
            warning: false,
            reason: reason.into(),
            action: "A".into(),
            message: "m".into(),
        }
    }

    #[test]
    fn events_of_one_object_and_reason_are_rate_limited() {
        let clock = governor::clock::FakeRelativeClock::default();
        let mut f = SpamFilter::with_clock(clock.clone());
        let a = note("a", "SuccessfulUpdatePodInPlace");
        let allowed = (0..100).filter(|_| f.allow(&a)).count();
        assert_eq!(allowed, 25);
        // Another reason or another CloneSet has its own budget.
        assert!(f.allow(&note("a", "SuccessfulCreate")));
        assert!(f.allow(&note("b", "SuccessfulUpdatePodInPlace")));
        // One more after 5 minutes, not two.
        clock.advance(SPAM_REFILL);
        assert!(f.allow(&a));
        assert!(!f.allow(&a));
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
