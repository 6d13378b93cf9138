//! The controller runtime's error type.

use std::time::Duration;

use crate::plan::action_write::ActionWriteError;
use crate::plan::inplace_write::InPlaceWriteError;
use crate::plan::{PlanError, WriteError};

/// Why a reconcile of one CloneSet did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed.
    #[error("{action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// The planner refused the snapshot.
    #[error("planner: {0}")]
    Plan(#[from] PlanError),
    /// A watch has not listed its objects yet.
    #[error("cache of {0} not synced yet")]
    CacheNotReady(&'static str),
    /// An object could not be built or encoded.
    #[error("{what}: {source}")]
    Encode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// An object the plan names is not in the cache (it went away meanwhile).
    #[error("{0} not found in the cache")]
    NotCached(String),
    /// The pod can no longer be updated in place: its revision or the CloneSet's
    /// template changed since the plan chose it.
    #[error("pod {pod} can no longer be updated in place ({reason})")]
    InPlaceRefused { pod: String, reason: String },
    /// An annotation the action works from is absent from the pod.
    #[error("{what} of pod {pod} is missing")]
    AnnotationMissing { pod: String, what: &'static str },
    /// An annotation the action works from is on the pod but cannot be read (written by
    /// another hand, or by a version we cannot read): waiting does not mend it.
    #[error("{what} of pod {pod} cannot be read: {source}")]
    BadAnnotation {
        pod: String,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// Some of the plan's actions failed; the others were carried out.
    #[error("{failed} of {total} actions failed, first: {first}")]
    Actions {
        failed: usize,
        total: usize,
        first: Box<Error>,
    },
}

/// The planner's reasons an in-place write cannot be planned, as the applier reports them.
impl From<InPlaceWriteError> for Error {
    fn from(e: InPlaceWriteError) -> Self {
        match e {
            InPlaceWriteError::Refused { pod, reason } => Self::InPlaceRefused { pod, reason },
            InPlaceWriteError::AnnotationMissing { pod, what } => {
                Self::AnnotationMissing { pod, what }
            }
            InPlaceWriteError::BadAnnotation { pod, what, source } => {
                Self::BadAnnotation { pod, what, source }
            }
            InPlaceWriteError::Encode { what, source } => Self::Encode {
                what: what.to_owned(),
                source,
            },
        }
    }
}

/// A step's write the planner could not make, as the applier reports it (the same
/// variants, retry classes and metric labels as the errors it was made from).
impl From<crate::plan::outcome::Aggregate<Error>> for Error {
    fn from(a: crate::plan::outcome::Aggregate<Error>) -> Self {
        let (failed, total, first) = (a.failed, a.total, Box::new(a.first));
        Error::Actions {
            failed,
            total,
            first,
        }
    }
}

impl From<WriteError> for Error {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::NotCached(what) => Self::NotCached(what),
            WriteError::InPlaceRefused { pod, reason } => Self::InPlaceRefused { pod, reason },
            WriteError::AnnotationMissing { pod, what } => Self::AnnotationMissing { pod, what },
            WriteError::BadAnnotation { pod, what, message } => Self::BadAnnotation {
                pod,
                what,
                source: <serde_json::Error as serde::de::Error>::custom(message),
            },
            WriteError::Encode { what, message } => Self::Encode {
                what: what.to_owned(),
                source: <serde_json::Error as serde::ser::Error>::custom(message),
            },
        }
    }
}

/// An action's write that cannot be planned: what it needs is not in the cache.
impl From<ActionWriteError> for Error {
    fn from(e: ActionWriteError) -> Self {
        match e {
            ActionWriteError::NotCached(what) => Self::NotCached(what),
        }
    }
}

impl Error {
    /// Wraps a client error with what we were doing.
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            action: action.into(),
            source,
        }
    }

    /// HTTP status of the API error, if this is one.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Self::Kube {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            Self::Actions { first, .. } => first.status_code(),
            _ => None,
        }
    }

    /// Whether the API server answered 409: a failed precondition (the object changed since
    /// it was read) or an object that already exists.
    pub fn is_conflict(&self) -> bool {
        self.api_failure() == Some(ApiFailure::Conflict)
    }

    /// What kind of API failure this is, if it is one.
    pub fn api_failure(&self) -> Option<ApiFailure> {
        match self {
            Self::Kube { .. } => Some(match self.status_code() {
                Some(409) => ApiFailure::Conflict,
                Some(404) => ApiFailure::NotFound,
                Some(403) => ApiFailure::Forbidden,
                Some(422) => ApiFailure::Invalid,
                Some(429) => ApiFailure::Throttled,
                Some(c) if c >= 500 => ApiFailure::Server,
                Some(_) => ApiFailure::Other,
                None => ApiFailure::Transport,
            }),
            Self::Actions { first, .. } => first.api_failure(),
            _ => None,
        }
    }

    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube { .. } => match self.api_failure() {
                Some(ApiFailure::Conflict) => "conflict",
                Some(ApiFailure::NotFound) => "not_found",
                Some(ApiFailure::Forbidden) => "forbidden",
                Some(ApiFailure::Invalid) => "invalid",
                Some(ApiFailure::Throttled) => "throttled",
                Some(ApiFailure::Server) => "server",
                Some(ApiFailure::Other) => "api",
                Some(ApiFailure::Transport) | None => "transport",
            },
            Self::Plan(_) => "plan",
            Self::CacheNotReady(_) => "cache",
            Self::Encode { .. } => "encode",
            Self::NotCached(_) => "missing",
            Self::InPlaceRefused { .. } => "in_place_refused",
            Self::AnnotationMissing { .. } => "annotation_missing",
            Self::BadAnnotation { .. } => "bad_annotation",
            Self::Actions { first, .. } => first.metric_label(),
        }
    }

    /// How soon a retry makes sense, by the kind of failure.
    pub fn retry_class(&self) -> RetryClass {
        match self {
            Self::Kube { source, .. } => match self.api_failure() {
                // A failed precondition (the object changed since it was read): re-read
                // and decide again at once.
                Some(ApiFailure::Conflict) if is_conflict(source) => RetryClass::Stale,
                Some(ApiFailure::Conflict | ApiFailure::NotFound) => RetryClass::Soon,
                _ => RetryClass::Later,
            },
            // The cache catches up within moments; a pod that changed under the plan is
            // planned again from the newer cache.
            Self::CacheNotReady(_)
            | Self::NotCached(_)
            | Self::InPlaceRefused { .. }
            | Self::AnnotationMissing { .. } => RetryClass::Soon,
            // What others wrote unreadably stays so until they write it again.
            Self::Plan(_) | Self::Encode { .. } | Self::BadAnnotation { .. } => RetryClass::Later,
            Self::Actions { first, .. } => first.retry_class(),
        }
    }

    /// How soon a retry makes sense, before the per-object backoff is applied.
    pub fn base_retry(&self) -> Duration {
        self.retry_class().base_delay()
    }
}

