//! The controller runtime's error type.

use std::time::Duration;

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
    Plan(String),
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
    Missing(String),
    /// Some of the plan's actions failed; the others were carried out.
    #[error("{failed} of {total} actions failed, first: {first}")]
    Actions {
        failed: usize,
        total: usize,
        first: Box<Error>,
    },
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

    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube { .. } => match self.status_code() {
                Some(409) => "conflict",
                Some(404) => "not_found",
                Some(403) => "forbidden",
                Some(422) => "invalid",
                Some(429) => "throttled",
                Some(c) if c >= 500 => "server",
                Some(_) => "api",
                None => "transport",
            },
            Self::Plan(_) => "plan",
            Self::CacheNotReady(_) => "cache",
            Self::Encode { .. } => "encode",
            Self::Missing(_) => "missing",
            Self::Actions { first, .. } => first.metric_label(),
        }
    }

    /// How soon a retry makes sense, before the per-object backoff is applied.
    pub fn base_retry(&self) -> Duration {
        match self.metric_label() {
            "conflict" | "not_found" | "missing" | "cache" => Duration::from_millis(500),
            _ => Duration::from_secs(2),
        }
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
