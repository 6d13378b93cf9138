//! Expectations: what this controller wrote and has not yet seen in its caches.
//!
//! After acting on a CloneSet, the controller records every create, delete and update it
//! made. Until the watches deliver all of them, the CloneSet is not planned again: a plan
//! made from a cache that does not show our own writes would act twice (create a second
//! replacement, update a pod twice). Each expectation expires after a timeout so that a
//! lost watch event can never stall a CloneSet for good; expiries are counted.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One write waiting to be observed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expectation {
    /// A pod we created: observed once the cache has a pod of that name.
    PodCreated { name: String },
    /// A pod we deleted: observed once it is gone or terminating (or replaced by another UID).
    PodDeleted { name: String, uid: String },
    /// A pod we patched: observed once the cache holds our resourceVersion or a later one.
    PodUpdated {
        name: String,
        uid: String,
        resource_version: String,
    },
    /// A PVC we created.
    PvcCreated { name: String },
    /// A PVC we deleted.
    PvcDeleted { name: String, uid: String },
    /// A ControllerRevision we created.
    RevisionCreated { name: String },
    /// A ControllerRevision we patched.
    RevisionUpdated {
        name: String,
        resource_version: String,
    },
    /// A ControllerRevision we deleted.
    RevisionDeleted { name: String },
}

impl Expectation {
    /// A short name for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::PodCreated { .. } => "pod_create",
            Self::PodDeleted { .. } => "pod_delete",
            Self::PodUpdated { .. } => "pod_update",
            Self::PvcCreated { .. } => "pvc_create",
            Self::PvcDeleted { .. } => "pvc_delete",
            Self::RevisionCreated { .. } => "revision_create",
            Self::RevisionUpdated { .. } => "revision_update",
            Self::RevisionDeleted { .. } => "revision_delete",
        }
    }
}

/// What the cache currently shows of an object: `None` when absent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub uid: String,
    pub resource_version: String,
    pub terminating: bool,
}

/// Read access to the caches, for one namespace.
pub trait CacheView {
    fn pod(&self, name: &str) -> Option<Seen>;
    fn pvc(&self, name: &str) -> Option<Seen>;
    fn revision(&self, name: &str) -> Option<Seen>;
}

/// Whether `cached` is the same as or newer than `ours`. Resource versions are opaque, but
/// every API server in use encodes the etcd revision as an integer; when both parse they
/// are compared, otherwise only equality counts.
pub fn resource_version_reached(cached: &str, ours: &str) -> bool {
    match (cached.parse::<u64>(), ours.parse::<u64>()) {
        (Ok(c), Ok(o)) => c >= o,
        _ => cached == ours,
    }
}

impl Expectation {
    /// Whether the cache shows this write.
    pub fn observed(&self, view: &dyn CacheView) -> bool {
        match self {
            Self::PodCreated { name } => view.pod(name).is_some(),
            Self::PodDeleted { name, uid } => view
                .pod(name)
                .is_none_or(|p| p.terminating || &p.uid != uid),
            Self::PodUpdated {
                name,
                uid,
                resource_version,
            } => view.pod(name).is_none_or(|p| {
                &p.uid != uid || resource_version_reached(&p.resource_version, resource_version)
            }),
            Self::PvcCreated { name } => view.pvc(name).is_some(),
            Self::PvcDeleted { name, uid } => view
                .pvc(name)
                .is_none_or(|p| p.terminating || &p.uid != uid),
            Self::RevisionCreated { name } => view.revision(name).is_some(),
            Self::RevisionUpdated {
                name,
                resource_version,
            } => view
                .revision(name)
                .is_none_or(|r| resource_version_reached(&r.resource_version, resource_version)),
            Self::RevisionDeleted { name } => view.revision(name).is_none(),
        }
    }
}

#[derive(Debug)]
struct Pending {
    expectation: Expectation,
    deadline: Instant,
}

/// The outcome of checking a CloneSet's expectations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Check {
    /// Writes still not observed.
    pub unobserved: usize,
    /// Expectations dropped now because their deadline passed, by kind.
    pub expired: Vec<&'static str>,
    /// Time until the earliest remaining deadline.
    pub next_deadline: Option<Duration>,
}

impl Check {
    pub fn satisfied(&self) -> bool {
        self.unobserved == 0
    }
}

/// Expectations of every CloneSet, keyed by `namespace/name`.
#[derive(Debug)]
pub struct Expectations {
    timeout: Duration,
    pending: Mutex<HashMap<String, Vec<Pending>>>,
}