/// The kind of a failed API call, from its HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiFailure {
    /// 409 (a conflict or an existing object).
    Conflict,
    /// 404.
    NotFound,
    /// 403.
    Forbidden,
    /// 422.
    Invalid,
    /// 429.
    Throttled,
    /// 5xx.
    Server,
    /// Another status.
    Other,
    /// No answer from the server.
    Transport,
}

/// How soon a failed reconcile is tried again (the per-object backoff grows from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryClass {
    /// A write refused by its precondition (409 Conflict: the object changed since the
    /// decision was made from it). Expected whenever another writer is faster; the
    /// reconcile runs again promptly from the newer object, and it is not worth a warning.
    Stale,
    /// The cause passes by itself within moments (an object already there or gone, a
    /// cache lagging behind).
    Soon,
    /// Anything else.
    Later,
}

impl RetryClass {
    /// The first delay of this class.
    pub fn base_delay(self) -> Duration {
        match self {
            Self::Stale => Duration::from_millis(100),
            Self::Soon => Duration::from_millis(500),
            Self::Later => Duration::from_secs(2),
        }
    }
}

impl RetryClass {
    /// Whether a failure of this class is logged quietly (debug) rather than warned about.
    pub fn quiet(self) -> bool {
        self == Self::Stale
    }
}

