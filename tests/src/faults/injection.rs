//! Which fault a request gets: a pure decision from the request's kind and a seeded
//! generator.
//!
//! Only faults a real API server or network can produce are injected:
//! - `409 Conflict` only on updates and patches (`PUT`, `PATCH`): a create that got 409
//!   would claim that an object exists that does not;
//! - `429 Too Many Requests` with `Retry-After: 1` and `500 Internal Server Error` on any
//!   write and on some reads, before the request reaches the API server;
//! - `500` after the write was applied (the answer was lost: a timeout after commit);
//! - the connection cut before the request is forwarded, or after a write was applied
//!   and before its answer;
//! - a watch stream ended after a few seconds (as when the API server or a load balancer
//!   closes it);
//! - a watch answered `410 Gone` at once (an `ERROR` event with reason `Expired`, as the
//!   API server answers a resourceVersion older than its window), so the client must list
//!   again;
//! - a list answered from an earlier answer to the same request (a stale list, as a
//!   lagging watch cache or a stale apiserver replica gives: older than writes already
//!   acknowledged);
//! - latency before forwarding;
//! - and, not decided per request but by the run: an outage, every connection cut and
//!   every request refused for 30-60 s ([`super::proxy::FaultProxy::outage`]).

use std::fmt;

use super::rng::Rng;

/// One kind of injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// `409 Conflict`, not forwarded.
    Conflict,
    /// `429` with `Retry-After: 1`, not forwarded.
    TooManyRequests,
    /// `500`, not forwarded.
    InternalError,
    /// Forwarded and applied, then answered `500`.
    InternalErrorAfterCommit,
    /// The connection cut before forwarding.
    Reset,
    /// Forwarded and applied, then the connection cut before the answer.
    ResetAfterCommit,
    /// A watch answered, then its stream ended after a while.
    WatchDrop,
    /// A watch answered with one `ERROR` event, `410 Expired`, then ended; not forwarded.
    WatchExpired,
    /// A list answered with an earlier answer to the same request; not forwarded.
    StaleList,
    /// Held back before forwarding.
    Latency,
    /// Refused during an outage (the connection cut); not forwarded.
    Outage,
}

impl Fault {
    pub const ALL: [Fault; 11] = [
        Fault::Conflict,
        Fault::TooManyRequests,
        Fault::InternalError,
        Fault::InternalErrorAfterCommit,
        Fault::Reset,
        Fault::ResetAfterCommit,
        Fault::WatchDrop,
        Fault::WatchExpired,
        Fault::StaleList,
        Fault::Latency,
        Fault::Outage,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Conflict => "409",
            Fault::TooManyRequests => "429",
            Fault::InternalError => "500",
            Fault::InternalErrorAfterCommit => "500-after-commit",
            Fault::Reset => "reset",
            Fault::ResetAfterCommit => "reset-after-commit",
            Fault::WatchDrop => "watch-drop",
            Fault::WatchExpired => "410-expired",
            Fault::StaleList => "stale-list",
            Fault::Latency => "latency",
            Fault::Outage => "outage",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a request is, for the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// `POST` (a create; also an eviction or a subresource create).
    Create,
    /// `PUT` or `PATCH`.
    Update,
    Delete,
    /// `GET` of one object or a list.
    Read,
    /// `GET` with `watch=true`.
    Watch,
}

impl RequestKind {
    /// From the method and the query string.
    pub fn of(method: &str, query: Option<&str>) -> RequestKind {
        match method {
            "POST" => RequestKind::Create,
            "PUT" | "PATCH" => RequestKind::Update,
            "DELETE" => RequestKind::Delete,
            _ if is_watch(query) => RequestKind::Watch,
            _ => RequestKind::Read,
        }
    }

    pub fn is_write(self) -> bool {
        matches!(
            self,
            RequestKind::Create | RequestKind::Update | RequestKind::Delete
        )
    }
}

fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1" || kv == "watch")
    })
}

