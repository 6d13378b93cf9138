//! The pods a plan's writes name, found by name in one pass over the snapshot.
//!
//! A plan's writes name a few hundred pods of up to 100,000, and every plan looks them
//! up: a map of every pod (built per plan) costs more than the writes it serves, so only
//! the names wanted go into a set, and every pod's name is hashed once against it, with
//! FNV-1a (several times cheaper than the default SipHash on short keys; the keys are pod
//! names of the snapshot, no input an attacker chooses to collide).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::watch::CachedPod;

/// The pods of `pods` named in `names`, by name (a name of no pod is left out).
pub fn pods_named<'p, 'n>(
    pods: &'p [Arc<CachedPod>],
    names: impl IntoIterator<Item = &'n str>,
) -> HashMap<&'p str, &'p CachedPod, BuildHasherDefault<Fnv1a>> {
    let wanted: HashSet<&str, BuildHasherDefault<Fnv1a>> = names.into_iter().collect();
    if wanted.is_empty() {
        return HashMap::default();
    }
    pods.iter()
        .filter_map(|p| {
            let name = p.metadata.name.as_deref()?;
            wanted.contains(name).then_some((name, &**p))
        })
        .collect()
}

/// The FNV-1a hash (64 bits), for [`pods_named`].
#[derive(Clone, Copy, Debug)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::plan::fixtures::pod;

    #[test]
    fn finds_the_named_pods_and_only_those() {
        let pods: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|n| pod(n, "r").cached())
            .collect();
        let found = pods_named(&pods, ["c", "a", "gone", "a"]);
        let mut names: Vec<_> = found.keys().copied().collect();
        names.sort_unstable();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(found["c"].metadata.name.as_deref(), Some("c"));
        assert!(pods_named(&pods, []).is_empty());
    }

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        let hash = |s: &[u8]| {
            let mut h = Fnv1a::default();
            h.write(s);
            h.finish()
        };
        assert_eq!(hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
