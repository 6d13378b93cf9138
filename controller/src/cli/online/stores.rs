//! `get --watch`: one watch per kind feeds a store of that kind (as a reflector does), and
//! every view is rendered from the stores; no event causes a LIST.
//!
//! [`Stores::apply`] folds a watch event into its store (a re-list after a broken watch
//! arrives as `Init`, `InitApply`..., `InitDone` and replaces the store at `InitDone`).
//! [`follow`] is the loop: it takes the merged events of the watches, and after each one,
//! once every store it needs has been filled, renders and prints the view if it changed.
//! It holds no client: by construction, the only requests are the watchers' own (one LIST
//! and one WATCH per kind, again only when a watch breaks).

use std::collections::BTreeMap;
use std::io::Write;

use futures::{Stream, StreamExt};
use inplace_proto::{CloneSet, NodeImage};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::runtime::watcher;

use super::{DataFormat, OnlineError};

/// The kinds watched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    CloneSet,
    Pod,
    Revision,
    /// Optional: cluster-scoped, often not listable; a view is drawn without it when its
    /// watch fails before it filled.
    NodeImage,
}

/// One event of one of the watches.
#[derive(Debug)]
pub enum Change {
    CloneSet(Box<watcher::Event<CloneSet>>),
    Pod(Box<watcher::Event<Pod>>),
    Revision(Box<watcher::Event<ControllerRevision>>),
    NodeImage(Box<watcher::Event<NodeImage>>),
    /// A watch failed (the watcher retries it with a back-off).
    Failed(Kind, watcher::Error),
}

/// The objects of one kind, by namespace and name.
#[derive(Debug)]
pub struct Store<K> {
    objects: BTreeMap<(String, String), K>,
    /// Filled by `InitApply` between `Init` and `InitDone`.
    building: Option<BTreeMap<(String, String), K>>,
    /// An `InitDone` was seen: the store holds a complete list.
    filled: bool,
}

impl<K> Default for Store<K> {
    fn default() -> Self {
        Self {
            objects: BTreeMap::new(),
            building: None,
            filled: false,
        }
    }
}

fn key<K: Resource>(object: &K) -> (String, String) {
    let meta = object.meta();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl<K: Resource + Clone> Store<K> {
    /// Folds one watch event in.
    pub fn apply(&mut self, event: watcher::Event<K>) {
        match event {
            watcher::Event::Apply(o) => {
                self.objects.insert(key(&o), o);
            }
            watcher::Event::Delete(o) => {
                self.objects.remove(&key(&o));
            }
            watcher::Event::Init => self.building = Some(BTreeMap::new()),
            watcher::Event::InitApply(o) => {
                self.building
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key(&o), o);
            }
            watcher::Event::InitDone => {
                self.objects = self.building.take().unwrap_or_default();
                self.filled = true;
            }
        }
    }

    /// The objects, by namespace then name.
    pub fn objects(&self) -> Vec<K> {
        self.objects.values().cloned().collect()
    }

    /// The complete list was received at least once.
    pub fn filled(&self) -> bool {
        self.filled
    }
}

/// The stores of a view and which of them it needs.
#[derive(Debug, Default)]
pub struct Stores {
    pub clonesets: Store<CloneSet>,
    pub pods: Store<Pod>,
    pub revisions: Store<ControllerRevision>,
    pub node_images: Store<NodeImage>,
    /// The kinds whose watch runs.
    watched: Vec<Kind>,
    /// Optional kinds whose watch failed before they filled.
    given_up: Vec<Kind>,
}

impl Stores {
    /// Stores for a view fed by watches of `watched`.
    pub fn new(watched: &[Kind]) -> Self {
        Self {
            watched: watched.to_vec(),
            ..Self::default()
        }
    }

    fn filled(&self, kind: Kind) -> bool {
        match kind {
            Kind::CloneSet => self.clonesets.filled(),
            Kind::Pod => self.pods.filled(),
            Kind::Revision => self.revisions.filled(),
            Kind::NodeImage => self.node_images.filled(),
        }
    }

    /// Folds one change in. A failed watch of a needed kind before it filled is the
    /// error of the command (a view without it would be wrong); later failures are
    /// retried by the watcher.
    pub fn apply(&mut self, change: Change) -> Result<(), OnlineError> {
        match change {
            Change::CloneSet(e) => self.clonesets.apply(*e),
            Change::Pod(e) => self.pods.apply(*e),
            Change::Revision(e) => self.revisions.apply(*e),
            Change::NodeImage(e) => self.node_images.apply(*e),
            Change::Failed(kind, error) => {
                if !self.filled(kind) {
                    if kind == Kind::NodeImage {
                        if !self.given_up.contains(&kind) {
                            self.given_up.push(kind);
                        }
                    } else {
                        return Err(OnlineError::Watch(error));
                    }
                }
            }
        }
        Ok(())
    }

    /// Every watched store has its complete list (or, optional, was given up).
    pub fn ready(&self) -> bool {
        self.watched
            .iter()
            .all(|k| self.filled(*k) || self.given_up.contains(k))
    }
}

/// How the frames of `--watch` are printed.
#[derive(Clone, Copy, Debug)]
pub struct Framing {
    /// `-o`: data, never cleared, YAML documents separated by `---`.
    pub output: Option<DataFormat>,
    /// Stdout is a terminal: each table redraw clears the screen.
    pub terminal: bool,
}

/// Folds `changes` into `stores` and prints `render(stores)` after every change that
/// alters it, once the stores are ready; ends with [`OnlineError::WatchEnded`] when the
/// changes end, or with the first error of `render` or of a needed watch.
pub async fn follow<S, R>(
    changes: S,
    mut stores: Stores,
    mut render: R,
    framing: Framing,
    what: &str,
    out: &mut dyn Write,
) -> Result<(), OnlineError>
where
    S: Stream<Item = Change> + Unpin,
    R: FnMut(&Stores) -> Result<String, OnlineError>,
{
    let mut changes = changes;
    let mut last: Option<String> = None;
    while let Some(change) = changes.next().await {
        stores.apply(change)?;
        if !stores.ready() {
            continue;
        }
        let text = render(&stores)?;
        if last.as_ref() == Some(&text) {
            continue;
        }
        let first = last.is_none();
        let frame = match framing.output {
            None => crate::cli::view::frame(&text, framing.terminal, first),
            Some(DataFormat::Yaml) if !first => format!("---\n{text}"),
            Some(_) => text.clone(),
        };
        out.write_all(frame.as_bytes())?;
        out.flush()?;
        last = Some(text);
    }
    Err(OnlineError::WatchEnded(what.to_owned()))
}

/// The watch of `api` (with `config`) as [`Change`]s, retried with kube's default
/// back-off.
pub fn watch<K>(
    api: kube::Api<K>,
    config: watcher::Config,
    kind: Kind,
    wrap: fn(Box<watcher::Event<K>>) -> Change,
) -> impl Stream<Item = Change> + Send + 'static
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    use kube::runtime::WatchStreamExt;
    watcher(api, config)
        .default_backoff()
        .map(move |r| match r {
            Ok(e) => wrap(Box::new(e)),
            Err(e) => Change::Failed(kind, e),
        })
}

#[cfg(test)]
mod tests;