/// Rates in per mille of requests of each kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rates {
    pub write_conflict: u64,
    pub write_throttle: u64,
    pub write_error: u64,
    pub write_error_after_commit: u64,
    pub write_reset: u64,
    pub write_reset_after_commit: u64,
    pub read_throttle: u64,
    pub read_error: u64,
    pub read_reset: u64,
    pub watch_drop: u64,
    /// The longest a dropped watch lives, ms (it lives 500 ms to this).
    pub watch_drop_max_ms: u64,
    pub watch_expired: u64,
    /// Of list reads (a read answered by an earlier answer exists only for a list the
    /// proxy has answered before).
    pub stale_list: u64,
    pub latency: u64,
    /// The longest latency, ms (10 ms to this).
    pub latency_max_ms: u64,
}

impl Default for Rates {
    /// About one write in three fails one way or another; half the watches are dropped.
    fn default() -> Self {
        Rates {
            write_conflict: 80,
            write_throttle: 60,
            write_error: 60,
            write_error_after_commit: 40,
            write_reset: 40,
            write_reset_after_commit: 30,
            read_throttle: 40,
            read_error: 40,
            read_reset: 30,
            watch_drop: 400,
            watch_drop_max_ms: 8000,
            watch_expired: 100,
            stale_list: 100,
            latency: 250,
            latency_max_ms: 400,
        }
    }
}

/// What the proxy does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Held back this long first (0: not at all).
    pub delay_ms: u64,
    /// The fault, if any besides the delay.
    pub fault: Option<Fault>,
    /// For [`Fault::WatchDrop`]: the stream ends this long after the answer.
    pub drop_after_ms: u64,
}

impl Decision {
    pub const PASS: Decision = Decision {
        delay_ms: 0,
        fault: None,
        drop_after_ms: 0,
    };
}