impl Expectations {
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            pending: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Pending>>> {
        // A panic while holding the lock cannot leave the map inconsistent (every
        // operation is a single insert/retain), so a poisoned lock is still usable.
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a write to observe for the CloneSet `key`.
    pub fn expect(&self, key: &str, expectation: Expectation) {
        self.expect_at(key, expectation, Instant::now());
    }

    /// [`Self::expect`] at a given instant (tests).
    pub fn expect_at(&self, key: &str, expectation: Expectation, now: Instant) {
        let deadline = now + self.timeout;
        let mut map = self.lock();
        let list = map.entry(key.to_owned()).or_default();
        list.retain(|p| p.expectation != expectation);
        list.push(Pending {
            expectation,
            deadline,
        });
    }

    /// Drops observed and expired expectations of `key` and tells what remains.
    pub fn check(&self, key: &str, view: &dyn CacheView) -> Check {
        self.check_at(key, view, Instant::now())
    }

    /// [`Self::check`] at a given instant (tests).
    pub fn check_at(&self, key: &str, view: &dyn CacheView, now: Instant) -> Check {
        let mut map = self.lock();
        let Some(list) = map.get_mut(key) else {
            return Check::default();
        };
        let mut check = Check::default();
        list.retain(|p| {
            if p.expectation.observed(view) {
                return false;
            }
            if p.deadline <= now {
                check.expired.push(p.expectation.kind());
                return false;
            }
            true
        });
        check.unobserved = list.len();
        check.next_deadline = list
            .iter()
            .map(|p| p.deadline.saturating_duration_since(now))
            .min();
        if list.is_empty() {
            map.remove(key);
        }
        check
    }

    /// Forgets everything about `key` (the CloneSet was deleted).
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Number of CloneSets with pending expectations.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[derive(Default)]
    struct Fake {
        pods: HashMap<String, Seen>,
        revisions: HashMap<String, Seen>,
    }

    fn seen(uid: &str, rv: &str, terminating: bool) -> Seen {
        Seen {
            uid: uid.into(),
            resource_version: rv.into(),
            terminating,
        }
    }

    impl CacheView for Fake {
        fn pod(&self, name: &str) -> Option<Seen> {
            self.pods.get(name).cloned()
        }
        fn pvc(&self, _: &str) -> Option<Seen> {
            None
        }
        fn revision(&self, name: &str) -> Option<Seen> {
            self.revisions.get(name).cloned()
        }
    }

    #[test]
    fn create_is_observed_when_the_pod_appears() {
        let e = Expectations::new(Duration::from_secs(300));
        let mut view = Fake::default();
        e.expect(
            "ns/cs",
            Expectation::PodCreated {
                name: "cs-abcde".into(),
            },
        );
        assert_eq!(e.check("ns/cs", &view).unobserved, 1);
        view.pods.insert("cs-abcde".into(), seen("u1", "10", false));
        assert!(e.check("ns/cs", &view).satisfied());
        assert!(e.is_empty());
    }

    #[test]
    fn delete_is_observed_when_terminating_gone_or_replaced() {
        let e = Expectations::new(Duration::from_secs(300));
        let mut view = Fake::default();
        view.pods.insert("p".into(), seen("u1", "10", false));
        let exp = Expectation::PodDeleted {
            name: "p".into(),
            uid: "u1".into(),
        };
        e.expect("k", exp.clone());
        assert!(!e.check("k", &view).satisfied());
        view.pods.insert("p".into(), seen("u1", "11", true));
        assert!(e.check("k", &view).satisfied());
        e.expect("k", exp.clone());
        view.pods.insert("p".into(), seen("u2", "12", false));
        assert!(e.check("k", &view).satisfied());
        e.expect("k", exp);
        view.pods.clear();
        assert!(e.check("k", &view).satisfied());
    }

    #[test]
    fn update_waits_for_our_resource_version() {
        let e = Expectations::new(Duration::from_secs(300));
        let mut view = Fake::default();
        view.pods.insert("p".into(), seen("u1", "10", false));
        e.expect(
            "k",
            Expectation::PodUpdated {
                name: "p".into(),
                uid: "u1".into(),
                resource_version: "12".into(),
            },
        );
        assert!(!e.check("k", &view).satisfied());
        view.pods.insert("p".into(), seen("u1", "13", false));
        assert!(e.check("k", &view).satisfied());
        assert!(resource_version_reached("abc", "abc"));
        assert!(!resource_version_reached("abc", "abd"));
    }

    #[test]
    fn expectations_expire_and_report_it() {
        let e = Expectations::new(Duration::from_secs(300));
        let view = Fake::default();
        let t0 = Instant::now();
        e.expect_at("k", Expectation::RevisionCreated { name: "r".into() }, t0);
        let c = e.check_at("k", &view, t0 + Duration::from_secs(10));
        assert_eq!(c.unobserved, 1);
        assert_eq!(c.next_deadline, Some(Duration::from_secs(290)));
        let c = e.check_at("k", &view, t0 + Duration::from_secs(301));
        assert!(c.satisfied());
        assert_eq!(c.expired, vec!["revision_create"]);
    }
}
