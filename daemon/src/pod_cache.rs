//! The node's pod cache, shared by the in-place executor and the CRR handler, and whether
//! it has listed its pods once.
//!
//! kube-runtime's `Store::wait_until_ready` wakes a single waiter (its delayed value keeps
//! one waker): with two tasks awaiting the same store, one of them can sleep for good. So
//! one task per store awaits it and tells every clone of the [`PodCache`] through a watch
//! channel, which wakes them all.

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use tokio::sync::watch;

/// A pod store and whether it has been filled (listed once). Clones share both.
#[derive(Clone, Debug)]
pub struct PodCache {
    store: Store<Pod>,
    filled: watch::Receiver<bool>,
}

impl PodCache {
    /// Make ONE per store and clone it: each call starts a task awaiting the store's
    /// readiness, and two such tasks on one store are the single-waiter trap again.
    pub fn new(store: Store<Pod>) -> Self {
        let (tx, filled) = watch::channel(false);
        let ready = store.clone();
        tokio::spawn(async move {
            // A writer dropped before the first list drops `tx` unsent: waiters see it.
            if ready.wait_until_ready().await.is_ok() {
                tx.send_replace(true);
            }
        });
        Self { store, filled }
    }

    pub fn store(&self) -> &Store<Pod> {
        &self.store
    }

    /// Waits until the cache has listed its pods once: `false` if its writer went away
    /// before that (then it never fills, and there is nothing to wait for).
    pub async fn wait_filled(&self) -> bool {
        self.filled.clone().wait_for(|f| *f).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::{reflector, watcher::Event};
    use std::time::Duration;

    /// Every waiter wakes when the cache fills, however many there are and whichever
    /// started first (two tasks on the bare store: one of them sleeps for good).
    #[tokio::test]
    async fn every_waiter_wakes_when_the_cache_fills() {
        let (store, mut writer) = reflector::store();
        let cache = PodCache::new(store);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let c = cache.clone();
                tokio::spawn(async move { c.wait_filled().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        for w in waiters {
            let filled = tokio::time::timeout(Duration::from_secs(5), w).await;
            assert!(matches!(filled, Ok(Ok(true))), "{filled:?}");
        }
        // and one that comes after
        assert!(cache.wait_filled().await);
    }

    /// A cache whose writer is gone before its first list never fills: waiters are told.
    #[tokio::test]
    async fn a_writer_gone_before_the_first_list_ends_the_wait() {
        let (store, writer) = reflector::store::<Pod>();
        let cache = PodCache::new(store);
        drop(writer);
        let filled = tokio::time::timeout(Duration::from_secs(5), cache.wait_filled()).await;
        assert_eq!(filled.ok(), Some(false));
    }
}
