//! What is read from the cluster for one CloneSet: the objects `plan NAME` plans from, and
//! the view `get` prints (once, or on every change with `--watch`).

use std::io::Write;

use futures::StreamExt;
use inplace_proto::CloneSet;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, Client};

use super::stores::{self, Change, Framing, Kind, Stores, follow};
use super::{DataFormat, OnlineError, encode, get_cloneset};

/// What `plan NAME` plans from: the CloneSet, and every pod, PVC and ControllerRevision of
/// its namespace (selected by [`crate::cli::live_inputs`]).
pub async fn plan_objects(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<
    (
        CloneSet,
        Vec<Pod>,
        Vec<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
        Vec<ControllerRevision>,
    ),
    OnlineError,
> {
    let cs = get_cloneset(&Api::namespaced(client.clone(), ns), name).await?;
    let lp = ListParams::default();
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
        .items;
    let pvcs =
        Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(client.clone(), ns)
            .list(&lp)
            .await?
            .items;
    let revisions = Api::<ControllerRevision>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?
        .items;
    Ok((cs, pods, pvcs, revisions))
}

/// The ImagePullJobs of namespace `ns` (`plan NAME --pre-download-image`); None when the
/// server does not serve them (the controller does not pre-download there).
pub async fn image_pull_jobs(
    client: &Client,
    ns: &str,
) -> Result<Option<Vec<inplace_proto::imagepulljob::ImagePullJob>>, OnlineError> {
    let api = Api::<inplace_proto::imagepulljob::ImagePullJob>::namespaced(client.clone(), ns);
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(Some(list.items)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The view of `name` ([`crate::cli::view::build`]) from the objects now, with why its
/// rollout waits. NodeImages are cluster-scoped: when they cannot be listed (no
/// permission), pulls show as unknown.
pub async fn read_view(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<crate::cli::view::View, OnlineError> {
    let (cs, pods, _, revisions) = plan_objects(client, ns, name).await?;
    let node_images = Api::<inplace_proto::NodeImage>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    Ok(view_of(&cs, &pods, &revisions, &node_images))
}

fn view_of(
    cs: &CloneSet,
    pods: &[Pod],
    revisions: &[ControllerRevision],
    node_images: &[inplace_proto::NodeImage],
) -> crate::cli::view::View {
    let mut view = crate::cli::view::build(cs, pods, revisions, node_images);
    view.waiting = crate::cli::waiting::reasons(cs, pods, Timestamp::now());
    view
}

/// What `get` shows: one CloneSet, or a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The CloneSet of this name in the namespace, per revision and per pod.
    Named(String),
    /// Every CloneSet of the namespace (or of every namespace), those matching the label
    /// selector if one is given.
    List {
        all_namespaces: bool,
        selector: Option<String>,
    },
}

/// The scope of `get`'s arguments; kubectl's errors for a name with `-A` or `-l`.
pub fn scope(
    name: Option<&str>,
    all_namespaces: bool,
    selector: Option<&str>,
) -> Result<Scope, OnlineError> {
    match name {
        Some(_) if all_namespaces => Err(OnlineError::BadInput(
            "a resource cannot be retrieved by name across all namespaces".into(),
        )),
        Some(_) if selector.is_some() => Err(OnlineError::BadInput(
            "name cannot be provided when a selector is specified".into(),
        )),
        Some(n) => Ok(Scope::Named(n.to_owned())),
        None => Ok(Scope::List {
            all_namespaces,
            selector: selector.map(str::to_owned),
        }),
    }
}

fn api_in<K>(client: &Client, ns: &str, all_namespaces: bool) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    if all_namespaces {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), ns)
    }
}