/// The decision for a request of `kind`.
pub fn decide(rates: &Rates, kind: RequestKind, rng: &mut Rng) -> Decision {
    let delay_ms = if rng.chance(rates.latency) {
        rng.range(10, rates.latency_max_ms.max(10))
    } else {
        0
    };
    let writes = [
        (rates.write_throttle, Fault::TooManyRequests),
        (rates.write_error, Fault::InternalError),
        (
            rates.write_error_after_commit,
            Fault::InternalErrorAfterCommit,
        ),
        (rates.write_reset, Fault::Reset),
        (rates.write_reset_after_commit, Fault::ResetAfterCommit),
    ];
    let reads = [
        (rates.read_throttle, Fault::TooManyRequests),
        (rates.read_error, Fault::InternalError),
        (rates.read_reset, Fault::Reset),
    ];
    let table: Vec<(u64, Fault)> = match kind {
        RequestKind::Update => std::iter::once((rates.write_conflict, Fault::Conflict))
            .chain(writes)
            .collect(),
        RequestKind::Create | RequestKind::Delete => writes.to_vec(),
        RequestKind::Read => reads
            .into_iter()
            .chain(std::iter::once((rates.stale_list, Fault::StaleList)))
            .collect(),
        RequestKind::Watch => reads
            .into_iter()
            .chain([
                (rates.watch_drop, Fault::WatchDrop),
                (rates.watch_expired, Fault::WatchExpired),
            ])
            .collect(),
    };
    let mut roll = rng.below(1000);
    let mut fault = None;
    for (rate, f) in table {
        if roll < rate {
            fault = Some(f);
            break;
        }
        roll -= rate;
    }
    let drop_after_ms = if fault == Some(Fault::WatchDrop) {
        rng.range(500, rates.watch_drop_max_ms.max(500))
    } else {
        0
    };
    Decision {
        delay_ms,
        fault,
        drop_after_ms,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn tally(kind: RequestKind, n: usize) -> BTreeMap<Option<Fault>, usize> {
        let mut rng = Rng::new(9);
        let mut out = BTreeMap::new();
        for _ in 0..n {
            *out.entry(decide(&Rates::default(), kind, &mut rng).fault)
                .or_insert(0) += 1;
        }
        out
    }

    #[test]
    fn request_kinds_from_method_and_query() {
        assert_eq!(RequestKind::of("POST", None), RequestKind::Create);
        assert_eq!(
            RequestKind::of("PATCH", Some("fieldManager=x")),
            RequestKind::Update
        );
        assert_eq!(RequestKind::of("PUT", None), RequestKind::Update);
        assert_eq!(RequestKind::of("DELETE", None), RequestKind::Delete);
        assert_eq!(
            RequestKind::of("GET", Some("labelSelector=a")),
            RequestKind::Read
        );
        assert_eq!(
            RequestKind::of(
                "GET",
                Some("resourceVersion=5&watch=true&timeoutSeconds=290")
            ),
            RequestKind::Watch
        );
        assert_eq!(
            RequestKind::of("GET", Some("watchx=true")),
            RequestKind::Read
        );
        assert!(RequestKind::Delete.is_write() && !RequestKind::Watch.is_write());
    }

    #[test]
    fn conflicts_only_on_updates_and_drops_only_on_watches() {
        for kind in [RequestKind::Create, RequestKind::Delete, RequestKind::Read] {
            let t = tally(kind, 5000);
            assert!(!t.contains_key(&Some(Fault::Conflict)), "{kind:?}: {t:?}");
            assert!(!t.contains_key(&Some(Fault::WatchDrop)), "{kind:?}: {t:?}");
            assert!(
                !t.contains_key(&Some(Fault::WatchExpired)),
                "{kind:?}: {t:?}"
            );
            assert!(!t.contains_key(&Some(Fault::Outage)), "{kind:?}: {t:?}");
        }
        for kind in [RequestKind::Create, RequestKind::Update, RequestKind::Watch] {
            let t = tally(kind, 5000);
            assert!(!t.contains_key(&Some(Fault::StaleList)), "{kind:?}: {t:?}");
        }
        let stale = tally(RequestKind::Read, 5000)
            .get(&Some(Fault::StaleList))
            .copied()
            .unwrap_or(0);
        assert!((400..600).contains(&stale), "{stale}");
        let reads = tally(RequestKind::Read, 5000);
        assert!(!reads.contains_key(&Some(Fault::InternalErrorAfterCommit)));
        assert!(!reads.contains_key(&Some(Fault::ResetAfterCommit)));
        let updates = tally(RequestKind::Update, 5000);
        for f in Fault::ALL.into_iter().filter(|f| {
            !matches!(
                f,
                Fault::WatchDrop
                    | Fault::WatchExpired
                    | Fault::StaleList
                    | Fault::Latency
                    | Fault::Outage
            )
        }) {
            assert!(
                updates.get(&Some(f)).is_some_and(|n| *n > 50),
                "{f}: {updates:?}"
            );
        }
        let watches = tally(RequestKind::Watch, 5000);
        let drops = watches.get(&Some(Fault::WatchDrop)).copied().unwrap_or(0);
        assert!((1750..2250).contains(&drops), "{watches:?}");
        let expired = watches
            .get(&Some(Fault::WatchExpired))
            .copied()
            .unwrap_or(0);
        assert!((400..600).contains(&expired), "{watches:?}");
    }

    #[test]
    fn rates_of_zero_pass_everything_and_delays_stay_in_bounds() {
        let none = Rates {
            write_conflict: 0,
            write_throttle: 0,
            write_error: 0,
            write_error_after_commit: 0,
            write_reset: 0,
            write_reset_after_commit: 0,
            read_throttle: 0,
            read_error: 0,
            read_reset: 0,
            watch_drop: 0,
            watch_expired: 0,
            stale_list: 0,
            latency: 0,
            ..Rates::default()
        };
        let mut rng = Rng::new(3);
        for kind in [
            RequestKind::Create,
            RequestKind::Update,
            RequestKind::Read,
            RequestKind::Watch,
        ] {
            for _ in 0..500 {
                assert_eq!(decide(&none, kind, &mut rng), Decision::PASS);
            }
        }
        let mut rng = Rng::new(4);
        for _ in 0..2000 {
            let d = decide(&Rates::default(), RequestKind::Watch, &mut rng);
            assert!(d.delay_ms == 0 || (10..=400).contains(&d.delay_ms));
            if d.fault == Some(Fault::WatchDrop) {
                assert!((500..=8000).contains(&d.drop_after_ms));
            } else {
                assert_eq!(d.drop_after_ms, 0);
            }
        }
    }

    #[test]
    fn the_same_seed_decides_the_same() {
        let run = |seed| {
            let mut rng = Rng::new(seed);
            (0..100)
                .map(|_| decide(&Rates::default(), RequestKind::Update, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(11), run(11));
        assert_ne!(run(11), run(12));
    }
}
