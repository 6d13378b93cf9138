//! What our own last status write of an object left, for the next write while the watch
//! cache still shows the object from before it.
//!
//! A status write is conditional on the resourceVersion it was decided from. Taken from
//! the cache, that version is often the one from before our own previous write (the watch
//! event of that write has not arrived yet when a pod event starts the next reconcile), and
//! the API server then refuses the write with 409 for a change that was our own. So the
//! writer remembers, per object UID, the status and resourceVersion its last write left,
//! and uses them as the base while the cache is not newer (the daemon does the same for
//! its NodeImage). When someone else changed the object meanwhile, the remembered version
//! is refused with 409 just the same, and the status is decided again.

use std::collections::HashMap;
use std::sync::Mutex;

/// What one write left on the object.
#[derive(Clone, Debug, PartialEq)]
struct Left<S> {
    /// The cache's resourceVersion when the write was made (the cache lags behind our own
    /// writes while it still shows this one).
    cached: Option<String>,
    /// The status the write left.
    status: S,
    /// The resourceVersion the write left.
    resource_version: String,
}

/// Per object UID: what our last status write left.
#[derive(Debug)]
pub struct LastWrites<S> {
    by_uid: Mutex<HashMap<String, Left<S>>>,
}

impl<S> Default for LastWrites<S> {
    fn default() -> Self {
        Self {
            by_uid: Mutex::new(HashMap::new()),
        }
    }
}

/// Whether resourceVersion `left` (ours) is newer than `cached` (the watch cache's).
/// resourceVersions are opaque to clients, with two facts to go by: the cache showing the
/// very version it showed when we wrote means it has not seen our write; and where both
/// are integers (etcd's revisions, as every API server we know hands out), a larger one is
/// later. Anything else counts as the cache being newer (it is used as it is).
pub fn newer_than_cache(
    left: &str,
    cached_when_written: Option<&str>,
    cached: Option<&str>,
) -> bool {
    if cached.is_some() && cached == cached_when_written {
        return true;
    }
    match (left.parse::<u64>(), cached.map(str::parse::<u64>)) {
        (Ok(left), Some(Ok(cached))) => left > cached,
        _ => false,
    }
}

impl<S: Clone> LastWrites<S> {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Left<S>>> {
        self.by_uid
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The status and resourceVersion to decide and write over for object `uid`, whose
    /// cached resourceVersion is `cached`: what our last write left when that is newer
    /// than the cache, else `None` (the cache's; what we remembered is dropped then).
    pub fn base(&self, uid: &str, cached: Option<&str>) -> Option<(S, String)> {
        let mut map = self.map();
        let left = map.get(uid)?;
        if newer_than_cache(&left.resource_version, left.cached.as_deref(), cached) {
            return Some((left.status.clone(), left.resource_version.clone()));
        }
        map.remove(uid);
        None
    }

    /// Records what a write to object `uid` left (`status`, `resource_version`), made while
    /// the cache showed `cached`.
    pub fn record(&self, uid: &str, cached: Option<&str>, status: S, resource_version: String) {
        self.map().insert(
            uid.to_owned(),
            Left {
                cached: cached.map(str::to_owned),
                status,
                resource_version,
            },
        );
    }

    /// Forgets object `uid` (deleted).
    pub fn forget(&self, uid: &str) {
        self.map().remove(uid);
    }

    /// How many objects are remembered.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_newer_only_when_the_cache_has_not_caught_up() {
        // (left by our write, cache when we wrote, cache now, newer)
        let cases = [
            // the cache still shows what it showed when we wrote
            ("12", Some("10"), Some("10"), true),
            // the cache saw a write before ours, but not ours
            ("12", Some("10"), Some("11"), true),
            // the cache saw our write, or later ones
            ("12", Some("10"), Some("12"), false),
            ("12", Some("10"), Some("15"), false),
            // opaque versions: only "the same as when we wrote" says the cache lags
            ("b", Some("a"), Some("a"), true),
            ("b", Some("a"), Some("c"), false),
            // nothing cached: the cache is used as it is
            ("12", None, None, false),
            ("12", Some("10"), None, false),
        ];
        for (left, when, now, want) in cases {
            assert_eq!(
                newer_than_cache(left, when, now),
                want,
                "{left} {when:?} {now:?}"
            );
        }
    }

    #[test]
    fn the_base_is_our_last_write_until_the_cache_catches_up() {
        let writes: LastWrites<&str> = LastWrites::default();
        assert_eq!(writes.base("uid-a", Some("10")), None);
        // first write, over the cache's 10, left 11
        writes.record("uid-a", Some("10"), "status 1", "11".into());
        assert_eq!(
            writes.base("uid-a", Some("10")),
            Some(("status 1", "11".into()))
        );
        // another object is not affected
        assert_eq!(writes.base("uid-b", Some("10")), None);
        // a second write over 11 while the cache still shows 10, left 12
        writes.record("uid-a", Some("10"), "status 2", "12".into());
        assert_eq!(
            writes.base("uid-a", Some("10")),
            Some(("status 2", "12".into()))
        );
        // the cache shows our first write only: our second is still newer
        assert_eq!(
            writes.base("uid-a", Some("11")),
            Some(("status 2", "12".into()))
        );
        // the cache caught up: its version is used and ours dropped
        assert_eq!(writes.base("uid-a", Some("12")), None);
        assert!(writes.is_empty());
        writes.record("uid-a", Some("12"), "status 3", "13".into());
        writes.forget("uid-a");
        assert_eq!(writes.base("uid-a", Some("12")), None);
    }
}