/// `get`: the view once, or with `watch` after every change, printed only when it changed.
/// A watch holds one watch per kind (the CloneSet(s), the pods, and for one CloneSet its
/// namespace's ControllerRevisions and the NodeImages) and renders from their stores
/// ([`super::stores`]); nothing is listed again per event. `terminal`: stdout is a
/// terminal (each redraw clears the screen); data output (`-o`) is never cleared, YAML
/// documents are separated by `---`.
pub async fn get(
    client: &Client,
    ns: &str,
    scope: &Scope,
    watch: bool,
    output: Option<DataFormat>,
    terminal: bool,
    out: &mut dyn Write,
) -> Result<(), OnlineError> {
    let encode_view = move |view: &crate::cli::view::View| match output {
        Some(f) => encode(view, f),
        None => Ok(crate::cli::view::table(view)),
    };
    let encode_rows = move |rows: &[crate::cli::listing::Row], all: bool| match output {
        Some(f) => encode(&rows, f),
        None => Ok(crate::cli::listing::table(rows, all, ns)),
    };
    if !watch {
        let text = match scope {
            Scope::Named(name) => encode_view(&read_view(client, ns, name).await?)?,
            Scope::List {
                all_namespaces,
                selector,
            } => {
                let mut lp = ListParams::default();
                if let Some(s) = selector {
                    lp = lp.labels(s);
                }
                let sets = api_in::<CloneSet>(client, ns, *all_namespaces)
                    .list(&lp)
                    .await?
                    .items;
                let pods = api_in::<Pod>(client, ns, *all_namespaces)
                    .list(&ListParams::default())
                    .await?
                    .items;
                encode_rows(
                    &crate::cli::listing::rows(&sets, &pods, Timestamp::now()),
                    *all_namespaces,
                )?
            }
        };
        out.write_all(text.as_bytes())?;
        return Ok(());
    }
    let framing = Framing { output, terminal };
    let plain = watcher::Config::default;
    match scope {
        Scope::Named(name) => {
            let changes = futures::stream::select_all([
                stores::watch(
                    Api::<CloneSet>::namespaced(client.clone(), ns),
                    plain().fields(&format!("metadata.name={name}")),
                    Kind::CloneSet,
                    Change::CloneSet,
                )
                .boxed(),
                stores::watch(
                    Api::<Pod>::namespaced(client.clone(), ns),
                    plain(),
                    Kind::Pod,
                    Change::Pod,
                )
                .boxed(),
                stores::watch(
                    Api::<ControllerRevision>::namespaced(client.clone(), ns),
                    plain(),
                    Kind::Revision,
                    Change::Revision,
                )
                .boxed(),
                stores::watch(
                    Api::<inplace_proto::NodeImage>::all(client.clone()),
                    plain(),
                    Kind::NodeImage,
                    Change::NodeImage,
                )
                .boxed(),
            ]);
            let stores = Stores::new(&[Kind::CloneSet, Kind::Pod, Kind::Revision, Kind::NodeImage]);
            let render = |s: &Stores| {
                let cs = named(s, ns, name)?;
                encode_view(&view_of(
                    &cs,
                    &s.pods.objects(),
                    &s.revisions.objects(),
                    &s.node_images.objects(),
                ))
            };
            follow(
                changes,
                stores,
                render,
                framing,
                &format!("cloneset {name}"),
                out,
            )
            .await
        }
        Scope::List {
            all_namespaces,
            selector,
        } => {
            let mut sets = plain();
            if let Some(s) = selector {
                sets = sets.labels(s);
            }
            let changes = futures::stream::select_all([
                stores::watch(
                    api_in::<CloneSet>(client, ns, *all_namespaces),
                    sets,
                    Kind::CloneSet,
                    Change::CloneSet,
                )
                .boxed(),
                stores::watch(
                    api_in::<Pod>(client, ns, *all_namespaces),
                    plain(),
                    Kind::Pod,
                    Change::Pod,
                )
                .boxed(),
            ]);
            let stores = Stores::new(&[Kind::CloneSet, Kind::Pod]);
            let render = |s: &Stores| {
                encode_rows(
                    &crate::cli::listing::rows(
                        &s.clonesets.objects(),
                        &s.pods.objects(),
                        Timestamp::now(),
                    ),
                    *all_namespaces,
                )
            };
            follow(changes, stores, render, framing, "clonesets", out).await
        }
    }
}

/// The CloneSet `name` of namespace `ns` in the stores, or [`OnlineError::NotFound`].
pub fn named(stores: &Stores, ns: &str, name: &str) -> Result<CloneSet, OnlineError> {
    stores
        .clonesets
        .objects()
        .into_iter()
        .find(|c| {
            c.metadata.name.as_deref() == Some(name)
                && c.metadata.namespace.as_deref().unwrap_or(ns) == ns
        })
        .ok_or_else(|| OnlineError::NotFound {
            kind: "cloneset",
            name: name.to_owned(),
            namespace: ns.to_owned(),
        })
}
