//! The daemon side of the simulated nodes (with `--pull-delay` only): one watch on the
//! NodeImages, the ones of simulated nodes are answered from the shared image stores
//! ([`super::images::nodeimage_status`]): each tag of the spec is pulled (the node's
//! containers share the pulls) and its status written `Pulling`, then `Succeeded` for the
//! spec tag's `version`, as the node daemon reports it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use inplace_proto::nodeimage::{NodeImage, NodeImageStatus};
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{Semaphore, mpsc, watch};

use super::images::{ImageStores, nodeimage_status, status_patch};
use super::model::Ms;
use super::pods::{FIELD_MANAGER, now_ms};
use super::podview::node_index;
use super::stats::Stats;

/// Which NodeImages are ours.
#[derive(Debug, Clone)]
pub struct NodeImagesConfig {
    pub node_prefix: String,
    pub node_count: usize,
    /// Status patches in flight at most.
    pub max_inflight: usize,
}

struct Engine {
    cfg: NodeImagesConfig,
    client: Client,
    stores: Arc<Mutex<ImageStores>>,
    stats: Arc<Stats>,
    /// The latest NodeImage seen per simulated node.
    seen: HashMap<String, NodeImage>,
    /// The status last sent per node (not re-sent while equal).
    sent: HashMap<String, NodeImageStatus>,
    heap: BinaryHeap<Reverse<(Ms, String)>>,
    sem: Arc<Semaphore>,
    done_tx: mpsc::UnboundedSender<(String, bool)>,
}

/// Answers the NodeImages of the simulated nodes until `shutdown` turns true.
pub async fn run(
    cfg: NodeImagesConfig,
    client: Client,
    stores: Arc<Mutex<ImageStores>>,
    stats: Arc<Stats>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let mut engine = Engine {
        sem: Arc::new(Semaphore::new(cfg.max_inflight.max(1))),
        cfg,
        client: client.clone(),
        stores,
        stats,
        seen: HashMap::new(),
        sent: HashMap::new(),
        heap: BinaryHeap::new(),
        done_tx,
    };
    let api: Api<NodeImage> = Api::all(client);
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    loop {
        let now = now_ms();
        let sleep_for = super::pods::until_next_due(&engine.heap, now);
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(watcher::Event::Apply(ni) | watcher::Event::InitApply(ni))) => engine.apply(ni),
                Some(Ok(watcher::Event::Delete(ni))) => {
                    engine.seen.remove(&ni.name_any());
                    engine.sent.remove(&ni.name_any());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::warn!("NodeImage watch: {e}"),
                None => break,
            },
            Some((node, ok)) = done_rx.recv() => {
                if !ok {
                    // written again on the retry
                    engine.sent.remove(&node);
                    engine.heap.push(Reverse((now_ms() + 1_000, node)));
                }
            }
            () = tokio::time::sleep(sleep_for) => engine.run_due(),
            _ = shutdown.changed() => break,
        }
    }
}

impl Engine {
    fn apply(&mut self, ni: NodeImage) {
        let name = ni.name_any();
        if node_index(&self.cfg.node_prefix, self.cfg.node_count, &name).is_none() {
            return;
        }
        self.seen.insert(name.clone(), ni);
        self.answer(&name);
    }

    fn run_due(&mut self) {
        let now = now_ms();
        while let Some(Reverse((due, _))) = self.heap.peek() {
            if *due > now {
                break;
            }
            if let Some(Reverse((_, node))) = self.heap.pop() {
                self.answer(&node);
            }
        }
    }

    /// Starts the pulls the node's spec asks for and writes the status when it changed.
    fn answer(&mut self, node: &str) {
        let Some(ni) = self.seen.get(node) else {
            return;
        };
        let now = now_ms();
        let (status, next) = match self.stores.lock() {
            Ok(mut stores) => nodeimage_status(&mut stores, node, &ni.spec, now),
            Err(_) => return,
        };
        if let Some(at) = next {
            self.heap.push(Reverse((at, node.to_owned())));
        }
        let stored = ni.status.as_ref();
        if stored == Some(&status) || self.sent.get(node) == Some(&status) {
            return;
        }
        let patch = match status_patch(stored, &status) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("NodeImage {node} status: {e}");
                return;
            }
        };
        self.sent.insert(node.to_owned(), status);
        let api: Api<NodeImage> = Api::all(self.client.clone());
        let (sem, tx, stats) = (self.sem.clone(), self.done_tx.clone(), self.stats.clone());
        let node = node.to_owned();
        tokio::spawn(async move {
            let Ok(_permit) = sem.acquire_owned().await else {
                return;
            };
            let pp = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            };
            let result = api.patch_status(&node, &pp, &Patch::Merge(&patch)).await;
            match &result {
                Ok(_) => Stats::inc(&stats.status_writes),
                Err(e) => {
                    Stats::inc(&stats.write_errors);
                    tracing::debug!("NodeImage {node} status: {e}");
                }
            }
            let _ = tx.send((node, result.is_ok()));
        });
    }
}