/// Whether a client error is "already exists" (409 AlreadyExists).
pub fn is_already_exists(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

/// Whether a client error is "not found" (404).
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 404)
}

/// Whether a client error is a failed precondition or conflict (409 other than AlreadyExists).
pub fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409 && s.reason != "AlreadyExists")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str) -> Error {
        Error::kube(
            "write",
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                reason: reason.to_owned(),
                ..kube::core::Status::default()
            })),
        )
    }

    fn transport() -> Error {
        Error::kube("write", kube::Error::LinesCodecMaxLineLengthExceeded)
    }

    fn encode() -> Error {
        let source = serde_json::from_str::<serde_json::Value>("{").err();
        match source {
            Some(source) => Error::Encode {
                what: "pod".into(),
                source,
            },
            None => Error::CacheNotReady("unreachable"),
        }
    }

    fn bad_annotation() -> Error {
        match serde_json::from_str::<serde_json::Value>("{") {
            Err(source) => Error::BadAnnotation {
                pod: "a".into(),
                what: "in-place state",
                source,
            },
            Ok(_) => Error::CacheNotReady("unreachable"),
        }
    }

    #[test]
    fn not_found_refused_and_bad_annotation_are_told_apart() {
        // An object gone from the cache and an annotation not there yet pass by
        // themselves; a refused in-place update is planned again from the newer cache;
        // an unreadable annotation does not mend by waiting.
        let cases = [
            Error::NotCached("pod ns/a".into()),
            Error::InPlaceRefused {
                pod: "a".into(),
                reason: "the image changed".into(),
            },
            Error::AnnotationMissing {
                pod: "a".into(),
                what: "in-place state",
            },
            bad_annotation(),
        ];
        let labels: Vec<&str> = cases.iter().map(Error::metric_label).collect();
        assert_eq!(
            labels,
            [
                "missing",
                "in_place_refused",
                "annotation_missing",
                "bad_annotation"
            ]
        );
        let classes: Vec<RetryClass> = cases.iter().map(Error::retry_class).collect();
        use RetryClass::{Later, Soon};
        assert_eq!(classes, [Soon, Soon, Soon, Later]);
        let bad = bad_annotation();
        assert!(
            bad.to_string()
                .starts_with("in-place state of pod a cannot be read: ")
        );
        assert!(std::error::Error::source(&bad).is_some());
    }

    #[test]
    fn a_conflict_is_any_409_and_nothing_else() {
        assert!(api(409, "Conflict").is_conflict());
        assert!(api(409, "AlreadyExists").is_conflict());
        let many = Error::Actions {
            failed: 2,
            total: 2,
            first: Box::new(api(409, "Conflict")),
        };
        assert!(many.is_conflict());
        for other in [
            api(404, "NotFound"),
            api(500, ""),
            transport(),
            bad_annotation(),
        ] {
            assert!(!other.is_conflict(), "{other}");
        }
    }

    #[test]
    fn each_kind_of_error_has_its_retry_class_and_label() {
        use RetryClass::{Later, Soon, Stale};
        let cases: Vec<(Error, RetryClass, &str)> = vec![
            (api(409, "Conflict"), Stale, "conflict"),
            (api(409, "AlreadyExists"), Soon, "conflict"),
            (api(404, "NotFound"), Soon, "not_found"),
            (api(403, "Forbidden"), Later, "forbidden"),
            (api(422, "Invalid"), Later, "invalid"),
            (api(429, "TooManyRequests"), Later, "throttled"),
            (api(500, "InternalError"), Later, "server"),
            (api(503, "ServiceUnavailable"), Later, "server"),
            (api(400, "BadRequest"), Later, "api"),
            (transport(), Later, "transport"),
            (
                Error::Plan(PlanError::Template("not a pod template".into())),
                Later,
                "plan",
            ),
            (Error::CacheNotReady("pods"), Soon, "cache"),
            (encode(), Later, "encode"),
            (Error::NotCached("pod ns/a".into()), Soon, "missing"),
            (
                Error::InPlaceRefused {
                    pod: "a".into(),
                    reason: "the image changed".into(),
                },
                Soon,
                "in_place_refused",
            ),
            (
                Error::AnnotationMissing {
                    pod: "a".into(),
                    what: "grace annotation",
                },
                Soon,
                "annotation_missing",
            ),
            (bad_annotation(), Later, "bad_annotation"),
        ];
        for (err, class, label) in cases {
            assert_eq!(err.retry_class(), class, "{err}");
            assert_eq!(err.metric_label(), label, "{err}");
            assert_eq!(err.base_retry(), class.base_delay(), "{err}");
        }
        assert_eq!(Soon.base_delay(), Duration::from_millis(500));
        assert_eq!(Later.base_delay(), Duration::from_secs(2));
        assert_eq!(Stale.base_delay(), Duration::from_millis(100));
        // only a refused precondition is quiet
        assert!(Stale.quiet());
        assert!(!Soon.quiet() && !Later.quiet());
    }

    #[test]
    fn several_failed_actions_retry_like_the_first() {
        for (first, class) in [
            (api(409, "Conflict"), RetryClass::Stale),
            (api(500, "InternalError"), RetryClass::Later),
        ] {
            let label = first.metric_label();
            let all = Error::Actions {
                failed: 2,
                total: 3,
                first: Box::new(first),
            };
            assert_eq!(all.retry_class(), class);
            assert_eq!(all.metric_label(), label);
        }
    }

    #[test]
    fn api_failures_are_read_from_the_status_code() {
        assert_eq!(
            api(409, "Conflict").api_failure(),
            Some(ApiFailure::Conflict)
        );
        assert_eq!(api(404, "").api_failure(), Some(ApiFailure::NotFound));
        assert_eq!(transport().api_failure(), Some(ApiFailure::Transport));
        assert_eq!(Error::CacheNotReady("pods").api_failure(), None);
    }

    #[test]
    fn the_planners_error_is_kept_typed() {
        let err = Error::from(PlanError::Template("bad".into()));
        assert!(matches!(&err, Error::Plan(PlanError::Template(m)) if m == "bad"));
        assert_eq!(err.to_string(), "planner: spec.template: bad");
        assert!(std::error::Error::source(&err).is_some());
    }

    /// A request the API server never answered fails after `--api-request-timeout`: the
    /// reconcile sees a failure (requeued by the error policy), not a conflict (which would
    /// be retried at once).
    #[test]
    fn an_unanswered_request_is_a_failure_not_a_conflict() {
        let timed_out = crate::request_timeout::RequestTimedOut {
            method: "PATCH".into(),
            path: "/api/v1/namespaces/ns/pods/p/status".into(),
            after: std::time::Duration::from_secs(30),
        };
        let err = Error::kube(
            "set a condition on pod p",
            kube::Error::Service(Box::new(timed_out)),
        );
        assert!(!err.is_conflict());
        let Error::Kube {
            source: kube::Error::Service(cause),
            ..
        } = &err
        else {
            panic!("not a failed request: {err:?}");
        };
        assert!(
            cause
                .downcast_ref::<crate::request_timeout::RequestTimedOut>()
                .is_some()
        );
    }
}
