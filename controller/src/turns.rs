//! Workers that take reconciles in turn: at most `n` at once, in the order they became
//! due, like the FIFO work queue of client-go that the reference's controllers run on.
//!
//! kube-runtime's own limit (`controller::Config::concurrency`) is not fair. When every
//! worker is busy, the reconciles that fall due wait in a hash set, and a freed worker
//! takes whichever comes first in that set's order, which stays the same. An object whose
//! reconciles keep falling due (a CloneSet whose pods change all the time while it scales
//! or rolls out) is taken again each time, ahead of others that have waited longer. On
//! the bed, 10 CloneSets of 10,000 pods with 3 workers: 4 of them were not reconciled
//! once in their first 10 minutes (no status, no pod) while the others created theirs.
//!
//! So the controllers run with kube-runtime's limit off (one reconcile per object at a
//! time still holds: that is the runner's, not the limit's), and each reconcile first
//! takes a turn here: a fair semaphore, whose permits go out in the order they were
//! asked for. A reconcile that falls due again while it runs waits for its next turn
//! behind the ones already waiting.
//!
//! On shutdown kube-runtime lets every reconcile it has started finish, and here that
//! includes the ones waiting for a turn: [`Turns::close`] ends those at once, without
//! running them, so that stopping takes as long as the reconciles already running.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Semaphore, SemaphorePermit};

/// At most `n` reconciles at once, served first come, first served.
#[derive(Debug)]
pub struct Turns {
    workers: Semaphore,
}

/// A worker held by one reconcile; dropping it frees the worker for the next in line.
#[derive(Debug)]
pub struct Turn<'a> {
    _permit: SemaphorePermit<'a>,
}

impl Turns {
    /// `workers` reconciles at once (at least one).
    pub fn new(workers: u16) -> Self {
        Self {
            workers: Semaphore::new(usize::from(workers.max(1))),
        }
    }

    /// Waits for a worker; reconciles that asked earlier get theirs first. None once the
    /// turns are closed: the controller is stopping, and the reconcile must not start.
    pub async fn take(&self) -> Option<Turn<'_>> {
        let permit = self.workers.acquire().await.ok()?;
        Some(Turn { _permit: permit })
    }

    /// No more turns: the reconciles waiting for one, and any asking later, get None.
    /// Those holding one keep it until they end.
    pub fn close(&self) {
        self.workers.close();
    }

    /// `stop`, then [`Turns::close`]: what a controller's `graceful_shutdown_on` is given.
    pub async fn close_after(self: Arc<Self>, stop: impl Future<Output = ()>) {
        stop.await;
        self.close();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Mutex;
    use std::time::Duration;

    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use kube::api::ObjectMeta;
    use kube::runtime::controller::{Action, Config, Controller};
    use kube::runtime::reflector;
    use kube::runtime::watcher;

    use super::*;

    struct World {
        turns: Turns,
        /// Names in the order their reconciles took a worker.
        log: Mutex<Vec<String>>,
    }

    /// Objects `hot-*` fall due again as soon as their reconcile ends (as a CloneSet
    /// whose pods keep changing); `cold-*` only once.
    async fn reconcile(cm: Arc<ConfigMap>, world: Arc<World>) -> Result<Action, std::io::Error> {
        let _turn = world.turns.take().await.unwrap();
        let name = cm.name_any();
        world.log.lock().unwrap().push(name.clone());
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(if name.starts_with("hot") {
            Action::requeue(Duration::ZERO)
        } else {
            Action::await_change()
        })
    }

    fn object(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("default".to_owned()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    /// The names reconciled, in order, once `reconciles` reconciles have taken a worker.
    async fn run_until(workers: u16, hot: usize, cold: usize, reconciles: usize) -> Vec<String> {
        let names: Vec<String> = (0..hot)
            .map(|i| format!("hot-{i}"))
            .chain((0..cold).map(|i| format!("cold-{i}")))
            .collect();
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&watcher::Event::Init);
        for name in &names {
            writer.apply_watcher_event(&watcher::Event::InitApply(object(name)));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let triggers =
            futures::stream::iter(names.iter().map(|n| Ok(object(n))).collect::<Vec<_>>())
                .chain(futures::stream::pending());
        let world = Arc::new(World {
            turns: Turns::new(workers),
            log: Mutex::new(Vec::new()),
        });
        let controller = Controller::for_stream(triggers, reader)
            // the limit is the turns', as in the controllers (see the module docs)
            .with_config(Config::default().concurrency(0))
            .run(reconcile, |_, _, _| Action::await_change(), world.clone())
            .for_each(|_| async {});
        let enough = async {
            while world.log.lock().unwrap().len() < reconciles {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::select! {
            () = controller => panic!("the controller ended"),
            () = enough => {}
        }
        world.log.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn every_due_object_is_reconciled_before_a_busy_one_comes_round_again() {
        // 3 workers, 12 objects that are always due again, 4 due once: each of the 16
        // takes its first turn among the first 16 (as a FIFO work queue would), and the
        // busy ones then take theirs in rotation. (With kube-runtime's own limit instead,
        // this failed in 10 runs of 10: a `cold-*` not among the first 16, or a busy
        // object with 0 or 11 of the 64 turns.)
        let (hot, cold, reconciles) = (12, 4, 64);
        let log = run_until(3, hot, cold, reconciles).await;
        let first: Vec<&String> = log.iter().take(hot + cold).collect();
        for i in 0..cold {
            let name = format!("cold-{i}");
            assert!(
                first.contains(&&name),
                "{name} was not among the first {} reconciles: {log:?}",
                hot + cold
            );
        }
        let share = (reconciles - cold) / hot;
        for i in 0..hot {
            let name = format!("hot-{i}");
            let turns = log.iter().filter(|n| **n == name).count();
            assert!(
                (share - 1..=share + 1).contains(&turns),
                "{name} took {turns} turns, where each busy object's share is {share}: {log:?}"
            );
        }
        assert_eq!(log.iter().filter(|n| n.starts_with("cold")).count(), cold);
    }

    #[tokio::test]
    async fn no_more_reconciles_run_at_once_than_there_are_workers() {
        let turns = Arc::new(Turns::new(2));
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (turns, running, most) = (turns.clone(), running.clone(), most.clone());
                tokio::spawn(async move {
                    let _turn = turns.take().await.unwrap();
                    let now = running.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    most.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 2);
        // and zero workers means one
        let one = Turns::new(0);
        let _held = one.take().await.unwrap();
        assert!(one.workers.try_acquire().is_err());
    }

    #[tokio::test]
    async fn closing_ends_the_waiting_reconciles_and_lets_the_running_one_finish() {
        let turns = Arc::new(Turns::new(1));
        let running = turns.take().await.unwrap();
        let waiting: Vec<_> = (0..3)
            .map(|_| {
                let turns = turns.clone();
                tokio::spawn(async move { turns.take().await.is_some() })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(5)).await;
        turns.close();
        for task in waiting {
            assert!(
                !task.await.unwrap(),
                "a waiting reconcile got a turn after close"
            );
        }
        assert!(turns.take().await.is_none(), "a turn was given after close");
        // The running reconcile's turn is still its own until it ends.
        drop(running);
    }
}
